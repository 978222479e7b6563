"""Findings: what a trace says to change in attention, with the evidence behind each one.

``find(analysis, summary)`` runs every rule over one trace (its attributed events and its
summary) and returns the findings in a fixed order: severity, then id, then layers. A finding
has a stable id, a severity, a one-line title, an explanation quoting the trace's own numbers, a
suggested change, and its evidence: layers, ops, kernels, time and bytes per profiled step.
Rules, thresholds and the reasons for them are in ``docs/findings.md``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator

import numpy as np
import numpy.typing as npt

from tb_attn_plugin.analysis.attribute import DEVICE_KINDS, EPS_US
from tb_attn_plugin.analysis.bounds import clip
from tb_attn_plugin.analysis.flops import elem_bytes
from tb_attn_plugin.analysis.infer import SDPA_OPS
from tb_attn_plugin.analysis.summary import Analysis
from tb_attn_plugin.schema import Evidence, Finding, WorkerSummary
from tb_attn_plugin.scopes import PHASES
from tb_attn_plugin.trace.schema import Kind

__all__ = ["IMPL_BACKENDS", "SEVERITIES", "Evidence", "Finding", "find"]

SEVERITIES = ("high", "medium", "low", "info")
#: Backends each runner implementation may legitimately end up on (``docs/runner.md``); "sdpa"
#: lets PyTorch choose, so it expects nothing.
IMPL_BACKENDS: dict[str, tuple[str, ...]] = {
    "sdpa-flash": ("flash", "cpu-flash", "rocm-flash"),
    "sdpa-efficient": ("efficient",),
    "sdpa-cudnn": ("cudnn",),
    "sdpa-math": ("sdpa-math",),
    "naive": ("naive",),
    "naive-inplace": ("naive",),
}
MIN_COPY_ELEMS = 256  # smaller copies in the mask phase are scalars or small masks, not scores
DISPATCH_RATIO = 2.0  # GPU: forward CPU time per call at least this many times its device time...
DEVICE_BUSY_MAX = 0.8  # ...while the device is busy for less than this share of the step
TINY_OP_US = 20.0  # CPU: a top-level op shorter than this is mostly dispatch
TINY_OPS_MIN = 10  # CPU: more ops than this per forward...
TINY_SHARE = 0.5  # ...and at least this share of the block's time outside longer ops
SHARE_NOTABLE = 0.5  # share-of-step is "low" rather than "info" from here

_MAX_NAMES = 8
_MAX_LISTED = 12  # layers named in a finding's text (its evidence lists them all)
_MATH = "aten::_scaled_dot_product_attention_math"
_COPY_OPS = frozenset({"aten::clone", "aten::copy_"})
_CONVERT_OPS = frozenset({"aten::to", "aten::_to_copy"})
_TRI_OPS = frozenset({"aten::tril", "aten::triu", "aten::tril_", "aten::triu_"})
_CMP_OPS = frozenset({"aten::ge", "aten::le", "aten::gt", "aten::lt", "aten::greater_equal", "aten::less_equal",
                      "aten::greater", "aten::less"})
_FILL_OPS = frozenset({"aten::ones", "aten::new_ones", "aten::ones_like", "aten::full", "aten::new_full",
                       "aten::full_like"})
_GEMM_OPS = frozenset({"aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm"})
_DTYPES = {"c10::BFloat16": "bfloat16", "c10::Half": "float16", "float": "float32", "double": "float64",
           "bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "fp16": "float16", "half": "float16",
           "float32": "float32", "fp32": "float32"}
_HALF = ("bfloat16", "float16")

I64 = npt.NDArray[np.int64]


def find(analysis: Analysis, summary: WorkerSummary, *, metadata: dict[str, object] | None = None) -> list[Finding]:
    """Every rule's findings on one trace, ordered by severity, id and layers."""
    if not summary.layers:
        return []
    t = _Trace(analysis, summary, metadata or {})
    out: list[Finding] = []
    for rule in (_hidden_copy, _mask_rebuilt, _math_fallback, _fp32_upcast, _safe_softmax, _sxs_materialized,
                 _dispatch_bound, _backend_mismatch, _share_of_step):
        out.extend(rule(t))
    return sorted(out, key=lambda f: (SEVERITIES.index(f.severity), f.id, f.evidence.layers))


class _Trace:
    """What the rules share: forward attention ops within the steps, their subtrees and launches."""

    def __init__(self, analysis: Analysis, summary: WorkerSummary, meta: dict[str, object]) -> None:
        ev, a = analysis.events, analysis.attr
        self.ev, self.a, self.s, self.meta = ev, a, summary, meta
        in_steps = a.step >= 0 if summary.steps else np.ones(len(ev), np.bool_)
        self.fwd = (a.layer >= 0) & ~a.backward & in_steps
        self.device = np.isin(ev.kind, DEVICE_KINDS) & (ev.kind != Kind.GPU_ANNOTATION)
        self.end = ev.ts + ev.dur
        self.steps = summary.step_count
        self.layers = {layer.layer: layer for layer in summary.layers}
        self.cuda = summary.device == "cuda"
        runtime = ev.kind == Kind.RUNTIME
        self.runtime_corr = np.unique(ev.corr[runtime & (ev.corr >= 0)])

    def name(self, i: int) -> str:
        return self.ev.names[int(self.ev.name[i])]

    def ops(self, names: Iterable[str], phase: str | None = None) -> I64:
        """Forward attention CPU ops with these names (in one phase), in trace order."""
        ids = self.ev.name_ids(frozenset(names))
        sel = self.fwd & (self.ev.kind == Kind.CPU_OP) & np.isin(self.ev.name, ids)
        if phase is not None:
            sel &= self.a.phase == PHASES.index(phase)
        return np.flatnonzero(sel).astype(np.int64)

    def named_device(self, needle: str, kind: Kind | None = None) -> I64:
        """Forward attention device events whose name contains ``needle``."""
        hits = np.array([needle in n for n in self.ev.names], np.bool_)
        sel = self.fwd & self.device & hits[self.ev.name]
        return np.flatnonzero(sel if kind is None else sel & (self.ev.kind == kind)).astype(np.int64)

    def ancestors(self, i: int) -> Iterator[int]:
        p = int(self.a.parent[i])
        while p >= 0:
            yield p
            p = int(self.a.parent[p])

    def outermost(self, idx: I64) -> I64:
        chosen = set(idx.tolist())
        return np.array([i for i in idx.tolist() if not any(p in chosen for p in self.ancestors(i))], np.int64)

    def subtree_end(self, i: int) -> int:
        """One past the last event nested in event ``i`` (events are sorted by track, start, longest first)."""
        ev = self.ev
        hi = int(np.searchsorted(ev.track, ev.track[i], side="right"))
        return i + 1 + int(np.searchsorted(ev.ts[i + 1:hi], self.end[i] - EPS_US, side="left"))

    def launched(self, idx: I64) -> I64:
        """Device events launched from inside these CPU events."""
        ev = self.ev
        corr: set[int] = set()
        ext: set[int] = set()
        for i in idx.tolist():
            sub = slice(i, self.subtree_end(i))
            kind = ev.kind[sub]
            corr.update(ev.corr[sub][(kind == Kind.RUNTIME) & (ev.corr[sub] >= 0)].tolist())
            ext.update(ev.ext[sub][(kind == Kind.CPU_OP) & (ev.ext[sub] >= 0)].tolist())
        # As in attribution: the launching runtime call decides; the External id only where there is none.
        dev = np.flatnonzero(self.device)
        by_runtime = np.isin(ev.corr[dev], self.runtime_corr)
        hit = np.where(by_runtime, np.isin(ev.corr[dev], list(corr)), np.isin(ev.ext[dev], list(ext)))
        return dev[hit].astype(np.int64)

    def dims(self, i: int, arg: int = 0) -> list[int] | None:
        sid = self.a.shape(self.ev, i)  # -1 also where the shapes claim an impossible tensor
        if sid < 0:
            return None
        d = self.ev.shapes[sid].dims
        if arg >= len(d) or not isinstance(d[arg], list) or not all(isinstance(x, int) for x in d[arg]):
            return None
        return [int(x) for x in d[arg]]

    def types(self, i: int) -> tuple[str, ...]:
        sid = int(self.ev.shape[i])
        return self.ev.shapes[sid].types if sid >= 0 else ()

    def nbytes(self, i: int) -> int:
        d, types = self.dims(i), self.types(i)
        return int(np.prod(d, dtype=np.int64)) * elem_bytes(types[0]) if d is not None and types else 0

    def instances(self, layers: Iterable[int]) -> float:
        """Block calls of these layers in all steps together."""
        return max(sum(self.layers[layer].calls for layer in layers) * self.steps, 1.0)

    def layers_of(self, *idx: I64) -> list[int]:
        return sorted({int(x) for i in idx for x in self.a.layer[i].tolist()})

    def names_by_time(self, idx: I64) -> list[str]:
        totals: dict[str, float] = {}
        for i in idx.tolist():
            totals[self.name(i)] = totals.get(self.name(i), 0.0) + float(self.ev.dur[i])
        return [clip(n) for n, _ in sorted(totals.items(), key=lambda kv: (-kv[1], kv[0]))[:_MAX_NAMES]]

    def per_step(self, idx: I64) -> float:
        return float(self.ev.dur[idx].sum()) / self.steps

    def time_of(self, ops: I64, device: I64) -> float:
        """Time per step: device time where the trace has any, else the ops' CPU time."""
        return self.per_step(device) if self.cuda else self.per_step(ops)

    def time_text(self, ops: I64, device: I64) -> str:
        """'X per step', or on a GPU trace 'X of device time and Y of CPU time per step'."""
        if not self.cuda:
            return f"{_us(self.per_step(ops))} per step"
        return f"{_us(self.per_step(device))} of device time and {_us(self.per_step(ops))} of CPU time per step"

    def top_level(self, i: int) -> int:
        """The outermost CPU op enclosing op ``i`` (``i`` itself when none does)."""
        top = i
        for p in self.ancestors(i):
            if self.ev.kind[p] == Kind.CPU_OP:
                top = p
        return top

    def inside(self, i: int, names: frozenset[str]) -> bool:
        return any(self.name(p) in names for p in self.ancestors(i))


def _finding(fid: str, severity: str, title: str, explanation: str, suggestion: str, *, layers: list[int],
             ops: list[str], kernels: list[str], time_us: float, nbytes: float = 0.0,
             details: dict[str, float | int | str]) -> Finding:
    rounded = {k: v if isinstance(v, str) else round(float(v), 4) if isinstance(v, float | np.floating) else int(v)
               for k, v in details.items()}
    return Finding(id=fid, severity=severity, title=title, explanation=explanation, suggestion=suggestion,
                   evidence=Evidence(layers=layers, ops=ops[:_MAX_NAMES], kernels=kernels[:_MAX_NAMES],
                                     time_us=round(time_us, 3), bytes=float(nbytes), details=rounded))


# -- rules ------------------------------------------------------------------------------------

def _hidden_copy(t: _Trace) -> list[Finding]:
    copies = np.array([i for i in t.outermost(t.ops(_COPY_OPS, "mask")).tolist()
                       if not t.inside(i, _CONVERT_OPS)
                       and ((d := t.dims(i)) is None or int(np.prod(d, dtype=np.int64)) >= MIN_COPY_ELEMS)], np.int64)
    dtod = np.intersect1d(t.named_device("DtoD", Kind.MEMCPY), np.flatnonzero(t.a.phase == PHASES.index("mask")))
    if copies.size == 0 and dtod.size == 0:
        return []
    layers = t.layers_of(copies, dtod)
    device = np.union1d(t.launched(copies), dtod).astype(np.int64)
    callers = np.array(sorted({t.top_level(i) for i in copies.tolist()}), np.int64)
    n = t.instances(layers)
    nbytes = sum(t.nbytes(i) for i in copies.tolist()) / t.steps
    shapes = Counter(str(tuple(d)) for i in copies.tolist() if (d := t.dims(i)) is not None)
    time_us = t.time_of(copies, device)
    dtod_text = _count(dtod.size / n, "Memcpy DtoD", "Memcpy DtoD")
    if copies.size:
        what = f"the {shapes.most_common(1)[0][0]} scores" if shapes else "the scores"
        size = f", {_bytes(nbytes * t.steps / copies.size)} each" if nbytes else ""
        text = (f"In the mask phase of {_layers(layers)}, {t.names_by_time(callers)[0]} copies {what} before masking "
                f"them: {_count(copies.size / n, 'copy', 'copies')} per forward{size} ({_bytes(nbytes)} per step; "
                f"{t.time_text(copies, device)}).")
        text += f" On the device: {dtod_text} per forward." if dtod.size else ""
    else:
        text = (f"In the mask phase of {_layers(layers)}, the device runs {dtod_text} per forward "
                f"({_us(time_us)} per step).")
    text += (" A copy in the mask phase usually comes from an out-of-place masked_fill, which allocates a second "
             "tensor the size of the scores and copies them into it before writing the mask: a full extra read and "
             "write of the S×S scores.")
    return [_finding(
        "hidden-copy", "medium", "Masking copies the attention scores", text,
        "Mask in place with scores.masked_fill_(mask, float('-inf')) (safe when nothing else reads the unmasked "
        "scores), or let F.scaled_dot_product_attention(q, k, v, is_causal=True) apply the mask inside the kernel.",
        layers=layers, ops=t.names_by_time(np.concatenate([callers, copies])), kernels=t.names_by_time(device),
        time_us=time_us, nbytes=nbytes,
        details={"copies_per_forward": copies.size / n, "memcpy_dtod_per_forward": dtod.size / n,
                 "copy_bytes_per_step": nbytes})]


def _mask_rebuilt(t: _Trace) -> list[Finding]:
    tri, rng, cmp, fill = t.ops(_TRI_OPS), t.ops({"aten::arange"}), t.ops(_CMP_OPS), t.ops(_FILL_OPS)
    layers = []
    for layer in t.layers:
        n = t.instances([layer])
        count = {k: int((t.a.layer[idx] == layer).sum()) / n for k, idx in (("tri", tri), ("rng", rng), ("cmp", cmp))}
        if count["tri"] >= 1 or (count["rng"] >= 1 and count["cmp"] >= 1):
            layers.append(layer)
    if not layers:
        return []
    mine = np.concatenate([tri, fill, rng, cmp] if rng.size else [tri, fill])
    builders = t.outermost(mine[np.isin(t.a.layer[mine], layers)])
    n = t.instances(layers)
    in_math = any(t.inside(i, frozenset({_MATH})) for i in builders.tolist())
    device = t.launched(builders)
    names = t.names_by_time(builders)
    text = (f"In {_layers(layers)}, a causal mask is built on every forward: "
            f"{_count(builders.size / n, 'mask-building op', 'mask-building ops')} per forward ({', '.join(names)}; "
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
    return [_finding("mask-rebuilt", "low", "The causal mask is rebuilt on every call", text, fix, layers=layers,
                     ops=names, kernels=t.names_by_time(device), time_us=t.time_of(builders, device),
                     details={"builder_ops_per_forward": builders.size / n, "inside_math_backend": int(in_math)})]


def _math_fallback(t: _Trace) -> list[Finding]:
    calls = t.outermost(t.ops({_MATH}))
    if calls.size == 0:
        return []
    layers = t.layers_of(calls)
    n = calls.size
    inner = sum(int((t.ev.kind[i:t.subtree_end(i)] == Kind.CPU_OP).sum()) for i in calls.tolist())
    device = t.launched(calls)
    sxs = sum(p.sxs_bytes for layer in layers for p in t.layers[layer].phases if p.phase == "sdpa")
    per_fwd = f"{_n(inner / n)} CPU ops" + (f" and {_n(device.size / n)} kernels" if t.cuda else "")
    text = (f"In {_layers(layers)}, SDPA ran its math backend ({_MATH}): {per_fwd} per forward where a fused "
            f"backend does all of it in one kernel; {t.time_text(calls, device)}, and the scores are "
            "materialized" + (f" ({_bytes(sxs)} of score tensors per step). " if sxs else ". "))
    hints = _math_hints(t, calls)
    text += ("In this trace: " + "; ".join(hints) + "." if hints else
             "The trace shows none of the usual causes: the math backend pinned with sdpa_kernel, an explicit "
             "attn_mask (flash takes none), fp32 inputs on CUDA (flash and cuDNN need fp16 or bf16), a head "
             "dimension above 256 or not a multiple of 8, or a GPU older than the fused kernels support.")
    return [_finding(
        "math-fallback", "high", "SDPA ran its math backend instead of a fused kernel", text,
        "Let a fused backend run: drop an sdpa_kernel(SDPBackend.MATH) pin, pass is_causal=True instead of a causal "
        "mask, use bf16 or fp16 on CUDA, keep the head dimension a multiple of 8 up to 256. Pinning "
        "sdpa_kernel(SDPBackend.FLASH_ATTENTION) once makes PyTorch warn why a fused kernel cannot run.",
        layers=layers, ops=t.names_by_time(np.concatenate([calls, _inner_ops(t, calls)])),
        kernels=t.names_by_time(device), time_us=t.time_of(calls, device), nbytes=sxs,
        details={"ops_per_forward": inner / n, "kernels_per_forward": device.size / n,
                 "cpu_us_per_forward": float(t.ev.dur[calls].sum()) / n, "causes": "; ".join(hints)})]


def _inner_ops(t: _Trace, calls: I64) -> I64:
    out = [j for i in calls.tolist() for j in range(i + 1, t.subtree_end(i))
           if t.ev.kind[j] == Kind.CPU_OP and t.a.parent[j] == i]
    return np.array(out, np.int64)


def _math_hints(t: _Trace, calls: I64) -> list[str]:
    hints = []
    if t.meta.get("impl") == "sdpa-math":
        hints.append("the run pinned the math backend (impl sdpa-math)")
    outer = [next((p for p in t.ancestors(i) if t.name(p) in SDPA_OPS), i) for i in calls.tolist()]
    masks = {str(d) for i in outer if (d := t.dims(i, 3))}
    if masks:
        hints.append(f"an explicit attn_mask {', '.join(sorted(masks))} is passed (flash takes none; efficient "
                     f"and cuDNN do, and is_causal=True needs none)")
    types = {ty[0] for i in outer if (ty := t.types(i))}
    if t.cuda and "float" in types:
        hints.append("the inputs are fp32 (flash and cuDNN need fp16 or bf16)")
    heads = {d[-1] for i in outer if (d := t.dims(i)) and len(d) >= 3}
    bad = sorted(h for h in heads if h > 256 or h % 8)
    if t.cuda and bad:
        hints.append(f"the head dimension is {', '.join(map(str, bad))} (fused kernels want a multiple of 8, at "
                     f"most 256)")
    return hints


def _model_dtype(t: _Trace) -> tuple[str | None, str]:
    sdpa = t.outermost(t.ops(SDPA_OPS))
    seen = Counter(_DTYPES.get(ty[0]) for i in sdpa.tolist() if (ty := t.types(i)))
    if seen:
        return seen.most_common(1)[0][0], "its SDPA inputs"
    config = t.meta.get("config")
    raw = t.meta.get("dtype") or (config.get("dtype") if isinstance(config, dict) else None)
    if isinstance(raw, str):
        return _DTYPES.get(raw.removeprefix("torch.").lower()), "the run metadata"
    linear = Counter(_DTYPES.get(ty[0]) for i in t.ops({"aten::linear"}).tolist() if (ty := t.types(i)))
    return (linear.most_common(1)[0][0], "its projections") if linear else (None, "")


def _fp32_upcast(t: _Trace) -> list[Finding]:
    dtype, source = _model_dtype(t)
    if dtype not in _HALF:
        return []
    gemms = np.array([i for i in t.ops(_GEMM_OPS).tolist() if t.types(i)[:1] == ("float",)], np.int64)
    sgemm = t.named_device("sgemm", Kind.KERNEL)
    if gemms.size == 0 and sgemm.size == 0:
        return []
    ups = np.array([i for i in t.ops({"aten::copy_"}).tolist()
                    if (ty := t.types(i))[:1] == ("float",) and len(ty) > 1 and _DTYPES.get(ty[1]) in _HALF], np.int64)
    layers = t.layers_of(gemms, sgemm)
    n = t.instances(layers)
    device = np.union1d(sgemm, t.launched(gemms)).astype(np.int64)
    up_bytes = sum(int(np.prod(d, dtype=np.int64)) * 4 for i in ups.tolist() if (d := t.dims(i))) / t.steps
    in_math = any(t.inside(i, frozenset({_MATH})) for i in gemms.tolist())
    top = t.names_by_time(gemms)[:1]
    text = f"The model runs in {dtype} (from {source}), but in {_layers(layers)}"
    if gemms.size:
        text += f" float32 inputs go into {_count(gemms.size / n, 'matmul', 'matmuls')} per forward ({top[0]}"
        text += ")" if sgemm.size else f", {_us(t.time_of(gemms, device))} per step)"
    if sgemm.size:
        text += ((" and" if gemms.size else "") +
                 f" the device runs {_count(sgemm.size / n, 'FP32 sgemm kernel', 'FP32 sgemm kernels')} per forward")
    text += f" ({_us(t.time_of(gemms, device))} per step)." if sgemm.size else "."
    if ups.size:
        text += (f" {_count(ups.size / n, 'copy', 'copies')} per forward upcast {dtype} tensors to float32 "
                 f"({_bytes(up_bytes)} per step).")
    if in_math:
        text += " The upcast happens inside aten::_scaled_dot_product_attention_math, which computes in float32."
    text += (" FP32 matmuls run on CUDA cores (sgemm), not tensor cores, and move twice the bytes." if t.cuda else
             " FP32 matmuls move twice the bytes of half-precision ones and miss the bf16/fp16 matmul units.")
    fix = ("Let a fused SDPA backend run (see math-fallback): it computes in the inputs' dtype." if in_math else
           f"Find the cast to float32 in attention (.float(), .to(torch.float32), dtype=torch.float32) and keep q, k "
           f"and v in {dtype}; if it is there for a stable softmax, upcast only the softmax input, or run the block "
           f"under torch.autocast(dtype=torch.{dtype}).")
    return [_finding("fp32-upcast", "high" if t.cuda else "medium",
                     f"Attention matmuls run in FP32 under {dtype} inputs", text, fix, layers=layers,
                     ops=t.names_by_time(np.concatenate([gemms, ups])), kernels=t.names_by_time(device),
                     time_us=t.time_of(gemms, device), nbytes=up_bytes,
                     details={"model_dtype": dtype, "dtype_source": source, "fp32_matmuls_per_forward": gemms.size / n,
                              "sgemm_kernels_per_forward": sgemm.size / n, "upcasts_per_forward": ups.size / n,
                              "inside_math_backend": int(in_math)})]


def _safe_softmax(t: _Trace) -> list[Finding]:
    calls = t.outermost(t.ops({"aten::_safe_softmax"}))
    if calls.size == 0:
        return []
    layers = t.layers_of(calls)
    n = t.instances(layers)
    device = t.launched(calls)
    text = (f"In {_layers(layers)}, attention uses aten::_safe_softmax, "
            f"{_count(calls.size / n, 'call', 'calls')} per forward ({t.time_text(calls, device)}). "
            "It is the math backend's softmax: after the softmax it checks every row for all -inf scores and writes "
            "zeros there instead of NaN, which costs extra passes over the S×S scores.")
    return [_finding(
        "safe-softmax", "low", "The slower _safe_softmax is in use", text,
        "A fused SDPA backend (flash, efficient, cuDNN, or the CPU flash kernel) handles masked rows inside the "
        "kernel; see math-fallback. Hand-written attention can use plain softmax when no row is fully masked.",
        layers=layers, ops=t.names_by_time(np.concatenate([calls, _inner_ops(t, calls)])),
        kernels=t.names_by_time(device), time_us=t.time_of(calls, device),
        details={"calls_per_forward": calls.size / n})]


def _sxs_materialized(t: _Trace) -> list[Finding]:
    hit = [layer for layer in t.s.layers if layer.sxs_bytes > 0]
    if not hit:
        return []
    total = sum(layer.sxs_bytes for layer in hit)
    big = max(hit, key=lambda layer: (layer.sxs_bytes / max(layer.calls, 1e-9), -layer.layer))
    per_fwd = big.sxs_bytes / max(big.calls, 1e-9)
    allocs = sum(p.sxs_allocs for p in big.phases)
    heads = big.heads_count or 0
    # One score tensor is what is certainly alive at the layer's peak; the per-forward sum is not
    # (scores are freed as the next one is written), so shares are of a single tensor.
    per_allocs = allocs / max(big.calls, 1e-9)
    one = per_fwd / per_allocs if per_allocs > 0 else per_fwd
    layer_share = min(1.0, one / big.peak_bytes) if big.peak_bytes > 0 else 0.0
    peak = _step_peak(t)
    step_share = min(1.0, one / peak) if peak > 0 else 0.0
    phases = [p for layer in hit for p in layer.phases if p.sxs_bytes > 0]
    time_us = sum(p.device_us if t.cuda else p.cpu_us for p in phases)
    layers = [layer.layer for layer in hit]
    allocs_text = _count(allocs / max(big.calls, 1e-9), "score-sized tensor", "score-sized tensors")
    text = (f"In {_layers(layers)}, the attention scores are written to memory as full (B, H, Sq, Sk) tensors: "
            f"layer {big.layer} allocates {allocs_text} per forward, {_bytes(per_fwd)}"
            + (f" ({_bytes(per_fwd / heads)} per head)" if heads else "") +
            f", {_bytes(total)} per step over {len(hit)} layers.")
    if big.peak_bytes > 0:
        text += (f" One score tensor is {_bytes(one)}: {_pct(layer_share)} of the layer's peak rise"
                 f" ({_bytes(big.peak_bytes)})")
        text += f" and {_pct(step_share)} of the step's peak allocated memory ({_bytes(peak)})." if peak else "."
    text += " This memory grows with the square of the sequence length."
    details: dict[str, float | int | str] = {
        "sxs_bytes_per_layer": per_fwd, "sxs_allocs_per_forward": per_allocs, "sxs_tensor_bytes": one,
        "layer_peak_bytes": big.peak_bytes, "share_of_layer_peak": layer_share, "step_peak_bytes": peak,
        "share_of_step_peak": step_share}
    if heads:
        details.update(sxs_bytes_per_head=per_fwd / heads, heads=heads)
    return [_finding(
        "sxs-materialized", "medium", "The S×S attention scores are materialized", text,
        "Use a fused SDPA backend, which keeps scores on chip in tiles and never stores S×S: "
        "F.scaled_dot_product_attention(q, k, v, is_causal=True) with flash, efficient or cuDNN on CUDA, or the CPU "
        "flash kernel on CPU.",
        layers=layers, ops=_top_names(p.ops for p in phases), kernels=_top_names(p.kernel_names for p in phases),
        time_us=time_us, nbytes=total, details=details)]


def _step_peak(t: _Trace) -> int:
    ev = t.ev
    types = ev.mem_device_type[ev.mem_device_type > 0]
    device = int(np.bincount(types).argmax()) if types.size else 0
    ok = (ev.mem_device_type == device) & (ev.mem_total >= 0)
    if t.s.steps:
        ok &= t.a.mem_step >= 0
    return int(ev.mem_total[ok].max()) if ok.any() else 0


def _dispatch_bound(t: _Trace) -> list[Finding]:
    return _dispatch_gpu(t) if t.cuda else _dispatch_cpu(t)


def _dispatch_gpu(t: _Trace) -> list[Finding]:
    rows = [(layer, layer.cpu_us / layer.calls, layer.device_us / layer.calls,
             sum(p.kernels for p in layer.phases) / layer.calls)
            for layer in t.s.layers if layer.calls > 0 and layer.device_us > 0]
    if not rows or t.s.step_cpu_us <= 0:
        return []
    ratio = _median(cpu / dev for _, cpu, dev, _ in rows)
    busy = t.s.step_device_us / t.s.step_cpu_us
    if ratio < DISPATCH_RATIO or busy >= DEVICE_BUSY_MAX:
        return []
    layers = [layer.layer for layer, cpu, dev, _ in rows if cpu >= DISPATCH_RATIO * dev]
    cpu, dev, kernels = (_median(r[1] for r in rows), _median(r[2] for r in rows),
                         _median(r[3] for r in rows))
    text = (f"In {_layers(layers)}, one attention forward takes {_us(cpu)} on the CPU but {_us(dev)} on the device "
            f"({ratio:.1f}×, medians over layers), launching {_count(kernels, 'kernel', 'kernels')} per forward; "
            f"the device is busy {_pct(busy)} of the step. The GPU waits for the CPU to launch work, so faster "
            "kernels will not make this faster. Profiling adds CPU time to every op, so confirm with a run without "
            "record_shapes and with_stack.")
    unfused = any(layer.backend in ("naive", "sdpa-math") for layer, *_ in rows)
    return [_finding(
        "dispatch-bound", "medium", "Attention is bound by CPU dispatch, not by the device", text,
        "Cut the CPU work per call: capture the step with CUDA graphs or torch.compile(mode='reduce-overhead')"
        + (", run attention as one fused F.scaled_dot_product_attention call" if unfused else "")
        + ", or give each launch more work (a larger batch).",
        layers=layers, ops=_top_names(p.ops for layer, *_ in rows for p in layer.phases),
        kernels=_top_names(p.kernel_names for layer, *_ in rows for p in layer.phases),
        time_us=sum(layer.cpu_us for layer, *_ in rows),
        details={"cpu_us_per_forward": cpu, "device_us_per_forward": dev, "cpu_device_ratio": ratio,
                 "kernels_per_forward": kernels, "device_busy_share": busy})]


def _dispatch_cpu(t: _Trace) -> list[Finding]:
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
    n_ops = _median(r[1] for r in rows)
    share = _median(r[2] for r in rows)
    if n_ops <= TINY_OPS_MIN or share < TINY_SHARE:
        return []
    layers = sorted({r[0] for r in rows if r[1] > TINY_OPS_MIN and r[2] >= TINY_SHARE})
    median_op = _median(d for r in rows for d in r[4]) if any(r[4] for r in rows) else 0.0
    block_us = _median(r[3] for r in rows)
    text = (f"In {_layers(layers)}, one attention forward runs {_n(n_ops)} CPU ops, and {_pct(share)} of its "
            f"{_us(block_us)} goes to ops shorter than {TINY_OP_US:.0f} µs and the gaps between ops (median "
            f"top-level op {_us(median_op)}): framework dispatch, not arithmetic (medians over block calls).")
    return [_finding(
        "dispatch-bound", "medium", "Attention is bound by per-op dispatch on the CPU", text,
        "Use fewer, larger ops: one F.scaled_dot_product_attention call instead of separate matmul, scale, mask and "
        "softmax ops; torch.compile to fuse the rest; larger batches to spread the per-op cost.",
        layers=layers, ops=_top_names(p.ops for layer in t.s.layers for p in layer.phases), kernels=[],
        time_us=sum(layer.cpu_us for layer in t.s.layers),
        details={"ops_per_forward": n_ops, "tiny_time_share": share, "median_op_us": median_op,
                 "block_us": block_us})]


def _backend_mismatch(t: _Trace) -> list[Finding]:
    known = [layer for layer in t.s.layers if layer.backend != "unknown"]
    by_backend: dict[str, list[int]] = {}
    for layer in known:
        by_backend.setdefault(layer.backend, []).append(layer.layer)
    out = []
    impl = t.meta.get("impl")
    expected = IMPL_BACKENDS.get(impl) if isinstance(impl, str) else None
    wrong = sorted(layer.layer for layer in known if expected and layer.backend not in expected)
    if wrong:
        ran = ", ".join(f"{b} in {_layers(ls)}" for b, ls in sorted(by_backend.items()) if b not in (expected or ()))
        out.append(_finding(
            "backend-mismatch", "high", f"The run asked for {impl} but another backend ran",
            f"The run metadata requests impl {impl} (backend {' or '.join(expected or ())}), but the trace shows "
            f"{ran}. Timings of this run describe the backend that ran, not the one requested.",
            "Check that the backend can run with these inputs: pin it with torch.nn.attention.sdpa_kernel so that "
            "PyTorch raises and says why instead of silently choosing another, and check the dtype, the mask and "
            "the head dimension.",
            layers=wrong, ops=_evidence_of(t, wrong), kernels=[], time_us=_layers_time(t, wrong),
            details={"requested": impl if isinstance(impl, str) else "", "ran": ", ".join(sorted(by_backend))}))
    if len(by_backend) > 1:
        main = max(by_backend, key=lambda b: (len(by_backend[b]), -min(by_backend[b])))  # ties: layer 0's
        odd = sorted(x for b, ls in by_backend.items() if b != main for x in ls)
        desc = "; ".join(f"{_layers(ls)}: {b}" for b, ls in sorted(by_backend.items(), key=lambda kv: kv[1]))
        out.append(_finding(
            "backend-mismatch", "medium", "Layers ran different attention backends",
            f"Not every layer ran the same attention backend ({desc}). Usually the odd layers get different inputs "
            "(a mask, a dtype, a shape) that rule out the others' backend.",
            "Compare what the odd layers pass to attention (attn_mask, dtype, head dimension, dropout) with the "
            f"{main} layers, and make them match.",
            layers=odd, ops=_evidence_of(t, odd), kernels=[], time_us=_layers_time(t, odd),
            details={"backends": desc, "majority": main}))
    return out


def _evidence_of(t: _Trace, layers: list[int]) -> list[str]:
    return list(dict.fromkeys(n for x in layers for n in t.layers[x].backend_evidence))


def _layers_time(t: _Trace, layers: list[int]) -> float:
    return sum(t.layers[x].device_us if t.cuda else t.layers[x].cpu_us for x in layers)


def _share_of_step(t: _Trace) -> list[Finding]:
    s = t.s
    shares = [(what, share, att, step) for what, share, att, step in
              (("CPU", s.attention_share_cpu, s.attention_cpu_us, s.step_cpu_us),
               ("device", s.attention_share_device, s.attention_device_us, s.step_device_us)) if share is not None]
    if not shares:
        return []
    top = max(share for _, share, _, _ in shares)
    parts = [f"{_pct(share)} of the step's {what} time ({_us(att)} of {_us(step)})"
             for what, share, att, step in shares]
    text = (f"Attention, forward and backward over {_count(len(s.layers), 'layer', 'layers')}, takes "
            + " and ".join(parts) +
            f". Making attention twice as fast would save at most {_pct(top / 2)} of the step.")
    fix = ("Attention dominates the step: the other findings are where step time is won." if top >= SHARE_NOTABLE
           else "Attention is less than half of the step: weigh its findings against the rest of the model.")
    details: dict[str, float | int | str] = {f"share_{w.lower()}": share for w, share, _, _ in shares}
    return [_finding("share-of-step", "low" if top >= SHARE_NOTABLE else "info",
                     "Attention takes " + " and ".join(f"{_pct(sh)} of the step's {w} time" for w, sh, _, _ in shares),
                     text, fix, layers=sorted(t.layers), ops=[],
                     kernels=[], time_us=s.attention_device_us if t.cuda else s.attention_cpu_us, details=details)]


# -- formatting -------------------------------------------------------------------------------

def _median(values: Iterable[float]) -> float:
    """The median; ``statistics`` costs 8 ms of import time, which the CLI pays on every run."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("median of no values")
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _top_names(groups: Iterable[list[str]]) -> list[str]:
    counts: Counter[str] = Counter(n for g in groups for n in g)
    return [n for n, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:_MAX_NAMES]]


def _layers(layers: list[int]) -> str:
    if len(layers) == 1:
        return f"layer {layers[0]}"
    if layers == list(range(layers[0], layers[-1] + 1)):
        return f"layers {layers[0]}-{layers[-1]}"
    if len(layers) > _MAX_LISTED:  # up to 4096 of them: the text stays a sentence
        return "layers " + ", ".join(map(str, layers[:_MAX_LISTED])) + f" and {len(layers) - _MAX_LISTED} more"
    return "layers " + ", ".join(map(str, layers[:-1])) + f" and {layers[-1]}"


def _count(x: float, one: str, many: str) -> str:
    return f"{_n(x)} {one if x == 1 else many}"


def _n(x: float) -> str:
    return f"{x:.1f}".removesuffix(".0")


def _us(x: float) -> str:
    return f"{x / 1000:.2f} ms" if x >= 1000 else f"{x:.1f} µs"


def _bytes(n: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"
