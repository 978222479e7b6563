// The controller: owns the state, fetches what the current view needs (discarding responses
// that a newer request superseded), and re-renders the views on every change.

import { api, ApiError, errorText, Latest, type Target } from "./api";
import { h } from "./dom";
import {
  idle,
  initialState,
  rankSelection,
  Store,
  withRankSelection,
  type Actions,
  type Loadable,
  type Selection,
  type State,
  type Tab,
} from "./state";
import type { RankView, RunEntry } from "./types";
import { CompareView } from "./views/compare";
import { currentWorker, RunView } from "./views/run";
import { RunsView } from "./views/runs";
import { StrategiesView } from "./views/strategies";

export class App implements Actions {
  readonly store = new Store(initialState());
  private readonly runsReq = new Latest();
  private readonly summaryReq = new Latest();
  private readonly drillReq = new Latest();
  private readonly memoryReq = new Latest();
  private readonly timelineReq = new Latest();
  private readonly compareReq = new Latest();
  private readonly scalingReq = new Latest();
  private readonly ranksReq = new Latest();
  private readonly strategiesReq = new Latest();
  private readonly runsView: RunsView;
  private readonly runView: RunView;
  private readonly compareView: CompareView;
  private readonly strategiesView: StrategiesView;
  private pollTimer = 0;
  private refreshTimer = 0;
  private refreshRetries = 0;

  constructor(root: HTMLElement) {
    this.runsView = new RunsView(this);
    this.runView = new RunView(this);
    this.compareView = new CompareView(this);
    this.strategiesView = new StrategiesView(this);
    root.appendChild(h("div", "page", this.runsView.el, this.compareView.el, this.strategiesView.el, this.runView.el));
    this.store.subscribe((s) => this.render(s));
    this.render(this.store.get());
  }

  start(): void {
    void this.loadRuns(false);
    this.loadCompare(false);
    this.loadStrategies(false);
  }

  /** TensorBoard's reload button: re-scan the logdir, then refresh what is shown. */
  async reload(): Promise<void> {
    await this.loadRuns(true);
    const s = this.store.get();
    if (s.run) this.loadViewData(true);
    else {
      this.loadCompare(true);
      this.loadStrategies(true);
    }
  }

  // ---- actions -------------------------------------------------------------------------

  openRun(run: string | null): void {
    for (const r of [this.summaryReq, this.drillReq, this.memoryReq, this.timelineReq, this.ranksReq]) r.cancel();
    this.store.set({
      run,
      worker: null,
      span: null,
      step: null,
      selection: null,
      summary: idle(),
      drill: idle(),
      memory: idle(),
      timeline: idle(),
      ranks: idle(),
      ranksFilterError: null,
    });
    if (run === null) {
      this.runView.dispose();
      void this.loadRuns(false);
      this.loadCompare(false); // back to the compare or strategies view when it is open
      this.loadStrategies(false);
      return;
    }
    this.resolveTarget();
  }

  setFilter(text: string): void {
    this.store.set({ filter: text });
  }

  setTarget(worker: string | null, span: string | null): void {
    for (const r of [this.summaryReq, this.drillReq, this.memoryReq, this.timelineReq]) r.cancel();
    this.store.set({ worker, span, step: null, selection: null, summary: idle(), drill: idle(), memory: idle(), timeline: idle() });
    this.loadViewData(false);
  }

  setStep(step: number | null): void {
    this.store.set({ step });
    this.loadViewData(false);
  }

  setTab(tab: Tab): void {
    this.store.set({ tab });
    this.loadViewData(false);
  }

  patch(p: Partial<Pick<State, "chartMetric" | "columns" | "sort" | "headMetric" | "headStat" | "groupBy" | "phaseMetric" | "ranksSort">>): void {
    this.store.set(p);
  }

  setMargin(margin: number): void {
    this.store.set({ ranksMargin: margin });
    this.loadRanks(false);
  }

  setRanks(spec: string | null): void {
    const s = this.store.get();
    if (s.run === null) return;
    const text = spec?.trim() || null;
    const before = rankSelection(s);
    this.store.set({ ranksSel: withRankSelection(s.ranksSel, s.run, text), ranksFilterError: null });
    this.loadRanks(false, before);
  }

  openWorker(worker: string): void {
    const w = this.entry()?.workers.find((x) => x.worker === worker);
    this.store.set({ tab: "layers" });
    this.setTarget(worker, w?.spans[0]?.span ?? null);
  }

  pick(runs: string[], on: boolean): void {
    const s = this.store.get();
    const picked = on ? [...s.picked, ...runs.filter((r) => !s.picked.includes(r))] : s.picked.filter((r) => !runs.includes(r));
    const baseline = s.baseline !== null && picked.includes(s.baseline) ? s.baseline : null;
    this.store.set({ picked, baseline });
  }

  setBaseline(run: string | null): void {
    this.store.set({ baseline: run });
    if (this.store.get().compare) this.loadCompare(false);
  }

  openCompare(runs: string[] | null): void {
    this.compareReq.cancel();
    this.scalingReq.cancel();
    this.store.set({ compare: runs && runs.length ? [...runs] : null, compareData: idle(), scaling: idle() });
    if (runs && this.store.get().strategies) this.openStrategies(null);
    if (!runs) {
      this.compareView.dispose();
      void this.loadRuns(false); // back to the list: its figures as they are now
      return;
    }
    this.loadCompare(false);
  }

  openStrategies(runs: string[] | null): void {
    this.strategiesReq.cancel();
    this.store.set({ strategies: runs && runs.length ? [...runs] : null, strategyBaseline: null, strategiesData: idle() });
    if (!runs) {
      this.strategiesView.dispose();
      void this.loadRuns(false);
      return;
    }
    if (this.store.get().compare) this.openCompare(null); // one view of picked runs at a time
    this.loadStrategies(false);
  }

  setStrategyBaseline(strategy: string | null): void {
    this.store.set({ strategyBaseline: strategy });
    this.loadStrategies(false);
  }

  select(sel: Selection | null): void {
    this.store.set({ selection: sel });
    if (!sel) {
      this.drillReq.cancel();
      this.store.set({ drill: idle() });
      return;
    }
    this.loadDrill(false);
  }

  retry(): void {
    void this.reload();
  }

  // ---- loading -------------------------------------------------------------------------

  private target(s: State = this.store.get()): Target | null {
    return s.run === null ? null : { run: s.run, worker: s.worker, span: s.span };
  }

  private entry(s: State = this.store.get()): RunEntry | undefined {
    return s.runs.data?.runs.find((r) => r.run === s.run);
  }

  async loadRuns(refresh: boolean): Promise<void> {
    const s0 = this.store.get();
    this.store.set({ runs: { ...s0.runs, status: "loading" } });
    try {
      const r = await this.runsReq.run((signal) => api.runs(refresh, signal));
      if (r.stale) return;
      this.store.set({ runs: { status: "ok", data: r.value, error: null, key: "" } });
      this.retryRefresh(refresh ? r.value.retry_after_s : null);
    } catch (err) {
      this.store.set({ runs: { ...this.store.get().runs, status: "error", error: errorText(err) } });
      return;
    }
    const s = this.store.get();
    if (s.run !== null && s.worker === null && s.summary.status === "idle") this.resolveTarget();
    this.schedulePoll();
  }

  /** A reload answered from a listing older than the click (the server lists at most about once a
   * second) is asked again once the server allows, a few times at most, so that the runs written
   * just before the click appear. */
  private retryRefresh(afterS: number | null): void {
    window.clearTimeout(this.refreshTimer);
    if (afterS === null || this.refreshRetries >= 3) {
      this.refreshRetries = 0;
      return;
    }
    this.refreshRetries += 1;
    this.refreshTimer = window.setTimeout(() => void this.loadRuns(true), Math.min(afterS, 30) * 1000 + 50);
  }

  /** While some run is still being written or parsed, the list is polled so its status moves on;
   * while the server parses runs ahead for their figures and the list is shown, as often as it
   * asks (poll_after_ms), so the figures fill in as they arrive. */
  private schedulePoll(): void {
    window.clearTimeout(this.pollTimer);
    const s = this.store.get();
    const data = s.runs.data;
    const runs = data?.runs ?? [];
    if (data?.poll_after_ms && s.run === null && s.compare === null && s.strategies === null) {
      this.pollTimer = window.setTimeout(() => void this.loadRuns(false), Math.max(data.poll_after_ms, 250));
    } else if (runs.some((r) => r.status === "loading" || r.status === "running")) {
      this.pollTimer = window.setTimeout(() => void this.loadRuns(false), 10000);
    }
  }

  /** Picks the worker and span of the open run from the runs list, then loads. */
  private resolveTarget(): void {
    const s = this.store.get();
    if (s.run === null || !s.runs.data) return; // loadRuns calls back once the list is here
    const entry = this.entry(s);
    const worker = entry?.workers[0];
    // The ranks view needs two workers or more; a run with one opens on its layers.
    const tab = s.tab === "ranks" && (entry?.workers.length ?? 0) < 2 ? "layers" : s.tab;
    this.store.set({ worker: worker?.worker ?? null, span: worker?.spans[0]?.span ?? null, tab });
    this.loadViewData(false);
  }

  /** Loads the summary, and the data of the active tab and the drill-down when needed. */
  loadViewData(force: boolean): void {
    const s = this.store.get();
    const t = this.target(s);
    if (!t) return;
    const key = JSON.stringify([t.run, t.worker, t.span]);
    if (force || s.summary.key !== key || s.summary.status === "idle") void this.loadSummary(t, key);
    else if (s.summary.status !== "loading") this.loadTabData(force);
    if (force && s.selection) this.loadDrill(true);
    // The ranks view reads every worker of the run, not the one the summary is for.
    if (s.tab === "ranks") this.loadRanks(force);
  }

  private begin<T>(l: Loadable<T>, key: string): Loadable<T> {
    // Same key (a reload): keep the old data on screen until the new arrives.
    return l.key === key ? { ...l, status: "loading", error: null } : { status: "loading", data: null, error: null, key };
  }

  private async loadSummary(t: Target, key: string): Promise<void> {
    this.store.set({ summary: this.begin(this.store.get().summary, key) });
    try {
      const r = await this.summaryReq.run((signal) => api.summary(t, signal));
      if (r.stale) return;
      const summary = r.value;
      this.store.set({ summary: { status: "ok", data: summary, error: null, key } });
      const s = this.store.get();
      const ws = currentWorker(s);
      if (ws && (s.step === null || !ws.steps.includes(s.step))) this.store.set({ step: ws.steps[0] ?? null });
      // The generation view needs a generation; a worker without one opens on its layers.
      if (s.tab === "generation" && !ws?.generation) this.store.set({ tab: "layers" });
      // The roofline view needs attention (a roofline); a worker without any opens on its layers.
      if (s.tab === "roofline" && !ws?.roofline) this.store.set({ tab: "layers" });
      // The run's status in the list changes once it has been read.
      if (this.entry(s)?.status !== "ready") void this.loadRuns(false);
    } catch (err) {
      this.store.set({ summary: { status: "error", data: null, error: errorText(err), key } });
    }
    this.loadTabData(false);
  }

  private loadTabData(force: boolean): void {
    const s = this.store.get();
    const t = this.target(s);
    if (!t) return;
    const key = JSON.stringify([t.run, t.worker, t.span, s.step]);
    if (s.tab === "memory" && (force || s.memory.key !== key || s.memory.status === "error")) {
      this.store.set({ memory: this.begin(s.memory, key) });
      this.memoryReq
        .run((signal) => api.memory(t, s.step, signal))
        .then((r) => {
          if (!r.stale) this.store.set({ memory: { status: "ok", data: r.value, error: null, key } });
        })
        .catch((err) => this.store.set({ memory: { status: "error", data: null, error: errorText(err), key } }));
    }
    if (s.tab === "timeline" && (force || s.timeline.key !== key || s.timeline.status === "error")) {
      this.store.set({ timeline: this.begin(s.timeline, key) });
      this.timelineReq
        .run((signal) => api.timeline(t, s.step, signal))
        .then((r) => {
          if (!r.stale) this.store.set({ timeline: { status: "ok", data: r.value, error: null, key } });
        })
        .catch((err) => this.store.set({ timeline: { status: "error", data: null, error: errorText(err), key } }));
    }
  }

  /** The compare table (per baseline) and the scaling fits (per run set) of the compare view. */
  private loadCompare(force: boolean): void {
    const s = this.store.get();
    const runs = s.compare;
    if (!runs || s.run !== null) return;
    // No baseline picked: the server's rule (the first run by name), the same as the CLI's.
    const baseline = s.baseline !== null && runs.includes(s.baseline) ? s.baseline : null;
    const key = JSON.stringify([runs, baseline]);
    if (force || s.compareData.key !== key || s.compareData.status === "error") {
      this.store.set({ compareData: this.begin(s.compareData, key) });
      this.compareReq
        .run((signal) => api.compare(runs, baseline, signal))
        .then((r) => {
          if (!r.stale) this.store.set({ compareData: { status: "ok", data: r.value, error: null, key } });
        })
        .catch((err) => this.store.set({ compareData: { status: "error", data: null, error: errorText(err), key } }));
    }
    const skey = JSON.stringify(runs);
    if (force || s.scaling.key !== skey || s.scaling.status === "error") {
      this.store.set({ scaling: this.begin(s.scaling, skey) });
      this.scalingReq
        .run((signal) => api.scaling(runs, signal))
        .then((r) => {
          if (!r.stale) this.store.set({ scaling: { status: "ok", data: r.value, error: null, key: skey } });
        })
        .catch((err) => this.store.set({ scaling: { status: "error", data: null, error: errorText(err), key: skey } }));
    }
  }

  /** The strategies view's groups, for its runs and baseline. */
  private loadStrategies(force: boolean): void {
    const s = this.store.get();
    const runs = s.strategies;
    if (!runs || s.run !== null) return;
    const key = JSON.stringify([runs, s.strategyBaseline]);
    if (!force && s.strategiesData.key === key && s.strategiesData.status !== "error") return;
    // Its data is of these runs (openStrategies drops it): kept on screen until the new arrives.
    this.store.set({ strategiesData: { ...s.strategiesData, status: "loading", error: null, key } });
    this.strategiesReq
      .run((signal) => api.strategies(runs, s.strategyBaseline, signal))
      .then((r) => {
        if (!r.stale) this.store.set({ strategiesData: { status: "ok", data: r.value, error: null, key } });
      })
      .catch((err) => this.store.set({ strategiesData: { status: "error", data: null, error: errorText(err), key } }));
  }

  /** The ranks view of the open run at the chosen margin, of its selected ranks; the shown data
   * stays until the new arrives. A selection the server refuses (400: it does not parse; 404: it
   * names no trace) is not an error of the view: the filter shows the server's message, and the
   * view goes back to the selection and the data it showed (`before`: the selection before this
   * one, where no data was shown yet). */
  private loadRanks(force: boolean, before: string | null = null): void {
    const s = this.store.get();
    const run = s.run;
    if (run === null || s.tab !== "ranks") return;
    const margin = s.ranksMargin;
    const spec = rankSelection(s);
    const key = ranksKey(run, margin, spec);
    if (!force && s.ranks.key === key && s.ranks.status !== "error") return;
    const shown = s.ranks.data?.run === run ? s.ranks.data : null;
    this.store.set({ ranks: { status: "loading", data: shown, error: null, key } });
    this.ranksReq
      .run((signal) => api.ranks(run, margin, spec, signal))
      .then((r) => {
        if (r.stale) return;
        // The server's spelling of the selection ("3,0-2" is "0-3") is the one remembered.
        const sel = r.value.ranks_selected;
        this.store.set({
          ranks: { status: "ok", data: r.value, error: null, key: ranksKey(run, margin, sel) },
          ranksSel: withRankSelection(this.store.get().ranksSel, run, sel),
          ranksFilterError: null,
        });
      })
      .catch((err) => {
        if (spec !== null && err instanceof ApiError && (err.status === 400 || err.status === 404)) {
          const back = shown ? shown.ranks_selected : before;
          this.store.set({
            ranksSel: withRankSelection(this.store.get().ranksSel, run, back),
            ranksFilterError: err.message,
            ranks: shown ? { status: "ok", data: shown, error: null, key: ranksKey(run, shown.margin, back) } : idle<RankView>(),
          });
          return;
        }
        this.store.set({ ranks: { status: "error", data: null, error: errorText(err), key } });
      });
  }

  private loadDrill(force: boolean): void {
    const s = this.store.get();
    const t = this.target(s);
    const sel = s.selection;
    if (!t || !sel) return;
    const key = JSON.stringify([t.run, t.worker, t.span, sel.layer, sel.phase, sel.backward]);
    if (!force && s.drill.key === key && s.drill.status !== "error") return;
    this.store.set({ drill: this.begin(s.drill, key) });
    this.drillReq
      .run((signal) => api.drilldown(t, sel.layer, sel.phase, sel.backward, signal))
      .then((r) => {
        if (!r.stale) this.store.set({ drill: { status: "ok", data: r.value, error: null, key } });
      })
      .catch((err) => this.store.set({ drill: { status: "error", data: null, error: errorText(err), key } }));
  }

  /** TensorBoard switched between light and dark: charts take their theme when created, so
   * the views drop theirs and draw again. */
  retheme(): void {
    this.runView.dispose();
    this.compareView.dispose();
    this.strategiesView.dispose();
    this.render(this.store.get());
  }

  // ---- rendering -----------------------------------------------------------------------

  private render(s: State): void {
    const onRun = s.run !== null;
    const onCompare = !onRun && s.compare !== null;
    const onStrategies = !onRun && !onCompare && s.strategies !== null;
    this.runsView.el.hidden = onRun || onCompare || onStrategies;
    this.compareView.el.hidden = !onCompare;
    this.strategiesView.el.hidden = !onStrategies;
    this.runView.el.hidden = !onRun;
    if (onRun) this.runView.update(s, this.entry(s));
    else if (onCompare) this.compareView.update(s);
    else if (onStrategies) this.strategiesView.update(s);
    else this.runsView.update(s);
  }
}

function ranksKey(run: string, margin: number, spec: string | null): string {
  return JSON.stringify([run, margin, spec]);
}
