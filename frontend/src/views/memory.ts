// The memory view: allocated memory over one step with each layer's forward block shaded and its
// backward block hatched, the step's peak marked with where it falls, and the peak per layer.
// Clicking a shaded block or a peak bar opens that layer's drill-down.

import { axisScale, valueAxis, zoomAxis, zoomAxisOf, zoomWindow } from "../axes";
import { createChart, esc, swatch, TOOLTIP_BASE, type EChart } from "../charts";
import { h, replace } from "../dom";
import { fmtBytes, fmtUs } from "../format";
import { layerColor, layerLegend, phaseColor, phaseLabel } from "../metrics";
import type { Actions, State } from "../state";
import type { MemoryCurve, StepPeak } from "../types";
import { changed, note, pending } from "./common";
import { INK } from "../theme";

const MAX_AREAS = 2000;
const PEAK_COLOR = "#c62828";
const LINE_GRID = { left: 80, right: 24, top: 28, bottom: 70 };
/** Past this many shaded blocks none is labelled (hovering one still names it). */
const MAX_LABELLED = 64;
/** About one character of the 10 px label font, for whether a block's name fits its width. */
const LABEL_CHAR_PX = 6;

/** A shaded area, in µs from the step's start. */
interface Shade {
  layers: number[];
  phase: string | null;
  backward: boolean;
  start: number;
  end: number;
}

function shadeName(sc: Shade): string {
  const layers = sc.layers.map((l) => `L${l}`).join("+");
  if (sc.backward) return sc.layers.length > 1 ? `${layers} bwd (interleaved)` : `${layers} bwd`;
  return sc.phase ? `${layers} ${phaseLabel(sc.phase)}` : layers;
}

function shadeColor(sc: Shade): string {
  return sc.phase ? phaseColor(sc.phase) : layerColor(sc.layers[0] ?? 0);
}

/** Where the peak falls, in words: "L1 bwd · Q·Kᵀ", "outside attention, in backward". */
export function peakWhere(p: StepPeak): string {
  if (p.layer < 0) return p.backward ? "outside attention, in backward" : "outside attention";
  return `L${p.layer} ${p.backward ? "bwd" : "fwd"}${p.phase ? ` \u00b7 ${phaseLabel(p.phase)}` : ""}`;
}

const hatches = new Map<string, HTMLCanvasElement>();

/** A diagonal hatch in `color` (an ECharts pattern fill): backward blocks, apart from forward ones. */
function hatch(color: string): HTMLCanvasElement {
  let c = hatches.get(color);
  if (!c) {
    c = document.createElement("canvas");
    c.width = c.height = 8;
    const g = c.getContext("2d")!;
    g.fillStyle = "rgba(255,255,255,0)";
    g.fillRect(0, 0, 8, 8);
    g.strokeStyle = color;
    g.lineWidth = 2.5;
    g.beginPath();
    for (const o of [-8, 0, 8]) {
      g.moveTo(o, 8);
      g.lineTo(o + 8, 0);
    }
    g.stroke();
    hatches.set(color, c);
  }
  return c;
}

const HATCH_CSS = (color: string) => `repeating-linear-gradient(135deg, ${color} 0 2px, rgba(255,255,255,0) 2px 5px)`;

export class MemoryView {
  readonly el: HTMLElement;
  private readonly body: HTMLElement;
  private readonly lineEl: HTMLElement;
  private readonly peakEl: HTMLElement;
  private readonly info: HTMLElement;
  private line: { chart: EChart; dispose: () => void } | null = null;
  private peak: { chart: EChart; dispose: () => void } | null = null;
  private last: State["memory"] | null = null;
  private data: MemoryCurve | null = null;
  private shaded: Shade[] = [];
  private span = 0;
  private window: [number, number] = [0, 1];

  constructor(private readonly actions: Actions) {
    this.lineEl = h("div", { class: "chart memory-curve", style: { height: "320px" } });
    this.peakEl = h("div", { class: "chart memory-peaks", style: { height: "200px" } });
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
    const rel = (t: number) => t - d.start_us;
    const blocks = d.scopes.filter((sc) => sc.phase === null);
    // Without block scopes (only phases), shade the phases instead.
    const forward: Shade[] = (blocks.length ? blocks : d.scopes).map((sc) => ({
      layers: [sc.layer], phase: sc.phase, backward: false, start: rel(sc.start_us), end: rel(sc.end_us),
    }));
    const backward: Shade[] = d.backward.map((b) => ({
      layers: b.layers, phase: null, backward: true, start: rel(b.start_us), end: rel(b.end_us),
    }));
    this.shaded = [...forward, ...backward].slice(0, MAX_AREAS);
    this.span = d.end_us - d.start_us;
    this.window = [0, this.span];
    replace(
      this.body,
      this.info,
      h("h4", null, "Allocated memory over the step"),
      this.lineEl,
      h("div", "legend", ...this.legendItems(forward.length + backward.length)),
      h("h4", null, "Peak per layer (rise over the start of its forward block)"),
      d.peaks.length ? this.peakEl : note("No attention blocks in this step."),
    );
    const p = d.peak;
    replace(
      this.info,
      `Step ${d.step ?? "\u2014"} on ${d.device}: ${fmtUs(this.span)} long, ${d.points.length} points.` +
        (p ? ` Peak allocated ${fmtBytes(p.allocated_bytes)} at ${fmtUs(rel(p.t_us))}, ${peakWhere(p)}${p.op ? ` (${p.op})` : ""}.` : ""),
    );
    this.drawLine(d);
    if (d.peaks.length) this.drawPeaks(d);
    else if (this.peak) {
      this.peak.dispose();
      this.peak = null;
    }
  }

  private legendItems(total: number): HTMLElement[] {
    const layersOf = (bwd: boolean) => this.shaded.filter((s) => s.backward === bwd).flatMap((s) => s.layers);
    const item = (background: string, text: string) =>
      h("span", "legend-item", h("span", { class: "sw", style: { background, opacity: "0.7" } }), text);
    const fwd = layerLegend(layersOf(false), "");
    const bwd = layerLegend(layersOf(true), "");
    const items: HTMLElement[] = [];
    if (fwd.length) items.push(h("span", "muted", "forward:"), ...fwd.map((g) => item(g.color, g.label)));
    if (bwd.length) items.push(h("span", "muted", "backward:"), ...bwd.map((g) => item(HATCH_CSS(g.color), `${g.label} bwd`)));
    if (this.data?.peak) {
      items.push(h("span", "legend-item", h("span", { class: "sw", style: { background: PEAK_COLOR, "border-radius": "50%" } }), "step peak"));
    }
    const merged = this.shaded.find((s) => s.backward && s.layers.length > 1);
    if (merged) {
      items.push(h("span", "muted", `${shadeName(merged)}: these layers' backward work interleaves, so one block covers them.`));
    }
    if (total > MAX_AREAS) items.push(h("span", "muted", `(only the first ${MAX_AREAS} blocks are shaded)`));
    return items;
  }

  /** The shaded blocks, each labelled only where its width at the current zoom holds its name, so
   * that 24 narrow blocks do not print 24 names over each other (hovering a block still shows it). */
  private areas(): unknown[] {
    const plot = Math.max(50, (this.line?.chart.getWidth() ?? this.lineEl.clientWidth) - LINE_GRID.left - LINE_GRID.right);
    const pxPerUs = plot / Math.max(this.window[1] - this.window[0], 1e-9);
    return this.shaded.map((sc) => {
      const name = shadeName(sc);
      const fits = this.shaded.length <= MAX_LABELLED && (sc.end - sc.start) * pxPerUs >= name.length * LABEL_CHAR_PX + 4;
      return [
        {
          xAxis: sc.start,
          name,
          itemStyle: sc.backward
            ? { color: { image: hatch(shadeColor(sc)), repeat: "repeat" }, opacity: 0.55 }
            : { color: shadeColor(sc), opacity: 0.35 },
          label: { show: fits, ...(sc.backward ? { position: "insideBottom" } : {}) },
        },
        { xAxis: sc.end },
      ];
    });
  }

  private drawLine(d: MemoryCurve): void {
    if (!this.line) {
      this.line = createChart(this.lineEl);
      this.line.chart.on("click", (p) => {
        if (p.componentType !== "markArea") return;
        const sc = this.shaded[p.dataIndex];
        // An interleaved block is no one layer's: it opens nothing.
        if (sc && sc.layers.length === 1) this.actions.select({ layer: sc.layers[0]!, phase: sc.phase, backward: sc.backward });
      });
      this.line.chart.on("datazoom", (ev: unknown) => {
        this.window = zoomWindow(ev, 0, this.span, this.window);
        this.line?.chart.setOption({
          xAxis: zoomAxis(fmtUs, this.window[0], this.window[1], { hideOverlap: true }),
          series: [{ markArea: { data: this.areas() } }],
        });
      });
    }
    const start = d.start_us;
    const shaded = this.shaded;
    const points = d.points.map(([t, y]) => [t - start, y]);
    const areas = this.areas();
    const ys = d.points.map((p) => p[1]);
    const time = axisScale(fmtUs, 0, this.span, { exact: true });
    const peak = d.peak;
    const peakX = peak ? peak.t_us - start : 0;
    this.line.chart.setOption(
      {
        animation: false,
        grid: LINE_GRID,
        tooltip: {
          ...TOOLTIP_BASE,
          trigger: "axis",
          formatter: (params: unknown) => {
            const list = (Array.isArray(params) ? params : [params]) as { value: [number, number] }[];
            const v = list[0]?.value;
            if (!v) return "";
            const inside = shaded.filter((sc) => sc.start <= v[0] && v[0] <= sc.end).slice(0, 3);
            return [
              `t = ${esc(fmtUs(v[0]))}`,
              `allocated: <b>${esc(fmtBytes(v[1]))}</b>`,
              ...inside.map((sc) => `${swatch(shadeColor(sc))}${esc(shadeName(sc))}`),
            ].join("<br>");
          },
        },
        xAxis: {
          type: "value",
          min: 0,
          max: this.span,
          ...zoomAxisOf(time, { hideOverlap: true }),
          name: "time in step",
          nameLocation: "middle",
          nameGap: 26,
        },
        yAxis: { type: "value", ...valueAxis(fmtBytes, Math.min(...ys), Math.max(...ys)) },
        dataZoom: [
          { type: "inside", xAxisIndex: 0, filterMode: "none" },
          { type: "slider", xAxisIndex: 0, filterMode: "none", height: 18, bottom: 8, labelFormatter: (v: number) => time.value(v) },
        ],
        series: [
          {
            type: "line",
            step: "end",
            showSymbol: false,
            lineStyle: { width: 1.5, color: INK.line },
            areaStyle: { color: "rgba(21,101,192,0.08)" },
            data: points,
            markArea: {
              silent: false,
              label: { position: "insideTop", fontSize: 10, color: INK.muted },
              emphasis: { label: { show: true } },
              data: areas,
            },
            markPoint: peak
              ? {
                  silent: true,
                  symbol: "circle",
                  symbolSize: 9,
                  itemStyle: { color: PEAK_COLOR },
                  label: {
                    show: true,
                    position: peakX > this.span / 2 ? "left" : "right",
                    distance: 8,
                    formatter: `peak ${fmtBytes(peak.allocated_bytes)}\n${peakWhere(peak)}`,
                    fontSize: 11,
                    lineHeight: 14,
                    color: PEAK_COLOR,
                    backgroundColor: "rgba(255,255,255,0.85)",
                    padding: [2, 4],
                  },
                  data: [{ name: "step peak", coord: [peakX, peak.allocated_bytes] }],
                }
              : undefined,
          },
        ],
      },
      { notMerge: true },
    );
  }

  private drawPeaks(d: MemoryCurve): void {
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
        yAxis: { type: "value", ...valueAxis(fmtBytes, 0, Math.max(0, ...peaks.map((p) => p.peak_bytes)), { ticks: 4 }) },
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
