// The tab's state: one plain object, replaced by patches; views re-render from it. The only
// thing persisted (sessionStorage, so it survives TensorBoard re-creating the iframe) is the
// open run, the sub-view and the chosen metrics.

import type { HeadMetricKey, MetricKey } from "./metrics";
import type { Drilldown, MemoryResponse, RunsResponse, RunSummary, TimelineResponse } from "./types";

export type Tab = "layers" | "heads" | "memory" | "timeline";
export const TABS: Tab[] = ["layers", "heads", "memory", "timeline"];

export interface Loadable<T> {
  status: "idle" | "loading" | "ok" | "error";
  data: T | null;
  error: string | null;
  /** What the data is for (run, worker, span, step...), so a view knows when it changed. */
  key: string;
}

export function idle<T>(): Loadable<T> {
  return { status: "idle", data: null, error: null, key: "" };
}

export interface Selection {
  layer: number;
  phase: string | null; // null: the whole layer
  backward: boolean;
}

export interface State {
  runs: Loadable<RunsResponse>;
  filter: string;
  run: string | null;
  worker: string | null;
  span: string | null;
  step: number | null;
  tab: Tab;
  chartMetric: MetricKey;
  columns: MetricKey[];
  sort: { key: string; desc: boolean };
  headMetric: HeadMetricKey;
  selection: Selection | null;
  summary: Loadable<RunSummary>;
  drill: Loadable<Drilldown>;
  memory: Loadable<MemoryResponse>;
  timeline: Loadable<TimelineResponse>;
}

const STORAGE_KEY = "tb-attn.view";

interface Persisted {
  run?: string | null;
  tab?: Tab;
  chartMetric?: MetricKey;
  columns?: MetricKey[];
  headMetric?: HeadMetricKey;
}

function loadPersisted(): Persisted {
  try {
    const raw = window.sessionStorage.getItem(STORAGE_KEY);
    const value: unknown = raw ? JSON.parse(raw) : {};
    return value && typeof value === "object" ? (value as Persisted) : {};
  } catch {
    return {}; // storage disabled: start fresh
  }
}

export function initialState(): State {
  const p = loadPersisted();
  return {
    runs: idle(),
    filter: "",
    run: typeof p.run === "string" ? p.run : null,
    worker: null,
    span: null,
    step: null,
    tab: p.tab && TABS.includes(p.tab) ? p.tab : "layers",
    chartMetric: p.chartMetric ?? "cpu_us",
    columns: Array.isArray(p.columns) && p.columns.length ? p.columns : ["cpu_us"],
    sort: { key: "layer", desc: false },
    headMetric: p.headMetric ?? "cpu_us",
    selection: null,
    summary: idle(),
    drill: idle(),
    memory: idle(),
    timeline: idle(),
  };
}

export type Listener = (state: State, prev: State) => void;

export class Store {
  private state: State;
  private rendered: State;
  private listeners: Listener[] = [];
  private scheduled = false;

  constructor(initial: State) {
    this.state = initial;
    this.rendered = initial;
  }

  get(): State {
    return this.state;
  }

  set(patch: Partial<State>): void {
    this.state = { ...this.state, ...patch };
    this.persist();
    // Several patches in one task render once.
    if (!this.scheduled) {
      this.scheduled = true;
      queueMicrotask(() => {
        this.scheduled = false;
        const prev = this.rendered;
        this.rendered = this.state;
        for (const fn of this.listeners) fn(this.state, prev);
      });
    }
  }

  subscribe(fn: Listener): void {
    this.listeners.push(fn);
  }

  private persist(): void {
    const s = this.state;
    const p: Persisted = {
      run: s.run,
      tab: s.tab,
      chartMetric: s.chartMetric,
      columns: s.columns,
      headMetric: s.headMetric,
    };
    try {
      window.sessionStorage.setItem(STORAGE_KEY, JSON.stringify(p));
    } catch {
      // storage disabled or full: the state just is not remembered
    }
  }
}

/** What views may ask the app to do. */
export interface Actions {
  openRun(run: string | null): void;
  setFilter(text: string): void;
  setTarget(worker: string | null, span: string | null): void;
  setStep(step: number | null): void;
  setTab(tab: Tab): void;
  patch(p: Partial<Pick<State, "chartMetric" | "columns" | "sort" | "headMetric">>): void;
  select(sel: Selection | null): void;
  retry(): void;
}
