"""What the analyses over several runs or ranks return: ``Comparison`` (``/compare``),
``ScalingFits`` (``/scaling``) and ``RankView`` (``/ranks``). ``server.responses.ROUTES`` maps each
route to its type; ``docs/http_api.md`` documents them.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from tb_attn_plugin.types.schema import CollectiveStats, FileError, Fit, Roof, Roofline, Spread

RANKS_SCHEMA = "tb-attn.ranks/2"
COMPARE_SCHEMA = "tb-attn.compare/1"
SCALING_SCHEMA = "tb-attn.scaling/1"


# -- /compare and /scaling ------------------------------------------------------------------
class ComparePhase(msgspec.Struct, kw_only=True):
    cpu_us: float
    device_us: float
    alloc_bytes: float
    flops: float
    calls: float
    bytes: float = 0.0  # the least bytes its forward ops move, summed over layers
    roof: Roof | None = None  # the phase over all layers under the run's roofline (analysis/measures/roofline.py)


class CompareRatio(msgspec.Struct, kw_only=True):
    """Candidate / baseline; null where the baseline's value is 0."""

    attention_cpu_us: float | None
    attention_device_us: float | None
    alloc_bytes: float | None
    peak_bytes: float | None
    flops_per_s: float | None
    decode_us_per_step: float | None = None


class TimeVerdict(msgspec.Struct, kw_only=True):
    """What two runs can tell of their attention times (``analysis.repeats.Judgement``): this run's
    time over its baseline's lies in ``low``..``high``, from ``basis`` ("repeats": ``pairs`` of repeats
    profiled in turns; "drift": one run each, within the drift between runs; "same": the run itself).
    ``decided``: the range lies on one side of 1; ``note``: why not, and how to decide it."""

    basis: str
    low: float
    high: float
    pairs: int
    decided: bool
    note: str


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
    """One run's attention totals per step, from its representative worker (of several ranks, the
    one at the lower median by attention time: the Ranks view's median row)."""

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
    alloc_bytes: float | None  # null: the trace recorded no memory (profile_memory=False)
    peak_bytes: int | None
    sxs_bytes: float
    flops: float  # the forward pass's, per step
    #: attention's FLOPs (forward and backward) over its time, of the same kernels (analysis/common/clock.py): on the
    #: device clock, a phase captured into a graph (no kernel ran) is left out; null without time or work
    flops_per_s: float | None
    ops_per_forward: float
    kernels_per_forward: float
    phases: dict[str, ComparePhase]  # summed over layers, per step
    layers: list[CompareLayer]
    findings: list[str]  # the ids of its findings, each once (far-from-roof comes once per cause)
    finding_chips: list[FindingChip] = []  # the same findings, with severity, title and time
    ratio: CompareRatio  # against ``baseline`` (``compare``); all null in ``run_facts`` alone
    baseline: str | None = None  # the run the ratios are against: its group's baseline (docs/http_api.md)
    group: str = ""  # the like-for-like group the ratios are taken in: "builtin, seq 512, float32, training"
    #: Why the run has no ratios (null where it has them, or is its group's baseline): no run of the
    #: same model, sizes and configuration to set it against.
    unpaired: str | None = None
    time_verdict: TimeVerdict | None = None  # its attention time against its baseline's: what the runs can tell
    attention_spread: Spread | None = None  # attention time over steps, on the headline's clock
    why_slower: list[str] = []  # same model and configuration as its baseline, another impl, slower: why
    decode: CompareDecode | None = None  # a generation's decode steps (summary "generation"), where it has them
    roofline: Roofline | None = None  # the run's peaks and its attention's point (summary "roofline")
    clock: str = "cpu"  # "device" or "cpu": the clock the run is judged by (analysis/common/clock.py)
    device_partial: bool = False  # WorkerSummary.device_partial: judged by CPU time, its device time partial


class CompareDecode(msgspec.Struct, kw_only=True):
    """A generation run's decode steps, per step (one token per sequence), on the run's clock."""

    us_per_step: float  # attention time per decode step
    step_us: float  # the whole step's wall time
    prefill_us: float | None  # attention time of the prefill step
    context: float  # the decode steps' mean context (keys attended)
    kv_cache: str | None
    kv_heads: int | None
    read_bytes_per_token: float  # K and V attention reads per decode step, all layers
    kv_bytes: float = 0.0  # the KV cache, all layers: mean over the decode steps
    kv_bytes_per_layer: float  # the cache at the last decode step, one layer
    launches_per_step: float


class CompareError(msgspec.Struct, kw_only=True):
    run: str
    error: str


class HeadlineVersus(msgspec.Struct, kw_only=True):
    """The best run of a group against one other: how many times more the other spends."""

    run: str
    impl: str | None
    time: float | None  # the other's attention time over the best's (the clock of the headline)
    time_decided: bool = True  # whether the runs can tell (``TimeVerdict.decided``): else the ratio is drift's
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


class Comparison(msgspec.Struct, kw_only=True):
    schema: str = COMPARE_SCHEMA
    baseline: str | None  # null: no readable run
    runs: list[CompareRun]
    errors: list[CompareError]
    headlines: list[Headline] = []  # per group of runs differing only in implementation


class ScalingPoint(msgspec.Struct, kw_only=True):
    seq: int  # the sequence length, or for a decode series the mean context of the decode steps
    run: str
    time_us: float  # device time where there is some, else CPU time
    alloc_bytes: float | None  # null: the trace recorded no memory
    peak_bytes: int | None


class ScalingSeries(msgspec.Struct, kw_only=True):
    label: str
    impl: str  # as in the metadata, "None" where it lacks one
    dtype: str
    model: str
    points: list[ScalingPoint]
    mask: str | None = None  # the run's --mask, where it has one
    expect: str | None = None  # what the exponent should be for this mask and implementation
    time_fit: Fit | None  # null with fewer than two sequence lengths
    memory_fit: Fit | None
    #: "seq": attention time per step and memory allocated against the sequence length; "context": a
    #: generation's decode attention time per decode step and its KV cache (all layers) against the context
    x: str = "seq"


class ScalingFits(msgspec.Struct, kw_only=True):
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


class RankView(msgspec.Struct, kw_only=True):
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
    ranks_total: int = 0  # the workers (ranks) the run has in all, selected or not
    ranks_selected: str | None = None  # the rank selection read (normalized, "0-7,512"); None: every rank
