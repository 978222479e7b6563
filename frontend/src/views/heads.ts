// The layer x head heatmap for one metric, named above the chart. Per-head figures the trace did
// not measure (no head scopes) are derived from the layer: those cells are dimmed and hatched, and
// a note says in words what was split (summary.py `_heads`). The chart's option (heatmapOption)
// and that note are shared with the ranks view's global head map. Where the run recorded
// attention statistics per head (RunSummary.attn_stats), the heatmap also offers them, marks
// local and sink heads, and a scatter below puts each head's cost against its locality
// (./head_stats).

import type { EChartsCoreOption } from "echarts/core";
import { createChart, esc, TOOLTIP_BASE, type EChart } from "../charts";
import { h, replace, select } from "../dom";
import { HEAD_METRICS, headValue, metric, type HeadMetricKey } from "../metrics";
import { SPREAD_METRICS, spreadTitle } from "../spread";
import { defaultTime, type Actions, type State } from "../state";
import { UNSPLIT_PHASES, type AttnStats, type WorkerSummary } from "../types";
import { note } from "./common";
import {
  costLines,
  headMark,
  HeadScatter,
  MARK_TEXT,
  marksLegend,
  statInfo,
  statLines,
  statRange,
  statsBanner,
  statsByHead,
} from "./head_stats";

/** A heatmap cell: column (head), row, value, 1 when the value is derived, not measured, and the
 * head's marks (head_stats.headMark: 1 local, 2 sink). */
export type HeatCell = [col: number, row: number, value: number, derived: number, mark?: number];

/** The selector's value of an attention statistic (cost metrics are their HeadMetricKey). */
const STAT = "stat:";

let hatch: HTMLCanvasElement | null = null;

function hatchPattern(): HTMLCanvasElement {
  if (!hatch) {
    hatch = document.createElement("canvas");
    hatch.width = hatch.height = 6;
    const ctx = hatch.getContext("2d");
    if (ctx) {
      ctx.strokeStyle = "rgba(255,255,255,0.75)";
      ctx.lineWidth = 1.5;
      ctx.beginPath();
      ctx.moveTo(0, 6);
      ctx.lineTo(6, 0);
      ctx.moveTo(-1, 1);
      ctx.lineTo(1, -1);
      ctx.moveTo(5, 7);
      ctx.lineTo(7, 5);
      ctx.stroke();
    }
  }
  return hatch;
}

function luminance(color: string): number {
  const m = /^#([0-9a-f]{6})$/i.exec(color);
  const rgb = /rgba?\((\d+),\s*(\d+),\s*(\d+)/.exec(color);
  let r = 255;
  let g = 255;
  let b = 255;
  if (m && m[1]) {
    const n = parseInt(m[1], 16);
    r = (n >> 16) & 255;
    g = (n >> 8) & 255;
    b = n & 255;
  } else if (rgb) {
    r = Number(rgb[1]);
    g = Number(rgb[2]);
    b = Number(rgb[3]);
  }
  return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255;
}

/** What derived (hatched) heads hold, in words: shown wherever derived heads are. ``share``:
 * "core" in a run's heads view (summary.py `_heads`), "rank" in the ranks view's global map,
 * whose derived times are an even share of the rank's forward time in the layer less its collectives (ranks.py
 * `_global_heads`), so that a slow rank never has fast heads. */
export function derivedNote(share: "core" | "rank" = "core"): HTMLElement {
  const what = share === "core"
    ? `the layer's core phases only, everything but ${UNSPLIT_PHASES.join(", ")}, which are not split by head`
    : "its rank's forward time in the layer less the collectives inside it (what the rank's layer column holds, a straggler's delay included)";
  return h(
    "p",
    { class: "hint derived-note", dataset: { testid: "derived-note" } },
    h("b", null, "Derived heads"),
    ` (hatched): the trace has no head scopes, so each head's time is an even share of ${what}. Its time is that even share, not a measurement; its FLOPs and bytes are exact per head (the heads have one shape).`,
  );
}

/** Whose heads a rank's map shows: that rank's alone (the Ranks view's map sets every rank's together,
 *  a mean over replicas); nothing to say of a trace without a rank. */
function whose(ws: WorkerSummary): string {
  return ws.rank !== null ? `rank ${ws.rank}'s alone, ` : "";
}

/** The clock or source of a head metric, for the caption. */
const HEAD_SOURCE: Record<HeadMetricKey, string> = {
  cpu_us: "CPU clock",
  device_us: "device clock: the kernels' time",
  flops: "counted from the ops' input shapes",
  alloc_bytes: "bytes allocated",
  sxs_bytes: "(B, H, S, S) score tensors allocated",
};

export interface Heatmap {
  rows: string[];
  columns: string[];
  cells: HeatCell[];
  format: (v: number) => string;
  /** The tooltip of cell `i`, as HTML: the caller escapes what comes from data. */
  tooltip: (i: number) => string;
  /** Extra bottom margin for multi-line column labels. */
  labelLines?: number;
  /** A fixed colour range and its ends' labels (default: 0 to the largest value). */
  range?: { min: number; max: number; text: [string, string] };
  /** The colour ramp, low to high (default: the cost metrics' oranges). */
  colors?: string[];
}

const COST_COLORS = ["#fff3e0", "#fb8c00", "#bf360c"];
/** Statistics in blues, apart from the costs' oranges: another kind of figure. */
const STAT_COLORS = ["#e3f2fd", "#42a5f5", "#0d47a1"];

/**
 * The ECharts option of a layer x head heatmap (used here and by the ranks view's global heads):
 * derived cells dimmed and hatched, marked cells (local, sink heads) outlined and badged, values
 * written in cells wide enough for them.
 */
export function heatmapOption(map: Heatmap): EChartsCoreOption {
  const maxValue = Math.max(0, ...map.cells.map((c) => c[2]));
  const range = map.range ?? { min: 0, max: maxValue > 0 ? maxValue : 1, text: [map.format(maxValue), "0"] };
  const extra = ((map.labelLines ?? 1) - 1) * 14;
  const pattern = hatchPattern();
  return {
    animation: false,
    grid: { left: 60, right: 20, top: 10, bottom: 70 + extra },
    tooltip: {
      ...TOOLTIP_BASE,
      trigger: "item",
      formatter: (p: unknown) => map.tooltip((p as { dataIndex: number }).dataIndex),
    },
    xAxis: {
      type: "category",
      name: "head",
      nameLocation: "middle",
      nameGap: 24 + extra,
      data: map.columns,
      axisLabel: { lineHeight: 14 },
      splitArea: { show: false },
    },
    yAxis: { type: "category", data: map.rows, inverse: true },
    visualMap: {
      type: "continuous",
      min: range.min,
      max: range.max,
      dimension: 2,
      orient: "horizontal",
      left: "center",
      bottom: 0,
      itemHeight: 220,
      itemWidth: 12,
      calculable: false,
      text: range.text,
      inRange: { color: map.colors ?? COST_COLORS },
      textStyle: { fontSize: 11 },
    },
    series: [
      {
        type: "custom",
        data: map.cells,
        encode: { x: 0, y: 1 },
        renderItem: (_params: unknown, api: any) => {
          const c = api.coord([api.value(0), api.value(1)]) as number[];
          const size = api.size([1, 1]) as number[];
          const w = Math.max(1, (size[0] ?? 0) - 2);
          const hh = Math.max(1, (size[1] ?? 0) - 2);
          const shape = { x: (c[0] ?? 0) - w / 2, y: (c[1] ?? 0) - hh / 2, width: w, height: hh };
          const fill = String(api.visual("color"));
          const derived = api.value(3) === 1;
          const children: object[] = [{ type: "rect", shape, style: { fill, opacity: derived ? 0.72 : 1 } }];
          if (derived) children.push({ type: "rect", shape, silent: true, style: { fill: { image: pattern, repeat: "repeat" } } });
          const mark = Number(api.value(4)) || 0;
          if (mark) {
            // Local and sink heads: outlined, and badged where the cell has room.
            const inset = { x: shape.x + 1, y: shape.y + 1, width: Math.max(1, w - 2), height: Math.max(1, hh - 2) };
            children.push({ type: "rect", shape: inset, silent: true, style: { fill: "none", stroke: "#212121", lineWidth: 2 } });
            const label = MARK_TEXT[mark] ?? "";
            const bw = label.length * 7 + 7;
            if (w >= bw + 8 && hh >= 20) {
              const box = { x: shape.x + 4, y: shape.y + 4, width: bw, height: 15, r: 2 };
              children.push(
                { type: "rect", shape: box, silent: true, style: { fill: "#fff", stroke: "#212121", lineWidth: 1 } },
                {
                  type: "text",
                  silent: true,
                  style: {
                    text: label,
                    x: box.x + bw / 2,
                    y: box.y + 8,
                    align: "center",
                    verticalAlign: "middle",
                    fontSize: 11,
                    fontWeight: "bold",
                    fill: "#212121",
                  },
                },
              );
            }
          }
          if (w > 56 && hh > 14) {
            children.push({
              type: "text",
              silent: true,
              style: {
                text: map.format(Number(api.value(2))),
                x: c[0],
                y: c[1],
                align: "center",
                verticalAlign: "middle",
                fontSize: 11,
                // A derived cell is drawn at 0.72 opacity over white: lighter than its colour.
                fill: (derived ? 0.72 * luminance(fill) + 0.28 : luminance(fill)) < 0.55 ? "#fff" : "#212121",
                // A halo in the cell's colour keeps the text readable over the hatching.
                stroke: fill,
                lineWidth: 3,
              },
            });
          }
          return { type: "group", children };
        },
      },
    ],
  };
}

export class HeadsView {
  readonly el: HTMLElement;
  private readonly controls: HTMLElement;
  private readonly body: HTMLElement;
  private readonly chartEl: HTMLElement;
  private readonly legend: HTMLElement;
  private readonly caption: HTMLElement;
  private readonly scatter: HeadScatter;
  private chart: EChart | null = null;
  private disposeChart: (() => void) | null = null;
  private last: { ws: WorkerSummary | null; metric: string; stats: AttnStats | null } = { ws: null, metric: "", stats: null };
  private cells: HeatCell[] = [];
  /** The layer of each row. */
  private rows: number[] = [];
  private ws: WorkerSummary | null = null;

  constructor(private readonly actions: Actions) {
    this.controls = h("div", "toolbar");
    this.chartEl = h("div", { class: "chart", dataset: { testid: "heads-chart" } });
    this.legend = h("div", "legend");
    this.caption = h("p", { class: "metric-caption", dataset: { testid: "heads-metric" } });
    this.scatter = new HeadScatter(actions);
    this.body = h("div");
    this.el = h("section", "heads", this.controls, this.body);
  }

  update(s: State, ws: WorkerSummary): void {
    const stats = s.summary.data?.attn_stats ?? null;
    const key: HeadMetricKey = s.headMetric ?? defaultTime(ws);
    // A statistic this run did not record (another run's choice) leaves the cost metric shown.
    const stat = stats && s.headStat !== null && stats.stats.includes(s.headStat) ? s.headStat : null;
    const shown = stat !== null ? STAT + stat : key;
    if (this.last.ws === ws && this.last.metric === shown && this.last.stats === stats) return;
    this.last = { ws, metric: shown, stats };
    this.ws = ws;
    const options = HEAD_METRICS.filter((k) => ws.device !== "cpu" || k !== "device_us").map((k) => ({
      value: k as string,
      label: metric(k).title,
      ...(stats ? { group: "cost" } : {}),
    }));
    for (const name of stats?.stats ?? []) {
      const info = statInfo(name);
      options.push({ value: STAT + name, label: info.title, group: "attention statistics" });
    }
    replace(
      this.controls,
      h(
        "label",
        null,
        "Metric ",
        select(
          options,
          shown,
          (v) => this.actions.patch(v.startsWith(STAT) ? { headStat: v.slice(STAT.length) } : { headMetric: v as HeadMetricKey, headStat: null }),
          "Heatmap metric",
        ),
      ),
    );
    const layers = ws.layers.filter((l) => l.heads.length > 0);
    if (layers.length === 0 && !stats) {
      this.disposeChartNow();
      replace(
        this.body,
        note(
          "No per-head figures: the trace has no head count for any layer (it needs record_shapes=True, or head scopes from --per-head).",
        ),
      );
      return;
    }
    const marks = statsByHead(stats);
    const banner = stats ? statsBanner(stats) : null;
    if (stat !== null && stats) this.showStat(ws, stats, stat, banner);
    else if (layers.length === 0) {
      this.disposeChartNow();
      replace(
        this.body,
        banner,
        note("No per-head cost: the trace has no head count for any layer (it needs record_shapes=True, or head scopes from --per-head). Pick an attention statistic above."),
        this.scatterEl(stats),
      );
    } else this.showCost(ws, key, stats, marks, banner);
    if (stats) this.scatter.update(ws, stats);
    else this.scatter.dispose();
  }

  private scatterEl(stats: AttnStats | null): HTMLElement | null {
    return stats ? this.scatter.el : null;
  }

  private showCost(ws: WorkerSummary, key: HeadMetricKey, stats: AttnStats | null, marks: ReturnType<typeof statsByHead>, banner: HTMLElement | null): void {
    const layers = ws.layers.filter((l) => l.heads.length > 0);
    const m = metric(key);
    const maxHeads = Math.max(...layers.map((l) => Math.max(...l.heads.map((x) => x.head)) + 1));
    const cells: HeatCell[] = [];
    layers.forEach((l, row) => {
      for (const hd of l.heads) cells.push([hd.head, row, headValue(hd, key), hd.derived ? 1 : 0, headMark(marks.get(`${l.layer}/${hd.head}`))]);
    });
    this.cells = cells;
    this.rows = layers.map((l) => l.layer);
    const anyDerived = cells.some((c) => c[3] === 1);
    const anyMeasured = cells.some((c) => c[3] === 0);
    const steps = ws.step_count === 1 ? "the profiled step" : `the ${ws.step_count} profiled steps`;
    // Measured heads carry their time's spread over steps (derived ones are a share of the layer's).
    const headOf = (c: HeatCell) => layers[c[1]]?.heads.find((x) => x.head === c[0]);
    const noisy = cells.filter((c) => headOf(c)?.spread[key]?.noisy).length;
    const where = anyMeasured ? (anyDerived ? "in head scopes, or derived" : "in each head's own scope") : "derived from the layer";
    replace(
      this.caption,
      h("span", "stat-label", "shown: "),
      h("b", null, `${m.title} per step`),
      ` by layer and head (${HEAD_SOURCE[key] ?? m.title}), forward only, ${where}; ${whose(ws)}mean over ${steps}.`,
    );
    const noisyEl = noisy
      ? h("p", "hint", h("span", { class: "noisy", dataset: { testid: "noisy-heads" }, title: "Their steps spread over 20 % of their median: hover a head for its range." }, `\u00b1 ${noisy} noisy head${noisy === 1 ? "" : "s"}`))
      : null;
    replace(this.body, banner, this.caption, noisyEl, this.chartEl, this.legend, anyDerived ? derivedNote() : null, this.scatterEl(stats));
    replace(
      this.legend,
      anyMeasured ? h("span", "legend-item", h("span", "sw measured"), "measured (head scopes)") : null,
      anyDerived
        ? h(
            "span",
            "legend-item",
            h("span", "sw derived"),
            "derived: split evenly from the layer (see below)",
          )
        : null,
      ...(stats ? marksLegend(stats) : []),
    );
    this.draw({
      rows: this.rows.map((l) => `L${l}`),
      columns: Array.from({ length: maxHeads }, (_, i) => String(i)),
      cells,
      format: m.format,
      tooltip: (i) => {
        const cell = this.cells[i];
        if (!cell) return "";
        const layer = layers[cell[1]];
        const a = marks.get(`${layer?.layer}/${cell[0]}`);
        return [
          `<b>Layer ${esc(layer?.layer ?? "?")}, head ${esc(cell[0])}</b>`,
          `${esc(m.title)}: <b>${esc(m.format(cell[2]))}</b>`,
          cell[3] ? "<i>derived: split evenly from the layer</i>" : "measured",
          ...(cell[3] || !SPREAD_METRICS.includes(key) ? [] : [esc(spreadTitle(headOf(cell)?.spread[key], m.format))]),
          ...(a && stats ? ["", ...statLines(a, stats)] : []),
        ].join("<br>");
      },
    }, layers.length);
  }

  /** The heatmap of one attention statistic: the rows are the layers that recorded it. */
  private showStat(ws: WorkerSummary, stats: AttnStats, stat: string, banner: HTMLElement | null): void {
    const info = statInfo(stat);
    const heads = stats.heads.filter((a) => a.values[stat] !== undefined);
    this.rows = [...new Set(heads.map((a) => a.layer))].sort((p, q) => p - q);
    const rowOf = new Map(this.rows.map((l, i) => [l, i]));
    const cells: HeatCell[] = heads.map((a) => [a.head, rowOf.get(a.layer)!, a.values[stat]!, 0, headMark(a)]);
    this.cells = cells;
    const byCell = new Map(heads.map((a) => [`${a.layer}/${a.head}`, a]));
    const cost = new Map(ws.layers.flatMap((l) => l.heads.map((hd) => [`${l.layer}/${hd.head}`, hd] as const)));
    const maxHeads = Math.max(1, ...heads.map((a) => a.head + 1));
    replace(
      this.caption,
      h("span", "stat-label", "shown: "),
      h("b", null, info.title),
      ` by layer and head (${info.about}); mean over queries and sequences, step ${stats.step}.`,
    );
    replace(this.body, banner, this.caption, this.chartEl, this.legend, this.scatterEl(stats));
    replace(this.legend, ...marksLegend(stats));
    this.draw({
      rows: this.rows.map((l) => `L${l}`),
      columns: Array.from({ length: maxHeads }, (_, i) => String(i)),
      cells,
      format: info.format,
      range: statRange(info, stats),
      colors: STAT_COLORS,
      tooltip: (i) => {
        const cell = this.cells[i];
        const layer = cell ? this.rows[cell[1]] : undefined;
        const a = cell ? byCell.get(`${layer}/${cell[0]}`) : undefined;
        if (!cell || !a) return "";
        return [
          `<b>Layer ${esc(a.layer)}, head ${esc(a.head)}</b>`,
          ...statLines(a, stats, stat),
          "",
          ...costLines(ws, cost.get(`${a.layer}/${a.head}`)),
        ].join("<br>");
      },
    }, this.rows.length);
  }

  private draw(map: Heatmap, rows: number): void {
    this.chartEl.style.height = `${Math.min(900, Math.max(180, rows * 30 + 90))}px`;
    if (!this.chart) {
      const c = createChart(this.chartEl);
      this.chart = c.chart;
      this.disposeChart = c.dispose;
      this.chart.on("click", (p) => {
        const cell = this.cells[p.dataIndex];
        const layer = cell ? this.rows[cell[1]] : undefined;
        if (layer !== undefined && this.ws?.layers.some((l) => l.layer === layer)) this.actions.select({ layer, phase: null, backward: false });
      });
    }
    this.chart.resize();
    this.chart.setOption(heatmapOption(map), { notMerge: true });
  }

  private disposeChartNow(): void {
    this.disposeChart?.();
    this.chart = null;
    this.disposeChart = null;
  }

  dispose(): void {
    this.disposeChartNow();
    this.scatter.dispose();
    this.last = { ws: null, metric: "", stats: null };
  }
}
