"""Runs side by side, and how cost scales with sequence length.

Pure functions over ``RunSummary`` objects (their run metadata gives implementation, sequence
length and dtype). ``compare`` puts each run's attention totals, per-phase sums and per-layer
figures next to a baseline's, as ratios; ``scaling`` groups runs that differ only in sequence
length and fits cost ≈ a·Sᵏ by least squares on log-log axes, for time and memory. They return
the routes' bodies (``responses.Comparison`` and ``ScalingFits``, documented in
``docs/http_api.md``).
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from tb_attn_plugin.analysis.configs import (
    config,
    config_key,
    distinct_labels,
    exact,
    text,
)
from tb_attn_plugin.analysis.roofline import phase_roofs
from tb_attn_plugin.analysis.spread import representative_worker
from tb_attn_plugin.analysis.why_slower import same_but_impl, why_slower
from tb_attn_plugin.types.results import (
    CompareDecode,
    CompareError,
    CompareLayer,
    ComparePhase,
    CompareRatio,
    CompareRun,
    Comparison,
    FindingChip,
    Headline,
    HeadlineVersus,
    ScalingFits,
    ScalingPoint,
    ScalingSeries,
)
from tb_attn_plugin.types.schema import Fit, RunSummary, WorkerSummary

__all__ = ["BaselineError", "compare", "fit_power", "run_facts", "scaling"]

_RATIO_KEYS = ("attention_cpu_us", "attention_device_us", "alloc_bytes", "peak_bytes", "flops_per_s",
               "decode_us_per_token")
#: What compare's groups may differ in: the implementation, and for generation the KV cache's kind
#: and heads (MHA against GQA, static against dynamic: what generation runs are compared for).
_COMPARED = ("impl", "kv_cache", "kv_heads")
# The label of a scaling series; the series itself is every config field but seq, with the world size.
_SERIES_KEYS = ("model", "impl", "mask", "compile", "dtype")


class BaselineError(ValueError):
    """The baseline named is not among the readable runs: a bad request, not a missing thing."""


def run_facts(run: RunSummary) -> CompareRun:
    """One run's attention totals per step, from its representative worker (``spread.representative_worker``;
    ``ratio``: all null; ``compare`` sets it against the baseline)."""
    cfg = config(run)
    w = representative_worker(run)
    phases: dict[str, ComparePhase] = {}
    calls = sum(layer.calls for layer in w.layers)
    ops = kernels = 0.0
    for layer in w.layers:
        for p in layer.phases:
            agg = phases.setdefault(p.phase, ComparePhase(cpu_us=0.0, device_us=0.0, alloc_bytes=0.0, flops=0.0,
                                                          calls=0.0))
            agg.cpu_us += p.cpu_us
            agg.device_us += p.device_us
            agg.alloc_bytes += p.alloc_bytes
            agg.flops += p.flops
            agg.calls += p.calls
            agg.bytes += p.bytes
            ops += p.op_count
            kernels += p.kernels
    for name, roof in phase_roofs(w).items():
        phases[name].roof = roof
    flops = sum(layer.flops for layer in w.layers)
    busy = w.attention_device_us or w.attention_cpu_us
    seq = cfg.get("seq")
    return CompareRun(
        run=run.run,
        impl=text(cfg.get("impl")), seq=seq if isinstance(seq, int) and not isinstance(seq, bool) else None,
        dtype=text(cfg.get("dtype")), model=text(cfg.get("model")),
        backend=w.backend, steps=w.step_count,
        attention_cpu_us=w.attention_cpu_us, attention_device_us=w.attention_device_us,
        step_cpu_us=w.step_cpu_us, attention_share_cpu=w.attention_share_cpu,
        alloc_bytes=sum(layer.alloc_bytes for layer in w.layers),
        peak_bytes=max((layer.peak_bytes for layer in w.layers), default=0),
        sxs_bytes=sum(layer.sxs_bytes for layer in w.layers),
        flops=flops, flops_per_s=flops / (busy * 1e-6) if busy > 0 else 0.0,
        ops_per_forward=ops / calls if calls else 0.0,
        kernels_per_forward=kernels / calls if calls else 0.0,
        phases=phases,
        layers=[CompareLayer(layer=layer.layer, cpu_us=layer.cpu_us + layer.backward.cpu_us,
                             device_us=layer.device_us + layer.backward.device_us, alloc_bytes=layer.alloc_bytes,
                             peak_bytes=layer.peak_bytes) for layer in w.layers],
        findings=[f.id for f in w.findings],
        finding_chips=_chips(w),
        ratio=CompareRatio(**dict.fromkeys(_RATIO_KEYS)),
        attention_spread=w.spread.get("attention_device_us" if w.attention_device_us > 0 else "attention_cpu_us"),
        decode=decode_facts(w),
        roofline=w.roofline,
    )


def _chips(w: WorkerSummary) -> list[FindingChip]:
    """One chip per finding id (far-from-roof comes once per cause): the most severe's severity and
    title, the others counted in it, their times added."""
    by_id: dict[str, list[Any]] = {}
    for f in w.findings:  # most severe first (``find``'s order)
        by_id.setdefault(f.id, []).append(f)
    out = []
    for fid, found in by_id.items():
        first = found[0]
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        out.append(FindingChip(id=fid, severity=first.severity, title=first.title + more,
                               time_us=sum(f.evidence.time_us for f in found)))
    return out


def compare(runs: list[RunSummary], *, baseline: str | None = None) -> Comparison:
    """Runs side by side, each with ratios to its group's baseline.

    Ratios are only ever taken within a group of like-for-like runs (``configs.config_key`` but
    the implementation: same model, sizes, sequence length, dtype, mode and parallel layout). The
    baseline is ``baseline`` if named, else the first readable run by name that computes attention
    exactly (``configs.exact``), else the first by name (whatever order the runs were listed or
    picked in: the CLI and the tab agree). In every group the ratios are against
    the run there with the baseline's implementation, else against the group's first run by name.
    """
    usable = [r for r in runs if r.workers and any(w.layers for w in r.workers)]
    errors = [CompareError(run=r.run, error="; ".join(e.error for e in r.errors) or "no attention found")
              for r in runs if r not in usable]
    facts = [run_facts(r) for r in usable]
    names = {r.run for r in usable}
    if baseline is not None and baseline not in names and facts:
        raise BaselineError(f"the baseline {baseline!r} is not among the readable runs")
    # Without one named: the first exact run by name (an approximate one is no yardstick), else the first.
    exact_names = {r.run for r in usable if exact(r)}
    base_name = baseline if baseline is not None else min(exact_names or names, default=None)
    cfgs = [config(r) for r in usable]
    impl = next((c.get("impl") for r, c in zip(usable, cfgs, strict=True) if r.run == base_name), None)
    groups: dict[str, list[int]] = {}
    for i, cfg in enumerate(cfgs):
        groups.setdefault(config_key(cfg, but=_COMPARED), []).append(i)
    bases: list[int] = []
    for members in groups.values():
        by_name = sorted(members, key=lambda i: usable[i].run)
        b = next((i for i in by_name if usable[i].run == base_name), None)
        bases.append(b if b is not None else next((i for i in by_name if cfgs[i].get("impl") == impl), by_name[0]))
    labels = distinct_labels([cfgs[b] for b in bases], but=_COMPARED)
    for members, b, label in zip(groups.values(), bases, labels, strict=True):
        base, base_run = facts[b], usable[b]
        for i in members:
            f, run = facts[i], usable[i]
            f.baseline = base.run
            f.group = label
            ratios: dict[str, float | None] = {}
            for k in _RATIO_KEYS:
                denominator, value = _ratio_value(base, k), _ratio_value(f, k)
                ratios[k] = value / denominator if denominator and value is not None else None
            f.ratio = CompareRatio(**ratios)
            if run is not base_run and same_but_impl(run, base_run):
                f.why_slower = why_slower(run, base_run)
    return Comparison(baseline=base_name, runs=facts, errors=errors, headlines=headlines(usable, facts))


def _ratio_value(f: CompareRun, key: str) -> float | None:
    if key == "decode_us_per_token":
        return f.decode.us_per_token if f.decode is not None else None
    return float(getattr(f, key))


def decode_facts(w: WorkerSummary) -> CompareDecode | None:
    """A worker's decode steps for compare, or None without any."""
    g = w.generation
    if g is None or g.decode is None:
        return None
    decode = [t for t in g.tokens if t.role == "decode"]
    return CompareDecode(
        us_per_token=g.decode.attention_us, step_us=g.decode.step_us,
        prefill_us=g.prefill.attention_us if g.prefill is not None else None,
        context=sum(t.context for t in decode) / len(decode) if decode else 0.0, kv_cache=g.kv_cache,
        kv_heads=g.kv_heads, read_bytes_per_token=g.read_bytes_per_token, kv_bytes=g.decode.kv_bytes,
        kv_bytes_per_layer=g.kv_bytes_per_layer,
        launches_per_token=g.decode.launches)


def headlines(runs: list[RunSummary], facts: list[CompareRun]) -> list[Headline]:
    """Per group of runs that differ only in their implementation (same model, sizes, sequence
    length, dtype, mode, parallel layout and world size): the run with the least attention time
    against each of the others, in attention time, memory allocated, peak and FLOP/s."""
    groups: dict[str, list[tuple[dict[str, Any], CompareRun]]] = {}
    for run, f in zip(runs, facts, strict=True):
        cfg = config(run)
        if cfg.get("impl") is not None and cfg.get("model") is not None:
            groups.setdefault(config_key(cfg, but="impl"), []).append((cfg, f))
    out: list[tuple[str, int, str, Headline]] = []
    compared = [m for m in groups.values() if len(m) >= 2]
    # Groups apart in a field the label does not name (static against dynamic caches) read apart.
    labels = distinct_labels([m[0][0] for m in compared], but=("impl",))
    for members, label in zip(compared, labels, strict=True):
        device = all(f.attention_device_us > 0 for _, f in members)
        time = _device_time if device else _cpu_time
        cfg, best = min(members, key=lambda m: (time(m[1]), m[1].run))
        names = [f.impl or f.run for _, f in members]
        unique = len(set(names)) == len(names)
        versus = [HeadlineVersus(run=f.run, impl=f.impl, time=_over(time(f), time(best)),
                                 alloc=_over(f.alloc_bytes, best.alloc_bytes),
                                 peak=_over(f.peak_bytes, best.peak_bytes),
                                 flops_per_s=_over(best.flops_per_s, f.flops_per_s))
                  for _, f in sorted(members, key=lambda m: (-time(m[1]), m[1].run)) if f is not best]
        clock = "device" if device else "CPU"
        name = (best.impl if unique else None) or best.run
        against = "; ".join(_versus_text(v, v.impl if unique and v.impl else v.run) for v in versus)
        raw_seq = cfg.get("seq")
        seq = raw_seq if isinstance(raw_seq, int) else 0
        out.append((str(cfg.get("model")), seq, label, Headline(
            group=label, best=best.run, best_impl=best.impl, clock=clock, versus=versus,
            sentence=f"At {label}: {name} spends the least attention {clock} time: {against}.")))
    return [h for *_, h in sorted(out, key=lambda x: x[:3])]  # by model, then sequence length


def _device_time(f: CompareRun) -> float:
    return f.attention_device_us


def _cpu_time(f: CompareRun) -> float:
    return f.attention_cpu_us


def _over(a: float, b: float) -> float | None:
    return a / b if a > 0 and b > 0 else None


def _times(r: float | None, less: str, more: str) -> str | None:
    """``r`` (the other's over the best's) in words: "13.8× less memory allocated"."""
    if r is None:
        return None
    if 1 / 1.05 < r < 1.05:
        return f"about the same {less.split(' ', 1)[1]}"
    return f"{r:.1f}× {less}" if r >= 1 else f"{1 / r:.1f}× {more}"


def _versus_text(v: HeadlineVersus, name: str) -> str:
    """"4.6× less time than naive, 13.8× less memory allocated, 7.4× lower peak, 3.1× the FLOP/s"."""
    parts = [f"{v.time:.1f}× less time than {name}" if v.time is not None else f"less time than {name}",
             _times(v.alloc, "less memory allocated", "more memory allocated"),
             _times(v.peak, "lower peak", "higher peak"),
             f"{v.flops_per_s:.1f}× the FLOP/s" if v.flops_per_s is not None else None]
    return ", ".join(p for p in parts if p)


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


def expected_exponent(impl: str, mask: str | None) -> str | None:
    """What a sliding-window series should show: time and memory linear in the length where the
    kernel skips what the window drops (compiled flex), quadratic where it computes every score."""
    if not mask or not mask.startswith("sliding:"):
        return None
    if impl == "flex":
        return "k ≈ 1: a sliding window of fixed width costs linear time and memory when the kernel skips the rest"
    return "k ≈ 2: this implementation computes every score, so the window does not cut the work"


def scaling(runs: list[RunSummary]) -> ScalingFits:
    """Series of runs that differ only in sequence length, with power-law fits."""
    groups: dict[str, list[ScalingPoint]] = {}
    for run in runs:
        if not run.workers or not any(w.layers for w in run.workers):
            continue
        cfg = config(run)
        seq = cfg.get("seq")
        if not isinstance(seq, int):
            continue
        f = run_facts(run)
        if f.decode is not None and f.decode.context > 0:
            # A generation: decode time per token against the context it attends, and the KV cache
            # (every layer) against it; runs that differ in their prompt make the series.
            groups.setdefault(config_key(cfg, but=("seq", "prompt_len")), []).append(ScalingPoint(
                seq=round(f.decode.context), run=run.run, time_us=f.decode.us_per_token,
                alloc_bytes=f.decode.kv_bytes, peak_bytes=f.peak_bytes))
            continue
        key = config_key(cfg, but="seq")
        groups.setdefault(key, []).append(ScalingPoint(
            seq=seq, run=run.run, time_us=f.attention_device_us or f.attention_cpu_us,
            alloc_bytes=f.alloc_bytes, peak_bytes=f.peak_bytes,
        ))
    series = []
    configs = []
    for key, points in sorted(groups.items()):
        points.sort(key=lambda p: (p.seq, p.run))
        full = json.loads(key)
        cfg = {k: str(full.get(k)) for k in _SERIES_KEYS}
        seqs = [float(p.seq) for p in points]
        configs.append(full)
        mask = full.get("mask") if isinstance(full.get("mask"), str) else None
        impl = cfg["impl"] + (" compiled" if full.get("compile") is True else "")
        decode = full.get("mode") == "generate"
        if decode:
            impl += f" {full.get('kv_cache')} cache" + (f" kv{full.get('kv_heads')}" if full.get("kv_heads") else "")
        series.append(ScalingSeries(
            x="context" if decode else "seq",
            label=" ".join(v for v in (cfg["model"], impl, mask if mask != "causal" else None, cfg["dtype"])
                           if v not in (None, "None")),
            impl=cfg["impl"], dtype=cfg["dtype"], model=cfg["model"], mask=mask,
            expect=expected_exponent(cfg["impl"], mask),
            points=points,
            time_fit=fit_power(seqs, [p.time_us for p in points]),
            memory_fit=fit_power(seqs, [p.alloc_bytes for p in points]),
        ))
    # Series with one label differ in something else: the label says what.
    for label in {s.label for s in series}:
        same = [i for i, s in enumerate(series) if s.label == label]
        if len(same) > 1:
            keys = sorted({k for i in same for j in same for k in configs[i].keys() | configs[j].keys()
                           if configs[i].get(k) != configs[j].get(k)})
            for i in same:
                series[i].label += " (" + ", ".join(f"{k} {configs[i].get(k)}" for k in keys) + ")"
    return ScalingFits(series=series)
