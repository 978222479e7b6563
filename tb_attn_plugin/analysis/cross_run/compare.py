"""Runs side by side.

Pure functions over ``RunSummary`` objects (their run metadata gives implementation, sequence
length and dtype). ``compare`` puts each run's attention totals, per-phase sums and per-layer
figures next to a baseline's, as ratios, only within a group of like-for-like runs: the same
configuration but the implementation where the runner's metadata says it, else the same model as
its layers' shapes say (``model_signature``); a run alone in its group has no ratios, and says why.
Its time against its baseline's says what the two runs can tell (``analysis.repeats``): from their
repeats profiled in turns, or within the drift between runs, and the headlines claim a winner only
where that decides it. A measure a trace lacks (memory without ``profile_memory``) is null, never
0. How cost scales with the sequence length is ``analysis.scaling``'s. They return
the routes' bodies (``responses.Comparison`` and ``ScalingFits``, documented in
``docs/http_api.md``).
"""

from __future__ import annotations

import json
from typing import Any

from tb_attn_plugin.analysis.common.clock import attention_rate, clock_of, on_device
from tb_attn_plugin.analysis.common.configs import (
    config,
    config_key,
    distinct_labels,
    exact,
    text,
)
from tb_attn_plugin.analysis.common.spread import representative_worker
from tb_attn_plugin.analysis.cross_run.repeats import Clock, judge
from tb_attn_plugin.analysis.cross_run.why_slower import same_but_impl, why_slower
from tb_attn_plugin.analysis.measures.roofline import phase_roofs
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
    TimeVerdict,
)
from tb_attn_plugin.types.schema import RunSummary, WorkerSummary
from tb_attn_plugin.vocab.scopes import PROJECTION_PHASES

__all__ = ["UNPAIRED", "BaselineError", "compare", "decode_facts", "like_key", "model_signature", "run_facts",
           "time_verdict"]

_RATIO_KEYS = ("attention_cpu_us", "attention_device_us", "alloc_bytes", "peak_bytes", "flops_per_s",
               "decode_us_per_step")
#: What compare's groups may differ in: the implementation, and for generation the KV cache's kind
#: and heads (MHA against GQA, static against dynamic: what generation runs are compared for).
_COMPARED = ("impl", "kv_cache", "kv_heads")


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
    seq = cfg.get("seq")
    return CompareRun(
        run=run.run,
        impl=text(cfg.get("impl")), seq=seq if isinstance(seq, int) and not isinstance(seq, bool) else None,
        dtype=text(cfg.get("dtype")), model=text(cfg.get("model")),
        backend=w.backend, steps=w.step_count,
        attention_cpu_us=w.attention_cpu_us, attention_device_us=w.attention_device_us,
        step_cpu_us=w.step_cpu_us, attention_share_cpu=w.attention_share_cpu,
        alloc_bytes=sum(layer.alloc_bytes for layer in w.layers) if w.memory_recorded else None,
        peak_bytes=max((layer.peak_bytes for layer in w.layers), default=0) if w.memory_recorded else None,
        sxs_bytes=sum(layer.sxs_bytes for layer in w.layers),
        flops=flops, flops_per_s=attention_rate(w),  # work and time of the same kernels (analysis/clock.py)
        clock=clock_of(w), device_partial=w.device_partial,
        ops_per_forward=ops / calls if calls else 0.0,
        kernels_per_forward=kernels / calls if calls else 0.0,
        phases=phases,
        layers=[CompareLayer(layer=layer.layer, cpu_us=layer.cpu_us + layer.backward.cpu_us,
                             device_us=layer.device_us + layer.backward.device_us, alloc_bytes=layer.alloc_bytes,
                             peak_bytes=layer.peak_bytes) for layer in w.layers],
        findings=list(dict.fromkeys(f.id for f in w.findings)),  # each id once, as its chips
        finding_chips=_chips(w),
        ratio=CompareRatio(**dict.fromkeys(_RATIO_KEYS)),
        attention_spread=w.spread.get("attention_device_us" if on_device(w) else "attention_cpu_us"),
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

    Ratios are only ever taken within a group of like-for-like runs (``like_key``: the runner's
    configuration but the implementation, or else the model's layers' shapes). The baseline is
    ``baseline`` if named, else the first readable run by name that computes attention exactly
    (``configs.exact``), else the first by name (whatever order the runs were listed or picked in:
    the CLI and the tab agree). In every group the ratios are against the run there with the
    baseline's implementation, else against the group's first run by name. A run alone in its group
    gets none (``CompareRun.unpaired`` says why).
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
    for i, run in enumerate(usable):
        groups.setdefault(like_key(run), []).append(i)
    bases: list[int] = []
    for members in groups.values():
        by_name = sorted(members, key=lambda i: usable[i].run)
        b = next((i for i in by_name if usable[i].run == base_name), None)
        bases.append(b if b is not None else next((i for i in by_name if cfgs[i].get("impl") == impl), by_name[0]))
    labels = distinct_labels([cfgs[b] for b in bases], but=_COMPARED)
    for members, b, label in zip(groups.values(), bases, labels, strict=True):
        base, base_run = facts[b], usable[b]
        if len(members) == 1:
            base.group = label if cfgs[b] else "its own model"
            base.unpaired = (UNPAIRED if len(usable) > 1 else None)
            continue
        for i in members:
            f, run = facts[i], usable[i]
            f.baseline = base.run
            f.group = label if cfgs[b] else f"the same model as {base.run} (its layers' shapes)"
            ratios: dict[str, float | None] = {}
            for k in _RATIO_KEYS:
                denominator, value = _ratio_value(base, k), _ratio_value(f, k)
                ratios[k] = value / denominator if denominator and value is not None else None
            f.ratio = CompareRatio(**ratios)
            if run is not base_run:
                f.time_verdict = time_verdict(base_run, run)
            if run is not base_run and same_but_impl(run, base_run):
                f.why_slower = why_slower(run, base_run)
    return Comparison(baseline=base_name, runs=facts, errors=errors, headlines=headlines(usable, facts))


#: Why a run has no ratios: it is alone in its like-for-like group.
UNPAIRED = ("no ratios: no other run here has its model, sizes and configuration (implementation aside), "
            "and a ratio between different models measures the models, not the implementations")


def like_key(run: RunSummary) -> str:
    """What a run is like for like with: the runner's configuration but the implementation (and a
    generation's cache), where its metadata gives one; else its model as its layers say it
    (``model_signature``)."""
    cfg = config(run)
    if cfg.get("model") is not None:
        return "config:" + config_key(cfg, but=_COMPARED)
    return "layers:" + model_signature(run)


def model_signature(run: RunSummary) -> str:
    """A model as a trace shows it, whatever its attention implementation: the number of layers and
    each layer's score shape (B, H, Sq, Sk), heads and projection FLOPs (the q, k, v and output
    projections do the same work under every implementation). Runs with no shapes recorded get a
    signature of their own alone (never like anything), as nothing in them says which model ran."""
    w = representative_worker(run)
    layers = [(x.score_shape, x.heads_count, sum(p.flops for p in x.phases if p.phase in PROJECTION_PHASES))
              for x in w.layers]
    if not any(shape or flops for shape, _, flops in layers):
        return "unknown:" + run.run
    return json.dumps(layers)


def time_verdict(baseline: RunSummary, run: RunSummary) -> TimeVerdict | None:
    """``run``'s attention time against ``baseline``'s as far as the two can tell (``repeats.judge``),
    on the clock both have."""
    clock: Clock = "device" if all(any(on_device(w) for w in r.workers) for r in (baseline, run)) else "cpu"
    j = judge(baseline, run, clock)
    if j is None:
        return None
    return TimeVerdict(basis=j.basis, low=j.low, high=j.high, pairs=j.pairs, decided=j.decided(),
                       note=j.why_undecided() if not j.decided() else j.basis_words())


def _ratio_value(f: CompareRun, key: str) -> float | None:
    if key == "decode_us_per_step":
        return f.decode.us_per_step if f.decode is not None else None
    value = getattr(f, key)
    return None if value is None else float(value)


def decode_facts(w: WorkerSummary) -> CompareDecode | None:
    """A worker's decode steps for compare, or None without any."""
    g = w.generation
    if g is None or g.decode is None:
        return None
    decode = [t for t in g.tokens if t.role == "decode"]
    return CompareDecode(
        us_per_step=g.decode.attention_us, step_us=g.decode.step_us,
        prefill_us=g.prefill.attention_us if g.prefill is not None else None,
        context=sum(t.context for t in decode) / len(decode) if decode else 0.0, kv_cache=g.kv_cache,
        kv_heads=g.kv_heads, read_bytes_per_token=g.read_bytes_per_token, kv_bytes=g.decode.kv_bytes,
        kv_bytes_per_layer=g.kv_bytes_per_layer,
        launches_per_step=g.decode.launches)


def headlines(runs: list[RunSummary], facts: list[CompareRun]) -> list[Headline]:
    """Per group of runs that differ only in their implementation (same model, sizes, sequence
    length, dtype, mode, parallel layout and world size): the run with the least attention time
    against each of the others, in attention time, memory allocated, peak and FLOP/s. A time ratio
    that the runs cannot tell from drift (``time_verdict``) is said to be so, and where none of them
    can, the sentence names no winner."""
    groups: dict[str, list[tuple[dict[str, Any], CompareRun, RunSummary]]] = {}
    for run, f in zip(runs, facts, strict=True):
        cfg = config(run)
        if cfg.get("impl") is not None and cfg.get("model") is not None:
            groups.setdefault(config_key(cfg, but="impl"), []).append((cfg, f, run))
    out: list[tuple[str, int, str, Headline]] = []
    compared = [m for m in groups.values() if len(m) >= 2]
    # Groups apart in a field the label does not name (static against dynamic caches) read apart.
    labels = distinct_labels([m[0][0] for m in compared], but=("impl",))
    for members, label in zip(compared, labels, strict=True):
        device = all(f.clock == "device" for _, f, _ in members)
        time = _device_time if device else _cpu_time
        cfg, best, best_run = min(members, key=lambda m: (time(m[1]), m[1].run))
        names = [f.impl or f.run for _, f, _ in members]
        unique = len(set(names)) == len(names)
        versus: list[HeadlineVersus] = []
        notes: list[str] = []
        for _, f, run in sorted(members, key=lambda m: (-time(m[1]), m[1].run)):
            if f is best:
                continue
            verdict = time_verdict(best_run, run)
            decided = verdict is None or verdict.decided
            if not decided and verdict is not None and verdict.note not in notes:
                notes.append(verdict.note)
            versus.append(HeadlineVersus(run=f.run, impl=f.impl, time=_over(time(f), time(best)),
                                         time_decided=decided, alloc=_over(f.alloc_bytes, best.alloc_bytes),
                                         peak=_over(f.peak_bytes, best.peak_bytes),
                                         flops_per_s=_over(best.flops_per_s, f.flops_per_s)))
        clock = "device" if device else "CPU"
        name = (best.impl if unique else None) or best.run
        against = "; ".join(_versus_text(v, v.impl if unique and v.impl else v.run) for v in versus)
        if any(v.time_decided for v in versus):
            sentence = f"At {label}: {name} spends the least attention {clock} time: {against}."
        else:
            sentence = (f"At {label}: no implementation is faster for sure ({'; '.join(notes)}); as measured, {name} "
                        f"spent the least attention {clock} time: {against}.")
        raw_seq = cfg.get("seq")
        seq = raw_seq if isinstance(raw_seq, int) else 0
        out.append((str(cfg.get("model")), seq, label, Headline(
            group=label, best=best.run, best_impl=best.impl, clock=clock, versus=versus, sentence=sentence)))
    return [h for *_, h in sorted(out, key=lambda x: x[:3])]  # by model, then sequence length


def _device_time(f: CompareRun) -> float:
    return f.attention_device_us


def _cpu_time(f: CompareRun) -> float:
    return f.attention_cpu_us


def _over(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b is not None and a > 0 and b > 0 else None


def _times(r: float | None, less: str, more: str) -> str | None:
    """``r`` (the other's over the best's) in words: "13.8× less memory allocated"."""
    if r is None:
        return None
    if 1 / 1.05 < r < 1.05:
        return f"about the same {less.split(' ', 1)[1]}"
    return f"{r:.1f}× {less}" if r >= 1 else f"{1 / r:.1f}× {more}"


def _versus_text(v: HeadlineVersus, name: str) -> str:
    """"4.6× less time than naive, 13.8× less memory allocated, 7.4× lower peak, 3.1× the FLOP/s"."""
    time = (f"{v.time:.1f}× less time than {name}" if v.time is not None else f"less time than {name}") \
        + ("" if v.time_decided else " (within drift)")
    parts = [time,
             _times(v.alloc, "less memory allocated", "more memory allocated"),
             _times(v.peak, "lower peak", "higher peak"),
             f"{v.flops_per_s:.1f}× the FLOP/s" if v.flops_per_s is not None else None]
    return ", ".join(p for p in parts if p)
