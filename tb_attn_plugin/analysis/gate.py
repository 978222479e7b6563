"""The CI gate: did attention get slower or hungrier between a baseline run and a candidate?

Pure: it compares two ``RunSummary`` objects, each by its representative worker
(``spread.representative_worker``: of several ranks, the one at the lower median by attention
time), the rank the runs list, Compare and the Ranks view's median row describe the run by; a
straggler is the Ranks view's business. Time is attention's time per step (forward and attributed
backward), the mean over that worker's profiled steps; the device's time when both runs have
device kernels, else the CPU's. Memory is attention's allocations per step (summed over layers)
and the largest rise of allocated memory in any layer, that worker's too. A check fails when the
candidate exceeds the baseline by more than its tolerance.

Time is judged against the steps' noise. With at least ``MIN_BOOTSTRAP_STEPS`` steps on each side,
a bootstrap (``BOOTSTRAP_SAMPLES`` resamples of each run's steps, a fixed seed) gives a 95% interval
of the relative change of the means: above the tolerance all of it is a regression, within it all
of it passes, and an interval across the tolerance is too noisy to judge. With fewer steps there is
no interval: the change is judged from the means unless either run's steps spread (max - min over
the mean) more than the tolerance, which is too noisy to judge. ``docs/ci.md`` gives the exit codes
and how to make the comparison robust.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from tb_attn_plugin.analysis import wording
from tb_attn_plugin.analysis.spread import percentiles, representative_worker
from tb_attn_plugin.types.schema import RunSummary, WorkerSummary

__all__ = ["BOOTSTRAP_SAMPLES", "MIN_BOOTSTRAP_STEPS", "Check", "GateReport", "gate", "parse_tolerance"]


#: Steps on each side from which the time check's noise is bootstrapped.
MIN_BOOTSTRAP_STEPS = 3
BOOTSTRAP_SAMPLES = 2000
#: The bootstrap interval of the relative change (95%).
INTERVAL = (2.5, 97.5)


@dataclass(frozen=True)
class Check:
    name: str  # "time", "alloc" or "peak"
    unit: str  # "us" or "bytes"
    baseline: float
    candidate: float
    tolerance: float  # e.g. 0.10 for 10%
    detail: str = ""
    interval: tuple[float, float] | None = None  # the change's bootstrap interval (time, enough steps)
    noisy: bool = False  # the steps' noise spans the tolerance: too noisy to judge

    @property
    def change(self) -> float | None:
        """Relative change, candidate over baseline minus one (None when the baseline is 0)."""
        return None if self.baseline == 0 else self.candidate / self.baseline - 1.0

    @property
    def passed(self) -> bool:
        if self.noisy:
            return False
        if self.baseline == 0:
            return self.candidate == 0
        if self.interval is not None:
            return self.interval[1] <= self.tolerance
        return self.candidate <= self.baseline * (1.0 + self.tolerance)

    @property
    def verdict(self) -> str:
        """ "ok", "regression" or "too noisy to judge"."""
        return "too noisy to judge" if self.noisy else "ok" if self.passed else "regression"


@dataclass(frozen=True)
class GateReport:
    baseline: str
    candidate: str
    clock: str  # "device" or "cpu"
    checks: list[Check]
    layers: list[tuple[int, float, float]] = field(default_factory=list)  # (layer, baseline us, candidate us)

    warnings: list[str] = field(default_factory=list)  # what makes the two runs unlike

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    @property
    def regressed(self) -> bool:
        return any(c.verdict == "regression" for c in self.checks)

    @property
    def noisy(self) -> bool:
        return any(c.noisy for c in self.checks)


def parse_tolerance(text: str) -> float:
    """'10%', '10' and '0.1' all mean 10%. Raises ValueError on anything else or a negative value."""
    raw = text.strip()
    value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    if not raw.endswith("%") and value >= 1.0:
        value /= 100  # "10" means 10%, not 1000%
    if value < 0 or value != value:
        raise ValueError(f"tolerance must be a non-negative percentage, got {text!r}")
    return value


def _steps(w: WorkerSummary, clock: str) -> list[float]:
    """The worker's attention time in each profiled step; without ProfilerStep steps, its mean."""
    key = "attention_device_us" if clock == "device" else "attention_cpu_us"
    return [getattr(s, key) for s in w.per_step] or [getattr(w, key)]


def _memory(w: WorkerSummary) -> tuple[float, float]:
    alloc = sum(layer.alloc_bytes for layer in w.layers)
    peak = max((layer.peak_bytes for layer in w.layers), default=0)
    return float(alloc), float(peak)


def _per_layer(w: WorkerSummary, clock: str) -> dict[int, float]:
    return {layer.layer: (layer.device_us + layer.backward.device_us) if clock == "device"
            else (layer.cpu_us + layer.backward.cpu_us) for layer in w.layers}


def _spread(values: Sequence[float]) -> str:
    """The steps behind a mean, in the report's unit (ms), with their spread."""
    if not values:
        return ""
    mean = statistics.fmean(values)
    spread = f", spread {_range(values):.0%} of the mean" if mean > 0 and len(values) > 1 else ""
    return (f"mean of {len(values)} step(s), min {wording.ms(min(values))} ms, max {wording.ms(max(values))} ms"
            + spread)


def _range(values: Sequence[float]) -> float:
    """The steps' spread: (max - min) over the mean."""
    mean = statistics.fmean(values)
    return (max(values) - min(values)) / mean if mean > 0 else 0.0


def _time_check(base: list[float], cand: list[float], tolerance: float, clock: str) -> Check:
    """The time check, judged against the steps' noise (module docstring)."""
    b, c = statistics.fmean(base), statistics.fmean(cand)
    detail = f"{clock} time per step; baseline {_spread(base)}; candidate {_spread(cand)}"
    if b <= 0:
        return Check("time", "us", b, c, tolerance, detail)
    if min(len(base), len(cand)) >= MIN_BOOTSTRAP_STEPS:
        rng = np.random.default_rng(0)
        bs = rng.choice(np.asarray(base), (BOOTSTRAP_SAMPLES, len(base))).mean(axis=1)
        cs = rng.choice(np.asarray(cand), (BOOTSTRAP_SAMPLES, len(cand))).mean(axis=1)
        ok = bs > 0
        lo, hi = percentiles(cs[ok] / bs[ok] - 1.0, INTERVAL)
        noisy = lo <= tolerance < hi
        detail += (f"; 95% bootstrap interval of the change {lo:+.1%} to {hi:+.1%}"
                   + (f", across the {tolerance:.0%} tolerance" if noisy else ""))
        return Check("time", "us", b, c, tolerance, detail, interval=(lo, hi), noisy=noisy)
    spread = max(_range(base), _range(cand))
    noisy = spread > tolerance
    detail += (f"; under {MIN_BOOTSTRAP_STEPS} steps a side, no interval: "
               + (f"the steps spread {spread:.0%}, over the {tolerance:.0%} tolerance" if noisy
                  else "judged from the means"))
    return Check("time", "us", b, c, tolerance, detail, noisy=noisy)


#: Configuration that changes what attention costs: runs that differ in it are not like for like.
_SHAPE_KEYS = ("seq", "batch", "heads", "d_model", "layers", "dtype", "mode", "device")


def _unlike(baseline: RunSummary, candidate: RunSummary) -> list[str]:
    """What the runs' metadata says differs in their shapes (nothing where either has none)."""
    def config(run: RunSummary) -> dict[str, object]:
        cfg = run.metadata.get("config") if isinstance(run.metadata, dict) else None
        return cfg if isinstance(cfg, dict) else {}

    b, c = config(baseline), config(candidate)
    return [f"the runs differ in {k}: {b[k]!r} against {c[k]!r}, so the change is not the code's alone"
            for k in _SHAPE_KEYS if k in b and k in c and b[k] != c[k]]


def gate(baseline: RunSummary, candidate: RunSummary, *, max_time: float, max_memory: float,
         clock: str = "auto") -> GateReport:
    """Compare attention in ``candidate`` against ``baseline``. Raises ValueError without data."""
    for name, run in (("baseline", baseline), ("candidate", candidate)):
        if not run.workers:
            raise ValueError(f"the {name} run {run.run!r} has no readable trace")
        if not any(w.layers for w in run.workers):
            raise ValueError(f"no attention found in the {name} run {run.run!r}")
    if clock == "auto":
        both_device = all(any(w.attention_device_us > 0 for w in r.workers) for r in (baseline, candidate))
        clock = "device" if both_device else "cpu"
    base, cand = representative_worker(baseline), representative_worker(candidate)
    base_steps, cand_steps = _steps(base, clock), _steps(cand, clock)
    base_alloc, base_peak = _memory(base)
    cand_alloc, cand_peak = _memory(cand)
    checks = [
        _time_check(base_steps, cand_steps, max_time, clock),
        Check("alloc", "bytes", base_alloc, cand_alloc, max_memory, "bytes allocated inside attention per step"),
        Check("peak", "bytes", base_peak, cand_peak, max_memory, "largest rise of allocated memory in one layer"),
    ]
    base_layers, cand_layers = _per_layer(base, clock), _per_layer(cand, clock)
    keys = sorted(set(base_layers) | set(cand_layers))
    layers = [(k, base_layers.get(k, 0.0), cand_layers.get(k, 0.0)) for k in keys]
    return GateReport(baseline=baseline.run, candidate=candidate.run, clock=clock, checks=checks, layers=layers,
                      warnings=_unlike(baseline, candidate))
