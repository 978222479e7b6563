"""Runs side by side, and how cost scales with sequence length.

Pure functions over ``RunSummary`` objects (their run metadata gives implementation, sequence
length and dtype). ``compare`` puts each run's attention totals, per-phase sums and per-layer
figures next to a baseline's, as ratios; ``scaling`` groups runs that differ only in sequence
length and fits cost ≈ a·Sᵏ by least squares on log-log axes, for time and memory. They return
the routes' bodies (``responses.CompareResponse`` and ``ScalingResponse``, documented in
``docs/http_api.md``).
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from tb_attn_plugin.analysis.wording import duration
from tb_attn_plugin.responses import (
    CompareError,
    CompareLayer,
    ComparePhase,
    CompareRatio,
    CompareResponse,
    CompareRun,
    Fit,
    Headline,
    HeadlineVersus,
    ScalingPoint,
    ScalingResponse,
    ScalingSeries,
)
from tb_attn_plugin.schema import RunSummary, WorkerSummary

__all__ = ["BaselineError", "compare", "fit_power", "median_worker", "run_facts", "scaling"]

_RATIO_KEYS = ("attention_cpu_us", "attention_device_us", "alloc_bytes", "peak_bytes", "flops_per_s")
# The label of a scaling series; the series itself is every config field but seq, with the world size.
_SERIES_KEYS = ("model", "impl", "dtype")


class BaselineError(ValueError):
    """The baseline named is not among the readable runs: a bad request, not a missing thing."""


def _config(run: RunSummary) -> dict[str, Any]:
    meta = run.metadata or {}
    config = meta.get("config")
    out: dict[str, Any] = dict(config) if isinstance(config, dict) else {}
    for key in ("model", "impl", "dtype", "world_size"):
        if key in meta:
            out.setdefault(key, meta[key])
    return out


def _config_key(cfg: dict[str, Any], *, but: str) -> str:
    """The run's whole configuration but one field, as a key: runs scale together when all but
    ``seq`` matches, and compare like for like when all but ``impl`` does (the model, its sizes,
    dtype, mode, dropout, mask, parallel layout and world size: a two-rank tensor-parallel run is
    not a point of a single-process series)."""
    return json.dumps({k: v for k, v in cfg.items() if k != but}, sort_keys=True, default=str)


def _text(value: object) -> str | None:
    """A metadata string as the response declares it: anyone can write a metadata file, and a
    number where a name belongs is no name."""
    return value if isinstance(value, str) else None


def median_worker(run: RunSummary) -> WorkerSummary:
    """The worker whose attention time is the median (one worker: itself)."""
    workers = sorted(run.workers, key=lambda w: w.attention_cpu_us + w.attention_device_us)
    return workers[len(workers) // 2]


def run_facts(run: RunSummary) -> CompareRun:
    """One run's attention totals per step, from its median worker (``ratio``: all null; ``compare``
    sets it against the baseline)."""
    cfg = _config(run)
    w = median_worker(run)
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
    base_run = next((r for r in usable if r.run == base_name), None)
    for f, run in zip(facts, usable, strict=True):
        ratios: dict[str, float | None] = {}
        for k in _RATIO_KEYS:
            denominator = getattr(base, k) if base is not None else 0
            ratios[k] = getattr(f, k) / denominator if denominator else None
        f.ratio = CompareRatio(**ratios)
        if base_run is not None and run is not base_run and _same_but_impl(run, base_run):
            f.why_slower = why_slower(run, base_run)
    return CompareResponse(baseline=base_name, runs=facts, errors=errors, headlines=headlines(usable, facts))


def _group_label(cfg: dict[str, Any]) -> str:
    parts = [str(cfg.get("model") or "?"), f"seq {cfg.get('seq')}", str(cfg.get("dtype") or "?"),
             str(cfg.get("mode") or "")]
    if cfg.get("parallel") not in (None, "none"):
        parts.append(f"parallel {cfg['parallel']}")
    if isinstance(cfg.get("world_size"), int) and cfg["world_size"] > 1:
        parts.append(f"{cfg['world_size']} ranks")
    return ", ".join(p for p in parts if p)


def headlines(runs: list[RunSummary], facts: list[CompareRun]) -> list[Headline]:
    """Per group of runs that differ only in their implementation (same model, sizes, sequence
    length, dtype, mode, parallel layout and world size): the run with the least attention time
    against each of the others, in attention time, memory allocated, peak and FLOP/s."""
    groups: dict[str, list[tuple[dict[str, Any], CompareRun]]] = {}
    for run, f in zip(runs, facts, strict=True):
        cfg = _config(run)
        if cfg.get("impl") is not None and cfg.get("model") is not None:
            groups.setdefault(_config_key(cfg, but="impl"), []).append((cfg, f))
    out: list[tuple[str, int, str, Headline]] = []
    for members in groups.values():
        if len(members) < 2:
            continue
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
        label = _group_label(cfg)
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


#: The attention core: what one SDPA call does, phase by phase in a hand-written block.
_CORE = ("kv_expand", "qk_matmul", "scale", "mask", "softmax", "dropout", "av_matmul")
SLOWER_BY = 1.02  # a run this much slower than the baseline is explained (below: noise)
#: Parts an attention implementation does not change: what differs there between two runs is noise.
_SAME_OPS_PARTS = ("qkv_proj", "rope", "kv_cache", "out_proj")


def _same_but_impl(run: RunSummary, base: RunSummary) -> bool:
    a, b = _config(run), _config(base)
    return (a.get("model") is not None and a.get("impl") != b.get("impl")
            and _config_key(a, but="impl") == _config_key(b, but="impl"))


def _parts(w: WorkerSummary, device: bool) -> dict[str, float]:
    """Forward plus backward time per step by part: the core (one ``sdpa`` phase, or the
    hand-written phases it replaces) and each phase around it."""
    out: dict[str, float] = {}
    fused = any(p.phase == "sdpa" for layer in w.layers for p in layer.phases)
    for layer in w.layers:
        for p in layer.phases:
            t = (p.device_us + p.backward.device_us) if device else (p.cpu_us + p.backward.cpu_us)
            part = "core" if p.phase == "sdpa" or (p.phase in _CORE and not fused) else p.phase
            out[part] = out.get(part, 0.0) + t
    return out


def why_slower(run: RunSummary, base: RunSummary) -> list[str]:
    """Why ``run`` is slower than ``base``, a run of the same model and configuration with another
    attention implementation, read from both traces: the backend that ran, forward against
    backward, the parts that grew, the dispatch count. Empty when it is not slower."""
    w, b = median_worker(run), median_worker(base)
    device = w.attention_device_us > 0 and b.attention_device_us > 0
    what = "device" if device else "CPU"

    def fwd_bwd(x: WorkerSummary) -> tuple[float, float]:
        return (sum(layer.device_us if device else layer.cpu_us for layer in x.layers),
                sum(layer.backward.device_us if device else layer.backward.cpu_us for layer in x.layers))

    (wf, wb), (bf, bb) = fwd_bwd(w), fwd_bwd(b)
    if wf + wb <= (bf + bb) * SLOWER_BY or bf + bb <= 0:
        return []
    out = [f"{run.run} spends {duration(wf + wb)} of {what} time per step in attention against {duration(bf + bb)} "
           f"({(wf + wb) / (bf + bb):.2f}×): forward {_delta(wf, bf)}, backward {_delta(wb, bb)}."]
    if w.backend != b.backend:
        math = next((f for f in w.findings if f.id == "math-fallback"), None)
        if math is not None:
            causes = str(math.evidence.details.get("causes") or "")
            out.append("Its SDPA ran the math backend, not a fused kernel (math-fallback"
                       + (f": {causes.replace(',', ', ')}" if causes else "")
                       + f"): the same unfused arithmetic as {b.backend}, with the ops SDPA adds around it.")
        else:
            out.append(f"It ran {w.backend} where the baseline ran {b.backend}.")
    mine, theirs = _parts(w, device), _parts(b, device)
    grew = sorted(((mine.get(k, 0.0) - theirs.get(k, 0.0), k) for k in set(mine) | set(theirs)), reverse=True)
    total = (wf + wb) - (bf + bb)
    parts = [f"{_label(k, w)} {_delta(mine.get(k, 0.0), theirs.get(k, 0.0))}"
             + ("" if k in theirs else " (not in the baseline)")
             for d, k in grew if d > 0.1 * total][:3]
    if parts:
        out.append("Where (forward and backward): " + "; ".join(parts) + ".")
    same = sum(mine.get(k, 0.0) - theirs.get(k, 0.0) for k in _SAME_OPS_PARTS)
    own = total - same
    if same > 0 and same >= own:
        out.append(f"Of the {duration(total)}, {duration(same)} is in parts that run the same ops in both runs "
                   f"(projections, RoPE, the KV cache): measurement noise, which more profiled steps narrow; the "
                   f"implementation's own part is {'+' if own >= 0 else '−'}{duration(abs(own))}.")
    ops_w, ops_b = (sum(p.op_count for layer in x.layers for p in layer.phases) / max(sum(layer.calls for layer in
                    x.layers), 1e-9) for x in (w, b))
    if ops_w > ops_b * 1.1:
        out.append(f"It dispatches more: {ops_w:.0f} top-level ops per forward against {ops_b:.0f}.")
    return out


def _label(part: str, w: WorkerSummary) -> str:
    if part == "core":
        fused = any(p.phase == "sdpa" for layer in w.layers for p in layer.phases)
        return "the SDPA call" if fused else "the attention core (q·kᵀ to attn·V)"
    if part == "mask" and any(p.phase == "sdpa" for layer in w.layers for p in layer.phases):
        return "the mask built for SDPA"
    return part


def _delta(now: float, before: float) -> str:
    sign = "+" if now >= before else "−"
    rel = f", {now / before - 1:+.0%}" if before > 0 else ""
    return f"{sign}{duration(abs(now - before))} ({duration(now)}{rel})"


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


def scaling(runs: list[RunSummary]) -> ScalingResponse:
    """Series of runs that differ only in sequence length, with power-law fits."""
    groups: dict[str, list[ScalingPoint]] = {}
    for run in runs:
        if not run.workers or not any(w.layers for w in run.workers):
            continue
        cfg = _config(run)
        seq = cfg.get("seq")
        if not isinstance(seq, int):
            continue
        key = _config_key(cfg, but="seq")
        f = run_facts(run)
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
        series.append(ScalingSeries(
            label=" ".join(v for v in (cfg["model"], cfg["impl"], cfg["dtype"]) if v != "None"),
            impl=cfg["impl"], dtype=cfg["dtype"], model=cfg["model"],
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
    return ScalingResponse(series=series)
