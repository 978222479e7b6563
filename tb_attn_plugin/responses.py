"""The bodies of the tab's HTTP routes, one msgspec Struct per route (``ROUTES``).

Mirrors ``docs/http_api.md``; ``/summary`` serves ``schema.RunSummary``. The frontend's
``frontend/src/types.ts`` is generated from these types' JSON Schema by ``devtools/gen_types.py``
(a field's trailing comment becomes its doc comment there), and a test fails when the two
differ. Every field is always present in the JSON (no ``omit_defaults``). Times are
microseconds, memory bytes.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from tb_attn_plugin.schema import CollectiveStats, FileError, RunSummary, Spread

__all__ = [
    "RANKS_SCHEMA",
    "ROUTES",
    "RUNS_SCHEMA",
    "CompareResponse",
    "DrillNode",
    "Drilldown",
    "LoadingResponse",
    "MemoryResponse",
    "RanksResponse",
    "RunFigures",
    "RunsResponse",
    "ScalingResponse",
    "TimelineResponse",
]

RUNS_SCHEMA = "tb-attn.runs/1"
RANKS_SCHEMA = "tb-attn.ranks/2"
COMPARE_SCHEMA = "tb-attn.compare/1"
SCALING_SCHEMA = "tb-attn.scaling/1"


# -- 202 ------------------------------------------------------------------------------------
class LoadingResponse(msgspec.Struct, kw_only=True):
    """The 202 answer of a route whose traces are still being parsed: ask again later."""

    status: Literal["loading"] = "loading"
    runs: list[str]
    pending: int  # trace files still being parsed, of ``files``
    files: int
    retry_after_ms: int  # ask again after this long


# -- /runs ----------------------------------------------------------------------------------
class SpanEntry(msgspec.Struct, kw_only=True):
    span: str | None
    file: str
    size: int  # bytes as stored
    mtime: float  # seconds since the epoch


class WorkerEntry(msgspec.Struct, kw_only=True):
    worker: str
    spans: list[SpanEntry]


RunStatus = Literal["ready", "unloaded", "loading", "error", "running"]


class RunFigures(msgspec.Struct, kw_only=True):
    """A parsed run's headline figures, per step, from its median worker (the worker whose
    attention time is the median; with one worker, that one): the same worker and figures as
    ``/compare``'s. ``analysis/figures.py`` computes them."""

    clock: Literal["cpu", "device"]  # "device" where the worker's attention launched kernels, else "cpu"
    attention_us: float  # attention time per step, forward + backward, mean over the profiled steps, on ``clock``
    attention_min_us: float | None  # the fastest profiled step's attention time; null without ProfilerStep steps
    attention_max_us: float | None  # the slowest profiled step's attention time
    attention_share: float | None  # attention's share of the step time on ``clock``; null without step time
    peak_bytes: int  # the largest per-layer peak: the rise of allocated memory over a layer's start (Compare's "peak")
    backend: str  # the SDPA backend that ran, "mixed" across layers, or the implementation found
    steps: int  # profiled steps
    worker: str  # the worker the figures come from
    workers: int  # trace files read: the median is taken over them
    unreadable: int  # trace files of the run that could not be read, left out of the figures
    attention_spread: Spread | None = None  # the summary's spread of attention time on ``clock`` (its noisy mark)


class RunEntry(msgspec.Struct, kw_only=True):
    run: str
    group: str  # the run's path without its last part
    metadata: dict[str, object] | None  # the runner's tb_attn_run.json (docs/runner.md); any field may be missing
    status: RunStatus  # "running": the runner's metadata says the run is still being written
    error: str | None  # with status "error": why no trace could be read
    workers: list[WorkerEntry]
    figures: RunFigures | None  # null until every trace of the run is parsed, and when none has attention
    figures_error: str | None  # why a parsed run has no figures: no trace could be read, or no attention found
    parsing: bool  # a trace of the run is queued or being parsed: its figures are coming


class RunsResponse(msgspec.Struct, kw_only=True):
    schema: str = RUNS_SCHEMA
    logdir: str
    runs: list[RunEntry]
    listing_error: str | None  # the last listing failed (a storage error): ``runs`` is the one before
    retry_after_s: float | None = None  # refresh answered by an older listing (rate limit): ask again in s
    poll_after_ms: int | None = None  # some run's figures are being parsed: list again after this long


# -- /drilldown -----------------------------------------------------------------------------
class DrillOp(msgspec.Struct, kw_only=True):
    """One op name, wherever it runs in the scope (all its call paths together)."""

    name: str
    calls: float
    cpu_us: float
    self_us: float
    top_level: bool  # not inside another op


class DrillKernel(msgspec.Struct, kw_only=True):
    """One kernel name, whichever op launched it."""

    name: str
    calls: float
    device_us: float


DrillNodeKind = Literal["op", "kernel", "memcpy", "memset"]


class DrillNode(msgspec.Struct, kw_only=True):
    """One node of the drill-down's tree: a distinct call path (the op names from the root down,
    and the op's input shapes and types), or device work launched by its parent. Figures are
    means per step; an op's include the ops nested in it."""

    id: int  # its index in ``tree``
    parent: int | None  # the enclosing op's node; null for a root
    children: list[int]  # the most expensive (CPU plus device time) first
    omitted_children: int  # children left out of ``tree`` to bound its size
    depth: int
    kind: DrillNodeKind
    name: str
    calls: float  # per step
    cpu_us: float  # the op's time, nested ops included (0 for device work)
    self_us: float  # the op's time outside the ops nested in it
    device_us: float  # kernels, memcpy and memset launched from the op and the ops nested in it
    alloc_bytes: float  # allocated (positive memory events) inside the op, nested ops included
    self_alloc_bytes: float  # allocated by the op itself, outside the ops nested in it
    input_dims: list[list[int]]  # the op's Input Dims ([] for an input that is no tensor); [] where not recorded
    input_types: list[str]  # the op's Input type strings, as the profiler writes them


class ProfilerLink(msgspec.Struct, kw_only=True):
    """Where torch-tb-profiler's tab shows the same trace, in the names that tab lists."""

    plugin: str
    run: str
    worker: str
    span: str  # as the tab's Spans list names it: "1", "2"... in file order, "default" without one
    span_count: int  # the worker's spans in that tab; it shows its Spans list only for 2 or more


DRILLDOWN_SCHEMA = "tb-attn.drilldown/2"


class Drilldown(msgspec.Struct, kw_only=True):
    """The ops and kernels inside one layer and phase, means per step: as a tree of call paths,
    and flat by name. ``analysis.drilldown`` fills the figures, the service the links to the
    trace file."""

    schema: str = DRILLDOWN_SCHEMA
    layer: int
    phase: str | None
    backward: bool
    step_count: int
    tree: list[DrillNode]  # depth first: each node followed by its subtree
    tree_nodes: int  # nodes before the cut: more than ``tree`` holds when ``tree_truncated``
    tree_truncated: bool  # the cheapest nodes were left out (at most ``max_tree_nodes`` are listed)
    max_tree_nodes: int
    alloc_bytes: float  # allocated in the scope per step, in ops or not (the summary's figure)
    ops: list[DrillOp]
    kernels: list[DrillKernel]
    trace_file: str = ""
    download: str = ""  # relative URL of the trace file
    profiler: ProfilerLink | None = None  # set when torch-tb-profiler's tab is installed


# -- /memory --------------------------------------------------------------------------------
class MemoryScope(msgspec.Struct, kw_only=True):
    """A forward scope: a layer's block (``phase`` null) or one of its phases."""

    layer: int
    phase: str | None
    start_us: float
    end_us: float


class BackwardBlock(msgspec.Struct, kw_only=True):
    """A layer's backward work in the step: from its first backward event on the host to its
    last. Layers whose extents overlap (their backward work interleaves) share one block."""

    layers: list[int]  # ascending; more than one: interleaved, merged into one block
    start_us: float
    end_us: float


class StepPeak(msgspec.Struct, kw_only=True):
    """The step's highest allocated point, and the work whose allocation reached it."""

    t_us: float
    allocated_bytes: int
    layer: int  # -1: outside attention
    backward: bool  # the allocation was backward work (the layer's, or outside attention)
    phase: str | None  # null: in the layer's block but no phase, or outside attention
    op: str | None  # the innermost event around the allocation (usually the op that made it)


class LayerPeak(msgspec.Struct, kw_only=True):
    layer: int
    peak_bytes: int  # the largest rise over a forward block's start


class MemoryResponse(msgspec.Struct, kw_only=True):
    step: int | None
    device: Literal["cpu", "cuda"]
    start_us: float
    end_us: float
    points: list[tuple[float, float]]  # (time, allocated bytes), at most 4000, min/max preserving
    scopes: list[MemoryScope]
    backward: list[BackwardBlock]  # by start
    peak: StepPeak | None  # null: no memory event in the step
    peaks: list[LayerPeak]


# -- /timeline ------------------------------------------------------------------------------
class TimelineTrack(msgspec.Struct, kw_only=True):
    id: int
    name: str
    device: bool


EventKind = Literal["cpu_op", "annotation", "kernel", "memcpy", "memset", "runtime", "module", "other"]


class TimelineEvents(msgspec.Struct, kw_only=True):
    """Columns: one entry per event in each list."""

    track: list[int]
    start_us: list[float]
    dur_us: list[float]
    depth: list[int]
    name: list[int]  # index into ``names``
    layer: list[int]  # -1: not attention
    phase: list[int]  # index into ``phases``, or -1
    backward: list[int]  # 1: backward work attributed to the layer
    kind: list[EventKind]


class TimelineResponse(msgspec.Struct, kw_only=True):
    step: int | None
    start_us: float
    end_us: float
    truncated: bool  # more than ``limit`` events: the longest were kept
    total_events: int  # before truncation
    tracks: list[TimelineTrack]
    names: list[str]
    phases: list[str]
    events: TimelineEvents


# -- /compare and /scaling ------------------------------------------------------------------
class ComparePhase(msgspec.Struct, kw_only=True):
    cpu_us: float
    device_us: float
    alloc_bytes: float
    flops: float
    calls: float


class CompareRatio(msgspec.Struct, kw_only=True):
    """Candidate / baseline; null where the baseline's value is 0."""

    attention_cpu_us: float | None
    attention_device_us: float | None
    alloc_bytes: float | None
    peak_bytes: float | None
    flops_per_s: float | None


class CompareLayer(msgspec.Struct, kw_only=True):
    layer: int
    cpu_us: float  # forward + backward
    device_us: float
    alloc_bytes: float
    peak_bytes: int


class FindingChip(msgspec.Struct, kw_only=True):
    """A finding as Compare lists it: enough for a chip and its tooltip."""

    id: str
    severity: str
    title: str
    time_us: float  # evidence.time_us: per step, the time it is about


class CompareRun(msgspec.Struct, kw_only=True):
    """One run's attention totals per step, from its median worker."""

    run: str
    impl: str | None
    seq: int | None
    dtype: str | None
    model: str | None
    backend: str
    steps: int
    attention_cpu_us: float
    attention_device_us: float
    step_cpu_us: float
    attention_share_cpu: float | None
    alloc_bytes: float
    peak_bytes: int
    sxs_bytes: float
    flops: float
    flops_per_s: float
    ops_per_forward: float
    kernels_per_forward: float
    phases: dict[str, ComparePhase]  # summed over layers, per step
    layers: list[CompareLayer]
    findings: list[str]  # finding ids
    finding_chips: list[FindingChip] = []  # the same findings, with severity, title and time
    ratio: CompareRatio  # against ``baseline`` (``compare``); all null in ``run_facts`` alone
    baseline: str | None = None  # the run the ratios are against: its group's baseline (docs/http_api.md)
    group: str = ""  # the like-for-like group the ratios are taken in: "builtin, seq 512, float32, training"
    attention_spread: Spread | None = None  # attention time over steps, on the headline's clock
    why_slower: list[str] = []  # same model and configuration as its baseline, another impl, slower: why


class CompareError(msgspec.Struct, kw_only=True):
    run: str
    error: str


class HeadlineVersus(msgspec.Struct, kw_only=True):
    """The best run of a group against one other: how many times more the other spends."""

    run: str
    impl: str | None
    time: float | None  # the other's attention time over the best's (the clock of the headline)
    alloc: float | None  # the other's memory allocated in attention over the best's
    peak: float | None  # the other's largest per-layer peak rise over the best's
    flops_per_s: float | None  # the best's FLOP/s over the other's


class Headline(msgspec.Struct, kw_only=True):
    """One group of runs that differ only in their implementation, in one sentence."""

    group: str  # what the runs share: "builtin, seq 512, float32, training"
    best: str  # the run with the least attention time
    best_impl: str | None
    clock: str  # "device" or "CPU": the time compared
    versus: list[HeadlineVersus]
    sentence: str


class CompareResponse(msgspec.Struct, kw_only=True):
    schema: str = COMPARE_SCHEMA
    baseline: str | None  # null: no readable run
    runs: list[CompareRun]
    errors: list[CompareError]
    headlines: list[Headline] = []  # per group of runs differing only in implementation


class Fit(msgspec.Struct, kw_only=True):
    """value ≈ a·seq^k, fitted by least squares on log-log axes."""

    a: float
    k: float
    r2: float | None  # null with two points: a line through two points says nothing of its fit
    points: int = 0  # the distinct sequence lengths fitted


class ScalingPoint(msgspec.Struct, kw_only=True):
    seq: int
    run: str
    time_us: float  # device time where there is some, else CPU time
    alloc_bytes: float
    peak_bytes: int


class ScalingSeries(msgspec.Struct, kw_only=True):
    label: str
    impl: str  # as in the metadata, "None" where it lacks one
    dtype: str
    model: str
    points: list[ScalingPoint]
    time_fit: Fit | None  # null with fewer than two sequence lengths
    memory_fit: Fit | None


class ScalingResponse(msgspec.Struct, kw_only=True):
    schema: str = SCALING_SCHEMA
    series: list[ScalingSeries]


# -- /ranks ---------------------------------------------------------------------------------
class RankLayer(msgspec.Struct, kw_only=True):
    layer: int
    time_us: float  # forward + backward attention time per step, on the response's clock
    forward_us: float
    backward_us: float


class RankRow(msgspec.Struct, kw_only=True):
    """One worker (rank) of a run; means per step over its spans."""

    rank: int | None
    worker: str
    files: list[str]
    world_size: int | None
    step_us: float
    attention_us: float  # forward + backward, mean per step
    attention_best_us: float  # in the rank's fastest step: the straggler metric (metric_label)
    attention_spread: Spread | None = None  # attention time over the rank's steps (all its spans); null: one step
    collective_us: float
    other_us: float  # step time neither attention nor collectives (can be 0 when they overlap)
    layers: list[RankLayer]
    heads: list[int]  # the global heads this rank's layers cover
    collectives: list[CollectiveStats]
    straggler: bool


class RanksColumn(msgspec.Struct, kw_only=True):
    """One column of the ranks table over every rank (its "All ranks" rows)."""

    column: str  # "attention_best" (the straggler metric), "step", "attention", "collectives", "other"
    mean_us: float
    median_us: float  # the view's one median (median_label)
    min_us: float
    max_us: float
    max_rank: int | None  # the rank with max_us


class RanksLayer(msgspec.Struct, kw_only=True):
    """One layer across ranks (the "All ranks" aggregate)."""

    layer: int
    mean_us: float
    median_us: float  # the view's one median (median_label)
    min_us: float
    max_us: float
    max_rank: int | None
    phases: dict[str, float]  # mean forward time per phase across ranks


class Straggler(msgspec.Struct, kw_only=True):
    rank: int | None
    worker: str
    metric: str  # "attention" (in the rank's fastest step) or "layer L" (its mean per step)
    label: str  # the metric in words: "attention in the fastest step", "layer L, mean per step"
    value_us: float
    median_us: float  # of the metric over ranks (median_label): the table's "median" row
    ratio: float  # value / median


class GlobalHead(msgspec.Struct, kw_only=True):
    layer: int
    head: int
    ranks: list[int]  # ranks that computed this head (several: replicas, e.g. data parallel)
    replicas: int  # workers that computed it (ranks, including workers without a known rank)
    time_us: float  # forward, core phases, mean per step over those workers (heads_label)
    flops: float
    derived: bool


class RanksResponse(msgspec.Struct, kw_only=True):
    schema: str = RANKS_SCHEMA
    run: str
    clock: Literal["cpu", "device"]  # "device" when the traces have kernels, else "cpu"
    metric: str  # the straggler metric: "attention_best" (RankRow.attention_best_us)
    metric_label: str  # that metric in words, clock included, as the CLI and the tab show it
    means_label: str  # the other columns and the layers (means per step), in words
    heads_label: str  # the layer x head map's figure, in words
    median_label: str  # how the one median of the view is computed, in words ("median " + it)
    margin: float  # a straggler is slower than the median over ranks by more than this fraction
    min_gap_us: float  # ... and by at least this much
    ranks: list[RankRow]
    columns: list[RanksColumn]  # the table's columns over every rank, the straggler metric first
    all_ranks: list[RanksLayer]
    stragglers: list[Straggler]
    heads: list[GlobalHead]
    head_count: int  # the width of the layer x head map: the largest global head index + 1
    heads_sharded: bool  # every head computed by exactly one rank (tensor parallelism)
    heads_complete: bool  # each layer's heads are 0..head_count-1, with no gap
    warnings: list[str]  # e.g. two workers claiming one rank
    errors: list[FileError]


#: Each JSON route's body (``/trace`` sends the file itself); any of them may answer 202 with a
#: ``LoadingResponse`` instead, except ``/runs``.
ROUTES: dict[str, type[msgspec.Struct]] = {
    "/runs": RunsResponse,
    "/summary": RunSummary,
    "/ranks": RanksResponse,
    "/drilldown": Drilldown,
    "/memory": MemoryResponse,
    "/timeline": TimelineResponse,
    "/compare": CompareResponse,
    "/scaling": ScalingResponse,
    "202": LoadingResponse,
}
