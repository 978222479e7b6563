// The per-layer view: a stacked bar chart of phases per layer for one metric, and a sortable
// table with a column group per phase. Clicking a bar or a cell opens the drill-down.

import { stackedMax, valueAxis } from "../axes";
import { createChart, esc, swatch, TOOLTIP_BASE, type EChart } from "../charts";
import { h, replace, select } from "../dom";
import { CHART_METRICS, METRICS, metric, phaseColor, phaseLabel, phasesOf, type MetricKey } from "../metrics";
import { CAPTURED_TITLE, capturedIn, layerMarks } from "./common";
import { roofBoundCell, roofBoundHeader, roofShareCell, roofShareHeader } from "./roofline";
import { hasMasks, kindBadge, layerCategory, savedCell, savedHeader } from "./sparsity";
import { defaultTime, type Actions, type Selection, type State } from "../state";
import { noisyMark, SPREAD_METRICS, spreadTitle } from "../spread";
import type { LayerStats, PhaseStats, Spread, WorkerSummary } from "../types";
import { INK } from "../theme";

const BLOCK = "block";

function phaseOf(l: LayerStats, phase: string): PhaseStats | undefined {
  return l.phases.find((p) => p.phase === phase);
}

/** The spread over steps of a cell's figure (time metrics only; none with one step). */
function cellSpread(l: LayerStats, group: string, key: MetricKey): Spread | undefined {
  if (group === BLOCK) return l.spread[key];
  return phaseOf(l, group)?.spread[key];
}

function cellValue(l: LayerStats, group: string, key: MetricKey): number | null {
  const m = metric(key);
  if (group === BLOCK) return m.layer(l);
  const p = phaseOf(l, group);
  return p ? m.phase(p) : null;
}

/** The chart's metric and the table's columns, the trace's clock until the user picks. */
function chosen(s: State, ws: WorkerSummary): { chart: MetricKey; columns: MetricKey[] } {
  const auto = defaultTime(ws);
  return { chart: s.chartMetric ?? auto, columns: s.columns ?? [auto] };
}

export class LayersView {
  readonly el: HTMLElement;
  private readonly controls: HTMLElement;
  private readonly chartEl: HTMLElement;
  private readonly tableEl: HTMLElement;
  private chart: EChart | null = null;
  private disposeChart: (() => void) | null = null;
  private ws: WorkerSummary | null = null;
  private last: Partial<Record<string, unknown>> = {};

  constructor(private readonly actions: Actions) {
    this.controls = h("div", "toolbar");
    this.chartEl = h("div", { class: "chart", style: { height: "260px" } });
    this.tableEl = h("div", "table-wrap");
    this.el = h(
      "section",
      "layers",
      this.controls,
      this.chartEl,
      h("p", "hint", "Forward work (backward: the bwd columns), means per profiled step; the headline's phase shares hold both; the whiskers span the steps (min\u2013max, or the IQR from 8 steps), \u00b1 marks a figure whose steps spread over 20 % of their median. Click a bar or a table cell for the ops and kernels behind it."),
      this.tableEl,
    );
  }

  update(s: State, ws: WorkerSummary): void {
    const changed = (k: string, v: unknown) => {
      const c = this.last[k] !== v;
      this.last[k] = v;
      return c;
    };
    const wsChanged = changed("ws", ws);
    const metricChanged = changed("metric", chosen(s, ws).chart);
    const colsChanged = changed("cols", s.columns);
    const sortChanged = changed("sort", s.sort);
    const selChanged = changed("sel", s.selection);
    this.ws = ws;
    if (wsChanged || metricChanged || colsChanged) this.renderControls(s, ws);
    if (wsChanged || metricChanged) this.renderChart(s, ws);
    if (wsChanged || colsChanged || sortChanged || selChanged) this.renderTable(s, ws);
  }

  dispose(): void {
    this.disposeChart?.();
    this.disposeChart = null;
    this.chart = null;
    this.last = {};
  }

  private renderControls(s: State, ws: WorkerSummary): void {
    const hasDevice = ws.device !== "cpu";
    const { chart: chartKey, columns } = chosen(s, ws);
    const chartOptions = CHART_METRICS.filter((k) => hasDevice || !k.includes("device")).map((k) => ({
      value: k,
      label: metric(k).title,
    }));
    const chips = METRICS.filter((m) => hasDevice || !m.key.includes("device")).map((m) => {
      const on = columns.includes(m.key);
      return h(
        "button",
        {
          class: on ? "chip on" : "chip",
          attrs: { type: "button", "aria-pressed": on ? "true" : "false" },
          title: m.title,
          on: {
            click: () => {
              const cols = on ? columns.filter((k) => k !== m.key) : [...columns, m.key];
              const ordered = METRICS.map((x) => x.key).filter((k) => cols.includes(k));
              this.actions.patch({ columns: ordered.length ? ordered : [m.key] });
            },
          },
        },
        m.label,
      );
    });
    const all = h(
      "button",
      {
        class: "chip",
        attrs: { type: "button" },
        on: {
          click: () =>
            this.actions.patch({
              columns: columns.length === METRICS.length ? [chartKey] : METRICS.map((m) => m.key),
            }),
        },
      },
      columns.length === METRICS.length ? "show fewer" : "show all",
    );
    replace(
      this.controls,
      h(
        "label",
        null,
        "Chart ",
        select(chartOptions, chartKey, (v) => this.actions.patch({ chartMetric: v as MetricKey }), "Chart metric"),
      ),
      h("span", { class: "chips", attrs: { role: "group", "aria-label": "Table columns" } }, "Table columns ", ...chips, all),
    );
  }

  private renderChart(s: State, ws: WorkerSummary): void {
    if (!this.chart) {
      const c = createChart(this.chartEl);
      this.chart = c.chart;
      this.disposeChart = c.dispose;
      this.chart.on("click", (p) => {
        const w = this.ws;
        const layer = w?.layers[p.dataIndex];
        if (!w || !layer || typeof p.seriesId !== "string") return;
        const m = metric(this.last["metric"] as string);
        this.actions.select({ layer: layer.layer, phase: p.seriesId, backward: m.backward });
      });
    }
    const m = metric(chosen(s, ws).chart);
    const phases = phasesOf(ws.layers);
    const categories = ws.layers.map((l) => layerCategory(l, ws.layers));
    const series = phases.map((phase) => ({
      id: phase,
      name: phaseLabel(phase),
      type: "bar" as const,
      stack: "phases",
      barMaxWidth: 48,
      itemStyle: { color: phaseColor(phase) },
      emphasis: { focus: "series" as const },
      data: ws.layers.map((l) => {
        const p = phaseOf(l, phase);
        return p ? m.phase(p) : 0;
      }),
    }));
    const layers = ws.layers;
    // Error bars on each block's total: how far its steps were apart (the summary's spread).
    const phaseSeries = [...series];
    const spreads = layers.map((l) => l.spread[m.key]);
    if (spreads.some(Boolean)) {
      series.push({
        id: "\u0000spread",
        name: "steps' spread",
        type: "custom" as const,
        z: 10,
        silent: true,
        data: spreads.map((sp, i) => (sp ? [i, sp.lo, sp.hi, sp.noisy ? 1 : 0] : [i, NaN, NaN, 0])),
        renderItem: (_params: unknown, api: { value: (d: number) => number; coord: (p: number[]) => number[]; size: (p: number[]) => number[] }) => {
          const lo = api.value(1);
          const hi = api.value(2);
          if (!Number.isFinite(lo) || !Number.isFinite(hi)) return null;
          const [x, yLo] = api.coord([api.value(0), lo]) as [number, number];
          const [, yHi] = api.coord([api.value(0), hi]) as [number, number];
          const half = Math.min(8, (api.size([1, 0])[0] ?? 16) / 6);
          const style = { stroke: api.value(3) ? "#e65100" : INK.muted, lineWidth: api.value(3) ? 2 : 1.2 };
          return {
            type: "group",
            children: [
              { type: "line", shape: { x1: x, y1: yLo, x2: x, y2: yHi }, style },
              { type: "line", shape: { x1: x - half, y1: yLo, x2: x + half, y2: yLo }, style },
              { type: "line", shape: { x1: x - half, y1: yHi, x2: x + half, y2: yHi }, style },
            ],
          };
        },
      } as unknown as (typeof series)[number]);
    }
    this.chart.setOption(
      {
        animation: false,
        grid: { left: 70, right: 16, top: 24, bottom: 28 },
        tooltip: {
          ...TOOLTIP_BASE,
          trigger: "axis",
          axisPointer: { type: "shadow" },
          formatter: (params: unknown) => {
            const list = (Array.isArray(params) ? params : [params]) as { dataIndex: number; seriesId: string }[];
            const first = list[0];
            const layer = first ? layers[first.dataIndex] : undefined;
            if (!layer) return "";
            let total = 0;
            const rows = list
              .map((it) => {
                const p = phaseOf(layer, it.seriesId);
                const v = p ? m.phase(p) : 0;
                total += v;
                return v
                  ? `${swatch(phaseColor(it.seriesId))}${esc(phaseLabel(it.seriesId))}: <b>${esc(m.format(v))}</b>`
                  : "";
              })
              .filter(Boolean)
              .reverse();
            const head = `<b>Layer ${layer.layer}</b>${layer.module ? " " + esc(layer.module) : ""} \u2014 ${esc(m.title)}`;
            const sp = layer.spread[m.key];
            const range = sp ? [`${sp.noisy ? "<b>\u00b1 noisy</b>: " : ""}${esc(spreadTitle(sp, m.format))}`] : [];
            return [head, ...rows, `total: <b>${esc(m.format(total))}</b> (mean per step)`, ...range].join("<br>");
          },
        },
        xAxis: { type: "category", data: categories, axisTick: { alignWithLabel: true } },
        yAxis: {
          type: "value",
          name: m.title,
          nameTextStyle: { align: "left" },
          // Room for the whiskers too, which can reach past the tallest bar.
          ...valueAxis(m.format, 0, Math.max(stackedMax(phaseSeries), ...spreads.map((sp) => sp?.hi ?? 0))),
        },
        series,
      },
      { notMerge: true },
    );
    this.renderLegend(phases);
  }

  private legendEl: HTMLElement | null = null;

  // The legend is HTML under the chart: it wraps, and needs no extra ECharts module.
  private renderLegend(phases: string[]): void {
    if (!this.legendEl) {
      this.legendEl = h("div", "legend chart-legend");
      this.chartEl.insertAdjacentElement("afterend", this.legendEl);
    }
    replace(
      this.legendEl,
      ...phases.map((p) =>
        h("span", { class: "legend-item", title: `${p}: the phase's name in the findings, the headline and the CLI` }, h("span", { class: "sw", style: { background: phaseColor(p) } }), phaseLabel(p)),
      ),
    );
  }

  private renderTable(s: State, ws: WorkerSummary): void {
    const columns = chosen(s, ws).columns;
    const cols = METRICS.filter((m) => columns.includes(m.key)).filter(
      (m) => ws.device !== "cpu" || !m.key.includes("device"),
    );
    const shownCols = cols.length ? cols : [METRICS[0]!];
    const groups = [BLOCK, ...phasesOf(ws.layers)];
    const masked = hasMasks(ws);
    const max = new Map<string, number>();
    for (const g of groups)
      for (const m of shownCols)
        max.set(`${g}:${m.key}`, Math.max(0, ...ws.layers.map((l) => cellValue(l, g, m.key) ?? 0)));

    const sortHeader = (key: string, label: string, title: string) => {
      const active = s.sort.key === key;
      return h(
        "th",
        {
          class: active ? "sortable sorted" : "sortable",
          title: `${title} \u2014 click to sort`,
          attrs: { "aria-sort": active ? (s.sort.desc ? "descending" : "ascending") : "none", tabindex: 0 },
          on: {
            click: () => this.actions.patch({ sort: { key, desc: active ? !s.sort.desc : key !== "layer" } }),
            keydown: (ev) => {
              if (ev.key === "Enter") (ev.target as HTMLElement).click();
            },
          },
        },
        label,
        active ? (s.sort.desc ? " \u25bc" : " \u25b2") : "",
      );
    };

    const row1 = h(
      "tr",
      null,
      sortHeader("layer", "Layer", "layer"),
      h("th", { attrs: { rowspan: 2 } }, "backend"),
      masked ? savedHeader() : null,
      // The layer's forward work under the roofline (the Roofline tab has each phase's).
      roofShareHeader({ rowspan: 2 }),
      roofBoundHeader({ rowspan: 2 }),
      ...groups.map((g) =>
        h(
          "th",
          { class: "group-head", title: g === BLOCK ? "" : `${g}: the phase's name in the findings, the headline and the CLI`, attrs: { colspan: shownCols.length }, style: { "border-top-color": g === BLOCK ? "#616161" : phaseColor(g) } },
          g === BLOCK ? (ws.layers.every((l) => l.core_only) ? "attention core" : "whole block") : phaseLabel(g),
        ),
      ),
    );
    const row2 = h(
      "tr",
      null,
      ...groups.flatMap((g) =>
        shownCols.map((m) => sortHeader(`${g}:${m.key}`, m.label, `${g === BLOCK ? "block" : g}: ${m.title}`)),
      ),
    );
    (row1.firstChild as HTMLElement).setAttribute("rowspan", "2");

    const layers = [...ws.layers];
    const [sg, sm] = s.sort.key.split(":");
    const sign = s.sort.desc ? -1 : 1;
    layers.sort((a, b) => {
      if (s.sort.key !== "layer" && sg && sm) {
        const d = (cellValue(a, sg, sm as MetricKey) ?? -1) - (cellValue(b, sg, sm as MetricKey) ?? -1);
        if (d !== 0) return sign * d;
        return a.layer - b.layer; // ties stay in layer order
      }
      return sign * (a.layer - b.layer);
    });

    const sel = s.selection;
    const isSel = (l: LayerStats, g: string, m: MetricKey) =>
      !!sel &&
      sel.layer === l.layer &&
      (sel.phase ?? BLOCK) === g &&
      sel.backward === metric(m).backward;

    const body = h(
      "tbody",
      null,
      ...layers.map((l) =>
        h(
          "tr",
          sel && sel.layer === l.layer ? "sel-row" : null,
          h(
            "th",
            { class: "row-head", title: l.module ?? "" },
            `L${l.layer}`,
            kindBadge(l, ws.layers),
            l.module ? h("span", "module", ` ${l.module}`) : null,
          ),
          h(
            "td",
            { title: l.backend_evidence.length ? `evidence: ${l.backend_evidence.join(", ")}` : "" },
            l.backend,
            ...layerMarks(l),
          ),
          masked ? savedCell(l) : null,
          roofShareCell(l.roof),
          roofBoundCell(l.roof),
          ...groups.flatMap((g) =>
            shownCols.map((m) => {
              const v = cellValue(l, g, m.key);
              if (v === null) return h("td", "num empty", "");
              const hidden = capturedIn(l, g === BLOCK ? null : g);
              if (hidden.length && (m.key === "device_us" || m.key === "flops_per_s") && g !== BLOCK)
                return h("td", { class: "num empty", title: CAPTURED_TITLE }, "\u2014");
              const mx = max.get(`${g}:${m.key}`) ?? 0;
              const pct = mx > 0 ? Math.max(0, Math.min(100, (v / mx) * 100)) : 0;
              const color = g === BLOCK ? "rgba(97,97,97,.16)" : hexAlpha(phaseColor(g), 0.28);
              const selection: Selection = { layer: l.layer, phase: g === BLOCK ? null : g, backward: m.backward };
              return h(
                "td",
                {
                  class: `num cell${v === 0 ? " zero" : ""}${isSel(l, g, m.key) ? " sel" : ""}`,
                  title: `L${l.layer} ${g === BLOCK ? "block" : g}, ${m.title}: ${m.format(v)} per step (mean)${SPREAD_METRICS.includes(m.key) ? `; ${spreadTitle(cellSpread(l, g, m.key), m.format)}` : ""}${hidden.length && m.key === "device_us" ? `; partial: ${hidden.join(", ")} captured into a CUDA/HIP graph, not run here` : ""}`,
                  attrs: { tabindex: 0 },
                  style: { background: `linear-gradient(to right, ${color} ${pct.toFixed(1)}%, transparent ${pct.toFixed(1)}%)` },
                  on: {
                    click: () => this.actions.select(selection),
                    keydown: (ev) => {
                      if (ev.key === "Enter") this.actions.select(selection);
                    },
                  },
                },
                h("span", "v", m.format(v)),
                noisyMark(cellSpread(l, g, m.key), m.format, true),
                hidden.length && m.key === "device_us" ? h("span", { class: "partial-mark", dataset: { testid: "partial" } }, "*") : null,
              );
            }),
          ),
        ),
      ),
    );
    replace(this.tableEl, h("table", "grid layers-table", h("thead", null, row1, row2), body));
  }
}

function hexAlpha(hex: string, alpha: number): string {
  const n = parseInt(hex.slice(1), 16);
  return `rgba(${(n >> 16) & 255},${(n >> 8) & 255},${n & 255},${alpha})`;
}
