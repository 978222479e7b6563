// The run's attention statistics per head (RunSummary.attn_stats, from its event files; the
// verdicts are analysis/measures/heads.py's) where the Layers × heads view shows them: each statistic's
// name, format and colour range, the banner that says where they come from (and that random
// weights say nothing), each head's tooltip lines and marks, and the scatter of each head's cost
// against its mass within the local window: which heads are expensive and local.

import { valueAxis } from "../axes";
import { createChart, esc, swatch, TOOLTIP_BASE, type EChart } from "../charts";
import { h, replace } from "../dom";
import { fmtFlops, fmtUs } from "../format";
import type { Actions } from "../state";
import { INK } from "../theme";
import type { AttnStats, HeadAttention, HeadStats, WorkerSummary } from "../types";
import { color as categorical } from "./run_colors";

/** The windows the runner measures (runner/attn_stats.py WINDOWS), those below S. */
const WINDOWS = "64, 128, 256, 512 and 1024";

/** A mass (a share of a query's attention) as a percentage, two decimals: near the 99 % of the
 * local verdict one decimal would round a head that is not local up to it. */
export function fmtMass(v: number): string {
  return `${(v * 100).toFixed(2)} %`;
}

export interface StatInfo {
  name: string;
  /** For the selector and tooltips: "window mass, 64 tokens". */
  title: string;
  /** What it measures, for the caption. */
  about: string;
  format: (v: number) => string;
  /** A share in [0, 1] (masses, entropy): drawn on a fixed 0..1 scale. */
  unit: boolean;
}

/** What a statistic's name (runner/attn_stats.py) means; unknown names are shown as they are. */
export function statInfo(name: string): StatInfo {
  const m = /^([a-z]+)_(\d+)$/.exec(name);
  const kind = m ? m[1] : name;
  const k = m ? m[2] : "";
  switch (kind) {
    case "entropy":
      return { name, title: "entropy (normalized)", unit: true, format: (v) => v.toFixed(3),
        about: "1: uniform over the keys a query may see, 0: all on one key" };
    case "sink":
      return { name, title: `sink mass, first ${k === "1" ? "token" : `${k} tokens`}`, unit: true, format: fmtMass,
        about: `the share of attention on the sequence's first ${k === "1" ? "token" : `${k} tokens`}` };
    case "window":
      return { name, title: `window mass, ${k} tokens`, unit: true, format: fmtMass,
        about: `the share of attention within ${k} tokens of the query: what a sliding window of ${k} keeps` };
    case "top":
      return { name, title: `top-${k} mass`, unit: true, format: fmtMass,
        about: `the share of attention on each query's ${k} largest probabilities` };
    case "distance":
      return { name, title: "mean distance", unit: false, format: (v) => `${v.toFixed(1)} tokens`,
        about: "the mean distance from a query to the keys it attends, weighted by attention" };
    default:
      return { name, title: name, unit: false, format: (v) => String(Number(v.toPrecision(4))), about: "as recorded" };
  }
}

/** The colour range of a statistic's heatmap: 0..1 for shares, 0..the largest value otherwise. */
export function statRange(info: StatInfo, stats: AttnStats): { min: number; max: number; text: [string, string] } {
  if (info.unit) return info.format === fmtMass ? { min: 0, max: 1, text: ["100 %", "0 %"] } : { min: 0, max: 1, text: ["1", "0"] };
  const top = Math.max(0, ...stats.heads.map((a) => a.values[info.name] ?? 0));
  return { min: 0, max: top > 0 ? top : 1, text: [info.format(top), info.format(0)] };
}

/** A head's marks as a bit set, the fifth value of a heatmap cell: 1 local, 2 sink. */
export function headMark(a: HeadAttention | undefined): number {
  return a ? (a.local ? 1 : 0) | (a.sink ? 2 : 0) : 0;
}

/** The badge a marked cell carries. */
export const MARK_TEXT = ["", "L", "S", "L S"];

/** The statistics by (layer, head). */
export function statsByHead(stats: AttnStats | null): Map<string, HeadAttention> {
  return new Map((stats?.heads ?? []).map((a) => [`${a.layer}/${a.head}`, a]));
}

/** The local verdict's rule in words: "at least 99.00 % of its attention within 64 tokens". */
function localRule(stats: AttnStats): string {
  return stats.window === null
    ? "not judged: no window mass was recorded (the sequences are 64 tokens or shorter)"
    : `at least ${fmtMass(stats.threshold)} of its attention within ${stats.window} tokens`;
}

/** The window mass the local verdict reads ("window_64"), null when none was recorded. */
export function windowStat(stats: AttnStats): string | null {
  return stats.window === null || !stats.stats.includes(`window_${stats.window}`) ? null : `window_${stats.window}`;
}

/** Where the statistics come from, above the chart: a warning for random weights. */
export function statsBanner(stats: AttnStats): HTMLElement {
  if (stats.note) {
    return h(
      "div",
      { class: "warn stats-banner", attrs: { role: "note" }, dataset: { testid: "attn-stats-banner" } },
      h("b", null, "\u26a0 "),
      stats.note,
    );
  }
  const weights = stats.weights === "checkpoint" ? "the model's own weights" : `weights: ${stats.weights}`;
  return h(
    "div",
    { class: "note stats-banner", dataset: { testid: "attn-stats-banner" } },
    `Attention statistics at step ${stats.step}, from ${stats.files.join(", ")} (${weights}).`,
  );
}

/** The legend of the heatmap's marks. */
export function marksLegend(stats: AttnStats): HTMLElement[] {
  return [
    h("span", { class: "legend-item", title: "analysis/measures/heads.py's local verdict" }, h("span", "mark-badge", "L"),
      `local: ${localRule(stats)}`),
    h("span", "legend-item", h("span", "mark-badge", "S"), `sink: at least ${fmtMass(stats.sink_mass)} on the first 4 tokens`),
  ];
}

/** Every statistic of a head, then its verdicts, as tooltip lines (HTML, data escaped). */
export function statLines(a: HeadAttention, stats: AttnStats, current: string | null = null): string[] {
  const lines = stats.stats.flatMap((name) => {
    const v = a.values[name];
    if (v === undefined) return [];
    const info = statInfo(name);
    const text = `${esc(info.title)}: <b>${esc(info.format(v))}</b>`;
    return [name === current ? `\u25b8 ${text}` : text];
  });
  const w = stats.window === null ? undefined : a.values[`window_${stats.window}`];
  const mass = esc(w === undefined ? "no mass" : fmtMass(w));
  const rule = esc(fmtMass(stats.threshold));
  if (stats.window === null) lines.push("locality not judged: no window mass recorded");
  else if (a.local) lines.push(`<b>local</b>: ${mass} within ${esc(stats.window)} tokens (\u2265 ${rule})`);
  else lines.push(`not local: ${mass} within ${esc(stats.window)} tokens (&lt; ${rule})`);
  if (a.sink) lines.push(`<b>sink</b>: ${esc(fmtMass(a.values["sink_4"] ?? 0))} on the first 4 tokens (\u2265 ${esc(fmtMass(stats.sink_mass))})`);
  return lines;
}

/** The worker's clock for per-head time: device time where it has kernels (analysis/measures/heads.py). */
export function headClock(ws: WorkerSummary): "device" | "cpu" {
  return ws.device !== "cpu" ? "device" : "cpu";
}

/** A head's time on the worker's clock. */
export function headTime(ws: WorkerSummary, hd: HeadStats): number {
  return headClock(ws) === "device" ? hd.device_us : hd.cpu_us;
}

/** A head's cost as tooltip lines. */
export function costLines(ws: WorkerSummary, hd: HeadStats | undefined): string[] {
  if (!hd) return ["<i>no cost: the trace lists no such head</i>"];
  const clock = headClock(ws) === "device" ? "device time" : "CPU time";
  return [
    `${clock}: <b>${esc(fmtUs(headTime(ws, hd)))}</b> per step${hd.derived ? " <i>(derived: an even share of the layer)</i>" : " (measured)"}`,
    `FLOPs: <b>${esc(fmtFlops(hd.flops))}</b>`,
  ];
}

/** Colours by layer: Tableau's ten where there are at most ten layers, else a ramp over them. */
const RAMP = [[63, 81, 181], [0, 137, 123], [249, 168, 37], [230, 74, 25]] as const;

export function layerHue(index: number, count: number): string {
  if (count <= 10) return categorical(index);
  const t = (index / Math.max(1, count - 1)) * (RAMP.length - 1);
  const i = Math.min(RAMP.length - 2, Math.floor(t));
  const f = t - i;
  const [a, b] = [RAMP[i]!, RAMP[i + 1]!];
  const c = a.map((x, j) => Math.round(x + (b[j]! - x) * f));
  return `rgb(${c[0]}, ${c[1]}, ${c[2]})`;
}

/** A tick of a 0..1 axis as a percentage, with the decimals a zoomed-in tick needs. */
function fmtPercentTick(v: number): string {
  return `${Number((v * 100).toFixed(2))} %`;
}

interface Point {
  a: HeadAttention;
  cost: HeadStats;
  x: number;
  y: number;
}

/** Each head's time against its mass within the local window, by layer; the threshold dashed. */
export class HeadScatter {
  readonly el: HTMLElement;
  private readonly chartEl: HTMLElement;
  private chart: { chart: EChart; dispose: () => void } | null = null;
  private layers: Point[][] = [];
  private ws: WorkerSummary | null = null;

  constructor(private readonly actions: Actions) {
    this.chartEl = h("div", { class: "chart", style: { height: "380px" }, dataset: { testid: "head-scatter-chart" } });
    this.el = h("div", { class: "head-scatter", dataset: { testid: "head-scatter" } });
  }

  /** Renders; call once `el` is in the document, so the chart gets its size. */
  update(ws: WorkerSummary, stats: AttnStats): void {
    this.ws = ws;
    const key = windowStat(stats);
    if (key === null) {
      this.disposeChart();
      replace(
        this.el,
        h("h3", null, "Which heads are expensive and local"),
        h("p", { class: "note", dataset: { testid: "scatter-no-window" } }, `No head's mass within a window was recorded (windows of ${WINDOWS} tokens are measured only below the sequence length): no head can be judged local.`),
      );
      return;
    }
    const cost = new Map(ws.layers.flatMap((l) => l.heads.map((hd): [string, HeadStats] => [`${l.layer}/${hd.head}`, hd])));
    const byLayer = new Map<number, Point[]>();
    let missing = 0;
    for (const a of stats.heads) {
      const c = cost.get(`${a.layer}/${a.head}`);
      const x = a.values[key];
      if (!c || x === undefined) {
        missing += 1;
        continue;
      }
      byLayer.set(a.layer, [...(byLayer.get(a.layer) ?? []), { a, cost: c, x, y: headTime(ws, c) }]);
    }
    const layerIds = [...byLayer.keys()].sort((p, q) => p - q);
    this.layers = layerIds.map((l) => byLayer.get(l)!);
    const clock = headClock(ws) === "device" ? "device time" : "CPU time";
    const derived = this.layers.flat().filter((p) => p.cost.derived).length;
    const head = h("h3", null, "Which heads are expensive and local");
    const intro = h(
      "p",
      "hint",
      `Each head's forward ${clock} per step against its attention mass within ${stats.window} tokens. Right of the dashed line (${fmtMass(stats.threshold)}) a head is local: a sliding window of ${stats.window} would keep nearly all it attends to. High and right: the heads where a window pays most. Drag the slider (or scroll over the chart) to spread the heads near the line; click a head for its layer's ops.`,
    );
    if (!this.layers.length) {
      this.disposeChart();
      replace(this.el, head, h("p", "note", `No head has both a cost in this trace and a mass within ${stats.window} tokens.`));
      return;
    }
    const colors = new Map(layerIds.map((l, i) => [l, layerHue(i, layerIds.length)]));
    const legend = h(
      "div",
      "legend",
      ...(layerIds.length <= 10
        ? layerIds.map((l) => h("span", "legend-item", h("span", { class: "sw", style: { background: colors.get(l)!, "border-radius": "50%" } }), `L${l}`))
        : [h("span", "legend-item", `L${layerIds[0]}`, h("span", { class: "ramp", style: { background: `linear-gradient(90deg, ${layerIds.map((l) => colors.get(l)).join(", ")})` } }), `L${layerIds[layerIds.length - 1]}`)]),
      h("span", "legend-item", h("span", "dot filled"), "local"),
      h("span", "legend-item", h("span", "dot hollow"), "not local"),
      h("span", "legend-item", h("span", "dot diamond"), "sink"),
      h("span", "legend-item", h("span", "dash-line"), `threshold ${fmtMass(stats.threshold)}`),
    );
    const hints = [
      derived
        ? h("p", { class: "hint", dataset: { testid: "scatter-derived" } },
          `${derived === this.layers.flat().length ? "All" : derived} heads' times are derived (no head scopes): an even share of their layer, so a layer's heads sit at one height. Profile with --per-head to measure each.`)
        : null,
      missing ? h("p", "hint", `${missing} head${missing === 1 ? "" : "s"} with statistics but no cost in this trace (or no ${key}): not drawn.`) : null,
    ];
    replace(this.el, head, intro, this.chartEl, legend, ...hints);
    if (!this.chart) {
      this.chart = createChart(this.chartEl);
      this.chart.chart.on("click", (p) => {
        const pt = this.layers[p.seriesIndex ?? -1]?.[p.dataIndex];
        if (pt && this.ws?.layers.some((l) => l.layer === pt.a.layer)) this.actions.select({ layer: pt.a.layer, phase: null, backward: false });
      });
    }
    const top = Math.max(0, ...this.layers.flat().map((p) => p.y));
    const lowest = Math.min(stats.threshold, ...this.layers.flat().map((p) => p.x));
    const start = Math.max(0, Math.floor((lowest - 0.05) * 10) / 10);
    const y = valueAxis(fmtUs, 0, top);
    const series: object[] = this.layers.map((pts) => {
      const c = colors.get(pts[0]!.a.layer)!;
      return {
        type: "scatter",
        name: `L${pts[0]!.a.layer}`,
        z: 3,
        data: pts.map((p) => ({
          value: [p.x, p.y],
          symbol: p.a.sink ? "diamond" : "circle",
          symbolSize: p.a.sink ? 15 : 11,
          itemStyle: p.a.local
            ? { color: c, borderColor: INK.text, borderWidth: 1.5 }
            : { color: "rgba(255,255,255,0)", borderColor: c, borderWidth: 2 },
        })),
      };
    });
    series.push({
      type: "line",
      name: "threshold",
      silent: true,
      z: 2,
      symbol: "none",
      lineStyle: { type: "dashed", width: 1.5, color: INK.muted },
      data: [[stats.threshold, y.min], [stats.threshold, y.max]],
      endLabel: { show: true, formatter: "local \u2192", color: INK.muted, fontSize: 11, offset: [-52, 2] },
    });
    this.chart.chart.resize();
    this.chart.chart.setOption(
      {
        animation: false,
        grid: { left: 70, right: 30, top: 34, bottom: 78 },
        tooltip: {
          ...TOOLTIP_BASE,
          trigger: "item",
          formatter: (p: unknown) => {
            const it = p as { seriesIndex: number; dataIndex: number };
            const pt = this.layers[it.seriesIndex]?.[it.dataIndex];
            if (!pt) return "";
            return [
              `${swatch(colors.get(pt.a.layer)!)}<b>Layer ${esc(pt.a.layer)}, head ${esc(pt.a.head)}</b>`,
              ...costLines(ws, pt.cost),
              ...statLines(pt.a, stats, key),
            ].join("<br>");
          },
        },
        xAxis: {
          type: "value",
          min: 0,
          max: 1,
          name: `attention mass within ${stats.window} tokens`,
          nameLocation: "middle",
          nameGap: 28,
          axisLabel: { formatter: fmtPercentTick },
          splitLine: { lineStyle: { color: INK.grid } },
        },
        // Local heads all sit between the threshold and 100 %: the chart opens on the masses the
        // heads have, and the slider or the wheel zooms further in, or out to 0 %.
        dataZoom: [
          { type: "inside", xAxisIndex: 0, filterMode: "none", startValue: start, endValue: 1 },
          {
            type: "slider",
            xAxisIndex: 0,
            filterMode: "none",
            startValue: start,
            endValue: 1,
            height: 16,
            bottom: 6,
            showDetail: true,
            labelFormatter: (v: number) => fmtPercentTick(v),
          },
        ],
        yAxis: { type: "value", name: `forward ${clock} per step`, nameTextStyle: { align: "left" }, ...y, splitLine: { lineStyle: { color: INK.grid } } },
        series,
      },
      { notMerge: true },
    );
  }

  private disposeChart(): void {
    this.chart?.dispose();
    this.chart = null;
  }

  dispose(): void {
    this.disposeChart();
    this.ws = null;
  }
}
