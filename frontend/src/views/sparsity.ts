// Masks in the tab: the run's mask and density in the overview, the layer table's "sparsity
// saved" column, and local/global layer labels for models that mix them (analysis/measures/sparsity.py).

import { h } from "../dom";
import { fmtFlops, fmtUs } from "../format";
import type { LayerMask, LayerStats, WorkerSummary } from "../types";

/** Whether any layer carries a mask (a run with --mask, or a flex run). */
export function hasMasks(ws: WorkerSummary): boolean {
  return ws.layers.some((l) => l.mask !== null && l.mask !== undefined);
}

/** Whether the run mixes local (windowed) and global layers, as Gemma-style models do. */
function mixesLocal(layers: LayerStats[]): boolean {
  return layers.some((l) => l.mask?.local);
}

/** "local" or "global" for the layers of a model that mixes them; "" otherwise. */
export function layerKind(l: LayerStats, layers: LayerStats[]): string {
  if (!l.mask || !mixesLocal(layers)) return "";
  return l.mask.local ? "local" : "global";
}

/** The chart's category for a layer: "L0", or "L0 local" / "L1 global". */
export function layerCategory(l: LayerStats, layers: LayerStats[]): string {
  const kind = layerKind(l, layers);
  return kind ? `L${l.layer} ${kind}` : `L${l.layer}`;
}

export function kindBadge(l: LayerStats, layers: LayerStats[]): HTMLElement | null {
  const kind = layerKind(l, layers);
  if (!kind || !l.mask) return null;
  return h("span", { class: `badge layer-${kind}`, title: `mask ${l.mask.spec}` }, kind);
}

/** What the sparsity saved per step: the core's dense work at its own FLOP rate, minus its time. */
export function savedUs(m: LayerMask): number {
  return m.dense_work ? 0 : Math.max(0, m.dense_equiv_us - m.core_us);
}

const SAVED_TITLE =
  "sparsity saved: the attention core's time for the dense work at the layer's own FLOP rate, minus its time " +
  "(per step). Dense work (every score computed, then masked) saves nothing.";

export function savedHeader(): HTMLElement {
  return h("th", { attrs: { rowspan: 2 }, title: SAVED_TITLE }, "sparsity saved");
}

export function savedCell(l: LayerStats): HTMLElement {
  const m = l.mask;
  if (!m) return h("td", "num empty", "");
  const detail =
    `mask ${m.spec}: keeps ${(m.kept * 100).toFixed(1)}% of scores; core FLOPs per call ${fmtFlops(m.mask_flops)} ` +
    `asked, ${fmtFlops(m.work_flops)} done, ${fmtFlops(m.dense_flops)} dense`;
  return m.dense_work
    ? h("td", { class: "num dense-work", title: `${detail}. Every score was computed, then masked.` }, "dense work")
    : h("td", { class: "num saved", title: `${detail}. ${fmtUs(m.core_us)} per step against ${fmtUs(m.dense_equiv_us)} dense.` },
        fmtUs(savedUs(m)));
}

/** The overview's mask stat: each mask with its kept shares, layers named where masks differ. */
export function maskStat(ws: WorkerSummary): HTMLElement | null {
  const groups = new Map<string, { mask: LayerMask; layers: number[] }>();
  for (const l of ws.layers) {
    if (!l.mask) continue;
    const g = groups.get(l.mask.spec) ?? { mask: l.mask, layers: [] };
    g.layers.push(l.layer);
    groups.set(l.mask.spec, g);
  }
  if (!groups.size) return null;
  const mixed = groups.size > 1;
  const parts = [...groups.values()].map(({ mask, layers }) => {
    const where = mixed ? `${mask.local ? "local" : "global"} layers (${layers.map((x) => `L${x}`).join(", ")}) ` : "";
    const blocks = mask.blocks === null ? "" : `, ${(mask.blocks * 100).toFixed(1)}% of 128\u00d7128 blocks`;
    return `${where}${mask.spec}: keeps ${(mask.kept * 100).toFixed(1)}% of scores${blocks}`;
  });
  const saved = ws.layers.reduce((acc, l) => acc + (l.mask ? savedUs(l.mask) : 0), 0);
  const dense = ws.layers.every((l) => !l.mask || l.mask.dense_work);
  return h(
    "span",
    { class: "stat", dataset: { testid: "mask" }, title: SAVED_TITLE },
    h("span", "stat-label", "mask"),
    h("b", null, parts.join("; ")),
    h("span", "muted small", dense ? " \u2014 dense work: every score computed, then masked" : ` \u2014 sparsity saved ${fmtUs(saved)} per step`),
  );
}
