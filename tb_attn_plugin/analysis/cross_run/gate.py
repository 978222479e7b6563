"""The CI gate: did attention get slower or hungrier between a baseline run and a candidate?

Pure: it compares two ``RunSummary`` objects, each by its representative worker
(``spread.representative_worker``: of several ranks, the one at the lower median by attention
time), the rank the runs list, Compare and the Ranks view's median row describe the run by; a
straggler is the Ranks view's business. Time is attention's time per step (forward and attributed
backward), the mean over that worker's profiled steps; the device's time when both runs have
device kernels, else the CPU's. Memory is attention's allocations per step (summed over layers)
and the largest rise of allocated memory in any layer, that worker's too. A check fails when the
candidate exceeds the baseline by more than its tolerance.

Time is judged against the noise between runs, not only the steps' (``analysis.repeats``): steps
within one run share its machine's state, and two runs of one configuration drift apart by far
more on a shared machine. Where the two runs' repeats were profiled in turns (``--repeats`` in one
sweep, or ``--append`` in turns), each pair of neighbouring repeats gives a ratio (of their fastest
steps: a busy machine only slows steps down), and the check
holds where every pair agrees: all of them above the tolerance is a regression, all at or below it
passes. With one run each (or repeats profiled apart), the change must exceed what drift between
runs can make (``repeats.DRIFT_BOUND``) before it is a verdict either way. Anything else is
undecided, and the report says how to decide it. ``docs/ci.md`` gives the exit codes.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from tb_attn_plugin.analysis.common import wording
from tb_attn_plugin.analysis.common.clock import on_device
from tb_attn_plugin.analysis.common.spread import representative_worker
from tb_attn_plugin.analysis.cross_run.repeats import Clock, judge
from tb_attn_plugin.types.schema import RunSummary, WorkerSummary

__all__ = ["Check", "GateReport", "gate", "parse_tolerance"]


@dataclass(frozen=True)
class Check:
    name: str  # "time", "alloc" or "peak"
    unit: str  # "us" or "bytes"
    baseline: float
    candidate: float
    tolerance: float  # e.g. 0.10 for 10%
    detail: str = ""
    interval: tuple[float, float] | None = None  # where the change lies, as far as the runs can tell (time)
    noisy: bool = False  # the interval spans the tolerance: undecided

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
        """ "ok", "regression" or "undecided"."""
        return "undecided" if self.noisy else "ok" if self.passed else "regression"


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


def _time_check(baseline: RunSummary, candidate: RunSummary, base: list[float], cand: list[float], tolerance: float,
                clock: Clock) -> Check:
    """The time check, judged against the noise between runs (module docstring)."""
    b, c = statistics.fmean(base), statistics.fmean(cand)
    detail = f"{clock} time per step; baseline {_spread(base)}; candidate {_spread(cand)}"
    judged = judge(baseline, candidate, clock)
    if b <= 0 or judged is None:
        return Check("time", "us", b, c, tolerance, detail)
    interval = (judged.low - 1.0, judged.high - 1.0)
    noisy = not judged.slower(tolerance) and not judged.not_slower(tolerance)
    detail += f"; {judged.basis_words()}" + (f"; undecided: {judged.why_undecided()}" if noisy else "")
    return Check("time", "us", b, c, tolerance, detail, interval=interval if judged.basis != "same" else None,
                 noisy=noisy)


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
    on: Clock
    if clock == "auto":
        both_device = all(any(on_device(w) for w in r.workers) for r in (baseline, candidate))
        on = "device" if both_device else "cpu"
    elif clock in ("cpu", "device"):
        on = "device" if clock == "device" else "cpu"
    else:
        raise ValueError(f"clock must be cpu, device or auto, got {clock!r}")
    clock = on
    base, cand = representative_worker(baseline), representative_worker(candidate)
    base_steps, cand_steps = _steps(base, clock), _steps(cand, clock)
    base_alloc, base_peak = _memory(base)
    cand_alloc, cand_peak = _memory(cand)
    checks = [
        _time_check(baseline, candidate, base_steps, cand_steps, max_time, on),
        Check("alloc", "bytes", base_alloc, cand_alloc, max_memory, "bytes allocated inside attention per step"),
        Check("peak", "bytes", base_peak, cand_peak, max_memory, "largest rise of allocated memory in one layer"),
    ]
    base_layers, cand_layers = _per_layer(base, clock), _per_layer(cand, clock)
    keys = sorted(set(base_layers) | set(cand_layers))
    layers = [(k, base_layers.get(k, 0.0), cand_layers.get(k, 0.0)) for k in keys]
    return GateReport(baseline=baseline.run, candidate=candidate.run, clock=clock, checks=checks, layers=layers,
                      warnings=_unlike(baseline, candidate))
