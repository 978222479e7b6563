"""Findings: what a trace says to change in attention, with the evidence behind each one.

``find(analysis, summary)`` runs every rule over one trace (its attributed events and its
summary) and returns the findings rule by rule; the summary lists them with the roofline's in
one order (``schema.finding_order``: severity, then time, then id and layers). A finding
has a stable id, a severity, a one-line title, an explanation quoting the trace's own numbers, a
suggested change, and its evidence: layers, ops, kernels, time and bytes per profiled step.
Rules, thresholds and the reasons for them are in ``docs/findings.md``.

The rules on op patterns (copies, masks, the math backend, dtypes, softmax) are in
``op_findings``; the rules here read the summary's figures (score memory, dispatch, backends,
share of the step). Both ask their questions through ``query.RuleQuery`` and write their
sentences with ``wording``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import numpy as np

from tb_attn_plugin.analysis.attribution.analyze import Analysis
from tb_attn_plugin.analysis.attribution.query import MAX_NAMES, RuleQuery
from tb_attn_plugin.analysis.common.clock import attention_us
from tb_attn_plugin.analysis.common.finding import new_finding
from tb_attn_plugin.analysis.common.spread import median
from tb_attn_plugin.analysis.common.wording import (
    attention,
    core_only_note,
    count,
    duration,
    layer_list,
    number,
    pct,
    size,
)
from tb_attn_plugin.analysis.findings.generation_findings import GENERATION_RULES
from tb_attn_plugin.analysis.findings.op_findings import OP_RULES
from tb_attn_plugin.analysis.findings.quant_findings import QUANT_RULES
from tb_attn_plugin.analysis.findings.serving_findings import SERVING_RULES
from tb_attn_plugin.analysis.findings.sparse_findings import SPARSE_RULES
from tb_attn_plugin.trace.kineto import Kind
from tb_attn_plugin.types.schema import SEVERITIES, Evidence, Finding, WorkerSummary
from tb_attn_plugin.vocab.aten import FUSED_BLOCK_OPS
from tb_attn_plugin.vocab.backends import UNFUSED_BACKENDS, Backend
from tb_attn_plugin.vocab.impls import IMPL_BACKENDS
from tb_attn_plugin.vocab.scopes import OTHER, PREFIX

__all__ = ["SEVERITIES", "Evidence", "Finding", "find"]

DISPATCH_RATIO = 2.0  # GPU: forward CPU time per call at least this many times its device time...
DEVICE_BUSY_MAX = 0.8  # ...while the device is busy for less than this share of the step
TINY_OP_US = 20.0  # CPU: a top-level op shorter than this is mostly dispatch
TINY_OPS_MIN = 10  # CPU: more ops than this per forward...
TINY_SHARE = 0.5  # ...and at least this share of the block's time outside longer ops
SHARE_NOTABLE = 0.5  # share-of-step is "low" rather than "info" from here
OTHER_SHARE = 0.2  # a layer with more of its block's time than this in no phase gets a note


def find(analysis: Analysis, summary: WorkerSummary, *, metadata: dict[str, object] | None = None) -> list[Finding]:
    """Every rule's findings on one trace, rule by rule. None reads a roof: ``analysis.summary``
    adds the roofline's and orders them all once (``finding_order``)."""
    if not summary.layers:
        return []
    t = RuleQuery(analysis.events, analysis.attr, summary, metadata or {})
    out: list[Finding] = []
    for rule in (*OP_RULES, *SPARSE_RULES, *QUANT_RULES, *GENERATION_RULES, *SERVING_RULES, _sxs_materialized,
                 _dispatch_bound, _backend_mismatch, _unplaced, _share_of_step):
        out.extend(rule(t))
    if any(f.id == "decode-dispatch-bound" for f in out):  # the same cause, said of decode steps with their figures
        out = [f for f in out if f.id != "dispatch-bound"]
    return out


def _sxs_materialized(t: RuleQuery) -> list[Finding]:
    hit = [layer for layer in t.s.layers if layer.sxs_bytes > 0]
    if not hit:
        return []
    layers = [layer.layer for layer in hit]
    total = t.score_bytes(layers)
    big = max(hit, key=lambda layer: (layer.sxs_bytes / max(layer.calls, 1e-9), -layer.layer))
    per_fwd = big.sxs_bytes / max(big.calls, 1e-9)
    allocs = sum(p.sxs_allocs for p in big.phases) / max(big.calls, 1e-9)
    masks = sum(p.sxs_mask_allocs for p in big.phases) / max(big.calls, 1e-9)
    mask_bytes = big.sxs_mask_bytes / max(big.calls, 1e-9)
    # One score tensor, from its shape and dtype: what is certainly alive at the layer's peak (the
    # per-forward sum is not: scores are freed as the next one is written).
    one = big.score_tensor_bytes or (per_fwd / allocs if allocs else per_fwd)
    layer_share = min(1.0, one / big.peak_bytes) if big.peak_bytes > 0 else 0.0
    peak = t.step_peak()
    step_share = min(1.0, one / peak) if peak > 0 else 0.0
    phases = [p for layer in hit for p in layer.phases if p.sxs_bytes > 0]
    time_us = sum(p.device_us if t.cuda else p.cpu_us for p in phases)
    shape = f" {tuple(big.score_shape)}" if big.score_shape else ""
    text = (f"In {layer_list(layers)}, the attention scores are written to memory as full (B, H, Sq, Sk) tensors: "
            f"layer {big.layer} allocates {count(allocs, 'score tensor', 'score tensors')}{shape} per forward, "
            f"{size(one)} each ({size(per_fwd)})")
    # Tensors of the scores' size from the relative position bias the model looks up are that bias.
    found, found_bytes = t.score_sized_masks(big.layer) if t.looks_up_bias([big.layer]) else (0, 0.0)
    n_bias, bias_bytes = found / t.instances([big.layer]), found_bytes / t.instances([big.layer])
    parts = [(count(n_bias, "position bias", "position biases"), bias_bytes)] if n_bias else []
    if masks - n_bias > 1e-9:
        parts.append((count(masks - n_bias, "mask", "masks"), mask_bytes - bias_bytes))
    if parts:
        text += ", and " + " and ".join(f"{what} ({size(nbytes)}" + (", counted apart from the scores)" if k == len(
            parts) - 1 else ")") for k, (what, nbytes) in enumerate(parts))
    text += f"; {size(total)} of score tensors per step over {count(len(hit), 'layer', 'layers')}."
    if big.peak_bytes > 0:
        text += (f" One score tensor is {pct(layer_share)} of the layer's peak rise ({size(big.peak_bytes)})"
                 + (f" and {pct(step_share)} of the step's peak allocated memory ({size(peak)})." if peak else "."))
    text += " This memory grows with the square of the sequence length."
    details: dict[str, float | int | str] = {
        "sxs_bytes_per_layer": per_fwd, "sxs_allocs_per_forward": allocs, "sxs_tensor_bytes": one,
        "sxs_mask_allocs_per_forward": masks, "sxs_mask_bytes_per_layer": mask_bytes,
        "layer_peak_bytes": big.peak_bytes, "share_of_layer_peak": layer_share, "step_peak_bytes": peak,
        "share_of_step_peak": step_share}
    if n_bias:
        details |= {"sxs_bias_allocs_per_forward": n_bias, "sxs_bias_bytes_per_layer": bias_bytes}
    if big.score_shape:
        details["score_shape"] = "x".join(map(str, big.score_shape))
    backends = {layer.backend for layer in hit}
    if backends == {Backend.SDPA_MATH}:
        fix = ("SDPA is called already, but its math backend stores the scores: remove what made it fall back "
               "(see math-fallback) and a fused kernel keeps them on chip.")
    elif t.ops(FUSED_BLOCK_OPS).size:
        fix = "nn.MultiheadAttention's fast path stores the scores: see mha-unfused for the call that fuses them."
    elif backends == {Backend.INT8_QK}:
        fix = ("int8 attention written op by op stores the int32 scores and their fp32 dequantized copies: a fused "
               "int8 kernel (SageAttention's) quantizes, multiplies and dequantizes in tiles on chip; without one, "
               "exact fused SDPA stores no scores at all.")
    else:
        fix = ("Use a fused SDPA backend, which keeps scores on chip in tiles and never stores S×S: "
               "F.scaled_dot_product_attention(q, k, v) (is_causal=True for a causal mask) with flash, efficient or "
               "cuDNN on CUDA, or the CPU flash kernel on CPU.")
    return [new_finding(
        "sxs-materialized", "medium", "The S×S attention scores are materialized", text, fix,
        layers=layers, ops=t.score_allocators(big.layer), kernels=_top_names(p.kernel_names for p in phases),
        time_us=time_us, nbytes=total, details=details)]


def _dispatch_bound(t: RuleQuery) -> list[Finding]:
    return _dispatch_gpu(t) if t.cuda else _dispatch_cpu(t)


def _dispatch_gpu(t: RuleQuery) -> list[Finding]:
    if t.s.attention_share_device is None:
        return []  # graphs captured or replayed the kernels: device time is not what ran (analysis.graphs)
    rows = [(layer, layer.cpu_us / layer.calls, layer.device_us / layer.calls,
             sum(p.kernels for p in layer.phases) / layer.calls)
            for layer in t.s.layers if layer.calls > 0 and layer.device_us > 0]
    if not rows or t.s.step_cpu_us <= 0:
        return []
    ratio = median(cpu / dev for _, cpu, dev, _ in rows)
    busy = t.s.step_device_us / t.s.step_cpu_us
    if ratio < DISPATCH_RATIO or busy >= DEVICE_BUSY_MAX:
        return []
    layers = [layer.layer for layer, cpu, dev, _ in rows if cpu >= DISPATCH_RATIO * dev]
    cpu, dev, kernels = (median(r[1] for r in rows), median(r[2] for r in rows),
                         median(r[3] for r in rows))
    core, note = _core_only(t, [layer.layer for layer, *_ in rows])
    subject = "attention core" if core else "attention"
    text = (f"In {layer_list(layers)}, one {subject} forward takes {duration(cpu)} on the CPU but {duration(dev)} on "
            f"the device ({ratio:.1f}×, medians over layers), launching {count(kernels, 'kernel', 'kernels')} per "
            f"forward; the device is busy {pct(busy)} of the step. The GPU waits for the CPU to launch work, so faster "
            "kernels will not make this faster. Profiling adds CPU time to every op, so confirm with a run without "
            "record_shapes and with_stack." + (f" ({note.capitalize()}.)" if note else ""))
    # Eager flex is unfused too, but its fix is to compile it, not to call SDPA (the flex-eager finding).
    unfused = any(layer.backend in UNFUSED_BACKENDS - {Backend.FLEX_EAGER} for layer, *_ in rows)
    return [new_finding(
        "dispatch-bound", "medium", f"{_sentence(subject)} is bound by CPU dispatch, not by the device", text,
        "Cut the CPU work per call: capture the step with CUDA graphs or torch.compile(mode='reduce-overhead')"
        + (", run attention as one fused F.scaled_dot_product_attention call" if unfused else "")
        + ", or give each launch more work (a larger batch).",
        layers=layers, ops=_top_names(p.ops for layer, *_ in rows for p in layer.phases),
        kernels=_top_names(p.kernel_names for layer, *_ in rows for p in layer.phases),
        time_us=t.layers_time(layers),  # their device time: the clock the layer table and the headline read
        details={"cpu_us_per_forward": cpu, "device_us_per_forward": dev, "cpu_device_ratio": ratio,
                 "kernels_per_forward": kernels, "device_busy_share": busy})]


def _dispatch_cpu(t: RuleQuery) -> list[Finding]:
    a, ev = t.a, t.ev
    blocks = np.flatnonzero(t.fwd & a.is_scope & (a.phase < 0) & (a.head < 0))
    rows = []  # (layer, ops, share of time outside long ops, block us, top-level op durations)
    for b in blocks.tolist():
        sub = np.arange(b + 1, t.subtree_end(b))
        ops = sub[ev.kind[sub] == Kind.CPU_OP]
        parent = a.parent[ops]
        top = ops[ev.kind[np.maximum(parent, 0)] != Kind.CPU_OP]
        long = float(ev.dur[top][ev.dur[top] >= TINY_OP_US].sum())
        rows.append((int(a.layer[b]), ops.size, 1.0 - long / ev.dur[b] if ev.dur[b] > 0 else 0.0, float(ev.dur[b]),
                     ev.dur[top].tolist()))
    if not rows:
        return []
    n_ops = median(r[1] for r in rows)
    share = median(r[2] for r in rows)
    if n_ops <= TINY_OPS_MIN or share < TINY_SHARE:
        return []
    layers = sorted({r[0] for r in rows if r[1] > TINY_OPS_MIN and r[2] >= TINY_SHARE})
    median_op = median(d for r in rows for d in r[4]) if any(r[4] for r in rows) else 0.0
    block_us = median(r[3] for r in rows)
    core, note = _core_only(t, sorted({r[0] for r in rows}))
    subject = "attention core" if core else "attention"
    text = (f"In {layer_list(layers)}, one {subject} forward runs {number(n_ops)} CPU ops, and {pct(share)} of its "
            f"{duration(block_us)} goes to ops shorter than {TINY_OP_US:.0f} µs and the gaps between ops (median "
            f"top-level op {duration(median_op)}): framework dispatch, not arithmetic (medians over block calls)."
            + (f" ({note.capitalize()}.)" if note else ""))
    return [new_finding(
        "dispatch-bound", "medium", f"{_sentence(subject)} is bound by per-op dispatch on the CPU", text,
        "Use fewer, larger ops: one F.scaled_dot_product_attention call instead of separate matmul, scale, mask and "
        "softmax ops; torch.compile to fuse the rest; larger batches to spread the per-op cost.",
        layers=layers, ops=_top_names(p.ops for layer in t.s.layers for p in layer.phases), kernels=[],
        time_us=t.layers_time(layers),
        details={"ops_per_forward": n_ops, "tiny_time_share": share, "median_op_us": median_op,
                 "block_us": block_us})]


def _backend_mismatch(t: RuleQuery) -> list[Finding]:
    known = [layer for layer in t.s.layers if layer.backend != Backend.UNKNOWN]
    by_backend: dict[str, list[int]] = {}
    for layer in known:
        by_backend.setdefault(layer.backend, []).append(layer.layer)
    out = []
    impl = t.meta.get("impl")
    expected = IMPL_BACKENDS.get(impl) if isinstance(impl, str) else None
    config = t.meta.get("config")
    if expected and isinstance(config, dict) and config.get("compile"):
        expected = (*expected, Backend.COMPILED)  # --compile: the fused block shows no kernel of its own on CPU
    wrong = sorted(layer.layer for layer in known if expected and layer.backend not in expected)
    if wrong:
        ran = ", ".join(f"{b} in {layer_list(ls)}" for b, ls in sorted(by_backend.items()) if b not in (expected or ()))
        out.append(new_finding(
            "backend-mismatch", "high", f"The run asked for {impl} but another backend ran",
            f"The run metadata requests impl {impl} (backend {' or '.join(expected or ())}), but the trace shows "
            f"{ran}. Timings of this run describe the backend that ran, not the one requested.",
            "Check that the backend can run with these inputs: pin it with torch.nn.attention.sdpa_kernel so that "
            "PyTorch raises and says why instead of silently choosing another, and check the dtype, the mask and "
            "the head dimension.",
            layers=wrong, ops=t.backend_evidence(wrong), kernels=[], time_us=t.layers_time(wrong),
            details={"requested": impl if isinstance(impl, str) else "", "ran": ", ".join(sorted(by_backend))}))
    # Layers of one model are compared: a pipeline's models may rightly run different backends.
    for group in t.by_model(x.layer for x in known):
        out.extend(_mixed_backends(t, group))
    return out


def _mixed_backends(t: RuleQuery, group: list[int]) -> list[Finding]:
    """The layers of one model that ran another backend than most of its layers."""
    by_backend: dict[str, list[int]] = {}
    for x in group:
        by_backend.setdefault(t.layers[x].backend, []).append(x)
    if len(by_backend) < 2:
        return []
    main = max(by_backend, key=lambda b: (len(by_backend[b]), -min(by_backend[b])))  # ties: the first layer's
    odd = sorted(x for b, ls in by_backend.items() if b != main for x in ls)
    desc = "; ".join(f"{layer_list(ls)}: {b}" for b, ls in sorted(by_backend.items(), key=lambda kv: kv[1]))
    model = t.model_name(group)
    return [new_finding(
        "backend-mismatch", "medium", "Layers ran different attention backends" + (f" in {model}" if model else ""),
        f"Not every layer{f' of {model}' if model else ''} ran the same attention backend ({desc}). Usually the odd "
        "layers get different inputs (a mask, a dtype, a shape) that rule out the others' backend.",
        "Compare what the odd layers pass to attention (attn_mask, dtype, head dimension, dropout) with the "
        f"{main} layers{f' of {model}' if model else ''}, and make them match.",
        layers=odd, ops=t.backend_evidence(odd), kernels=[], time_us=t.layers_time(odd),
        details={"backends": desc, "majority": main, **({"model": model} if model else {})})]


def _unplaced(t: RuleQuery) -> list[Finding]:
    """Ops in a block that no phase holds, written or by role: bookkeeping should be small. Their
    own time counts (device time on GPU traces), not the gaps between ops, which are the module's
    Python: a block is not wrong for being written in Python."""
    a, ev = t.a, t.ev
    loose = np.flatnonzero(t.fwd & (a.phase < 0) & ~a.is_scope)
    fused_ids = [k for k, n in enumerate(ev.names) if n in FUSED_BLOCK_OPS]
    if fused_ids:
        loose = loose[~np.isin(ev.name[loose], fused_ids)]  # their own ops are placed
    # Their own time: a loose op whose own ops are placed (an inferred SDPA call, whose kernel op is
    # in ``sdpa``) holds little, not its whole span.
    weights = ev.dur if t.cuda else t.self_us
    counted = loose[t.device_work[loose]] if t.cuda else loose[ev.kind[loose] == Kind.CPU_OP]
    # Every layer's loose time in one pass.
    spent_by_layer = np.bincount(a.layer[counted], weights=weights[counted], minlength=1) / t.step_count
    rows = []
    for layer in t.s.layers:
        spent = float(spent_by_layer[layer.layer]) if layer.layer < spent_by_layer.size else 0.0
        block = layer.device_us if t.cuda else layer.cpu_us
        other = next((p.device_us if t.cuda else p.cpu_us for p in layer.phases if p.phase == OTHER), 0.0)
        if block > 0 and spent / block > OTHER_SHARE:
            rows.append((layer.layer, spent / block, spent, loose[a.layer[loose] == layer.layer], other / block))
    if not rows:
        return []
    share = median(r[1] for r in rows)
    in_table = median(r[4] for r in rows)
    ops = t.names_by_time(np.concatenate([r[3][ev.kind[r[3]] == Kind.CPU_OP] for r in rows]))
    what = "device" if t.cuda else "CPU"
    core, note = _core_only(t, [r[0] for r in rows])
    part = "core" if core else "block"
    text = (f"In {layer_list([r[0] for r in rows])}, {pct(in_table)} of the attention {part}'s {what} time is in no "
            f"phase (\"other\" in the layer table; median over layers), {pct(share)} of the {part} in ops that neither "
            "a phase scope nor their role places" + (f" ({', '.join(ops)})" if ops else "")
            + "; the rest is the time between ops." + (f" ({note.capitalize()}.)" if note else ""))
    return [new_finding(
        "unplaced-time", "info", f"Much of the attention {part} is in no phase", text,
        f"Scope the work with record_function ({PREFIX}/L<n>/<phase>, docs/scopes.md), or read the block in the "
        "Timeline: ops there that belong to attention, under a name tb-attn does not know, are worth a report.",
        layers=[r[0] for r in rows], ops=ops, kernels=[], time_us=sum(r[2] for r in rows),
        details={"other_share": in_table, "unplaced_ops_share": share})]


def _share_of_step(t: RuleQuery) -> list[Finding]:
    s = t.s
    shares = [(what, share, att, step) for what, share, att, step in
              (("CPU", s.attention_share_cpu, s.attention_cpu_us, s.step_cpu_us),
               ("device", s.attention_share_device, s.attention_device_us, s.step_device_us)) if share is not None]
    if not shares:
        return []
    top = max(share for _, share, _, _ in shares)
    parts = [f"{pct(share)} of the step's {what} time ({duration(att)} of {duration(step)})"
             for what, share, att, step in shares]
    core = [layer.layer for layer in s.layers if layer.core_only]
    what, note = attention(len(core), len(s.layers)), core_only_note(len(core), len(s.layers))
    passes = "forward and backward" if any(x.backward.calls or x.backward.cpu_us for x in s.layers) else "forward"
    text = (f"{what.capitalize()}, {passes} over {count(len(s.layers), 'layer', 'layers')}, takes "
            + " and ".join(parts) + ".")
    if note:
        text += (f" In {layer_list(core)} only the core was found (an attention op or kernel, or q·kᵀ → softmax → "
                 "attn·v), with no projection around it: their share leaves out their projections.")
    elif core:
        text += (" No q, k, v or output projection was found around the core (an attention op or kernel, or q·kᵀ "
                 "→ softmax → attn·v) in any layer, so the figures leave out any projections, head split and merge "
                 "the model runs around it: a whole attention block takes more.")
    text += f" Making {what} twice as fast would save at most {pct(top / 2)} of the step."
    fix = (f"{what.capitalize()} dominates the step: the other findings are where step time is won."
           if top >= SHARE_NOTABLE else
           f"{what.capitalize()} is less than half of the step: weigh its findings against the rest of the model.")
    if core:
        fix += (" To count whole blocks, profile with tb-attn scopes (runner.instrument(model), docs/scopes.md) or "
                "with_modules=True on a model whose attention modules are named *Attention.")
    details: dict[str, float | int | str] = {f"share_{w.lower()}": share for w, share, _, _ in shares}
    details["core_only_layers"] = len(core)
    title = (f"{what.capitalize()} takes " + " and ".join(f"{pct(sh)} of the step's {w} time" for w, sh, _, _ in shares)
             + (f" ({note})" if note else ""))
    return [new_finding("share-of-step", "low" if top >= SHARE_NOTABLE else "info", title,
                     text, fix, layers=sorted(t.layers), ops=[],
                     kernels=[], time_us=attention_us(s), details=details)]

# -- formatting -------------------------------------------------------------------------------

def _sentence(subject: str) -> str:
    """``'Attention'``, or ``'The attention core'``: a sentence's subject."""
    return "The attention core" if subject == "attention core" else subject.capitalize()


def _core_only(t: RuleQuery, layers: list[int]) -> tuple[bool, str]:
    """Whether every one of ``layers`` is its core alone (``LayerStats.core_only``: its block-level
    figures are the core's), and, where some are but not all, how many (``wording.core_only_note``)."""
    wanted = set(layers)
    core = sum(layer.core_only for layer in t.s.layers if layer.layer in wanted)
    return attention(core, len(wanted)) != "attention", core_only_note(core, len(wanted))


def _top_names(groups: Iterable[list[str]]) -> list[str]:
    counts: Counter[str] = Counter(n for g in groups for n in g)
    return [n for n, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:MAX_NAMES]]

