// The strategies view's charts: attention time against sequence length per strategy (log-log, the
// measured runs as a line of dots, the fit a·seq^k dashed and drawn on to where it crosses the
// baseline's, that crossing marked), and speed-up against error at one length, with the Pareto
// front as a step line.

import { axisScale, logAxis, seqAxis } from "../axes";
import { esc, swatch, TOOLTIP_BASE, type EChart } from "../charts";
import { fmtError, fmtLossDiff, fmtRatio, fmtUs } from "../format";
import { INK } from "../theme";
import type { StrategyGroup, StrategyRow, StrategySeries } from "../types";
import { fmtFit } from "./scaling";

/** A crossover further than this factor outside the measured lengths is listed, not drawn: the
 * axis would squeeze the measurements into a corner. */
export const CROSS_REACH = 16;
/** Where an error of 0 (exact) sits on the log axis of errors. */
export const ERROR_FLOOR = 1e-8;

/** A strategy's colour, the same in the table and both charts. */
export type Paint = (strategy: string) => string;

/** The run behind each point of a series (the first run of the strategy at that length, as the fits use). */
function runAt(group: StrategyGroup, x: StrategySeries, seq: number): StrategyRow | undefined {
  return group.rows.find((r) => r.strategy === x.strategy && r.seq === seq);
}

/** Whether the series' crossover is drawn: a length, not too far outside the measured ones. */
export function crossDrawn(x: StrategySeries, lo: number, hi: number): boolean {
  const c = x.crossover?.seq;
  return c !== null && c !== undefined && Number.isFinite(c) && c > 0 && c >= lo / CROSS_REACH && c <= hi * CROSS_REACH;
}

export function measuredRange(group: StrategyGroup): [number, number] {
  const seqs = group.rows.map((r) => r.seq).filter((v) => v > 0);
  return [Math.min(...seqs), Math.max(...seqs)];
}

export function timeChart(chart: EChart, group: StrategyGroup, paint: Paint, clock: string): void {
  const [lo, hi] = measuredRange(group);
  const out: object[] = [];
  const xs = [lo, hi];
  const ys: number[] = [];
  group.series.forEach((x, i) => {
    const color = paint(x.strategy);
    const base = x.strategy === group.baseline;
    const pts = x.seqs.map((q, k) => ({ value: [q, x.time_us[k] ?? 0], run: runAt(group, x, q)?.run ?? "" })).filter((p) => p.value[0]! > 0 && p.value[1]! > 0);
    ys.push(...pts.map((p) => p.value[1]!));
    out.push({
      type: "line" as const,
      name: `measured ${i}`,
      symbol: "circle",
      symbolSize: base ? 10 : 8,
      lineStyle: { width: base ? 2.5 : 1.5, color },
      itemStyle: { color },
      z: 3,
      data: pts,
    });
    const f = x.fit;
    if (!f || !pts.length) return;
    const ends = [Math.min(...x.seqs), Math.max(...x.seqs)];
    const c = x.crossover;
    if (c && c.seq !== null && crossDrawn(x, lo, hi)) {
      ends.push(c.seq);
      xs.push(c.seq);
      const y = f.a * Math.pow(c.seq, f.k);
      ys.push(y);
      out.push({
        type: "line" as const,
        name: `cross ${i}`,
        symbol: "diamond",
        symbolSize: 12,
        itemStyle: { color, borderColor: INK.text, borderWidth: 1 },
        label: { show: true, position: "top", color: INK.text, fontSize: 11, formatter: `\u2248 ${Math.round(c.seq)}` },
        labelLayout: { moveOverlap: "shiftY" },
        z: 4,
        data: [[c.seq, y]],
      });
    }
    const from = Math.min(...ends);
    const to = Math.max(...ends);
    out.push({
      type: "line" as const,
      name: `fit ${i}`,
      symbol: "none",
      silent: true,
      lineStyle: { width: 1.2, type: "dashed" as const, color },
      itemStyle: { color },
      z: 2,
      data: [from, to].map((q) => [q, f.a * Math.pow(q, f.k)]),
    });
  });
  const minY = ys.length ? Math.min(...ys) : 1;
  const maxY = ys.length ? Math.max(...ys) : 10;
  chart.setOption(
    {
      animation: false,
      grid: { left: 78, right: 28, top: 30, bottom: 40 },
      tooltip: {
        ...TOOLTIP_BASE,
        trigger: "item",
        formatter: (p: unknown) => {
          const it = p as { seriesName: string; data: { value?: [number, number]; run?: string } | [number, number] };
          const [kind, n] = it.seriesName.split(" ");
          const x = group.series[Number(n)];
          if (!x) return "";
          const head = `${swatch(paint(x.strategy))}<b>${esc(x.strategy)}</b>${x.strategy === group.baseline ? " (baseline)" : ""}`;
          if (kind === "cross" && x.crossover) return [head, esc(x.crossover.text)].join("<br>");
          const d = it.data as { value: [number, number]; run: string };
          if (kind !== "measured" || !d.value) return "";
          return [
            head,
            esc(d.run),
            `seq ${esc(d.value[0])}: <b>${esc(fmtUs(d.value[1]))}</b> ${esc(clock)} time per step`,
            esc(fmtFit(x.fit)),
            ...(x.crossover ? [esc(x.crossover.text)] : []),
          ].join("<br>");
        },
      },
      xAxis: seqAxis(Math.min(...xs), Math.max(...xs)),
      yAxis: {
        type: "log",
        name: `attention ${clock} time`,
        nameTextStyle: { align: "left" },
        min: minY / 2,
        max: maxY * 2,
        ...logAxis(fmtUs, { showMinLabel: false, showMaxLabel: false }),
      },
      series: out,
    },
    { notMerge: true },
  );
}

/** "exact" for 0, else the error (the axis and tooltips of the speed-up chart). */
function errorWords(rel: number): string {
  return rel === 0 ? "exact (0)" : fmtError(rel);
}

/** The rows of the speed-up chart at `seq`: those with an error and a speed-up. */
export function tradeoffRows(group: StrategyGroup, seq: number): StrategyRow[] {
  return group.rows.filter((r) => r.seq === seq && r.accuracy !== null && r.speedup !== null && r.speedup > 0);
}

export function tradeoffChart(chart: EChart, group: StrategyGroup, seq: number, paint: Paint): void {
  const rows = tradeoffRows(group, seq);
  const err = (r: StrategyRow) => Math.max(r.accuracy?.rel_l1 ?? 0, ERROR_FLOOR);
  const errs = rows.map(err);
  const top = Math.max(ERROR_FLOOR * 100, ...errs);
  const xMax = Math.pow(10, Math.ceil(Math.log10(top) + 1e-9));
  const speeds = rows.map((r) => r.speedup ?? 0);
  const y = axisScale((v) => String(v), 0, Math.max(1.2, ...speeds) * 1.1);
  const front = rows.filter((r) => r.pareto).sort((a, b) => err(a) - err(b));
  const series: object[] = [
    {
      type: "line" as const,
      name: "baseline",
      symbol: "none",
      silent: true,
      lineStyle: { width: 1, type: "dotted" as const, color: INK.muted },
      data: [[ERROR_FLOOR / 2.5, 1], [xMax, 1]],
    },
    {
      type: "line" as const,
      name: "front",
      step: "end",
      symbol: "none",
      silent: true,
      lineStyle: { width: 2, color: INK.line, opacity: 0.6 },
      z: 1,
      // On to the right edge: past its last point the best speed-up that error buys stays that point's.
      data: [...front.map((r) => [err(r), r.speedup ?? 0]), ...front.slice(-1).map((r) => [xMax, r.speedup ?? 0])],
    },
    {
      type: "line" as const,
      name: "points",
      lineStyle: { width: 0 },
      symbol: "circle",
      z: 3,
      label: { show: true, position: "right", color: INK.text, fontSize: 11, formatter: (p: { dataIndex: number }) => rows[p.dataIndex]?.strategy ?? "" },
      labelLayout: { moveOverlap: "shiftY" },
      data: rows.map((r) => ({
        value: [err(r), r.speedup ?? 0],
        symbolSize: r.pareto ? 14 : 10,
        itemStyle: { color: paint(r.strategy), borderColor: r.pareto ? INK.text : "transparent", borderWidth: r.pareto ? 2 : 0 },
      })),
    },
  ];
  chart.setOption(
    {
      animation: false,
      grid: { left: 62, right: 96, top: 30, bottom: 40 },
      tooltip: {
        ...TOOLTIP_BASE,
        trigger: "item",
        formatter: (p: unknown) => {
          const it = p as { seriesName: string; dataIndex: number };
          const r = it.seriesName === "points" ? rows[it.dataIndex] : undefined;
          if (!r || !r.accuracy) return "";
          const a = r.accuracy;
          return [
            `${swatch(paint(r.strategy))}<b>${esc(r.strategy)}</b> at seq ${esc(r.seq)}`,
            esc(r.run),
            `error <b>${esc(errorWords(a.rel_l1))}</b>, cosine ${esc(a.cosine.toFixed(6))}`,
            `loss \u0394 ${a.loss_diff === null ? "not measured" : esc(fmtLossDiff(a.loss_diff))}`,
            `speed-up vs ${esc(group.baseline ?? "the baseline")}: <b>${esc(fmtRatio(r.speedup))}</b>`,
            ...(r.pareto ? ["on the Pareto front: nothing here is both faster and more accurate"] : []),
          ].join("<br>");
        },
      },
      xAxis: {
        type: "log",
        name: "error (relative L1)",
        nameLocation: "middle",
        nameGap: 26,
        min: ERROR_FLOOR / 2.5,
        max: xMax,
        logBase: 10,
        axisLabel: {
          hideOverlap: true,
          formatter: (v: number) => {
            const e = Math.log10(v);
            if (Math.abs(e - Math.round(e)) > 1e-9) return "";
            if (Math.abs(v / ERROR_FLOOR - 1) < 1e-6) return "exact";
            const pct = v * 100;
            return pct >= 0.01 ? `${Number(pct.toPrecision(6))} %` : `1e${Math.round(Math.log10(pct))} %`;
          },
        },
      },
      yAxis: {
        type: "value",
        name: `speed-up vs ${group.baseline ?? "baseline"}`,
        nameTextStyle: { align: "left" },
        min: y.min,
        max: y.max,
        interval: y.step,
        axisLabel: { formatter: (v: number) => (y.tick(v) ? `${y.tick(v)}\u00d7` : "") },
      },
      series,
    },
    { notMerge: true },
  );
}
