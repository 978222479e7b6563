// The runs list: grouped by run path, filterable, with metadata and load status.

import { append, clear, h, replace, select } from "../dom";
import { fmtWhen } from "../format";
import type { Actions, State } from "../state";
import type { RunEntry } from "../types";
import { errorBox, loadingBox, metaConfig, metaString } from "./common";

const COLUMNS = ["", "run", "model", "impl", "seq", "dtype", "device", "who", "when", "status"];

export function matchesFilter(r: RunEntry, filter: string): boolean {
  const f = filter.trim().toLowerCase();
  if (!f) return true;
  const m = r.metadata;
  const hay = [r.run, metaString(m, "user"), metaString(m, "model"), metaString(m, "impl")];
  return hay.some((s) => s.toLowerCase().includes(f));
}

export class RunsView {
  readonly el: HTMLElement;
  private readonly body: HTMLElement;
  private readonly count: HTMLElement;
  private readonly input: HTMLInputElement;
  private readonly compareBar: HTMLElement;
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
    this.input.addEventListener("input", () => actions.setFilter(this.input.value));
    this.count = h("span", "muted");
    this.body = h("div");
    this.compareBar = h("div", "toolbar compare-bar");
    this.el = h(
      "section",
      "runs-page",
      h("div", "toolbar", h("h2", null, "Runs"), this.input, this.count),
      this.compareBar,
      this.body,
    );
  }

  update(s: State): void {
    const l = this.last;
    if (l.runs === s.runs && l.filter === s.filter && l.picked === s.picked && l.baseline === s.baseline) return;
    this.last = { runs: s.runs, filter: s.filter, picked: s.picked, baseline: s.baseline };
    this.renderCompareBar(s);
    if (this.input.value !== s.filter) this.input.value = s.filter;
    clear(this.body);
    const data = s.runs.data;
    if (s.runs.status === "error") this.body.appendChild(errorBox("Could not list runs:", s.runs.error ?? ""));
    if (!data) {
      if (s.runs.status !== "error") this.body.appendChild(loadingBox("runs"));
      this.count.textContent = "";
      return;
    }
    if (data.runs.length === 0) {
      this.count.textContent = "";
      this.body.appendChild(emptyState(data.logdir));
      return;
    }
    const shown = data.runs.filter((r) => matchesFilter(r, s.filter));
    this.count.textContent =
      shown.length === data.runs.length ? `${data.runs.length} runs` : `${shown.length} of ${data.runs.length} runs`;
    if (shown.length === 0) {
      this.body.appendChild(h("p", "muted", `No run matches \u201c${s.filter}\u201d.`));
      return;
    }
    this.body.appendChild(this.table(shown, s.picked));
  }

  /** Picked runs, the baseline and the Compare button. */
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
    replace(
      this.compareBar,
      button,
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

  private table(runs: RunEntry[], picked: string[]): HTMLElement {
    const groups = new Map<string, RunEntry[]>();
    for (const r of [...runs].sort((a, b) => (a.run < b.run ? -1 : a.run > b.run ? 1 : 0))) {
      const list = groups.get(r.group) ?? [];
      list.push(r);
      groups.set(r.group, list);
    }
    const tbody = h("tbody");
    for (const [group, list] of [...groups].sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0))) {
      if (group) tbody.appendChild(h("tr", "group", h("th", { attrs: { colspan: COLUMNS.length } }, group)));
      for (const r of list) append(tbody, ...this.rows(r, group, picked.includes(r.run)));
    }
    const names = runs.map((r) => r.run);
    const allOn = names.every((n) => picked.includes(n));
    const all = h("input", {
      attrs: { type: "checkbox", "aria-label": allOn ? "Untick all shown runs" : "Tick all shown runs" },
      title: allOn ? "Untick all shown runs" : "Tick all shown runs (for comparing)",
    });
    all.checked = allOn;
    all.indeterminate = !allOn && names.some((n) => picked.includes(n));
    all.addEventListener("change", () => this.actions.pick(names, !allOn));
    return h(
      "table",
      "grid runs",
      h("thead", null, h("tr", null, h("th", "pick", all), ...COLUMNS.slice(1).map((c) => h("th", null, c)))),
      tbody,
    );
  }

  private rows(r: RunEntry, group: string, isPicked: boolean): HTMLElement[] {
    const m = r.metadata;
    const name = group && r.run.startsWith(group + "/") ? r.run.slice(group.length + 1) : r.run;
    const user = metaString(m, "user");
    const host = metaString(m, "host");
    const who = user && host ? `${user}@${host}` : user || host;
    const started = metaString(m, "started_at");
    const runnerStatus = metaString(m, "status");
    const open = () => this.actions.openRun(r.run);
    const box = h("input", { attrs: { type: "checkbox", "aria-label": `Pick ${r.run} for comparing` } });
    box.checked = isPicked;
    box.addEventListener("change", () => this.actions.pick([r.run], box.checked));
    const row = h(
      "tr",
      {
        class: "run-row",
        attrs: { tabindex: 0, role: "button", "aria-label": `Open run ${r.run}` },
        on: {
          click: open,
          keydown: (ev) => {
            if (ev.target !== ev.currentTarget) return; // the checkbox's own keys
            if (ev.key === "Enter" || ev.key === " ") {
              ev.preventDefault();
              open();
            }
          },
        },
      },
      h("td", { class: "pick", on: { click: (ev) => ev.stopPropagation() } }, box),
      h("td", { class: "run-name", title: r.run }, name),
      h("td", null, metaString(m, "model")),
      h("td", null, metaString(m, "impl") || metaConfig(m, "impl")),
      h("td", "num", metaConfig(m, "seq")),
      h("td", null, metaString(m, "dtype") || metaConfig(m, "dtype")),
      h("td", { title: metaString(m, "device_name") }, metaString(m, "device")),
      h("td", null, who),
      h("td", { title: started }, started ? fmtWhen(started) : ""),
      h(
        "td",
        null,
        h("span", `badge status-${r.status}`, r.status),
        runnerStatus && runnerStatus !== "ok" ? h("span", `badge runner-${runnerStatus}`, runnerStatus) : null,
      ),
    );
    const out: HTMLElement[] = [row];
    const messages: string[] = [];
    if (r.status === "error" && r.error) messages.push(r.error);
    const runnerError = metaString(m, "error");
    if (runnerError && runnerStatus !== "ok") messages.push(`runner: ${runnerError}`);
    if (messages.length) {
      out.push(h("tr", "run-error", h("td", { attrs: { colspan: COLUMNS.length } }, messages.join(" \u2014 "))));
    }
    return out;
  }
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
      ") in run directories under the log directory",
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
    ),
    h("p", "muted", "Then press TensorBoard's reload button."),
  );
}
