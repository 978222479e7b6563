// The compare view's scaling charts: attention time and memory against the sequence length on
// log-log axes, the measured runs as dots in their table colours and the fits (value ≈ a·seq^k)
// as dashed lines in their series' hue. Generation runs make series against the context their
// decode steps attend instead (x "context"): decode attention per decode step and the KV cache, in a
// panel of their own.

import { logAxis, seqAxis } from "../axes";
import { esc, swatch, TOOLTIP_BASE, type EChart } from "../charts";
import { h, replace } from "../dom";
import { fmtBytes, fmtUs } from "../format";
import type { Fit, ScalingSeries } from "../types";

export const NO_FIT =
  "Scaling needs runs that differ only in sequence length (e.g. the demo's seq256 and seq512).";
export const NO_DECODE_FIT =
  "Decode scaling needs generation runs that differ only in their prompt length (e.g. --prompt-len 64, 128 and 256).";

/** What a series is against: the sequence length, or a generation's decode context (keys attended). */
export type ScalingX = "seq" | "context";

const X_NAME: Record<ScalingX, string> = { seq: "seq", context: "context (keys)" };

/** The colours of the scaling charts, from the compare table's (``runColors``). */
export interface ScalingPaint {
  run: (run: string, seriesIndex: number) => string;
  series: (x: ScalingSeries, seriesIndex: number) => string;
}

export function fmtFit(f: Fit | null): string {
  if (!f) return "no fit";
  // Through two points any line fits: their R² would be 1.00 and mean nothing.
  return f.r2 === null
    ? `k = ${f.k.toFixed(2)} (${f.points} points: no fit quality)`
    : `k = ${f.k.toFixed(2)} (R\u00b2 ${f.r2.toFixed(2)}, ${f.points} points)`;
}

export function scalingChart(
  chart: EChart,
  series: ScalingSeries[],
  field: "time_us" | "alloc_bytes",
  fit: "time_fit" | "memory_fit",
  format: (v: number) => string,
  title: string,
  paint: ScalingPaint,
  against: ScalingX = "seq",
): void {
  const seqs = series.flatMap((x) => x.points.map((p) => p.seq)).filter((v) => v > 0);
  const minSeq = Math.min(...seqs);
  const maxSeq = Math.max(...seqs);
  // A figure the trace did not record (memory without profile_memory) is no point: null, never 0.
  const ys = series.flatMap((x) => x.points.map((p) => p[field])).filter((v): v is number => v !== null && v > 0);
  const minY = ys.length ? Math.min(...ys) : 1;
  const maxY = ys.length ? Math.max(...ys) : 10;
  const out: object[] = [];
  series.forEach((x, i) => {
    const pts = x.points.filter((p) => p.seq > 0 && (p[field] ?? 0) > 0).sort((a, b) => a.seq - b.seq);
    out.push({
      type: "line" as const,
      name: `measured ${i}`,
      symbol: "circle",
      symbolSize: 9,
      lineStyle: { width: 0 }, // the measurements as dots; the fit is the line
      itemStyle: { color: paint.series(x, i) },
      data: pts.map((p) => ({ value: [p.seq, p[field]], run: p.run, itemStyle: { color: paint.run(p.run, i) } })),
    });
    const f = x[fit];
    if (f) {
      out.push({
        type: "line" as const,
        name: `fit ${i}`,
        symbol: "none",
        silent: true,
        lineStyle: { width: 1.5, type: "dashed" as const, color: paint.series(x, i) },
        itemStyle: { color: paint.series(x, i) },
        data: [minSeq, maxSeq].map((q) => [q, f.a * Math.pow(q, f.k)]),
      });
    }
  });
  chart.setOption(
    {
      animation: false,
      grid: { left: 78, right: 24, top: 28, bottom: 40 },
      tooltip: {
        ...TOOLTIP_BASE,
        trigger: "item",
        formatter: (p: unknown) => {
          const it = p as { seriesName: string; data: { value: [number, number]; run: string } };
          const i = Number(it.seriesName.split(" ")[1]);
          const x = series[i];
          if (!x || !it.data?.run) return "";
          return [
            `${swatch(paint.run(it.data.run, i))}<b>${esc(x.label)}</b>`,
            `${esc(it.data.run)}`,
            `${against === "context" ? `context ${esc(it.data.value[0])} keys` : `seq ${esc(it.data.value[0])}`}: <b>${esc(format(it.data.value[1]))}</b>`,
            esc(fmtFit(x[fit])),
            ...(x.expect ? [`expected ${esc(x.expect)}`] : []),
          ].join("<br>");
        },
      },
      xAxis: seqAxis(minSeq, maxSeq, X_NAME[against]),
      yAxis: {
        type: "log",
        name: title,
        nameTextStyle: { align: "left" },
        min: minY / 2,
        max: maxY * 2,
        ...logAxis(format, { showMinLabel: false, showMaxLabel: false }),
      },
      series: out,
    },
    { notMerge: true },
  );
}

export function scalingLegend(el: HTMLElement, series: ScalingSeries[], fit: "time_fit" | "memory_fit", paint: ScalingPaint): void {
  replace(
    el,
    ...series.map((x, i) =>
      h(
        "span",
        { class: "legend-item", title: x.points.map((p) => p.run).join(", ") },
        h("span", { class: "sw", style: { background: paint.series(x, i) } }),
        x.label,
        h("span", x[fit] ? "fit" : "muted", ` ${fmtFit(x[fit])}`),
        // A sliding-window series: what its exponent should be, beside what it is.
        x.expect ? h("span", { class: "muted small expect", dataset: { testid: "expect" } }, ` (expected ${x.expect})`) : null,
      ),
    ),
  );
}

/** The time and the memory chart of the series against one x, with their titles and legends. */
export class ScalingPanel {
  readonly el: HTMLElement;
  private readonly timeTitle = h("div", "chart-title");
  private readonly memTitle = h("div", "chart-title");
  private readonly timeEl = h("div", { class: "chart", style: { height: "260px" } });
  private readonly memEl = h("div", { class: "chart", style: { height: "260px" } });
  private readonly timeLegend = h("div", "legend");
  private readonly memLegend = h("div", "legend");
  private time: EChart | null = null;
  private mem: EChart | null = null;

  constructor(private readonly against: ScalingX, testid: string) {
    this.el = h(
      "div",
      { class: "scaling-charts", attrs: { "data-testid": testid } },
      h("div", null, this.timeTitle, this.timeEl, this.timeLegend),
      h("div", null, this.memTitle, this.memEl, this.memLegend),
    );
  }

  /** Draws the series, or hides the panel when there are none; `chartIn` makes a chart its view disposes. */
  draw(series: ScalingSeries[], clock: string, paint: ScalingPaint, chartIn: (el: HTMLElement) => EChart): void {
    this.el.hidden = series.length === 0;
    if (!series.length) {
      replace(this.timeLegend);
      replace(this.memLegend);
      return;
    }
    if (!this.time) this.time = chartIn(this.timeEl);
    if (!this.mem) this.mem = chartIn(this.memEl);
    const decode = this.against === "context";
    this.timeTitle.textContent = decode
      ? `Decode attention ${clock} time per decode step vs. context (keys)`
      : `Attention ${clock} time per step vs. sequence length`;
    this.memTitle.textContent = decode
      ? "KV cache (all layers) vs. context (keys)"
      : "Memory allocated in attention per step vs. sequence length";
    const timeName = decode ? `decode attention per decode step (${clock})` : `attention ${clock} time`;
    scalingChart(this.time, series, "time_us", "time_fit", fmtUs, timeName, paint, this.against);
    scalingChart(this.mem, series, "alloc_bytes", "memory_fit", fmtBytes, decode ? "KV cache" : "memory allocated", paint, this.against);
    scalingLegend(this.timeLegend, series, "time_fit", paint);
    scalingLegend(this.memLegend, series, "memory_fit", paint);
  }

  /** Its view disposed the charts: the next draw makes new ones. */
  forget(): void {
    this.time = null;
    this.mem = null;
  }
}
