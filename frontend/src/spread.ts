// How far a per-step figure's steps were apart (the summary's `spread`, docs/summary.md): its range
// in words, and the "noisy" mark every view puts next to a figure whose steps spread over 20 % of
// their median.

import { h } from "./dom";
import { fmtUs } from "./format";
import type { Spread } from "./types";

/** The figures a spread is computed for (schema.SPREAD_KEYS of a layer or phase): times. */
export const SPREAD_METRICS: readonly string[] = ["cpu_us", "device_us", "bwd_cpu_us", "bwd_device_us"];

/** "28.4–35.1 ms over 6 steps" (range) or "IQR 28.4–35.1 ms over 12 steps". */
export function spreadText(s: Spread, fmt: (v: number) => string = fmtUs): string {
  const what = s.kind === "iqr" ? "IQR " : "";
  return `${what}${fmt(s.lo)}\u2013${fmt(s.hi)} over ${s.steps} steps`;
}

/** The spread relative to the median, "24 %" (null when the median is 0). */
export function spreadShare(s: Spread): number | null {
  return s.median > 0 ? (s.hi - s.lo) / s.median : null;
}

/** A tooltip line: "steps 28.4–35.1 ms over 6 steps (21 % of the median: noisy)". */
export function spreadTitle(s: Spread | null | undefined, fmt: (v: number) => string = fmtUs): string {
  if (!s) return "one profiled step: no spread";
  const share = spreadShare(s);
  const rel = share === null ? "" : ` (${Math.round(share * 100)} % of the median${s.noisy ? ": noisy" : ""})`;
  return `steps ${spreadText(s, fmt)}${rel}`;
}

/** The visible mark of a noisy figure ("± noisy", or "±" in a table cell); null when not noisy. */
export function noisyMark(s: Spread | null | undefined, fmt: (v: number) => string = fmtUs, compact = false): HTMLElement | null {
  if (!s?.noisy) return null;
  return h(
    "span",
    { class: "noisy", title: `${spreadTitle(s, fmt)}. Profile more steps (or on a quieter machine) before comparing by it.`, dataset: { testid: "noisy" } },
    compact ? "\u00b1" : "\u00b1 noisy",
  );
}
