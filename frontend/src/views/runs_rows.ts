// The runs list's columns and rows: each column's header and sort value, and a run's row
// (metadata, figures from runs_figures.ts, load status). Rows sort within their group; the first
// click on a figure's header puts the largest first (the slowest run), on a text column A to Z.

import { h } from "../dom";
import { fmtWhen } from "../format";
import type { RunEntry, RunInfo } from "../types";
import { infoText, infoTitle } from "./common";
import { type Column, compareValues, FIGURE_COLUMNS, figureCells } from "./runs_figures";

/** What a row needs of a run beyond its entry: its metadata strings, read once per listing. */
export interface RowItem {
  r: RunEntry;
  user: string;
  model: string;
  impl: string;
}

export interface Sort {
  key: string;
  desc: boolean;
}

/** Every column after the checkbox, in order; null `value`: not sortable. */
export const COLUMNS: Column[] = [
  { key: "run", label: "run", title: "Run name, in natural order (seq512 before seq1024)", value: () => null },
  { key: "model", label: "model", title: "Model", value: (r) => r.info?.model ?? null },
  { key: "impl", label: "impl", title: "Attention implementation", value: (r) => r.info?.impl ?? null },
  { key: "seq", label: "seq", title: "Sequence length", num: true, value: (r) => r.info?.seq ?? null },
  { key: "dtype", label: "dtype", title: "Data type", value: (r) => r.info?.dtype ?? null },
  { key: "device", label: "device", title: "Device", value: (r) => r.info?.device ?? null },
  ...FIGURE_COLUMNS,
  { key: "who", label: "who", title: "User and host", value: (r) => r.info?.user ?? null },
  { key: "when", label: "when", title: "Started at", value: (r) => r.info?.started_at ?? null },
  { key: "status", label: "status", title: "Load status", value: (r) => r.status },
];
/** Cells a full-width row spans: the checkbox and every column. */
export const SPAN = COLUMNS.length + 1;

/** `items` (in natural order, grouped) sorted within each group by the column `sort` names;
 * stable: ties keep the natural order of names. "run" is that order, or its reverse. */
export function sortItems<T extends RowItem>(items: T[], sort: Sort | null): T[] {
  const column = sort ? COLUMNS.find((c) => c.key === sort.key) : undefined;
  if (!sort || !column?.value) return items;
  const value = column.value;
  const groupOf = new Map<string, number>();
  for (const it of items) if (!groupOf.has(it.r.group)) groupOf.set(it.r.group, groupOf.size);
  const keyed = items.map((it, i) => ({ it, i, g: groupOf.get(it.r.group)!, v: sort.key === "run" ? i : value(it.r) }));
  keyed.sort((a, b) => a.g - b.g || compareValues(a.v, b.v, sort.desc) || a.i - b.i);
  return keyed.map((k) => k.it);
}

/** The sort after a click on `key`'s header: the other direction, or a new column's first. */
export function nextSort(sort: Sort | null, key: string): Sort {
  if (sort?.key === key) return { key, desc: !sort.desc };
  return { key, desc: !!COLUMNS.find((c) => c.key === key)?.num };
}

/** A column's header: a keyboard-operable sort control, with aria-sort. */
export function headerCell(c: Column, sort: Sort | null, onSort: (key: string) => void): HTMLElement {
  if (!c.value) return h("th", { title: c.title, dataset: { col: c.key } }, c.label);
  const active = sort?.key === c.key;
  const desc = active && sort.desc;
  return h(
    "th",
    {
      class: `sortable${active ? " sorted" : ""}${c.num ? " num" : ""}`,
      title: `${c.title} \u2014 click to sort`,
      attrs: { "aria-sort": active ? (desc ? "descending" : "ascending") : "none", tabindex: 0 },
      dataset: { col: c.key },
      on: {
        click: () => onSort(c.key),
        keydown: (ev) => {
          if (ev.key === "Enter" || ev.key === " ") {
            ev.preventDefault();
            onSort(c.key);
          }
        },
      },
    },
    c.label,
    active ? (desc ? " \u25bc" : " \u25b2") : "",
  );
}

/** "ranks · tp" for a runner's multi-rank run, "ranks" for another torch.distributed one. */
function parallelOf(info: RunInfo | null): string | null {
  const parallel = info?.parallel;
  if ((info?.world_size ?? 0) < 2) return null;
  return parallel && parallel !== "none" ? `ranks \u00b7 ${parallel}` : "ranks";
}

/** A cell of metadata text, cut by CSS where it is wider than its column (table.runs td.clip),
 * the whole text on hover, and where the server cut it, how long it is in the metadata. */
function clipCell(info: RunInfo | null, keys: (keyof RunInfo)[], text: string, shown: string = text): HTMLElement {
  return h("td", { class: "clip", title: text ? infoTitle(info, keys, text) : undefined }, shown);
}

const RUNNING_TITLE = "In progress: the runner is still writing this run (its metadata says \u201crunning\u201d)";

export function rows(it: RowItem, isPicked: boolean): HTMLElement[] {
  const r = it.r;
  const m = r.info;
  const group = r.group;
  const name = group && r.run.startsWith(group + "/") ? r.run.slice(group.length + 1) : r.run;
  const host = m?.host ?? "";
  const who = it.user && host ? `${it.user}@${host}` : it.user || host;
  const started = m?.started_at ?? "";
  const runnerStatus = m?.status ?? "";
  const box = h("input", { attrs: { type: "checkbox", "aria-label": `Pick ${r.run} for comparing` } });
  box.checked = isPicked;
  const row = h(
    "tr",
    {
      class: r.status === "running" ? "run-row in-progress" : "run-row",
      dataset: { run: r.run },
      attrs: { tabindex: 0, role: "button", "aria-label": `Open run ${r.run}` },
    },
    h("td", "pick", box),
    h(
      "td",
      { class: "run-name", title: r.run },
      name,
      // Several workers: the ranks of a torch.distributed job (their Ranks view is one click in).
      r.workers.length > 1
        ? h("span", { class: "badge ranks", title: "one trace per worker: open the run for its Ranks view" },
            `${r.workers.length} ${parallelOf(m) ?? "workers"}`)
        : null,
    ),
    clipCell(m, ["model"], it.model),
    clipCell(m, ["impl"], it.impl),
    h("td", "num", infoText(m?.seq)),
    clipCell(m, ["dtype"], m?.dtype ?? ""),
    // The device's name on hover (a GPU model, a CPU's), else the device itself.
    clipCell(m, ["device_name", "device"], m?.device_name || m?.device || "", m?.device ?? ""),
    ...figureCells(r),
    clipCell(m, ["user", "host"], who),
    clipCell(m, ["started_at"], started, started ? fmtWhen(started) : ""),
    h(
      "td",
      null,
      h("span", { class: `badge status-${r.status}`, title: r.status === "running" ? RUNNING_TITLE : undefined }, r.status),
      // The runner's own status, unless it says the same (a run in progress is "running" twice).
      runnerStatus && runnerStatus !== "ok" && runnerStatus !== r.status
        ? h("span", { class: `badge runner-${runnerStatus}`, title: infoTitle(m, ["status"], runnerStatus) }, runnerStatus)
        : null,
    ),
  );
  const out: HTMLElement[] = [row];
  const messages: string[] = [];
  if (r.status === "error" && r.error) messages.push(r.error);
  const runnerError = m?.error ?? "";
  if (runnerError && runnerStatus !== "ok") messages.push(`runner: ${runnerError}`);
  if (messages.length) {
    out.push(h("tr", "run-error", h("td", { attrs: { colspan: SPAN } }, messages.join(" \u2014 "))));
  }
  return out;
}
