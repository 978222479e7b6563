// The ranks view's layer x global head map: every rank's heads put together (tensor parallelism
// shards them, data parallelism replicates them), with what covers each head and the gaps.

import { createChart, esc, type EChart } from "../charts";
import { append, h, replace } from "../dom";
import { fmtFlops, fmtUs } from "../format";
import type { GlobalHead, RankView } from "../types";
import { note } from "./common";
import { derivedNote, heatmapOption, type HeatCell } from "./heads";

/** "0-1, 4": integers as sorted ranges, duplicates dropped. */
export function ranges(values: number[]): string {
  const v = [...new Set(values)].sort((a, b) => a - b);
  const out: string[] = [];
  for (let i = 0; i < v.length; ) {
    let j = i;
    while (j + 1 < v.length && v[j + 1] === v[j]! + 1) j++;
    out.push(j > i ? `${v[i]}-${v[j]}` : String(v[i]));
    i = j + 1;
  }
  return out.join(", ");
}

/** The distinct ranks that computed a head. */
function ranksOf(x: GlobalHead): number[] {
  return [...new Set(x.ranks)].sort((a, b) => a - b);
}

export class GlobalHeadsMap {
  readonly el: HTMLElement;
  private readonly chartEl: HTMLElement;
  private chart: { chart: EChart; dispose: () => void } | null = null;

  constructor() {
    this.chartEl = h("div", { class: "chart", dataset: { testid: "global-heads-chart" } });
    this.el = h("div", { class: "ranks-heads", dataset: { testid: "global-heads" } });
  }

  /** Renders `d`'s heads; call once `el` is in the document, so the chart has its size. */
  update(d: RankView): void {
    replace(this.el, h("h3", null, "Layers \u00d7 global heads"));
    if (!d.heads.length) {
      this.dispose();
      this.el.append(note("No per-head figures in these traces (they need record_shapes=True, or head scopes)."));
      return;
    }
    const ranksWithHeads = new Set(d.heads.flatMap(ranksOf)).size;
    this.el.append(
      h("p", { class: "metric-caption", dataset: { testid: "global-heads-metric" } }, h("span", "stat-label", "shown: "), d.heads_label),
      d.heads_sharded
        ? note(`Heads sharded across ${ranksWithHeads} ranks (tensor parallel): each head is computed by one rank.`)
        : note("Every rank computes every head (replicas): the mean over them is shown."),
    );
    const layers = [...new Set(d.heads.map((x) => x.layer))].sort((a, b) => a - b);
    const maxHead = Math.max(...d.heads.map((x) => x.head));
    if (!d.heads_complete) {
      const gaps = layers.flatMap((layer) => {
        const have = new Set(d.heads.filter((x) => x.layer === layer).map((x) => x.head));
        const missing = Array.from({ length: maxHead + 1 }, (_, i) => i).filter((i) => !have.has(i));
        return missing.length ? [`L${layer}: ${ranges(missing)}`] : [];
      });
      const what = gaps.length
        ? `missing ${gaps.join("; ")}`
        : `the layers do not all have heads 0-${d.head_count - 1}`;
      this.el.append(
        h(
          "div",
          { class: "warn", dataset: { testid: "heads-gaps" } },
          `Not every global head is covered (${what}): a rank's trace may be missing, or its scopes do not use global head indices.`,
        ),
      );
    }
    const byRanks = new Map<string, number[]>();
    for (const x of d.heads) {
      const rs = ranksOf(x);
      const key = rs.length ? rs.map((r) => `rank ${r}`).join(" + ") : "unknown rank";
      byRanks.set(key, [...(byRanks.get(key) ?? []), x.head]);
    }
    this.chartEl.style.height = `${Math.min(900, Math.max(200, layers.length * 30 + 110))}px`;
    append(
      this.el,
      this.chartEl,
      h(
        "div",
        "legend",
        d.heads.some((x) => !x.derived) ? h("span", "legend-item", h("span", "sw measured"), "measured (head scopes)") : null,
        d.heads.some((x) => x.derived) ? h("span", "legend-item", h("span", "sw derived"), "derived: split evenly from the layer") : null,
      ),
      d.heads.some((x) => x.derived) ? derivedNote("rank") : null,
      h(
        "p",
        { class: "hint", dataset: { testid: "heads-by-rank" } },
        `Global heads ${ranges(d.heads.map((x) => x.head))}: `,
        [...byRanks].map(([who, heads]) => `${who} \u2192 ${ranges(heads)}`).join(" \u00b7 "),
      ),
    );
    this.draw(d, layers, maxHead);
  }

  private draw(d: RankView, layers: number[], maxHead: number): void {
    if (!this.chart) this.chart = createChart(this.chartEl);
    // Under tensor parallelism a column is labelled with the rank that computes its head.
    const owner = new Map<number, number>();
    if (d.heads_sharded) {
      for (let head = 0; head <= maxHead; head++) {
        const who = new Set(d.heads.filter((x) => x.head === head).flatMap(ranksOf));
        if (who.size === 1) owner.set(head, [...who][0]!);
      }
    }
    const heads = d.heads;
    const cells: HeatCell[] = heads.map((x) => [x.head, layers.indexOf(x.layer), x.time_us, x.derived ? 1 : 0]);
    this.chart.chart.resize();
    this.chart.chart.setOption(
      heatmapOption({
        rows: layers.map((k) => `L${k}`),
        columns: Array.from({ length: maxHead + 1 }, (_, i) => (owner.has(i) ? `${i}\nr${owner.get(i)}` : String(i))),
        labelLines: owner.size ? 2 : 1,
        cells,
        format: fmtUs,
        tooltip: (i) => {
          const x = heads[i];
          if (!x) return "";
          const rs = ranksOf(x);
          const who = rs.length ? `rank${rs.length > 1 ? "s" : ""} ${rs.join(", ")}` : "unknown rank";
          return [
            `<b>Layer ${esc(x.layer)}, global head ${esc(x.head)}</b>`,
            `forward ${esc(d.clock === "device" ? "device" : "CPU")} time per step: <b>${esc(fmtUs(x.time_us))}</b>${x.replicas > 1 ? ` (mean of ${esc(x.replicas)})` : ""}`,
            `FLOPs: ${esc(fmtFlops(x.flops))}`,
            `computed by ${esc(who)} \u00b7 ${esc(x.replicas)} replica${x.replicas === 1 ? "" : "s"}`,
            x.derived ? "<i>derived: split evenly from the layer</i>" : "measured",
          ].join("<br>");
        },
      }),
      { notMerge: true },
    );
  }

  dispose(): void {
    this.chart?.dispose();
    this.chart = null;
  }
}
