"""How much a per-step figure differs between the profiled steps: the honesty behind every mean.

Each per-step figure the summary reports is a mean over the profiled steps. ``spread`` says how far
the steps were apart: their range (min–max) with fewer than ``IQR_MIN_STEPS`` steps, else their
interquartile range (a range over many steps is set by its two worst outliers), next to their
median. A figure whose spread is over ``NOISY`` of its median is marked noisy: its mean is not a
figure to compare runs by without more steps (docs/summary.md, "Spread").
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tb_attn_plugin.schema import Spread

__all__ = ["IQR_MIN_STEPS", "NOISY", "per_step_sums", "spread"]

#: From this many steps the spread is the interquartile range, below it the full range.
IQR_MIN_STEPS = 8
#: A spread over this fraction of its median marks the figure noisy.
NOISY = 0.2


def spread(values: Sequence[float] | np.ndarray) -> Spread | None:
    """The spread of one figure's per-step values; None with fewer than two steps (one step has
    no spread to show, which is not the same as none)."""
    v = np.asarray(values, dtype=np.float64)
    if v.size < 2:
        return None
    median = float(np.median(v))
    if v.size >= IQR_MIN_STEPS:
        lo, hi = (float(x) for x in np.percentile(v, [25, 75]))
        kind = "iqr"
    else:
        lo, hi = float(v.min()), float(v.max())
        kind = "range"
    width = hi - lo
    return Spread(median=median, lo=lo, hi=hi, kind=kind, steps=int(v.size),
                  noisy=bool(width > NOISY * median) if median > 0 else width > 0)


def per_step_sums(step_code: np.ndarray, weights: np.ndarray, steps: int) -> np.ndarray:
    """Per-step totals of ``weights`` (float64), ``step_code`` giving each one's step position
    in 0..steps-1; a step without any contributes 0, as it does to the mean."""
    if steps == 0:
        return np.zeros(0)
    return np.bincount(step_code, weights=weights.astype(np.float64), minlength=steps)[:steps]
