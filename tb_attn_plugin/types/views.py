"""What the analyses of one trace return (``analysis.figures``, ``analysis.drilldown``,
``analysis.views``): a run's figures for the runs list, the drill-down tree, the memory curve and
the timeline slice. msgspec Structs; every field is always present in the JSON. Times are
microseconds, memory bytes."""

from __future__ import annotations

from typing import Literal

import msgspec

from tb_attn_plugin.types.schema import Spread


class RunFigures(msgspec.Struct, kw_only=True):
    """A parsed run's headline figures, per step, from its representative worker (of several, the
    one at the lower median by attention time, the Ranks view's median row; with one worker, that
    one): the same worker and figures as ``/compare``'s. ``analysis/cross_run/figures.py`` computes them."""

    clock: Literal["cpu", "device"]  # "device" where the worker's attention launched kernels, else "cpu"
    attention_us: float  # attention time per step, forward + backward, mean over the profiled steps, on ``clock``
    attention_min_us: float | None  # the fastest profiled step's attention time; null without ProfilerStep steps
    attention_max_us: float | None  # the slowest profiled step's attention time
    attention_share: float | None  # attention's share of the step time on ``clock``; null without step time
    peak_bytes: int  # the largest per-layer peak: the rise of allocated memory over a layer's start (Compare's "peak")
    backend: str  # the SDPA backend that ran, "mixed" across layers, or the implementation found
    steps: int  # profiled steps (a generation's prefill and decode steps: WorkerSummary.step_count)
    decode_steps: int | None = None  # per "decode": the decode steps the figures are over
    worker: str  # the worker the figures come from
    workers: int  # trace files read: the representative worker is taken from them
    unreadable: int  # trace files of the run that could not be read, left out of the figures
    attention_spread: Spread | None = None  # the summary's spread of attention time on ``clock`` (its noisy mark)
    #: "step": the figures above are per profiled step; "decode": a generation's, per decode step (one
    #: token per sequence): attention_us, its min, max and spread over the decode steps alone, since a
    #: mean over a prefill and its decode steps describes neither
    per: Literal["step", "decode"] = "step"
    prefill_us: float | None = None  # a generation's prefill step: its attention time on ``clock``
    core_only: int = 0  # layers of the worker found by their core alone (LayerStats.core_only): figures of the core
    memory_recorded: bool = True  # the worker's trace has memory events (WorkerSummary.memory_recorded); false: no peak
    device_partial: bool = False  # WorkerSummary.device_partial: the figures are CPU time, device time partial


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


class DrillTree(msgspec.Struct, kw_only=True):
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


class MemoryCurve(msgspec.Struct, kw_only=True):
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


class TimelineSlice(msgspec.Struct, kw_only=True):
    step: int | None
    start_us: float
    end_us: float
    truncated: bool  # more than ``limit`` events: the longest were kept
    total_events: int  # before truncation
    tracks: list[TimelineTrack]
    names: list[str]
    phases: list[str]
    events: TimelineEvents
