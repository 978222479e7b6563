// The drill-down panel: the ops and kernels inside one layer and phase, with a way to the full
// trace (the PyTorch Profiler tab when it is installed, else a download for Perfetto).

import { url } from "../api";
import { h, replace } from "../dom";
import { fmtCount, fmtUs } from "../format";
import { phaseLabel } from "../metrics";
import type { Actions, State } from "../state";
import type { Drilldown } from "../types";
import { changed, pending } from "./common";

export class DrillView {
  readonly el: HTMLElement;
  private last: { drill: State["drill"] | null; sel: State["selection"] } = { drill: null, sel: null };

  constructor(private readonly actions: Actions) {
    this.el = h("section", { class: "drill", attrs: { "aria-live": "polite" } });
  }

  update(s: State): void {
    if (!changed(this.last.drill, s.drill) && this.last.sel === s.selection) return;
    const selChanged = this.last.sel !== s.selection;
    this.last = { drill: s.drill, sel: s.selection };
    const sel = s.selection;
    if (!sel) {
      this.el.hidden = true;
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
    if (selChanged) this.el.scrollIntoView({ block: "nearest" });
  }

  private body(s: State, d: Drilldown): HTMLElement {
    const ops = [...d.ops].sort((a, b) => b.cpu_us - a.cpu_us);
    const kernels = [...d.kernels].sort((a, b) => b.device_us - a.device_us);
    const opsTable = ops.length
      ? h(
          "table",
          "grid compact",
          h("thead", null, h("tr", null, h("th", null, "op"), h("th", "num", "calls"), h("th", "num", "CPU"), h("th", "num", "self"))),
          h(
            "tbody",
            null,
            ...ops.map((o) =>
              h(
                "tr",
                o.top_level ? null : "nested",
                h("td", { class: "name", title: o.top_level ? o.name : `${o.name} (nested inside another op)` }, o.top_level ? "" : "\u21b3 ", o.name),
                h("td", "num", fmtCount(o.calls)),
                h("td", "num", fmtUs(o.cpu_us)),
                h("td", "num", fmtUs(o.self_us)),
              ),
            ),
          ),
        )
      : h("p", "muted", "No ops recorded in this scope.");
    const kernelsTable = kernels.length
      ? h(
          "table",
          "grid compact",
          h("thead", null, h("tr", null, h("th", null, "kernel"), h("th", "num", "calls"), h("th", "num", "device"))),
          h(
            "tbody",
            null,
            ...kernels.map((k) =>
              h("tr", null, h("td", { class: "name", title: k.name }, k.name), h("td", "num", fmtCount(k.calls)), h("td", "num", fmtUs(k.device_us))),
            ),
          ),
        )
      : h("p", "muted", "No device kernels were launched from this scope (a CPU trace, or CPU-only work).");
    return h(
      "div",
      null,
      h("p", "muted", `Means per step over ${d.step_count} step${d.step_count === 1 ? "" : "s"}. Trace file: `, h("code", null, d.trace_file)),
      this.traceLink(s, d),
      h("div", "drill-cols", h("div", null, h("h4", null, `Ops (${ops.length})`), opsTable), h("div", null, h("h4", null, `Kernels (${kernels.length})`), kernelsTable)),
    );
  }

  private traceLink(s: State, d: Drilldown): HTMLElement {
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
      return h(
        "p",
        "trace-link",
        a,
        ` and pick run ${p.run}, worker ${p.worker}${p.span ? `, span ${p.span}` : ""}, then its Trace view.`,
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

function baseName(path: string): string {
  const i = path.lastIndexOf("/");
  return i >= 0 ? path.slice(i + 1) : path;
}
