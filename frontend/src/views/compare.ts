// The compare view: several runs side by side against a baseline (./compare), their phases as
// grouped bars, and how time and memory scale with the sequence length (./scaling). Generation
// runs add their decode figures (time per decode step, the KV cache) and scale against their context.

import { valueAxis } from "../axes";
import { createChart, esc, swatch, TOOLTIP_BASE, type EChart } from "../charts";
import { h, replace, select, type Child } from "../dom";
import { fmtBytes, fmtCount, fmtFlops, fmtIntensity, fmtRate, fmtRatio, fmtUs } from "../format";
import { orderPhases, phaseLabel } from "../metrics";
import { noisyMark, spreadTitle } from "../spread";
import { GROUP_BY, PHASE_METRICS, type Actions, type GroupBy, type PhaseMetric, type State } from "../state";
import type { Comparison, CompareRun, TimeVerdict } from "../types";
import { errorBox, loadingBox, note, partialMark, partialTitle, pending } from "./common";
import { RooflineOverlay } from "./compare_roofline";
import { roofBoundCell, roofShareCell } from "./roofline";
import { color, runColors, seriesKey } from "./run_colors";
import { NO_DECODE_FIT, NO_FIT, ScalingPanel, type ScalingPaint } from "./scaling";


const PHASE_METRIC_INFO: Record<PhaseMetric, { title: string; format: (v: number) => string }> = {
  cpu_us: { title: "CPU time", format: fmtUs },
  device_us: { title: "device time", format: fmtUs },
  alloc_bytes: { title: "memory allocated", format: fmtBytes },
  flops: { title: "FLOPs", format: fmtFlops },
};

const GROUP_LABELS: Record<GroupBy, string> = { impl: "implementation", seq: "sequence length", dtype: "dtype", none: "none" };

/** "1.82×", coloured: red when worse than its baseline by over 10 %, green when better; uncoloured
 *  and marked "≈" where the two runs cannot tell it from drift between runs (``verdict``). */
function ratioEl(r: number | null, baseline: string | null, higherIsBetter = false, verdict: TimeVerdict | null = null): HTMLElement {
  if (r === null || !Number.isFinite(r)) {
    return h("span", { class: "ratio", title: baseline === null ? "no baseline to set this run against" : `no ratio: ${baseline}'s or this run's value is 0 or not recorded` }, "\u2014");
  }
  const undecided = verdict !== null && !verdict.decided;
  const worse = !undecided && (higherIsBetter ? r < 0.9 : r > 1.1);
  const better = !undecided && (higherIsBetter ? r > 1.1 : r < 0.9);
  const text = (undecided ? "\u2248" : "") + fmtRatio(r);
  const why = verdict === null ? "" : `\n${verdict.note}`;
  return h(
    "span",
    { class: `ratio${worse ? " worse" : better ? " better" : ""}${undecided ? " undecided" : ""}`, title: `this run / ${baseline ?? "its baseline"} (same model and configuration)${why}` },
    text,
  );
}

/** Bytes, or "—" for a figure the trace did not record. */
function bytesCell(v: number | null): string {
  return v === null ? "\u2014" : fmtBytes(v);
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
  private readonly roofline: RooflineOverlay;
  /** Series against the sequence length, and generation runs' against their decode context. */
  private readonly seqScaling = new ScalingPanel("seq", "scaling-chart");
  private readonly decodeScaling = new ScalingPanel("context", "decode-scaling-chart");
  private charts: { chart: EChart; dispose: () => void }[] = [];
  private phaseChart: EChart | null = null;
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
    this.roofline = new RooflineOverlay(actions);
    this.el = h(
      "section",
      "compare-page",
      this.top,
      this.errorsEl,
      this.tableEl,
      this.phaseSection,
      this.roofline.el,
      h(
        "section",
        "compare-scaling",
        h("h4", null, "Scaling (log\u2013log; fit: value \u2248 a\u00b7seq^k, or a\u00b7context^k for decode)"),
        this.scalingStatus,
        this.seqScaling.el,
        this.decodeScaling.el,
      ),
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
    if (dataChanged) this.roofline.draw(s.compareData.data);
    const scalingChanged = [diff("sdata", s.scaling.data), diff("serr", s.scaling.error), diff("sstatus", s.scaling.status)].some(Boolean);
    if (scalingChanged || dataChanged) this.renderScaling(s); // its colours are the table's
  }

  dispose(): void {
    for (const c of this.charts) c.dispose();
    this.charts = [];
    this.phaseChart = null;
    this.roofline.forget();
    this.seqScaling.forget();
    this.decodeScaling.forget();
    this.last = {};
  }

  private chartIn(el: HTMLElement): EChart {
    const c = createChart(el);
    this.charts.push(c);
    return c.chart;
  }

  private renderTop(s: State): void {
    const runs = s.compare ?? [];
    // The default baseline is the server's: the first exact run by name (else the first by name).
    const first = (!s.baseline ? s.compareData.data?.baseline : null) ?? [...runs].sort()[0] ?? "";
    replace(
      this.top,
      h("button", { class: "back", attrs: { type: "button" }, on: { click: () => this.actions.openCompare(null) } }, "\u2190 Runs"),
      h("h2", null, `Compare ${runs.length} runs`),
      s.compareData.status === "loading" && s.compareData.data ? h("span", "muted small", "refreshing\u2026") : null,
      h("span", "spacer"),
      h(
        "label",
        {
          title:
            "Ratios are only taken within groups of like-for-like runs (same model, sizes, seq, dtype, mode, parallel layout): " +
            "against the run there with the baseline's implementation, else the group's first run by name.",
        },
        "baseline ",
        select(
          [{ value: "", label: `first exact by name (${first})` }, ...runs.map((r) => ({ value: r, label: r }))],
          s.baseline ?? "",
          (v) => this.actions.setBaseline(v || null),
          "Baseline run",
        ),
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
  private headlines(data: Comparison): HTMLElement[] {
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
  private whySlower(data: Comparison): HTMLElement[] {
    return data.runs
      .filter((r) => r.why_slower.length > 0)
      .map((r) =>
        h(
          "div",
          { class: "why-slower", attrs: { "data-testid": "why-slower" } },
          h("h3", null, `Why ${r.run} is slower than ${r.baseline ?? data.baseline ?? "the baseline"}`),
          h("ul", null, ...r.why_slower.map((reason) => h("li", null, reason))),
        ),
      );
  }

  private table(data: Comparison, by: GroupBy): HTMLElement {
    const hasDevice = data.runs.some((r) => r.attention_device_us > 0);
    const hasKernels = data.runs.some((r) => r.kernels_per_forward > 0);
    const hasDecode = data.runs.some((r) => r.decode !== null);
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
      ["FLOP/B", "num"],
      ["% roof", "num"],
      ["bound", ""],
      ["ops / fwd", "num"],
      ...(hasKernels ? ([["kernels / fwd", "num"]] as [string, string][]) : []),
      ...(hasDecode ? ([["decode / step", "num"], ["KV cache", ""]] as [string, string][]) : []),
      ["findings", ""],
    ];
    const cell = (value: string, ratio: HTMLElement | null, title?: string, mark: HTMLElement | null = null) =>
      h("td", { class: "num", title: title ?? "" }, value, mark, ratio ? " " : null, ratio);
    const tbody = h("tbody");
    let group: string | null = null;
    const colors = runColors(data.runs);
    for (const r of sortedRuns(data.runs, by)) {
      const g = groupKey(r, by);
      if (by !== "none" && g !== group) {
        group = g;
        tbody.appendChild(h("tr", "group", h("th", { attrs: { colspan: heads.length } }, `${by}: ${g || "\u2014"}`)));
      }
      const isBase = r.baseline === r.run;
      const onDevice = r.clock === "device";
      const alone = r.baseline === null;
      const cells: Child[] = [
        h(
          "td",
          { class: "run-name", title: `${r.run}\n${r.group}${isBase ? "" : alone ? `\n${r.unpaired ?? "no ratios"}` : `\nratios against ${r.baseline}`}` },
          h("span", { class: "sw", style: { background: colors.run.get(r.run) ?? color(0) } }),
          " ",
          h("a", { attrs: { href: "#" }, on: { click: (ev) => (ev.preventDefault(), this.actions.openRun(r.run)) } }, r.run),
          isBase
            ? h(
                "span",
                { class: "badge baseline", title: `the baseline of its group (${r.group}): the other runs there are against it` },
                r.run === data.baseline ? "baseline" : "group baseline",
              )
            : alone && r.unpaired
              ? h("span", { class: "badge unpaired", title: r.unpaired }, "no ratios")
              : null,
        ),
        h("td", null, r.impl ?? "\u2014"),
        h("td", "num", r.seq === null ? "\u2014" : String(r.seq)),
        h("td", null, r.dtype ?? "\u2014"),
        h("td", null, h("span", "backend-chip", r.backend)),
        // The spread is on the run's clock (CompareRun.clock): device time where all its kernels ran, else CPU.
        cell(fmtUs(r.attention_cpu_us), isBase ? null : ratioEl(r.ratio.attention_cpu_us, r.baseline, false, onDevice ? null : r.time_verdict),
          `${fmtUs(r.step_cpu_us)} per step in all${onDevice ? "" : `; ${spreadTitle(r.attention_spread)}`}`,
          onDevice ? null : noisyMark(r.attention_spread, fmtUs, true)),
        hasDevice
          ? cell(r.attention_device_us ? fmtUs(r.attention_device_us) : "\u2014", isBase ? null : ratioEl(r.ratio.attention_device_us, r.baseline, false, onDevice ? r.time_verdict : null),
              r.device_partial ? partialTitle() : onDevice ? spreadTitle(r.attention_spread) : undefined,
              r.device_partial ? partialMark() : onDevice ? noisyMark(r.attention_spread, fmtUs, true) : null)
          : null,
        cell(bytesCell(r.alloc_bytes), isBase ? null : ratioEl(r.ratio.alloc_bytes, r.baseline), r.alloc_bytes === null ? "memory not recorded (profile_memory=False)" : `S\u00d7S scores: ${fmtBytes(r.sxs_bytes)}`),
        cell(bytesCell(r.peak_bytes), isBase ? null : ratioEl(r.ratio.peak_bytes, r.baseline)),
        cell(fmtRate(r.flops_per_s), isBase ? null : ratioEl(r.ratio.flops_per_s, r.baseline, true), `${fmtFlops(r.flops)} per step`),
        // Attention's forward under the run's roofline (its Roofline tab has the peaks and each phase).
        h("td", { class: "num intensity", title: "attention's FLOPs per byte moved (forward)" }, fmtIntensity(r.roofline?.attention?.intensity)),
        roofShareCell(r.roofline?.attention),
        roofBoundCell(r.roofline?.attention),
        h("td", "num", fmtCount(r.ops_per_forward)),
        hasKernels ? h("td", "num", fmtCount(r.kernels_per_forward)) : null,
        ...(hasDecode ? this.decodeCells(r, isBase) : []),
        h(
          "td",
          "findings-cell",
          ...(r.finding_chips.length ? r.finding_chips : r.findings.map((id) => ({ id, severity: "", title: id, time_us: 0 }))).map((f) =>
            h(
              "span",
              {
                class: `badge finding-id${f.severity ? ` sev-${f.severity}` : ""}`,
                title: `${f.severity ? `${f.severity}: ` : ""}${f.title}${f.time_us > 0 ? ` (${fmtUs(f.time_us)} per step)` : ""}`,
                attrs: { tabindex: 0 },
              },
              f.id,
            ),
          ),
        ),
      ];
      tbody.appendChild(h("tr", { class: isBase ? "base-row" : "", dataset: { run: r.run } }, ...cells));
    }
    return h(
      "table",
      { class: "grid compare-table", attrs: { "data-testid": "compare-table" } },
      h("thead", null, h("tr", null, ...heads.map(([t, c]) => h("th", c || null, t)))),
      tbody,
    );
  }

  /** A generation run's decode step (one token per sequence): attention time per decode step on the
   * run's clock with its ratio; the KV cache's kind and heads over the bytes attention reads. */
  private decodeCells(r: CompareRun, isBase: boolean): HTMLElement[] {
    const d = r.decode;
    if (!d) return [h("td", "num decode muted", "\u2014"), h("td", "kv-cache muted", "\u2014")];
    const clock = r.clock === "device" ? "device" : "CPU";
    const title =
      `${clock} time of attention per decode step (one token per sequence), at a mean context of ${fmtCount(d.context)} keys; ` +
      `the whole step ${fmtUs(d.step_us)}, ${fmtCount(d.launches_per_step)} launches; prefill attention ${fmtUs(d.prefill_us)}`;
    return [
      h("td", { class: "num decode", title }, fmtUs(d.us_per_step), isBase ? null : " ", isBase ? null : ratioEl(r.ratio.decode_us_per_step, r.baseline)),
      h(
        "td",
        {
          class: "kv-cache",
          title: `the cache, all layers: ${fmtBytes(d.kv_bytes)} (mean over the decode steps); one layer at the last: ${fmtBytes(d.kv_bytes_per_layer)}`,
        },
        h("div", "kv-kind", d.kv_cache ?? "unknown kind"),
        h("div", "kv-heads", `${d.kv_heads ?? "?"} KV ${d.kv_heads === 1 ? "head" : "heads"}`),
        h("div", { class: "muted small kv-read", title: "K and V attention reads per decode step, all layers" }, `reads ${fmtBytes(d.read_bytes_per_token)}`),
      ),
    ];
  }

  private renderPhases(s: State): void {
    const data = s.compareData.data;
    if (!data || !data.runs.length) return;
    const hasDevice = data.runs.some((r) => r.attention_device_us > 0);
    const metrics = PHASE_METRICS.filter((m) => hasDevice || m !== "device_us");
    // Device time by default when every run has some (a CPU-only run would show zeros).
    const auto = data.runs.every((r) => r.clock === "device") ? "device_us" : "cpu_us";
    const key = s.phaseMetric !== null && metrics.includes(s.phaseMetric) ? s.phaseMetric : auto;
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
    const colors = runColors(runs);
    const runColor = (i: number) => colors.run.get(runs[i]?.run ?? "") ?? color(i);
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
              return r ? `${swatch(runColor(it.seriesIndex))}${esc(r.run)}: <b>${esc(info.format(value(r, phase)))}</b>` : "";
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
          itemStyle: { color: runColor(i) },
          data: phases.map((p) => value(r, p)),
        })),
      },
      { notMerge: true },
    );
    replace(
      this.phaseLegend,
      ...runs.map((r, i) => h("span", "legend-item", h("span", { class: "sw", style: { background: runColor(i) } }), r.run)),
    );
  }

  private renderScaling(s: State): void {
    const box = pending(s.scaling, "the scaling fits");
    const data = s.scaling.data;
    const series = data ? data.series.filter((x) => x.points.length) : [];
    const decode = series.filter((x) => x.x === "context");
    const seq = series.filter((x) => x.x !== "context");
    if (box || !data) replace(this.scalingStatus, box ?? loadingBox("the scaling fits"));
    else replace(this.scalingStatus, series.some((x) => x.time_fit || x.memory_fit) ? null : note(seq.length ? NO_FIT : NO_DECODE_FIT));
    // Colours from the compare table: a run's dot is its row's colour, a series' fit its hue.
    const rows = s.compareData.data?.runs ?? [];
    const colors = runColors(rows);
    const byRun = new Map(rows.map((r) => [r.run, r]));
    const paint: ScalingPaint = {
      run: (run, i) => colors.run.get(run) ?? color(i),
      series: (x, i) => {
        const r = x.points.map((p) => byRun.get(p.run)).find(Boolean);
        return (r && colors.series.get(seriesKey(r))) ?? color(i);
      },
    };
    // A point's time is device time where its run has some (compare.py's scaling), else CPU time.
    const clock = (list: typeof series) => {
      const device = list.every((x) => x.points.every((p) => (byRun.get(p.run)?.attention_device_us ?? 0) > 0));
      return rows.length ? (device ? "device" : "CPU") : "device or CPU";
    };
    const chartIn = (el: HTMLElement) => this.chartIn(el);
    this.seqScaling.draw(seq, clock(seq), paint, chartIn);
    this.decodeScaling.draw(decode, clock(decode), paint, chartIn);
  }
}
