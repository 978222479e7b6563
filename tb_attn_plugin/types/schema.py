"""Summary types: what the analysis returns, the CLI prints and ``/summary`` serves (the other
analyses' results are in ``results``, ``strategies`` and ``views``; the bodies only routes send
are in ``server.responses``).

Mirrors ``docs/summary.md`` (the JSON schema, versioned as ``SUMMARY_SCHEMA``). Times are
microseconds, memory bytes, FLOPs counts; every per-phase, per-layer and per-head figure is a
mean over the profiled steps (``step_count`` of them).
"""

# Not split (over 400 lines): the summary's types are one schema (docs/summary.md), versioned as a
# whole; split by route they would drift apart.

from __future__ import annotations

import msgspec

__all__ = [
    "SPREAD_KEYS",
    "SUMMARY_SCHEMA",
    "AttnStats",
    "Backward",
    "CollectiveStats",
    "Evidence",
    "FileError",
    "Finding",
    "Fit",
    "Generation",
    "GenerationPhase",
    "HeadAttention",
    "HeadStats",
    "LayerMask",
    "LayerStats",
    "PhaseStats",
    "Roof",
    "Roofline",
    "RunSummary",
    "ServingBatch",
    "Spread",
    "StepStats",
    "TokenStats",
    "WorkerSummary",
]

SUMMARY_SCHEMA = "tb-attn.summary/1"


class Spread(msgspec.Struct, kw_only=True, frozen=True):
    """How far one per-step figure's steps were apart (analysis/common/spread.py, docs/summary.md)."""

    median: float  # of the per-step values (the figure itself is their mean)
    lo: float  # the smallest step ("range") or the 25th percentile ("iqr")
    hi: float  # the largest step ("range") or the 75th percentile ("iqr")
    kind: str  # "range" below 8 steps, else "iqr"
    steps: int
    noisy: bool  # hi - lo is over 20% of the median


#: The figures a ``spread`` dict can hold, by the names the tab's metrics use: the time figures of a
#: layer or phase (forward and backward, both clocks) and a worker's step and attention times.
SPREAD_KEYS = ("cpu_us", "device_us", "bwd_cpu_us", "bwd_device_us",
               "step_cpu_us", "step_device_us", "attention_cpu_us", "attention_device_us")


class Backward(msgspec.Struct, kw_only=True, frozen=True):
    """Backward work attributed to a phase or layer through autograd sequence numbers."""

    calls: float = 0.0
    cpu_us: float = 0.0
    device_us: float = 0.0
    flops: float = 0.0


class Roof(msgspec.Struct, kw_only=True, frozen=True):
    """Where a phase, a layer or a run's attention sits under the hardware's roofline
    (analysis/measures/roofline.py, docs/summary.md "Roofline"): forward work per step, on the clock of
    ``Roofline.clock``. A roofline is an upper bound, not a prediction."""

    dtype: str | None  # the peak class its FLOPs ran in ("fp32", "bf16", ...), None: no FLOPs
    time_us: float  # device time, or CPU self time on a CPU trace
    launches: float  # kernels (device) or top-level ops (CPU)
    intensity: float | None  # FLOPs (and integer ops) per byte moved; None: no bytes modeled
    flops_per_s: float  # achieved (integer ops of int8 GEMMs included, at the int8 peak)
    bytes_per_s: float  # achieved
    ceiling: float | None  # attainable FLOP/s: min(peak FLOP/s, intensity x peak bytes/s); None: no peak known
    share: float | None  # the time at the roof over the time taken (= achieved / ceiling where there are FLOPs)
    verdict: str  # compute-, memory-, latency-bound, "no peak known", "no bytes modeled", "above its ceiling"
    lower_bound: bool = False  # some ops moved data with no bytes formula: bytes are a lower bound


class Roofline(msgspec.Struct, kw_only=True, frozen=True):
    """The peaks a trace's roofline is drawn with, and the run's attention as one point."""

    device: str  # what the peaks are of: "NVIDIA H100 80GB HBM3", "cpu"
    source: str  # where they come from: the table's row and its source, the runner's probes, the CLI's flags
    clock: str  # "device" or "cpu" (CPU self time)
    peak_flops: dict[str, float]  # peak FLOP/s per peak class ("fp32", "tf32", "bf16", "fp16", "fp8", "int8")
    peak_bytes_per_s: float | None
    launch_us: float  # the per-call floor the latency-bound verdict uses
    note: str = ""  # why there is no peak, or what the peaks are not
    attention: Roof | None = None  # every layer's forward attention as one point
    partial: bool = False  # the point leaves out phases captured into a CUDA/HIP graph (ran no kernel here)


class PhaseStats(msgspec.Struct, kw_only=True, frozen=True):
    phase: str  # one of scopes.PHASES, or "other": in the block but in no phase
    calls: float  # scope instances per step
    cpu_us: float  # wall time of the phase on its CPU thread
    cpu_self_us: float  # time in the ops themselves, without their children and dispatch gaps
    device_us: float  # kernels, memcpy and memset launched from the phase
    kernels: float  # device events per step
    kernel_names: list[str]  # the most expensive first, at most 5
    ops: list[str]  # the most expensive top-level ops first, at most 5
    op_count: float = 0.0  # top-level ops per step (dispatcher calls the phase makes)
    flops: float
    flops_per_s: float  # over device time where there is some, else CPU time
    iops: float = 0.0  # integer operations (int8 GEMMs: 2·M·K·N), apart from FLOPs
    alloc_bytes: float
    freed_bytes: float
    peak_bytes: int  # largest rise of allocated memory over the phase's start, across its calls
    sxs_bytes: float  # allocations of (B, H, Sq, Sk) score tensors (scores, probabilities)
    sxs_allocs: float
    sxs_mask_bytes: float = 0.0  # masks of the scores' shape: bool, dropout noise, built masks
    sxs_mask_allocs: float = 0.0
    backward: Backward
    spread: dict[str, Spread] = {}  # per time figure (SPREAD_KEYS), with two or more steps
    bytes: float = 0.0  # the least bytes its forward ops move (analysis/measures/traffic.py)
    unmodeled_ops: float = 0.0  # ops per step that move data with no bytes formula (bytes: a lower bound)
    dtype: str | None = None  # the peak class of its FLOPs, None: no FLOPs
    roof: Roof | None = None  # null: no roofline (no time, or no FLOPs and no bytes)
    captured: bool = False  # its kernels were captured into a CUDA/HIP graph, not run: device figures unavailable


class HeadStats(msgspec.Struct, kw_only=True, frozen=True):
    head: int
    derived: bool  # True: split evenly from the layer (FLOPs and bytes exact, time an even share)
    cpu_us: float
    device_us: float
    flops: float
    alloc_bytes: float
    sxs_bytes: float
    spread: dict[str, Spread] = {}  # cpu_us and device_us over steps, measured heads only


class LayerMask(msgspec.Struct, kw_only=True, frozen=True):
    """A layer's attention mask and what it saved (analysis/measures/sparsity.py): FLOPs per forward
    call of the block, times per profiled step, the core's phases only."""

    spec: str  # the mask (tb_attn_plugin.vocab.masks grammar), e.g. "sliding:256"
    kept: float  # share of (query, key) pairs kept
    blocks: float | None  # share of 128x128 blocks holding any kept pair (what flex_attention computes)
    dense_flops: float  # the core with every pair kept
    mask_flops: float  # the work the mask asks for: dense_flops * kept
    work_flops: float  # the work that ran: counted ops, or the mask's for compiled flex
    dense_work: bool  # every score computed and masked afterwards (naive, SDPA, eager flex): no saving
    core_us: float  # the core's time (device where there is some, else CPU)
    dense_equiv_us: float  # the core's time for the dense work at its own rate (compiled flex: core time / blocks)
    local: bool = False  # a local (windowed) layer of a model that mixes local and global layers


class LayerStats(msgspec.Struct, kw_only=True, frozen=True):
    layer: int
    module: str | None
    backend: str
    backend_evidence: list[str]
    inferred: bool  # found without our scopes (module names, SDPA ops, op patterns)
    core_only: bool = False  # inferred from its core alone (no projection found around it): figures cover the core only
    calls: float
    cpu_us: float
    device_us: float
    flops: float
    flops_per_s: float
    iops: float = 0.0  # integer operations (int8 GEMMs), apart from FLOPs
    alloc_bytes: float
    peak_bytes: int
    sxs_bytes: float  # 0 for linear attention: it never forms (Sq, Sk) scores (its chunks are C×C)
    sxs_mask_bytes: float = 0.0
    score_tensor_bytes: int = 0  # one (B, H, Sq, Sk) score tensor: its shape times its element size
    score_shape: list[int] = []  # (B, H, Sq, Sk) of that tensor, from the ops' shapes
    heads_count: int | None
    phases: list[PhaseStats]
    heads: list[HeadStats]
    backward: Backward
    spread: dict[str, Spread] = {}  # per time figure (SPREAD_KEYS), with two or more steps
    mask: LayerMask | None = None  # with a mask in the run metadata (analysis/measures/sparsity.py)
    bytes: float = 0.0  # its phases' bytes moved
    roof: Roof | None = None


class StepStats(msgspec.Struct, kw_only=True, frozen=True):
    step: int
    cpu_us: float
    device_us: float
    attention_cpu_us: float
    attention_device_us: float
    attention_comm_cpu_us: float = 0.0  # of attention_cpu_us: its collectives (analysis/attribution/collectives.py)
    attention_comm_device_us: float = 0.0  # of attention_device_us: collective kernels attributed to attention


class CollectiveStats(msgspec.Struct, kw_only=True, frozen=True):
    """One kind of collective (analysis/attribution/collectives.py), means per step."""

    name: str  # "all_reduce", "all_gather", "broadcast", ... or "collective"
    calls: float
    cpu_us: float  # the calling thread's time in the calls (only the enqueue, for async ones)
    device_us: float  # the collective kernels' time


class Fit(msgspec.Struct, kw_only=True, frozen=True):
    """value ≈ a·xᵏ (x: a sequence or context length), fitted by least squares on log-log axes."""

    a: float
    k: float
    r2: float | None  # null with two points: a line through two points says nothing of its fit
    points: int = 0  # the distinct lengths fitted


class TokenStats(msgspec.Struct, kw_only=True, frozen=True):
    """One step of a generation (analysis/measures/generation.py): the prefill, or one decode token for
    each sequence of the batch. Times on the step's own clock: device where there is one."""

    step: int
    role: str  # "prefill" or "decode"
    context: int  # the keys attended: the KV cache's length with this step's tokens
    queries: int  # query tokens per sequence (1 for decode), from the shapes; 0 where none were recorded
    step_us: float  # the profiler step's wall time on the CPU
    attention_us: float  # every attention block (device time where there is some, else CPU)
    core_us: float  # the phases that read K and V (q·kᵀ to attn·v, or the fused call)
    kv_cache_us: float  # appending to the KV cache (a dynamic cache's copy included)
    kv_bytes: float  # the KV cache's K and V, all layers (from shapes: the tensors attention is given)
    read_bytes: float = 0.0  # K and V the core reads, all layers: kv_bytes, or their expansion to every query head
    kv_alloc_bytes: float  # memory allocated in the kv_cache phase (memory events)
    launches: float  # attention's kernels (device) or top-level ops (CPU)
    flops: float  # attention's FLOPs, projections included


class GenerationPhase(msgspec.Struct, kw_only=True, frozen=True):
    """The prefill or the decode steps of a generation: means per step, and the per-layer table
    over those steps only."""

    steps: int
    step_us: float
    attention_us: float
    core_us: float
    kv_cache_us: float
    kv_bytes: float
    launches: float
    flops: float
    layers: list[LayerStats]
    roof: Roof | None = None  # attention over these steps under the roofline (their layers' roofs added up)


class Generation(msgspec.Struct, kw_only=True, frozen=True):
    """A trace of generation steps (docs/summary.md, "Generation")."""

    source: str  # "scopes" (the runner's step scopes) or "shapes" (queries of one token: decode)
    clock: str  # "device" or "cpu": the clock of every time below
    kv_cache: str | None  # "static" or "dynamic" (metadata, or a cat in the kv_cache phase), None: unknown
    prompt_len: int | None
    batch: int | None  # sequences per step, from K's shape
    heads: int | None  # query heads, from q's shape
    kv_heads: int | None  # K's heads as attention reads them
    head_dim: int | None
    kv_dtype: str | None
    prefill: GenerationPhase | None
    decode: GenerationPhase | None
    tokens: list[TokenStats]
    fit: Fit | None  # decode attention time per step ≈ a·contextᵏ, over the decode steps; null: see fit_note
    fit_note: str = ""  # why there is no fit (contexts spanning under 2x), or what a poor one (R² < 0.5) means, or ""
    per_key_us: float | None = None  # decode attention time per step: slope of a straight line, per key
    fixed_us: float | None = None  # ... and its intercept: the per-step cost that does not grow
    kv_bytes_per_layer: float = 0.0  # K and V at the last decode step, one layer
    kv_bytes_per_head: float = 0.0  # ... one layer, one KV head
    kv_bytes_per_token: float = 0.0  # the cache's growth per decode step, all layers
    kv_memory: str = "not checked"  # the shapes' bytes against the memory events: "agrees", "differs: ..."
    realloc_bytes_per_token: float = 0.0  # decode: bytes the kv_cache phase allocates (a dynamic cache's copy)
    read_bytes_per_token: float = 0.0  # decode: K and V the core reads, all layers (TokenStats.read_bytes)
    achieved_bytes_per_s: float = 0.0  # read_bytes_per_token over the core's time (median over decode steps)
    reference_bytes_per_s: float | None = None  # the machine's copy bandwidth (metadata "peaks"), None: unknown
    reference: str = ""  # what reference_bytes_per_s is


class Evidence(msgspec.Struct, kw_only=True, frozen=True):
    layers: list[int]
    ops: list[str]  # op names behind the finding, most expensive first, at most 8
    kernels: list[str]  # kernel names, most expensive first, at most 8
    time_us: float  # per step: the time the finding is about
    bytes: float  # per step, where memory is concerned (else 0)
    details: dict[str, float | int | str]  # rule-specific figures


class Finding(msgspec.Struct, kw_only=True, frozen=True):
    id: str  # stable, e.g. "hidden-copy"
    severity: str  # one of SEVERITIES
    title: str
    explanation: str  # what the trace shows and why it matters, with its numbers
    suggestion: str  # the change to make
    evidence: Evidence


#: A finding's severities, the most severe first; "info" asks for no change.
SEVERITIES = ("high", "medium", "low", "info")


def finding_order(f: Finding) -> tuple[int, float, str, list[int]]:
    """The order findings are listed in, everywhere: the most severe first, then the most time, so
    that the first finding that asks for a change is the headline's top finding (``overview``)."""
    return SEVERITIES.index(f.severity), -f.evidence.time_us, f.id, f.evidence.layers


class ServingBatch(msgspec.Struct, kw_only=True, frozen=True):
    """What a serving engine batched, per profiled step, from its iteration annotations
    (analysis/attribution/batch.py, docs/production.md): requests and tokens of each kind, and the KV cache."""

    annotation: str  # the first annotation's name: the evidence
    iterations: float  # engine iterations
    prefill_requests: float  # requests with no token generated yet ("context" in vLLM's words)
    prefill_tokens: float
    decode_requests: float
    decode_tokens: float
    pairs: float | None  # (query, key) pairs one layer's cores attend, causal; null: the annotations lack the sums
    fewest_pairs: float  # the fewest pairs the batches can attend (equal prefills, no cached prefix)
    decode_keys: float | None  # keys decode requests read (their contexts); null: not annotated
    kv_bytes_per_token: float | None  # one layer's KV cache per token (k and v at the cache's element size)
    kv_dtype: str | None  # the cache's element type, from the KV write op
    decode_kv_bytes: float | None  # the KV cache decode reads, all layers: decode_keys x layers x kv_bytes_per_token
    decode_core_us: float | None = None  # the cores' device time per step, where every iteration is decode only
    decode_roof_us: float | None = None  # decode_kv_bytes at the peak memory bandwidth (analysis/measures/roofline.py)
    sentences: list[str] = []  # what the figures above say, for the CLI and the tab (analysis/attribution/batch.py)


class WorkerSummary(msgspec.Struct, kw_only=True, frozen=True):
    schema: str = SUMMARY_SCHEMA
    file: str
    worker: str
    span: str | None
    device: str  # "cpu" or "cuda" (kernels seen)
    inferred: bool
    backend: str  # the layers' backend, or "mixed"
    steps: list[int]
    step_count: int
    step_cpu_us: float
    step_device_us: float
    attention_cpu_us: float
    attention_device_us: float
    attention_share_cpu: float | None
    attention_share_device: float | None
    layers: list[LayerStats]
    per_step: list[StepStats]
    diagnostics: dict[str, int]
    notes: list[str]
    findings: list[Finding] = msgspec.field(default_factory=list)  # analysis/findings/findings.py, docs/findings.md
    rank: int | None = None  # the trace's distributedInfo rank, else a rank in the worker name
    world_size: int | None = None
    collectives: list[CollectiveStats] = msgspec.field(default_factory=list)
    spread: dict[str, Spread] = {}  # step and attention time (SPREAD_KEYS), with two or more steps
    headline: str = ""  # where attention time goes, the most its top finding saves (analysis/measures/overview.py)
    generation: Generation | None = None  # prefill and decode steps, if any (analysis/measures/generation.py)
    roofline: Roofline | None = None  # the peaks, the run's point; null: no attention (analysis/measures/roofline.py)
    gpu: str | None = None  # device "cuda": the platform and the trace's device name, "ROCm · AMD Instinct MI300X"
    memory_recorded: bool = True  # the trace has memory events (profile_memory=True); false: memory figures read 0
    serving: ServingBatch | None = None  # a serving engine's batches, where annotated (analysis/attribution/batch.py)
    device_partial: bool = False  # attention kernels missing (graphs): device time partial (analysis/common/clock.py)


class FileError(msgspec.Struct, kw_only=True, frozen=True):
    file: str
    error: str


class HeadAttention(msgspec.Struct, kw_only=True, frozen=True):
    """One head's attention statistics (runner/attn_stats.py), and what they make it."""

    layer: int
    head: int
    values: dict[str, float]  # entropy, sink_1, sink_4, window_W..., top_32, distance (those recorded)
    local: bool  # its mass within AttnStats.window tokens is at least AttnStats.threshold
    sink: bool  # its mass on the first 4 tokens (sink_4) is at least AttnStats.sink_mass


class AttnStats(msgspec.Struct, kw_only=True, frozen=True):
    """A run's per-head attention statistics, from its TensorBoard event files (docs/summary.md)."""

    step: int  # the newest step recorded (training steps when recorded during training)
    weights: str  # "checkpoint" or "random" (the runner's metadata), "unknown" for anyone else's
    stats: list[str]  # the statistics recorded
    window: int | None  # W of the local verdict (the largest recorded up to 256); null: none recorded (S <= 64)
    threshold: float  # the share of mass within W that makes a head local (0.99 by default)
    sink_mass: float = 0.5  # the mass on the first 4 tokens that makes a head a sink
    heads: list[HeadAttention]
    files: list[str] = []  # the event files read
    note: str = ""  # what the statistics mean here (random weights: nothing)


class RunSummary(msgspec.Struct, kw_only=True, frozen=True):
    schema: str = SUMMARY_SCHEMA
    run: str
    metadata: dict[str, object] | None
    workers: list[WorkerSummary]
    errors: list[FileError]
    attn_stats: AttnStats | None = None  # per-head attention statistics, where the run's event files hold some
