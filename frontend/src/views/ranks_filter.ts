// The ranks view's rank filter, for runs with many ranks: a selection such as "0-7,512" is sent
// as ./ranks?ranks=..., and the server reads only those ranks' traces. The server parses it (the
// CLI's grammar, ranksel.py); what it refuses, its one-line message says why, next to what was
// typed. Nothing is filtered unless the user asks: a large run only gets a hint.

import { h, replace } from "../dom";
import { rankSelection, RANK_FILTER_HINT, RANK_FILTER_MIN, type Actions, type State } from "../state";

export class RankFilter {
  readonly el: HTMLElement;
  private readonly input: HTMLInputElement;
  private readonly clearButton: HTMLButtonElement;
  private readonly status: HTMLElement;
  private readonly message: HTMLElement;
  private readonly hint: HTMLElement;
  private last: Record<string, unknown> = {};

  constructor(private readonly actions: Actions) {
    this.input = h("input", {
      class: "rank-filter-input",
      attrs: { type: "text", placeholder: "0-7,512", "aria-label": "Ranks to show", spellcheck: "false", autocomplete: "off" },
      title: "Ranks and ranges, comma-separated: only their traces are read",
      on: { keydown: (ev) => ev.key === "Enter" && this.apply() },
    });
    this.clearButton = h(
      "button",
      { class: "clear", attrs: { type: "button" }, title: "Every rank of the run (reads every trace)", on: { click: () => this.clear() } },
      "All ranks",
    );
    this.status = h("span", { class: "muted small", dataset: { testid: "rank-filter-status" } });
    this.message = h("span", "rank-filter-message");
    this.hint = h(
      "span",
      { class: "hint rank-filter-hint", dataset: { testid: "rank-filter-hint" } },
      "A selection such as 0-7 loads faster: only its ranks\u2019 traces are read.",
    );
    this.el = h(
      "div",
      { class: "toolbar rank-filter", dataset: { testid: "rank-filter" } },
      h("label", null, "Ranks ", this.input),
      h("button", { class: "secondary", attrs: { type: "button" }, on: { click: () => this.apply() } }, "Apply"),
      this.clearButton,
      this.status,
      this.hint,
      this.message,
    );
  }

  update(s: State): void {
    const changed = (k: string, v: unknown) => {
      const c = this.last[k] !== v;
      this.last[k] = v;
      return c;
    };
    const d = s.ranks.data?.run === s.run ? s.ranks.data : null;
    const entry = s.runs.data?.runs.find((r) => r.run === s.run);
    const total = d?.ranks_total || entry?.workers.length || 0;
    const sel = rankSelection(s);
    const runChanged = changed("run", s.run);
    const dataChanged = changed("data", d);
    // What the server answered is what the box says ("3,0-2" comes back "0-3"); a refused
    // selection leaves the data as it was, and what was typed stays there to be corrected.
    if (runChanged) this.input.value = sel ?? "";
    else if (dataChanged && d && s.ranks.status === "ok") this.input.value = d.ranks_selected ?? "";
    const others = [changed("total", total), changed("sel", sel), changed("status", s.ranks.status), changed("error", s.ranksFilterError)];
    if (!runChanged && !dataChanged && !others.some(Boolean)) return;
    this.el.hidden = total < RANK_FILTER_MIN && sel === null;
    this.clearButton.disabled = sel === null;
    replace(this.status, this.statusText(d?.ranks_selected ?? null, d ? d.ranks.length : null, total, sel, s.ranks.status === "loading"));
    // Many ranks and none picked: every trace is read, which takes a while the first time.
    this.hint.hidden = !(sel === null && total >= RANK_FILTER_HINT);
    replace(
      this.message,
      s.ranksFilterError ? h("span", { class: "rank-filter-error", attrs: { role: "alert" }, dataset: { testid: "rank-filter-error" } }, s.ranksFilterError) : null,
    );
  }

  /** Forgets the run shown, so that the next update fills the box from the state again. */
  reset(): void {
    this.last = {};
  }

  private statusText(shownSel: string | null, shown: number | null, total: number, sel: string | null, loading: boolean): string {
    if (loading && (shown === null || sel !== shownSel)) {
      return sel !== null ? `reading ranks ${sel} of ${total}\u2026` : `reading all ${total} ranks\u2019 traces\u2026`;
    }
    if (shown === null) return "";
    return shownSel !== null ? `showing ${shown} of ${total} ranks (${shownSel})` : `showing all ${total} ranks`;
  }

  private apply(): void {
    this.actions.setRanks(this.input.value.trim() || null);
  }

  private clear(): void {
    this.input.value = "";
    this.actions.setRanks(null);
  }
}
