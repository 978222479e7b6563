// The Roofline tab: where each phase of each layer, and the run's attention as a whole, sits under
// the hardware's roofs (the summary's "roofline", analysis/measures/roofline.py): the peaks, the chart (a
// click on a point opens its layer and phase in the drill-down), and every layer × phase's
// figures, memory-only phases included (their share is of the bandwidth roof). Also the cells the
// layer table and Compare show a roof with ("% of roof", "bound").

import { createChart } from "../charts";
import { h, replace } from "../dom";
import { fmtBandwidth, fmtBytes, fmtCount, fmtIntensity, fmtRate, fmtShare, fmtUs } from "../format";
import { phaseColor, phaseLabel, phasesOf } from "../metrics";
import type { Actions, State } from "../state";
import { INK } from "../theme";
import type { LayerStats, Roof, Roofline, WorkerSummary } from "../types";
import { note, partialMark } from "./common";
import { CAVEAT, clockWords, peaksKnown, plotted, rooflineChart, type PointSeries } from "./roofline_charts";
import { layerCategory } from "./sparsity";

const DASH = "\u2014";
/** Peak classes in the order the header lists them. */
const CLASSES = ["fp32", "tf32", "bf16", "fp16", "fp8", "int8"];
const SHARE_TITLE =
  "% of roof: the time at the roofs over the time taken (achieved / ceiling where there are FLOPs, the share of " +
  "the peak bandwidth where there are none); over 100 % where data came from cache or the clock is coarse";
const BOUND_TITLE =
  "what bounds it at the roofs: compute, memory, or latency (too little work per call for either roof to matter)";

const ABOVE_TITLE =
  "it ran faster than the peaks allow: the peaks are too low (probes measured on a busy machine), or its data came from a cache rather than memory; no verdict is drawn, and the roofline's note says which and how to give the peaks (--tb_attn_peak_flops, --tb_attn_peak_bw)";

/** A roof's "% of roof" cell. */
export function roofShareCell(r: Roof | null | undefined, extra = ""): HTMLElement {
  if (!r || r.share === null) return h("td", { class: `num roof-share${extra}`, title: r ? r.verdict : "no roofline" }, DASH);
  return h("td", { class: `num roof-share${extra}`, title: SHARE_TITLE }, fmtShare(r.share));
}

/** A roof's verdict cell: "compute-bound", "memory-bound", "latency-bound", "no peak known"... */
export function roofBoundCell(r: Roof | null | undefined, extra = ""): HTMLElement {
  if (!r) return h("td", `bound${extra}`, DASH);
  const title = r.verdict === "above its ceiling" ? ABOVE_TITLE : BOUND_TITLE;
  return h("td", { class: `bound${extra}`, title }, h("span", `verdict v-${r.verdict.split(" ")[0]}`, r.verdict));
}

export function roofShareHeader(attrs: Record<string, string | number> = {}): HTMLElement {
  return h("th", { class: "num", title: SHARE_TITLE, attrs }, "% of roof");
}

export function roofBoundHeader(attrs: Record<string, string | number> = {}): HTMLElement {
  return h("th", { title: BOUND_TITLE, attrs }, "bound");
}

/** The peaks in one line: each class's FLOP/s, the bandwidth, the launch floor. */
function peaksLine(rl: Roofline): HTMLElement {
  const classes = CLASSES.filter((c) => rl.peak_flops[c] !== undefined);
  const stat = (key: string, label: string, value: string, title = "") =>
    h("span", { class: "stat", title, dataset: { peak: key } }, h("span", "stat-label", label), h("b", null, value));
  return h(
    "div",
    "stats",
    h("span", "stat", h("span", "stat-label", "peaks of"), h("b", null, rl.device)),
    ...classes.map((c) => stat(c, c, fmtRate(rl.peak_flops[c]!))),
    stat("memory", "memory", fmtBandwidth(rl.peak_bytes_per_s)),
    stat("launch", "launch floor", fmtUs(rl.launch_us), "the per-call cost under which a phase is latency-bound"),
  );
}

export class RooflineView {
  readonly el: HTMLElement;
  private chart: { dispose: () => void } | null = null;
  private last: WorkerSummary | null = null;
  private table: HTMLElement | null = null;

  constructor(private readonly actions: Actions) {
    this.el = h("section", { class: "roofline", attrs: { "data-testid": "roofline" } });
  }

  update(s: State, ws: WorkerSummary): void {
    if (this.last !== ws) {
      this.last = ws;
      this.render(ws);
    }
    const sel = s.selection;
    for (const tr of this.table?.querySelectorAll<HTMLElement>("tbody tr") ?? []) {
      const on = !!sel && !sel.backward && String(sel.layer) === tr.dataset["layer"] && (sel.phase ?? "") === (tr.dataset["phase"] ?? "");
      tr.classList.toggle("sel-row", on);
    }
  }

  dispose(): void {
    this.chart?.dispose();
    this.chart = null;
    this.last = null;
  }

  private render(ws: WorkerSummary): void {
    this.chart?.dispose();
    this.chart = null;
    const rl = ws.roofline;
    if (!rl) {
      replace(this.el, note("No attention in this trace: nothing to place under a roofline."));
      return;
    }
    const known = peaksKnown(rl);
    const att = rl.attention;
    const phases = phasesOf(ws.layers);
    const series: PointSeries[] = phases
      .map((phase) => ({
        name: phaseLabel(phase),
        symbol: "circle",
        size: 10,
        points: ws.layers.flatMap((l) => {
          const p = l.phases.find((x) => x.phase === phase);
          return p && plotted(p.roof) ? [{ roof: p.roof, title: `${layerCategory(l, ws.layers)} \u00b7 ${phaseLabel(phase)}`, color: phaseColor(phase), layer: l.layer, phase }] : [];
        }),
      }))
      .filter((x) => x.points.length);
    if (plotted(att)) {
      series.push({ name: "attention", symbol: "diamond", size: 17, label: "attention", points: [{ roof: att, title: "Attention, all layers", color: INK.text }] });
    }
    const offChart = (pred: (r: Roof) => boolean) =>
      phases.filter((phase) => ws.layers.some((l) => {
        const r = l.phases.find((x) => x.phase === phase)?.roof;
        return !!r && !plotted(r) && pred(r);
      }));
    const memoryOnly = offChart((r) => r.flops_per_s === 0);
    const noBytes = offChart((r) => r.flops_per_s > 0 && r.intensity === null);
    const chartEl = h("div", { class: "chart roofline-chart", style: { height: "440px" }, attrs: { "data-testid": "roofline-chart" } });
    this.table = this.rows(ws, rl);
    replace(
      this.el,
      h(
        "div",
        { class: "card roof-peaks", attrs: { "data-testid": "roof-peaks" } },
        known
          ? peaksLine(rl)
          : h(
              "div",
              { class: "warn", attrs: { "data-testid": "roof-no-peak" } },
              h("b", null, "No peak known: "),
              rl.note || "the trace names no device the peak table knows",
              ". The chart shows achieved FLOP/s against intensity without roofs. Give the peaks to draw them: ",
              h("code", null, "tensorboard --logdir LOGDIR --tb_attn_peak_flops 312T --tb_attn_peak_bw 2.0T"),
              ", or in the CLI ",
              h("code", null, "tb-attn summarize LOGDIR --peak-flops 312T --peak-bw 2.0T"),
              ".",
            ),
        h(
          "div",
          "muted small",
          [known && rl.source ? `from ${rl.source}` : "", known ? rl.note : "", `times: ${clockWords(rl)}, forward work per step`].filter(Boolean).join("; "),
        ),
        att ? this.attentionLine(att, known, rl.partial) : null,
      ),
      series.length ? chartEl : note("No phase here has both FLOPs and modeled bytes: nothing to place on the chart."),
      series.length ? this.legend(series, known) : null,
      memoryOnly.length
        ? h(
            "p",
            { class: "hint", attrs: { "data-testid": "roof-memory-note" } },
            `${memoryOnly.length} ${memoryOnly.length === 1 ? "phase" : "phases"} without FLOPs (${memoryOnly.map(phaseLabel).join(", ")}) ` +
              `${memoryOnly.length === 1 ? "moves" : "move"} memory only: no place on these axes; see the table, where % of roof is of the bandwidth roof.`,
          )
        : null,
      noBytes.length
        ? h("p", "hint", `${noBytes.map(phaseLabel).join(", ")}: FLOPs but no bytes modeled, so no intensity: not on the chart.`)
        : null,
      series.length ? h("p", "hint", "Hover a point for its figures; click a phase's point for the ops and kernels behind it.") : null,
      h("p", { class: "muted caveat", attrs: { "data-testid": "roof-caveat" } }, CAVEAT),
      h("h4", null, "Per layer and phase"),
      h("div", "table-wrap", this.table),
    );
    if (!series.length) return;
    // Made once its element is in the page, so that it gets its size.
    const c = createChart(chartEl);
    this.chart = c;
    rooflineChart(c.chart, { roofline: rl, series, main: att?.dtype ?? null });
    c.chart.on("click", (p) => {
      const d = p.data as { s?: number; i?: number } | undefined;
      const pt = d?.s !== undefined && d.i !== undefined ? series[d.s]?.points[d.i] : undefined;
      if (pt?.phase !== undefined && pt.layer !== undefined) this.actions.select({ layer: pt.layer, phase: pt.phase, backward: false });
    });
  }

  private attentionLine(att: Roof, known: boolean, partial: boolean): HTMLElement {
    const parts = [
      `${fmtIntensity(att.intensity)} FLOP/B`,
      fmtRate(att.flops_per_s),
      fmtBandwidth(att.bytes_per_s),
      ...(known && att.share !== null ? [`${fmtShare(att.share)} of its ceiling (${att.ceiling === null ? DASH : fmtRate(att.ceiling)})`] : []),
    ];
    return h(
      "p",
      { class: "meta-line", attrs: { "data-testid": "roof-attention" } },
      h("span", "stat-label", "attention, all layers: "),
      parts.join(", "),
      ": ",
      h("b", null, att.verdict),
      att.lower_bound ? h("span", "muted small", " (bytes a lower bound)") : null,
      partial ? partialMark("Partial: phases captured into a CUDA/HIP graph ran no kernel here, so this point leaves their work out") : null,
    );
  }

  private legend(series: PointSeries[], known: boolean): HTMLElement {
    return h(
      "div",
      "legend",
      ...series.map((x) =>
        x.label
          ? h("span", "legend-item", h("span", { class: "roof-diamond", style: { background: INK.text } }), "attention, all layers")
          : h("span", "legend-item", h("span", { class: "sw", style: { background: x.points[0]!.color, "border-radius": "50%" } }), x.name),
      ),
      known ? h("span", "legend-item muted small", "roofs: min(peak FLOP/s, intensity \u00d7 peak bandwidth) per precision; dashed: the ridge") : null,
    );
  }

  /** Every layer's phases with a roof, then the layer; attention last. A row opens its drill-down. */
  private rows(ws: WorkerSummary, rl: Roofline): HTMLElement {
    const clock = rl.clock === "cpu" ? "CPU self" : "device";
    const heads: [string, string, string][] = [
      ["layer", "", ""],
      ["phase", "", ""],
      ["dtype", "", "the peak class of its FLOPs"],
      ["bytes", "num", "the least bytes its forward ops move, from their shapes (\u2265: some op has no formula)"],
      ["FLOP/B", "num", "arithmetic intensity: FLOPs per byte moved"],
      ["FLOP/s", "num", "achieved"],
      ["B/s", "num", "achieved"],
      ["ceiling", "num", "attainable FLOP/s: min(peak FLOP/s, intensity \u00d7 peak bandwidth)"],
    ];
    const tail: [string, string, string][] = [
      [`${clock} time`, "num", "per step (mean), forward"],
      ["launches", "num", rl.clock === "cpu" ? "top-level ops per step" : "kernels per step"],
    ];
    const row = (cls: string, layer: LayerStats | null, phase: string | null, head: (HTMLElement | string)[], nbytes: number | null, r: Roof) => {
      const open = layer ? () => this.actions.select({ layer: layer.layer, phase, backward: false }) : null;
      return h(
        "tr",
        {
          class: cls,
          dataset: layer ? { layer: String(layer.layer), phase: phase ?? "" } : {},
          attrs: open ? { tabindex: 0 } : {},
          on: open ? { click: open, keydown: (ev) => ev.key === "Enter" && open() } : {},
        },
        ...head.map((x, i) => (i === 0 ? h("th", "row-head", x) : h("td", null, x))),
        h("td", "dtype", r.dtype ?? DASH),
        h("td", { class: "num bytes", title: r.lower_bound ? "a lower bound: some of its ops move data with no bytes formula" : "" }, nbytes === null ? DASH : `${r.lower_bound ? "\u2265 " : ""}${fmtBytes(nbytes)}`),
        h("td", "num intensity", fmtIntensity(r.intensity)),
        h("td", "num flops-per-s", r.flops_per_s > 0 ? fmtRate(r.flops_per_s) : DASH),
        h("td", "num bytes-per-s", fmtBandwidth(r.bytes_per_s)),
        h("td", "num ceiling", r.ceiling === null ? DASH : fmtRate(r.ceiling)),
        roofShareCell(r),
        roofBoundCell(r),
        h("td", "num time", fmtUs(r.time_us)),
        h("td", "num launches", fmtCount(r.launches)),
      );
    };
    const order = phasesOf(ws.layers);
    const body = h("tbody");
    for (const l of ws.layers) {
      const name = layerCategory(l, ws.layers);
      for (const phase of order) {
        const p = l.phases.find((x) => x.phase === phase);
        if (!p?.roof) continue;
        const sw = h("span", { class: "sw", style: { background: phaseColor(phase) } });
        body.appendChild(row("phase-row", l, phase, [name, h("span", "phase-name", sw, " ", phaseLabel(phase))], p.bytes, p.roof));
      }
      if (l.roof) body.appendChild(row("layer-row", l, null, [name, "whole layer"], l.bytes, l.roof));
    }
    const att = rl.attention;
    const total = ws.layers.reduce((a, l) => a + l.bytes, 0);
    return h(
      "table",
      { class: "grid roof-table", attrs: { "data-testid": "roof-table" } },
      h("thead", null, h("tr", null, ...heads.map(([t, c, title]) => h("th", { class: c, title }, t)), roofShareHeader(), roofBoundHeader(),
        ...tail.map(([t, c, title]) => h("th", { class: c, title }, t)))),
      body,
      att ? h("tfoot", null, row("attention-row", null, null, ["all layers", "attention"], total, att)) : null,
    );
  }
}
