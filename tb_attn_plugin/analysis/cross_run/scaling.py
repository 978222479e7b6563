"""How cost scales with the sequence length: runs that differ only in it, as series, with a
power-law fit a·Sᵏ of attention time and memory (``spread.fit_power``), and for generation runs
decode time per decode step against the context. Pure, over ``RunSummary`` objects; returns the route's
body (``ScalingFits``, ``docs/http_api.md``)."""

from __future__ import annotations

import json

from tb_attn_plugin.analysis.common.configs import config, config_key
from tb_attn_plugin.analysis.common.spread import fit_power
from tb_attn_plugin.analysis.cross_run.compare import run_facts
from tb_attn_plugin.types.results import ScalingFits, ScalingPoint, ScalingSeries
from tb_attn_plugin.types.schema import RunSummary

__all__ = ["expected_exponent", "scaling"]

# The label of a scaling series; the series itself is every config field but seq, with the world size.
_SERIES_KEYS = ("model", "impl", "mask", "compile", "dtype")


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
            # A generation: decode time per decode step against the context it attends, and the KV cache
            # (every layer) against it; runs that differ in their prompt make the series.
            groups.setdefault(config_key(cfg, but=("seq", "prompt_len")), []).append(ScalingPoint(
                seq=round(f.decode.context), run=run.run, time_us=f.decode.us_per_step,
                alloc_bytes=f.decode.kv_bytes, peak_bytes=f.peak_bytes))
            continue
        key = config_key(cfg, but="seq")
        groups.setdefault(key, []).append(ScalingPoint(
            seq=seq, run=run.run, time_us=f.attention_device_us if f.clock == "device" else f.attention_cpu_us,
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
            memory_fit=fit_power([x for x, p in zip(seqs, points, strict=True) if p.alloc_bytes is not None],
                                 [p.alloc_bytes for p in points if p.alloc_bytes is not None]),
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
