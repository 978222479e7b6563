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

from tb_attn_plugin.schema import CollectiveStats, FileError, RunSummary

__all__ = [
    "RANKS_SCHEMA",
    "ROUTES",
    "RUNS_SCHEMA",
    "CompareResponse",
    "Drilldown",
    "LoadingResponse",
    "MemoryResponse",
    "RanksResponse",
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


class RunEntry(msgspec.Struct, kw_only=True):
    run: str
    group: str  # the run's path without its last part
    metadata: dict[str, object] | None  # the runner's tb_attn_run.json (docs/runner.md); any field may be missing
    status: RunStatus  # "running": the runner's metadata says the run is still being written
    error: str | None  # with status "error": why no trace could be read
    workers: list[WorkerEntry]


class RunsResponse(msgspec.Struct, kw_only=True):
    schema: str = RUNS_SCHEMA
    logdir: str
    runs: list[RunEntry]
    listing_error: str | None  # the last listing failed (a storage error): ``runs`` is the one before
    retry_after_s: float | None = None  # refresh answered by an older listing (rate limit): ask again in s


# -- /drilldown -----------------------------------------------------------------------------
class DrillOp(msgspec.Struct, kw_only=True):
    name: str
    calls: float
    cpu_us: float
    self_us: float
    top_level: bool  # not inside another op


class DrillKernel(msgspec.Struct, kw_only=True):
    name: str
    calls: float
    device_us: float


class ProfilerLink(msgspec.Struct, kw_only=True):
    """Where torch-tb-profiler's tab shows the same trace."""

    plugin: str
    run: str
    worker: str
    span: str | None


class Drilldown(msgspec.Struct, kw_only=True):
    """The ops and kernels inside one layer and phase, means per step. ``analysis.views`` fills
    the figures, the service the links to the trace file."""

    layer: int
    phase: str | None
    backward: bool
    step_count: int
    ops: list[DrillOp]
    kernels: list[DrillKernel]
    trace_file: str = ""
    download: str = ""  # relative URL of the trace file
    profiler: ProfilerLink | None = None  # set when torch-tb-profiler's tab is installed


# -- /memory --------------------------------------------------------------------------------
class MemoryScope(msgspec.Struct, kw_only=True):
    layer: int
    phase: str | None
    start_us: float
    end_us: float


class LayerPeak(msgspec.Struct, kw_only=True):
    layer: int
    peak_bytes: int


class MemoryResponse(msgspec.Struct, kw_only=True):
    step: int | None
    device: Literal["cpu", "cuda"]
    start_us: float
    end_us: float
    points: list[tuple[float, float]]  # (time, allocated bytes), at most 4000, min/max preserving
    scopes: list[MemoryScope]
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
    ratio: CompareRatio  # against the baseline (``compare``); all null in ``run_facts`` alone
    why_slower: list[str] = []  # same model and configuration as the baseline, another impl, slower: why


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
