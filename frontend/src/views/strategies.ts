// The strategies view: the picked runs in groups that differ only in their attention
// implementation and sequence length (./strategies). Per group: a table of time, memory, work and
// error of every run against a baseline strategy, time against length with the fits and where
// they cross the baseline's, speed-up against error at one length with the Pareto front, and the
// group's findings (below-crossover, accuracy-cost).

import { createChart, type EChart } from "../charts";
import { h, replace, select, type Child } from "../dom";
import { fmtBytes, fmtError, fmtFlops, fmtIops, fmtLossDiff, fmtRatio, fmtShare, fmtUs } from "../format";
import type { Actions, State } from "../state";
import type { StrategyTable, StrategyGroup, StrategyRow } from "../types";
import { findingsBox, note, pending } from "./common";
import { color } from "./run_colors";
import { fmtFit } from "./scaling";
import { noisyMark, spreadTitle } from "../spread";
import { crossDrawn, measuredRange, timeChart, tradeoffChart, tradeoffRows, type Paint } from "./strategies_charts";

const NOT_MEASURED = "not measured";
const DASH = "\u2014";

/** "CPU" or "device": the clock the group's times are on. */
function clockWord(group: StrategyGroup): string {
  return group.clock === "cpu" ? "CPU" : group.clock;
}

function pct(x: number): string {
  return `${Number((x * 100).toPrecision(3))} %`;
}

export class StrategiesView {
  readonly el: HTMLElement;
  private readonly top: HTMLElement;
  private readonly body: HTMLElement;
  private charts: { chart: EChart; dispose: () => void }[] = [];
  /** The length each group's speed-up chart shows, by group label; absent: the longest. */
  private readonly seqs = new Map<string, number>();
  private last: { runs: string[] | null; data: StrategyTable | null; error: string | null; status: string } | null = null;

  constructor(private readonly actions: Actions) {
    this.top = h("div", "toolbar run-top");
    this.body = h("div");
    this.el = h("section", { class: "strategies-page", attrs: { "data-testid": "strategies" } }, this.top, this.body);
  }

  update(s: State): void {
    const l = s.strategiesData;
    const prev = this.last;
    this.last = { runs: s.strategies, data: l.data, error: l.error, status: l.status };
    if (prev && prev.runs === s.strategies && prev.data === l.data && prev.error === l.error && prev.status === l.status) return;
    this.renderTop(s);
    if (!prev || prev.data !== l.data || prev.error !== l.error || (!l.data && prev.status !== l.status)) this.renderBody(s);
  }

  dispose(): void {
    for (const c of this.charts) c.dispose();
    this.charts = [];
    this.last = null;
  }

  private chartIn(el: HTMLElement): EChart {
    const c = createChart(el);
    this.charts.push(c);
    return c.chart;
  }

  private renderTop(s: State): void {
    const runs = s.strategies ?? [];
    const data = s.strategiesData.data;
    replace(
      this.top,
      h("button", { class: "back", attrs: { type: "button" }, on: { click: () => this.actions.openStrategies(null) } }, "\u2190 Runs"),
      h("h2", null, `Strategies of ${runs.length} runs`),
      s.strategiesData.status === "loading" && data ? h("span", "muted small", "refreshing\u2026") : null,
      h("span", "spacer"),
      data
        ? h(
            "span",
            { class: "muted small", title: "The accuracy-cost finding's tolerances (the CLI's --rel-tol and --loss-tol)" },
            `accuracy cost: error over ${pct(data.rel_tol)} or loss moved by over ${data.loss_tol}`,
          )
        : null,
    );
  }

  private renderBody(s: State): void {
    for (const c of this.charts) c.dispose();
    this.charts = [];
    const box = pending(s.strategiesData, "the strategies");
    const data = s.strategiesData.data;
    if (box || !data) {
      replace(this.body, box);
      return;
    }
    if (!data.groups.length) {
      replace(
        this.body,
        note("None of these runs names its sequence length in its metadata (as tb-attn-run writes it): there is nothing to set side by side."),
      );
      return;
    }
    replace(this.body);
    // Sections are attached before their charts are made, so that the charts get their size.
    for (const g of data.groups) this.group(g);
  }

  private group(g: StrategyGroup): void {
    const paint: Paint = (name) => color(Math.max(0, g.strategies.indexOf(name)));
    const timeEl = h("div", { class: "chart", style: { height: "300px" }, attrs: { "data-testid": "strategies-time-chart" } });
    const tradeEl = h("div", { class: "chart", style: { height: "300px" }, attrs: { "data-testid": "strategies-tradeoff-chart" } });
    const tradeTools = h("div", "toolbar chart-tools");
    const tradeNotes = h("div");
    const section = h(
      "section",
      { class: "strategy-group", dataset: { group: g.label } },
      h("h3", null, g.label),
      h(
        "div",
        "toolbar",
        g.baseline !== null
          ? h(
              "label",
              { title: "Speed-ups and crossovers are against this strategy, at each length" },
              "baseline ",
              select(
                g.strategies.map((x) => ({ value: x, label: x })),
                g.baseline,
                (v) => this.actions.setStrategyBaseline(v),
                `Baseline strategy of ${g.label}`,
              ),
            )
          : null,
        h("span", "muted", `times: attention's ${clockWord(g)} time per step`),
      ),
      h("div", "table-wrap", this.table(g, paint)),
      h(
        "div",
        "scaling-charts",
        h(
          "div",
          null,
          h("div", "chart-title", `Attention ${clockWord(g)} time per step vs. sequence length (log\u2013log; dashed: fit a\u00b7seq^k)`),
          timeEl,
          this.timeLegend(g, paint),
        ),
        h("div", null, h("div", "chart-title", "Speed-up vs. error"), tradeTools, tradeEl, tradeNotes),
      ),
      findingsBox(g.findings),
    );
    this.body.appendChild(section);
    timeChart(this.chartIn(timeEl), g, paint, clockWord(g));
    const trade = this.chartIn(tradeEl);
    const lengths = [...new Set(g.rows.map((r) => r.seq))].sort((a, b) => a - b);
    const drawTrade = () => {
      const want = this.seqs.get(g.label);
      const seq = want !== undefined && lengths.includes(want) ? want : lengths[lengths.length - 1] ?? 0;
      replace(
        tradeTools,
        h(
          "label",
          null,
          "at seq ",
          select(
            lengths.map((q) => ({ value: String(q), label: String(q) })),
            String(seq),
            (v) => {
              this.seqs.set(g.label, Number(v));
              drawTrade();
            },
            `Sequence length of the speed-up chart of ${g.label}`,
          ),
        ),
        h("span", "muted small", "line: the Pareto front (nothing else here is both faster and more accurate)"),
      );
      tradeoffChart(trade, g, seq, paint);
      replace(tradeNotes, ...this.tradeNotes(g, seq));
    };
    drawTrade();
  }

  private table(g: StrategyGroup, paint: Paint): HTMLElement {
    const quant = g.rows.some((r) => r.quant_share !== null);
    const base = g.baseline ?? "the baseline";
    const heads: [string, string, string][] = [
      ["strategy", "", "The implementation with its options; the link opens the run"],
      ["seq", "num", "Sequence length"],
      ["backend", "", "What the trace shows ran"],
      [`attention ${clockWord(g)}`, "num", "Attention time per step, forward and backward"],
      ["peak", "num", "The largest rise of allocated memory over a block's start"],
      ["S\u00d7S", "num", "Score tensors (B, H, Sq, Sk) allocated per step; 0 for linear attention"],
      ["FLOPs", "num", "Floating-point operations of the forward pass, per step"],
      ["IOPs", "num", "Integer operations (int8 GEMMs), per step"],
      ...(quant ? ([["quant", "num", "Quantize and dequantize phases over the block's time"]] as [string, string, string][]) : []),
      ["error", "num", "Relative L1 error of the attention output against exact fp32 attention (worst layer)"],
      ["loss \u0394", "num", "The model's loss minus the exact fp32 model's, on the same batch"],
      [`speed-up vs ${base}`, "num", `${base}'s time at the same length over this run's`],
      ["Pareto", "", "On the Pareto front of speed-up against error at its length"],
    ];
    const tbody = h("tbody");
    for (const r of g.rows) tbody.appendChild(this.row(g, r, paint, quant));
    return h(
      "table",
      { class: "grid strategies-table", attrs: { "data-testid": "strategies-table" } },
      h("thead", null, h("tr", null, ...heads.map(([t, c, title]) => h("th", { class: c, title }, t)))),
      tbody,
    );
  }

  private row(g: StrategyGroup, r: StrategyRow, paint: Paint, quant: boolean): HTMLElement {
    const isBase = r.strategy === g.baseline;
    const a = r.accuracy;
    const num = (cls: string, text: string, title = "") => h("td", { class: `num ${cls}`, title }, text);
    const ratio = r.speedup;
    const undecided = !isBase && ratio !== null && r.speedup_verdict !== null && !r.speedup_verdict.decided;
    const cells: Child[] = [
      h(
        "td",
        { class: "strategy", title: r.run },
        h("span", { class: "sw", style: { background: paint(r.strategy) } }),
        " ",
        h("a", { attrs: { href: "#" }, on: { click: (ev) => (ev.preventDefault(), this.actions.openRun(r.run)) } }, r.strategy),
        isBase ? h("span", { class: "badge baseline", title: "the strategy speed-ups and crossovers are against" }, "baseline") : null,
        r.exact ? null : h("span", { class: "badge approx", title: "computes attention approximately (linear, random-feature or quantized)" }, "approx."),
      ),
      num("seq", String(r.seq)),
      h("td", "backend", h("span", "backend-chip", r.backend)),
      h("td", { class: "num time", title: `${r.run}: ${clockWord(g)} time of attention per step; ${spreadTitle(r.spread)}` }, fmtUs(r.time_us), noisyMark(r.spread, fmtUs, true)),
      num("peak", fmtBytes(r.peak_bytes), `allocated: ${fmtBytes(r.alloc_bytes)} per step`),
      num("sxs", fmtBytes(r.sxs_bytes)),
      num("flops", fmtFlops(r.flops)),
      num("iops", r.iops ? fmtIops(r.iops) : DASH),
      quant ? num("quant", fmtShare(r.quant_share)) : null,
      a
        ? num("err", fmtError(a.rel_l1), `relative L1 error ${a.rel_l1 === 0 ? "0 (exact)" : a.rel_l1.toExponential(3)}, cosine ${a.cosine.toFixed(6)}, max |\u0394| ${a.max_abs.toExponential(2)}`)
        : h("td", { class: "num err not-measured", title: "This run's metadata has no accuracy record (older runner, or not the built-in model)" }, NOT_MEASURED),
      a && a.loss_diff !== null
        ? num("loss", fmtLossDiff(a.loss_diff), String(a.loss_diff))
        : h("td", "num loss not-measured", NOT_MEASURED),
      h(
        "td",
        {
          // A speed-up the two runs cannot tell from drift between runs is uncoloured and marked "≈".
          class: `num speedup${ratio === null || isBase || undecided ? "" : ratio > 1.1 ? " better" : ratio < 0.9 ? " worse" : ""}${undecided ? " undecided" : ""}`,
          title:
            ratio === null
              ? `no ${g.baseline ?? "baseline"} run at seq ${r.seq}`
              : `${g.baseline}'s time at seq ${r.seq} over this run's${r.speedup_verdict ? `\n${r.speedup_verdict.note}` : ""}`,
        },
        isBase ? fmtRatio(1) : (undecided ? "\u2248" : "") + fmtRatio(ratio),
      ),
      h("td", "pareto", r.pareto ? h("span", { class: "badge pareto", title: "no other strategy at this length is both faster and more accurate" }, "\u2605 front") : null),
    ];
    return h("tr", { class: isBase ? "base-row" : "", dataset: { run: r.run, strategy: r.strategy, seq: String(r.seq) } }, ...cells);
  }

  /** Each series' fit and where it crosses the baseline's. */
  private timeLegend(g: StrategyGroup, paint: Paint): HTMLElement {
    const [lo, hi] = measuredRange(g);
    return h(
      "div",
      null,
      h(
        "div",
        "legend",
        ...g.series.map((x) =>
          h(
            "span",
            { class: "legend-item", title: x.seqs.map((q) => `seq ${q}`).join(", ") },
            h("span", { class: "sw", style: { background: paint(x.strategy) } }),
            x.strategy,
            h("span", x.fit ? "fit" : "muted", ` ${fmtFit(x.fit)}`),
          ),
        ),
      ),
      h(
        "ul",
        { class: "crossovers", attrs: { "data-testid": "crossovers" } },
        ...g.series.flatMap((x) =>
          !x.crossover && x.crossover_note
            ? [h("li", { class: "muted", dataset: { strategy: x.strategy } }, h("span", { class: "sw", style: { background: paint(x.strategy) } }), " ", `${x.strategy}: ${x.crossover_note}`)]
            : x.crossover
            ? [
                h(
                  "li",
                  { dataset: { strategy: x.strategy } },
                  h("span", { class: "sw", style: { background: paint(x.strategy) } }),
                  " ",
                  x.crossover.text,
                  x.crossover.seq !== null && !crossDrawn(x, lo, hi) ? h("span", "muted", " (off the chart)") : null,
                ),
              ]
            : [],
        ),
      ),
    );
  }

  /** What the speed-up chart leaves out at `seq`, and why. */
  private tradeNotes(g: StrategyGroup, seq: number): HTMLElement[] {
    const shown = new Set(tradeoffRows(g, seq));
    const at = g.rows.filter((r) => r.seq === seq && !shown.has(r));
    const unmeasured = at.filter((r) => r.accuracy === null);
    const noBase = at.filter((r) => r.accuracy !== null);
    const list = (rs: StrategyRow[]) => rs.map((r) => `${r.strategy} (${r.run})`).join(", ");
    return [
      unmeasured.length
        ? h("p", { class: "muted small", attrs: { "data-testid": "not-measured" } }, `Error not measured, left out: ${list(unmeasured)}.`)
        : null,
      noBase.length ? h("p", "muted small", `No ${g.baseline ?? "baseline"} run at seq ${seq} to compare with: ${list(noBase)}.`) : null,
    ].filter((x): x is HTMLParagraphElement => x !== null);
  }
}
