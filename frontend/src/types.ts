// Response types of the plugin's JSON routes. Mirrors docs/http_api.md and docs/summary.md
// (tb_attn_plugin/schema.py on the server). Times are microseconds, memory bytes.

/** "running": the runner's metadata says the run is still being written (docs/http_api.md). */
export type RunStatus = "ready" | "unloaded" | "loading" | "error" | "running";

export interface SpanEntry {
  span: string | null;
  file: string;
  size: number;
  mtime: number;
}

export interface WorkerEntry {
  worker: string;
  spans: SpanEntry[];
}

/** The runner's tb_attn_run.json (docs/runner.md); any field may be missing. */
export type RunMetadata = Record<string, unknown>;

export interface RunEntry {
  run: string;
  group: string;
  metadata: RunMetadata | null;
  status: RunStatus;
  error: string | null;
  workers: WorkerEntry[];
}

export interface RunsResponse {
  schema: string;
  logdir: string;
  runs: RunEntry[];
}

export interface Backward {
  calls: number;
  cpu_us: number;
  device_us: number;
  flops: number;
}

export interface PhaseStats {
  phase: string;
  calls: number;
  cpu_us: number;
  cpu_self_us: number;
  device_us: number;
  kernels: number;
  kernel_names: string[];
  ops: string[];
  flops: number;
  flops_per_s: number;
  alloc_bytes: number;
  freed_bytes: number;
  peak_bytes: number;
  sxs_bytes: number;
  sxs_allocs: number;
  backward: Backward;
}

export interface HeadStats {
  head: number;
  derived: boolean;
  cpu_us: number;
  device_us: number;
  flops: number;
  alloc_bytes: number;
  sxs_bytes: number;
}

export interface LayerStats {
  layer: number;
  module: string | null;
  backend: string;
  backend_evidence: string[];
  inferred: boolean;
  calls: number;
  cpu_us: number;
  device_us: number;
  flops: number;
  flops_per_s: number;
  alloc_bytes: number;
  peak_bytes: number;
  sxs_bytes: number;
  heads_count: number | null;
  phases: PhaseStats[];
  heads: HeadStats[];
  backward: Backward;
}

export interface StepStats {
  step: number;
  cpu_us: number;
  device_us: number;
  attention_cpu_us: number;
  attention_device_us: number;
}

export interface WorkerSummary {
  file: string;
  worker: string;
  span: string | null;
  device: string;
  inferred: boolean;
  backend: string;
  steps: number[];
  step_count: number;
  step_cpu_us: number;
  step_device_us: number;
  attention_cpu_us: number;
  attention_device_us: number;
  attention_share_cpu: number | null;
  attention_share_device: number | null;
  layers: LayerStats[];
  per_step: StepStats[];
  diagnostics: Record<string, number>;
  notes: string[];
  findings?: Finding[];
}

export interface Evidence {
  layers: number[];
  ops: string[];
  kernels: string[];
  time_us: number;
  bytes: number;
  details: Record<string, number | string>;
}

export interface Finding {
  id: string;
  severity: "high" | "medium" | "low" | "info";
  title: string;
  explanation: string;
  suggestion: string;
  evidence: Evidence;
}

export interface FileError {
  file: string;
  error: string;
}

export interface RunSummary {
  schema: string;
  run: string;
  metadata: RunMetadata | null;
  workers: WorkerSummary[];
  errors: FileError[];
}

export interface DrillOp {
  name: string;
  calls: number;
  cpu_us: number;
  self_us: number;
  top_level: boolean;
}

export interface DrillKernel {
  name: string;
  calls: number;
  device_us: number;
}

export interface ProfilerLink {
  plugin: string;
  run: string;
  worker: string;
  span: string | null;
}

export interface Drilldown {
  layer: number;
  phase: string | null;
  backward: boolean;
  step_count: number;
  ops: DrillOp[];
  kernels: DrillKernel[];
  trace_file: string;
  download: string;
  profiler: ProfilerLink | null;
}

export interface MemoryScope {
  layer: number;
  phase: string | null;
  start_us: number;
  end_us: number;
}

export interface MemoryResponse {
  step: number | null;
  device: string;
  start_us: number;
  end_us: number;
  points: [number, number][];
  scopes: MemoryScope[];
  peaks: { layer: number; peak_bytes: number }[];
}

export interface TimelineTrack {
  id: number;
  name: string;
  device: boolean;
}

export interface TimelineEvents {
  track: number[];
  start_us: number[];
  dur_us: number[];
  depth: number[];
  name: number[];
  layer: number[];
  phase: number[];
  kind: string[];
}

export interface TimelineResponse {
  step: number | null;
  start_us: number;
  end_us: number;
  truncated: boolean;
  tracks: TimelineTrack[];
  names: string[];
  events: TimelineEvents;
  phases: string[];
}

// ---- ./compare and ./scaling (docs/http_api.md) ---------------------------------------------

export interface ComparePhase {
  cpu_us: number;
  device_us: number;
  alloc_bytes: number;
  flops: number;
  calls: number;
}

export interface CompareRatio {
  attention_cpu_us: number | null;
  attention_device_us: number | null;
  alloc_bytes: number | null;
  peak_bytes: number | null;
  flops_per_s: number | null;
}

export interface CompareRun {
  run: string;
  impl: string | null;
  seq: number | null;
  dtype: string | null;
  model: string | null;
  backend: string;
  steps: number;
  attention_cpu_us: number;
  attention_device_us: number;
  step_cpu_us: number;
  attention_share_cpu: number | null;
  alloc_bytes: number;
  peak_bytes: number;
  sxs_bytes: number;
  flops: number;
  flops_per_s: number;
  ops_per_forward: number;
  kernels_per_forward: number;
  /** candidate / baseline; null when the baseline's value is 0 */
  ratio: CompareRatio;
  /** summed over layers, per step */
  phases: Record<string, ComparePhase>;
  layers: { layer: number; cpu_us: number; device_us: number; alloc_bytes: number; peak_bytes: number }[];
  findings: string[];
}

export interface CompareResponse {
  schema: string;
  baseline: string;
  runs: CompareRun[];
  errors: { run: string; error: string }[];
}

/** value ≈ a·seq^k */
export interface Fit {
  a: number;
  k: number;
  r2: number;
}

export interface ScalingPoint {
  seq: number;
  run: string;
  time_us: number;
  alloc_bytes: number;
  peak_bytes: number;
}

export interface ScalingSeries {
  label: string;
  impl: string | null;
  dtype: string | null;
  model: string | null;
  points: ScalingPoint[];
  time_fit: Fit | null;
  memory_fit: Fit | null;
}

export interface ScalingResponse {
  schema: string;
  series: ScalingSeries[];
}

// ---- ./ranks (docs/http_api.md "GET /ranks") -------------------------------------------------

/** One kind of collective (all_reduce, all_gather, ...), means per step. */
export interface CollectiveStats {
  name: string;
  calls: number;
  /** the calling thread's time in the calls (only the enqueue, for async ones) */
  cpu_us: number;
  /** the collective kernels' time */
  device_us: number;
}

export interface RankLayer {
  layer: number;
  /** forward + backward attention time per step, on the response's clock */
  time_us: number;
  forward_us: number;
  backward_us: number;
}

export interface RankRow {
  rank: number | null;
  worker: string;
  files: string[];
  world_size: number | null;
  step_us: number;
  /** forward + backward */
  attention_us: number;
  /** attention in the rank's fastest step: what stragglers are judged by */
  attention_best_us: number;
  collective_us: number;
  /** step time that is neither attention nor collectives (0 when they overlap) */
  other_us: number;
  layers: RankLayer[];
  /** the global heads this rank's layers cover */
  heads: number[];
  collectives: CollectiveStats[];
  straggler: boolean;
}

/** One layer across ranks (the "All ranks" aggregate). */
export interface RanksLayer {
  layer: number;
  mean_us: number;
  median_us: number;
  min_us: number;
  max_us: number;
  max_rank: number | null;
  /** mean forward time per phase across ranks */
  phases: Record<string, number>;
}

export interface Straggler {
  rank: number | null;
  worker: string;
  /** "attention" (in the rank's fastest step, against the median of those) or "layer L" (its mean) */
  metric: string;
  value_us: number;
  median_us: number;
  /** value / median */
  ratio: number;
}

export interface GlobalHead {
  layer: number;
  head: number;
  /** ranks that computed this head (several: replicas, e.g. data parallel) */
  ranks: number[];
  /** workers that computed it (including workers without a known rank) */
  replicas: number;
  /** mean over those workers, on the response's clock */
  time_us: number;
  flops: number;
  derived: boolean;
}

export interface RanksResponse {
  schema: string;
  run: string;
  /** "device" when the traces have kernels, else "cpu" */
  clock: "cpu" | "device";
  /** a straggler is slower than the other ranks' median by more than this fraction */
  margin: number;
  /** ... and by at least this many microseconds */
  min_gap_us: number;
  ranks: RankRow[];
  all_ranks: RanksLayer[];
  attention_mean_us: number;
  attention_max_us: number;
  collective_mean_us: number;
  stragglers: Straggler[];
  heads: GlobalHead[];
  /** the width of the layer x head map: the largest global head + 1 */
  head_count: number;
  /** every head computed by exactly one rank (tensor parallelism) */
  heads_sharded: boolean;
  /** each layer's heads are 0..head_count-1, with no gap */
  heads_complete: boolean;
  /** e.g. two workers that claim the same rank */
  warnings: string[];
  errors: FileError[];
}
