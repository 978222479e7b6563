// The per-phase and per-head metrics the tables, the bar chart and the heatmap show.

import { fmtBytes, fmtFlops, fmtRate, fmtUs } from "./format";
import type { HeadStats, LayerStats, PhaseStats } from "./types";

export type MetricKey =
  | "cpu_us"
  | "device_us"
  | "flops"
  | "flops_per_s"
  | "alloc_bytes"
  | "peak_bytes"
  | "sxs_bytes"
  | "bwd_cpu_us"
  | "bwd_device_us";

export interface Metric {
  key: MetricKey;
  label: string; // short, for column headers
  title: string; // longer, for selectors and tooltips
  format: (v: number) => string;
  /** Summable over phases: can be stacked in the bar chart. */
  additive: boolean;
  /** Backward work: a drill-down from it asks for backward=1. */
  backward: boolean;
  phase: (p: PhaseStats) => number;
  layer: (l: LayerStats) => number;
}

export const METRICS: Metric[] = [
  {
    key: "cpu_us",
    label: "CPU",
    title: "CPU time",
    format: fmtUs,
    additive: true,
    backward: false,
    phase: (p) => p.cpu_us,
    layer: (l) => l.cpu_us,
  },
  {
    key: "device_us",
    label: "device",
    title: "device time",
    format: fmtUs,
    additive: true,
    backward: false,
    phase: (p) => p.device_us,
    layer: (l) => l.device_us,
  },
  {
    key: "flops",
    label: "FLOPs",
    title: "FLOPs",
    format: fmtFlops,
    additive: true,
    backward: false,
    phase: (p) => p.flops,
    layer: (l) => l.flops,
  },
  {
    key: "flops_per_s",
    label: "FLOP/s",
    title: "achieved FLOP/s",
    format: fmtRate,
    additive: false,
    backward: false,
    phase: (p) => p.flops_per_s,
    layer: (l) => l.flops_per_s,
  },
  {
    key: "alloc_bytes",
    label: "alloc",
    title: "memory allocated",
    format: fmtBytes,
    additive: true,
    backward: false,
    phase: (p) => p.alloc_bytes,
    layer: (l) => l.alloc_bytes,
  },
  {
    key: "peak_bytes",
    label: "peak",
    title: "memory peak (rise over the scope's start)",
    format: fmtBytes,
    additive: false,
    backward: false,
    phase: (p) => p.peak_bytes,
    layer: (l) => l.peak_bytes,
  },
  {
    key: "sxs_bytes",
    label: "S\u00d7S",
    title: "S\u00d7S score bytes materialized",
    format: fmtBytes,
    additive: true,
    backward: false,
    phase: (p) => p.sxs_bytes,
    layer: (l) => l.sxs_bytes,
  },
  {
    key: "bwd_cpu_us",
    label: "bwd CPU",
    title: "backward CPU time",
    format: fmtUs,
    additive: true,
    backward: true,
    phase: (p) => p.backward.cpu_us,
    layer: (l) => l.backward.cpu_us,
  },
  {
    key: "bwd_device_us",
    label: "bwd device",
    title: "backward device time",
    format: fmtUs,
    additive: true,
    backward: true,
    phase: (p) => p.backward.device_us,
    layer: (l) => l.backward.device_us,
  },
];

export function metric(key: string): Metric {
  return METRICS.find((m) => m.key === key) ?? METRICS[0]!;
}

/** Metrics the stacked bar chart offers (additive ones). */
export const CHART_METRICS: MetricKey[] = METRICS.filter((m) => m.additive).map((m) => m.key);

export type HeadMetricKey = "cpu_us" | "device_us" | "flops" | "alloc_bytes" | "sxs_bytes";
export const HEAD_METRICS: HeadMetricKey[] = ["cpu_us", "device_us", "flops", "alloc_bytes", "sxs_bytes"];

export function headValue(h: HeadStats, key: HeadMetricKey): number {
  return h[key];
}

/** Phase names in execution order (scopes.PHASES), then "other". */
export const PHASE_ORDER = [
  "qkv_proj",
  "rope",
  "kv_cache",
  "kv_expand",
  "copy",
  "block_mask",
  "feature_map",
  "quantize",
  "qk_matmul",
  "dequantize",
  "scale",
  "mask",
  "softmax",
  "dropout",
  "av_matmul",
  "kv_state",
  "normalize",
  "sdpa",
  "flex",
  "compiled",
  "out_proj",
  "comm",
  "other",
];

const PHASE_LABELS: Record<string, string> = {
  qkv_proj: "QKV proj",
  rope: "RoPE",
  kv_cache: "KV cache",
  kv_expand: "KV expand",
  copy: "copies",
  block_mask: "BlockMask",
  feature_map: "features \u03c6",
  quantize: "quantize",
  qk_matmul: "Q\u00b7K\u1d40",
  dequantize: "dequantize",
  scale: "scale",
  mask: "mask",
  softmax: "softmax",
  dropout: "dropout",
  av_matmul: "attn\u00b7V",
  kv_state: "KV state",
  normalize: "normalize",
  sdpa: "SDPA",
  flex: "flex",
  compiled: "compiled",
  out_proj: "out proj",
  comm: "comm",
  other: "other",
};

export function phaseLabel(phase: string): string {
  return PHASE_LABELS[phase] ?? phase;
}

/** Phases present in any layer, in execution order; unknown names go last, as they come. */
export function phasesOf(layers: LayerStats[]): string[] {
  const seen = new Set<string>();
  for (const l of layers) for (const p of l.phases) seen.add(p.phase);
  return orderPhases(seen);
}

/** Phase names in execution order; unknown names go last, as they come, then "other". */
export function orderPhases(names: Iterable<string>): string[] {
  const seen = new Set(names);
  const known = PHASE_ORDER.filter((p) => seen.has(p));
  const unknown = [...seen].filter((p) => !PHASE_ORDER.includes(p));
  const other = known.filter((p) => p === "other");
  return [...known.filter((p) => p !== "other"), ...unknown, ...other];
}

const PHASE_COLORS: Record<string, string> = {
  qkv_proj: "#4e79a7",
  rope: "#9d7660",
  kv_cache: "#d4a6c8",
  kv_expand: "#a0cbe8",
  copy: "#17becf",
  block_mask: "#ff9d9a",
  feature_map: "#d37295",
  quantize: "#fabfd2",
  qk_matmul: "#f28e2b",
  dequantize: "#f1ce63",
  scale: "#ffbe7d",
  mask: "#e15759",
  softmax: "#59a14f",
  dropout: "#8cd17d",
  av_matmul: "#b07aa1",
  kv_state: "#79706e",
  normalize: "#d7b5a6",
  sdpa: "#76b7b2",
  flex: "#499894",
  compiled: "#86bcb6",
  out_proj: "#edc948",
  comm: "#bcbd22",
  other: "#bab0ac",
};

export function phaseColor(phase: string): string {
  return PHASE_COLORS[phase] ?? "#9c755f";
}

// Muted tints, kept apart from the saturated phase colours: blocks and phases share the timeline.
const LAYER_COLORS = ["#9fa8da", "#80cbc4", "#bcaaa4", "#b0bec5", "#ce93d8", "#c5e1a5"];

export function layerColor(layer: number): string {
  return LAYER_COLORS[((layer % LAYER_COLORS.length) + LAYER_COLORS.length) % LAYER_COLORS.length]!;
}

/** One legend entry per layer colour (they repeat every LAYER_COLORS.length layers), naming every
 * layer drawn in it: "L0 block", "L0, L6, L12, L18 blocks", past four "L0, L6 … L90 blocks (16)";
 * with no ``noun``, the layers alone. */
export function layerLegend(layers: Iterable<number>, noun = "block"): { color: string; label: string; first: number }[] {
  const byColor = new Map<string, number[]>();
  for (const l of [...new Set(layers)].sort((a, b) => a - b)) {
    const c = layerColor(l);
    byColor.set(c, [...(byColor.get(c) ?? []), l]);
  }
  return [...byColor].map(([color, ls]) => {
    const names = ls.length <= 4 ? ls.map((l) => `L${l}`).join(", ") : `L${ls[0]}, L${ls[1]} … L${ls[ls.length - 1]}`;
    const label = `${names}${noun ? ` ${noun}${ls.length > 1 ? "s" : ""}` : ""}${ls.length > 4 ? ` (${ls.length})` : ""}`;
    return { color, label, first: ls[0]! };
  });
}
