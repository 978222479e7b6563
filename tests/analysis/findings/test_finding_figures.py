"""Every figure a finding quotes is the summary's figure (issue 32, item 4).

A finding's sentence sits beside the layer table, the headline and the generation, mask and
roofline tables; a share or a time it quotes must be the one they show. Over the whole corpus
(the public and production traces, the model corpus, the GPU traces, the hand-written traces and
the runner's session logdirs) each finding's figures are recomputed here from the summary (or,
where the summary has no counterpart, from the finding's own ``details``, ``time_us`` and
``bytes``, so that the text and the structured fields agree), rendered with ``wording``'s helpers,
and looked up in the title and explanation. ``RULES`` has one entry per finding id; an id without
one fails, unless ``NO_FIGURES`` says why it quotes none.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest
from helpers import HAND_TRACES, SHARED_TRACES

from devtools.corpus import TRACES as MODEL_TRACES
from tb_attn_plugin.analysis.common.clock import attention_us, on_device
from tb_attn_plugin.analysis.common.wording import (
    attention,
    core_only_note,
    count,
    duration,
    layer_list,
    number,
    pct,
    share,
    size,
)
from tb_attn_plugin.analysis.cross_run.compare import time_verdict
from tb_attn_plugin.analysis.cross_run.strategies import LINEAR_BACKENDS, strategies
from tb_attn_plugin.analysis.findings.generation_findings import GQA_GROUP
from tb_attn_plugin.analysis.findings.quant_findings import QUANT_SHARE
from tb_attn_plugin.analysis.findings.sparse_findings import COARSE_BLOCKS, SPARSE_KEPT
from tb_attn_plugin.analysis.measures.heads import local_heads
from tb_attn_plugin.analysis.measures.overview import top_finding
from tb_attn_plugin.analysis.measures.roofline import phase_roofs
from tb_attn_plugin.engine.loader import Loader, resolve_runs
from tb_attn_plugin.types.schema import (
    AttnStats,
    Finding,
    Generation,
    GenerationPhase,
    HeadAttention,
    LayerStats,
    PhaseStats,
    RunSummary,
    WorkerSummary,
)
from tb_attn_plugin.types.strategies import StrategyGroup
from tb_attn_plugin.vocab.scopes import QUANT_PHASES

DOCS = Path(__file__).resolve().parents[3] / "docs" / "findings.md"
GPU_TRACES = Path(__file__).resolve().parents[2] / "gpu_traces"
PRODUCTION_TRACES = SHARED_TRACES.parent / "production-traces"

#: What a rule expects: a rendering the title or explanation must contain; a list of renderings one of
#: which it must contain (a figure of ``details`` or ``time_us``, rounded there: ``_rounded``); or (what,
#: the finding's structured figure, the summary's) for a figure that is not in the text.
Check = str | list[str] | tuple[str, float, float]
Rule = Callable[[Finding, WorkerSummary], list[Check]]


# -- the summary's figures, on the clock a rule reads -------------------------------------------

def _cuda(w: WorkerSummary) -> bool:
    return w.device == "cuda"


def _time(x: LayerStats | PhaseStats, w: WorkerSummary) -> float:
    return x.device_us if _cuda(w) else x.cpu_us


def _layers(f: Finding, w: WorkerSummary) -> list[LayerStats]:
    by = {x.layer: x for x in w.layers}
    return [by[x] for x in f.evidence.layers]


def _phase(layer: LayerStats, name: str) -> PhaseStats | None:
    return next((p for p in layer.phases if p.phase == name), None)


def _rounded(render: Callable[[float], str], x: float, tol: float = 5e-5) -> list[str]:
    """``render`` of a figure the finding's fields hold rounded (``new_finding``: details to 4
    decimals, ``time_us`` to 3), as the text may have it from the unrounded value."""
    return sorted({render(x - tol), render(x), render(x + tol)})


def _time_text(f: Finding, w: WorkerSummary) -> list[str]:
    """``RuleQuery.time_text``: the finding's time per step, the device's where there is one."""
    return _rounded(lambda t: f"{duration(t)} of device time and " if _cuda(w) else f"{duration(t)} per step",
                    f.evidence.time_us, 5e-4)


def _per_step(f: Finding, after: str = "") -> list[str]:
    """The finding's ``time_us``, quoted as '<duration><after> per step'."""
    return _rounded(lambda t: f"{duration(t)}{after} per step", f.evidence.time_us, 5e-4)


def _calls(f: Finding, w: WorkerSummary) -> float:
    """Block calls per step of the finding's layers (what 'per forward' divides by)."""
    return sum(x.calls for x in _layers(f, w))


def _d(f: Finding, key: str) -> float:
    value = f.evidence.details[key]
    assert not isinstance(value, str), key
    return float(value)


# -- one rule per finding id ----------------------------------------------------------------------

def _share_of_step(f: Finding, w: WorkerSummary) -> list[Check]:
    shares = [(what, s, att, step) for what, s, att, step in
              (("CPU", w.attention_share_cpu, w.attention_cpu_us, w.step_cpu_us),
               ("device", w.attention_share_device, w.attention_device_us, w.step_device_us)) if s is not None]
    out: list[Check] = [f"{pct(s)} of the step's {what} time ({duration(att)} of {duration(step)})"
                        for what, s, att, step in shares]
    out += [f"{pct(s)} of the step's {what} time" for what, s, _, _ in shares]  # the title
    out.append(f"over {count(len(w.layers), 'layer', 'layers')}, takes")
    out.append(f"twice as fast would save at most {pct(max(s for _, s, _, _ in shares) / 2)} of the step")
    return out


def _unplaced_time(f: Finding, w: WorkerSummary) -> list[Check]:
    other = statistics.median(_time(p, w) / _time(x, w) if (p := _phase(x, "other")) else 0.0
                              for x in _layers(f, w))
    ops = _d(f, "unplaced_ops_share")
    # (the block's noun left out: "the attention block", or its core where only the core was found)
    return [f"In {layer_list(f.evidence.layers)}, {pct(other)} of the ",
            f" {'device' if _cuda(w) else 'CPU'} time is in no phase (\"other\" in the layer table",
            _rounded(lambda x: f"{pct(x)} of the block in ops that neither", ops),
            # The ops' own time is part of "other": its share cannot be the larger.
            ("the loose ops' share within 'other'", min(ops, other + 1e-3), ops)]


def _sxs_materialized(f: Finding, w: WorkerSummary) -> list[Check]:
    hit = [x for x in w.layers if x.sxs_bytes > 0]
    big = max(hit, key=lambda x: (x.sxs_bytes / max(x.calls, 1e-9), -x.layer))
    calls = max(big.calls, 1e-9)
    per_fwd = big.sxs_bytes / calls
    allocs = sum(p.sxs_allocs for p in big.phases) / calls
    masks = sum(p.sxs_mask_allocs for p in big.phases) / calls
    one = big.score_tensor_bytes or (per_fwd / allocs if allocs else per_fwd)
    total = sum(x.sxs_bytes for x in hit)
    out: list[Check] = [
        ("layers", f.evidence.layers == [x.layer for x in hit], True),
        ("bytes", f.evidence.bytes, total),
        f"In {layer_list([x.layer for x in hit])}, the attention scores",
        f"layer {big.layer} allocates {count(allocs, 'score tensor', 'score tensors')}",
        f"{size(one)} each ({size(per_fwd)})",
        f"{size(total)} of score tensors per step over {count(len(hit), 'layer', 'layers')}"]
    if masks:  # the position bias among them, where the model looks one up: figures the summary has not
        bias = _d(f, "sxs_bias_allocs_per_forward") if "sxs_bias_allocs_per_forward" in f.evidence.details else 0.0
        bias_bytes = _d(f, "sxs_bias_bytes_per_layer") if bias else 0.0
        parts = [f"{count(bias, 'position bias', 'position biases')} ({size(bias_bytes)}"] if bias else []
        if masks - bias > 1e-9:
            parts.append(f"{count(masks - bias, 'mask', 'masks')} ({size(big.sxs_mask_bytes / calls - bias_bytes)}")
        out.append(", and " + ") and ".join(parts) + ", counted apart from the scores)")
    if big.peak_bytes > 0:
        out.append(f"One score tensor is {pct(min(1.0, one / big.peak_bytes))} of the layer's peak rise "
                   f"({size(big.peak_bytes)})")
        peak = _d(f, "step_peak_bytes")  # the trace's largest total allocated: not in the summary
        if peak:
            out.append(f"{pct(min(1.0, one / peak))} of the step's peak allocated memory ({size(peak)})")
    return out


def _dispatch_bound(f: Finding, w: WorkerSummary) -> list[Check]:
    forward: Check = ("time_us", f.evidence.time_us, sum(_time(x, w) for x in _layers(f, w)))  # the layer table's
    if not _cuda(w):  # medians over block calls of the ops: the events' figures, not the summary's
        return [forward, _rounded(lambda x: f" forward runs {number(x)} CPU ops", _d(f, "ops_per_forward")),
                _rounded(lambda x: f", and {pct(x)} of its ", _d(f, "tiny_time_share")),
                _rounded(lambda x: f" of its {duration(x)} goes to ops shorter", _d(f, "block_us")),
                _rounded(lambda x: f"(median top-level op {duration(x)})", _d(f, "median_op_us"))]
    rows = [(x.cpu_us / x.calls, x.device_us / x.calls, sum(p.kernels for p in x.phases) / x.calls)
            for x in w.layers if x.calls > 0 and x.device_us > 0]
    cpu, dev, kernels = (statistics.median(r[k] for r in rows) for k in range(3))
    ratio = statistics.median(c / d for c, d, _ in rows)
    return [forward, f" forward takes {duration(cpu)} on the CPU but {duration(dev)} on the device "
            f"({ratio:.1f}×, medians over layers), launching {count(kernels, 'kernel', 'kernels')} per forward; "
            f"the device is busy {pct(w.step_device_us / w.step_cpu_us)} of the step"]


def _backend_mismatch(f: Finding, w: WorkerSummary) -> list[Check]:
    by: dict[str, list[int]] = {}
    for x in w.layers:
        if x.backend != "unknown":
            by.setdefault(x.backend, []).append(x.layer)
    if f.severity != "high" and "model" in f.evidence.details:
        # One model's layers of several (``numbering.layer_models``, not in the summary): its odd layers ran
        # the backends the finding names beside them, none the majority's.
        backends = f.evidence.details["backends"]
        assert isinstance(backends, str)
        majority = f.evidence.details["majority"]
        return [f"({backends})", ("time_us", f.evidence.time_us, sum(_time(x, w) for x in _layers(f, w))),
                *[(f"layer {x.layer}'s backend {x.backend} named and not the majority's", 1.0,
                   float(f": {x.backend}" in backends and x.backend != majority)) for x in _layers(f, w)]]
    if f.severity != "high":
        desc = "; ".join(f"{layer_list(ls)}: {b}" for b, ls in sorted(by.items(), key=lambda kv: kv[1]))
        return [f"({desc})", ("time_us", f.evidence.time_us, sum(_time(x, w) for x in _layers(f, w)))]
    # The layers outside the requested backends: every layer of each backend they ran.
    return [f"{b} in {layer_list(ls)}" for b, ls in sorted(by.items()) if set(ls) & set(f.evidence.layers)]


def _hidden_copy(f: Finding, w: WorkerSummary) -> list[Check]:
    per_fwd, dtod, nbytes = _d(f, "copies_per_forward"), _d(f, "memcpy_dtod_per_forward"), f.evidence.bytes
    out: list[Check] = [("copy_bytes_per_step", _d(f, "copy_bytes_per_step"), nbytes)]
    if per_fwd:
        out.append(_rounded(lambda x: f"{count(x, 'copy', 'copies')} per forward", per_fwd))
        if nbytes:
            copies = round(per_fwd * _calls(f, w) * w.step_count)  # in all the steps: a whole number
            out.append(f", {size(nbytes * w.step_count / copies)} each ({size(nbytes)} per step; ")
        out.append(_time_text(f, w))
    else:
        out.append(_rounded(lambda t: f"({duration(t)} per step)", f.evidence.time_us, 5e-4))
    if dtod:
        out.append(_rounded(lambda x: f"{count(x, 'Memcpy DtoD', 'Memcpy DtoD')} per forward", dtod))
    return out


def _mask_rebuilt(f: Finding, w: WorkerSummary) -> list[Check]:
    n = _d(f, "builder_ops_per_forward")
    return [_rounded(lambda x: f"{count(x, 'mask-building op', 'mask-building ops')} per forward (", n),
            _time_text(f, w)]


def _math_fallback(f: Finding, w: WorkerSummary) -> list[Check]:
    scores = sum(x.sxs_bytes for x in _layers(f, w))  # the total sxs-materialized quotes
    out: list[Check] = [_rounded(lambda x: f"{number(x)} CPU ops", _d(f, "ops_per_forward")), _time_text(f, w),
                        ("bytes", f.evidence.bytes, scores)]
    if _cuda(w):
        out.append(_rounded(lambda x: f" and {number(x)} kernels per forward", _d(f, "kernels_per_forward")))
    if scores:
        out.append(f"({size(scores)} of score tensors per step)")
    return out


def _mha_unfused(f: Finding, w: WorkerSummary) -> list[Check]:
    return [_rounded(lambda x: f"{count(x, 'call', 'calls')} per forward; ", _d(f, "calls_per_forward")),
            _time_text(f, w),
            ("bytes", f.evidence.bytes, sum(x.sxs_bytes for x in _layers(f, w)))]


def _fp32_upcast(f: Finding, w: WorkerSummary) -> list[Check]:
    gemms, sgemm, ups = (_d(f, k) for k in ("fp32_matmuls_per_forward", "sgemm_kernels_per_forward",
                                           "upcasts_per_forward"))
    out: list[Check] = [_per_step(f)]
    if gemms:
        out.append(_rounded(lambda x: f"float32 inputs go into {count(x, 'matmul', 'matmuls')} per forward", gemms))
    if sgemm:
        out.append(_rounded(lambda x: f"{count(x, 'FP32 sgemm kernel', 'FP32 sgemm kernels')} per forward", sgemm))
    if ups:
        out.append(_rounded(lambda x: f"{count(x, 'copy', 'copies')} per forward upcast", ups))
        out.append(f"to float32 ({size(f.evidence.bytes)} per step)")
    return out


def _safe_softmax(f: Finding, w: WorkerSummary) -> list[Check]:
    return [_rounded(lambda x: f"{count(x, 'call', 'calls')} per forward (", _d(f, "calls_per_forward")),
            _time_text(f, w)]


def _decode(w: WorkerSummary) -> tuple[Generation, GenerationPhase]:
    g = w.generation
    assert g is not None and g.decode is not None
    return g, g.decode


def _decode_time(f: Finding, w: WorkerSummary, us: float) -> Check:
    """``time_us``: a decode step's time (what the text quotes) as a mean over the profiled steps."""
    _, d = _decode(w)
    return ("time_us, per profiled step", f.evidence.time_us, us * d.steps / w.step_count)


def _kv_cache_realloc(f: Finding, w: WorkerSummary) -> list[Check]:
    g, d = _decode(w)
    out: list[Check] = [
        f"{size(g.realloc_bytes_per_token)} per step", f"grows by {size(g.kv_bytes_per_token)} per token",
        f"Appending takes {duration(d.kv_cache_us)} per decode step, {pct(d.kv_cache_us / d.attention_us)} of "
        f"decode attention time ({duration(d.attention_us)})", _decode_time(f, w, d.kv_cache_us)]
    if d.step_us > 0:
        out.append(f"and {pct(d.kv_cache_us / d.step_us)} of the step")
    return out


def _decode_memory_bound(f: Finding, w: WorkerSummary) -> list[Check]:
    g, d = _decode(w)
    assert g.reference_bytes_per_s
    out: list[Check] = [
        f"reads {size(g.read_bytes_per_token)} of K and V over every layer",
        f"in {duration(d.core_us)} of attention core time, {size(g.achieved_bytes_per_s)}/s: "
        f"{pct(g.achieved_bytes_per_s / g.reference_bytes_per_s)} of {g.reference} ({size(g.reference_bytes_per_s)}/s)",
        _decode_time(f, w, d.core_us)]
    if g.read_bytes_per_token > 1.01 * d.kv_bytes:
        out.append(f"(the cache is {size(d.kv_bytes)}:")
    return out


def _gqa_opportunity(f: Finding, w: WorkerSummary) -> list[Check]:
    g, d = _decode(w)
    assert g.kv_heads
    heads = int(_d(f, "query_heads"))  # the run's config, else q's shape
    per_head = d.kv_bytes / g.kv_heads
    out: list[Check] = [
        f"Decode reads a KV cache of {size(d.kv_bytes)} per step, {size(per_head)} per KV head",
        f"with {count(g.kv_heads, 'KV head', 'KV heads')} for {count(heads, 'query head', 'query heads')}",
        f"cut what decode reads by up to {pct(1 - 1 / g.kv_heads)}", _decode_time(f, w, d.core_us)]
    # H/4 and 1 KV heads, once each (H/4 is 1 at 4 query heads: multi-query).
    options = {n: label for n, label in ((heads // GQA_GROUP, f"H/{GQA_GROUP}, grouped-query"), (1, "multi-query"))
               if n < g.kv_heads}
    out += [f"{count(n, 'KV head', 'KV heads')} ({label}) would read {size(per_head * n)}, {pct(1 - n / g.kv_heads)} "
            "less" for n, label in options.items()]
    return out


def _kv_expanded(f: Finding, w: WorkerSummary) -> list[Check]:
    g, d = _decode(w)
    ratio = g.read_bytes_per_token / d.kv_bytes
    expand = sum(_time(p, w) for x in d.layers for p in x.phases if p.phase == "kv_expand")
    out: list[Check] = [f"reads {size(g.read_bytes_per_token)} of K and V, {ratio:.1f}x the KV cache's "
                        f"{size(d.kv_bytes)}", f"Decode reads K and V {ratio:.1f}x over", _decode_time(f, w, expand)]
    if expand > 0:
        out.append(f"(the kv_expand phase: {duration(expand)} per decode step, {pct(expand / d.attention_us)} of "
                   f"decode attention time, {duration(d.attention_us)})")
        out.append(f"from {count(g.kv_heads or 0, 'KV head', 'KV heads')} to every one")
    return out


def _decode_dispatch_bound(f: Finding, w: WorkerSummary) -> list[Check]:
    g, d = _decode(w)
    what = "kernel" if _cuda(w) else "op"
    out: list[Check] = [
        f"A decode step runs {count(d.launches, what, what + 's')} of attention ({duration(d.attention_us)} per step, "
        f"{count(d.launches / len(w.layers), what, what + 's')} per layer)", f"At batch {g.batch or '?'} ",
        _decode_time(f, w, d.attention_us)]
    if _cuda(w):
        steps = {t.step for t in g.tokens if t.role == "decode"}
        walls = [(s.cpu_us, s.device_us) for s in w.per_step if s.step in steps and s.cpu_us > 0]
        busy = sum(dev for _, dev in walls) / sum(wall for wall, _ in walls)
        out.append(f"the device is busy {pct(busy)} of a decode step's {duration(d.step_us)}")
    else:
        out.append(f"each takes {duration(d.attention_us / d.launches)} on average")
        if g.reference_bytes_per_s:
            cores = sorted(t.core_us for t in g.tokens if t.role == "decode")
            n = len(cores)  # the median: the middle step, or the mean of the middle two
            mid = cores[n // 2] if n % 2 else (cores[n // 2 - 1] + cores[n // 2]) / 2
            out.append(f"would take {duration(g.read_bytes_per_token / g.reference_bytes_per_s * 1e6)} of the core's "
                       f"{duration(mid)} (median step)")
    return out


def _quantization_overhead(f: Finding, w: WorkerSummary) -> list[Check]:
    rows = [(x, sum(_time(p, w) for p in x.phases if p.phase in QUANT_PHASES), _time(x, w)) for x in w.layers]
    hit = [(x, q, b) for x, q, b in rows if b > 0 and any(_phase(x, p) for p in QUANT_PHASES) and q / b > QUANT_SHARE]
    spent, block = sum(q for _, q, _ in hit), sum(b for _, _, b in hit)
    return [("layers", f.evidence.layers == [x.layer for x, _, _ in hit], True),
            f"In {layer_list(f.evidence.layers)}, the quantize and dequantize phases take {duration(spent)} per step, "
            f"{pct(spent / block)} of the blocks' {'device' if _cuda(w) else 'CPU'} time ({duration(block)})"]


def _sparsity_unused(f: Finding, w: WorkerSummary) -> list[Check]:
    layers = _layers(f, w)
    first = layers[0].mask
    assert first is not None
    core = sum(x.mask.core_us for x in layers if x.mask is not None)
    out: list[Check] = [
        f"The mask {first.spec} keeps {pct(first.kept)} of the (query, key) pairs in {layer_list(f.evidence.layers)}",
        f"the attention core takes {duration(core)} per step, where a kernel that skipped what the mask drops would "
        f"do {pct(first.kept)} of the arithmetic"]
    if first.dense_work:
        out.append("but its ops computed every score")
    elif layers[0].backend == "flex" and first.blocks is not None and \
            first.blocks >= max(SPARSE_KEPT, COARSE_BLOCKS * first.kept):
        out.append(f"it keeps {pct(first.blocks)} of the 128×128 blocks")
    else:  # the layer's dense work at the rate of the run's dense layers
        rate = statistics.median(x.mask.core_us / x.mask.work_flops for x in w.layers
                                 if x.mask is not None and x.mask.kept >= SPARSE_KEPT and x.mask.work_flops > 0)
        dense = rate * first.dense_flops
        out.append(f"it took {pct(first.core_us / dense)} of the time its dense work takes at the rate of the run's "
                   f"dense layers ({duration(dense)} per step)")
    return out


def _flex_eager(f: Finding, w: WorkerSummary) -> list[Check]:
    eager = [x.layer for x in w.layers if x.backend == "flex-eager"]
    return [f"{layer_list(eager)} ran flex_attention's eager path",
            ("time_us", f.evidence.time_us, sum(_time(x, w) for x in w.layers if x.backend == "flex-eager"))]


def _cpu_clock(w: WorkerSummary) -> str:
    """How a rule timing CPU work (compiling, building a mask) names it where the trace is judged
    by device time."""
    return " of CPU time" if _cuda(w) else ""


def _block_mask_rebuilt(f: Finding, w: WorkerSummary) -> list[Check]:
    builds = _d(f, "builds_per_step")
    out: list[Check] = [_rounded(lambda x: f"create_block_mask ran {count(x, 'time', 'times')} per step, ", builds),
                        _per_step(f, _cpu_clock(w))]
    if f.evidence.ops == ["block_mask phase"]:  # built inside the blocks: the layer table's block_mask rows
        phases = [p for x in w.layers if (p := _phase(x, "block_mask")) is not None]
        out += [("builds", builds, sum(p.calls for p in phases)),
                ("time_us", f.evidence.time_us, sum(p.cpu_us for p in phases))]
    return out


def _recompiles(f: Finding, w: WorkerSummary) -> list[Check]:
    return [_per_step(f, _cpu_clock(w)), f" per step, {count(_d(f, 'compiles'), 'compile', 'compiles')})"]


def _graph_break(f: Finding, w: WorkerSummary) -> list[Check]:
    return [_rounded(lambda x: f"in {layer_list(f.evidence.layers)} {count(x, 'top-level op', 'top-level ops')} per "
                     "step ran eagerly", _d(f, "eager_ops_per_step"))]


def _far_from_roof(f: Finding, w: WorkerSummary) -> list[Check]:
    rl = w.roofline
    assert rl is not None
    device = rl.clock == "device"

    def t(p: PhaseStats) -> float:  # the roofline's clock (docs/analysis.md, "Roofline")
        return p.device_us if device else p.cpu_self_us

    total = sum(t(p) for x in w.layers for p in x.phases)
    names = str(f.evidence.details["phases"]).split(",")
    spent = {n: sum(t(p) for x in w.layers for p in x.phases if p.phase == n) for n in names}
    roofs = phase_roofs(w)
    reach = {n: roofs[n].share or 0.0 for n in names}
    # The roofline's own time (forward; a CPU's ops' self time), named so (the headline's and the layer
    # table's hold the backward and the gaps between ops); the core's where only cores were found.
    core = attention(sum(x.core_only for x in w.layers), len(w.layers)) != "attention"
    of = f"of {'the attention core' if core else 'attention'}'s forward {'device' if device else 'CPU self'} time"
    out: list[Check] = [f"{pct(sum(spent.values()) / total)} {of} ({duration(sum(spent.values()))} per step)",
                        f"would take {duration(sum(spent[n] * reach[n] for n in names))}"]
    if len(names) == 1:
        out.append(f"reaches {share(reach[names[0]])} of its attainable ceiling")
    else:
        lo, hi = share(min(reach.values())), share(max(reach.values()))
        out.append(f"reach {lo if lo == hi else f'{lo}-{hi}'} of their attainable ceilings")
        out += [f"{n} {pct(spent[n] / total)} of that time, {share(reach[n])} of its ceiling" for n in names]
    return out


def _local_heads(f: Finding, w: WorkerSummary) -> list[Check]:
    """The head table's figures: each local head's forward time, over attention's forward time."""
    heads = {(x.layer, h.head): h for x in w.layers for h in x.heads}
    named = [(int(layer), int(head)) for k in str(f.evidence.details["heads_list"]).split(",")
             for layer, head in [k.removeprefix("L").split("H")]]
    spent = sum(((h.device_us if _cuda(w) else h.cpu_us) if (h := heads.get(k)) else 0.0) for k in named)
    total = sum(_time(x, w) for x in w.layers)
    saved = _d(f, "saving_us")  # an estimate from the mask's pairs: not in the summary
    return [f"they take {pct(spent / total)} of attention's forward time ({duration(spent)} per step)",
            ("time_us", f.evidence.time_us, spent),
            _rounded(lambda x: f"would save about {duration(x)} per step of their core work ({pct(x / total)} of "
                     "attention's forward time)", saved)]


def _per_sequence(f: Finding, w: WorkerSummary) -> list[Check]:
    spent = sum(_time(p, w) for x in _layers(f, w) for p in x.phases if p.phase == "sdpa")
    return [("time_us", f.evidence.time_us, spent), f"{duration(spent)} per step in all"]


def _kv_cache_in_training(f: Finding, w: WorkerSummary) -> list[Check]:
    spent = sum(_time(p, w) for x in w.layers for p in x.phases if p.phase == "kv_cache")
    forward = sum(_time(x, w) for x in w.layers)
    return [("time_us", f.evidence.time_us, spent),
            f"the kv_cache phase takes {duration(spent)} per step, {pct(spent / forward)} of attention's forward "
            f"{'device' if _cuda(w) else 'CPU'} time ({duration(forward)})"]


RULES: dict[str, Rule] = {
    "share-of-step": _share_of_step, "unplaced-time": _unplaced_time, "sxs-materialized": _sxs_materialized,
    "dispatch-bound": _dispatch_bound, "backend-mismatch": _backend_mismatch, "hidden-copy": _hidden_copy,
    "mask-rebuilt": _mask_rebuilt, "math-fallback": _math_fallback, "mha-unfused": _mha_unfused,
    "fp32-upcast": _fp32_upcast, "safe-softmax": _safe_softmax, "kv-cache-realloc": _kv_cache_realloc,
    "decode-memory-bound": _decode_memory_bound, "gqa-opportunity": _gqa_opportunity, "kv-expanded": _kv_expanded,
    "decode-dispatch-bound": _decode_dispatch_bound, "quantization-overhead": _quantization_overhead,
    "sparsity-unused": _sparsity_unused, "flex-eager": _flex_eager, "block-mask-rebuilt": _block_mask_rebuilt,
    "recompiles": _recompiles, "graph-break": _graph_break, "far-from-roof": _far_from_roof,
    "local-heads": _local_heads, "per-sequence-attention": _per_sequence, "kv-cache-in-training": _kv_cache_in_training,
}
#: Finding ids that quote no figure, with the reason.
NO_FIGURES: dict[str, str] = {}
#: Across runs (``analysis.strategies``): checked against the strategies table below, not per trace.
ACROSS_RUNS = ("below-crossover", "accuracy-cost")
#: Rules the corpus does not trigger, with the reason; every other rule must meet a finding.
UNSEEN: dict[str, str] = {
    "recompiles": "the runner warms compiled models up before the profiled steps",
    "graph-break": "the runner's compiled models compile whole",
    "local-heads": "needs the runner's --attn-stats event files, which no session logdir here writes "
                   "(test_local_heads_quote_the_head_table gives a runner trace statistics)",
    "per-sequence-attention": "no trace here loops over its sequences "
                              "(tests/analysis/findings/test_serving_findings.py builds one and checks its figures "
                              "with this rule)",
}


#: Findings on CPU work outside attention's own time (building a BlockMask, compiling, ops run
#: eagerly): their ``time_us`` is CPU time, which the text names, and may exceed attention's.
CPU_WORK = ("block-mask-rebuilt", "recompiles", "graph-break")


def _within_attention(f: Finding, w: WorkerSummary) -> Check:
    """``time_us`` is per profiled step on the headline's clock, within attention's time there: the
    headline quotes it as "in X per step (Y% of attention)"."""
    attention = attention_us(w)  # the clock the trace is judged by (analysis/common/clock.py)
    return ("time_us, at most attention's on the headline's clock", f.evidence.time_us,
            min(f.evidence.time_us, attention))


def problems(f: Finding, w: WorkerSummary) -> list[str]:
    """What in ``f`` disagrees with the summary ``w``: each expected rendering missing from its
    title and explanation, and each structured figure that differs."""
    rule = RULES.get(f.id)
    if rule is None:
        return [] if f.id in NO_FIGURES else [f"no rule for finding id {f.id!r}: add one to RULES (or NO_FIGURES)"]
    text = f"{f.title}\n{f.explanation}"
    out = []
    for check in [*rule(f, w), *([] if f.id in CPU_WORK else [_within_attention(f, w)])]:
        if isinstance(check, str):
            if check not in text:
                out.append(f"expected {check!r}")
        elif isinstance(check, list):
            if not any(c in text for c in check):
                out.append(f"expected one of {check!r}")
        elif check[1] != pytest.approx(check[2], rel=1e-3, abs=1e-3):
            out.append(f"{check[0]}: the finding has {check[1]}, the summary {check[2]}")
    return out


# -- the corpus -------------------------------------------------------------------------------------

def _files(paths: list[Path]) -> list[RunSummary]:
    loader = Loader()
    return [loader.summarize_run(run) for p in paths for run in resolve_runs(str(p))]


def _logdir(path: Path) -> list[RunSummary]:
    loader = Loader()
    return [loader.summarize_run(run) for run in resolve_runs(str(path))]


COMMITTED: dict[str, Callable[[], list[RunSummary]]] = {
    "public": lambda: _files(sorted(SHARED_TRACES.glob("*/*.json.gz"))),
    "production": lambda: _files(sorted(PRODUCTION_TRACES.glob("*.json.gz"))),
    "hand": lambda: _files(sorted(HAND_TRACES.glob("*.json"))),
    "models": lambda: _logdir(MODEL_TRACES),
    "gpu": lambda: _logdir(GPU_TRACES),
}
#: The session's runner logdirs (``tests/conftest.py``), built once for the whole suite.
RUNNER = ("builtin_logdir", "sparse_logdir", "generation_logdir", "strategies_logdir", "torchrun_logdir")
SEEN: set[str] = set()


def headline_problems(w: WorkerSummary) -> list[str]:
    """Every figure of the headline, recomputed from the summary's own: the share of the step (the
    clock the trace is judged by: the device's where it has a device share), forward against
    backward, the largest phases (each named with its denominator), and the top finding's time as
    a share of attention."""
    device = on_device(w) and w.attention_share_device is not None
    share, att, step = ((w.attention_share_device, w.attention_device_us, w.step_device_us) if device else
                        (w.attention_share_cpu, w.attention_cpu_us, w.step_cpu_us))
    if not w.headline or att <= 0:
        return []
    clock = "device" if device else "CPU"
    want = []
    if share is not None and step > 0:
        want.append(f"{pct(share)} of the {clock} step time ({duration(att)} of {duration(step)} per step")
    core = sum(x.core_only for x in w.layers)
    want.append(f" per step, {core_only_note(core, len(w.layers)) or count(len(w.layers), 'layer', 'layers')})")
    forward = sum(x.device_us if device else x.cpu_us for x in w.layers)
    both = att - forward > 0.01 * att
    if both:
        want.append(f"forward {pct(forward / att)}, backward {pct((att - forward) / att)}")
    phases: dict[str, float] = {}
    for x in w.layers:
        for p in x.phases:
            t = p.device_us + p.backward.device_us if device else p.cpu_us + p.backward.cpu_us
            phases[p.phase] = phases.get(p.phase, 0.0) + t
    top = [(n, t) for n, t in sorted(phases.items(), key=lambda kv: -kv[1]) if t >= 0.05 * att][:3]
    if top:
        want.append(("by phase (forward and backward), " if both else "by phase, ")
                    + ", ".join(f"{n} {pct(t / att)}" for n, t in top))
    spread = w.spread.get("attention_device_us" if device else "attention_cpu_us")
    if spread is not None and spread.noisy:
        # "ranged" for every step's range, "had an interquartile range of" from 8 steps.
        what = "had an interquartile range of" if spread.kind == "iqr" else "ranged"
        want.append(f"Its steps {what} {duration(spread.lo)} to {duration(spread.hi)} over {spread.steps} steps")
    finding = top_finding(w.findings)
    if finding is not None and finding.evidence.time_us > 0:
        noun = attention(sum(x.core_only for x in w.layers), len(w.layers))
        of = f"{noun}'s forward and backward time" if both else noun
        t = finding.evidence.time_us
        # A generation's findings quote decode steps: the headline says its time is the mean of every step.
        per = "per step" if w.generation is None or w.generation.decode is None else \
            f"per profiled step (the mean of {w.step_count}, prefill included)"
        want.append(f"Top finding ({finding.severity}): {finding.title.rstrip('.')}, in {duration(t)} {per} "
                    f"({pct(min(t / att, 1.0))} of {of})")
        assert finding is next(f for f in w.findings if f.severity != "info"), "the top finding is listed first"
    return [f"headline: expected {x!r}" for x in want if x not in w.headline]


def _check(runs: list[RunSummary]) -> list[str]:
    out = []
    for run in runs:
        assert not run.errors, (run.run, run.errors)
        for w in run.workers:
            out += [f"{run.run} [{w.worker}] {p}" for p in headline_problems(w)]
            for f in w.findings:
                SEEN.add(f.id)
                out += [f"{run.run} [{w.worker}] {f.id}: {p}" for p in problems(f, w)]
    return out


@pytest.mark.parametrize("source", sorted(COMMITTED))
def test_committed_traces_quote_the_summarys_figures(source: str) -> None:
    runs = COMMITTED[source]()
    assert runs and any(w.findings for r in runs for w in r.workers), source
    bad = _check(runs)
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("fixture", RUNNER)
def test_runner_traces_quote_the_summarys_figures(request: pytest.FixtureRequest, fixture: str) -> None:
    runs = _logdir(request.getfixturevalue(fixture))
    assert runs and any(w.findings for r in runs for w in r.workers), fixture
    bad = _check(runs)
    assert not bad, "\n".join(bad)


def test_the_corpus_meets_every_rule() -> None:
    """After the corpus tests (same module, in order): every rule met a finding, so none checks nothing."""
    if not SEEN:
        pytest.skip("run with the corpus tests above")
    assert set(RULES) - set(UNSEEN) <= SEEN, sorted(set(RULES) - set(UNSEEN) - SEEN)


def test_every_documented_finding_has_a_rule() -> None:
    documented = set(re.findall(r"^### `([a-z0-9-]+)`", DOCS.read_text(), flags=re.M))
    documented |= set(re.findall(r"^- `([a-z0-9-]+)` \(", DOCS.read_text(), flags=re.M))  # across runs
    assert {"share-of-step", "far-from-roof", "below-crossover"} <= documented  # the pattern still reads the docs
    assert documented == set(RULES) | set(NO_FIGURES) | set(ACROSS_RUNS), documented ^ (set(RULES) | set(ACROSS_RUNS))
    assert set(UNSEEN) <= set(RULES)


def test_a_wrong_figure_is_caught() -> None:
    """The check can fail: one digit changed in each quoted figure of a real trace's findings."""
    (run,) = [r for r in COMMITTED["public"]() if r.run.startswith("switchtransformers")]
    (w,) = run.workers
    assert {f.id for f in w.findings} >= {"hidden-copy", "sxs-materialized", "dispatch-bound", "share-of-step"}
    for f in w.findings:
        assert problems(f, w) == []
        wrong = msgspec.structs.replace(f, explanation=re.sub(r"\d", lambda m: str((int(m[0]) + 1) % 10),
                                                              f.explanation))
        wrong = msgspec.structs.replace(wrong, title=re.sub(r"\d", lambda m: str((int(m[0]) + 1) % 10), f.title))
        assert problems(wrong, w), f.id
    assert headline_problems(w) == []
    assert headline_problems(msgspec.structs.replace(w, step_device_us=2 * w.step_device_us))
    # Each of the headline's figures is checked: one digit changed anywhere in it is caught.
    for k in range(len(w.headline)):
        if w.headline[k].isdigit() and not w.headline[k - 1].isalpha():  # a figure's digit, not "L3" or "sxs"
            wrong = w.headline[:k] + str((int(w.headline[k]) + 1) % 10) + w.headline[k + 1:]
            assert headline_problems(msgspec.structs.replace(w, headline=wrong)), wrong
    unknown = msgspec.structs.replace(w.findings[0], id="new-rule")
    assert problems(unknown, w) == ["no rule for finding id 'new-rule': add one to RULES (or NO_FIGURES)"]


# -- across runs: the strategies table's figures ----------------------------------------------------

def _strategy_problems(g: StrategyGroup) -> list[str]:
    out = []
    for f in g.findings:
        d = f.evidence.details
        text = f"{f.title}\n{f.explanation}"
        at = {x.strategy: x for x in g.rows if x.seq == d["seq"]}
        if f.id == "below-crossover":
            (x,) = [x for x in at.values() if x.time_us == pytest.approx(float(d["time_us"]), abs=1e-3)]
            best = at[str(d["exact"])]
            assert best.exact and best.time_us == min(r.time_us for r in at.values() if r.exact)
            want = [f"at {x.seq} tokens {duration(x.time_us)} per step against {duration(best.time_us)} for "
                    f"{best.strategy}", f"({x.time_us / best.time_us:.1f}× slower)", f"{x.strategy} is slower"]
        elif f.id == "accuracy-cost":
            (x,) = [x for x in at.values() if x.accuracy is not None and f.title.startswith(x.strategy + " ")]
            assert x.accuracy is not None
            want = [f"At {x.seq} tokens {x.strategy} changes the attention output by {pct(x.accuracy.rel_l1)}",
                    f"cosine similarity {x.accuracy.cosine:.4f}"]
            exact = [r for r in at.values() if r.exact]
            if exact:
                best = min(exact, key=lambda r: r.time_us)
                want.append(f"it is {best.time_us / x.time_us:.2f}× as fast as {best.strategy}")
        else:
            out.append(f"no rule for the strategies finding {f.id!r}")
            continue
        out += [f"{g.label} {f.id}: expected {s!r}" for s in want if s not in text]
    return out


def test_strategies_findings_quote_the_table(strategies_logdir: Path) -> None:
    runs = _logdir(strategies_logdir)
    view = strategies(runs)
    by_run = {r.run: r for r in runs}
    # The finding stands where, and only where, a linear row is slower than the fastest exact row at
    # its length with neither side noisy and the two runs' difference beyond their drift. Which rows
    # those are depends on this machine's load; the rule itself is pinned by
    # tests/analysis/cross_run/test_strategies.py.
    premise = False
    for g in view.groups:
        for seq in {x.seq for x in g.rows}:
            at = [x for x in g.rows if x.seq == seq]
            exact = [x for x in at if x.exact and x.time_us > 0]
            if not exact:
                continue
            best = min(exact, key=lambda x: x.time_us)
            for x in at:
                verdict = time_verdict(by_run[best.run], by_run[x.run]) if x is not best else None
                premise |= (x.backend in LINEAR_BACKENDS and best.time_us < x.time_us and not x.noisy
                            and not best.noisy and verdict is not None and verdict.decided)
    found = [f for g in view.groups for f in g.findings]
    assert ("below-crossover" in {f.id for f in found}) == premise
    bad = [p for g in view.groups for p in _strategy_problems(g)]
    assert not bad, "\n".join(bad)


def test_local_heads_quote_the_head_table(builtin_logdir: Path) -> None:
    """local-heads on real runner traces, measured heads and heads split evenly from their layer,
    with statistics that make half the heads local."""
    for name in ("naive-per-head", "naive"):
        (run,) = [r for r in _logdir(builtin_logdir) if r.run == name]
        (w,) = run.workers
        stats = AttnStats(step=0, weights="checkpoint", stats=["window_8"], window=8, threshold=0.99, heads=[
            HeadAttention(layer=x.layer, head=h.head, values={"window_8": 1.0 if h.head % 2 else 0.5},
                          local=h.head % 2 == 1, sink=False) for x in w.layers for h in x.heads])
        f = local_heads(w, stats, seq=16, causal=True)
        assert f is not None and f.id == "local-heads"
        assert problems(f, w) == [], name
