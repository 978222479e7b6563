// The tab's state: one plain object, replaced by patches; views re-render from it. The only
// thing persisted (sessionStorage, so it survives TensorBoard re-creating the iframe) is the
// open run, the sub-view, the chosen metrics and head statistic, the straggler margin and the
// rank selection of each run, the compared runs and the strategies view's runs and baseline.

import type { HeadMetricKey, MetricKey } from "./metrics";
import type {
  Comparison,
  DrillTree,
  MemoryCurve,
  RankView,
  RunsResponse,
  RunSummary,
  ScalingFits,
  StrategyTable,
  TimelineSlice,
  WorkerSummary,
} from "./types";

/** "ranks": every worker (rank) of the run side by side; offered when a run has two or more.
 * "generation": prefill and decode steps; offered when the worker's summary has a generation.
 * "roofline": phases under the hardware's roofs; offered when the worker has attention. */
export type Tab = "layers" | "heads" | "memory" | "timeline" | "roofline" | "generation" | "ranks";
export const TABS: Tab[] = ["layers", "heads", "memory", "timeline", "roofline", "generation", "ranks"];
/** The straggler margins the ranks view offers (fractions over the median); the server's default is 0.2. */
export const MARGINS: number[] = [0.05, 0.1, 0.2, 0.5, 1];
export const DEFAULT_MARGIN = 0.2;
/** Runs with this many workers or more get the ranks view's rank filter (./ranks?ranks=0-7,512). */
export const RANK_FILTER_MIN = 8;
/** ... and from this many, a hint that a selection loads faster (every trace is read otherwise). */
export const RANK_FILTER_HINT = 64;
/** The rank selections remembered, one per run, the most recent kept. */
const MAX_RANK_SELECTIONS = 32;

export type GroupBy = "impl" | "seq" | "dtype" | "none";
export const GROUP_BY: GroupBy[] = ["impl", "seq", "dtype", "none"];
export type PhaseMetric = "cpu_us" | "device_us" | "alloc_bytes" | "flops";
export const PHASE_METRICS: PhaseMetric[] = ["cpu_us", "device_us", "alloc_bytes", "flops"];

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
  /** null: the trace's clock, device time where it has kernels, else CPU time (``defaultTime``). */
  chartMetric: MetricKey | null;
  columns: MetricKey[] | null; // null: the trace's clock
  sort: { key: string; desc: boolean };
  headMetric: HeadMetricKey | null; // null: the trace's clock
  /** An attention statistic the heads heatmap shows instead of headMetric ("entropy",
   * "window_64"...), where the run has it (RunSummary.attn_stats); null: headMetric. */
  headStat: string | null;
  selection: Selection | null;
  summary: Loadable<RunSummary>;
  drill: Loadable<DrillTree>;
  memory: Loadable<MemoryCurve>;
  timeline: Loadable<TimelineSlice>;
  /** The ranks view (./ranks) of the open run, for `ranksMargin`. */
  ranks: Loadable<RankView>;
  ranksMargin: number;
  /** Each run's rank selection ("0-7,512", as the server normalized it); a run absent: every rank. */
  ranksSel: Record<string, string>;
  /** Why the server refused the last selection applied (400: does not parse; 404: no such trace). */
  ranksFilterError: string | null;
  /** The ranks table's sort: "rank", "worker", a RankView column ("attention_best", "step", ...), "L<n>", "heads". */
  ranksSort: { key: string; desc: boolean };
  /** Runs ticked in the runs list, in the order they were picked. */
  picked: string[];
  /** null: the first picked run. */
  baseline: string | null;
  /** The runs the compare view shows; null: the compare view is closed. */
  compare: string[] | null;
  groupBy: GroupBy;
  phaseMetric: PhaseMetric | null; // null: device time when every run has some, else CPU
  compareData: Loadable<Comparison>;
  scaling: Loadable<ScalingFits>;
  /** The runs the strategies view shows; null: it is closed. */
  strategies: string[] | null;
  /** The strategy speed-ups and crossovers are against; null: the server's rule (naive, else the first exact one). */
  strategyBaseline: string | null;
  strategiesData: Loadable<StrategyTable>;
}

const STORAGE_KEY = "tb-attn.view";

interface Persisted {
  run?: string | null;
  tab?: Tab;
  chartMetric?: MetricKey | null;
  columns?: MetricKey[] | null;
  headMetric?: HeadMetricKey | null;
  headStat?: string | null;
  compare?: string[] | null;
  baseline?: string | null;
  groupBy?: GroupBy;
  phaseMetric?: PhaseMetric | null;
  ranksMargin?: number;
  ranksSel?: Record<string, string>;
  strategies?: string[] | null;
  strategyBaseline?: string | null;
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

/** The open run's rank selection; null: every rank. */
export function rankSelection(s: State): string | null {
  return s.run === null ? null : (s.ranksSel[s.run] ?? null);
}

/** `sel` with `run`'s selection set to `spec` (null: removed), the oldest dropped past the bound. */
export function withRankSelection(sel: Record<string, string>, run: string, spec: string | null): Record<string, string> {
  const out = { ...sel };
  delete out[run]; // re-added last: the most recent
  if (spec !== null) out[run] = spec;
  const runs = Object.keys(out);
  for (const r of runs.slice(0, Math.max(0, runs.length - MAX_RANK_SELECTIONS))) delete out[r];
  return out;
}

function rankSelections(value: unknown): Record<string, string> {
  if (!value || typeof value !== "object" || Array.isArray(value)) return {};
  const out: Record<string, string> = {};
  for (const [run, spec] of Object.entries(value as Record<string, unknown>)) if (typeof spec === "string" && spec) out[run] = spec;
  return out;
}

/** The time figure a view opens on until one is picked: device time where attention has some
 *  (a trace with kernels that ran in its layers), else CPU time, never a chart of zeros. */
export function defaultTime(ws: WorkerSummary): "cpu_us" | "device_us" {
  // A partial trace (some kernels captured into a graph, not run) is judged by CPU time (analysis/common/clock.py).
  const ran = ws.device !== "cpu" && !ws.device_partial && ws.layers.some((l) => l.device_us > 0 || l.backward.device_us > 0);
  return ran ? "device_us" : "cpu_us";
}

export function initialState(): State {
  const p = loadPersisted();
  const compare =
    Array.isArray(p.compare) && p.compare.length && p.compare.every((r) => typeof r === "string") ? p.compare : null;
  const strategies =
    !compare && Array.isArray(p.strategies) && p.strategies.length && p.strategies.every((r) => typeof r === "string")
      ? p.strategies
      : null;
  return {
    runs: idle(),
    filter: "",
    run: typeof p.run === "string" ? p.run : null,
    worker: null,
    span: null,
    step: null,
    tab: p.tab && TABS.includes(p.tab) ? p.tab : "layers",
    chartMetric: p.chartMetric ?? null,
    columns: Array.isArray(p.columns) && p.columns.length ? p.columns : null,
    sort: { key: "layer", desc: false },
    headMetric: p.headMetric ?? null,
    headStat: typeof p.headStat === "string" ? p.headStat : null,
    selection: null,
    summary: idle(),
    drill: idle(),
    memory: idle(),
    timeline: idle(),
    ranks: idle(),
    ranksMargin:
      typeof p.ranksMargin === "number" && Number.isFinite(p.ranksMargin) && p.ranksMargin >= 0 && p.ranksMargin <= 10
        ? p.ranksMargin
        : DEFAULT_MARGIN,
    ranksSel: rankSelections(p.ranksSel),
    ranksFilterError: null,
    ranksSort: { key: "rank", desc: false },
    picked: compare ? [...compare] : strategies ? [...strategies] : [],
    baseline: compare && typeof p.baseline === "string" && compare.includes(p.baseline) ? p.baseline : null,
    compare,
    groupBy: p.groupBy && GROUP_BY.includes(p.groupBy) ? p.groupBy : "none",
    phaseMetric: p.phaseMetric && PHASE_METRICS.includes(p.phaseMetric) ? p.phaseMetric : null,
    compareData: idle(),
    scaling: idle(),
    strategies,
    strategyBaseline: strategies && typeof p.strategyBaseline === "string" ? p.strategyBaseline : null,
    strategiesData: idle(),
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
      headStat: s.headStat,
      compare: s.compare,
      baseline: s.baseline,
      groupBy: s.groupBy,
      phaseMetric: s.phaseMetric,
      ranksMargin: s.ranksMargin,
      ranksSel: s.ranksSel,
      strategies: s.strategies,
      strategyBaseline: s.strategyBaseline,
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
  patch(p: Partial<Pick<State, "chartMetric" | "columns" | "sort" | "headMetric" | "headStat" | "groupBy" | "phaseMetric" | "ranksSort">>): void;
  select(sel: Selection | null): void;
  retry(): void;
  /** The ranks view's straggler margin (a fraction over the median): refetches ./ranks. */
  setMargin(margin: number): void;
  /** The ranks view's rank selection ("0-7,512"; null or blank: every rank): refetches ./ranks. A
   * selection the server refuses is reported in `ranksFilterError`, and the one before it kept. */
  setRanks(spec: string | null): void;
  /** Leaves the ranks view for one worker's own overview (its first span). */
  openWorker(worker: string): void;
  /** Ticks or unticks runs in the runs list. */
  pick(runs: string[], on: boolean): void;
  setBaseline(run: string | null): void;
  /** Opens the compare view for the picked runs; null closes it. */
  openCompare(runs: string[] | null): void;
  /** Opens the strategies view for the picked runs; null closes it. */
  openStrategies(runs: string[] | null): void;
  /** The strategy the strategies view measures speed-ups against (null: the server's rule): refetches. */
  setStrategyBaseline(strategy: string | null): void;
}
