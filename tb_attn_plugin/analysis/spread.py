"""How much a per-step figure differs between the profiled steps: the honesty behind every mean.

Each per-step figure the summary reports is a mean over the profiled steps. ``spread`` says how far
the steps were apart: their range (min–max) with fewer than ``IQR_MIN_STEPS`` steps, else their
interquartile range (a range over many steps is set by its two worst outliers), next to their
median. A figure whose spread is over ``NOISY`` of its median is marked noisy: its mean is not a
figure to compare runs by without more steps (docs/summary.md, "Spread").
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from tb_attn_plugin.schema import Spread

__all__ = ["IQR_MIN_STEPS", "NOISY", "per_step_sums", "quantile", "spread"]

#: From this many steps the spread is the interquartile range, below it the full range.
IQR_MIN_STEPS = 8
#: A spread over this fraction of its median marks the figure noisy.
NOISY = 0.2


def spread(values: Sequence[float] | np.ndarray) -> Spread | None:
    """The spread of one figure's per-step values; None with fewer than two steps (one step has
    no spread to show, which is not the same as none)."""
    v = np.sort(np.asarray(values, dtype=np.float64)).tolist()
    n = len(v)
    if n < 2:
        return None
    median = quantile(v, 0.5)
    if n >= IQR_MIN_STEPS:
        lo, hi = quantile(v, 0.25), quantile(v, 0.75)
        kind = "iqr"
    else:
        lo, hi = v[0], v[-1]
        kind = "range"
    width = hi - lo
    return Spread(median=median, lo=lo, hi=hi, kind=kind, steps=n,
                  noisy=bool(width > NOISY * median) if median > 0 else width > 0)


def quantile(ordered: list[float], q: float) -> float:
    """The ``q`` quantile of sorted values, exactly as ``np.percentile(v, 100 * q)`` (its
    default, linear method) and ``np.median`` compute it, in a few microseconds instead of a
    hundred: a summary takes hundreds of spreads of a few values each."""
    n = len(ordered)
    if q == 0.5:
        mid = n // 2
        return ordered[mid] if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2
    at = q * (n - 1)
    below = math.floor(at)
    a, b = ordered[below], ordered[min(below + 1, n - 1)]
    t = at - below
    return b - (b - a) * (1 - t) if t >= 0.5 else a + (b - a) * t


def per_step_sums(step_code: np.ndarray, weights: np.ndarray, steps: int) -> np.ndarray:
    """Per-step totals of ``weights`` (float64), ``step_code`` giving each one's step position
    in 0..steps-1; a step without any contributes 0, as it does to the mean."""
    if steps == 0:
        return np.zeros(0)
    return np.bincount(step_code, weights=weights.astype(np.float64), minlength=steps)[:steps]
