// The compare view's scaling charts: attention time and memory against the sequence length on
// log-log axes, the measured runs as dots in their table colours and the fits (value ≈ a·seq^k)
// as dashed lines in their series' hue.

import { logAxis, seqAxis } from "../axes";
import { esc, swatch, TOOLTIP_BASE, type EChart } from "../charts";
import { h, replace } from "../dom";
import type { Fit, ScalingSeries } from "../types";

export const NO_FIT =
  "Scaling needs runs that differ only in sequence length (e.g. the demo's seq256 and seq512).";

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
): void {
  const seqs = series.flatMap((x) => x.points.map((p) => p.seq)).filter((v) => v > 0);
  const minSeq = Math.min(...seqs);
  const maxSeq = Math.max(...seqs);
  const ys = series.flatMap((x) => x.points.map((p) => p[field])).filter((v) => v > 0);
  const minY = ys.length ? Math.min(...ys) : 1;
  const maxY = ys.length ? Math.max(...ys) : 10;
  const out: object[] = [];
  series.forEach((x, i) => {
    const pts = x.points.filter((p) => p.seq > 0 && p[field] > 0).sort((a, b) => a.seq - b.seq);
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
            `seq ${esc(it.data.value[0])}: <b>${esc(format(it.data.value[1]))}</b>`,
            esc(fmtFit(x[fit])),
            ...(x.expect ? [`expected ${esc(x.expect)}`] : []),
          ].join("<br>");
        },
      },
      xAxis: seqAxis(minSeq, maxSeq),
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
