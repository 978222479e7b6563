// The ranks view of a multi-worker run (./ranks): stragglers against the median over ranks at a
// chosen margin, every rank's attention time (in its fastest step, and per layer) with the "All
// ranks" aggregate (views/ranks_table.ts), attention / collectives / other per rank, the
// collectives by name, and the layer x global head map that puts tensor-parallel shards back
// together; a run of many ranks can be limited to some of them (views/ranks_filter.ts). The
// banner, the table and the map name their figures in the server's words (metric_label,
// means_label, heads_label, median_label), so that they read as the CLI does.

import { stackedMax, valueAxis } from "../axes";
import { createChart, esc, swatch, TOOLTIP_BASE, type EChart } from "../charts";
import { append, h, replace, select } from "../dom";
import { fmtCount, fmtShare, fmtUs } from "../format";
import { MARGINS, rankSelection, type Actions, type State } from "../state";
import { INK } from "../theme";
import type { RankRow, RankView, Straggler } from "../types";
import { errorBox, loadingBox, note } from "./common";
import { RankFilter } from "./ranks_filter";
import { GlobalHeadsMap } from "./ranks_heads";
import { metricColumn, ranksTable } from "./ranks_table";

const PARTS = [
  { key: "attention", label: "attention", color: "#fb8c00", value: (r: RankRow) => r.attention_us },
  { key: "collectives", label: "collectives", color: "#5c6bc0", value: (r: RankRow) => r.collective_us },
  { key: "other", label: "other", color: "#bdbdbd", value: (r: RankRow) => r.other_us },
] as const;

function pct(margin: number): string {
  return `${Number((margin * 100).toFixed(1))}%`;
}

function rankName(r: { rank: number | null; worker: string }): string {
  return r.rank === null ? r.worker : `rank ${r.rank}`;
}

export class RanksView {
  readonly el: HTMLElement;
  private readonly toolbar: HTMLElement;
  private readonly body: HTMLElement;
  private readonly tableEl: HTMLElement;
  private readonly chartEl: HTMLElement;
  private readonly headsMap = new GlobalHeadsMap();
  private readonly filter: RankFilter;
  private chart: { chart: EChart; dispose: () => void } | null = null;
  private last: Record<string, unknown> = {};

  constructor(private readonly actions: Actions) {
    this.toolbar = h("div", "toolbar");
    this.body = h("div");
    this.tableEl = h("div", { class: "table-wrap", dataset: { testid: "ranks-table" } });
    this.chartEl = h("div", { class: "chart", style: { height: "240px" }, dataset: { testid: "ranks-chart" } });
    this.filter = new RankFilter(actions);
    this.el = h("section", "ranks", this.toolbar, this.filter.el, this.body);
  }

  update(s: State): void {
    const changed = (k: string, v: unknown) => {
      const c = this.last[k] !== v;
      this.last[k] = v;
      return c;
    };
    const l = s.ranks;
    // A new margin keeps the old answer on screen (with "updating") until the new one arrives.
    const dataChanged = [changed("data", l.data), changed("error", l.error)].some(Boolean);
    const statusChanged = changed("status", l.status);
    const sortChanged = changed("sort", s.ranksSort);
    const refusedChanged = changed("refused", s.ranksFilterError);
    if ([dataChanged, statusChanged, changed("margin", s.ranksMargin)].some(Boolean)) this.renderToolbar(s);
    this.filter.update(s);
    if (l.status === "error" || !l.data) {
      if (dataChanged || statusChanged || refusedChanged) {
        this.disposeCharts();
        const sel = rankSelection(s);
        replace(
          this.body,
          l.status === "error"
            ? errorBox("Could not load the ranks:", l.error ?? "")
            : l.status === "idle" && s.ranksFilterError
              ? note("No ranks loaded: correct the selection above, or show all ranks.")
              : loadingBox(sel === null ? "every rank of the run" : `ranks ${sel} of the run`),
        );
      }
      return;
    }
    if (dataChanged) this.render(s, l.data);
    else if (sortChanged) this.renderTable(s, l.data);
  }

  dispose(): void {
    this.disposeCharts();
    this.last = {};
    this.filter.reset();
  }

  private disposeCharts(): void {
    this.chart?.dispose();
    this.chart = null;
    this.headsMap.dispose();
  }

  private renderToolbar(s: State): void {
    const d = s.ranks.data;
    const margins = MARGINS.includes(s.ranksMargin) ? MARGINS : [...MARGINS, s.ranksMargin].sort((a, b) => a - b);
    replace(
      this.toolbar,
      d
        ? h(
            "span",
            { class: "stat", title: d.clock === "device" ? "the traces have device kernels: kernel time" : "no device kernels in the traces: CPU time" },
            h("span", "stat-label", "clock"),
            h("b", { dataset: { testid: "ranks-clock" } }, d.clock),
            h("span", "muted small", d.clock === "device" ? " (device time per step)" : " (CPU time per step)"),
          )
        : null,
      d ? h("span", "stat", h("span", "stat-label", "ranks"), h("b", null, String(d.ranks.length))) : null,
      s.ranks.status === "loading" && d ? h("span", { class: "muted small", attrs: { role: "status" } }, "updating\u2026") : null,
      h("span", "spacer"),
      h(
        "label",
        { title: "A rank is a straggler when its attention time (in its fastest step, or one layer's mean) exceeds the median over ranks by more than this" },
        "Straggler margin ",
        select(
          margins.map((m) => ({ value: String(m), label: pct(m) })),
          String(s.ranksMargin),
          (v) => this.actions.setMargin(Number(v)),
          "Straggler margin",
        ),
      ),
    );
  }

  private render(s: State, d: RankView): void {
    const legend = h(
      "div",
      "legend chart-legend",
      ...PARTS.map((p) => h("span", "legend-item", h("span", { class: "sw", style: { background: p.color } }), p.label)),
    );
    replace(
      this.body,
      ...d.errors.map((e) => errorBox(`Could not read ${e.file}:`, e.error)),
      d.ranks.length ? this.stragglers(d) : note("This run has no readable trace files."),
      this.tableEl,
      h(
        "p",
        { class: "hint", dataset: { testid: "ranks-table-hint" } },
        `Straggler metric: ${d.metric_label}. The other columns: ${d.means_label}. "median": ${d.median_label}. Click a worker for its own overview.`,
      ),
      h("h3", null, "Step time per rank ", h("span", "muted small", "(means per profiled step)")),
      this.chartEl,
      legend,
      this.collectives(d),
      this.headsMap.el,
    );
    this.renderTable(s, d);
    this.renderChart(d);
    this.headsMap.update(d);
  }

  private stragglers(d: RankView): HTMLElement {
    const box = (cls: string, ...children: (HTMLElement | string | null)[]) =>
      h("div", { class: `stragglers ${cls}`, dataset: { testid: "stragglers" } }, ...children);
    const warnings = d.warnings.length ? h("ul", "warnings", ...d.warnings.map((w) => h("li", null, w))) : null;
    const median = metricColumn(d)?.median_us ?? 0;
    // The one line that names the metric and its median, in both the warning and the all-clear.
    const metric = h(
      "div",
      { class: "metric-line", dataset: { testid: "ranks-metric" } },
      h("span", "stat-label", "judged on"),
      " ",
      h("b", null, d.metric_label),
      "; median ",
      h("b", { dataset: { testid: "ranks-median" } }, fmtUs(median)),
      h("span", "muted", ` (${d.median_label}); each layer on its mean per step.`),
    );
    if (!d.stragglers.length) {
      return box(
        "note",
        `No straggler at a ${pct(d.margin)} margin: no rank exceeds the median over ranks by more than ${pct(d.margin)} and ${fmtUs(d.min_gap_us)}.`,
        metric,
        warnings,
      );
    }
    const workers = [...new Set(d.stragglers.map((x) => x.worker))];
    const item = (x: Straggler) =>
      h(
        "li",
        { dataset: { worker: x.worker, metric: x.metric } },
        h("span", "badge straggler", rankName(x)),
        x.rank === null ? null : h("span", "muted", `${x.worker} `),
        h("b", null, x.label),
        `: ${fmtUs(x.value_us)} vs median ${fmtUs(x.median_us)} \u2014 `,
        h("b", null, `${x.ratio.toFixed(2)}\u00d7`),
        ` (+${pct(x.ratio - 1)})`,
      );
    return box(
      "warn",
      h("b", null, `Straggler${workers.length > 1 ? "s" : ""}: ${workers.map((w) => rankName(d.ranks.find((r) => r.worker === w) ?? { rank: null, worker: w })).join(", ")}`),
      ` \u2014 slower than the median over ranks by more than the ${pct(d.margin)} margin (and ${fmtUs(d.min_gap_us)}). The other ranks wait for it at the next collective.`,
      metric,
      h("ul", null, ...d.stragglers.map(item)),
      warnings,
    );
  }

  private renderTable(s: State, d: RankView): void {
    replace(this.tableEl, ranksTable(d, s.ranksSort, this.actions));
  }

  private renderChart(d: RankView): void {
    if (!this.chart) this.chart = createChart(this.chartEl);
    const rows = d.ranks;
    const stragglers = new Set(d.stragglers.map((x) => x.worker));
    this.chart.chart.setOption(
      {
        animation: false,
        grid: { left: 70, right: 16, top: 24, bottom: 28 },
        tooltip: {
          ...TOOLTIP_BASE,
          trigger: "axis",
          axisPointer: { type: "shadow" },
          formatter: (params: unknown) => {
            const first = (Array.isArray(params) ? params : [params])[0] as { dataIndex: number } | undefined;
            const r = first ? rows[first.dataIndex] : undefined;
            if (!r) return "";
            const share = (v: number) => (r.step_us > 0 ? ` (${fmtShare(v / r.step_us)})` : "");
            return [
              `<b>${esc(rankName(r))}</b> ${esc(r.worker)}${r.straggler ? " \u2014 <b>straggler</b>" : ""}`,
              ...PARTS.map((p) => `${swatch(p.color)}${p.label}: <b>${esc(fmtUs(p.value(r)))}</b>${share(p.value(r))}`).reverse(),
              `step: <b>${esc(fmtUs(r.step_us))}</b>`,
            ].join("<br>");
          },
        },
        xAxis: {
          type: "category",
          data: rows.map(rankName),
          axisLabel: {
            color: (_v: unknown, i: number) => (stragglers.has(rows[i]?.worker ?? "") ? "#c62828" : INK.muted),
            fontWeight: "bold",
          },
        },
        yAxis: { type: "value", name: `mean per step (${d.clock === "device" ? "device" : "CPU"} clock)`, nameTextStyle: { align: "left" }, ...valueAxis(fmtUs, 0, stackedMax(PARTS.map((p) => ({ data: rows.map(p.value) })))) },
        series: PARTS.map((p) => ({
          id: p.key,
          name: p.label,
          type: "bar" as const,
          stack: "step",
          barMaxWidth: 64,
          itemStyle: { color: p.color },
          data: rows.map(p.value),
        })),
      },
      { notMerge: true },
    );
  }

  private collectives(d: RankView): HTMLElement {
    const rows = d.ranks.flatMap((r) => r.collectives.map((c) => ({ r, c })));
    const section = h("div", { class: "ranks-collectives", dataset: { testid: "collectives" } }, h("h3", null, "Collectives per rank"));
    if (!rows.length) {
      section.append(note("No collectives (c10d, gloo or NCCL calls) in these traces."));
      return section;
    }
    const device = d.clock === "device";
    append(
      section,
      h(
        "table",
        "grid",
        h(
          "thead",
          null,
          h("tr", null, h("th", null, "rank"), h("th", null, "collective"), h("th", "num", "calls / step"),
            h("th", "num", "CPU time"), device ? h("th", "num", "device time") : null, h("th", "num", "share of step")),
        ),
        h(
          "tbody",
          null,
          ...rows.map(({ r, c }) => {
            const t = device ? c.device_us : c.cpu_us;
            return h(
              "tr",
              { dataset: { worker: r.worker, collective: c.name } },
              h("td", null, rankName(r)),
              h("td", "name", c.name),
              h("td", "num", fmtCount(c.calls)),
              h("td", "num", fmtUs(c.cpu_us)),
              device ? h("td", "num", fmtUs(c.device_us)) : null,
              h("td", "num", r.step_us > 0 ? fmtShare(t / r.step_us) : "\u2014"),
            );
          }),
        ),
      ),
      device ? null : h("p", "hint", "CPU time of the collective's work (Gloo's own thread: the transfer and any wait for other ranks), else of the calling thread; a rank that waits for a straggler waits here."),
    );
    return section;
  }
}
