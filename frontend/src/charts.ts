// ECharts, tree-shaken to what the views use and rendered on canvas only.

import { BarChart, CustomChart, LineChart, ScatterChart } from "echarts/charts";
import {
  DataZoomInsideComponent,
  DataZoomSliderComponent,
  GridComponent,
  MarkAreaComponent,
  MarkPointComponent,
  TooltipComponent,
  VisualMapContinuousComponent,
} from "echarts/components";
import * as echarts from "echarts/core";
import { LabelLayout } from "echarts/features";
import { CanvasRenderer } from "echarts/renderers";
import { ECHARTS_DARK, theme } from "./theme";

echarts.use([
  BarChart,
  LineChart,
  ScatterChart, // the generation view's decode steps against their context
  CustomChart,
  GridComponent,
  TooltipComponent,
  DataZoomInsideComponent,
  DataZoomSliderComponent,
  MarkAreaComponent,
  MarkPointComponent,
  VisualMapContinuousComponent,
  LabelLayout, // labels of nearby points moved apart (the strategies view's speed-up chart)
  CanvasRenderer,
]);

echarts.registerTheme("tb-attn-dark", ECHARTS_DARK);

export { echarts };
export type EChart = echarts.ECharts;

/** HTML-escapes text for ECharts tooltips, which take HTML strings. */
export function esc(text: unknown): string {
  return String(text).replace(/[&<>"'`]/g, (c) => `&#${c.charCodeAt(0)};`);
}

export const FONT = 'system-ui, -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif';

export const TOOLTIP_BASE = {
  confine: true,
  borderWidth: 1,
  borderColor: "#ccc",
  padding: [6, 8],
  textStyle: { fontSize: 12, fontFamily: FONT, color: "#212121" },
  extraCssText: "box-shadow: 0 1px 4px rgba(0,0,0,.15); max-width: 480px; white-space: normal;",
};

/** An element holding a chart: the browser tests read the axes it drew through `echart`. */
export type ChartElement = HTMLElement & { echart?: EChart };

/** A chart in `el`, resized with it; dispose() also stops watching. */
export function createChart(el: ChartElement): { chart: EChart; dispose: () => void } {
  const chart = echarts.init(el, theme() === "dark" ? "tb-attn-dark" : null, { renderer: "canvas" });
  el.echart = chart;
  const observer = new ResizeObserver(() => chart.resize());
  observer.observe(el);
  return {
    chart,
    dispose: () => {
      observer.disconnect();
      chart.dispose();
      delete el.echart;
    },
  };
}

/** A coloured square for tooltips; `color` comes from our palettes, never from data. */
export function swatch(color: string): string {
  return `<span style="display:inline-block;width:9px;height:9px;margin-right:5px;background:${esc(color)}"></span>`;
}
