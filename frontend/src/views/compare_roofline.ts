// Compare's roofline overlay: each run's phases (summed over layers, forward, per step) and its
// attention as a whole under one set of roofs, the first run's peaks. A phase keeps its colour
// across runs and a run its symbol, so naive against flash reads as points moving from the memory
// roof toward the compute roof. A click on a point opens that run's Roofline tab.

import { createChart, esc, type EChart } from "../charts";
import { h, replace } from "../dom";
import { orderPhases, phaseColor, phaseLabel } from "../metrics";
import type { Actions } from "../state";
import { INK } from "../theme";
import type { Comparison } from "../types";
import { note } from "./common";
import { CAVEAT, peaksKnown, plotted, rooflineChart, type PointSeries } from "./roofline_charts";

/** A run's symbol in the chart, and the glyph the legend draws it with. */
const SYMBOLS: [string, string][] = [
  ["circle", "\u25cf"],
  ["rect", "\u25a0"],
  ["triangle", "\u25b2"],
  ["diamond", "\u25c6"],
  ["emptyCircle", "\u25cb"],
  ["emptyRect", "\u25a1"],
  ["emptyTriangle", "\u25b3"],
  ["emptyDiamond", "\u25c7"],
];
export const runSymbol = (i: number): [string, string] => SYMBOLS[i % SYMBOLS.length]!;

export class RooflineOverlay {
  readonly el: HTMLElement;
  private readonly body: HTMLElement;
  private chart: { chart: EChart; dispose: () => void } | null = null;

  constructor(private readonly actions: Actions) {
    this.body = h("div");
    this.el = h(
      "section",
      { class: "compare-roofline", attrs: { "data-testid": "compare-roofline" } },
      h("h4", null, "Roofline (attention's phases summed over layers, forward, per step)"),
      this.body,
    );
  }

  forget(): void {
    this.chart?.dispose();
    this.chart = null;
  }

  draw(data: Comparison | null): void {
    this.forget();
    const runs = data?.runs ?? [];
    this.el.hidden = runs.length === 0;
    if (!runs.length) return replace(this.body);
    const first = runs[0]!;
    const rl = first.roofline;
    const phases = orderPhases(runs.flatMap((r) => Object.keys(r.phases)));
    const series: PointSeries[] = runs.map((r, i) => ({
      name: r.run,
      symbol: runSymbol(i)[0],
      size: 12,
      points: [
        ...phases.flatMap((phase) => {
          const roof = r.phases[phase]?.roof;
          return plotted(roof) ? [{ roof, title: `${r.run} \u00b7 ${phaseLabel(phase)}`, color: phaseColor(phase), phase }] : [];
        }),
        ...(plotted(r.roofline?.attention) ? [{ roof: r.roofline!.attention!, title: `${r.run} \u00b7 attention, all phases`, color: INK.text }] : []),
      ],
    }));
    const shown = phases.filter((p) => runs.some((r) => plotted(r.phases[p]?.roof)));
    const memoryOnly = phases.filter((p) => !shown.includes(p) && runs.some((r) => r.phases[p]?.roof?.flops_per_s === 0));
    const devices = [...new Set(runs.map((r) => r.roofline?.device).filter((d): d is string => !!d))];
    const chartEl = h("div", { class: "chart roofline-chart", style: { height: "400px" }, attrs: { "data-testid": "compare-roofline-chart" } });
    const anyPoint = series.some((x) => x.points.length);
    replace(
      this.body,
      !peaksKnown(rl)
        ? h("div", { class: "note", attrs: { "data-testid": "compare-roof-note" } },
            `No peak known for ${first.run}${rl?.note ? ` (${rl.note})` : ""}: the points without roofs.`)
        : devices.length > 1
          ? h("div", { class: "warn", attrs: { "data-testid": "compare-roof-note" } },
              `These runs ran on different devices (${devices.join(", ")}): the roofs are ${first.run}'s (${rl!.device}).`)
          : h("p", { class: "muted small", attrs: { "data-testid": "compare-roof-note" } },
              `Roofs: ${rl!.device}, from ${rl!.source || "its peaks"} (${first.run}'s). ${CAVEAT}`),
      anyPoint ? chartEl : note("No run has a phase with both FLOPs and modeled bytes: nothing to place on the chart."),
      anyPoint
        ? h(
            "div",
            { class: "legend", attrs: { "data-testid": "compare-roof-legend" } },
            ...runs.map((r, i) => h("span", "legend-item", h("span", "roof-symbol", runSymbol(i)[1]), r.run)),
            h("span", "muted small", "\u00b7"),
            ...shown.map((p) => h("span", "legend-item", h("span", { class: "sw", style: { background: phaseColor(p) } }), phaseLabel(p))),
            h("span", "legend-item", h("span", { class: "sw", style: { background: INK.text } }), "attention, all phases"),
          )
        : null,
      memoryOnly.length
        ? h("p", "hint", `${memoryOnly.map(phaseLabel).join(", ")}: no FLOPs, memory only: no place on these axes.`)
        : null,
      anyPoint ? h("p", "hint", "Hover a point for its figures; click it for its run's Roofline tab.") : null,
    );
    if (!anyPoint) return;
    this.chart = createChart(chartEl);
    rooflineChart(this.chart.chart, {
      roofline: rl,
      series,
      main: rl?.attention?.dtype ?? null,
      extra: (s) => {
        const r = runs.find((x) => x.run === s.name);
        return r ? [esc([r.impl, r.seq === null ? null : `seq ${r.seq}`, r.dtype, r.roofline?.device].filter(Boolean).join(" \u00b7 "))] : [];
      },
    });
    this.chart.chart.on("click", (p) => {
      const d = p.data as { s?: number } | undefined;
      const run = d?.s !== undefined ? series[d.s]?.name : undefined;
      if (run === undefined) return;
      this.actions.setTab("roofline");
      this.actions.openRun(run);
    });
  }
}
