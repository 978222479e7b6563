"""Findings from op patterns: what ran inside attention that a better implementation avoids.

Hidden copies of the scores, a causal mask rebuilt on every call, the math backend of SDPA,
FP32 matmuls under half-precision inputs, and ``_safe_softmax``. Each rule reads the forward
attention ops within the profiled steps (``RuleQuery``) and returns at most one finding;
``findings.find`` runs them. Thresholds and their reasons are in ``docs/findings.md``.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from tb_attn_plugin.analysis.attribution.query import HALF_DTYPES, I64, RuleQuery, dtype_name
from tb_attn_plugin.analysis.common.finding import new_finding
from tb_attn_plugin.analysis.common.wording import count, duration, layer_list, number, size
from tb_attn_plugin.analysis.ops.sdpa_causes import Cause, SdpaCall, causes
from tb_attn_plugin.trace.kineto import Kind
from tb_attn_plugin.types.schema import Finding
from tb_attn_plugin.vocab.aten import (
    ARANGE_OP,
    COMPARE_OPS,
    COPY_OPS,
    DTYPE_CONVERT_OPS,
    FILL_OPS,
    GEMM_OPS,
    INPLACE_COPY_OP,
    MATMUL_OPS,
    MM_OP,
    NATIVE_MHA_NEED_WEIGHTS_ARG,
    NATIVE_MHA_OP,
    SAFE_SOFTMAX_OP,
    SDPA_MATH_OP,
    SDPA_OP,
    SDPA_OPS,
    SOFTMAX_OPS,
    TRIANGLE_OPS,
)
from tb_attn_plugin.vocab.impls import Impl
from tb_attn_plugin.vocab.scopes import CORE_PHASES_BUT_PASSES, PHASES, in_order

_FLEX_PHASE = PHASES.index("flex")

__all__ = ["MIN_COPY_ELEMS", "OP_RULES"]

MIN_COPY_ELEMS = 256  # smaller copies in the mask phase are scalars or small masks, not scores


#: The phases of an attention core: the op before a copy among them says whether scores exist yet.
#: Not the passes over scores (the copies looked at are in the mask phase), nor int8's dequantization
#: (its scores exist: a copy after it copies them).
_CORE_PHASES = np.array([PHASES.index(p) for p in in_order(CORE_PHASES_BUT_PASSES)])
_QK = PHASES.index("qk_matmul")


def _on_scores(t: RuleQuery, idx: I64) -> np.ndarray:
    """Whether each op of ``idx`` works on scores: the last core op of its layer on its thread before it
    made them (q·kᵀ). A copy with no q·kᵀ before it in its call (ahead of the core, or in a fused SDPA
    call's block) copies what is passed to the core: a mask or a bias."""
    core = _core_ops(t)
    out = np.zeros(idx.size, np.bool_)
    for k, i in enumerate(idx.tolist()):
        mine = core[(t.a.layer[core] == t.a.layer[i]) & (t.ev.track[core] == t.ev.track[i])]
        j = int(np.searchsorted(mine, i)) - 1
        out[k] = j >= 0 and t.a.phase[mine[j]] == _QK
    return out


def _core_ops(t: RuleQuery) -> I64:
    return np.flatnonzero(t.fwd & (t.ev.kind == Kind.CPU_OP) & np.isin(t.a.phase, _CORE_PHASES))


def _bucketing(t: RuleQuery, idx: I64) -> np.ndarray:
    """Whether each op of ``idx`` buckets relative positions for a position bias: it runs in its call
    before the bias lookup (after the layer's last core op on its thread, and before the lookup). T5's
    compute_bias compares positions (arange, lt, gt) to pick buckets; that builds no mask."""
    lookups = t.bias_lookups
    out = np.zeros(idx.size, np.bool_)
    if lookups.size == 0:
        return out
    core = _core_ops(t)
    for e in lookups.tolist():
        mine = core[(t.a.layer[core] == t.a.layer[e]) & (t.ev.track[core] == t.ev.track[e]) & (core < e)]
        lo = int(mine[-1]) if mine.size else -1
        out |= (idx > lo) & (idx < e) & (t.a.layer[idx] == t.a.layer[e]) & (t.ev.track[idx] == t.ev.track[e])
    return out


def _hidden_copy(t: RuleQuery) -> list[Finding]:
    found = np.array([i for i in t.outermost(t.ops(COPY_OPS, "mask")).tolist()
                      if not t.inside(i, DTYPE_CONVERT_OPS)
                      and ((d := t.dims(i)) is None or int(np.prod(d, dtype=np.int64)) >= MIN_COPY_ELEMS)], np.int64)
    dtod = np.intersect1d(t.named_device("DtoD", Kind.MEMCPY), np.flatnonzero(t.a.phase == PHASES.index("mask")))
    scores = _on_scores(t, found)
    copies = found[scores]
    if copies.size == 0 and dtod.size == 0:
        return _input_copy(t, found[~scores])
    layers = t.layers_of(copies, dtod)
    device = np.union1d(t.launched(copies), dtod).astype(np.int64)
    callers = np.array(sorted({t.top_level(i) for i in copies.tolist()}), np.int64)
    n = t.instances(layers)
    nbytes = sum(t.nbytes(i) for i in copies.tolist()) / t.step_count
    shapes = Counter(str(tuple(d)) for i in copies.tolist() if (d := t.dims(i)) is not None)
    time_us = t.time_of(copies, device)
    dtod_text = count(dtod.size / n, "Memcpy DtoD", "Memcpy DtoD")
    if copies.size:
        what = f"the {shapes.most_common(1)[0][0]} scores" if shapes else "the scores"
        each = f", {size(nbytes * t.step_count / copies.size)} each" if nbytes else ""
        text = (f"In the mask phase of {layer_list(layers)}, {t.names_by_time(callers)[0]} copies {what} before "
                f"masking them: {count(copies.size / n, 'copy', 'copies')} per forward{each} ({size(nbytes)} per step; "
                f"{t.time_text(copies, device)}).")
        text += f" On the device: {dtod_text} per forward." if dtod.size else ""
    else:
        text = (f"In the mask phase of {layer_list(layers)}, the device runs {dtod_text} per forward "
                f"({duration(time_us)} per step).")
    text += (" A copy in the mask phase usually comes from an out-of-place masked_fill, which allocates a second "
             "tensor the size of the scores and copies them into it before writing the mask: a full extra read and "
             "write of the S×S scores.")
    return [new_finding(
        "hidden-copy", "medium", "Masking copies the attention scores", text,
        "Mask in place with scores.masked_fill_(mask, float('-inf')) (safe when nothing else reads the unmasked "
        "scores), or let F.scaled_dot_product_attention(q, k, v, is_causal=True) apply the mask inside the kernel.",
        layers=layers, ops=t.names_by_time(np.concatenate([callers, copies])), kernels=t.names_by_time(device),
        time_us=time_us, nbytes=nbytes,
        details={"copied": "scores", "copies_per_forward": copies.size / n, "memcpy_dtod_per_forward": dtod.size / n,
                 "copy_bytes_per_step": nbytes})]


def _input_copy(t: RuleQuery, copies: I64) -> list[Finding]:
    """Copies ahead of the scores: of the mask or the position bias handed to the core (T5 makes its
    permuted (1, H, Sq, Sk) bias contiguous for SDPA), named as what they are."""
    if copies.size == 0:
        return []
    layers = t.layers_of(copies)
    bias = t.looks_up_bias(layers)
    what = "relative position bias" if bias else "attention mask"
    device = t.launched(copies)
    callers = np.array(sorted({t.top_level(i) for i in copies.tolist()}), np.int64)
    n = t.instances(layers)
    nbytes = sum(t.nbytes(i) for i in copies.tolist()) / t.step_count
    shapes = Counter(str(tuple(d)) for i in copies.tolist() if (d := t.dims(i)) is not None)
    shape = f" {shapes.most_common(1)[0][0]}" if shapes else ""
    each = f", {size(nbytes * t.step_count / copies.size)} each" if nbytes else ""
    text = (f"In {layer_list(layers)}, {t.names_by_time(callers)[0]} copies the{shape} {what} before the attention "
            f"core reads it: {count(copies.size / n, 'copy', 'copies')} per forward{each} ({size(nbytes)} per step; "
            f"{t.time_text(copies, device)}). No scores exist yet: this is a copy of the core's input, "
            "not of the S×S scores.")
    fix = ("Build the bias once per forward in the layout the kernel reads (contiguous, (1, H, Sq, Sk)) and share it "
           "across the layers, instead of copying it in each." if bias else
           "Build the mask once per forward in the layout and dtype the kernel reads and share it across the layers, "
           "or pass is_causal=True to F.scaled_dot_product_attention where the mask is causal.")
    return [new_finding(
        "hidden-copy", "low", f"The {what} is copied before the core", text, fix, layers=layers,
        ops=t.names_by_time(np.concatenate([callers, copies])), kernels=t.names_by_time(device),
        time_us=t.time_of(copies, device), nbytes=nbytes,
        details={"copied": "position_bias" if bias else "mask", "copies_per_forward": copies.size / n,
                 "memcpy_dtod_per_forward": 0.0, "copy_bytes_per_step": nbytes})]


def _not_flex(t: RuleQuery, idx: np.ndarray) -> np.ndarray:
    """Ops outside ``flex`` phases: eager flex_attention's own ops (its mask_mod evaluated, its
    safe softmax) are its reference path, which the flex-eager finding names."""
    return idx[t.a.phase[idx] != _FLEX_PHASE]


def _mask_rebuilt(t: RuleQuery) -> list[Finding]:
    tri, rng, cmp, fill = (_not_flex(t, t.ops(names)) for names in (TRIANGLE_OPS, {ARANGE_OP}, COMPARE_OPS, FILL_OPS))
    rng, cmp, fill = (idx[~_bucketing(t, idx)] for idx in (rng, cmp, fill))
    layers = []
    for layer in t.layers:
        n = t.instances([layer])
        per_fwd = {k: int((t.a.layer[idx] == layer).sum()) / n for k, idx in (("tri", tri), ("rng", rng), ("cmp", cmp))}
        if per_fwd["tri"] >= 1 or (per_fwd["rng"] >= 1 and per_fwd["cmp"] >= 1):
            layers.append(layer)
    if not layers:
        return []
    mine = np.concatenate([tri, fill, rng, cmp] if rng.size else [tri, fill])
    builders = t.outermost(mine[np.isin(t.a.layer[mine], layers)])
    n = t.instances(layers)
    in_math = any(t.inside(i, frozenset({SDPA_MATH_OP})) for i in builders.tolist())
    device = t.launched(builders)
    names = t.names_by_time(builders)
    text = (f"In {layer_list(layers)}, a causal mask is built on every forward: "
            f"{count(builders.size / n, 'mask-building op', 'mask-building ops')} per forward ({', '.join(names)}; "
            f"{t.time_text(builders, device)}). ")
    if in_math:
        text += ("They run inside aten::_scaled_dot_product_attention_math: with is_causal=True the math backend "
                 "builds an (Sq, Sk) mask with ones and tril on every call.")
        fix = ("Let a fused SDPA backend run (see math-fallback): flash, efficient, cuDNN and the CPU flash kernel "
               "apply causality inside the kernel and build no mask.")
    else:
        text += "The mask depends only on the sequence length, so every call rebuilds the same tensor."
        fix = ("Build the mask once: self.register_buffer('causal_mask', torch.ones(S, S, dtype=torch.bool).tril(), "
               "persistent=False) and slice it per call, or pass is_causal=True to F.scaled_dot_product_attention, "
               "which needs no mask tensor.")
    return [new_finding("mask-rebuilt", "low", "The causal mask is rebuilt on every call", text, fix, layers=layers,
                     ops=names, kernels=t.names_by_time(device), time_us=t.time_of(builders, device),
                     details={"builder_ops_per_forward": builders.size / n, "inside_math_backend": int(in_math)})]


def _math_fallback(t: RuleQuery) -> list[Finding]:
    calls = t.outermost(t.ops({SDPA_MATH_OP}))
    if calls.size == 0:
        return []
    layers = t.layers_of(calls)
    n = calls.size
    inner = sum(int((t.ev.kind[i:t.subtree_end(i)] == Kind.CPU_OP).sum()) for i in calls.tolist())
    device = t.launched(calls)
    sxs = t.score_bytes(layers)
    per_fwd = f"{number(inner / n)} CPU ops" + (f" and {number(device.size / n)} kernels" if t.cuda else "")
    text = (f"In {layer_list(layers)}, SDPA ran its math backend ({SDPA_MATH_OP}): {per_fwd} per forward where a fused "
            f"backend does all of it in one kernel; {t.time_text(calls, device)}, and the scores are "
            "materialized" + (f" ({size(sxs)} of score tensors per step). " if sxs else ". "))
    found = _fallback_causes(t, calls)
    if found:
        text += "Why, in this trace: " + "; ".join(c.text for c in found) + "."
        fix = "; ".join(c.fix[0].upper() + c.fix[1:] if k == 0 else c.fix for k, c in enumerate(found)) + "."
    else:
        text += ("The trace shows none of the causes it can show (dropout on CPU, an explicit attn_mask, fp32 on "
                 "CUDA, the head dimension, grouped-query attention): check for nested (jagged) inputs, a "
                 "non-contiguous last dimension, a sdpa_kernel pin, or a GPU older than the fused kernels support.")
        fix = ("Pin sdpa_kernel(SDPBackend.FLASH_ATTENTION) (or EFFICIENT_ATTENTION) once: PyTorch then raises and "
               "warns why the fused kernel cannot run.")
    return [new_finding(
        "math-fallback", "high", "SDPA ran its math backend instead of a fused kernel", text, fix,
        layers=layers, ops=t.names_by_time(np.concatenate([calls, t.children(calls)])),
        kernels=t.names_by_time(device), time_us=t.time_of(calls, device), nbytes=sxs,
        details={"ops_per_forward": inner / n, "kernels_per_forward": device.size / n,
                 "cpu_us_per_forward": float(t.ev.dur[calls].sum()) / n,
                 "causes": ", ".join(c.key for c in found)})]


#: Where ``dropout_p`` and ``enable_gqa`` are among each op's inputs.
_DROPOUT_GQA_ARGS = {SDPA_OP: (4, 7), SDPA_MATH_OP: (4, 8)}


def _fallback_causes(t: RuleQuery, calls: I64) -> list[Cause]:
    found = []
    for i in calls.tolist():
        outer = next((p for p in t.ancestors(i) if t.name(p) == SDPA_OP), i)
        sid = t.a.shape(t.ev, outer)
        concrete = t.ev.shapes[sid].concrete if sid >= 0 else ()
        at_dropout, at_gqa = _DROPOUT_GQA_ARGS.get(t.name(outer), (4, 7))
        types = t.types(outer)
        found.append(SdpaCall(q=t.dims(outer, 0), k=t.dims(outer, 1), v=t.dims(outer, 2), mask=t.dims(outer, 3),
                              dtype=types[0] if types else None, dropout_p=_number(concrete, at_dropout),
                              enable_gqa=_flag(concrete, at_gqa)))
    return causes(found, cuda=t.cuda, pinned=t.meta.get("impl") == Impl.SDPA_MATH)


def _number(concrete: tuple[str, ...], k: int) -> float | None:
    try:
        return float(concrete[k]) if k < len(concrete) and concrete[k] else None
    except ValueError:
        return None


def _flag(concrete: tuple[str, ...], k: int) -> bool | None:
    return {"True": True, "False": False}.get(concrete[k]) if k < len(concrete) else None


def _mha_unfused(t: RuleQuery) -> list[Finding]:
    """nn.MultiheadAttention's inference fast path computing attention by hand (bmm, softmax,
    bmm): always on the CPU, and on CUDA when it must return the weights."""
    calls = t.outermost(t.ops({NATIVE_MHA_OP}))
    unfused = np.array([i for i in calls.tolist() if not any(t.name(c) in SDPA_OPS for c in t.children(
        np.array([i], np.int64)).tolist())], np.int64)
    if unfused.size == 0:
        return []
    layers = t.layers_of(unfused)
    n = t.instances(layers)
    weights = any(_flag(t.ev.shapes[sid].concrete, NATIVE_MHA_NEED_WEIGHTS_ARG)
                  for i in unfused.tolist() if (sid := t.a.shape(t.ev, i)) >= 0)
    device = t.launched(unfused)
    core = [t.name(c) for c in t.children(unfused[:1]).tolist() if t.name(c) in SOFTMAX_OPS | MATMUL_OPS - {MM_OP}]
    text = (f"In {layer_list(layers)}, nn.MultiheadAttention ran its inference fast path ({NATIVE_MHA_OP}, "
            f"{count(unfused.size / n, 'call', 'calls')} per forward; {t.time_text(unfused, device)}) and computed "
            f"attention by hand inside it ({', '.join(core)}), with the "
            "S×S scores in memory: ")
    if weights:
        text += ("need_weights=True (the module's default) makes it return the attention weights, which no fused "
                 "kernel produces.")
        fix = ("Pass need_weights=False when the weights are not used: on CUDA the fast path then calls SDPA's fused "
               "kernels; on the CPU call F.scaled_dot_product_attention yourself (its CPU flash kernel).")
    else:
        text += ("on the CPU this path never calls a fused kernel, even with need_weights=False." if not t.cuda else
                 "a mask or an input layout ruled out SDPA inside it.")
        fix = ("On the CPU call F.scaled_dot_product_attention on the projected q, k and v (the CPU flash kernel), "
               "or run the module's Python path (it calls SDPA when need_weights=False)." if not t.cuda else
               "Pass is_causal with a causal attn_mask, or call F.scaled_dot_product_attention yourself.")
    return [new_finding(
        "mha-unfused", "medium", "nn.MultiheadAttention computed attention unfused", text, fix,
        layers=layers, ops=t.names_by_time(np.concatenate([unfused, t.children(unfused)]))[:6],
        kernels=t.names_by_time(device), time_us=t.time_of(unfused, device), nbytes=t.score_bytes(layers),
        details={"calls_per_forward": unfused.size / n, "need_weights": int(weights)})]


def _fp32_upcast(t: RuleQuery) -> list[Finding]:
    """Per model (a pipeline's models may run in different dtypes): its FP32 matmuls under its dtype."""
    return [f for group in t.by_model(t.layers) for f in _fp32_upcast_in(t, group)]


def _fp32_upcast_in(t: RuleQuery, group: list[int]) -> list[Finding]:
    dtype, source = t.model_dtype(group)
    if dtype not in HALF_DTYPES:
        return []
    ours = np.array(group)
    gemms = np.array([i for i in t.ops(GEMM_OPS).tolist() if t.types(i)[:1] == ("float",)], np.int64)
    gemms = gemms[np.isin(t.a.layer[gemms], ours)]
    sgemm = t.named_device("sgemm", Kind.KERNEL)
    sgemm = sgemm[np.isin(t.a.layer[sgemm], ours)]
    if gemms.size == 0 and sgemm.size == 0:
        return []
    ups = np.array([i for i in t.ops({INPLACE_COPY_OP}).tolist()
                    if (ty := t.types(i))[:1] == ("float",) and len(ty) > 1 and dtype_name(ty[1]) in HALF_DTYPES],
                   np.int64)
    ups = ups[np.isin(t.a.layer[ups], ours)]
    layers = t.layers_of(gemms, sgemm)
    model = t.model_name(group)
    n = t.instances(layers)
    device = np.union1d(sgemm, t.launched(gemms)).astype(np.int64)
    up_bytes = sum(int(np.prod(d, dtype=np.int64)) * 4 for i in ups.tolist() if (d := t.dims(i))) / t.step_count
    in_math = any(t.inside(i, frozenset({SDPA_MATH_OP})) for i in gemms.tolist())
    top = t.names_by_time(gemms)[:1]
    text = f"The model{f' {model}' if model else ''} runs in {dtype} (from {source}), but in {layer_list(layers)}"
    if gemms.size:
        text += f" float32 inputs go into {count(gemms.size / n, 'matmul', 'matmuls')} per forward ({top[0]}"
        text += ")" if sgemm.size else f", {duration(t.time_of(gemms, device))} per step)"
    if sgemm.size:
        text += ((" and" if gemms.size else "") +
                 f" the device runs {count(sgemm.size / n, 'FP32 sgemm kernel', 'FP32 sgemm kernels')} per forward")
    text += f" ({duration(t.time_of(gemms, device))} per step)." if sgemm.size else "."
    if ups.size:
        text += (f" {count(ups.size / n, 'copy', 'copies')} per forward upcast {dtype} tensors to float32 "
                 f"({size(up_bytes)} per step).")
    if in_math:
        text += " The upcast happens inside aten::_scaled_dot_product_attention_math, which computes in float32."
    text += (" FP32 matmuls run on CUDA cores (sgemm), not tensor cores, and move twice the bytes." if t.cuda else
             " FP32 matmuls move twice the bytes of half-precision ones and miss the bf16/fp16 matmul units.")
    fix = ("Let a fused SDPA backend run (see math-fallback): it computes in the inputs' dtype." if in_math else
           f"Find the cast to float32 in attention (.float(), .to(torch.float32), dtype=torch.float32) and keep q, k "
           f"and v in {dtype}; if it is there for a stable softmax, upcast only the softmax input, or run the block "
           f"under torch.autocast(dtype=torch.{dtype}).")
    return [new_finding("fp32-upcast", "high" if t.cuda else "medium",
                     f"Attention matmuls run in FP32 under {dtype} inputs", text, fix, layers=layers,
                     ops=t.names_by_time(np.concatenate([gemms, ups])), kernels=t.names_by_time(device),
                     time_us=t.time_of(gemms, device), nbytes=up_bytes,
                     details={"model_dtype": dtype, "dtype_source": source, "fp32_matmuls_per_forward": gemms.size / n,
                              "sgemm_kernels_per_forward": sgemm.size / n, "upcasts_per_forward": ups.size / n,
                              "inside_math_backend": int(in_math), **({"model": model} if model else {})})]


def _safe_softmax(t: RuleQuery) -> list[Finding]:
    calls = t.outermost(_not_flex(t, t.ops({SAFE_SOFTMAX_OP})))
    if calls.size == 0:
        return []
    layers = t.layers_of(calls)
    n = t.instances(layers)
    device = t.launched(calls)
    text = (f"In {layer_list(layers)}, attention uses aten::_safe_softmax, "
            f"{count(calls.size / n, 'call', 'calls')} per forward ({t.time_text(calls, device)}). "
            "It is the math backend's softmax: after the softmax it checks every row for all -inf scores and writes "
            "zeros there instead of NaN, which costs extra passes over the S×S scores.")
    return [new_finding(
        "safe-softmax", "low", "The slower _safe_softmax is in use", text,
        "A fused SDPA backend (flash, efficient, cuDNN, or the CPU flash kernel) handles masked rows inside the "
        "kernel; see math-fallback. Hand-written attention can use plain softmax when no row is fully masked.",
        layers=layers, ops=t.names_by_time(np.concatenate([calls, t.children(calls)])),
        kernels=t.names_by_time(device), time_us=t.time_of(calls, device),
        details={"calls_per_forward": calls.size / n})]


OP_RULES = (_hidden_copy, _mask_rebuilt, _math_fallback, _mha_unfused, _fp32_upcast, _safe_softmax)
