"""The statistics every view takes, in one place: the median, the lower median, quantiles, the
spread of a per-step figure, and which rank's figures stand for a run of several ranks.

Two medians, two meanings. ``median`` is the ordinary median of measurements (rates, per-layer
figures): the mean of the two middle values when their count is even. ``median_low`` is always one
of the values: the lower of the two middle ones. A run of several ranks is described by one rank,
``representative_worker``: the one at the lower median of the ranks by attention time, which is
also the Ranks view's median row (``ranks.median_over_ranks``), so every view names the same rank
(docs/summary.md, "A run of several ranks").

Each per-step figure the summary reports is a mean over the profiled steps. ``spread`` says how far
the steps were apart: their range (min–max) with fewer than ``IQR_MIN_STEPS`` steps, else their
interquartile range (a range over many steps is set by its two worst outliers), next to their
median. A figure whose spread is over ``NOISY`` of its median is marked noisy: its mean is not a
figure to compare runs by without more steps (docs/summary.md, "Spread").
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TypeVar

import numpy as np

from tb_attn_plugin.analysis.common.clock import on_device
from tb_attn_plugin.types.schema import Fit, RunSummary, Spread, WorkerSummary

__all__ = ["IQR_MIN_STEPS", "MIN_FIT_QUALITY_POINTS", "NOISY", "fit_power", "lower_middle", "median", "median_low",
           "per_step_sums", "percentiles",
           "quantile", "representative_of", "representative_worker", "spread"]

#: From this many steps the spread is the interquartile range, below it the full range.
IQR_MIN_STEPS = 8
#: A spread over this fraction of its median marks the figure noisy.
NOISY = 0.2

_T = TypeVar("_T")


def median(values: Iterable[float]) -> float:
    """The ordinary median of measurements: the middle value, or the mean of the two middle ones
    (as ``np.median``, without its cost on a few values, and without importing ``statistics``,
    which the CLI would pay for on every run). Raises ValueError for no values."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("median of no values")
    return quantile(ordered, 0.5)


def median_low(values: Iterable[float]) -> float:
    """The lower median: the middle value, or the lower of the two middle ones, so always one of
    the values (as ``statistics.median_low``). Raises ValueError for no values."""
    return lower_middle(sorted(values))


def lower_middle(ordered: Sequence[_T]) -> _T:
    """The item at the lower median of an ordered sequence: its middle item, or the first of its
    two middle items. Raises ValueError for an empty one."""
    if not ordered:
        raise ValueError("median of no values")
    return ordered[(len(ordered) - 1) // 2]


def representative_worker(run: RunSummary) -> WorkerSummary:
    """The trace whose figures stand for ``run``: the one at the lower median of the run's traces
    by attention time per step (device time where the run has device kernels, else CPU time; ties
    in rank order), and with one trace, that one. With two ranks it is the faster one. Traces in
    which no attention was found are left out while any other has some: a rank with nothing to
    measure is no typical rank, and its figures would all read 0.

    Why the lower median: a run's figure is what its typical rank costs. A straggler is the Ranks
    view's business (it names one against the lower median over ranks), and a mean or an upper median would
    let the straggler into the run's figure, half or whole. The Ranks view's "median" row takes
    the lower median of every rank too, so (one trace per rank) its attention column is this
    trace's figure: the runs list, Compare, Strategies, why-slower, the gate and the Ranks view all
    name one rank. Raises ValueError for a run without traces."""
    return representative_of(run.workers)


def representative_of(workers: Sequence[WorkerSummary]) -> WorkerSummary:
    """``representative_worker`` of these traces (one repeat's, say). Raises ValueError for none."""
    if not workers:
        raise ValueError("no traces")
    device = any(on_device(w) for w in workers)
    measured = [w for w in workers if w.layers] or list(workers)
    return lower_middle(sorted(measured, key=lambda w: (
        w.attention_device_us if device else w.attention_cpu_us,
        w.rank is None, w.rank if w.rank is not None else 0, w.worker, w.span or "", w.file)))


def spread(values: Sequence[float] | np.ndarray) -> Spread | None:
    """The spread of one figure's per-step values; None with fewer than two steps (one step has
    no spread to show, which is not the same as none)."""
    v = np.sort(np.asarray(values, dtype=np.float64)).tolist()
    n = len(v)
    if n < 2:
        return None
    middle = quantile(v, 0.5)
    if n >= IQR_MIN_STEPS:
        lo, hi = quantile(v, 0.25), quantile(v, 0.75)
        kind = "iqr"
    else:
        lo, hi = v[0], v[-1]
        kind = "range"
    width = hi - lo
    return Spread(median=middle, lo=lo, hi=hi, kind=kind, steps=n,
                  noisy=bool(width > NOISY * middle) if middle > 0 else width > 0)


def quantile(ordered: list[float], q: float) -> float:
    """The ``q`` quantile of sorted values, exactly as ``np.percentile(v, 100 * q)`` (its
    default, linear method) and ``np.median`` compute it, in a few microseconds instead of a
    hundred: a summary takes hundreds of spreads of a few values each. Raises ValueError for no
    values."""
    n = len(ordered)
    if not n:
        raise ValueError("quantile of no values")
    if q == 0.5:
        mid = n // 2
        return ordered[mid] if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2
    at = q * (n - 1)
    below = math.floor(at)
    a, b = ordered[below], ordered[min(below + 1, n - 1)]
    t = at - below
    return b - (b - a) * (1 - t) if t >= 0.5 else a + (b - a) * t


def percentiles(values: np.ndarray, percents: Sequence[float]) -> list[float]:
    """The ``percents`` percentiles (0 to 100) of many unsorted values, numpy's default linear
    method: ``quantile``'s figures, for arrays too long to sort as a list (a bootstrap's
    thousands of resampled means)."""
    return [float(x) for x in np.percentile(values, list(percents))]


def per_step_sums(step_code: np.ndarray, weights: np.ndarray, steps: int) -> np.ndarray:
    """Per-step totals of ``weights`` (float64), ``step_code`` giving each one's step position
    in 0..steps-1; a step without any contributes 0, as it does to the mean."""
    if steps == 0:
        return np.zeros(0)
    return np.bincount(step_code, weights=weights.astype(np.float64), minlength=steps)[:steps]


#: Fewer distinct lengths than this fit a line exactly: no R² is reported for them.
MIN_FIT_QUALITY_POINTS = 3


def fit_power(xs: list[float], ys: list[float]) -> Fit | None:
    """Least-squares fit of y ≈ a·xᵏ on log-log axes; None without 2 distinct x > 0. R² only
    from ``MIN_FIT_QUALITY_POINTS`` distinct lengths: through two, any line fits perfectly."""
    pts = [(x, y) for x, y in zip(xs, ys, strict=True) if x > 0 and y > 0]
    distinct = len({x for x, _ in pts})
    if distinct < 2:
        return None
    lx = np.log([x for x, _ in pts])
    ly = np.log([y for _, y in pts])
    k, log_a = np.polyfit(lx, ly, 1)
    pred = log_a + k * lx
    ss_res = float(((ly - pred) ** 2).sum())
    ss_tot = float(((ly - ly.mean()) ** 2).sum())
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0
    return Fit(a=float(math.exp(log_a)), k=float(k), r2=r2 if distinct >= MIN_FIT_QUALITY_POINTS else None,
               points=distinct)
