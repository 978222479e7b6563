"""Runs side by side, and how cost scales with sequence length.

Pure functions over ``RunSummary`` objects (their run metadata gives implementation, sequence
length and dtype). ``compare`` puts each run's attention totals, per-phase sums and per-layer
figures next to a baseline's, as ratios; ``scaling`` groups runs that differ only in sequence
length and fits cost ≈ a·Sᵏ by least squares on log-log axes, for time and memory. Shapes are
documented in ``docs/http_api.md`` (``/compare`` and ``/scaling``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tb_attn_plugin.schema import RunSummary, WorkerSummary

__all__ = ["compare", "fit_power", "run_facts", "scaling"]

_RATIO_KEYS = ("attention_cpu_us", "attention_device_us", "alloc_bytes", "peak_bytes", "flops_per_s")
# Config fields that must match for runs to belong to one scaling series (all but seq).
_SERIES_KEYS = ("model", "impl", "dtype", "layers", "heads", "kv_heads", "d_model", "batch", "mode", "per_head",
                "causal", "device")


def _config(run: RunSummary) -> dict[str, Any]:
    meta = run.metadata or {}
    config = meta.get("config")
    out: dict[str, Any] = dict(config) if isinstance(config, dict) else {}
    for key in ("model", "impl", "dtype"):
        if key in meta:
            out.setdefault(key, meta[key])
    return out


def _median_worker(run: RunSummary) -> WorkerSummary:
    """The worker whose attention time is the median (one worker: itself)."""
    workers = sorted(run.workers, key=lambda w: w.attention_cpu_us + w.attention_device_us)
    return workers[len(workers) // 2]


def run_facts(run: RunSummary) -> dict[str, Any]:
    """One run's attention totals per step, from its median worker."""
    cfg = _config(run)
    w = _median_worker(run)
    phases: dict[str, dict[str, float]] = {}
    calls = sum(layer.calls for layer in w.layers)
    ops = kernels = 0.0
    for layer in w.layers:
        for p in layer.phases:
            agg = phases.setdefault(p.phase, {"cpu_us": 0.0, "device_us": 0.0, "alloc_bytes": 0.0, "flops": 0.0,
                                              "calls": 0.0})
            agg["cpu_us"] += p.cpu_us
            agg["device_us"] += p.device_us
            agg["alloc_bytes"] += p.alloc_bytes
            agg["flops"] += p.flops
            agg["calls"] += p.calls
            ops += p.op_count
            kernels += p.kernels
    flops = sum(layer.flops for layer in w.layers)
    busy = w.attention_device_us or w.attention_cpu_us
    return {
        "run": run.run,
        "impl": cfg.get("impl"), "seq": cfg.get("seq"), "dtype": cfg.get("dtype"), "model": cfg.get("model"),
        "backend": w.backend, "steps": w.step_count,
        "attention_cpu_us": w.attention_cpu_us, "attention_device_us": w.attention_device_us,
        "step_cpu_us": w.step_cpu_us, "attention_share_cpu": w.attention_share_cpu,
        "alloc_bytes": sum(layer.alloc_bytes for layer in w.layers),
        "peak_bytes": max((layer.peak_bytes for layer in w.layers), default=0),
        "sxs_bytes": sum(layer.sxs_bytes for layer in w.layers),
        "flops": flops, "flops_per_s": flops / (busy * 1e-6) if busy > 0 else 0.0,
        "ops_per_forward": ops / calls if calls else 0.0,
        "kernels_per_forward": kernels / calls if calls else 0.0,
        "phases": phases,
        "layers": [{"layer": layer.layer, "cpu_us": layer.cpu_us + layer.backward.cpu_us,
                    "device_us": layer.device_us + layer.backward.device_us, "alloc_bytes": layer.alloc_bytes,
                    "peak_bytes": layer.peak_bytes} for layer in w.layers],
        "findings": [f.id for f in w.findings],
    }


def compare(runs: list[RunSummary], *, baseline: str | None = None) -> dict[str, Any]:
    """Runs side by side with ratios to the baseline (the first run unless named)."""
    usable = [r for r in runs if r.workers and any(w.layers for w in r.workers)]
    errors = [{"run": r.run, "error": "; ".join(e.error for e in r.errors) or "no attention found"}
              for r in runs if r not in usable]
    facts = [run_facts(r) for r in usable]
    base_name = baseline if baseline is not None else (facts[0]["run"] if facts else None)
    base = next((f for f in facts if f["run"] == base_name), None)
    if base_name is not None and base is None and facts:
        raise ValueError(f"the baseline {base_name!r} is not among the readable runs")
    for f in facts:
        f["ratio"] = {k: (f[k] / base[k] if base and base[k] else None) for k in _RATIO_KEYS}
    return {"schema": "tb-attn.compare/1", "baseline": base_name, "runs": facts, "errors": errors}


def fit_power(xs: list[float], ys: list[float]) -> dict[str, float] | None:
    """Least-squares fit of y ≈ a·xᵏ on log-log axes: {a, k, r2}; None without 2 distinct x > 0."""
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
    return {"a": float(math.exp(log_a)), "k": float(k), "r2": r2}


def scaling(runs: list[RunSummary]) -> dict[str, Any]:
    """Series of runs that differ only in sequence length, with power-law fits."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for run in runs:
        if not run.workers or not any(w.layers for w in run.workers):
            continue
        cfg = _config(run)
        if not isinstance(cfg.get("seq"), int):
            continue
        key = tuple(str(cfg.get(k)) for k in _SERIES_KEYS)
        f = run_facts(run)
        groups.setdefault(key, []).append({
            "seq": cfg["seq"], "run": run.run,
            "time_us": f["attention_device_us"] or f["attention_cpu_us"],
            "alloc_bytes": f["alloc_bytes"], "peak_bytes": f["peak_bytes"],
        })
    series = []
    for key, points in sorted(groups.items()):
        points.sort(key=lambda p: (p["seq"], p["run"]))
        cfg = dict(zip(_SERIES_KEYS, key, strict=True))
        seqs = [float(p["seq"]) for p in points]
        series.append({
            "label": " ".join(v for v in (cfg["model"], cfg["impl"], cfg["dtype"]) if v != "None"),
            "impl": cfg["impl"], "dtype": cfg["dtype"], "model": cfg["model"],
            "points": points,
            "time_fit": fit_power(seqs, [p["time_us"] for p in points]),
            "memory_fit": fit_power(seqs, [p["alloc_bytes"] for p in points]),
        })
    return {"schema": "tb-attn.scaling/1", "series": series}
