"""What ``analysis.strategies`` returns (``StrategyTable``, served at ``/strategies``): attention
strategies side by side, time against error. Documented in ``docs/http_api.md``; times are
microseconds, memory bytes."""

from __future__ import annotations

import msgspec

from tb_attn_plugin.types.results import Fit, TimeVerdict
from tb_attn_plugin.types.schema import Finding, Spread

__all__ = [
    "STRATEGIES_SCHEMA",
    "Accuracy",
    "Crossover",
    "StrategyGroup",
    "StrategyRow",
    "StrategySeries",
    "StrategyTable",
]

STRATEGIES_SCHEMA = "tb-attn.strategies/1"


class Accuracy(msgspec.Struct, kw_only=True):
    """The run's error against exact fp32 attention (runner/accuracy.py), worst layer."""

    rel_l1: float  # Σ|y − y_ref| / Σ|y_ref|: the mean relative error
    max_abs: float
    cosine: float
    loss_diff: float | None  # the model's loss minus the exact fp32 model's, on the same batch


class StrategyRow(msgspec.Struct, kw_only=True):
    """One run: an implementation at one sequence length."""

    run: str
    strategy: str  # the implementation, with its options: "performer M=64", "sdpa int8 proj"
    backend: str  # what the trace shows ran (analysis/ops/backend.py)
    exact: bool  # computes softmax attention exactly (not linear, random-feature or quantized)
    seq: int
    time_us: float  # attention per step, forward and backward, on the group's clock
    peak_bytes: int  # the largest rise of allocated memory over a block's start
    alloc_bytes: float
    sxs_bytes: float  # (B, H, Sq, Sk) score tensors allocated per step; 0 for linear attention
    flops: float  # forward, per step
    iops: float  # integer operations (int8 GEMMs), per step
    quant_share: float | None  # quantize + dequantize phases over the block's time; null: not quantized
    spread: Spread | None = None  # the attention time's steps (min-max or IQR); null with one step
    noisy: bool = False  # its steps spread over 20% of their median: no crossover or finding rests on it
    accuracy: Accuracy | None  # null: not measured (older runs, foreign traces, models other than builtin)
    speedup: float | None  # the baseline's time at this length over this one's; null: no baseline run there
    pareto: bool  # on the Pareto front of speed-up against error at this length
    #: This run's time against the baseline's at its length, as far as the two can tell
    #: (``analysis.repeats``): a speed-up drift between runs may explain is not ``decided``.
    speedup_verdict: TimeVerdict | None = None


class Crossover(msgspec.Struct, kw_only=True):
    """Where a strategy's fitted time curve meets the baseline's: a·Lᵏ = a_b·L^k_b."""

    seq: float | None  # the length where the two fits are equal; null when the exponents are about equal
    faster: str  # "above" or "below" that length, "always" or "never" (parallel fits)
    extrapolated: bool  # the length lies outside the lengths both were measured at
    text: str


class StrategySeries(msgspec.Struct, kw_only=True):
    strategy: str
    exact: bool
    seqs: list[int]
    time_us: list[float]
    fit: Fit | None  # time ≈ a·seqᵏ; null with fewer than two lengths
    crossover: Crossover | None  # against the baseline; null for the baseline, without both fits, or from fits
    # of fewer than three lengths or of noisy runs (``crossover_note`` says which)
    crossover_note: str = ""


class StrategyGroup(msgspec.Struct, kw_only=True):
    """Runs that differ only in implementation (and its options) and sequence length."""

    label: str  # the rest of their configuration, in words
    clock: str  # "device" where every run has kernels, else "cpu"
    baseline: str | None  # the strategy speed-ups and crossovers are against
    strategies: list[str]
    rows: list[StrategyRow]  # by strategy, then length
    series: list[StrategySeries]
    findings: list[Finding]  # below-crossover and accuracy-cost (docs/findings.md)


class StrategyTable(msgspec.Struct, kw_only=True):
    schema: str = STRATEGIES_SCHEMA
    rel_tol: float  # accuracy-cost: a relative error over this...
    loss_tol: float  # ...or a loss moved by more than this
    groups: list[StrategyGroup]
