// The compare view: several runs side by side against a baseline (./compare), their phases as
// grouped bars, and how time and memory scale with the sequence length (./scaling).

import { logAxis, valueAxis } from "../axes";
import { createChart, esc, swatch, TOOLTIP_BASE, type EChart } from "../charts";
import { h, replace, select, type Child } from "../dom";
import { fmtBytes, fmtCount, fmtFlops, fmtRate, fmtUs } from "../format";
import { orderPhases, phaseLabel } from "../metrics";
import { GROUP_BY, PHASE_METRICS, type Actions, type GroupBy, type PhaseMetric, type State } from "../state";
import type { CompareResponse, CompareRun, Fit, ScalingSeries } from "../types";
import { errorBox, loadingBox, note, pending } from "./common";

// Colours for runs and series (not phases): from our palette, never from data.
const PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"];
const color = (i: number) => PALETTE[i % PALETTE.length]!;

const PHASE_METRIC_INFO: Record<PhaseMetric, { title: string; format: (v: number) => string }> = {
  cpu_us: { title: "CPU time", format: fmtUs },
  device_us: { title: "device time", format: fmtUs },
  alloc_bytes: { title: "memory allocated", format: fmtBytes },
  flops: { title: "FLOPs", format: fmtFlops },
};

const GROUP_LABELS: Record<GroupBy, string> = { impl: "implementation", seq: "sequence length", dtype: "dtype", none: "none" };

const NO_FIT =
  "Scaling needs runs that differ only in sequence length (e.g. the demo's seq256 and seq512).";

/** "1.82×", coloured: red when worse than the baseline by over 10 %, green when better. */
function ratioEl(r: number | null, higherIsBetter = false): HTMLElement {
  if (r === null || !Number.isFinite(r)) return h("span", { class: "ratio", title: "the baseline's value is 0" }, "\u2014");
  const worse = higherIsBetter ? r < 0.9 : r > 1.1;
  const better = higherIsBetter ? r > 1.1 : r < 0.9;
  const text = r >= 100 ? `${r.toFixed(0)}\u00d7` : r >= 10 ? `${r.toFixed(1)}\u00d7` : `${r.toFixed(2)}\u00d7`;
  return h("span", { class: `ratio${worse ? " worse" : better ? " better" : ""}`, title: "this run / the baseline" }, text);
}

function groupKey(r: CompareRun, by: GroupBy): string {
  if (by === "none") return "";
  const v = r[by];
  return v === null ? "" : String(v);
}

function cmp(a: string | number | null, b: string | number | null): number {
  if (a === b) return 0;
  if (a === null) return 1;
  if (b === null) return -1;
  if (typeof a === "number" && typeof b === "number") return a - b;
  return String(a) < String(b) ? -1 : 1;
}

/** Rows sorted by the group-by field (then by run name); the response order when "none". */
function sortedRuns(runs: CompareRun[], by: GroupBy): CompareRun[] {
  if (by === "none") return runs;
  return [...runs].sort((a, b) => cmp(a[by], b[by]) || cmp(a.run, b.run));
}

function fmtFit(f: Fit | null): string {
  if (!f) return "no fit";
  // Through two points any line fits: their R² would be 1.00 and mean nothing.
  return f.r2 === null
    ? `k = ${f.k.toFixed(2)} (${f.points} points: no fit quality)`
    : `k = ${f.k.toFixed(2)} (R\u00b2 ${f.r2.toFixed(2)}, ${f.points} points)`;
}

export class CompareView {
  readonly el: HTMLElement;
  private readonly top: HTMLElement;
  private readonly errorsEl: HTMLElement;
  private readonly tableEl: HTMLElement;
  private readonly phaseControls: HTMLElement;
  private readonly phaseChartEl: HTMLElement;
  private readonly phaseLegend: HTMLElement;
  private readonly phaseSection: HTMLElement;
  private readonly scalingStatus: HTMLElement;
  private readonly scalingEl: HTMLElement;
  private readonly timeChartEl: HTMLElement;
  private readonly memChartEl: HTMLElement;
  private readonly timeLegend: HTMLElement;
  private readonly memLegend: HTMLElement;
  private charts: { chart: EChart; dispose: () => void }[] = [];
  private phaseChart: EChart | null = null;
  private timeChart: EChart | null = null;
  private memChart: EChart | null = null;
  private last: Record<string, unknown> = {};

  constructor(private readonly actions: Actions) {
    this.top = h("div", "toolbar run-top");
    this.errorsEl = h("div");
    this.tableEl = h("div", "table-wrap");
    this.phaseControls = h("div", "toolbar");
    this.phaseChartEl = h("div", { class: "chart", style: { height: "280px" } });
    this.phaseLegend = h("div", "legend");
    this.phaseSection = h("section", "compare-phases", h("h4", null, "Phases (per step, summed over layers)"), this.phaseControls, this.phaseChartEl, this.phaseLegend);
    this.scalingStatus = h("div");
    this.timeChartEl = h("div", { class: "chart", style: { height: "260px" } });
    this.memChartEl = h("div", { class: "chart", style: { height: "260px" } });
    this.timeLegend = h("div", "legend");
    this.memLegend = h("div", "legend");
    this.scalingEl = h(
      "div",
      { class: "scaling-charts", attrs: { "data-testid": "scaling-chart" } },
      h("div", null, h("div", "chart-title", "Attention CPU time per step vs. sequence length"), this.timeChartEl, this.timeLegend),
      h("div", null, h("div", "chart-title", "Memory allocated in attention per step vs. sequence length"), this.memChartEl, this.memLegend),
    );
    this.el = h(
      "section",
      "compare-page",
      this.top,
      this.errorsEl,
      this.tableEl,
      this.phaseSection,
      h("section", "compare-scaling", h("h4", null, "Scaling (log\u2013log; fit: value \u2248 a\u00b7seq^k)"), this.scalingStatus, this.scalingEl),
    );
  }

  update(s: State): void {
    const diff = (k: string, v: unknown) => {
      const c = this.last[k] !== v;
      this.last[k] = v;
      return c;
    };
    const c1 = [diff("compare", s.compare), diff("picked", s.picked), diff("baseline", s.baseline), diff("groupBy", s.groupBy)];
    const dataChanged = [diff("data", s.compareData.data), diff("err", s.compareData.error), diff("status", s.compareData.status)].some(Boolean);
    if (c1.some(Boolean) || dataChanged) this.renderTop(s);
    const metricChanged = diff("metric", s.phaseMetric);
    if (dataChanged || c1[3]) this.renderTable(s);
    if (dataChanged || metricChanged) this.renderPhases(s);
    const scalingChanged = [diff("sdata", s.scaling.data), diff("serr", s.scaling.error), diff("sstatus", s.scaling.status)].some(Boolean);
    if (scalingChanged) this.renderScaling(s);
  }

  dispose(): void {
    for (const c of this.charts) c.dispose();
    this.charts = [];
    this.phaseChart = this.timeChart = this.memChart = null;
    this.last = {};
  }

  private chartIn(el: HTMLElement): EChart {
    const c = createChart(el);
    this.charts.push(c);
    return c.chart;
  }

  private renderTop(s: State): void {
    const runs = s.compare ?? [];
    const baseline = s.compareData.data?.baseline ?? s.baseline ?? runs[0] ?? "";
    replace(
      this.top,
      h("button", { class: "back", attrs: { type: "button" }, on: { click: () => this.actions.openCompare(null) } }, "\u2190 Runs"),
      h("h2", null, `Compare ${runs.length} runs`),
      s.compareData.status === "loading" && s.compareData.data ? h("span", "muted small", "refreshing\u2026") : null,
      h("span", "spacer"),
      h(
        "label",
        null,
        "baseline ",
        select(runs.map((r) => ({ value: r, label: r })), baseline, (v) => this.actions.setBaseline(v), "Baseline run"),
      ),
      h(
        "label",
        null,
        "group by ",
        select(
          GROUP_BY.map((g) => ({ value: g, label: GROUP_LABELS[g] })),
          s.groupBy,
          (v) => this.actions.patch({ groupBy: v as GroupBy }),
          "Group rows by",
        ),
      ),
    );
  }

  private renderTable(s: State): void {
    const box = pending(s.compareData, "the comparison");
    const data = s.compareData.data;
    if (box || !data) {
      replace(this.errorsEl);
      replace(this.tableEl, box);
      this.phaseSection.hidden = true;
      return;
    }
    this.phaseSection.hidden = data.runs.length === 0;
    replace(this.errorsEl, ...data.errors.map((e) => errorBox(`Could not compare ${e.run}:`, e.error)));
    if (!data.runs.length) {
      replace(this.tableEl, note("None of these runs could be read."));
      return;
    }
    replace(this.tableEl, ...this.headlines(data), this.table(data, s.groupBy), ...this.whySlower(data));
  }

  /** One sentence per group of runs that differ only in their implementation: the fastest
   * against the others (compare.py's headlines). */
  private headlines(data: CompareResponse): HTMLElement[] {
    if (!data.headlines.length) return [];
    return [
      h(
        "div",
        { class: "headlines", attrs: { "data-testid": "headlines" } },
        ...data.headlines.map((x) => h("p", "headline", x.sentence)),
      ),
    ];
  }

  /** For a run of the same model and configuration as the baseline with another implementation,
   * slower: why, read from both traces (compare.py's why_slower). */
  private whySlower(data: CompareResponse): HTMLElement[] {
    return data.runs
      .filter((r) => r.why_slower.length > 0)
      .map((r) =>
        h(
          "div",
          { class: "why-slower", attrs: { "data-testid": "why-slower" } },
          h("h3", null, `Why ${r.run} is slower than ${data.baseline ?? "the baseline"}`),
          h("ul", null, ...r.why_slower.map((reason) => h("li", null, reason))),
        ),
      );
  }

  private table(data: CompareResponse, by: GroupBy): HTMLElement {
    const hasDevice = data.runs.some((r) => r.attention_device_us > 0);
    const hasKernels = data.runs.some((r) => r.kernels_per_forward > 0);
    const heads: [string, string][] = [
      ["run", ""],
      ["impl", ""],
      ["seq", "num"],
      ["dtype", ""],
      ["backend", ""],
      ["attention CPU", "num"],
      ...(hasDevice ? ([["attention device", "num"]] as [string, string][]) : []),
      ["alloc", "num"],
      ["peak", "num"],
      ["FLOP/s", "num"],
      ["ops / fwd", "num"],
      ...(hasKernels ? ([["kernels / fwd", "num"]] as [string, string][]) : []),
      ["findings", ""],
    ];
    const cell = (value: string, ratio: HTMLElement | null, title?: string) =>
      h("td", { class: "num", title: title ?? "" }, value, ratio ? " " : null, ratio);
    const tbody = h("tbody");
    let group: string | null = null;
    const index = new Map(data.runs.map((r, i) => [r.run, i]));
    for (const r of sortedRuns(data.runs, by)) {
      const g = groupKey(r, by);
      if (by !== "none" && g !== group) {
        group = g;
        tbody.appendChild(h("tr", "group", h("th", { attrs: { colspan: heads.length } }, `${by}: ${g || "\u2014"}`)));
      }
      const isBase = r.run === data.baseline;
      const cells: Child[] = [
        h(
          "td",
          { class: "run-name", title: r.run },
          h("span", { class: "sw", style: { background: color(index.get(r.run) ?? 0) } }),
          " ",
          h("a", { attrs: { href: "#" }, on: { click: (ev) => (ev.preventDefault(), this.actions.openRun(r.run)) } }, r.run),
          isBase ? h("span", "badge baseline", "baseline") : null,
        ),
        h("td", null, r.impl ?? "\u2014"),
        h("td", "num", r.seq === null ? "\u2014" : String(r.seq)),
        h("td", null, r.dtype ?? "\u2014"),
        h("td", null, h("span", "backend-chip", r.backend)),
        cell(fmtUs(r.attention_cpu_us), isBase ? null : ratioEl(r.ratio.attention_cpu_us), `${fmtUs(r.step_cpu_us)} per step in all`),
        hasDevice ? cell(r.attention_device_us ? fmtUs(r.attention_device_us) : "\u2014", isBase ? null : ratioEl(r.ratio.attention_device_us)) : null,
        cell(fmtBytes(r.alloc_bytes), isBase ? null : ratioEl(r.ratio.alloc_bytes), `S\u00d7S scores: ${fmtBytes(r.sxs_bytes)}`),
        cell(fmtBytes(r.peak_bytes), isBase ? null : ratioEl(r.ratio.peak_bytes)),
        cell(fmtRate(r.flops_per_s), isBase ? null : ratioEl(r.ratio.flops_per_s, true), `${fmtFlops(r.flops)} per step`),
        h("td", "num", fmtCount(r.ops_per_forward)),
        hasKernels ? h("td", "num", fmtCount(r.kernels_per_forward)) : null,
        h("td", "findings-cell", ...r.findings.map((f) => h("span", "badge finding-id", f))),
      ];
      tbody.appendChild(h("tr", isBase ? "base-row" : null, ...cells));
    }
    return h(
      "table",
      { class: "grid compare-table", attrs: { "data-testid": "compare-table" } },
      h("thead", null, h("tr", null, ...heads.map(([t, c]) => h("th", c || null, t)))),
      tbody,
    );
  }

  private renderPhases(s: State): void {
    const data = s.compareData.data;
    if (!data || !data.runs.length) return;
    const hasDevice = data.runs.some((r) => r.attention_device_us > 0);
    const metrics = PHASE_METRICS.filter((m) => hasDevice || m !== "device_us");
    const key = metrics.includes(s.phaseMetric) ? s.phaseMetric : "cpu_us";
    const info = PHASE_METRIC_INFO[key];
    replace(
      this.phaseControls,
      h(
        "label",
        null,
        "Metric ",
        select(
          metrics.map((m) => ({ value: m, label: PHASE_METRIC_INFO[m].title })),
          key,
          (v) => this.actions.patch({ phaseMetric: v as PhaseMetric }),
          "Phase metric",
        ),
      ),
    );
    const phases = orderPhases(data.runs.flatMap((r) => Object.keys(r.phases)));
    const runs = data.runs;
    const value = (r: CompareRun, phase: string) => r.phases[phase]?.[key] ?? 0;
    if (!this.phaseChart) this.phaseChart = this.chartIn(this.phaseChartEl);
    this.phaseChart.setOption(
      {
        animation: false,
        grid: { left: 78, right: 16, top: 28, bottom: 28 },
        tooltip: {
          ...TOOLTIP_BASE,
          trigger: "axis",
          axisPointer: { type: "shadow" },
          formatter: (params: unknown) => {
            const list = (Array.isArray(params) ? params : [params]) as { dataIndex: number; seriesIndex: number }[];
            const phase = phases[list[0]?.dataIndex ?? -1];
            if (phase === undefined) return "";
            const rows = list.map((it) => {
              const r = runs[it.seriesIndex];
              return r ? `${swatch(color(it.seriesIndex))}${esc(r.run)}: <b>${esc(info.format(value(r, phase)))}</b>` : "";
            });
            return [`<b>${esc(phaseLabel(phase))}</b> \u2014 ${esc(info.title)}`, ...rows].join("<br>");
          },
        },
        xAxis: { type: "category", data: phases.map(phaseLabel) },
        yAxis: { type: "value", name: info.title, nameTextStyle: { align: "left" }, ...valueAxis(info.format, 0, Math.max(0, ...runs.flatMap((r) => phases.map((p) => value(r, p))))) },
        series: runs.map((r, i) => ({
          type: "bar" as const,
          name: `run ${i}`,
          barMaxWidth: 22,
          itemStyle: { color: color(i) },
          data: phases.map((p) => value(r, p)),
        })),
      },
      { notMerge: true },
    );
    replace(
      this.phaseLegend,
      ...runs.map((r, i) => h("span", "legend-item", h("span", { class: "sw", style: { background: color(i) } }), r.run)),
    );
  }

  private renderScaling(s: State): void {
    const box = pending(s.scaling, "the scaling fits");
    const data = s.scaling.data;
    if (box || !data) {
      replace(this.scalingStatus, box ?? loadingBox("the scaling fits"));
      this.scalingEl.hidden = true;
      return;
    }
    const series = data.series.filter((x) => x.points.length);
    const anyFit = series.some((x) => x.time_fit || x.memory_fit);
    replace(this.scalingStatus, anyFit ? null : note(NO_FIT));
    this.scalingEl.hidden = series.length === 0;
    if (!series.length) return;
    if (!this.timeChart) this.timeChart = this.chartIn(this.timeChartEl);
    if (!this.memChart) this.memChart = this.chartIn(this.memChartEl);
    this.scalingChart(this.timeChart, series, "time_us", "time_fit", fmtUs, "attention CPU time");
    this.scalingChart(this.memChart, series, "alloc_bytes", "memory_fit", fmtBytes, "memory allocated");
    this.scalingLegend(this.timeLegend, series, "time_fit");
    this.scalingLegend(this.memLegend, series, "memory_fit");
  }

  private scalingChart(
    chart: EChart,
    series: ScalingSeries[],
    field: "time_us" | "alloc_bytes",
    fit: "time_fit" | "memory_fit",
    format: (v: number) => string,
    title: string,
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
        symbolSize: 8,
        lineStyle: { width: 0 }, // the measurements as dots; the fit is the line
        itemStyle: { color: color(i) },
        data: pts.map((p) => ({ value: [p.seq, p[field]], run: p.run })),
      });
      const f = x[fit];
      if (f) {
        out.push({
          type: "line" as const,
          name: `fit ${i}`,
          symbol: "none",
          silent: true,
          lineStyle: { width: 1.5, type: "dashed" as const, color: color(i) },
          itemStyle: { color: color(i) },
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
              `${swatch(color(i))}<b>${esc(x.label)}</b>`,
              `${esc(it.data.run)}`,
              `seq ${esc(it.data.value[0])}: <b>${esc(format(it.data.value[1]))}</b>`,
              esc(fmtFit(x[fit])),
            ].join("<br>");
          },
        },
        xAxis: {
          type: "log",
          logBase: 2,
          name: "seq",
          nameLocation: "middle",
          nameGap: 26,
          min: minSeq / 1.25,
          max: maxSeq * 1.25,
          axisLabel: { showMinLabel: false, showMaxLabel: false, formatter: (v: number) => String(Math.round(v)) },
        },
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

  private scalingLegend(el: HTMLElement, series: ScalingSeries[], fit: "time_fit" | "memory_fit"): void {
    replace(
      el,
      ...series.map((x, i) =>
        h(
          "span",
          { class: "legend-item", title: x.points.map((p) => p.run).join(", ") },
          h("span", { class: "sw", style: { background: color(i) } }),
          x.label,
          h("span", x[fit] ? "fit" : "muted", ` ${fmtFit(x[fit])}`),
        ),
      ),
    );
  }
}
