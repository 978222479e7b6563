"""The CI gate: did attention get slower or hungrier between a baseline run and a candidate?

Pure: it compares two ``RunSummary`` objects. Time is attention's time per step (forward and
attributed backward), taken as the median over every profiled step of every worker, so that one
slow step does not fail a build; the device's time when both runs have device kernels, else the
CPU's. Memory is attention's allocations per step (summed over layers) and the largest rise of
allocated memory in any layer. A check fails when the candidate exceeds the baseline by more
than its tolerance. ``docs/ci.md`` explains how to make the comparison robust.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from tb_attn_plugin.analysis import wording
from tb_attn_plugin.schema import RunSummary

__all__ = ["Check", "GateReport", "gate", "parse_tolerance"]


@dataclass(frozen=True)
class Check:
    name: str  # "time", "alloc" or "peak"
    unit: str  # "us" or "bytes"
    baseline: float
    candidate: float
    tolerance: float  # e.g. 0.10 for 10%
    detail: str = ""

    @property
    def change(self) -> float | None:
        """Relative change, candidate over baseline minus one (None when the baseline is 0)."""
        return None if self.baseline == 0 else self.candidate / self.baseline - 1.0

    @property
    def passed(self) -> bool:
        if self.baseline == 0:
            return self.candidate == 0
        return self.candidate <= self.baseline * (1.0 + self.tolerance)


@dataclass(frozen=True)
class GateReport:
    baseline: str
    candidate: str
    clock: str  # "device" or "cpu"
    checks: list[Check]
    layers: list[tuple[int, float, float]] = field(default_factory=list)  # (layer, baseline us, candidate us)

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)


def parse_tolerance(text: str) -> float:
    """'10%', '10' and '0.1' all mean 10%. Raises ValueError on anything else or a negative value."""
    raw = text.strip()
    value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    if not raw.endswith("%") and value >= 1.0:
        value /= 100  # "10" means 10%, not 1000%
    if value < 0 or value != value:
        raise ValueError(f"tolerance must be a non-negative percentage, got {text!r}")
    return value


def _steps(run: RunSummary, clock: str) -> list[float]:
    key = "attention_device_us" if clock == "device" else "attention_cpu_us"
    values = [getattr(s, key) for w in run.workers for s in w.per_step]
    if not values:  # traces without ProfilerStep: one mean per worker
        values = [w.attention_device_us if clock == "device" else w.attention_cpu_us for w in run.workers]
    return values


def _memory(run: RunSummary) -> tuple[float, float]:
    if not run.workers:
        return 0.0, 0.0
    alloc = statistics.median(sum(layer.alloc_bytes for layer in w.layers) for w in run.workers)
    peak = max((layer.peak_bytes for w in run.workers for layer in w.layers), default=0)
    return float(alloc), float(peak)


def _per_layer(run: RunSummary, clock: str) -> dict[int, float]:
    out: dict[int, list[float]] = {}
    for w in run.workers:
        for layer in w.layers:
            t = (layer.device_us + layer.backward.device_us) if clock == "device" else (
                layer.cpu_us + layer.backward.cpu_us)
            out.setdefault(layer.layer, []).append(t)
    return {k: statistics.median(v) for k, v in out.items()}


def _spread(values: Sequence[float]) -> str:
    """The steps behind a median, in the report's unit (ms), with their spread."""
    if not values:
        return ""
    mid = statistics.median(values)
    spread = f", spread {(max(values) - min(values)) / mid:.0%} of the median" if mid > 0 and len(values) > 1 else ""
    return (f"median of {len(values)} step(s), min {wording.ms(min(values))} ms, max {wording.ms(max(values))} ms"
            + spread)


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
    base_steps, cand_steps = _steps(baseline, clock), _steps(candidate, clock)
    base_alloc, base_peak = _memory(baseline)
    cand_alloc, cand_peak = _memory(candidate)
    checks = [
        Check("time", "us", statistics.median(base_steps), statistics.median(cand_steps), max_time,
              f"{clock} time per step; baseline {_spread(base_steps)}; candidate {_spread(cand_steps)}"),
        Check("alloc", "bytes", base_alloc, cand_alloc, max_memory, "bytes allocated inside attention per step"),
        Check("peak", "bytes", base_peak, cand_peak, max_memory, "largest rise of allocated memory in one layer"),
    ]
    base_layers, cand_layers = _per_layer(baseline, clock), _per_layer(candidate, clock)
    keys = sorted(set(base_layers) | set(cand_layers))
    layers = [(k, base_layers.get(k, 0.0), cand_layers.get(k, 0.0)) for k in keys]
    return GateReport(baseline=baseline.run, candidate=candidate.run, clock=clock, checks=checks, layers=layers)
