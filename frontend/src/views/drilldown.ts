// The drill-down panel: what runs inside one layer and phase, as a tree of call paths you expand
// and collapse (each op with the kernels it launched and the bytes it allocated), the kernels by
// name, and a way to the full trace (the PyTorch Profiler tab when it is installed, else a
// download for Perfetto). Opening it scrolls it into view.

import { url } from "../api";
import { h, replace } from "../dom";
import { fmtBytes, fmtCount, fmtUs } from "../format";
import { phaseLabel } from "../metrics";
import type { Actions, Selection, State } from "../state";
import type { DrillTree, DrillNode } from "../types";
import { changed, kernelLabel, pending } from "./common";

export class DrillView {
  readonly el: HTMLElement;
  private last: { drill: State["drill"] | null; sel: State["selection"] } = { drill: null, sel: null };
  /** The selection whose data was last scrolled into view: a reload of the same one does not scroll. */
  private revealed: Selection | null = null;

  constructor(private readonly actions: Actions) {
    this.el = h("section", { class: "drill", attrs: { "aria-live": "polite", "aria-label": "Drill-down" } });
  }

  update(s: State): void {
    if (!changed(this.last.drill, s.drill) && this.last.sel === s.selection) return;
    const selChanged = this.last.sel !== s.selection;
    this.last = { drill: s.drill, sel: s.selection };
    const sel = s.selection;
    if (!sel) {
      this.el.hidden = true;
      this.revealed = null;
      replace(this.el);
      return;
    }
    this.el.hidden = false;
    const title = `Layer ${sel.layer} \u00b7 ${sel.phase === null ? "whole block" : phaseLabel(sel.phase)} \u00b7 ${
      sel.backward ? "backward" : "forward"
    }`;
    const close = h(
      "button",
      { class: "close", title: "Close", attrs: { type: "button", "aria-label": "Close drill-down" }, on: { click: () => this.actions.select(null) } },
      "\u00d7",
    );
    const head = h("div", "drill-head", h("h3", null, "Drill-down: ", title), close);
    const wait = pending(s.drill, "the drill-down");
    replace(this.el, head, wait ?? this.body(s, s.drill.data!));
    // A click on a bar far above must visibly do something: bring the panel into view when it
    // opens, and again when its data makes it grow.
    const withData = !wait && s.drill.data !== null;
    if (selChanged || (withData && this.revealed !== sel)) {
      this.el.scrollIntoView({ block: "nearest" });
      if (withData) this.revealed = sel;
    }
  }

  private body(s: State, d: DrillTree): HTMLElement {
    const device = d.tree.some((n) => n.device_us > 0) || d.kernels.length > 0;
    const roots = d.tree.filter((n) => n.parent === null);
    const inOps = roots.reduce((sum, n) => sum + n.alloc_bytes, 0);
    const loose = d.alloc_bytes - inOps;
    const summary = [
      `Means per step over ${d.step_count} step${d.step_count === 1 ? "" : "s"}.`,
      d.alloc_bytes > 0
        ? ` Allocated ${fmtBytes(d.alloc_bytes)} per step${loose >= 1 ? ` (${fmtBytes(loose)} of it outside any op)` : ""}.`
        : "",
      " Trace file: ",
    ];
    const kernels = [...d.kernels].sort((a, b) => b.device_us - a.device_us);
    return h(
      "div",
      null,
      h("p", "muted", ...summary, h("code", null, d.trace_file)),
      this.traceLink(s, d),
      d.tree.length ? new TreeTable(d, device).el : h("p", "muted", "No ops recorded in this scope."),
      kernels.length
        ? h(
            "div",
            "drill-kernels",
            h("h4", null, `Kernels by name (${kernels.length})`),
            h(
              "table",
              "grid compact",
              h("thead", null, h("tr", null, h("th", null, "kernel"), h("th", "num", "calls"), h("th", "num", "device"))),
              h(
                "tbody",
                null,
                ...kernels.map((k) =>
                  h("tr", null, h("td", "name", kernelLabel(k.name)), h("td", "num", fmtCount(k.calls)), h("td", "num", fmtUs(k.device_us))),
                ),
              ),
            ),
          )
        : device
          ? null
          : h("p", "muted", "No device kernels were launched from this scope (a CPU trace, or CPU-only work)."),
    );
  }

  private traceLink(s: State, d: DrillTree): HTMLElement {
    if (d.profiler) {
      const p = d.profiler;
      // The iframe's base is data/plugin/tb_attn/, so ../../../ is TensorBoard's root.
      const a = h(
        "a",
        {
          attrs: { href: "../../../#pytorch_profiler", target: "_top" },
          on: {
            click: (ev) => {
              try {
                if (window.top && window.top !== window) {
                  window.top.location.hash = "#pytorch_profiler";
                  ev.preventDefault();
                }
              } catch {
                // cross-origin top: let the link navigate
              }
            },
          },
        },
        "Open the PyTorch Profiler tab",
      );
      // That tab shows its Spans list only when the worker has two or more.
      return h(
        "p",
        "trace-link",
        a,
        ` and pick run ${p.run}, worker ${p.worker}${p.span_count > 1 ? `, span ${p.span}` : ""}, then its Trace view`,
        h("span", "muted", " (it needs internet access: it loads its charts from a CDN)"),
        ".",
      );
    }
    // Only a relative URL from the server is used as a link; anything else is rebuilt here.
    const href = /^\.\/trace\?/.test(d.download) ? d.download : url("trace", { run: s.run, file: d.trace_file });
    const a = h("a", { attrs: { href, download: baseName(d.trace_file) } }, "Download the trace file");
    return h(
      "p",
      "trace-link",
      a,
      " and open it in Perfetto (ui.perfetto.dev, \u201cOpen trace file\u201d) to see this scope on the full timeline.",
    );
  }
}

/** The call tree as a table whose rows expand and collapse; roots start expanded. */
class TreeTable {
  readonly el: HTMLElement;
  private readonly rows: HTMLTableRowElement[] = [];
  private readonly more = new Map<number, HTMLTableRowElement>();
  private readonly toggles = new Map<number, HTMLButtonElement>();
  private readonly expanded = new Set<number>();

  constructor(
    private readonly d: DrillTree,
    private readonly device: boolean,
  ) {
    for (const n of d.tree) if (n.parent === null && this.hasChildren(n)) this.expanded.add(n.id);
    const body: HTMLTableRowElement[] = [];
    const open: DrillNode[] = []; // the nodes whose subtree is being listed, innermost last
    const closeTo = (depth: number) => {
      while (open.length && open[open.length - 1]!.depth >= depth) {
        const m = this.moreRow(open.pop()!);
        if (m) body.push(m);
      }
    };
    for (const n of d.tree) {
      closeTo(n.depth);
      const row = this.row(n);
      this.rows[n.id] = row;
      body.push(row);
      open.push(n);
    }
    closeTo(0);
    const cols = ["call path", "inputs", "calls", "CPU", "self", ...(device ? ["device"] : []), "allocated"];
    const total = d.tree_truncated
      ? h(
          "p",
          { class: "note", attrs: { role: "note" } },
          `Showing the ${d.tree.length} most expensive of ${d.tree_nodes} call paths and kernels; the cheaper ones are left out.`,
        )
      : null;
    const tools = h(
      "div",
      "tree-tools",
      h("h4", null, `Call tree (${d.tree.length} ${d.tree.length === 1 ? "node" : "nodes"})`),
      h("button", { class: "chip", attrs: { type: "button" }, on: { click: () => this.setAll(true) } }, "Expand all"),
      h("button", { class: "chip", attrs: { type: "button" }, on: { click: () => this.setAll(false) } }, "Collapse all"),
      h("span", "muted small", "Most expensive first (CPU plus device time); times and bytes per step include what runs inside."),
    );
    const table = h(
      "table",
      "grid compact drill-tree",
      h("thead", null, h("tr", null, ...cols.map((c, i) => h("th", i >= 2 ? "num" : null, c)))),
      h("tbody", null, ...body),
    );
    this.el = h("div", "tree-wrap", tools, total, h("div", "table-wrap", table));
    this.refresh();
  }

  private hasChildren(n: DrillNode): boolean {
    return n.children.length > 0 || n.omitted_children > 0;
  }

  private row(n: DrillNode): HTMLTableRowElement {
    const op = n.kind === "op";
    const label = op ? h("span", "op-name", n.name) : kernelLabel(n.name);
    let name: HTMLElement;
    if (this.hasChildren(n)) {
      const toggle = h(
        "button",
        { class: "twisty", attrs: { type: "button", "aria-expanded": "false" }, on: { click: () => this.toggle(n.id) } },
        h("span", { class: "tw", attrs: { "aria-hidden": "true" } }, "\u25b8"),
        label,
      );
      this.toggles.set(n.id, toggle);
      name = toggle;
    } else {
      name = h("span", "leaf-name", h("span", { class: "tw", attrs: { "aria-hidden": "true" } }, ""), label);
    }
    const inputs = n.input_dims
      .map((dims, i) => (dims.length ? `[${dims.join(", ")}] ${n.input_types[i] ?? ""}`.trim() : ""))
      .filter(Boolean);
    const allTypes = n.input_types.length ? `input types: ${n.input_types.map((t) => t || "\u2014").join(", ")}` : "";
    return h(
      "tr",
      { class: op ? "op" : "dev", dataset: { node: String(n.id), depth: String(n.depth) } },
      h("td", { class: "name", style: { "padding-left": `${8 + n.depth * 16}px` } }, name),
      h("td", { class: "inputs", title: allTypes }, inputs.join(", ")),
      h("td", "num", fmtCount(n.calls)),
      h("td", "num", op ? fmtUs(n.cpu_us) : ""),
      h("td", "num", op ? fmtUs(n.self_us) : ""),
      this.device ? h("td", "num", n.device_us > 0 ? fmtUs(n.device_us) : "") : null,
      h(
        "td",
        { class: "num", title: n.alloc_bytes > 0 ? `${fmtBytes(n.self_alloc_bytes)} by the op itself, outside the ops inside it` : "" },
        n.alloc_bytes > 0 ? fmtBytes(n.alloc_bytes) : "",
      ),
    );
  }

  private moreRow(n: DrillNode): HTMLTableRowElement | null {
    if (!n.omitted_children) return null;
    const cols = this.device ? 7 : 6;
    const row = h(
      "tr",
      "more",
      h(
        "td",
        { style: { "padding-left": `${8 + (n.depth + 1) * 16}px` }, attrs: { colspan: cols } },
        `\u2026 ${n.omitted_children} cheaper ${n.omitted_children === 1 ? "child" : "children"} not listed`,
      ),
    );
    this.more.set(n.id, row);
    return row;
  }

  private toggle(id: number): void {
    if (this.expanded.has(id)) this.expanded.delete(id);
    else this.expanded.add(id);
    this.refresh();
  }

  private setAll(open: boolean): void {
    this.expanded.clear();
    if (open) for (const n of this.d.tree) if (this.hasChildren(n)) this.expanded.add(n.id);
    this.refresh();
  }

  /** Shows the rows whose ancestors are all expanded (a parent comes before its children). */
  private refresh(): void {
    const shown: boolean[] = [];
    for (const n of this.d.tree) {
      const visible = n.parent === null || (shown[n.parent]! && this.expanded.has(n.parent));
      shown[n.id] = visible;
      this.rows[n.id]!.hidden = !visible;
      const open = this.expanded.has(n.id);
      const toggle = this.toggles.get(n.id);
      if (toggle) {
        toggle.setAttribute("aria-expanded", open ? "true" : "false");
        toggle.firstChild!.textContent = open ? "\u25be" : "\u25b8";
      }
      const more = this.more.get(n.id);
      if (more) more.hidden = !(visible && open);
    }
  }
}

function baseName(path: string): string {
  const i = path.lastIndexOf("/");
  return i >= 0 ? path.slice(i + 1) : path;
}
