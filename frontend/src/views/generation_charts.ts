// The generation view's charts: the prefill step against a decode step (bars per figure), the
// attention time of each decode step against its context (scatter, with the fit a·contextᵏ drawn
// over the decode contexts), and the KV cache's bytes per step against the step's context: the
// cache, what the core reads of it, and what the step allocates for it.

import { axisScale, valueAxis } from "../axes";
import { esc, swatch, TOOLTIP_BASE, type EChart } from "../charts";
import { fmtBytes, fmtCount, fmtFlops, fmtUs } from "../format";
import type { Generation, GenerationPhase, TokenStats } from "../types";
import { fmtFit } from "./scaling";

/** The decode chart's series: what each decode step's dots show, in the legend's order. */
export const DECODE_SERIES: { key: "attention_us" | "core_us" | "kv_cache_us"; label: string; color: string; title: string }[] = [
  { key: "attention_us", label: "attention", color: "#4e79a7", title: "every attention block of the step" },
  { key: "core_us", label: "K\u00b7V core", color: "#59a14f", title: "the phases that read K and V (q\u00b7k\u1d40 to attn\u00b7v, or the fused call)" },
  { key: "kv_cache_us", label: "KV cache append", color: "#e15759", title: "appending to the KV cache (a dynamic cache's copy included)" },
];
export const FIT_COLOR = "#4e79a7";
/** The KV chart's series, in the legend's order. */
export const KV_SERIES: { key: "kv_bytes" | "read_bytes" | "kv_alloc_bytes"; label: string; color: string; title: string }[] = [
  { key: "kv_bytes", label: "KV cache", color: "#4e79a7", title: "the cache's K and V, all layers (from shapes: the tensors attention is given)" },
  {
    key: "read_bytes",
    label: "read by the core",
    color: "#59a14f",
    title: "K and V the core reads, all layers: the cache, or its expansion to every query head, or a static cache's whole buffer",
  },
  { key: "kv_alloc_bytes", label: "allocated in the KV cache phase", color: "#f28e2b", title: "memory allocated in the kv_cache phase (memory events)" },
];
const KV_STYLE: Record<(typeof KV_SERIES)[number]["key"], { type: "line" | "scatter"; symbol: string; size: number; dash?: "dashed" }> = {
  kv_bytes: { type: "line", symbol: "circle", size: 7 },
  read_bytes: { type: "line", symbol: "rect", size: 6, dash: "dashed" },
  kv_alloc_bytes: { type: "scatter", symbol: "emptyDiamond", size: 12 },
};
export const PREFILL_COLOR = "#9c755f";
export const DECODE_COLOR = "#4e79a7";

/** "CPU" or "device": the clock of a generation's times. */
export function clockWord(g: Generation): string {
  return g.clock === "cpu" ? "CPU" : g.clock;
}

/** A context axis (keys attended): round steps over the contexts, a step of margin either side. */
function contextAxis(lo: number, hi: number) {
  const s = axisScale((v) => String(v), lo, hi, { ticks: 6 });
  return {
    type: "value" as const,
    name: "context (keys)",
    nameLocation: "middle" as const,
    nameGap: 26,
    min: s.min - s.step,
    max: s.max + s.step,
    interval: s.step,
    axisLabel: { hideOverlap: true, formatter: (v: number) => (s.tick(v) ? String(Math.round(v)) : "") },
  };
}

/** A token's figures for a tooltip. */
function tokenLines(t: TokenStats, clock: string): string[] {
  return [
    `<b>step ${esc(t.step)}</b> \u00b7 ${esc(t.role)} \u00b7 context <b>${esc(t.context)}</b> keys${t.queries ? `, ${esc(t.queries)} ${t.queries === 1 ? "query" : "queries"}` : ""}`,
    `${swatch(DECODE_SERIES[0]!.color)}attention (${esc(clock)}): <b>${esc(fmtUs(t.attention_us))}</b>`,
    `${swatch(DECODE_SERIES[1]!.color)}K\u00b7V core: ${esc(fmtUs(t.core_us))}`,
    `${swatch(DECODE_SERIES[2]!.color)}KV cache append: ${esc(fmtUs(t.kv_cache_us))}`,
    `step (CPU wall): ${esc(fmtUs(t.step_us))}, ${esc(fmtCount(t.launches))} launches, ${esc(fmtFlops(t.flops))}`,
  ];
}

/** The decode tokens (steps with role "decode"). */
export function decodeTokens(g: Generation): TokenStats[] {
  return g.tokens.filter((t) => t.role === "decode");
}

/** Attention, core and KV-append time per decode step against its context, and the fit a·contextᵏ. */
export function decodeChart(chart: EChart, g: Generation): void {
  const tokens = decodeTokens(g);
  const clock = clockWord(g);
  const xs = tokens.map((t) => t.context);
  const lo = xs.length ? Math.min(...xs) : 0;
  const hi = xs.length ? Math.max(...xs) : 1;
  const fit = g.fit;
  const curve = fit
    ? Array.from({ length: 33 }, (_, i) => lo + ((hi - lo) * i) / 32).map((x) => [x, fit.a * Math.pow(x, fit.k)])
    : [];
  const top = Math.max(0, ...tokens.flatMap((t) => DECODE_SERIES.map((x) => t[x.key])), ...curve.map((p) => p[1] ?? 0));
  const series: object[] = DECODE_SERIES.map((x) => ({
    type: "scatter" as const,
    name: x.label,
    symbolSize: x.key === "attention_us" ? 10 : 8,
    symbol: x.key === "attention_us" ? "circle" : x.key === "core_us" ? "diamond" : "triangle",
    itemStyle: { color: x.color },
    z: 3,
    data: tokens.map((t) => [t.context, t[x.key], t.step]),
  }));
  if (fit) {
    series.push({
      type: "line" as const,
      name: "fit",
      symbol: "none",
      silent: true,
      z: 2,
      lineStyle: { width: 1.5, type: "dashed" as const, color: FIT_COLOR },
      data: curve,
    });
  }
  chart.setOption(
    {
      animation: false,
      grid: { left: 70, right: 24, top: 30, bottom: 40 },
      tooltip: {
        ...TOOLTIP_BASE,
        trigger: "item",
        formatter: (p: unknown) => {
          const it = p as { seriesName: string; dataIndex: number };
          const t = it.seriesName === "fit" ? undefined : tokens[it.dataIndex];
          return t ? [...tokenLines(t, clock), ...(fit ? [esc(`fit a\u00b7context^k: ${fmtFit(fit)}`)] : [])].join("<br>") : "";
        },
      },
      xAxis: contextAxis(lo, hi),
      yAxis: { type: "value", name: `${clock} time per decode step`, nameTextStyle: { align: "left" }, ...valueAxis(fmtUs, 0, top) },
      series,
    },
    { notMerge: true },
  );
}

/** The KV cache per step (prefill included): what attention reads, and what the step allocates. */
export function kvChart(chart: EChart, g: Generation): void {
  const tokens = [...g.tokens].sort((a, b) => a.step - b.step);
  const xs = tokens.map((t) => t.context);
  const top = Math.max(0, ...tokens.flatMap((t) => KV_SERIES.map((x) => t[x.key])));
  chart.setOption(
    {
      animation: false,
      grid: { left: 78, right: 24, top: 30, bottom: 40 },
      tooltip: {
        ...TOOLTIP_BASE,
        trigger: "item",
        formatter: (p: unknown) => {
          const t = tokens[(p as { dataIndex: number }).dataIndex];
          if (!t) return "";
          return [
            `<b>step ${esc(t.step)}</b> \u00b7 ${esc(t.role)} \u00b7 context <b>${esc(t.context)}</b> keys (all layers)`,
            ...KV_SERIES.map((x) => `${swatch(x.color)}${esc(x.label)}: <b>${esc(fmtBytes(t[x.key]))}</b>`),
          ].join("<br>");
        },
      },
      xAxis: contextAxis(xs.length ? Math.min(...xs) : 0, xs.length ? Math.max(...xs) : 1),
      yAxis: { type: "value", name: "bytes per step", nameTextStyle: { align: "left" }, ...valueAxis(fmtBytes, 0, top) },
      series: KV_SERIES.map((x, i) => {
        const st = KV_STYLE[x.key];
        return {
          type: st.type,
          name: x.label,
          symbol: st.symbol,
          symbolSize: st.size,
          itemStyle: { color: x.color, borderWidth: 2 },
          lineStyle: { width: 1.5, color: x.color, type: st.dash ?? "solid" },
          z: 2 + i,
          data: tokens.map((t) => [t.context, t[x.key]]),
        };
      }),
    },
    { notMerge: true },
  );
}

/** The figures the prefill-against-decode bars show, per step. */
export const PHASE_BARS: { key: "attention_us" | "core_us" | "kv_cache_us" | "step_us"; label: string }[] = [
  { key: "attention_us", label: "attention" },
  { key: "core_us", label: "K\u00b7V core" },
  { key: "kv_cache_us", label: "KV cache append" },
  { key: "step_us", label: "step (CPU wall)" },
];

/** The prefill step against a mean decode step: one bar each per figure. */
export function phaseChart(chart: EChart, g: Generation): void {
  const phases: [string, GenerationPhase | null, string][] = [
    ["prefill step", g.prefill, PREFILL_COLOR],
    ["decode step", g.decode, DECODE_COLOR],
  ];
  const shown = phases.filter((p): p is [string, GenerationPhase, string] => p[1] !== null);
  const top = Math.max(0, ...shown.flatMap(([, p]) => PHASE_BARS.map((b) => p[b.key])));
  chart.setOption(
    {
      animation: false,
      grid: { left: 120, right: 24, top: 10, bottom: 28 },
      tooltip: {
        ...TOOLTIP_BASE,
        trigger: "axis",
        axisPointer: { type: "shadow" },
        formatter: (params: unknown) => {
          const list = (Array.isArray(params) ? params : [params]) as { dataIndex: number; seriesIndex: number }[];
          const bar = PHASE_BARS[list[0]?.dataIndex ?? -1];
          if (!bar) return "";
          const rows = list.map((it) => {
            const s = shown[it.seriesIndex];
            return s ? `${swatch(s[2])}${esc(s[0])}: <b>${esc(fmtUs(s[1][bar.key]))}</b>` : "";
          });
          const clock = bar.key === "step_us" ? "CPU wall time" : `${clockWord(g)} time`;
          return [`<b>${esc(bar.label)}</b> \u2014 ${esc(clock)}, per step`, ...rows].join("<br>");
        },
      },
      xAxis: { type: "value", ...valueAxis(fmtUs, 0, top) },
      yAxis: { type: "category", inverse: true, data: PHASE_BARS.map((b) => b.label), axisTick: { show: false } },
      series: shown.map(([name, p, color]) => ({
        type: "bar" as const,
        name,
        barMaxWidth: 14,
        itemStyle: { color },
        data: PHASE_BARS.map((b) => p[b.key]),
      })),
    },
    { notMerge: true },
  );
}
