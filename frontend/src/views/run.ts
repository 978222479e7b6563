// One run: its header (metadata, worker / span / step selectors, backend, attention's share,
// notes and errors), the sub-view tabs, and the drill-down panel under them.

import { h, replace, select } from "../dom";
import { fmtBytes, fmtCount, fmtShare, fmtUs, fmtWhen } from "../format";
import { spanOptions } from "../spans";
import { TABS, type Actions, type State, type Tab } from "../state";
import { noisyMark, spreadTitle } from "../spread";
import type { RunEntry, Spread, WorkerSummary } from "../types";
import { CORE_ONLY_TITLE, DASH, MEMORY_NOT_RECORDED, errorBox, findingsBox, infoText, loadingBox, nameList, note } from "./common";
import { DrillView } from "./drilldown";
import { GenerationView, stepLabel } from "./generation";
import { HeadsView } from "./heads";
import { LayersView } from "./layers";
import { maskStat } from "./sparsity";
import { MemoryView } from "./memory";
import { RanksView } from "./ranks";
import { RooflineView } from "./roofline";
import { servingBox } from "./serving";
import { TimelineView } from "./timeline";

const TAB_LABELS: Record<Tab, string> = {
  layers: "Layers \u00d7 phases",
  heads: "Layers \u00d7 heads",
  memory: "Memory",
  timeline: "Timeline",
  roofline: "Roofline",
  generation: "Generation",
  ranks: "Ranks",
};

/** The worker selector's choice that opens the ranks view (not a worker name: those come from files). */
const ALL_RANKS = "\u0000all-ranks";

export function currentWorker(s: State): WorkerSummary | null {
  const ws = s.summary.data?.workers ?? [];
  return ws.find((w) => w.worker === s.worker && (s.span === null || w.span === s.span)) ?? ws[0] ?? null;
}

/** How the engine begins its note on inferred attention (analysis/attribution/analyze.py). */
const INFERRED_NOTE = "no tb-attn scopes in this trace";

export class RunView {
  readonly el: HTMLElement;
  private readonly top: HTMLElement;
  private readonly card: HTMLElement;
  private readonly tabs: HTMLElement;
  private readonly content: HTMLElement;
  private readonly layers: LayersView;
  private readonly heads: HeadsView;
  private readonly memory: MemoryView;
  private readonly timeline: TimelineView;
  private readonly generation: GenerationView;
  private readonly roofline: RooflineView;
  private readonly ranks: RanksView;
  private readonly drill: DrillView;
  private last: Record<string, unknown> = {};
  private shownTab: Tab | null = null;

  constructor(private readonly actions: Actions) {
    this.top = h("div", "toolbar run-top");
    this.card = h("div", "card");
    this.tabs = h("div", { class: "tabs", attrs: { role: "tablist" } });
    this.content = h("div", { class: "tab-content", attrs: { role: "tabpanel" } });
    this.layers = new LayersView(actions);
    this.heads = new HeadsView(actions);
    this.memory = new MemoryView(actions);
    this.timeline = new TimelineView(actions);
    this.generation = new GenerationView(actions);
    this.roofline = new RooflineView(actions);
    this.ranks = new RanksView(actions);
    this.drill = new DrillView(actions);
    this.el = h("section", "run-page", this.top, this.card, this.tabs, this.content, this.drill.el);
  }

  update(s: State, entry: RunEntry | undefined): void {
    const ws = currentWorker(s);
    const diff = (k: string, v: unknown) => {
      const c = this.last[k] !== v;
      this.last[k] = v;
      return c;
    };
    const multi = (entry?.workers.length ?? 0) >= 2;
    const onRanks = s.tab === "ranks" && multi;
    const topChanged = [diff("run", s.run), diff("entry", entry), diff("worker", s.worker), diff("span", s.span), diff("step", s.step), diff("ws", ws), diff("onRanks", onRanks)];
    if (topChanged.some(Boolean)) this.renderTop(s, entry, ws, onRanks);
    const cardChanged = [diff("summary", s.summary.data), diff("summaryErr", s.summary.error), diff("summaryStatus", s.summary.status), diff("ws2", ws), diff("onRanks2", onRanks), diff("rankSel", shownRanks(s))];
    if (cardChanged.some(Boolean)) this.renderCard(s, entry, ws, onRanks);
    const generating = !!ws?.generation;
    const attention = !!ws?.roofline;
    if ([diff("tab", s.tab), diff("multi", multi), diff("generating", generating), diff("attention", attention)].some(Boolean)) {
      this.renderTabs(s.tab, multi, generating, attention);
    }
    this.renderContent(s, ws);
    this.drill.update(s);
  }

  private renderTop(s: State, entry: RunEntry | undefined, ws: WorkerSummary | null, onRanks: boolean): void {
    const back = h(
      "button",
      { class: "back", attrs: { type: "button" }, on: { click: () => this.actions.openRun(null) } },
      "\u2190 Runs",
    );
    const workers = entry?.workers ?? [];
    const controls: HTMLElement[] = [];
    if (workers.length) {
      controls.push(
        h(
          "label",
          null,
          "worker ",
          select(
            [
              ...(workers.length >= 2 ? [{ value: ALL_RANKS, label: `All ranks (${workers.length})` }] : []),
              ...workers.map((w) => ({ value: w.worker, label: w.worker })),
            ],
            onRanks ? ALL_RANKS : (s.worker ?? ""),
            (v) => {
              if (v === ALL_RANKS) return this.actions.setTab("ranks");
              if (onRanks) return this.actions.openWorker(v);
              const w = workers.find((x) => x.worker === v);
              this.actions.setTarget(v, w?.spans[0]?.span ?? null);
            },
            "Worker",
          ),
        ),
      );
      const spans = workers.find((w) => w.worker === s.worker)?.spans ?? [];
      if (!onRanks && (spans.length > 1 || (spans.length === 1 && spans[0]!.span !== null))) {
        controls.push(
          h(
            "label",
            { title: "A worker with several trace files has several spans (profiler cycles)" },
            "span ",
            select(
              spanOptions(spans),
              s.span ?? "",
              (v) => this.actions.setTarget(s.worker, v || null),
              "Span",
            ),
          ),
        );
      }
    }
    const steps = onRanks ? [] : (ws?.steps ?? []);
    if (steps.length) {
      controls.push(
        h(
          "label",
          { title: "The step the memory and timeline views show; the tables are means over all steps" },
          "step: ",
          select(
            // A generation's steps by their role and context: "2 · decode · 129 keys".
            steps.map((st) => ({ value: String(st), label: stepLabel(ws, st) })),
            s.step === null ? String(steps[0]) : String(s.step),
            (v) => this.actions.setStep(Number(v)),
            "Step",
          ),
        ),
      );
    }
    replace(
      this.top,
      back,
      h("h2", { class: "run-title", title: s.run ?? "" }, s.run ?? ""),
      entry ? h("span", `badge status-${entry.status}`, entry.status) : null,
      h("span", "spacer"),
      ...controls,
    );
  }

  private renderCard(s: State, entry: RunEntry | undefined, ws: WorkerSummary | null, onRanks: boolean): void {
    // The runs list's few fields of the metadata, clipped by the server: the summary's copy is
    // the whole file, whose strings may be a megabyte long.
    const meta = entry?.info ?? null;
    const parts: string[] = [];
    const add = (label: string, v: string | null | undefined) => v && parts.push(label ? `${label} ${v}` : v);
    add("", meta?.model);
    add("", meta?.impl);
    add("seq", infoText(meta?.seq));
    add("batch", infoText(meta?.batch));
    add("", meta?.dtype);
    const device = meta?.device ?? "";
    const deviceName = meta?.device_name ?? "";
    add("", device && deviceName ? `${device} (${deviceName})` : device);
    const user = meta?.user ?? "";
    const host = meta?.host ?? "";
    add("", user && host ? `${user}@${host}` : user || host);
    const started = meta?.started_at ?? "";
    add("", started ? fmtWhen(started) : "");
    add("torch", meta?.torch_version);
    add("mode", meta?.mode);

    const children: (HTMLElement | null)[] = [
      parts.length ? h("div", "meta-line", parts.join(" \u00b7 ")) : h("div", "meta-line muted", "No run metadata (not written by tb-attn-run)."),
    ];
    // The list's error repeats the summary's per-file errors; show it only when those are absent.
    if (entry?.status === "error" && entry.error && !s.summary.data?.errors.length) {
      children.push(errorBox("This run could not be read:", entry.error));
    }
    const runnerStatus = meta?.status ?? "";
    if (runnerStatus && runnerStatus !== "ok") {
      const err = meta?.error ?? "";
      children.push(h("div", runnerStatus === "running" ? "note" : "warn", `Runner status: ${runnerStatus}${err ? ` \u2014 ${err}` : ""}`));
    }
    const sum = s.summary;
    if (sum.status === "error") children.push(errorBox("Could not load the summary:", sum.error ?? ""));
    else if (!sum.data) children.push(loadingBox("the summary (the first load of a run reads its trace)"));
    if (sum.data) {
      for (const e of sum.data.errors) children.push(errorBox(`Could not read ${e.file}:`, e.error));
      if (!sum.data.workers.length && !sum.data.errors.length) children.push(note("This run has no trace files."));
    }
    // The ranks view is about every worker: one worker's figures would read as the run's.
    const sel = shownRanks(s);
    const below = sel === null ? `All ${entry?.workers.length ?? 0} workers below` : `Ranks ${sel} of the ${entry?.workers.length ?? 0} workers below`;
    if (ws && onRanks) children.push(h("div", "muted small", `${below}; pick one in the worker selector for its own overview.`));
    else if (ws) children.push(...this.stats(ws));
    replace(this.card, ...children);
  }

  private stats(ws: WorkerSummary): HTMLElement[] {
    const out: HTMLElement[] = [];
    const backends = [...new Set(ws.layers.map((l) => l.backend))];
    const evidence = [...new Set(ws.layers.flatMap((l) => l.backend_evidence))];
    const backendEl = h(
      "span",
      "stat",
      h("span", "stat-label", "backend"),
      h("span", { class: `backend-chip`, title: evidence.length ? `evidence: ${evidence.join(", ")}` : "" }, ws.backend),
      ws.backend === "mixed" ? h("span", "muted", ` (${backendRuns(ws.layers)})`) : null,
      backends.length === 1 && evidence.length ? h("span", "muted small", " from ", ...nameList(evidence.slice(0, 3))) : null,
    );
    const allCore = ws.layers.length > 0 && ws.layers.every((l) => l.core_only);
    const share = (label: string, v: number | null, att: number, step: number, spread: Spread | undefined) =>
      h(
        "span",
        {
          class: "stat",
          title: v === null ? "no device time in this trace" : `${fmtUs(att)} of ${fmtUs(step)} per step (means); ${allCore ? "attention core" : "attention"} ${spreadTitle(spread)}`,
          dataset: { testid: `share-${label}` },
        },
        h("span", "stat-label", `${allCore ? "attention core" : "attention"} share, ${label}`),
        h("span", "meter", h("span", { class: "meter-fill", style: { width: `${Math.min(100, Math.max(0, (v ?? 0) * 100)).toFixed(1)}%` } })),
        h("b", null, fmtShare(v)),
        v === null ? null : h("span", "muted small", ` ${fmtUs(att)} / ${fmtUs(step)}`),
        v !== null && spread ? h("span", { class: "muted small range", dataset: { testid: "range" } }, ` (steps ${fmtUs(spread.lo)}\u2013${fmtUs(spread.hi)})`) : null,
        v !== null ? noisyMark(spread) : null,
      );
    if (ws.headline) out.push(h("p", { class: "run-headline", dataset: { testid: "run-headline" } }, ws.headline));
    out.push(
      h(
        "div",
        "stats",
        backendEl,
        share("CPU", ws.attention_share_cpu, ws.attention_cpu_us, ws.step_cpu_us, ws.spread["attention_cpu_us"]),
        ws.device === "cpu" && ws.attention_share_device === null
          ? null
          : share("device", ws.attention_share_device, ws.attention_device_us, ws.step_device_us, ws.spread["attention_device_us"]),
        h("span", "stat", h("span", "stat-label", "layers"), h("b", null, String(ws.layers.length))),
        maskStat(ws),
        ws.layers.length
          ? h(
              "span",
              {
                class: "stat",
                title: ws.memory_recorded
                  ? "The largest rise of allocated memory over a layer's start, across layers (as the runs list and Compare show it)"
                  : MEMORY_NOT_RECORDED,
                dataset: { testid: "peak" },
              },
              h("span", "stat-label", "peak"),
              h("b", null, ws.memory_recorded ? fmtBytes(Math.max(...ws.layers.map((l) => l.peak_bytes))) : DASH),
            )
          : null,
        h("span", { class: "stat", title: `ProfilerStep numbers: ${ws.steps.join(", ")}` }, h("b", null, fmtCount(ws.step_count)), h("span", "stat-label", ws.step_count === 1 ? "step profiled" : "steps profiled")),
        h(
          "span",
          { class: "stat", title: ws.gpu ? "The platform and the device the trace names (deviceProperties)" : "", dataset: { testid: "device" } },
          h("span", "stat-label", "device"),
          h("b", null, ws.gpu ?? ws.device),
        ),
      ),
    );
    const inferredBox = ws.inferred || ws.layers.some((l) => l.inferred);
    if (inferredBox) {
      out.push(
        h(
          "div",
          "warn",
          h("span", "badge inferred", "inferred"),
          " This trace has no tb-attn scopes: attention was found from module names, SDPA ops or matmul\u2192softmax\u2192matmul patterns, each block from its q/k/v projections to its output projection, and its ops placed in phases by their roles. What a module runs before its first projection or after its output projection (a mask conversion, dropout, a residual add and norm) is outside the block, so attention's share can read lower than with scopes.",
        ),
      );
    }
    const coreOnly = ws.layers.filter((l) => l.core_only).length;
    if (coreOnly) {
      const which = coreOnly === ws.layers.length ? "Every layer was" : `${coreOnly} of ${ws.layers.length} layers were`;
      out.push(
        h(
          "div",
          { class: "warn", dataset: { testid: "core-only-note" } },
          h("span", { class: "badge core-only", title: CORE_ONLY_TITLE }, "core only"),
          ` ${which} found by the attention core alone: the projections around it could not be found, so ${allCore ? "the figures cover" : "their figures cover"} the core only and leave out any projections the model runs around it.`,
        ),
      );
    }
    // The box above says what inference did; its note is not said twice.
    const notes = ws.notes.filter((n) => !(inferredBox && n.startsWith(INFERRED_NOTE)));
    if (notes.length) out.push(h("ul", "notes", ...notes.map((n) => h("li", null, n))));
    const serving = servingBox(ws.serving);
    if (serving) out.push(serving);
    const findings = findingsBox(ws.findings ?? []);
    if (findings) out.push(findings);
    const diag = Object.entries(ws.diagnostics).filter(([, v]) => v);
    if (diag.length) {
      out.push(
        h(
          "details",
          "diagnostics",
          h("summary", null, `Decoder diagnostics (${diag.length})`),
          h("ul", null, ...diag.map(([k, v]) => h("li", null, `${k}: ${v}`))),
        ),
      );
    }
    if (!ws.layers.length) {
      out.push(note("No attention found in this trace."));
    }
    return out;
  }

  private renderTabs(active: Tab, multi: boolean, generating: boolean, attention: boolean): void {
    replace(
      this.tabs,
      // Generation and Roofline stay listed while open (the summary loading): they fall back once it is in.
      ...TABS.filter(
        (t) => (t !== "ranks" || multi) && (t !== "generation" || generating || t === active) && (t !== "roofline" || attention || t === active),
      ).map((t) =>
        h(
          "button",
          {
            class: t === active ? "tab active" : "tab",
            attrs: { type: "button", role: "tab", "aria-selected": t === active ? "true" : "false" },
            on: { click: () => this.actions.setTab(t) },
          },
          TAB_LABELS[t],
        ),
      ),
    );
  }

  private renderContent(s: State, ws: WorkerSummary | null): void {
    const views = {
      layers: this.layers,
      heads: this.heads,
      memory: this.memory,
      timeline: this.timeline,
      roofline: this.roofline,
      generation: this.generation,
      ranks: this.ranks,
    };
    const view = views[s.tab];
    if (this.shownTab !== s.tab) {
      // Charts of hidden tabs are disposed; they are cheap to rebuild and free canvas memory.
      for (const v of Object.values(views)) if (v !== view) v.dispose();
      replace(this.content, view.el);
      this.shownTab = s.tab;
    }
    if (s.tab === "layers" || s.tab === "heads") {
      // Without a summary (loading, or an error shown in the card) there is nothing to draw.
      const show = !!ws && ws.layers.length > 0;
      view.el.hidden = !show;
      if (show) (s.tab === "layers" ? this.layers : this.heads).update(s, ws);
    } else if (s.tab === "generation") {
      view.el.hidden = !ws?.generation;
      if (ws?.generation) this.generation.update(s, ws);
    } else if (s.tab === "roofline") {
      view.el.hidden = !ws?.roofline;
      if (ws?.roofline) this.roofline.update(s, ws);
    } else if (s.tab === "ranks") {
      this.ranks.update(s);
    } else if (s.tab === "memory") {
      this.memory.update(s);
    } else {
      this.timeline.update(s, ws);
    }
  }

  dispose(): void {
    for (const v of [this.layers, this.heads, this.memory, this.timeline, this.roofline, this.generation, this.ranks]) v.dispose();
    this.shownTab = null;
    this.last = {};
  }
}

/** The rank selection the ranks view shows (the server's answer, not a selection still asked for); null: every rank. */
/** Each run of consecutive layers that ran one backend, as "L0\u201343 rocm-flash, L44 naive"
 * (a model of 107 layers listed every one). */
export function backendRuns(layers: readonly { layer: number; backend: string }[]): string {
  const runs: { first: number; last: number; backend: string }[] = [];
  for (const l of [...layers].sort((a, b) => a.layer - b.layer)) {
    const prev = runs[runs.length - 1];
    if (prev && prev.backend === l.backend && prev.last === l.layer - 1) prev.last = l.layer;
    else runs.push({ first: l.layer, last: l.layer, backend: l.backend });
  }
  return runs.map((r) => `L${r.first}${r.last > r.first ? `\u2013${r.last}` : ""} ${r.backend}`).join(", ");
}

function shownRanks(s: State): string | null {
  return s.ranks.data?.run === s.run ? (s.ranks.data?.ranks_selected ?? null) : null;
}
