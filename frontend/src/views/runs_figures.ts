// The runs list's figure columns (attention per step, its share of the step, peak, backend,
// steps: RunEntry.figures, docs/http_api.md) and the list's sortable columns. A run's figures
// arrive once the server has parsed it, in the background: "…" while it is being parsed, "—"
// when there are none (the reason in the cell's tooltip).

import { h } from "../dom";
import { fmtBytes, fmtCount, fmtMs, fmtShare, fmtUs } from "../format";
import { noisyMark } from "../spread";
import { PARTIAL_DEVICE } from "../types";
import type { RunEntry, RunFigures } from "../types";
import { MEMORY_NOT_RECORDED, partialMark } from "./common";

export const PARSING = "\u2026";
export const NONE = "\u2014";

export type SortValue = number | string | null;

/** A column of the runs list: its header, and how rows sort by it (null: no sort). */
export interface Column {
  key: string;
  label: string;
  title: string;
  num?: boolean;
  /** A row's value (null sorts last, whatever the direction). */
  value: ((r: RunEntry) => SortValue) | null;
}

const fig = (pick: (f: RunFigures) => SortValue) => (r: RunEntry) => (r.figures ? pick(r.figures) : null);

export const FIGURE_COLUMNS: Column[] = [
  {
    key: "attention",
    label: "attention / step (ms)",
    title:
      "Attention time per profiled step (forward + backward), in ms, on the clock named beside it: device time where attention launched kernels, else CPU time; for a generation run, per decode step (one token per sequence), its prefill in the tooltip. Several ranks: the rank at the lower median by attention time (of two, the faster), as Compare, Strategies, the gate and the Ranks view's median row show",
    num: true,
    value: fig((f) => f.attention_us),
  },
  {
    key: "share",
    label: "share",
    title: "Attention's share of the step time, on the same clock",
    num: true,
    value: fig((f) => f.attention_share),
  },
  {
    key: "peak",
    label: "peak",
    title: "Peak: the largest rise of allocated memory over a layer's start, across layers (Compare's \u201cpeak\u201d)",
    num: true,
    value: fig((f) => (f.memory_recorded ? f.peak_bytes : null)),
  },
  { key: "backend", label: "backend", title: "The SDPA backend that really ran", value: fig((f) => f.backend) },
  { key: "steps", label: "steps", title: "Profiled steps", num: true, value: fig((f) => f.steps) },
];

/** Why a run shows no figures: being parsed, or not, and why not. */
function absent(r: RunEntry): { text: string; title: string } {
  if (r.parsing) return { text: PARSING, title: "Parsing this run's traces in the background" };
  if (r.figures_error) return { text: NONE, title: `No figures: ${r.figures_error}` };
  if (r.status === "error") return { text: NONE, title: `No figures: ${r.error ?? "no trace could be read"}` };
  return { text: NONE, title: "Not parsed yet: open the run to read it" };
}

/** The spread of the run's steps, and where the figures come from, in words. */
function attentionTitle(f: RunFigures): string {
  const clock = f.clock === "device" ? "device" : "CPU";
  const decode = f.per === "decode";
  const what = decode ? "decode step" : "step";
  const n = decode ? (f.decode_steps ?? 0) : f.steps;
  const parts = [
    `${fmtUs(f.attention_us)} of ${clock} time per ${what}${decode ? " (one token per sequence)" : ""}, mean of ${n} ${what}${n === 1 ? "" : "s"}${decode ? ` of the ${f.steps} profiled` : ""}`,
  ];
  if (f.attention_min_us !== null && f.attention_max_us !== null && n > 1) {
    parts.push(`fastest ${decode ? "decode step" : "step"} ${fmtUs(f.attention_min_us)}, slowest ${fmtUs(f.attention_max_us)}`);
  }
  if (decode && f.prefill_us !== null) parts.push(`the prefill: ${fmtUs(f.prefill_us)}`);
  if (f.device_partial) parts.push(`CPU time: ${PARTIAL_DEVICE}`);
  if (f.workers > 1) parts.push(`from ${f.worker}, the median of ${f.workers} traces`);
  if (f.unreadable) parts.push(`${f.unreadable} trace${f.unreadable === 1 ? "" : "s"} could not be read`);
  return parts.join("; ");
}

/** "core" where some of the trace's layers were found by their core alone: their figures are the core's. */
function coreMark(f: RunFigures): HTMLElement | null {
  if (!f.core_only) return null;
  const title = `${f.core_only} layer${f.core_only === 1 ? "" : "s"} of ${f.worker} found by the attention core alone: the projections around the core could not be found, so ${f.core_only === 1 ? "its" : "their"} figures cover the core only`;
  return h("span", { class: "badge core-only", title, dataset: { testid: "core-only" } }, "core");
}

/** The run's figure cells, in FIGURE_COLUMNS' order. */
export function figureCells(r: RunEntry): HTMLElement[] {
  const f = r.figures;
  if (!f) {
    const { text, title } = absent(r);
    return FIGURE_COLUMNS.map((c) => h("td", { class: c.num ? "num fig absent" : "fig absent", title, dataset: { col: c.key } }, text));
  }
  const spread =
    f.attention_min_us !== null && f.attention_max_us !== null && (f.per === "decode" ? (f.decode_steps ?? 0) : f.steps) > 1
      ? `${fmtMs(f.attention_min_us)}\u2013${fmtMs(f.attention_max_us)}`
      : null;
  return [
    h(
      "td",
      { class: "num fig", title: attentionTitle(f), dataset: { col: "attention" } },
      h("span", "fig-value", fmtMs(f.attention_us)),
      h("span", "clock", (f.clock === "device" ? "device" : "cpu") + (f.per === "decode" ? " \u00b7 decode" : "")),
      spread
        ? h("span", { class: "spread", attrs: { "aria-label": `${f.per === "decode" ? "decode steps" : "steps"} from ${spread} ms` } }, spread)
        : null,
      noisyMark(f.attention_spread, fmtUs, true),
      coreMark(f),
      f.device_partial ? partialMark() : null,
    ),
    h("td", { class: "num fig", dataset: { col: "share" } }, fmtShare(f.attention_share), coreMark(f)),
    f.memory_recorded
      ? h("td", { class: "num fig", title: `${f.peak_bytes} bytes`, dataset: { col: "peak" } }, fmtBytes(f.peak_bytes))
      : h("td", { class: "num fig muted", title: MEMORY_NOT_RECORDED, dataset: { col: "peak" } }, NONE),
    h("td", { class: "fig", dataset: { col: "backend" } }, f.backend),
    h("td", { class: "num fig", dataset: { col: "steps" } }, fmtCount(f.steps)),
  ];
}

/** Ascending by `value`, nulls last in both directions; ties keep their order (a stable sort). */
export function compareValues(a: SortValue, b: SortValue, desc: boolean): number {
  if (a === null || b === null) return a === null ? (b === null ? 0 : 1) : -1;
  const c = typeof a === "number" && typeof b === "number" ? a - b : String(a).localeCompare(String(b));
  return desc ? -c : c;
}
