// The ranks view's table: one row per rank, the straggler metric (attention in the rank's fastest
// step) first, then means per step, and the "All ranks" rows (mean, median, max) as the server
// computed them (RankView.columns and all_ranks: one median, computed once, in Python).

import { h } from "../dom";
import { fmtCount, fmtUs } from "../format";
import { noisyMark } from "../spread";
import type { Actions } from "../state";
import type { RankRow, RanksColumn, RankView } from "../types";
import { ranges } from "./ranks_heads";

/** A RankRow's value for a RankView column key. */
export function columnValue(r: RankRow, column: string): number {
  switch (column) {
    case "attention_best":
      return r.attention_best_us;
    case "step":
      return r.step_us;
    case "attention":
      return r.attention_us;
    case "collectives":
      return r.collective_us;
    default:
      return r.other_us;
  }
}

/** The aggregate of the straggler metric over ranks: its median is the view's one median. */
export function metricColumn(d: RankView): RanksColumn | undefined {
  return d.columns.find((c) => c.column === d.metric);
}

const COLUMN_HEADS: Record<string, { label: string; title: (d: RankView) => string }> = {
  attention_best: { label: "attention, fastest step", title: (d) => `${d.metric_label}: what stragglers are judged on` },
  step: { label: "step", title: (d) => `step time, ${d.means_label}` },
  attention: { label: "attention", title: (d) => `attention time, ${d.means_label}` },
  collectives: { label: "collectives", title: (d) => `time in collectives (all_reduce, all_gather, ...), ${d.means_label}` },
  other: { label: "other", title: (d) => `step time that is neither attention nor collectives, ${d.means_label}` },
};

function layerTime(r: RankRow, layer: number): number | null {
  return r.layers.find((l) => l.layer === layer)?.time_us ?? null;
}

/** The sort value of a row for a column key; rows without one sort last. */
function sortValue(r: RankRow, key: string): number | string {
  if (key === "rank") return r.rank ?? Number.MAX_SAFE_INTEGER;
  if (key === "worker") return r.worker;
  if (key === "heads") return r.heads[0] ?? Number.MAX_SAFE_INTEGER;
  if (key.startsWith("L")) return layerTime(r, Number(key.slice(1))) ?? -1;
  return key in COLUMN_HEADS ? columnValue(r, key) : 0;
}

/** What a column's and a layer's "All ranks" rows share. */
type Aggregate = Pick<RanksColumn, "mean_us" | "median_us" | "max_us">;

type Cell = Partial<{ cls: string; title: string; style: Record<string, string> }>;

const num = (v: number | null, col: string, extra: Cell = {}) =>
  h("td", { class: `num${extra.cls ?? ""}`, title: extra.title ?? (v === null ? "" : `${v} \u00b5s`), dataset: { col }, style: extra.style }, fmtUs(v));

const bar = (v: number, max: number) => {
  const p = max > 0 ? Math.max(0, Math.min(100, (v / max) * 100)).toFixed(1) : "0";
  return { background: `linear-gradient(to right, rgba(251,140,0,.28) ${p}%, transparent ${p}%)` };
};

/** The table of `d`'s ranks sorted by `sort`; a header click asks `actions` for a new sort. */
export function ranksTable(d: RankView, sort: { key: string; desc: boolean }, actions: Actions): HTMLElement {
  const layers = d.all_ranks.map((a) => a.layer);
  const columns = d.columns.map((c) => c.column);
  const slow = new Set(d.stragglers.map((x) => `${x.worker}|${x.metric}`));
  const header = (key: string, label: string, title: string, numeric = true) => {
    const active = sort.key === key;
    return h(
      "th",
      {
        class: `sortable${active ? " sorted" : ""}${numeric ? " num" : ""}${key === d.metric ? " judged" : ""}`,
        title: `${title} \u2014 click to sort`,
        attrs: { "aria-sort": active ? (sort.desc ? "descending" : "ascending") : "none", tabindex: 0 },
        dataset: { col: key },
        on: {
          click: () => actions.patch({ ranksSort: { key, desc: active ? !sort.desc : numeric } }),
          keydown: (ev) => {
            if (ev.key === "Enter") (ev.target as HTMLElement).click();
          },
        },
      },
      label,
      active ? (sort.desc ? " \u25bc" : " \u25b2") : "",
    );
  };
  const maxOf = (values: number[]) => Math.max(0, ...values);
  const maxColumn = new Map(columns.map((c) => [c, maxOf(d.ranks.map((r) => columnValue(r, c)))]));
  const maxLayer = maxOf(d.ranks.flatMap((r) => r.layers.map((l) => l.time_us)));
  const barred = new Set([d.metric, "attention"]);

  const rows = [...d.ranks].sort((a, b) => {
    const x = sortValue(a, sort.key);
    const y = sortValue(b, sort.key);
    const c = typeof x === "string" || typeof y === "string" ? String(x).localeCompare(String(y)) : x - y;
    return (sort.desc ? -c : c) || (a.rank ?? 0) - (b.rank ?? 0) || a.worker.localeCompare(b.worker);
  });
  const cellOf = (r: RankRow, c: string) => {
    const v = columnValue(r, c);
    const extra: Cell = { style: barred.has(c) ? bar(v, maxColumn.get(c) ?? 0) : undefined };
    if (c === d.metric) {
      extra.cls = slow.has(`${r.worker}|attention`) ? " slow" : "";
      extra.title = `${fmtUs(v)} in the fastest step; ${fmtUs(r.attention_us)} per step on average`;
    } else if (c === "collectives") {
      extra.title = r.collectives.map((x) => `${x.name}: ${fmtCount(x.calls)} calls`).join("\n") || "no collectives";
    }
    return num(v, c, extra);
  };
  const body = h(
    "tbody",
    null,
    ...rows.map((r) =>
      h(
        "tr",
        { class: r.straggler ? "straggler-row" : "", dataset: { worker: r.worker, rank: r.rank === null ? "" : String(r.rank) } },
        h(
          "th",
          { class: "row-head", dataset: { col: "rank" } },
          r.rank === null ? "\u2014" : String(r.rank),
          r.straggler ? h("span", { class: "badge straggler", title: "slower than the median over ranks by more than the margin" }, "straggler") : null,
          noisyMark(r.attention_spread, fmtUs, true),
        ),
        h(
          "td",
          { dataset: { col: "worker" }, title: r.files.join("\n") },
          h("button", { class: "link-button", attrs: { type: "button" }, on: { click: () => actions.openWorker(r.worker) } }, r.worker),
        ),
        ...columns.map((c) => cellOf(r, c)),
        ...layers.map((k) => {
          const l = r.layers.find((x) => x.layer === k);
          return num(l?.time_us ?? null, `L${k}`, {
            cls: slow.has(`${r.worker}|layer ${k}`) ? " slow" : "",
            title: l ? `L${k}: ${fmtUs(l.forward_us)} forward${l.backward_us > 0 ? ` + ${fmtUs(l.backward_us)} backward` : ""}, mean per step` : "no such layer",
            style: l ? bar(l.time_us, maxLayer) : {},
          });
        }),
        h("td", { class: "num", dataset: { col: "heads" } }, r.heads.length ? ranges(r.heads) : "\u2014"),
      ),
    ),
  );

  const aggs = [
    { key: "mean", title: "mean over ranks", pick: (c: Aggregate) => c.mean_us },
    { key: "median", title: `median ${d.median_label}`, pick: (c: Aggregate) => c.median_us },
    { key: "max", title: "the slowest rank", pick: (c: Aggregate) => c.max_us },
  ] as const;
  const foot = h(
    "tfoot",
    null,
    ...aggs.map((agg) =>
      h(
        "tr",
        { class: "all-ranks", dataset: { agg: agg.key } },
        h("th", { class: "row-head", attrs: { colspan: 2 }, title: agg.title }, "All ranks ", h("span", "muted", agg.key)),
        ...d.columns.map((c) => aggCell(agg.pick(c), c.column, agg.key === "max" ? c.max_rank : null)),
        ...d.all_ranks.map((a) => aggCell(agg.pick(a), `L${a.layer}`, agg.key === "max" ? a.max_rank : null)),
        h("td", { class: "num", dataset: { col: "heads" } }, agg.key === "mean" ? ranges(d.ranks.flatMap((r) => r.heads)) || "\u2014" : ""),
      ),
    ),
  );
  const groups = h(
    "tr",
    "col-groups",
    h("th", { attrs: { colspan: 2 } }),
    h("th", { class: "group judged", title: d.metric_label, dataset: { testid: "ranks-table-metric" } }, "straggler metric"),
    h("th", { class: "group", title: d.means_label, attrs: { colspan: columns.length - 1 + layers.length } }, "means per profiled step"),
    h("th"),
  );
  const head = h(
    "tr",
    null,
    header("rank", "rank", "rank", false),
    header("worker", "worker", "worker (trace file name)", false),
    ...columns.map((c) => header(c, COLUMN_HEADS[c]?.label ?? c, COLUMN_HEADS[c]?.title(d) ?? c)),
    ...layers.map((k) => header(`L${k}`, `L${k}`, `layer ${k}: attention time, ${d.means_label}`)),
    header("heads", "heads", "global heads this rank computed", false),
  );
  return h("table", "grid ranks-table", h("thead", null, groups, head), body, foot);
}

function aggCell(v: number, col: string, maxRank: number | null): HTMLElement {
  const td = num(v, col, maxRank === null ? {} : { title: `slowest: rank ${maxRank}` });
  if (maxRank !== null) td.append(h("span", "muted small max-rank", ` r${maxRank}`));
  return td;
}
