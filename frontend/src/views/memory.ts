// The memory view: allocated memory over one step with the attention blocks shaded, and the
// peak per layer. Clicking a shaded block or a peak bar opens that layer's drill-down.

import { createChart, esc, swatch, TOOLTIP_BASE, type EChart } from "../charts";
import { h, replace } from "../dom";
import { fmtBytes, fmtUs } from "../format";
import { layerColor, phaseColor, phaseLabel } from "../metrics";
import type { Actions, State } from "../state";
import type { MemoryResponse, MemoryScope } from "../types";
import { changed, note, pending } from "./common";

const MAX_AREAS = 2000;

export class MemoryView {
  readonly el: HTMLElement;
  private readonly body: HTMLElement;
  private readonly lineEl: HTMLElement;
  private readonly peakEl: HTMLElement;
  private readonly info: HTMLElement;
  private line: { chart: EChart; dispose: () => void } | null = null;
  private peak: { chart: EChart; dispose: () => void } | null = null;
  private last: State["memory"] | null = null;
  private data: MemoryResponse | null = null;
  private shaded: MemoryScope[] = [];

  constructor(private readonly actions: Actions) {
    this.lineEl = h("div", { class: "chart", style: { height: "320px" } });
    this.peakEl = h("div", { class: "chart", style: { height: "200px" } });
    this.info = h("div", "muted");
    this.body = h("div");
    this.el = h("section", "memory", this.body);
  }

  update(s: State): void {
    if (!changed(this.last, s.memory)) return;
    this.last = s.memory;
    const wait = pending(s.memory, "memory");
    if (wait) {
      this.disposeCharts();
      replace(this.body, wait);
      return;
    }
    const d = s.memory.data!;
    this.data = d;
    if (d.points.length === 0) {
      this.disposeCharts();
      replace(
        this.body,
        note("No memory events in this step. Profile with profile_memory=True (the runner does by default) to see allocations."),
      );
      return;
    }
    const blocks = d.scopes.filter((sc) => sc.phase === null);
    // Without block scopes (only phases), shade the phases instead.
    this.shaded = (blocks.length ? blocks : d.scopes).slice(0, MAX_AREAS);
    replace(
      this.body,
      this.info,
      h("h4", null, "Allocated memory over the step"),
      this.lineEl,
      h("div", "legend", ...this.legendItems()),
      h("h4", null, "Peak per layer (rise over the block's start)"),
      d.peaks.length ? this.peakEl : note("No attention blocks in this step."),
    );
    const peakValue = Math.max(...d.points.map((p) => p[1]));
    replace(
      this.info,
      `Step ${d.step ?? "\u2014"} on ${d.device}: ${fmtUs(d.end_us - d.start_us)} long, peak allocated ${fmtBytes(peakValue)}, ${d.points.length} points.`,
    );
    this.drawLine(d);
    if (d.peaks.length) this.drawPeaks(d);
    else if (this.peak) {
      this.peak.dispose();
      this.peak = null;
    }
  }

  private legendItems(): HTMLElement[] {
    const layers = [...new Set(this.shaded.map((s) => s.layer))].sort((a, b) => a - b).slice(0, 24);
    const items: HTMLElement[] = [h("span", "muted", "shaded:")];
    items.push(...layers.map((l) =>
      h("span", "legend-item", h("span", { class: "sw", style: { background: layerColor(l), opacity: "0.6" } }), `L${l}`),
    ));
    if (this.shaded.length === MAX_AREAS) {
      items.push(h("span", "muted", `(only the first ${MAX_AREAS} scopes are shaded)`));
    }
    return items;
  }

  private drawLine(d: MemoryResponse): void {
    if (!this.line) {
      this.line = createChart(this.lineEl);
      this.line.chart.on("click", (p) => {
        if (p.componentType === "markArea") {
          const scope = this.shaded[p.dataIndex];
          if (scope) this.actions.select({ layer: scope.layer, phase: scope.phase, backward: false });
        }
      });
    }
    const start = d.start_us;
    const shaded = this.shaded;
    const areas = shaded.map((sc) => [
      {
        xAxis: sc.start_us,
        name: sc.phase ? `L${sc.layer} ${phaseLabel(sc.phase)}` : `L${sc.layer}`,
        itemStyle: { color: sc.phase ? phaseColor(sc.phase) : layerColor(sc.layer), opacity: 0.35 },
      },
      { xAxis: sc.end_us },
    ]);
    this.line.chart.setOption(
      {
        animation: false,
        grid: { left: 80, right: 24, top: 20, bottom: 70 },
        tooltip: {
          ...TOOLTIP_BASE,
          trigger: "axis",
          formatter: (params: unknown) => {
            const list = (Array.isArray(params) ? params : [params]) as { value: [number, number] }[];
            const v = list[0]?.value;
            if (!v) return "";
            const inside = shaded.filter((sc) => sc.start_us <= v[0] && v[0] <= sc.end_us).slice(0, 3);
            return [
              `t = ${esc(fmtUs(v[0] - start))}`,
              `allocated: <b>${esc(fmtBytes(v[1]))}</b>`,
              ...inside.map(
                (sc) =>
                  `${swatch(sc.phase ? phaseColor(sc.phase) : layerColor(sc.layer))}layer ${esc(sc.layer)}${
                    sc.phase ? " " + esc(phaseLabel(sc.phase)) : ""
                  }`,
              ),
            ].join("<br>");
          },
        },
        xAxis: {
          type: "value",
          min: d.start_us,
          max: d.end_us,
          axisLabel: { formatter: (v: number) => fmtUs(v - start), hideOverlap: true },
          name: "time in step",
          nameLocation: "middle",
          nameGap: 26,
        },
        yAxis: { type: "value", axisLabel: { formatter: (v: number) => fmtBytes(v) }, scale: true },
        dataZoom: [
          { type: "inside", xAxisIndex: 0, filterMode: "none" },
          { type: "slider", xAxisIndex: 0, filterMode: "none", height: 18, bottom: 8 },
        ],
        series: [
          {
            type: "line",
            step: "end",
            showSymbol: false,
            lineStyle: { width: 1.5, color: "#1565c0" },
            areaStyle: { color: "rgba(21,101,192,0.08)" },
            data: d.points,
            markArea: {
              silent: false,
              label: { show: shaded.length <= 64, position: "insideTop", fontSize: 10, color: "#424242" },
              emphasis: { label: { show: true } },
              data: areas,
            },
          },
        ],
      },
      { notMerge: true },
    );
  }

  private drawPeaks(d: MemoryResponse): void {
    if (!this.peak) {
      this.peak = createChart(this.peakEl);
      this.peak.chart.on("click", (p) => {
        const pk = this.data?.peaks[p.dataIndex];
        if (pk) this.actions.select({ layer: pk.layer, phase: null, backward: false });
      });
    }
    const peaks = d.peaks;
    this.peak.chart.setOption(
      {
        animation: false,
        grid: { left: 80, right: 24, top: 12, bottom: 28 },
        tooltip: {
          ...TOOLTIP_BASE,
          trigger: "item",
          formatter: (p: unknown) => {
            const pk = peaks[(p as { dataIndex: number }).dataIndex];
            return pk ? `<b>Layer ${esc(pk.layer)}</b><br>peak: <b>${esc(fmtBytes(pk.peak_bytes))}</b>` : "";
          },
        },
        xAxis: { type: "category", data: peaks.map((p) => `L${p.layer}`) },
        yAxis: { type: "value", axisLabel: { formatter: (v: number) => fmtBytes(v) } },
        series: [
          {
            type: "bar",
            barMaxWidth: 40,
            data: peaks.map((p) => ({ value: p.peak_bytes, itemStyle: { color: layerColor(p.layer) } })),
          },
        ],
      },
      { notMerge: true },
    );
  }

  private disposeCharts(): void {
    this.line?.dispose();
    this.peak?.dispose();
    this.line = null;
    this.peak = null;
  }

  dispose(): void {
    this.disposeCharts();
    this.last = null;
  }
}
