// Value axes of every chart: one unit per axis, chosen from the axis's extent (its largest
// tick), and every tick written in it: "0, 500, 1000 ms" or "0, 0.5, 1.0, 1.5 s", never both.
// The steps are ours, not ECharts': 1, 2 or 5 × 10^k for times and counts, and a power of two
// for bytes, so byte ticks land on 16, 32, 48 MiB rather than 9.54, 19.1, 28.6 MiB. A chart sets
// `min`, `max` and `interval` from its data through `valueAxis` (or `zoomAxis` for a zoomed
// window), so the formatter knows the step its ticks are multiples of.

import { fmtBytes, fmtFlops, fmtRate, fmtUs } from "./format";

type Format = (v: number) => string;

interface Units {
  /** [name, size in base units], ascending. */
  units: [string, number][];
  /** The round step nearest to `raw` (in base units), by ratio. */
  step: (raw: number) => number;
}

function decimalStep(raw: number): number {
  const p = Math.pow(10, Math.floor(Math.log10(raw)));
  let best = p;
  for (const m of [1, 2, 5, 10]) if (Math.abs(Math.log(m * p / raw)) < Math.abs(Math.log(best / raw))) best = m * p;
  return best;
}

const TIME: Units = { units: [["\u00b5s", 1], ["ms", 1e3], ["s", 1e6]], step: decimalStep };
const BYTES: Units = {
  units: [["B", 1], ["KiB", 1024], ["MiB", 1024 ** 2], ["GiB", 1024 ** 3], ["TiB", 1024 ** 4]],
  step: (raw) => Math.pow(2, Math.max(0, Math.round(Math.log2(raw)))),
};
const si = (unit: string): Units => ({
  units: ["", "k", "M", "G", "T", "P", "E"].map((p, i): [string, number] => [`${p}${unit}`, 1000 ** i]),
  step: decimalStep,
});
const FLOP = si("FLOP");
const FLOP_RATE = si("FLOP/s");
const PLAIN = si("");

/** The units of values a format function writes: the chart keeps its format, the axis its unit. */
function unitsOf(format: Format): Units {
  if (format === fmtUs) return TIME;
  if (format === fmtBytes) return BYTES;
  if (format === fmtFlops) return FLOP;
  if (format === fmtRate) return FLOP_RATE;
  return PLAIN;
}

/** Digits after the point that write `x` exactly (x a step: 2^-k or 1/2/5 × 10^-k). */
function decimalsOf(x: number): number {
  for (let d = 0; d < 12; d++) if (Math.abs(x * 10 ** d - Math.round(x * 10 ** d)) < 1e-9 * 10 ** d) return d;
  return 12;
}

export interface AxisScale {
  min: number;
  max: number;
  /** The step between ticks, in base units (µs, bytes, FLOPs). */
  step: number;
  unit: string;
  /** A tick's label in the axis's unit; "" for a value that is not a multiple of the step. */
  tick: (v: number) => string;
  /** Any value in the axis's unit (zoom handles, which sit anywhere). */
  value: (v: number) => string;
  /** The multiples of the step in [min, max]. */
  ticks: number[];
}

/**
 * The scale of a linear axis over [lo, hi], about `ticks` steps wide. With `exact` the axis
 * keeps [lo, hi] (a step's window: its ends need not be ticks); otherwise it widens to whole steps.
 */
export function axisScale(format: Format, lo: number, hi: number, opts: { exact?: boolean; ticks?: number } = {}): AxisScale {
  const u = unitsOf(format);
  if (!Number.isFinite(lo) || !Number.isFinite(hi)) lo = hi = 0;
  if (hi < lo) [lo, hi] = [hi, lo];
  const raw = (hi - lo) / (opts.ticks ?? 5);
  const step = u.step(raw > 0 ? raw : Math.max(Math.abs(hi), 1));
  const min = opts.exact ? lo : Math.floor(lo / step + 1e-9) * step;
  const max = opts.exact ? hi : Math.max(Math.ceil(hi / step - 1e-9) * step, min + step);
  const largest = Math.max(Math.abs(Math.ceil(min / step - 1e-9) * step), Math.abs(Math.floor(max / step + 1e-9) * step));
  let k = 0;
  while (k + 1 < u.units.length && largest >= u.units[k + 1]![1] * (1 - 1e-9)) k++;
  const [unit, size] = u.units[k]!;
  const decimals = decimalsOf(step / size);
  const write = (v: number, d: number) => {
    const x = v / size;
    return Math.abs(x) < 1e-12 ? "0" : `${x.toFixed(d)}${unit ? " " + unit : ""}`;
  };
  const ticks: number[] = [];
  for (let i = Math.ceil(min / step - 1e-9); i * step <= max * (1 + 1e-12) + 1e-12 && ticks.length < 1000; i++) ticks.push(i * step);
  return {
    min,
    max,
    step,
    unit,
    ticks,
    tick: (v) => (Math.abs(v / step - Math.round(v / step)) > 1e-6 ? "" : write(v, decimals)),
    value: (v) => write(v, Math.min(decimals + 1, 12)),
  };
}

/** ECharts options of a linear value axis over the data's [lo, hi] (merge into the axis). */
export function valueAxis(format: Format, lo: number, hi: number, opts: { exact?: boolean; ticks?: number } = {}) {
  const s = axisScale(format, lo, hi, opts);
  return { min: s.min, max: s.max, interval: s.step, axisLabel: { formatter: s.tick } };
}

/**
 * ECharts options for the window [t0, t1] of a zoomable axis: its ticks and labels follow the
 * window, its ends stay (the zoom slider spans them). The ticks are given as values: with an
 * `interval`, ECharts counts the steps from the window's start, not from 0.
 */
export function zoomAxis(format: Format, t0: number, t1: number, labelOpts: Record<string, unknown> = {}) {
  return zoomAxisOf(axisScale(format, t0, t1, { exact: true }), labelOpts);
}

/** `zoomAxis` for a scale already made. */
export function zoomAxisOf(s: AxisScale, labelOpts: Record<string, unknown> = {}) {
  return { axisTick: { customValues: s.ticks }, axisLabel: { ...labelOpts, formatter: s.tick, customValues: s.ticks } };
}

/** The window [t0, t1] a `datazoom` event shows, on an axis over [lo, hi]. */
export function zoomWindow(ev: unknown, lo: number, hi: number, previous: [number, number]): [number, number] {
  type Zoom = { start?: number; end?: number; startValue?: number; endValue?: number; batch?: Zoom[] };
  const e = ev as Zoom;
  const b = e.batch && e.batch[0] ? e.batch[0] : e;
  if (b.startValue !== undefined && b.endValue !== undefined) return [b.startValue, b.endValue];
  if (b.start !== undefined && b.end !== undefined) return [lo + ((hi - lo) * b.start) / 100, lo + ((hi - lo) * b.end) / 100];
  return previous;
}

/**
 * ECharts options of a log axis: ticks are exact powers (of 2 for bytes, of 10 otherwise), each
 * written in its own unit ("256 KiB, 1 MiB, 4 MiB"): a log axis spans decades, where one unit
 * would write 0.0009765625 GiB. Its ends, where they are no power, go unlabelled.
 */
export function logAxis(format: Format, labelOpts: Record<string, unknown> = {}) {
  const u = unitsOf(format);
  const base = u === BYTES ? 2 : 10;
  const formatter = (v: number) => {
    const e = Math.log(v) / Math.log(base);
    if (!(v > 0) || Math.abs(e - Math.round(e)) > 1e-9) return ""; // an axis end, no power
    let k = 0;
    while (k + 1 < u.units.length && Math.abs(v) >= u.units[k + 1]![1] * (1 - 1e-9)) k++;
    const [unit, size] = u.units[k]!;
    const x = v / size;
    return `${Number(x.toPrecision(6))}${unit ? " " + unit : ""}`;
  };
  return { logBase: base, axisLabel: { ...labelOpts, formatter } };
}

/** The highest stack of a stacked bar chart's series (sums per category), at least 0. */
/** A sequence-length axis on log2 scale with a margin of a quarter either side of the lengths
 * measured (lengths are powers of two, usually), labels as whole tokens. `name`: "seq", or
 * "context (keys)" for the decode steps' context of generation runs. */
export function seqAxis(lo: number, hi: number, name = "seq") {
  return {
    type: "log" as const,
    logBase: 2,
    name,
    nameLocation: "middle" as const,
    nameGap: 26,
    min: lo / 1.25,
    max: hi * 1.25,
    axisLabel: { showMinLabel: false, showMaxLabel: false, formatter: (v: number) => String(Math.round(v)) },
  };
}

export function stackedMax(series: { data: number[] }[]): number {
  const sums: number[] = [];
  for (const s of series) s.data.forEach((v, i) => (sums[i] = (sums[i] ?? 0) + (Number.isFinite(v) ? v : 0)));
  return Math.max(0, ...sums);
}
