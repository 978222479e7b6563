// Colours for runs and series in the compare view (not phases: those are in ../metrics).

import type { CompareRun } from "../types";

const PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"];
export const color = (i: number) => PALETTE[i % PALETTE.length]!;

/** A scaling series' identity in a compare row: its implementation and like-for-like group but the
 * sequence length (compare.py's group label without its "seq N"). */
export function seriesKey(r: { impl: string | null; group: string }): string {
  return `${r.impl ?? ""}|${r.group.replace(/(^|, )seq [^,]*/, "")}`;
}

/** ``hex`` lightened (t > 0) or darkened (t < 0) towards white or black by |t|. */
function shade(hex: string, t: number): string {
  const n = parseInt(hex.slice(1), 16);
  const mix = (c: number) => Math.round(t >= 0 ? c + (255 - c) * t : c * (1 + t));
  const [r, g, b] = [(n >> 16) & 255, (n >> 8) & 255, n & 255].map(mix) as [number, number, number];
  return `#${((1 << 24) | (r << 16) | (g << 8) | b).toString(16).slice(1)}`;
}

/** One colour per run, the same in the table, the phase chart and the scaling charts: a hue per
 * series (runs that differ only in sequence length), a shade of it per run, darker as seq grows. */
export function runColors(runs: CompareRun[]): { run: Map<string, string>; series: Map<string, string> } {
  const series = new Map<string, string>();
  const members = new Map<string, CompareRun[]>();
  for (const r of runs) {
    const k = seriesKey(r);
    if (!series.has(k)) series.set(k, color(series.size));
    members.set(k, [...(members.get(k) ?? []), r]);
  }
  const run = new Map<string, string>();
  for (const [k, rs] of members) {
    const sorted = [...rs].sort((a, b) => (a.seq ?? 0) - (b.seq ?? 0) || (a.run < b.run ? -1 : 1));
    sorted.forEach((r, i) => {
      const t = sorted.length > 1 ? 0.35 - (0.6 * i) / (sorted.length - 1) : 0;
      run.set(r.run, shade(series.get(k)!, t));
    });
  }
  return { run, series };
}
