// The generation view: a run of `tb-attn-run --mode generate` (a prompt, then one token per
// profiler step against a KV cache; the summary's "generation"), offered when the worker has one.
// The prefill step against a decode step, each decode step's attention time against its context
// with the fit a·contextᵏ, the KV cache per step, its figures (bytes per layer and per KV head,
// growth, the memory check, bandwidth), and the per-layer tables of the prefill and decode steps.
// Also the step picker's labels ("2 · decode · 129 keys"), which the run header and timeline use.

import { createChart, type EChart } from "../charts";
import { h, replace } from "../dom";
import { fmtBytes, fmtCount, fmtFlops, fmtIntensity, fmtShare, fmtUs } from "../format";
import { metric } from "../metrics";
import type { Actions, State } from "../state";
import type { Generation, GenerationPhase, LayerStats, TokenStats, WorkerSummary } from "../types";
import { note } from "./common";
import {
  clockWord,
  DECODE_COLOR,
  DECODE_SERIES,
  decodeChart,
  decodeTokens,
  FIT_COLOR,
  KV_SERIES,
  kvChart,
  PREFILL_COLOR,
  phaseChart,
} from "./generation_charts";
import { fmtFit } from "./scaling";
import { kindBadge, layerCategory } from "./sparsity";

const DASH = "\u2014";

/** The generation step behind a profiler step, where the worker has a generation. */
export function tokenAt(ws: WorkerSummary | null, step: number | null): TokenStats | undefined {
  return step === null ? undefined : ws?.generation?.tokens.find((t) => t.step === step);
}

/** A step as the step picker lists it: "2 · decode · 129 keys" in a generation, else "2". */
export function stepLabel(ws: WorkerSummary | null, step: number): string {
  const t = tokenAt(ws, step);
  return t ? `${step} \u00b7 ${t.role} \u00b7 ${t.context} keys` : String(step);
}

/** Query tokens a step of the phase computes: the prompt times the batch, or the batch. */
function tokensPerStep(g: Generation, role: "prefill" | "decode"): number | null {
  if (g.batch === null) return null;
  if (role === "decode") return g.batch;
  const prompt = g.prompt_len ?? g.tokens.find((t) => t.role === "prefill")?.queries ?? null;
  return prompt ? prompt * g.batch : null;
}

export class GenerationView {
  readonly el: HTMLElement;
  private charts: { chart: EChart; dispose: () => void }[] = [];
  private last: WorkerSummary | null = null;

  constructor(private readonly actions: Actions) {
    this.el = h("section", { class: "generation", attrs: { "data-testid": "generation" } });
  }

  update(_s: State, ws: WorkerSummary): void {
    if (this.last === ws) return;
    this.last = ws;
    this.render(ws);
  }

  dispose(): void {
    for (const c of this.charts) c.dispose();
    this.charts = [];
    this.last = null;
  }

  private chartIn(el: HTMLElement): EChart {
    const c = createChart(el);
    this.charts.push(c);
    return c.chart;
  }

  private render(ws: WorkerSummary): void {
    for (const c of this.charts) c.dispose();
    this.charts = [];
    const g = ws.generation;
    if (!g) {
      replace(this.el, note("This trace has no generation steps (runs of tb-attn-run --mode generate have them)."));
      return;
    }
    const clock = clockWord(g);
    const decoding = decodeTokens(g).length > 0;
    const chart = (testid: string, height: string) => h("div", { class: "chart", style: { height }, attrs: { "data-testid": testid } });
    const phaseEl = chart("gen-phase-chart", "190px");
    const decodeEl = chart("gen-decode-chart", "300px");
    const kvEl = chart("gen-kv-chart", "300px");
    replace(
      this.el,
      h("p", { class: "muted", attrs: { "data-testid": "gen-about" } }, this.about(g)),
      h("h4", null, "Prefill against decode"),
      h(
        "div",
        "scaling-charts",
        h("div", "table-wrap", this.phaseTable(g)),
        h(
          "div",
          null,
          h("div", "chart-title", "Per step: the prefill against a decode step (mean)"),
          phaseEl,
          h("div", "legend", legendItem(PREFILL_COLOR, "prefill step"), legendItem(DECODE_COLOR, "decode step"),
            h("span", "muted small", `times on the ${clock} clock, the step's on the CPU's wall clock`)),
        ),
      ),
      h("h4", null, "Decode steps against their context"),
      h(
        "div",
        "scaling-charts",
        h(
          "div",
          null,
          h("div", "chart-title", `${clock === "CPU" ? "CPU" : "Device"} time per decode step vs. context (keys attended)`),
          decoding ? decodeEl : note("No decode steps in this trace."),
          decoding ? this.decodeLegend(g) : null,
        ),
        h(
          "div",
          null,
          h("div", "chart-title", "KV cache per step vs. context (all layers, the prefill included)"),
          kvEl,
          h("div", "legend", ...KV_SERIES.map((x) => legendItem(x.color, x.label, x.title))),
        ),
      ),
      h("h4", null, "KV cache"),
      this.figures(g),
      h("h4", null, "Per layer"),
      h("div", "scaling-charts", this.layerTable("prefill", g.prefill, g), this.layerTable("decode", g.decode, g)),
    );
    // Charts are made once their elements are in the page, so that they get their size.
    phaseChart(this.chartIn(phaseEl), g);
    if (decoding) {
      const dc = this.chartIn(decodeEl);
      decodeChart(dc, g);
      dc.on("click", (p) => {
        const v = p.value as number[] | undefined;
        const step = v?.[2];
        if (p.seriesType !== "scatter" || step === undefined) return;
        this.actions.setStep(step);
        this.actions.setTab("timeline");
      });
    }
    kvChart(this.chartIn(kvEl), g);
  }

  /** One line: the prompt, the decode steps, the batch, the cache and the heads, the clock. */
  private about(g: Generation): string {
    const decode = g.decode?.steps ?? decodeTokens(g).length;
    const heads =
      g.heads !== null
        ? `${g.heads} query heads, ${g.kv_heads ?? "?"} KV heads${g.head_dim !== null ? ` \u00d7 ${g.head_dim} dims` : ""}`
        : "";
    return [
      `${g.prompt_len !== null ? `A prompt of ${g.prompt_len} tokens (prefill), then` : "Then"} ${decode} decode ${decode === 1 ? "step" : "steps"} of one token per sequence`,
      g.batch !== null ? `batch ${g.batch}` : "",
      g.kv_cache ? `${g.kv_cache} KV cache` : "KV cache of unknown kind",
      heads,
      g.kv_dtype ?? "",
      `times on the ${clockWord(g)} clock`,
      g.source === "shapes" ? "steps found from one-query shapes (no step scopes)" : "steps from the runner's step scopes",
    ]
      .filter(Boolean)
      .join(" \u00b7 ");
  }

  /** Prefill and decode side by side: times, tokens and work per step, and attention per token. */
  private phaseTable(g: Generation): HTMLElement {
    const clock = clockWord(g);
    const cols: ["prefill" | "decode", GenerationPhase | null][] = [
      ["prefill", g.prefill],
      ["decode", g.decode],
    ];
    const perToken = (role: "prefill" | "decode", p: GenerationPhase) => {
      const n = tokensPerStep(g, role);
      return n ? fmtUs(p.attention_us / n) : DASH;
    };
    const rows: [string, string, (role: "prefill" | "decode", p: GenerationPhase) => string][] = [
      [`attention (${clock})`, "attention", (_r, p) => fmtUs(p.attention_us)],
      ["K\u00b7V core", "core", (_r, p) => fmtUs(p.core_us)],
      ["KV cache append", "kv-cache", (_r, p) => fmtUs(p.kv_cache_us)],
      ["step (CPU wall)", "step", (_r, p) => fmtUs(p.step_us)],
      ["tokens per step", "tokens", (r) => fmtCount(tokensPerStep(g, r))],
      ["attention per token", "per-token", perToken],
      ["KV cache (K and V)", "kv-bytes", (_r, p) => fmtBytes(p.kv_bytes)],
      ["launches", "launches", (_r, p) => fmtCount(p.launches)],
      ["FLOPs", "flops", (_r, p) => fmtFlops(p.flops)],
      ["steps", "steps", (_r, p) => String(p.steps)],
    ];
    return h(
      "table",
      { class: "grid gen-phases", attrs: { "data-testid": "gen-phases" } },
      h("thead", null, h("tr", null, h("th", null, "per step"), h("th", "num", "prefill"), h("th", "num", "decode"))),
      h(
        "tbody",
        null,
        ...rows.map(([label, key, value]) =>
          h(
            "tr",
            { dataset: { row: key } },
            h("th", null, label),
            ...cols.map(([role, p]) => h("td", { class: `num ${role}` }, p ? value(role, p) : DASH)),
          ),
        ),
      ),
    );
  }

  /** The decode chart's series, the fit (its exponent and R²), or why there is none. */
  private decodeLegend(g: Generation): HTMLElement {
    return h(
      "div",
      null,
      h(
        "div",
        "legend",
        ...DECODE_SERIES.map((x) => legendItem(x.color, x.label, x.title)),
        g.fit
          ? h(
              "span",
              { class: "legend-item", title: "attention time per decode step \u2248 a\u00b7context^k, over the decode steps", attrs: { "data-testid": "gen-fit" } },
              h("span", { class: "sw", style: { background: FIT_COLOR, height: "2px" } }),
              "fit a\u00b7context^k: ",
              h("span", "fit", fmtFit(g.fit)),
            )
          : g.fit_note
            ? null
            : h("span", { class: "legend-item muted", attrs: { "data-testid": "gen-fit" } }, "no fit"),
      ),
      g.per_key_us !== null
        ? h(
            "p",
            { class: "muted small", attrs: { "data-testid": "gen-line-fit" } },
            `As a straight line: ${fmtUs(g.per_key_us)} per key, ${fmtUs(g.fixed_us)} that does not grow.`,
          )
        : null,
      g.fit_note ? h("div", { class: "note", attrs: { "data-testid": "gen-fit-note" } }, g.fit_note) : null,
      h("p", "hint", "Hover a dot for its step's figures; click it for that step's timeline."),
    );
  }

  /** The KV cache's figures: bytes per layer and head, growth, the memory check, bandwidth. */
  private figures(g: Generation): HTMLElement {
    const stat = (testid: string, label: string, value: string, title: string, extra: string | null = null) =>
      h("span", { class: "stat", title, attrs: { "data-testid": testid } }, h("span", "stat-label", label), h("b", null, value),
        extra ? h("span", "muted small", extra) : null);
    const ref = g.reference_bytes_per_s;
    const share = ref && ref > 0 ? ` (${fmtShare(g.achieved_bytes_per_s / ref)} of the reference)` : null;
    return h(
      "div",
      "card",
      h(
        "div",
        "stats",
        stat("gen-kv-per-layer", "per layer", fmtBytes(g.kv_bytes_per_layer), "K and V at the last decode step, one layer"),
        stat("gen-kv-per-head", "per KV head", fmtBytes(g.kv_bytes_per_head), "K and V at the last decode step, one layer, one KV head"),
        stat("gen-kv-growth", "growth", `${fmtBytes(g.kv_bytes_per_token)} / decode step`, "The cache's growth per decode step, all layers"),
        stat("gen-read", "read", `${fmtBytes(g.read_bytes_per_token)} / decode step`,
          "K and V the core reads per decode step, all layers: the cache, or its expansion to every query head, or a static cache's whole buffer"),
        g.realloc_bytes_per_token > 0
          ? stat("gen-realloc", "copied", `${fmtBytes(g.realloc_bytes_per_token)} / decode step`,
              "Bytes the kv_cache phase allocates per decode step: a dynamic cache copies itself to grow")
          : null,
        stat("gen-bandwidth", "achieved, median step", `${fmtBytes(g.achieved_bytes_per_s)}/s`,
          "The bytes read per decode step over the K\u00b7V core's time, in the median decode step", share),
        ...(["prefill", "decode"] as const).map((role) => {
          const r = g[role]?.roof;
          if (!r) return null;
          const reach = r.share !== null ? `, ${fmtShare(r.share)} of its ceiling` : "";
          const intensity = r.intensity !== null ? `${fmtIntensity(r.intensity)} FLOP/B` : "no bytes";
          return stat(`gen-roof-${role}`, role === "decode" ? "decode roofline, mean step" : "prefill roofline", r.verdict,
            "Attention over these steps under the roofline (the Roofline tab has the peaks), on their mean per step: FLOPs per byte moved, " +
              "the share of its attainable ceiling, and what bounds it", `${intensity}${reach}`);
        }),
      ),
      h("p", { class: "meta-line", attrs: { "data-testid": "gen-memory-check" } }, h("span", "stat-label", "memory check: "), g.kv_memory),
      h(
        "p",
        { class: "muted small", attrs: { "data-testid": "gen-reference" } },
        ref !== null ? `Reference: ${fmtBytes(ref)}/s, ${g.reference || "the machine's copy bandwidth"}.` : "No reference bandwidth recorded.",
      ),
    );
  }

  /** The per-layer table over the prefill or the decode steps only. */
  private layerTable(role: "prefill" | "decode", p: GenerationPhase | null, g: Generation): HTMLElement {
    const title = h("div", "chart-title", role === "prefill" ? "Prefill step" : `Decode steps${p ? ` (mean of ${p.steps})` : ""}`);
    if (!p || !p.layers.length) return h("div", null, title, note(`No ${role} step in this trace.`));
    const time = metric(g.clock === "cpu" ? "cpu_us" : "device_us");
    const kvPhase = (l: LayerStats) => l.phases.find((x) => x.phase === "kv_cache");
    const cols: [string, string, (l: LayerStats) => string][] = [
      [`${clockWord(g)} time`, "time", (l) => time.format(time.layer(l))],
      ["KV cache", "kv-cache", (l) => {
        const x = kvPhase(l);
        return x ? time.format(time.phase(x)) : DASH;
      }],
      ["FLOPs", "flops", (l) => fmtFlops(l.flops)],
      ["alloc", "alloc", (l) => fmtBytes(l.alloc_bytes)],
    ];
    return h(
      "div",
      null,
      title,
      h(
        "div",
        "table-wrap",
        h(
          "table",
          { class: "grid gen-layers", attrs: { "data-testid": `gen-layers-${role}` } },
          h("thead", null, h("tr", null, h("th", null, "Layer"), h("th", null, "backend"), ...cols.map(([t]) => h("th", "num", t)))),
          h(
            "tbody",
            null,
            ...p.layers.map((l) =>
              h(
                "tr",
                { dataset: { layer: String(l.layer) } },
                h("th", { class: "row-head", title: l.module ?? "" }, layerCategory(l, p.layers), kindBadge(l, p.layers)),
                h("td", { title: l.backend_evidence.length ? `evidence: ${l.backend_evidence.join(", ")}` : "" }, h("span", "backend-chip", l.backend)),
                ...cols.map(([, key, value]) => h("td", { class: `num ${key}` }, value(l))),
              ),
            ),
          ),
        ),
      ),
    );
  }
}

function legendItem(color: string, label: string, title = ""): HTMLElement {
  return h("span", { class: "legend-item", title }, h("span", { class: "sw", style: { background: color } }), label);
}
