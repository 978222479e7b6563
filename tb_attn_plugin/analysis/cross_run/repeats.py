"""How far one run's time can be set against another's: repeats, interleaving, and drift.

Steps within one run share its machine's state; two runs do not. On a shared machine the same
configuration, profiled twice, drifts by up to ``DRIFT_BOUND`` between runs (the slow spells of a
busy machine last longer than a run: ``bench/drift.py`` measured it), while the steps within each
run agree. So a verdict between two runs (the gate's, Compare's "4.8x less time", Strategies'
speed-ups) rests on one of two grounds, and says which:

- **Repeats, in turns.** A run profiled several times (``tb-attn-run --repeats N``, or ``--append``
  in turns with another run) lists each repeat's start in its metadata (``repeats``); a trace
  belongs to the last repeat that started before it was written (its span is ``time_ns`` at
  writing). Where two runs' repeats alternate in time (A B A B..., ``MIN_PAIRS`` pairs at least),
  both met the same machine, its quiet moments included, so each run's fastest repeat (its floor)
  is set against the other's: the ratio of the floors. How firm a floor is, its second-fastest
  repeat says: a busy machine can have kept every repeat of a run above its cost, but rarely all by
  much more than the second-fastest shows. So the ratio lies within the candidate's spread below it
  and the baseline's above it (``Judgement``), and a verdict holds where all of that is one side.
- **Drift.** Otherwise (one run each, or repeats profiled apart) the true ratio can be anywhere
  within ``DRIFT_BOUND`` of the one measured, either way: a verdict holds only where even that
  leaves no doubt.

A run's time here is attention's time (forward and backward) in the fastest profiled step of each
repeat's representative trace (``spread.representative_of``), on the clock both runs have: the
device's where both ran kernels, else the CPU's. A busy machine only ever slows a step down, so the
fastest step carries the least of it; the means the reports show beside it carry all of it.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from tb_attn_plugin.analysis.common.clock import Clock
from tb_attn_plugin.analysis.common.spread import median, representative_of
from tb_attn_plugin.types.schema import RunSummary, WorkerSummary

__all__ = ["DRIFT_BOUND", "DRIFT_SOURCE", "MIN_PAIRS", "Judgement", "judge", "repeat_starts", "repeat_times",
           "repeat_workers"]

#: The largest ratio between two runs of one configuration that drift explains on this project's
#: machines (2 vCPUs, shared): ``bench/drift.py`` profiled one configuration as 24 runs, each beside
#: 0 to 2 busy processes while other test jobs ran (load 1.4 to 6.7), and measured 0.12 s to 3.42 s
#: of attention per step: 27.8x between runs, and up to 3.9x (median 1.4x) between two runs back
#: to back. The suite then met 46.5x (7.5 ms against 351 ms, one configuration run twice) while a
#: 20-client load test ran beside it: the bound is 100x, past both. A verdict between two runs that
#: are not paired by repeats must exceed it; below it, only repeats in turns decide.
DRIFT_BOUND = 100.0
#: Where the bound comes from, in words (reports cite it).
DRIFT_SOURCE = ("bench/drift.py: one configuration profiled as 24 runs on a shared 2-core machine, 27.8x; 46.5x "
                "beside a 20-client load test")
#: Pairs of interleaved repeats a verdict from repeats needs.
MIN_PAIRS = 2
#: Repeats read from one run's metadata at most: what a file claims never sizes the work beyond this.
MAX_REPEATS = 1000

Basis = Literal["repeats", "drift", "same"]


def repeat_starts(run: RunSummary) -> list[int]:
    """The start of each repeat the run's metadata lists (``time_ns``), in time order; [] where
    it lists none (a run of one repeat, or not the runner's)."""
    listed = run.metadata.get("repeats") if isinstance(run.metadata, dict) else None
    if not isinstance(listed, list):
        return []
    starts = [r.get("started_ns") for r in listed[:MAX_REPEATS] if isinstance(r, dict)]
    return sorted({s for s in starts if isinstance(s, int) and not isinstance(s, bool) and s >= 0})


def repeat_workers(run: RunSummary) -> list[tuple[int, list[WorkerSummary]]]:
    """The run's traces by repeat, each with its start, in time order (repeats without a readable
    trace left out); one group of all of them, start 0, where the metadata lists fewer than two."""
    starts = repeat_starts(run)
    if len(starts) < 2:
        return [(0, list(run.workers))] if run.workers else []
    groups: list[list[WorkerSummary]] = [[] for _ in starts]
    for w in run.workers:
        span = int(w.span) if w.span is not None and w.span.isascii() and w.span.isdigit() else -1
        k = bisect.bisect_right(starts, span) - 1
        if k >= 0:
            groups[k].append(w)
    return [(start, g) for start, g in zip(starts, groups, strict=True) if g]


def _time(w: WorkerSummary, clock: Clock) -> float:
    """The trace's attention time in its fastest profiled step (its mean without steps): a busy
    machine only ever slows a step down, so the fastest step is the code's cost with the least of
    the machine's in it, as the Ranks view's straggler metric reads it."""
    key = "attention_device_us" if clock == "device" else "attention_cpu_us"
    steps = [v for s in w.per_step if (v := getattr(s, key)) > 0]
    return min(steps) if steps else float(getattr(w, key))


def repeat_times(run: RunSummary, clock: Clock) -> list[tuple[int, float]]:
    """(start, attention time in µs in its fastest step) of each repeat's representative trace, in
    time order."""
    return [(start, _time(representative_of(group), clock)) for start, group in repeat_workers(run)]


@dataclass(frozen=True)
class Judgement:
    """Candidate time over baseline time (``ratio``), and the range ``low``..``high`` the true ratio
    lies in as far as the runs can tell: from the floors of repeats profiled in turns (``basis``
    "repeats", ``pairs`` of them; module docstring), or the measured ratio divided and multiplied by
    ``DRIFT_BOUND`` ("drift"), or exactly the ratio for a run set against itself ("same")."""

    ratio: float
    low: float
    high: float
    basis: Basis
    pairs: int = 0

    def slower(self, tolerance: float = 0.0) -> bool:
        """Whether the candidate is slower beyond ``tolerance`` whatever drift did."""
        return self.low > 1.0 + tolerance

    def not_slower(self, tolerance: float = 0.0) -> bool:
        """Whether the candidate is at most ``tolerance`` slower whatever drift did."""
        return self.high <= 1.0 + tolerance

    def faster(self) -> bool:
        return self.high < 1.0

    def decided(self) -> bool:
        """Whether the runs can tell which is faster: the whole range on one side of 1."""
        return self.low > 1.0 or self.high < 1.0 or self.basis == "same"

    def why_undecided(self) -> str:
        """The reason, in words, that no verdict holds; "" where one does."""
        if self.basis == "drift":
            return (f"one run each, not profiled in turns: drift between runs makes up to {DRIFT_BOUND:g}x on a shared "
                    "machine; profile both with --repeats 3 in one sweep (or in turns with --append)")
        if self.basis == "repeats":
            return (f"their {self.pairs} pairs of repeats profiled in turns leave it open ({self.low:.2f}x to "
                    f"{self.high:.2f}x: the repeats' fastest steps spread too far); profile more repeats, on a "
                    "quieter machine")
        return ""

    def basis_words(self) -> str:
        """What the verdict rests on, in words."""
        if self.basis == "repeats":
            return f"{self.pairs} pairs of repeats profiled in turns: {self.low:.2f}x to {self.high:.2f}x"
        if self.basis == "drift":
            return f"one run each: within {DRIFT_BOUND:g}x of drift between runs, {self.low:.2f}x to {self.high:.2f}x"
        return "the same run"


def _pairs(a: Sequence[tuple[int, float]], b: Sequence[tuple[int, float]]) -> list[tuple[float, float]] | None:
    """Each repeat of ``a`` beside the repeat of ``b`` profiled next to it, where their repeats
    alternate in time (A B A B..., either first); None where they do not, or give fewer than
    ``MIN_PAIRS`` pairs: then the two runs met different machines."""
    if min(len(a), len(b)) < MIN_PAIRS:
        return None
    merged = sorted([(t, 0, v) for t, v in a] + [(t, 1, v) for t, v in b])
    sides = [s for _, s, _ in merged]
    if any(x == y for x, y in itertools.pairwise(sides)) or len({t for t, _, _ in merged}) < len(merged):
        return None
    out = []
    for i in range(0, len(merged) - 1, 2):
        first, second = merged[i], merged[i + 1]
        out.append((first[2], second[2]) if first[1] == 0 else (second[2], first[2]))
    return out if len(out) >= MIN_PAIRS else None


def _floor(times: Sequence[tuple[int, float]]) -> tuple[float, float]:
    """(the fastest repeat's time, how far the second-fastest is above it: 1 or more)."""
    ordered = sorted(v for _, v in times)
    if len(ordered) < 2 or ordered[0] <= 0:
        return ordered[0], 1.0
    return ordered[0], ordered[1] / ordered[0]


def judge(baseline: RunSummary, candidate: RunSummary, clock: Clock) -> Judgement | None:
    """Candidate against baseline (module docstring); None where either has no time to set (a
    baseline of 0)."""
    base, cand = repeat_times(baseline, clock), repeat_times(candidate, clock)
    if not base or not cand:
        return None
    if baseline is candidate or (baseline.run == candidate.run and base == cand):
        b = median(v for _, v in base)
        return Judgement(1.0, 1.0, 1.0, "same") if b > 0 else None
    pairs = _pairs(base, cand)
    if pairs is not None:
        (b_floor, b_spread), (c_floor, c_spread) = _floor(base), _floor(cand)
        if b_floor > 0:
            ratio = c_floor / b_floor
            return Judgement(ratio, ratio / c_spread, ratio * b_spread, "repeats", len(pairs))
    b, c = median(v for _, v in base), median(v for _, v in cand)
    if b <= 0:
        return None
    ratio = c / b
    return Judgement(ratio, ratio / DRIFT_BOUND, ratio * DRIFT_BOUND, "drift")
