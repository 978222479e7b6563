// The runs list: grouped by run path, filterable (text, user, model, implementation), with
// metadata, each parsed run's figures (runs_figures.ts), and load status, under a warning while
// the server cannot list the logdir. Sortable by any column, within each group. A logdir may
// hold thousands of runs, so the list is indexed once per runs response, a filter change only
// re-runs a scan of plain strings, and at most PAGE rows are built at a time ("show more" adds
// the next page): typing stays fast whatever the run count.

import { append, clear, h, replace, select } from "../dom";
import type { Actions, State } from "../state";
import type { RunsResponse } from "../types";
import { errorBox, loadingBox } from "./common";
import { COLUMNS, headerCell, nextSort, type RowItem, rows, SPAN, type Sort, sortItems } from "./runs_rows";

/** Rows built at once; measured in bench/many_runs.py (README "Many runs"). */
const PAGE = 100;

type FacetKey = "user" | "model" | "impl";
const FACETS: { key: FacetKey; label: string; all: string }[] = [
  { key: "user", label: "Filter by user", all: "all users" },
  { key: "model", label: "Filter by model", all: "all models" },
  { key: "impl", label: "Filter by implementation", all: "all implementations" },
];
/** The option for runs whose metadata lacks the field. */
const NONE = "\u0000none";

type Facets = Record<FacetKey, string | null>; // null: any value

/** What filtering and drawing need of a run, computed once per runs response. */
interface Item extends RowItem {
  /** Lower-cased run path, user, model and implementation, for the text filter. */
  hay: string[];
  user: string;
  model: string;
  impl: string;
}

interface Index {
  items: Item[]; // sorted by group, then run, in natural order
  values: Record<FacetKey, Map<string, number>>; // value -> runs
}

function buildIndex(data: RunsResponse): Index {
  const items = data.runs.map((r): Item => {
    const user = r.info?.user ?? "";
    const model = r.info?.model ?? "";
    const impl = r.info?.impl ?? "";
    return { r, user, model, impl, hay: [r.run, user, model, impl].map((x) => x.toLowerCase()) };
  });
  const keys = new Map(items.map((it) => [it, [chunks(it.r.group), chunks(it.r.run)] as const]));
  items.sort((a, b) => {
    const [ga, ra] = keys.get(a)!;
    const [gb, rb] = keys.get(b)!;
    return compareChunks(ga, gb) || compareChunks(ra, rb);
  });
  const values: Index["values"] = { user: new Map(), model: new Map(), impl: new Map() };
  for (const it of items) {
    for (const f of FACETS) {
      const v = it[f.key] || NONE;
      values[f.key].set(v, (values[f.key].get(v) ?? 0) + 1);
    }
  }
  return { items, values };
}

/** A name split into runs of digits (as numbers) and of other characters. */
function chunks(name: string): (string | number)[] {
  return (name.match(/\d+|\D+/g) ?? []).map((c) => (c.charCodeAt(0) >= 48 && c.charCodeAt(0) <= 57 ? Number(c) : c));
}

/** Natural order: "seq512" before "seq1024"; other chunks by code point, a number before text. */
function compareChunks(a: (string | number)[], b: (string | number)[]): number {
  for (let i = 0; i < a.length && i < b.length; i++) {
    const x = a[i]!;
    const y = b[i]!;
    if (x === y) continue;
    if (typeof x === "number" && typeof y === "number") return x < y ? -1 : 1;
    if (typeof x === "number") return -1;
    if (typeof y === "number") return 1;
    return x < y ? -1 : 1;
  }
  return a.length - b.length;
}

function matches(it: Item, text: string, facets: Facets): boolean {
  for (const f of FACETS) {
    const want = facets[f.key];
    if (want !== null && (it[f.key] || NONE) !== want) return false;
  }
  return !text || it.hay.some((s) => s.includes(text));
}

export class RunsView {
  readonly el: HTMLElement;
  private readonly body: HTMLElement;
  private readonly count: HTMLElement;
  private readonly input: HTMLInputElement;
  private readonly facetBar: HTMLElement;
  private readonly compareBar: HTMLElement;
  private facets: Facets = { user: null, model: null, impl: null };
  /** The column the rows are sorted by within their group (null: by name), and its direction. */
  private sort: Sort = { key: "run", desc: false };
  private facetSignature = "";
  private limit = PAGE;
  private index: { data: RunsResponse; index: Index } | null = null;
  private state: State | null = null;
  private last: { runs: State["runs"] | null; filter: string; picked: string[] | null; baseline: string | null } = {
    runs: null,
    filter: "",
    picked: null,
    baseline: null,
  };

  constructor(private readonly actions: Actions) {
    this.input = h("input", {
      class: "filter",
      attrs: { type: "search", placeholder: "Filter: run, user, model, implementation", "aria-label": "Filter runs" },
    });
    this.input.addEventListener("input", () => {
      this.limit = PAGE;
      actions.setFilter(this.input.value);
    });
    this.count = h("span", { class: "muted", attrs: { "data-testid": "runs-count" } });
    this.facetBar = h("span", "facets");
    this.body = h("div");
    this.compareBar = h("div", "toolbar compare-bar");
    this.el = h(
      "section",
      "runs-page",
      h("div", "toolbar", h("h2", null, "Runs"), this.input, this.facetBar, this.count),
      this.compareBar,
      this.body,
    );
  }

  update(s: State): void {
    const l = this.last;
    if (sameRuns(l.runs, s.runs) && l.filter === s.filter && l.picked === s.picked && l.baseline === s.baseline) return;
    this.last = { runs: s.runs, filter: s.filter, picked: s.picked, baseline: s.baseline };
    this.state = s;
    this.renderCompareBar(s);
    if (this.input.value !== s.filter) this.input.value = s.filter;
    this.render();
  }

  private indexFor(data: RunsResponse): Index {
    if (this.index?.data !== data) {
      this.index = { data, index: buildIndex(data) };
      this.renderFacets(this.index.index);
    }
    return this.index.index;
  }

  /** The list from the last state and the view's own filters. */
  private render(): void {
    const s = this.state;
    if (!s) return;
    clear(this.body);
    const data = s.runs.data;
    if (s.runs.status === "error") this.body.appendChild(errorBox("Could not list runs:", s.runs.error ?? ""));
    if (data?.listing_error) this.body.appendChild(listingWarning(data.listing_error, data.runs.length > 0));
    this.facetBar.hidden = !data?.runs.length;
    if (!data) {
      if (s.runs.status !== "error") this.body.appendChild(loadingBox("runs"));
      this.count.textContent = "";
      return;
    }
    if (data.runs.length === 0) {
      this.count.textContent = "";
      if (!data.listing_error) this.body.appendChild(emptyState(data.logdir)); // unknown, not empty
      return;
    }
    const index = this.indexFor(data);
    const text = s.filter.trim().toLowerCase();
    const shown = sortItems(index.items.filter((it) => matches(it, text, this.facets)), this.sort);
    const total = index.items.length;
    this.count.textContent = shown.length === total ? `${total} runs` : `${shown.length} of ${total} runs`;
    if (shown.length === 0) {
      const what = [s.filter.trim() ? `\u201c${s.filter}\u201d` : "", ...this.facetWords()].filter(Boolean);
      this.body.appendChild(h("p", "muted", `No run matches ${what.join(", ")}.`));
      return;
    }
    // Polling rebuilds the table while figures arrive: keep the keyboard focus where it was.
    const focused = document.activeElement instanceof HTMLElement ? document.activeElement : null;
    const focusRun = focused?.closest<HTMLElement>("tr.run-row")?.dataset["run"];
    const focusCol = focused?.closest<HTMLElement>("th[data-col]")?.dataset["col"];
    const onBox = focused instanceof HTMLInputElement;
    const table = this.table(shown, new Set(s.picked));
    this.body.appendChild(table);
    if (shown.length > this.limit) this.body.appendChild(this.more(shown.length));
    if (focusRun !== undefined) {
      const row = [...table.querySelectorAll<HTMLElement>("tr.run-row")].find((r) => r.dataset["run"] === focusRun);
      (onBox ? row?.querySelector<HTMLElement>("input") : row)?.focus({ preventScroll: true });
    } else if (focusCol !== undefined) {
      table.querySelector<HTMLElement>(`th[data-col="${focusCol}"]`)?.focus({ preventScroll: true });
    }
  }

  private setSort(key: string): void {
    this.sort = nextSort(this.sort, key);
    this.render();
  }

  private facetWords(): string[] {
    return FACETS.flatMap((f) => {
      const v = this.facets[f.key];
      return v === null ? [] : [`${f.key} ${v === NONE ? "(none)" : v}`];
    });
  }

  /**
   * One select per facet, its options the values found in the runs' metadata, with counts. Left
   * alone when a new runs response brings the same options, so that a periodic re-listing does
   * not close a select the user has open.
   */
  private renderFacets(index: Index): void {
    const lists = FACETS.map((f) => {
      const values = index.values[f.key];
      const current = this.facets[f.key];
      const keys = [...values.keys()].sort((a, b) => (a === NONE ? 1 : b === NONE ? -1 : a < b ? -1 : a > b ? 1 : 0));
      if (current !== null && !values.has(current)) keys.push(current); // gone since: still shown, with 0
      return [
        { value: "", label: `${f.all} (${values.size - (values.has(NONE) ? 1 : 0)})` },
        ...keys.map((v) => ({ value: v, label: `${v === NONE ? "(none)" : v} (${values.get(v) ?? 0})` })),
      ];
    });
    const signature = JSON.stringify(lists);
    if (signature === this.facetSignature) return;
    this.facetSignature = signature;
    const selects = FACETS.map((f, i) => {
      const current = this.facets[f.key];
      const el = select(lists[i]!, current ?? "", (v) => this.setFacet(f.key, v || null), f.label);
      el.classList.add("facet");
      el.classList.toggle("on", current !== null);
      return el;
    });
    replace(this.facetBar, ...selects);
  }

  private setFacet(key: FacetKey, value: string | null): void {
    this.facets = { ...this.facets, [key]: value };
    this.limit = PAGE;
    const i = FACETS.findIndex((f) => f.key === key);
    this.facetBar.children[i]?.classList.toggle("on", value !== null);
    this.render();
  }

  private more(matching: number): HTMLElement {
    const next = Math.min(PAGE, matching - this.limit);
    const grow = (limit: number) => () => {
      this.limit = limit;
      this.render();
    };
    return h(
      "div",
      { class: "toolbar more-runs", attrs: { "data-testid": "more-runs" } },
      h("span", "muted", `Showing the first ${this.limit} of ${matching} matching runs.`),
      h("button", { attrs: { type: "button" }, on: { click: grow(this.limit + PAGE) } }, `Show ${next} more`),
      h("button", { attrs: { type: "button" }, on: { click: grow(matching) } }, `Show all ${matching}`),
    );
  }

  /** Picked runs, the baseline, and the Compare and Strategies buttons. */
  private renderCompareBar(s: State): void {
    const picked = s.picked;
    const baseline = s.baseline ?? picked[0] ?? "";
    const button = h(
      "button",
      {
        class: "primary",
        attrs: { type: "button", disabled: picked.length < 2, "data-testid": "compare-button" },
        title: picked.length < 2 ? "Tick two or more runs to compare them" : `Compare ${picked.length} runs against ${baseline}`,
        on: { click: () => this.actions.openCompare(picked) },
      },
      picked.length >= 2 ? `Compare ${picked.length} runs` : "Compare",
    );
    const strategies = h(
      "button",
      {
        class: "secondary",
        attrs: { type: "button", disabled: picked.length < 2, "data-testid": "strategies-button" },
        title:
          picked.length < 2
            ? "Tick two or more runs to set their attention strategies side by side"
            : "Attention strategies side by side: time against error of each implementation at each sequence length",
        on: { click: () => this.actions.openStrategies(picked) },
      },
      "Strategies",
    );
    replace(
      this.compareBar,
      button,
      strategies,
      picked.length
        ? h(
            "label",
            null,
            "baseline ",
            select(
              picked.map((r) => ({ value: r, label: r })),
              baseline,
              (v) => this.actions.setBaseline(v),
              "Baseline run",
            ),
          )
        : h("span", "muted", "Tick runs to compare them side by side."),
      picked.length
        ? h(
            "button",
            { class: "link-button", attrs: { type: "button" }, on: { click: () => this.actions.pick(picked, false) } },
            `clear (${picked.length})`,
          )
        : null,
    );
  }

  /**
   * The table of the first `limit` matching runs, built detached and attached once. Rows carry
   * their run name; one set of listeners on the table serves them all.
   */
  private table(shown: Item[], picked: Set<string>): HTMLElement {
    const tbody = h("tbody");
    let group: string | null = null;
    for (const it of shown.slice(0, this.limit)) {
      if (it.r.group !== group) {
        group = it.r.group;
        if (group) tbody.appendChild(h("tr", "group", h("th", { attrs: { colspan: SPAN } }, group)));
      }
      append(tbody, ...rows(it, picked.has(it.r.run)));
    }
    const names = shown.map((it) => it.r.run);
    const allOn = names.every((n) => picked.has(n));
    const label = allOn ? `Untick all ${names.length} shown runs` : `Tick all ${names.length} shown runs`;
    const all = h("input", { attrs: { type: "checkbox", "aria-label": label }, title: label + " (for comparing)" });
    all.checked = allOn;
    all.indeterminate = !allOn && names.some((n) => picked.has(n));
    all.addEventListener("change", () => this.actions.pick(names, !allOn));
    const table = h(
      "table",
      "grid runs",
      h("thead", null, h("tr", null, h("th", "pick", all), ...COLUMNS.map((c) => headerCell(c, this.sort, (key) => this.setSort(key))))),
      tbody,
    );
    const rowOf = (ev: Event): HTMLElement | null => {
      const t = ev.target instanceof Element ? ev.target : null;
      return t?.closest<HTMLElement>("tr.run-row") ?? null;
    };
    tbody.addEventListener("click", (ev) => {
      const row = rowOf(ev);
      if (!row || (ev.target instanceof Element && ev.target.closest("td.pick"))) return; // the checkbox's cell
      this.actions.openRun(row.dataset["run"] ?? "");
    });
    tbody.addEventListener("keydown", (ev) => {
      const row = rowOf(ev);
      if (!row || ev.target !== row) return; // the checkbox's own keys
      if (ev.key === "Enter" || ev.key === " ") {
        ev.preventDefault();
        this.actions.openRun(row.dataset["run"] ?? "");
      }
    });
    tbody.addEventListener("change", (ev) => {
      const row = rowOf(ev);
      if (row && ev.target instanceof HTMLInputElement) this.actions.pick([row.dataset["run"] ?? ""], ev.target.checked);
    });
    return table;
  }
}

/** Whether the list shows the same for `b` as for `a`: a poll's "loading" with the old data in
 * hand rebuilds nothing (the figures poll asks every second while runs are parsed). */
function sameRuns(a: State["runs"] | null, b: State["runs"]): boolean {
  if (a === b) return true;
  if (!a || a.error !== b.error || (a.status === "error") !== (b.status === "error")) return false;
  // A poll while runs parse in the background answers every second, mostly with the same
  // listing: the rows are only rebuilt when it says something new (a click on a row that was
  // just replaced would be lost, and the rows would flicker).
  if (a.data !== b.data && (a.data === null || b.data === null || JSON.stringify(a.data) !== JSON.stringify(b.data))) {
    return false;
  }
  return b.data !== null || a.status === b.status;
}

/**
 * The server could not list the log directory (a storage error): the runs shown, if any, are
 * those of its last listing, which may be stale. Without this a storage outage looks like runs
 * that stopped changing.
 */
function listingWarning(error: string, stale: boolean): HTMLElement {
  return h(
    "div",
    { class: "warn", attrs: { role: "status", "data-testid": "listing-error" } },
    h("strong", null, "Cannot list the log directory:"),
    " ",
    error,
    stale ? "; showing the last listing." : ".",
  );
}

function emptyState(logdir: string): HTMLElement {
  const code = (text: string) => h("code", null, text);
  return h(
    "div",
    "empty",
    h("h3", null, "No attention runs yet"),
    h(
      "p",
      null,
      "The Attention tab reads PyTorch profiler traces (",
      code("*.pt.trace.json[.gz]"),
      ", and any ",
      code("*.json[.gz]"),
      " that torch.profiler wrote) in run directories under the log directory",
      logdir ? " " : "",
      logdir ? code(logdir) : null,
      ". To produce some:",
    ),
    h(
      "ul",
      null,
      h(
        "li",
        null,
        code("tb-attn-run --logdir <logdir>"),
        " (or ",
        code("python -m runner --logdir <logdir>"),
        ") profiles the built-in transformer; add ",
        code("--impl naive,sdpa --seq 256,512"),
        " for a side-by-side sweep.",
      ),
      h("li", null, code("make demo"), " writes the demo sweep."),
      h(
        "li",
        null,
        "For your own model, wrap it in ",
        code("runner.instrument(model)"),
        " inside ",
        code('torch.profiler.profile(..., on_trace_ready=tensorboard_trace_handler("<logdir>/<run>"))'),
        " so that each attention layer and phase is labelled.",
      ),
      h(
        "li",
        null,
        "Training with Hugging Face's Trainer, Lightning or Accelerate: add ",
        code("tb_attn.integrations.AttentionProfilerCallback()"),
        " to the Trainer's callbacks, or see ",
        code("docs/integrations.md"),
        "; the traces go where the scalars go.",
      ),
    ),
    h("p", "muted", "Then press TensorBoard's reload button."),
  );
}
