"""Runs side by side, and how cost scales with sequence length.

Pure functions over ``RunSummary`` objects (their run metadata gives implementation, sequence
length and dtype). ``compare`` puts each run's attention totals, per-phase sums and per-layer
figures next to a baseline's, as ratios; ``scaling`` groups runs that differ only in sequence
length and fits cost ≈ a·Sᵏ by least squares on log-log axes, for time and memory. They return
the routes' bodies (``responses.CompareResponse`` and ``ScalingResponse``, documented in
``docs/http_api.md``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tb_attn_plugin.responses import (
    CompareError,
    CompareLayer,
    ComparePhase,
    CompareRatio,
    CompareResponse,
    CompareRun,
    Fit,
    ScalingPoint,
    ScalingResponse,
    ScalingSeries,
)
from tb_attn_plugin.schema import RunSummary, WorkerSummary

__all__ = ["BaselineError", "compare", "fit_power", "run_facts", "scaling"]

_RATIO_KEYS = ("attention_cpu_us", "attention_device_us", "alloc_bytes", "peak_bytes", "flops_per_s")
# Config fields that must match for runs to belong to one scaling series (all but seq).
_SERIES_KEYS = ("model", "impl", "dtype", "layers", "heads", "kv_heads", "d_model", "batch", "mode", "per_head",
                "causal", "device")


class BaselineError(ValueError):
    """The baseline named is not among the readable runs: a bad request, not a missing thing."""


def _config(run: RunSummary) -> dict[str, Any]:
    meta = run.metadata or {}
    config = meta.get("config")
    out: dict[str, Any] = dict(config) if isinstance(config, dict) else {}
    for key in ("model", "impl", "dtype"):
        if key in meta:
            out.setdefault(key, meta[key])
    return out


def _text(value: object) -> str | None:
    """A metadata string as the response declares it: anyone can write a metadata file, and a
    number where a name belongs is no name."""
    return value if isinstance(value, str) else None


def _median_worker(run: RunSummary) -> WorkerSummary:
    """The worker whose attention time is the median (one worker: itself)."""
    workers = sorted(run.workers, key=lambda w: w.attention_cpu_us + w.attention_device_us)
    return workers[len(workers) // 2]


def run_facts(run: RunSummary) -> CompareRun:
    """One run's attention totals per step, from its median worker (``ratio``: all null; ``compare``
    sets it against the baseline)."""
    cfg = _config(run)
    w = _median_worker(run)
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
            ops += p.op_count
            kernels += p.kernels
    flops = sum(layer.flops for layer in w.layers)
    busy = w.attention_device_us or w.attention_cpu_us
    seq = cfg.get("seq")
    return CompareRun(
        run=run.run,
        impl=_text(cfg.get("impl")), seq=seq if isinstance(seq, int) and not isinstance(seq, bool) else None,
        dtype=_text(cfg.get("dtype")), model=_text(cfg.get("model")),
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
        ratio=CompareRatio(**dict.fromkeys(_RATIO_KEYS)),
    )


def compare(runs: list[RunSummary], *, baseline: str | None = None) -> CompareResponse:
    """Runs side by side with ratios to the baseline (the first run unless named)."""
    usable = [r for r in runs if r.workers and any(w.layers for w in r.workers)]
    errors = [CompareError(run=r.run, error="; ".join(e.error for e in r.errors) or "no attention found")
              for r in runs if r not in usable]
    facts = [run_facts(r) for r in usable]
    base_name = baseline if baseline is not None else (facts[0].run if facts else None)
    base = next((f for f in facts if f.run == base_name), None)
    if base_name is not None and base is None and facts:
        raise BaselineError(f"the baseline {base_name!r} is not among the readable runs")
    for f in facts:
        ratios: dict[str, float | None] = {}
        for k in _RATIO_KEYS:
            denominator = getattr(base, k) if base is not None else 0
            ratios[k] = getattr(f, k) / denominator if denominator else None
        f.ratio = CompareRatio(**ratios)
    return CompareResponse(baseline=base_name, runs=facts, errors=errors)


def fit_power(xs: list[float], ys: list[float]) -> Fit | None:
    """Least-squares fit of y ≈ a·xᵏ on log-log axes; None without 2 distinct x > 0."""
    pts = [(x, y) for x, y in zip(xs, ys, strict=True) if x > 0 and y > 0]
    if len({x for x, _ in pts}) < 2:
        return None
    lx = np.log([x for x, _ in pts])
    ly = np.log([y for _, y in pts])
    k, log_a = np.polyfit(lx, ly, 1)
    pred = log_a + k * lx
    ss_res = float(((ly - pred) ** 2).sum())
    ss_tot = float(((ly - ly.mean()) ** 2).sum())
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0
    return Fit(a=float(math.exp(log_a)), k=float(k), r2=r2)


def scaling(runs: list[RunSummary]) -> ScalingResponse:
    """Series of runs that differ only in sequence length, with power-law fits."""
    groups: dict[tuple[str, ...], list[ScalingPoint]] = {}
    for run in runs:
        if not run.workers or not any(w.layers for w in run.workers):
            continue
        cfg = _config(run)
        seq = cfg.get("seq")
        if not isinstance(seq, int):
            continue
        key = tuple(str(cfg.get(k)) for k in _SERIES_KEYS)
        f = run_facts(run)
        groups.setdefault(key, []).append(ScalingPoint(
            seq=seq, run=run.run, time_us=f.attention_device_us or f.attention_cpu_us,
            alloc_bytes=f.alloc_bytes, peak_bytes=f.peak_bytes,
        ))
    series = []
    for key, points in sorted(groups.items()):
        points.sort(key=lambda p: (p.seq, p.run))
        cfg = dict(zip(_SERIES_KEYS, key, strict=True))
        seqs = [float(p.seq) for p in points]
        series.append(ScalingSeries(
            label=" ".join(v for v in (cfg["model"], cfg["impl"], cfg["dtype"]) if v != "None"),
            impl=cfg["impl"], dtype=cfg["dtype"], model=cfg["model"],
            points=points,
            time_fit=fit_power(seqs, [p.time_us for p in points]),
            memory_fit=fit_power(seqs, [p.alloc_bytes for p in points]),
        ))
    return ScalingResponse(series=series)
