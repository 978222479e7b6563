// The roofline chart, for the run's Roofline tab and Compare's overlay: achieved FLOP/s against
// arithmetic intensity (FLOPs per byte) on log-log axes, under the roofs min(P, I·W) of the peak
// classes the points use (P: the class's peak FLOP/s, W: the peak bandwidth), with the main class's
// ridge I = P/W dashed. Only work with FLOPs and bytes has a place on these axes: phases that move
// memory only (scale, mask, softmax...) are left to the tables. The figures are the engine's
// (analysis/measures/roofline.py); nothing here computes a roof's share or verdict.

import { logAxis } from "../axes";
import { esc, swatch, TOOLTIP_BASE, type EChart } from "../charts";
import { fmtBandwidth, fmtCount, fmtIntensity, fmtRate, fmtShare, fmtUs } from "../format";
import { INK } from "../theme";
import type { Roof, Roofline } from "../types";

/** The caveat every roofline view carries. */
export const CAVEAT = "A roofline is an upper bound, not a prediction: few kernels get near their ceiling.";

/** Whether the peaks draw roofs: a FLOP/s per class and a bandwidth (the engine's ``Peaks.known``). */
export function peaksKnown(rl: Roofline | null): boolean {
  return !!rl && Object.keys(rl.peak_flops).length > 0 && rl.peak_bytes_per_s !== null;
}

/** Whether a roof has a place on log-log axes: FLOPs and bytes. */
export function plotted(r: Roof | null | undefined): r is Roof {
  return !!r && r.intensity !== null && r.intensity > 0 && r.flops_per_s > 0;
}

/** "CPU self time" or "device time": the clock of a roofline's times. */
export function clockWords(rl: Roofline): string {
  return rl.clock === "cpu" ? "CPU self time" : "device time";
}

/** One point: a phase of a layer, a phase over all layers (Compare), or attention as a whole. */
export interface RoofPoint {
  roof: Roof;
  /** Its tooltip's first line, plain text: "L0 · Q·Kᵀ", "demo/naive · softmax". */
  title: string;
  color: string;
  /** What a click opens, for a phase of a layer. */
  layer?: number;
  phase?: string;
}

/** Points drawn alike: a phase's (the run view), a run's (Compare), or attention's. */
export interface PointSeries {
  name: string;
  symbol: string;
  size: number;
  points: RoofPoint[];
  /** A label drawn beside each point ("attention"). */
  label?: string;
}

interface RoofClass {
  classes: string[];
  peak: number;
}

/** The roofs to draw: each peak class some point uses (fp32 where none says), classes with the
 * same peak as one ("bf16 = fp16"), lowest first. */
export function roofClasses(rl: Roofline, dtypes: (string | null)[]): RoofClass[] {
  const used = [...new Set(dtypes.filter((d): d is string => !!d && rl.peak_flops[d] !== undefined))];
  if (!used.length) {
    const fallback = rl.peak_flops["fp32"] !== undefined ? "fp32" : Object.keys(rl.peak_flops)[0];
    if (fallback) used.push(fallback);
  }
  const byPeak = new Map<number, string[]>();
  for (const c of used) {
    const p = rl.peak_flops[c]!;
    byPeak.set(p, [...(byPeak.get(p) ?? []), c]);
  }
  return [...byPeak].map(([peak, classes]) => ({ peak, classes })).sort((a, b) => a.peak - b.peak);
}

/** A log axis's ends around the values: a margin of `pad` either way, widened until two powers of
 * ten fall inside, so that two ticks are labelled. */
function logRange(values: number[], pad: number): [number, number] {
  const vs = values.filter((v) => Number.isFinite(v) && v > 0);
  let lo = vs.length ? Math.min(...vs) / pad : 1;
  let hi = vs.length ? Math.max(...vs) * pad : 10;
  while (Math.floor(Math.log10(hi)) - Math.ceil(Math.log10(lo)) < 1) {
    lo = Math.pow(10, Math.ceil(Math.log10(lo)) - 1);
    if (Math.floor(Math.log10(hi)) - Math.ceil(Math.log10(lo)) < 1) hi = Math.pow(10, Math.floor(Math.log10(hi)) + 1);
  }
  return [lo, hi];
}

/** A roof's tooltip lines after its title: precision, intensity, achieved, ceiling and share, verdict, time. */
export function roofLines(r: Roof, rl: Roofline | null): string[] {
  const clock = rl ? clockWords(rl) : "time";
  const unit = rl?.clock === "cpu" ? "top-level ops" : "kernels";
  const share =
    r.share === null
      ? ""
      : r.ceiling !== null
        ? ` \u00b7 <b>${esc(fmtShare(r.share))}</b> of roof`
        : ` \u00b7 <b>${esc(fmtShare(r.share))}</b> of the bandwidth roof`;
  return [
    `precision: ${esc(r.dtype ?? "no FLOPs")}`,
    `intensity: <b>${esc(fmtIntensity(r.intensity))}</b> FLOP/B`,
    `achieved: <b>${esc(fmtRate(r.flops_per_s))}</b>, ${esc(fmtBandwidth(r.bytes_per_s))}`,
    `ceiling: ${r.ceiling === null ? "\u2014" : esc(fmtRate(r.ceiling))}${share}`,
    `<b>${esc(r.verdict)}</b>`,
    `${esc(fmtUs(r.time_us))} per step (${esc(clock)}), ${esc(fmtCount(r.launches))} ${unit}`,
    ...(r.lower_bound ? ["bytes a lower bound: some of its ops move data with no bytes formula"] : []),
  ];
}

/** The roofs as line series over [x0, x1] (clipped below y0), the ridge of `main`'s class dashed. */
function roofSeries(rl: Roofline, classes: RoofClass[], main: string, x: [number, number], y0: number, angle: number): object[] {
  const w = rl.peak_bytes_per_s;
  if (w === null) return [];
  const start = Math.max(x[0], y0 / w);
  const out: object[] = [];
  const mainClass = classes.find((c) => c.classes.includes(main)) ?? classes[classes.length - 1];
  for (const c of classes) {
    const ridge = c.peak / w;
    const isMain = c === mainClass;
    const data =
      ridge <= start ? [[start, c.peak], [x[1], c.peak]] : ridge >= x[1] ? [[start, start * w], [x[1], x[1] * w]] : [[start, start * w], [ridge, c.peak], [x[1], c.peak]];
    out.push({
      type: "line",
      id: `\u0000roof ${c.classes.join(" = ")}`,
      name: `roof ${c.classes.join(" = ")}`,
      silent: true,
      symbol: "none",
      z: 1,
      lineStyle: { width: isMain ? 2 : 1.5, color: isMain ? INK.line : INK.muted, type: isMain ? "solid" : "dashed" },
      data,
      endLabel: {
        show: true,
        formatter: () => `${c.classes.join(" = ")}: ${fmtRate(c.peak)}`,
        align: "right",
        verticalAlign: "bottom",
        offset: [-10, -4],
        color: isMain ? INK.text : INK.muted,
        fontSize: 11,
      },
    });
  }
  if (mainClass) {
    const ridge = mainClass.peak / w;
    if (ridge > x[0] && ridge < x[1]) {
      out.push({
        type: "line",
        id: "\u0000ridge",
        name: "ridge",
        silent: true,
        symbol: "none",
        z: 1,
        lineStyle: { width: 1, color: INK.muted, type: "dashed" },
        data: [[ridge, mainClass.peak], [ridge, y0]],
        endLabel: {
          show: true,
          formatter: () => `ridge ${fmtIntensity(ridge)} FLOP/B (${mainClass.classes.join(" = ")})`,
          align: "left",
          verticalAlign: "bottom",
          offset: [-2, -6],
          color: INK.muted,
          fontSize: 11,
        },
      });
    }
    // The memory roof's bandwidth, written along its slope a third of the way to the ridge.
    const end = Math.min(ridge, x[1]);
    const mid = start * Math.pow(end / start, 0.3);
    if (end > start) {
      out.push({
        type: "scatter",
        id: "\u0000bandwidth",
        name: "bandwidth",
        silent: true,
        symbolSize: 0,
        z: 1,
        label: {
          show: true,
          formatter: () => fmtBandwidth(w),
          position: "top",
          rotate: angle,
          color: INK.muted,
          fontSize: 11,
        },
        data: [[mid, mid * w]],
      });
    }
  }
  return out;
}

/** The slope's angle on screen, in degrees: a decade of x and a decade of y differ in pixels. */
function slopeAngle(chart: EChart, grid: { left: number; right: number; top: number; bottom: number }, x: [number, number], y: [number, number]): number {
  const w = chart.getWidth() - grid.left - grid.right;
  const h = chart.getHeight() - grid.top - grid.bottom;
  if (!(w > 0 && h > 0)) return 0;
  const perDecadeX = w / Math.log10(x[1] / x[0]);
  const perDecadeY = h / Math.log10(y[1] / y[0]);
  return (Math.atan2(perDecadeY, perDecadeX) * 180) / Math.PI;
}

export interface RooflineChartOptions {
  /** The peaks the roofs are drawn with; without known peaks only the points are drawn. */
  roofline: Roofline | null;
  series: PointSeries[];
  /** The peak class whose ridge is marked (the run's attention's). */
  main: string | null;
  /** Extra tooltip lines of a point's series (Compare: the run). */
  extra?: (series: PointSeries, point: RoofPoint) => string[];
}

/** Draws the roofline chart: points per series over the roofs. A point's data item carries its
 * series and index (`s`, `i`), so clicks and tooltips find it; the roofs, the ridge and the
 * bandwidth's label are silent series whose ids start with "\u0000". */
export function rooflineChart(chart: EChart, o: RooflineChartOptions): void {
  const rl = o.roofline;
  const known = peaksKnown(rl);
  const points = o.series.flatMap((s) => s.points);
  const classes = known && rl ? roofClasses(rl, points.map((p) => p.roof.dtype)) : [];
  const w = rl?.peak_bytes_per_s ?? null;
  const x = logRange([...points.map((p) => p.roof.intensity ?? 0), ...(w ? classes.map((c) => c.peak / w) : [])], 3);
  const y = logRange([...points.map((p) => p.roof.flops_per_s), ...classes.map((c) => c.peak)], 3);
  const grid = { left: 84, right: 28, top: 24, bottom: 44 };
  const main = o.main ?? "fp32";
  const roofs = known && rl ? roofSeries(rl, classes, main, x, y[0], slopeAngle(chart, grid, x, y)) : [];
  chart.setOption(
    {
      animation: false,
      grid,
      tooltip: {
        ...TOOLTIP_BASE,
        trigger: "item",
        formatter: (p: unknown) => {
          const d = (p as { data?: { s?: number; i?: number } }).data;
          const s = d?.s === undefined ? undefined : o.series[d.s];
          const pt = s && d?.i !== undefined ? s.points[d.i] : undefined;
          if (!s || !pt) return "";
          return [`${swatch(pt.color)}<b>${esc(pt.title)}</b>`, ...(o.extra ? o.extra(s, pt) : []), ...roofLines(pt.roof, rl)].join("<br>");
        },
      },
      xAxis: {
        type: "log",
        name: "arithmetic intensity (FLOP/B)",
        nameLocation: "middle",
        nameGap: 26,
        min: x[0],
        max: x[1],
        splitLine: { show: true, lineStyle: { color: INK.grid } },
        ...logAxis(fmtIntensity, { showMinLabel: true, showMaxLabel: true }),
      },
      yAxis: {
        type: "log",
        name: `achieved FLOP/s (${rl ? clockWords(rl) : "time"})`,
        nameTextStyle: { align: "left" },
        min: y[0],
        max: y[1],
        splitLine: { show: true, lineStyle: { color: INK.grid } },
        ...logAxis(fmtRate, { showMinLabel: true, showMaxLabel: true }),
      },
      series: [
        ...roofs,
        ...o.series.map((s, si) => ({
          type: "scatter",
          name: s.name,
          symbol: s.symbol,
          symbolSize: s.size,
          z: 3 + (s.label ? 1 : 0),
          cursor: "pointer",
          emphasis: { scale: 1.4 },
          label: s.label ? { show: true, formatter: () => s.label, position: "right", color: INK.text, fontWeight: "bold", fontSize: 11 } : { show: false },
          data: s.points.map((pt, i) => ({
            value: [pt.roof.intensity, pt.roof.flops_per_s],
            s: si,
            i,
            itemStyle: { color: pt.color, borderColor: s.label ? "#fff" : pt.color, borderWidth: 1.5 },
          })),
        })),
      ],
    },
    { notMerge: true },
  );
}
