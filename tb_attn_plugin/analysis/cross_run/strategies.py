"""Attention strategies side by side: time against error, at every sequence length measured.

``strategies(runs)`` groups runs that differ only in their implementation (with its options:
performer's features, ``--quant``, ``--compile``) and their sequence length. In each group it
gives one row per run (attention time per step, memory, S×S bytes, FLOPs, IOPs, the error the
runner measured, the speed-up over a baseline), a power-law fit of time against length per
strategy with the length where it crosses the baseline's, the Pareto front of speed-up against
error at each length, and two findings that need several runs (``docs/findings.md``):

- ``below-crossover``: linear attention slower than the fastest exact implementation at a
  length, with the length where the fits say it would break even;
- ``accuracy-cost``: an approximation whose error is over ``rel_tol`` or whose loss moved by
  more than ``loss_tol``, with the speed-up it buys.

Crossover of a·Lᵏ (the strategy) and b·Lᵐ (the baseline): a·Lᵏ = b·Lᵐ at L* = (b/a)^(1/(k−m));
the strategy is faster above L* when k < m, below it when k > m.
"""

from __future__ import annotations

import math
from typing import Any

from tb_attn_plugin.analysis.common.clock import on_device
from tb_attn_plugin.analysis.common.configs import APPROXIMATE_BACKENDS, LINEAR_BACKENDS, config, config_key, text
from tb_attn_plugin.analysis.common.finding import new_finding
from tb_attn_plugin.analysis.common.spread import fit_power, representative_worker
from tb_attn_plugin.analysis.common.wording import duration, pct
from tb_attn_plugin.analysis.cross_run.compare import time_verdict
from tb_attn_plugin.analysis.findings.quant_findings import quant_share
from tb_attn_plugin.types.results import Fit
from tb_attn_plugin.types.schema import Finding, RunSummary
from tb_attn_plugin.types.strategies import (
    Accuracy,
    Crossover,
    StrategyGroup,
    StrategyRow,
    StrategySeries,
    StrategyTable,
)

__all__ = ["APPROXIMATE_BACKENDS", "LINEAR_BACKENDS", "LOSS_TOL", "REL_TOL", "check_tolerance", "crossover",
           "pareto_front", "strategies"]

#: Backends that compute attention approximately (analysis/backend.py).
#: accuracy-cost: a relative (L1) error of the attention output over 1%...
REL_TOL = 0.01
#: ...or the loss moved by more than this (nats, on the runner's fixed batch).
LOSS_TOL = 0.01
#: A crossover is claimed only between fits of at least this many lengths each.
MIN_CROSSOVER_POINTS = 3
#: Exponents closer than this fit parallel lines: no crossover is reported.
PARALLEL_K = 0.05
#: Errors below this are float rounding: the Pareto front treats them as equal (0).
ROUNDING = 1e-6
#: The config fields that make a strategy, apart from the sequence length.
_STRATEGY_KEYS = ("impl", "features", "quant", "compile")


def _finite(value: object) -> float | None:
    """A metadata number as a finite float; None for anything else (a bool, a string, NaN, or an
    integer past float's range, which anyone can write in a JSON file)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, int):
        return float(value) if abs(value) < 10**300 else None
    return value if math.isfinite(value) else None


def accuracy_of(meta: dict[str, Any] | None) -> Accuracy | None:
    """The metadata's ``accuracy`` (runner/accuracy.py), or None where it is missing or not
    numbers (older runs, foreign traces, a hand-edited file): "not measured", never 0."""
    acc = (meta or {}).get("accuracy")
    if not isinstance(acc, dict):
        return None
    rel, mx, cos = _finite(acc.get("rel_l1")), _finite(acc.get("max_abs")), _finite(acc.get("cosine"))
    if rel is None or mx is None or cos is None or rel < 0 or mx < 0 or not -1.0 <= cos <= 1.0 + 1e-9:
        return None
    return Accuracy(rel_l1=rel, max_abs=mx, cosine=min(cos, 1.0), loss_diff=_finite(acc.get("loss_diff")))


def strategy_label(cfg: dict[str, Any]) -> str:
    """"performer M=64", "sdpa int8 proj", "naive compiled"."""
    impl = text(cfg.get("impl")) or "?"
    parts = [impl]
    if impl == "performer" and isinstance(cfg.get("features"), int):
        parts.append(f"M={cfg['features']}")
    if isinstance(cfg.get("quant"), str):
        parts.append(f"{cfg['quant']} proj")
    if cfg.get("compile") is True:
        parts.append("compiled")
    return " ".join(parts)


def _group_label(cfg: dict[str, Any]) -> str:
    parts = [str(cfg.get("model") or "?"), str(cfg.get("dtype") or "?"), str(cfg.get("mode") or "")]
    for key, name in (("layers", "layers"), ("heads", "heads"), ("d_model", "d_model"), ("batch", "batch")):
        if isinstance(cfg.get(key), int):
            parts.append(f"{name} {cfg[key]}")
    parts.append("causal" if cfg.get("causal") is not False else "not causal")
    if isinstance(cfg.get("mask"), str) and cfg["mask"] != "causal":
        parts.append(f"mask {cfg['mask']}")
    return ", ".join(p for p in parts if p)


def crossover(fit: Fit, base: Fit, seqs: list[int], name: str, base_name: str) -> Crossover:
    """Where ``fit`` meets ``base``, and on which side ``name`` is the faster."""
    lo, hi = min(seqs), max(seqs)
    if abs(fit.k - base.k) < PARALLEL_K:
        mid = math.sqrt(lo * hi)
        faster = fit.a * mid**fit.k < base.a * mid**base.k
        return Crossover(seq=None, faster="always" if faster else "never", extrapolated=False,
                         text=f"{name} and {base_name} scale alike (k {fit.k:.2f} and {base.k:.2f}): "
                              f"{name} is {'faster' if faster else 'slower'} at every length")
    seq = (base.a / fit.a) ** (1.0 / (fit.k - base.k))
    faster = "above" if fit.k < base.k else "below"
    if seq < 1.0:  # the curves meet below one token: one is the faster at every real length
        return Crossover(seq=None, faster="always" if faster == "above" else "never", extrapolated=True,
                         text=f"{name} is {'faster' if faster == 'above' else 'slower'} than {base_name} at every "
                              f"length: the fits meet below one token (k {fit.k:.2f} against {base.k:.2f})")
    extrapolated = not lo <= seq <= hi
    where = f"outside the measured {lo}–{hi}" if extrapolated else f"within the measured {lo}–{hi}"
    return Crossover(seq=seq, faster=faster, extrapolated=extrapolated,
                     text=f"{name} is faster than {base_name} {faster} about {seq:,.0f} tokens ({where}; "
                          f"k {fit.k:.2f} against {base.k:.2f})")


def pareto_front(points: list[tuple[float, float]]) -> list[bool]:
    """Which (speed-up, error) points no other point beats on both (at least as fast and as
    accurate, and better on one)."""
    return [not any(s2 >= s and e2 <= e and (s2 > s or e2 < e) for s2, e2 in points) for s, e in points]


def check_tolerance(name: str, value: float) -> float:
    """A tolerance as the CLI and the route take it: a finite number in [0, 100]."""
    if not (math.isfinite(value) and 0.0 <= value <= 100.0):
        raise ValueError(f"{name} must be a number in 0..100, got {value}")
    return value


def strategies(runs: list[RunSummary], *, baseline: str | None = None, rel_tol: float = REL_TOL,
               loss_tol: float = LOSS_TOL) -> StrategyTable:
    """The strategies view of ``runs`` (see the module's docstring)."""
    groups: dict[str, list[tuple[RunSummary, dict[str, Any]]]] = {}
    for run in runs:
        if not run.workers or not any(w.layers for w in run.workers):
            continue
        cfg = config(run)
        seq = cfg.get("seq")
        if not isinstance(seq, int) or isinstance(seq, bool) or seq <= 0:
            continue
        groups.setdefault(config_key(cfg, but=("seq", *_STRATEGY_KEYS)), []).append((run, cfg))
    out = [_group(members, baseline, rel_tol, loss_tol) for _, members in sorted(groups.items())]
    return StrategyTable(rel_tol=rel_tol, loss_tol=loss_tol, groups=out)


def _row(run: RunSummary, cfg: dict[str, Any], device: bool) -> StrategyRow:
    w = representative_worker(run)
    layers = w.layers
    block = sum(x.device_us if device else x.cpu_us for x in layers)
    phases: dict[str, float] = {}
    for x in layers:
        for p in x.phases:
            phases[p.phase] = phases.get(p.phase, 0.0) + (p.device_us if device else p.cpu_us)
    backend = w.backend
    spread = w.spread.get("attention_device_us" if device else "attention_cpu_us")
    return StrategyRow(
        run=run.run, strategy=strategy_label(cfg), backend=backend,
        exact=backend not in APPROXIMATE_BACKENDS and not isinstance(cfg.get("quant"), str),
        seq=int(cfg["seq"]), time_us=w.attention_device_us if device else w.attention_cpu_us,
        peak_bytes=max((x.peak_bytes for x in layers), default=0), alloc_bytes=sum(x.alloc_bytes for x in layers),
        sxs_bytes=sum(x.sxs_bytes for x in layers), flops=sum(x.flops for x in layers),
        iops=sum(x.iops for x in layers), quant_share=quant_share(phases, block),
        accuracy=accuracy_of(run.metadata), speedup=None, pareto=False, spread=spread,
        noisy=spread is not None and spread.noisy)


def _group(members: list[tuple[RunSummary, dict[str, Any]]], baseline: str | None, rel_tol: float,
           loss_tol: float) -> StrategyGroup:
    device = all(on_device(representative_worker(r)) for r, _ in members)
    rows = sorted((_row(r, cfg, device) for r, cfg in members), key=lambda x: (x.strategy, x.seq, x.run))
    names = sorted({x.strategy for x in rows})
    exact = sorted({x.strategy for x in rows if x.exact})
    base = (baseline if baseline in names else "naive" if "naive" in names
            else exact[0] if exact else names[0] if names else None)
    by_seq: dict[int, dict[str, StrategyRow]] = {}
    for x in rows:
        by_seq.setdefault(x.seq, {}).setdefault(x.strategy, x)  # two runs of one strategy and length: the first
    summaries = {r.run: r for r, _ in members}
    for at in by_seq.values():
        ref = at.get(base) if base else None
        for x in at.values():
            x.speedup = ref.time_us / x.time_us if ref is not None and x.time_us > 0 else None
            if ref is not None and x is not ref:
                x.speedup_verdict = time_verdict(summaries[ref.run], summaries[x.run])
        scored = [(x, p) for x in at.values() if (p := _point(x)) is not None]
        for (x, _), front in zip(scored, pareto_front([p for _, p in scored]), strict=True):
            x.pareto = front
    series = [_series(name, [x for x in rows if x.strategy == name and by_seq[x.seq].get(name) is x])
              for name in names]
    base_series = next((s for s in series if s.strategy == base), None)
    noisy = {x.strategy for x in rows if x.noisy}
    for s in series:
        if base_series is not None and s is not base_series and s.fit and base_series.fit:
            s.crossover_note = _unfit(s, base_series, noisy) or _drifting(s, by_seq, base)
            if not s.crossover_note:
                s.crossover = crossover(s.fit, base_series.fit, s.seqs + base_series.seqs, s.strategy,
                                        base_series.strategy)
    cfg = members[0][1]
    findings = [*_below_crossover(series, by_seq, summaries, noisy),
                *_accuracy_cost(rows, by_seq, summaries, rel_tol, loss_tol)]
    return StrategyGroup(label=_group_label(cfg), clock="device" if device else "cpu", baseline=base,
                         strategies=names, rows=rows, series=series, findings=findings)


def _unfit(s: StrategySeries, base: StrategySeries, noisy: set[str]) -> str:
    """Why no crossover is claimed between two series' fits, or "": a fit of fewer than
    ``MIN_CROSSOVER_POINTS`` lengths (any line passes through two), or a noisy run in either."""
    few = [x.strategy for x in (s, base) if x.fit is not None and x.fit.points < MIN_CROSSOVER_POINTS]
    if few:
        return (f"no crossover: {' and '.join(few)} {'was' if len(few) == 1 else 'were'} measured at fewer than "
                f"{MIN_CROSSOVER_POINTS} lengths, and a line through two points says nothing of the curve")
    shaky = [x.strategy for x in (s, base) if x.strategy in noisy]
    if shaky:
        return (f"no crossover: the steps of {' and '.join(shaky)} spread over 20% of their median (noisy), so "
                "the fits cannot place one; profile more steps")
    return ""


def _drifting(s: StrategySeries, by_seq: dict[int, dict[str, StrategyRow]], base: str | None) -> str:
    """Why no crossover is claimed where the runs cannot tell the strategy from the baseline at some
    length (``StrategyRow.speedup_verdict``: drift between runs may explain the difference), or ""."""
    open_at = [seq for seq in s.seqs if (x := by_seq[seq].get(s.strategy)) is not None and base is not None
               and x.speedup_verdict is not None and not x.speedup_verdict.decided]
    if not open_at:
        return ""
    (first,) = {by_seq[open_at[0]][s.strategy].speedup_verdict.note}  # type: ignore[union-attr]
    return (f"no crossover: at {', '.join(map(str, open_at))} the runs cannot tell {s.strategy} from {base} "
            f"({first})")


def _slower(x: StrategyRow, best: StrategyRow, summaries: dict[str, RunSummary]) -> float | None:
    """``x``'s time over ``best``'s where the two runs can tell it from drift (``time_verdict``);
    None where they cannot, or ``x`` is ``best``."""
    if x is best:
        return None
    verdict = time_verdict(summaries[best.run], summaries[x.run])
    if verdict is None or not verdict.decided:
        return None
    return x.time_us / best.time_us if best.time_us > 0 else None


def _point(x: StrategyRow) -> tuple[float, float] | None:
    """(speed-up, error) of a row that has both."""
    if x.speedup is None or x.accuracy is None:
        return None
    return x.speedup, x.accuracy.rel_l1 if x.accuracy.rel_l1 > ROUNDING else 0.0


def _series(name: str, rows: list[StrategyRow]) -> StrategySeries:
    seqs = [x.seq for x in rows]
    times = [x.time_us for x in rows]
    return StrategySeries(strategy=name, exact=all(x.exact for x in rows), seqs=seqs, time_us=times,
                          fit=fit_power([float(s) for s in seqs], times), crossover=None)


def _fastest_exact(at: dict[str, StrategyRow]) -> StrategyRow | None:
    exact = [x for x in at.values() if x.exact and x.time_us > 0]
    return min(exact, key=lambda x: x.time_us) if exact else None


def _below_crossover(series: list[StrategySeries], by_seq: dict[int, dict[str, StrategyRow]],
                     summaries: dict[str, RunSummary], noisy: set[str]) -> list[Finding]:
    fits = {s.strategy: s for s in series}
    out = []
    for s in series:
        slow = []
        for seq in s.seqs:
            x, best = by_seq[seq][s.strategy], _fastest_exact(by_seq[seq])
            # Noisy steps on either side, or a difference drift between the runs may explain: "slower"
            # would be the noise's verdict, not the code's.
            if x.backend in LINEAR_BACKENDS and best is not None and best.time_us < x.time_us \
                    and not x.noisy and not best.noisy and _slower(x, best, summaries) is not None:
                slow.append((x, best))
        if not slow:
            continue
        x, best = slow[-1]  # the longest length where it is still slower
        lengths = ", ".join(str(r.seq) for r, _ in slow)
        explanation = (f"At {'length' if len(slow) == 1 else 'lengths'} {lengths}, {s.strategy} takes longer than "
                       f"exact attention: at {x.seq} tokens {duration(x.time_us)} per step against "
                       f"{duration(best.time_us)} for {best.strategy}, the fastest exact implementation here "
                       f"({x.time_us / best.time_us:.1f}× slower). Linear attention does O(S) work but pays for "
                       "its feature maps and state at every length, so it only wins past a crossover length.")
        details: dict[str, float | int | str] = {"seq": x.seq, "time_us": x.time_us, "exact": best.strategy,
                                                 "exact_time_us": best.time_us}
        other = fits.get(best.strategy)
        unfit = _unfit(s, other, noisy) if s.fit is not None and other is not None and other.fit is not None else ""
        if s.fit is not None and other is not None and other.fit is not None and not unfit:
            c = crossover(s.fit, other.fit, s.seqs + other.seqs, s.strategy, best.strategy)
            explanation += " From the fits: " + c.text + "."
            if c.seq is not None:
                details["crossover_seq"] = round(c.seq)
        elif unfit:
            explanation += f" The fits place no crossover ({unfit.removeprefix('no crossover: ')})."
        else:
            explanation += " Profile it at several lengths to see where it would cross."
        out.append(new_finding(
            "below-crossover", "medium", f"{s.strategy} is slower than exact attention at this length",
            explanation,
            f"Keep {best.strategy} at these lengths; measure {s.strategy} against it at longer ones "
            "(tb-attn-run --impl ... --seq with several lengths) before switching, and check its error.",
            layers=[], ops=[], kernels=[], time_us=x.time_us - best.time_us, details=details))
    return out


def _accuracy_cost(rows: list[StrategyRow], by_seq: dict[int, dict[str, StrategyRow]],
                   summaries: dict[str, RunSummary], rel_tol: float, loss_tol: float) -> list[Finding]:
    out = []
    for name in sorted({x.strategy for x in rows if not x.exact}):
        costly = [x for x in rows if x.strategy == name and x.accuracy is not None
                  and (x.accuracy.rel_l1 > rel_tol
                       or (x.accuracy.loss_diff is not None and abs(x.accuracy.loss_diff) > loss_tol))]
        if not costly:
            continue
        x = max(costly, key=lambda r: r.seq)  # the longest length: where an approximation is meant to pay
        acc = x.accuracy
        assert acc is not None
        best = _fastest_exact(by_seq[x.seq])
        if best is None:
            buys, speedup = "no exact run at this length to compare its time with", None
        else:
            speedup = best.time_us / x.time_us if x.time_us > 0 else None
            verdict = time_verdict(summaries[best.run], summaries[x.run])
            told = verdict is None or verdict.decided
            buys = (f"it is {speedup:.2f}× as fast as {best.strategy}, the fastest exact implementation here"
                    + ("" if told else f", which the runs cannot tell from drift ({verdict.note if verdict else ''})")
                    if speedup is not None else "")
            if not told:
                speedup = None  # no claim that it buys or costs time
        loss = f" and moves the loss by {acc.loss_diff:+.4f}" if acc.loss_diff is not None else ""
        details: dict[str, float | int | str] = {"seq": x.seq, "rel_l1": acc.rel_l1, "cosine": acc.cosine}
        if acc.loss_diff is not None:
            details["loss_diff"] = acc.loss_diff
        if speedup is not None:
            details["speedup"] = speedup
        slower = speedup is not None and speedup < 1
        out.append(new_finding(
            "accuracy-cost", "high" if slower else "medium",
            f"{name} changes the attention output by {pct(acc.rel_l1)}",
            f"At {x.seq} tokens {name} changes the attention output by {pct(acc.rel_l1)} (relative L1 error of the "
            f"worst layer against exact fp32 attention; cosine similarity {acc.cosine:.4f}){loss}; {buys}."
            + (" It costs accuracy and buys no time." if slower else ""),
            f"Check the error on your own weights and data before relying on it (the runner measures it on one batch "
            f"of this model, with random weights unless you load yours); tolerances: relative error {pct(rel_tol)}, "
            f"loss {loss_tol:g}. More random features (performer --features) or an exact kernel reduce it.",
            layers=[], ops=[], kernels=[], time_us=x.time_us, details=details))
    return out
