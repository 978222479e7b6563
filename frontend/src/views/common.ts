// Small pieces shared by the views: error, loading and empty boxes, findings, and a layer's marks.

import { h } from "../dom";
import { shortKernelName } from "../format";
import type { Loadable } from "../state";
import { PARTIAL_DEVICE } from "../types";
import type { Finding, LayerStats, RunInfo } from "../types";

export function errorBox(title: string, message: string): HTMLElement {
  return h("div", { class: "error", attrs: { role: "alert" } }, h("strong", null, title), " ", message);
}

/** A kernel's name as people read it (`format.shortKernelName`), the full name on hover. */
export function kernelLabel(name: string): HTMLElement {
  return h("span", { class: "kernel-name", title: name }, shortKernelName(name));
}

export function loadingBox(what: string): HTMLElement {
  return h("div", { class: "loading", attrs: { role: "status" } }, `Loading ${what}\u2026`);
}

export function note(text: string): HTMLElement {
  return h("div", "note", text);
}

/**
 * The box to show instead of a view while its data is not ready, or null when it is. Errors are
 * always shown with the server's message; a reload keeps showing the old data until it ends.
 */
export function pending<T>(l: Loadable<T>, what: string): HTMLElement | null {
  if (l.status === "error") return errorBox(`Could not load ${what}:`, l.error ?? "unknown error");
  if (!l.data) return loadingBox(what);
  return null;
}

/** Whether a view showing `a` must re-render for `b` (the data or the error changed). */
export function changed<T>(a: Loadable<T> | null, b: Loadable<T>): boolean {
  if (!a) return true;
  if (a.data !== b.data || a.error !== b.error) return true;
  return !a.data && a.status !== b.status;
}

/** A number of a run's metadata (RunInfo) as text; "" where it has none. */
export function infoText(v: number | null | undefined): string {
  return v === null || v === undefined ? "" : String(v);
}

/**
 * The hover text of a run's metadata text (RunInfo): the text, and where the server cut one of
 * `keys` (RunInfo.clipped), that its "\u2026" is the server's and how long the whole is in the
 * run's metadata file (which /metadata sends).
 */
export function infoTitle(info: RunInfo | null | undefined, keys: (keyof RunInfo)[], text: string): string {
  const cut = keys.flatMap((k) => {
    const n = info?.clipped[k];
    return n === undefined ? [] : [`its ${k} has ${n.toLocaleString("en-US")} characters`];
  });
  return cut.length ? `${text}\n(cut short by the server at \u201c\u2026\u201d: in the run's metadata file, ${cut.join(", ")})` : text;
}

/** Op and kernel names, comma-separated: kernels by their short name, the full one on hover. */
export function nameList(list: string[]): (HTMLElement | string)[] {
  return list.flatMap((n, i) => [...(i ? [", "] : []), kernelLabel(n)]);
}

/** Findings as the run overview shows them: high and medium ones open, the others folded. */
export function findingsBox(findings: Finding[]): HTMLElement | null {
  if (!findings.length) return null;
  return h(
    "div",
    { class: "findings", dataset: { testid: "findings" } },
    h("div", "findings-title", `Findings (${findings.length})`),
    ...findings.map((f) => {
      const ev = f.evidence;
      const where = ev.layers.length ? `layers ${ev.layers.join(", ")}` : "";
      const listed = nameList([...ev.ops.slice(0, 4), ...ev.kernels.slice(0, 2)]);
      const item = h(
        "details",
        { class: `finding sev-${f.severity}`, dataset: { finding: f.id } },
        h("summary", null, h("span", `badge sev-${f.severity}`, f.severity), " ", h("b", null, f.title),
          h("span", "muted small", `  ${f.id}`)),
        h("p", null, f.explanation),
        h("p", "suggestion", "\u2192 ", f.suggestion),
        where || listed.length ? h("p", "muted small", where, where && listed.length ? " \u00b7 " : "", ...listed) : null,
      );
      if (f.severity === "high" || f.severity === "medium") item.open = true;
      return item;
    }),
  );
}

/** What the "core only" mark means (LayerStats.core_only). */
/** A figure the trace cannot give. */
export const DASH = "\u2014";

/** Why a trace without memory events shows no bytes (WorkerSummary.memory_recorded). */
export const MEMORY_NOT_RECORDED = "memory not recorded (profile_memory=False)";

export const CORE_ONLY_TITLE =
  "Found by its core (SDPA, or q\u00b7k\u1d40 \u2192 softmax \u2192 attn\u00b7v) without its projections on at least one side " +
  "(q, k, v before it, or the output after it; the run's notes say which), so this layer's figures leave that side out.";

/** A layer's marks: "inferred" (found without tb-attn scopes), and "core only" where only its core was found. */
export function layerMarks(l: LayerStats): (HTMLElement | null)[] {
  return [
    l.inferred ? h("span", { class: "badge inferred", title: "found without tb-attn scopes (inferred)" }, "inferred") : null,
    l.core_only ? h("span", { class: "badge core-only", title: CORE_ONLY_TITLE, dataset: { testid: "core-only" } }, "core only") : null,
  ];
}

export const CAPTURED_TITLE = "Captured into a CUDA/HIP graph, not run: the trace holds no device time for it";

/** The visible mark of a partial device figure (WorkerSummary.device_partial, Roofline.partial, a block
 *  with a captured phase): "partial", its reason in the tooltip. */
export function partialMark(title: string = partialTitle()): HTMLElement {
  return h("span", { class: "badge partial", title, dataset: { testid: "partial" } }, "partial");
}

/** The tooltip of a run's partial mark: why, and which clock its figures are on. */
export function partialTitle(): string {
  const why = PARTIAL_DEVICE.charAt(0).toUpperCase() + PARTIAL_DEVICE.slice(1);
  return `${why}: its device figures cover the kernels that ran, so its time is judged on the CPU clock.`;
}

/** The phases whose kernels were captured into a CUDA/HIP graph (PhaseStats.captured): ``phase``'s
 *  own, or any of the layer's with null. */
export function capturedIn(l: LayerStats, phase: string | null): string[] {
  return l.phases.filter((p) => p.captured && (phase === null || p.phase === phase)).map((p) => p.phase);
}
