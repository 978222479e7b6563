// The timeline of one step: CPU threads and device streams as rows, events as bars drawn on
// canvas by an ECharts custom series. Only what is visible is handed to ECharts, and events
// narrower than a pixel at the current zoom are merged per row, so a redraw costs about one
// item per pixel of each row however many events the step has (100k and more). Times are
// plotted from the step's start, so the axis's ticks are round offsets into the step.

import { axisScale, zoomAxisOf, zoomWindow, type AxisScale } from "../axes";
import { createChart, esc, swatch, TOOLTIP_BASE, type EChart } from "../charts";
import { h, replace } from "../dom";
import { fmtUs } from "../format";
import { layerLegend, orderPhases, phaseColor, phaseLabel } from "../metrics";
import type { Actions, State } from "../state";
import type { WorkerSummary } from "../types";
import { changed, note, pending } from "./common";
import { tokenAt } from "./generation";
import { GREY, kindOf, MAX_DEPTH, Model } from "./timeline_model";
import { INK } from "../theme";

const LANE_PX = 16;
const GRID = { left: 170, right: 24, top: 8, bottom: 58 };
const AXIS_LABEL = { hideOverlap: true, fontSize: 11 };

export class TimelineView {
  readonly el: HTMLElement;
  private readonly body: HTMLElement;
  private readonly chartEl: HTMLElement;
  private chart: { chart: EChart; dispose: () => void } | null = null;
  private model: Model | null = null;
  private last: State["timeline"] | null = null;
  private window: [number, number] = [0, 1];
  private scale: AxisScale = axisScale(fmtUs, 0, 1, { exact: true });
  private frame = 0;
  private resizeObserver: ResizeObserver | null = null;

  constructor(private readonly actions: Actions) {
    this.chartEl = h("div", "chart timeline-chart");
    this.body = h("div");
    this.el = h("section", "timeline", this.body);
  }

  /** `ws`: the worker the step is of; a generation's step is named by its role and context. */
  update(s: State, ws: WorkerSummary | null): void {
    if (!changed(this.last, s.timeline)) return;
    this.last = s.timeline;
    const wait = pending(s.timeline, "the timeline");
    if (wait) {
      this.disposeChart();
      replace(this.body, wait);
      return;
    }
    const d = s.timeline.data!;
    const model = new Model(d);
    this.model = model;
    if (model.n === 0) {
      this.disposeChart();
      replace(this.body, note("No events in this step."));
      return;
    }
    const span = d.end_us - d.start_us;
    const token = tokenAt(ws, d.step);
    const info = [
      `Step ${d.step ?? "\u2014"}${token ? ` (${token.role}, ${token.context} keys)` : ""}: ${fmtUs(span)}, ${model.n.toLocaleString("en-US")} events on ${d.tracks.length} ${d.tracks.length === 1 ? "row" : "rows"}.`,
      "Scroll or drag the slider to zoom; click an attention bar for its drill-down.",
    ].join(" ");
    replace(
      this.body,
      d.truncated
        ? h(
            "div",
            "warn",
            `Truncated: the server sent only the ${model.n.toLocaleString("en-US")} longest events of this step.`,
          )
        : null,
      model.hidden ? note(`${model.hidden} events nested deeper than ${MAX_DEPTH} levels are not drawn.`) : null,
      h("p", "muted", info),
      this.chartEl,
      this.legend(model),
    );
    this.chartEl.style.height = `${model.laneNames.length * LANE_PX + GRID.top + GRID.bottom}px`;
    this.window = [0, span];
    this.draw(model);
  }

  /** Phases in execution order, then the blocks' other work (by layer), then the rest. */
  private legend(model: Model): HTMLElement {
    const phases = orderPhases(model.phasesSeen);
    const layers = layerLegend([...model.layersSeen]);
    return h(
      "div",
      "legend",
      ...phases.map((p) =>
        h("span", { class: "legend-item", dataset: { phase: p } }, h("span", { class: "sw", style: { background: phaseColor(p) } }), phaseLabel(p)),
      ),
      ...layers.map(({ color, label, first }) =>
        h("span", { class: "legend-item", dataset: { layer: String(first) } }, h("span", { class: "sw", style: { background: color } }), label),
      ),
      h("span", "legend-item", h("span", { class: "sw", style: { background: GREY } }), "not attention"),
      h("span", "muted", "Scopes and kernels in full colour, ops inside them lighter."),
    );
  }

  private plotWidth(): number {
    const w = this.chart ? this.chart.chart.getWidth() : this.chartEl.clientWidth;
    return Math.max(50, w - GRID.left - GRID.right);
  }

  private draw(model: Model): void {
    if (!this.chart) {
      this.chart = createChart(this.chartEl);
      const chart = this.chart.chart;
      chart.on("datazoom", (ev: unknown) => this.onZoom(ev));
      chart.on("click", (p) => {
        const m = this.model;
        const v = p.value as number[] | undefined;
        if (!m || !v || p.seriesId !== "events") return;
        const e = v[3]!;
        const layer = m.d.events.layer[e] ?? -1;
        if (layer < 0) return;
        const ph = m.d.events.phase[e] ?? -1;
        const backward = (m.d.events as { backward?: (number | boolean)[] }).backward?.[e];
        this.actions.select({ layer, phase: ph >= 0 ? (m.d.phases[ph] ?? null) : null, backward: !!backward });
      });
      this.resizeObserver = new ResizeObserver(() => this.schedule());
      this.resizeObserver.observe(this.chartEl);
    }
    const d = model.d;
    const chart = this.chart.chart;
    chart.resize();
    const names = model.laneNames;
    const bands: number[][] = [];
    let prev = -1;
    names.forEach((_, lane) => {
      const t = model.laneTrack[lane]!;
      if (t !== prev) {
        bands.push([lane, lane, t]);
        prev = t;
      } else bands[bands.length - 1]![1] = lane;
    });
    const span = d.end_us - d.start_us;
    this.scale = axisScale(fmtUs, 0, span, { exact: true });
    chart.setOption(
      {
        animation: false,
        grid: GRID,
        tooltip: {
          ...TOOLTIP_BASE,
          trigger: "item",
          formatter: (p: unknown) => this.tooltip(p as { seriesId?: string; value?: number[] }),
        },
        xAxis: {
          type: "value",
          min: 0,
          max: span,
          position: "top",
          ...zoomAxisOf(this.scale, AXIS_LABEL),
          splitLine: { lineStyle: { color: INK.grid } },
        },
        yAxis: {
          type: "category",
          data: names,
          inverse: true,
          axisTick: { show: false },
          axisLine: { show: false },
          axisLabel: { fontSize: 11, width: GRID.left - 12, overflow: "truncate", interval: 0 },
        },
        dataZoom: [
          { type: "inside", xAxisIndex: 0, filterMode: "none", minValueSpan: 1 },
          { type: "slider", xAxisIndex: 0, filterMode: "none", height: 18, bottom: 10, labelFormatter: (v: number) => this.scale.value(v) },
        ],
        series: [
          {
            id: "bands",
            type: "custom",
            silent: true,
            data: bands,
            z: 0,
            renderItem: (params: any, api: any) => {
              if (api.value(2) % 2 === 0) return null;
              const top = api.coord([0, api.value(0)])[1] - api.size([0, 1])[1] / 2;
              const bottom = api.coord([0, api.value(1)])[1] + api.size([0, 1])[1] / 2;
              const cs = params.coordSys;
              return { type: "rect", shape: { x: cs.x, y: top, width: cs.width, height: bottom - top }, style: { fill: INK.band } };
            },
          },
          {
            id: "events",
            type: "custom",
            z: 2,
            data: [],
            encode: { x: [1, 2], y: 0 },
            renderItem: (params: any, api: any) => this.renderBar(params, api),
          },
        ],
      },
      { notMerge: true },
    );
    this.refresh();
  }

  private renderBar(params: any, api: any): object | null {
    const m = this.model;
    if (!m) return null;
    const lane = api.value(0);
    const a = api.coord([api.value(1), lane]) as number[];
    const b = api.coord([api.value(2), lane]) as number[];
    const cs = params.coordSys as { x: number; y: number; width: number; height: number };
    const hgt = LANE_PX - 3;
    let x0 = a[0]!;
    let x1 = Math.max(b[0]!, x0 + 1);
    if (x1 < cs.x || x0 > cs.x + cs.width) return null;
    x0 = Math.max(x0, cs.x);
    x1 = Math.min(x1, cs.x + cs.width);
    const e = api.value(3) as number;
    const count = api.value(4) as number;
    const fill = m.colors[m.color[e]!] ?? GREY;
    const shape = { x: x0, y: a[1]! - hgt / 2, width: x1 - x0, height: hgt };
    if (count !== 1 || x1 - x0 <= 40) return { type: "rect", shape, style: { fill } };
    // Labelled bars are groups, plain ones rects: ECharts reuses elements by index and type, so
    // a plain rect never inherits a stale label from a bar drawn there before a zoom.
    return {
      type: "group",
      children: [
        { type: "rect", shape, style: { fill } },
        {
          type: "text",
          silent: true,
          style: {
            text: m.label(e),
            x: x0 + 3,
            y: a[1]!,
            verticalAlign: "middle",
            fontSize: 10,
            fill: "#212121",
            width: x1 - x0 - 6,
            overflow: "truncate",
          },
        },
      ],
    };
  }

  private tooltip(p: { seriesId?: string; value?: number[] }): string {
    const m = this.model;
    const v = p.value;
    if (!m || !v || p.seriesId !== "events") return "";
    const e = v[3]!;
    const count = v[4]!;
    const ev = m.d.events;
    const name = m.d.names[ev.name[e]!] ?? "?";
    const layer = ev.layer[e] ?? -1;
    const ph = ev.phase[e] ?? -1;
    const phase = ph >= 0 ? m.d.phases[ph] : undefined;
    const track = m.d.tracks.find((t) => t.id === ev.track[e]);
    const c = m.colors[m.color[e]!] ?? GREY;
    if (count > 1) {
      return [
        `${swatch(c)}<b>${esc(count)} short events</b> (merged at this zoom)`,
        `first: ${esc(name)}`,
        `from ${esc(fmtUs(v[1]!))} to ${esc(fmtUs(v[2]!))}`,
        "<i>zoom in to separate them</i>",
      ].join("<br>");
    }
    return [
      `${swatch(c)}<b>${esc(name)}</b>`,
      `duration: <b>${esc(fmtUs(m.dur[e]!))}</b>, start ${esc(fmtUs(m.start[e]!))}`,
      `${esc(kindOf(m.d, e))} on ${esc(track?.name ?? "?")}`,
      layer >= 0 ? `layer ${esc(layer)}${phase ? ", phase " + esc(phaseLabel(phase)) : ""}` : "not attention",
    ].join("<br>");
  }

  private onZoom(ev: unknown): void {
    const m = this.model;
    if (!m) return;
    this.window = zoomWindow(ev, 0, m.d.end_us - m.d.start_us, this.window);
    this.schedule();
  }

  private schedule(): void {
    if (this.frame) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      this.refresh();
    });
  }

  private refresh(): void {
    const m = this.model;
    if (!m || !this.chart) return;
    const [t0, t1] = this.window;
    const span = Math.max(t1 - t0, 1e-3);
    const items = m.visible(t0, t1, this.plotWidth() / span);
    // The ticks follow the window: one unit, steps that suit its width.
    this.scale = axisScale(fmtUs, t0, t1, { exact: true });
    this.chart.chart.setOption(
      {
        xAxis: zoomAxisOf(this.scale, AXIS_LABEL),
        series: [{ id: "events", data: items }],
      },
      { lazyUpdate: false },
    );
  }

  private disposeChart(): void {
    if (this.frame) cancelAnimationFrame(this.frame);
    this.frame = 0;
    this.resizeObserver?.disconnect();
    this.resizeObserver = null;
    this.chart?.dispose();
    this.chart = null;
  }

  dispose(): void {
    this.disposeChart();
    this.model = null;
    this.last = null;
  }
}
