// The ranks view of a multi-worker run (./ranks): every rank's attention time per layer with the
// "All ranks" aggregate, stragglers against the other ranks' median at a chosen margin, attention /
// collectives / other per rank, the collectives by name, and the layer x global head map that
// puts tensor-parallel shards back together.

import { stackedMax, valueAxis } from "../axes";
import { createChart, esc, swatch, TOOLTIP_BASE, type EChart } from "../charts";
import { append, h, replace, select } from "../dom";
import { fmtCount, fmtShare, fmtUs } from "../format";
import { MARGINS, type Actions, type State } from "../state";
import type { RankRow, RanksResponse, Straggler } from "../types";
import { errorBox, loadingBox, note } from "./common";
import { GlobalHeadsMap, ranges } from "./ranks_heads";

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

function layerTime(r: RankRow, layer: number): number | null {
  return r.layers.find((l) => l.layer === layer)?.time_us ?? null;
}

function median(values: number[]): number {
  const v = [...values].sort((a, b) => a - b);
  const m = Math.floor(v.length / 2);
  return v.length === 0 ? 0 : v.length % 2 ? v[m]! : (v[m - 1]! + v[m]!) / 2;
}

function mean(values: number[]): number {
  return values.length ? values.reduce((a, b) => a + b, 0) / values.length : 0;
}

/** The sort value of a row for a column key; rows without one sort last. */
function sortValue(r: RankRow, key: string): number | string {
  switch (key) {
    case "rank":
      return r.rank ?? Number.MAX_SAFE_INTEGER;
    case "worker":
      return r.worker;
    case "step":
      return r.step_us;
    case "attention":
      return r.attention_us;
    case "collectives":
      return r.collective_us;
    case "other":
      return r.other_us;
    case "heads":
      return r.heads[0] ?? Number.MAX_SAFE_INTEGER;
    default:
      return key.startsWith("L") ? (layerTime(r, Number(key.slice(1))) ?? -1) : 0;
  }
}

export class RanksView {
  readonly el: HTMLElement;
  private readonly toolbar: HTMLElement;
  private readonly body: HTMLElement;
  private readonly tableEl: HTMLElement;
  private readonly chartEl: HTMLElement;
  private readonly headsMap = new GlobalHeadsMap();
  private chart: { chart: EChart; dispose: () => void } | null = null;
  private last: Record<string, unknown> = {};

  constructor(private readonly actions: Actions) {
    this.toolbar = h("div", "toolbar");
    this.body = h("div");
    this.tableEl = h("div", { class: "table-wrap", dataset: { testid: "ranks-table" } });
    this.chartEl = h("div", { class: "chart", style: { height: "240px" }, dataset: { testid: "ranks-chart" } });
    this.el = h("section", "ranks", this.toolbar, this.body);
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
    if ([dataChanged, statusChanged, changed("margin", s.ranksMargin)].some(Boolean)) this.renderToolbar(s);
    if (l.status === "error" || !l.data) {
      if (dataChanged || statusChanged) {
        this.disposeCharts();
        replace(this.body, l.status === "error" ? errorBox("Could not load the ranks:", l.error ?? "") : loadingBox("every rank of the run"));
      }
      return;
    }
    if (dataChanged) this.render(s, l.data);
    else if (sortChanged) this.renderTable(s, l.data);
  }

  dispose(): void {
    this.disposeCharts();
    this.last = {};
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
        { title: "A rank is a straggler when its attention time (in all or in one layer) exceeds the median of the other ranks by more than this" },
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

  private render(s: State, d: RanksResponse): void {
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
      h("p", "hint", `Means per profiled step on the ${d.clock} clock; attention is forward + backward. Click a worker for its own overview.`),
      h("h3", null, "Step time per rank"),
      this.chartEl,
      legend,
      this.collectives(d),
      this.headsMap.el,
    );
    this.renderTable(s, d);
    this.renderChart(d);
    this.headsMap.update(d);
  }

  private stragglers(d: RanksResponse): HTMLElement {
    const box = (cls: string, ...children: (HTMLElement | string | null)[]) =>
      h("div", { class: `stragglers ${cls}`, dataset: { testid: "stragglers" } }, ...children);
    const warnings = d.warnings.length ? h("ul", "warnings", ...d.warnings.map((w) => h("li", null, w))) : null;
    if (!d.stragglers.length) {
      return box(
        "note",
        `No straggler at a ${pct(d.margin)} margin: no rank's attention time (in its fastest step, or in any layer) exceeds the median of the other ranks by more than ${pct(d.margin)} and ${fmtUs(d.min_gap_us)}.`,
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
        h("b", null, x.metric),
        x.metric === "attention" ? h("span", "muted", " in its fastest step") : null,
        `: ${fmtUs(x.value_us)} vs median ${fmtUs(x.median_us)} \u2014 `,
        h("b", null, `${x.ratio.toFixed(2)}\u00d7`),
        ` (+${pct(x.ratio - 1)})`,
      );
    return box(
      "warn",
      h("b", null, `Straggler${workers.length > 1 ? "s" : ""}: ${workers.map((w) => rankName(d.ranks.find((r) => r.worker === w) ?? { rank: null, worker: w })).join(", ")}`),
      ` \u2014 slower than the median of the other ranks by more than the ${pct(d.margin)} margin (and ${fmtUs(d.min_gap_us)}). The other ranks wait for it at the next collective.`,
      h("ul", null, ...d.stragglers.map(item)),
      warnings,
    );
  }

  private renderTable(s: State, d: RanksResponse): void {
    const layers = [...new Set(d.ranks.flatMap((r) => r.layers.map((l) => l.layer)))].sort((a, b) => a - b);
    const slow = new Set(d.stragglers.map((x) => `${x.worker}|${x.metric}`));
    const sort = s.ranksSort;
    const header = (key: string, label: string, title: string, num = true) => {
      const active = sort.key === key;
      return h(
        "th",
        {
          class: `sortable${active ? " sorted" : ""}${num ? " num" : ""}`,
          title: `${title} \u2014 click to sort`,
          attrs: { "aria-sort": active ? (sort.desc ? "descending" : "ascending") : "none", tabindex: 0 },
          dataset: { col: key },
          on: {
            click: () => this.actions.patch({ ranksSort: { key, desc: active ? !sort.desc : num } }),
            keydown: (ev) => {
              if (ev.key === "Enter") (ev.target as HTMLElement).click();
            },
          },
        },
        label,
        active ? (sort.desc ? " \u25bc" : " \u25b2") : "",
      );
    };
    const maxOf = (values: number[]) => Math.max(0, ...values);
    const maxAttention = maxOf(d.ranks.map((r) => r.attention_us));
    const maxLayer = maxOf(d.ranks.flatMap((r) => r.layers.map((l) => l.time_us)));
    const bar = (v: number, max: number, color: string) => {
      const p = max > 0 ? Math.max(0, Math.min(100, (v / max) * 100)).toFixed(1) : "0";
      return { background: `linear-gradient(to right, ${color} ${p}%, transparent ${p}%)` };
    };
    const num = (v: number | null, col: string, extra: Partial<{ cls: string; title: string; style: Record<string, string> }> = {}) =>
      h("td", { class: `num${extra.cls ?? ""}`, title: extra.title ?? (v === null ? "" : `${v} \u00b5s`), dataset: { col }, style: extra.style }, fmtUs(v));

    const rows = [...d.ranks].sort((a, b) => {
      const x = sortValue(a, sort.key);
      const y = sortValue(b, sort.key);
      const c = typeof x === "string" || typeof y === "string" ? String(x).localeCompare(String(y)) : x - y;
      return (sort.desc ? -c : c) || (a.rank ?? 0) - (b.rank ?? 0) || a.worker.localeCompare(b.worker);
    });
    const body = h(
      "tbody",
      null,
      ...rows.map((r) =>
        h(
          "tr",
          { class: r.straggler ? "straggler-row" : "", dataset: { worker: r.worker, rank: r.rank === null ? "" : String(r.rank) } },
          h(
            "th",
            { class: "row-head", dataset: { col: "rank" } },
            r.rank === null ? "\u2014" : String(r.rank),
            r.straggler ? h("span", { class: "badge straggler", title: "slower than the other ranks' median by more than the margin" }, "straggler") : null,
          ),
          h(
            "td",
            { dataset: { col: "worker" }, title: r.files.join("\n") },
            h("button", { class: "link-button", attrs: { type: "button" }, on: { click: () => this.actions.openWorker(r.worker) } }, r.worker),
          ),
          num(r.step_us, "step"),
          num(r.attention_us, "attention", {
            cls: slow.has(`${r.worker}|attention`) ? " slow" : "",
            title: `${fmtUs(r.attention_us)} per step on average; ${fmtUs(r.attention_best_us)} in the fastest step (stragglers are judged on it)`,
            style: bar(r.attention_us, maxAttention, "rgba(251,140,0,.28)"),
          }),
          num(r.collective_us, "collectives", {
            title: r.collectives.map((c) => `${c.name}: ${fmtCount(c.calls)} calls`).join("\n") || "no collectives",
          }),
          num(r.other_us, "other"),
          ...layers.map((k) => {
            const l = r.layers.find((x) => x.layer === k);
            return num(l?.time_us ?? null, `L${k}`, {
              cls: slow.has(`${r.worker}|layer ${k}`) ? " slow" : "",
              title: l ? `L${k}: ${fmtUs(l.forward_us)} forward + ${fmtUs(l.backward_us)} backward` : "no such layer",
              style: l ? bar(l.time_us, maxLayer, "rgba(251,140,0,.28)") : {},
            });
          }),
          h("td", { class: "num", dataset: { col: "heads" } }, r.heads.length ? ranges(r.heads) : "\u2014"),
        ),
      ),
    );

    const agg = (label: string, title: string, pick: (v: number[]) => number, layer: (k: number) => HTMLElement) =>
      h(
        "tr",
        { class: "all-ranks", dataset: { agg: label } },
        h("th", { class: "row-head", attrs: { colspan: 2 }, title }, "All ranks ", h("span", "muted", label)),
        num(pick(d.ranks.map((r) => r.step_us)), "step"),
        num(pick(d.ranks.map((r) => r.attention_us)), "attention"),
        num(pick(d.ranks.map((r) => r.collective_us)), "collectives"),
        num(pick(d.ranks.map((r) => r.other_us)), "other"),
        ...layers.map(layer),
        h("td", { class: "num", dataset: { col: "heads" } }, label === "mean" ? ranges(d.ranks.flatMap((r) => r.heads)) || "\u2014" : ""),
      );
    const aggLayer = (k: number) => d.all_ranks.find((a) => a.layer === k);
    const foot = h(
      "tfoot",
      null,
      agg("mean", "mean over ranks", mean, (k) => num(aggLayer(k)?.mean_us ?? null, `L${k}`)),
      agg("median", "median over ranks", median, (k) => num(aggLayer(k)?.median_us ?? null, `L${k}`)),
      agg("max", "the slowest rank", (v) => Math.max(...v), (k) => {
        const a = aggLayer(k);
        const td = num(a?.max_us ?? null, `L${k}`, { title: a ? `slowest: ${a.max_rank === null ? "unknown rank" : `rank ${a.max_rank}`}` : "" });
        if (a && a.max_rank !== null) td.append(h("span", "muted small max-rank", ` r${a.max_rank}`));
        return td;
      }),
    );
    const head = h(
      "tr",
      null,
      header("rank", "rank", "rank", false),
      header("worker", "worker", "worker (trace file name)", false),
      header("step", "step", `step time (${d.clock})`),
      header("attention", "attention", "attention time, forward + backward"),
      header("collectives", "collectives", "time in collectives (all_reduce, all_gather, ...)"),
      header("other", "other", "step time that is neither attention nor collectives"),
      ...layers.map((k) => header(`L${k}`, `L${k}`, `layer ${k}: attention time, forward + backward`)),
      header("heads", "heads", "global heads this rank computed", false),
    );
    replace(this.tableEl, h("table", "grid ranks-table", h("thead", null, head), body, foot));
  }

  private renderChart(d: RanksResponse): void {
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
            color: (_v: unknown, i: number) => (stragglers.has(rows[i]?.worker ?? "") ? "#c62828" : "#424242"),
            fontWeight: "bold",
          },
        },
        yAxis: { type: "value", name: `${d.clock} time per step`, nameTextStyle: { align: "left" }, ...valueAxis(fmtUs, 0, stackedMax(PARTS.map((p) => ({ data: rows.map(p.value) })))) },
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

  private collectives(d: RanksResponse): HTMLElement {
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
