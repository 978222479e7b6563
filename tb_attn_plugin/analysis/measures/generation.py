"""Generation: a trace's prefill and decode steps, per token, with the KV cache's bytes.

Which step is which comes from the runner's step scopes (``tbattn.v1/decode/C513``,
``scopes.parse_step_scope``). A trace without them (anyone's own ``generate()`` loop) is read
from its shapes: a step whose every attention call has one query per sequence is a decode step
against as many keys as K has, and one whose queries are as many as its keys is a prefill.

Per step: its wall time, attention's time (device where there is one), the core's (the phases
that read K and V), the KV cache's appends, the K and V bytes attention reads (from the core
ops' shapes: the fused call's k and v, naive attention's matmul operands, or the K and V a
grouped-query ``kv_expand`` repeats, which are the cache's own), the memory the appends
allocate (memory events), launches and FLOPs. Over the decode steps: a fit of attention time
against context (a·Lᵏ, and the straight line's per-key slope), the cache's size per layer and
head and its growth per token, the shapes' bytes checked against the memory events, and the
bandwidth attention achieves reading the cache. ``docs/analysis.md``, "Generation", has the long
form.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import msgspec
import numpy as np

from tb_attn_plugin.analysis.attribution.analyze import Analysis
from tb_attn_plugin.analysis.attribution.query import TraceQuery, dtype_name
from tb_attn_plugin.analysis.common.spread import fit_power, median
from tb_attn_plugin.analysis.ops.flops import elem_bytes
from tb_attn_plugin.trace.kineto import Kind
from tb_attn_plugin.types.schema import Generation, GenerationPhase, LayerStats, TokenStats, WorkerSummary
from tb_attn_plugin.vocab.aten import KV_EXPAND_OPS, MATMUL_ARGS, SDPA_OPS
from tb_attn_plugin.vocab.scopes import (
    CORE_PHASES,
    FUSED_PHASES,
    PHASES,
    STEP_ROLES,
    Phase,
    in_order,
    is_scope_name,
    parse_step_scope,
)

__all__ = ["KV_READ_PHASES", "NARROW_RANGE", "GenerationSteps", "generation", "generation_meta",
           "generation_steps", "restrict_steps"]

#: The phases that read K and V: what a decode step's bandwidth is measured over. The core and the
#: grouped-query expansion of K and V; not a compiled block, whose time may hold the projections too.
KV_READ_PHASES = (CORE_PHASES | {Phase.KV_EXPAND}) - {Phase.COMPILED}
_CORE = np.array([PHASES.index(p) for p in in_order(KV_READ_PHASES)])
_KV_CACHE = PHASES.index("kv_cache")
_KV_EXPAND = PHASES.index("kv_expand")
_QK, _AV = PHASES.index("qk_matmul"), PHASES.index("av_matmul")
#: The fused calls whose SDPA op gives the shapes (a compiled block shows none).
_FUSED = tuple(PHASES.index(p) for p in in_order(FUSED_PHASES - {Phase.COMPILED}))
#: Below this ratio of the largest decode context to the smallest, the exponent says little.
NARROW_RANGE = 2.0
#: Below this R² a decode fit is reported with a note that it explains little.
POOR_FIT = 0.5
#: The memory events agree with the shapes within this share (allocators round sizes up).
MEMORY_TOLERANCE = 0.02


@dataclasses.dataclass(frozen=True)
class GenerationSteps:
    """A trace's prefill and decode steps (``generation_steps``): each step's role and context,
    what told them (``"scopes"`` or ``"shapes"``), and each step's K and V per attention call."""

    query: TraceQuery
    roles: dict[int, tuple[str, int]]
    source: str
    shapes: dict[int, list[_LayerKV]]

    def by_role(self) -> dict[str, list[int]]:
        """The steps of each role the trace has: what a per-layer table over one role reads
        (``restrict_steps``)."""
        return {role: [s for s, (r, _) in self.roles.items() if r == role]
                for role in STEP_ROLES if any(r == role for r, _ in self.roles.values())}


def generation_steps(analysis: Analysis) -> GenerationSteps | None:
    """Which profiled step is which, or None where the trace has no decode step (and so no generation)."""
    q = TraceQuery(analysis.events, analysis.attr)
    roles, source = _scoped_roles(q), "scopes"
    if not roles and not _one_query_calls(q):
        return None  # every trace is summarized: one pass over distinct shapes, not one per block
    shapes = _kv_shapes(q)
    if not roles:
        roles, source = _roles_from_shapes(shapes), "shapes"
    if not any(role == "decode" for role, _ in roles.values()):
        return None
    return GenerationSteps(q, roles, source, shapes)


def generation(analysis: Analysis, summary: WorkerSummary, metadata: dict[str, object] | None,
               found: GenerationSteps, restricted: Mapping[str, list[LayerStats]]) -> Generation | None:
    """The generation figures of one analyzed trace with decode steps (``found``), or None where no
    decode step was profiled. ``restricted``: by role, the summary's per-layer table of the trace
    restricted to that role's steps (``GenerationSteps.by_role``, ``restrict_steps``)."""
    q, roles, source, shapes = found.query, found.roles, found.source, found.shapes
    cuda = summary.step_device_us > 0
    steps = {s.step: s for s in summary.per_step}
    figures = _step_figures(q, sorted(roles), cuda)
    tokens = []
    for step, (role, context) in sorted(roles.items()):
        per = steps.get(step)
        if per is None:
            continue
        layers = shapes.get(step, [])
        f = figures[step]
        tokens.append(TokenStats(
            step=step, role=role, context=context, queries=max((s.queries for s in layers), default=0),
            step_us=per.cpu_us, attention_us=per.attention_device_us if cuda else per.attention_cpu_us,
            core_us=f["core"], kv_cache_us=f["kv_cache"], kv_bytes=float(sum(s.kv_bytes for s in layers)),
            read_bytes=float(sum(s.read_bytes for s in layers)),
            kv_alloc_bytes=f["alloc"], launches=f["launches"], flops=f["flops"]))
    decode = [t for t in tokens if t.role == "decode"]
    if not decode:
        return None
    gen = generation_meta(metadata)
    last = shapes.get(decode[-1].step, [])
    one = last[0] if last else None
    kv_heads = one.heads if one else None
    per_layer = decode[-1].kv_bytes / len(last) if last else 0.0
    out = Generation(
        source=source, clock="device" if cuda else "cpu",
        kv_cache=_kv_cache_kind(gen, decode), prompt_len=_int(gen.get("prompt_len")) or _prompt_len(tokens),
        batch=one.batch if one else None, heads=one.q_heads if one else None, kv_heads=kv_heads,
        head_dim=one.head_dim if one else None,
        kv_dtype=one.dtype if one else None,
        prefill=_phase([t for t in tokens if t.role == "prefill"], restricted.get("prefill", [])),
        decode=_phase(decode, restricted.get("decode", [])),
        tokens=tokens, fit=None,
        kv_bytes_per_layer=per_layer, kv_bytes_per_head=per_layer / kv_heads if kv_heads else 0.0,
        realloc_bytes_per_token=_mean(t.kv_alloc_bytes for t in decode),
        read_bytes_per_token=_mean(t.read_bytes for t in decode),
    )
    out = msgspec.structs.replace(out, **_fit(decode))
    rates = [t.read_bytes / (t.core_us * 1e-6) for t in decode if t.core_us > 0 and t.read_bytes > 0]
    more: dict[str, Any] = {
        "kv_memory": _memory_check(out, decode, [t for t in tokens if t.role == "prefill"],
                                   bool(analysis.events.mem_ts.size)),
        "achieved_bytes_per_s": median(rates) if rates else 0.0}
    peaks = metadata.get("peaks") if isinstance(metadata, dict) else None
    bw = peaks.get("copy_bytes_per_s") if isinstance(peaks, dict) else None
    if isinstance(bw, int | float) and not isinstance(bw, bool) and math.isfinite(bw) and bw > 0:
        more |= {"reference_bytes_per_s": float(bw), "reference": "the copy bandwidth the runner measured on this "
                 "machine (bytes read + written per second)"}
    return msgspec.structs.replace(out, **more)


def generation_meta(metadata: dict[str, object] | None) -> dict[str, object]:
    """The run metadata's ``generation`` (runner/generate.py), or {}."""
    gen = metadata.get("generation") if isinstance(metadata, dict) else None
    return gen if isinstance(gen, dict) else {}


def restrict_steps(analysis: Analysis, steps: list[int]) -> Analysis:
    """The same trace with only ``steps`` counted as profiled steps (for a per-layer table over
    the prefill or the decode steps alone)."""
    a = analysis.attr
    keep = np.asarray(sorted(steps), np.int32)
    attr = dataclasses.replace(a, step=np.where(np.isin(a.step, keep), a.step, -1).astype(np.int32),
                               mem_step=np.where(np.isin(a.mem_step, keep), a.mem_step, -1).astype(np.int32))
    return dataclasses.replace(analysis, attr=attr)


# -- which step is which ------------------------------------------------------------------------

def _scoped_roles(q: TraceQuery) -> dict[int, tuple[str, int]]:
    ev, a = q.ev, q.a
    parsed = {nid: parse_step_scope(n) for nid, n in enumerate(ev.names) if is_scope_name(n)}
    ids = [nid for nid, s in parsed.items() if s is not None]
    if not ids:
        return {}
    out: dict[int, tuple[str, int]] = {}
    for i in np.flatnonzero(np.isin(ev.name, ids) & (a.step >= 0)).tolist():
        scope = parsed[int(ev.name[i])]
        assert scope is not None
        out.setdefault(int(a.step[i]), (scope.role, scope.context))
    return out


def _one_query_calls(q: TraceQuery) -> bool:
    """Whether any forward attention call has one query (a decode step's), read from the distinct
    (op, shape) pairs of the q·kᵀ and fused phases."""
    ev, a = q.ev, q.a
    core = (a.layer >= 0) & ~a.backward & (ev.kind == Kind.CPU_OP) & (ev.shape >= 0) & np.isin(a.phase, (_QK, *_FUSED))
    pairs = np.unique(np.stack([ev.name[core], ev.shape[core]]), axis=1) if core.any() else np.empty((2, 0), np.int64)
    for nid, sid in pairs.T.tolist():
        name = ev.names[nid]
        arg = MATMUL_ARGS[name][0] if name in MATMUL_ARGS else 0 if name in SDPA_OPS else None
        dims = ev.shapes[sid].dims if arg is not None else ()
        if arg is not None and arg < len(dims) and isinstance(dims[arg], list) and len(dims[arg]) >= 2 \
                and dims[arg][-2] == 1:
            return True
    return False


class _LayerKV:
    """One attention call's K and V: the cache's, and what the core reads (the same tensors, or
    their grouped-query expansion to every query head, or a static cache's whole buffer)."""

    __slots__ = ("batch", "dtype", "head_dim", "heads", "keys", "kv_bytes", "q_heads", "queries", "read_bytes")

    def __init__(self, k: list[int], v: list[int], dtype: str, queries: int, q_heads: int | None,
                 read_bytes: int | None = None) -> None:
        self.q_heads = q_heads
        self.batch = int(np.prod(k[:-3])) if len(k) > 3 else 1
        self.heads = k[-3] if len(k) >= 3 else 1
        self.keys, self.head_dim, self.queries = k[-2], k[-1], queries
        self.dtype = dtype_name(dtype) or dtype
        self.kv_bytes = _bytes(k, v, dtype)
        self.read_bytes = self.kv_bytes if read_bytes is None else read_bytes


def _bytes(k: list[int], v: list[int], dtype: str) -> int:
    return (math.prod(k) + math.prod(v)) * elem_bytes(dtype)


def _kv_shapes(q: TraceQuery) -> dict[int, list[_LayerKV]]:
    """Per step, per forward attention call: K and V as attention reads them from the cache."""
    ev, a = q.ev, q.a
    fwd = (a.layer >= 0) & (a.step >= 0) & ~a.backward & (ev.kind == Kind.CPU_OP)
    names = ev.names
    out: dict[int, list[_LayerKV]] = {}
    # One call per (step, layer, block instance): the block scopes, forward, in the steps.
    blocks = np.flatnonzero(a.is_scope & (a.phase < 0) & (a.head < 0) & (a.layer >= 0) & (a.step >= 0) & ~a.backward)
    for b in blocks.tolist():
        sub = np.arange(b + 1, q.subtree_end(b))
        ops = sub[fwd[sub] & q.top_op[sub]]
        found = _call_kv(q, ops, names)
        if found is not None:
            out.setdefault(int(a.step[b]), []).append(found)
    return out


def _call_kv(q: TraceQuery, ops: np.ndarray, names: tuple[str, ...]) -> _LayerKV | None:
    """K and V of one block's call. What the core reads: a fused call's k and v, or naive
    attention's matmul operands. The cache: the tensors kv_expand repeats where the block expands
    K and V to every query head (grouped-query attention without ``enable_gqa``), else the same."""
    a, ev = q.a, q.ev
    phase = a.phase[ops]
    core: tuple[list[int], list[int], str, int, int | None] | None = None  # k, v, dtype, queries, q heads
    fused = ops[np.isin(phase, _FUSED) & np.isin(ev.name[ops], [i for i, n in enumerate(names) if n in SDPA_OPS])]
    for i in fused.tolist():
        qd, k, v = q.dims(i, 0), q.dims(i, 1), q.dims(i, 2)
        if qd and k and v and len(k) >= 3:
            types = q.types(i)
            core = (k, v, types[1] if len(types) > 1 else "float", qd[-2], qd[-3] if len(qd) >= 3 else None)
            break
    qk = [i for i in ops[phase == _QK].tolist() if names[ev.name[i]] in MATMUL_ARGS]
    av = [i for i in ops[phase == _AV].tolist() if names[ev.name[i]] in MATMUL_ARGS]
    if core is None and qk and av:
        ia, ib = MATMUL_ARGS[names[ev.name[qk[0]]]]
        _, vb = MATMUL_ARGS[names[ev.name[av[0]]]]
        qd, kt, v = q.dims(qk[0], ia), q.dims(qk[0], ib), q.dims(av[0], vb)
        if qd and kt and v and len(kt) >= 3:
            types = q.types(qk[0])
            core = ([*kt[:-2], kt[-1], kt[-2]], v,  # kᵀ (..., D, Sk) back to (..., Sk, D)
                    types[ib] if len(types) > ib else "float", qd[-2], qd[-3] if len(qd) >= 3 else None)
    if core is None:
        return None
    k, v, dtype, queries, q_heads = core
    expand = ops[(phase == _KV_EXPAND) & np.isin(ev.name[ops], [i for i, n in enumerate(names) if n in KV_EXPAND_OPS])]
    if expand.size >= 2:
        ck, cv = q.dims(int(expand[0])), q.dims(int(expand[1]))
        if ck and cv and len(ck) == len(cv) == 5:  # Hugging Face's repeat_kv: (B, Hkv, 1, L, D) expanded
            ck, cv = ck[:2] + ck[3:], cv[:2] + cv[3:]
        if ck and cv and len(ck) >= 3:
            return _LayerKV(ck, cv, (q.types(int(expand[0])) or (dtype,))[0], queries, q_heads,
                            read_bytes=_bytes(k, v, dtype))
    return _LayerKV(k, v, dtype, queries, q_heads)


def _roles_from_shapes(shapes: dict[int, list[_LayerKV]]) -> dict[int, tuple[str, int]]:
    out: dict[int, tuple[str, int]] = {}
    for step, calls in shapes.items():
        queries = {c.queries for c in calls}
        keys = max(c.keys for c in calls)
        if queries == {1} and keys >= 1:
            out[step] = ("decode", keys)
        elif len(queries) == 1 and queries.pop() == keys and keys > 1:
            out[step] = ("prefill", keys)
    return out if any(role == "decode" for role, _ in out.values()) else {}


# -- per step -------------------------------------------------------------------------------

def _step_figures(q: TraceQuery, steps: list[int], cuda: bool) -> dict[int, dict[str, float]]:
    ev, a = q.ev, q.a
    fwd = (a.layer >= 0) & ~a.backward
    code = np.searchsorted(np.asarray(steps), a.step)
    known = np.isin(a.step, steps)
    n = len(steps)

    def total(mask: np.ndarray, values: np.ndarray | None = None) -> np.ndarray:
        idx = np.flatnonzero(mask & known)
        w = ev.dur[idx] if values is None else values[idx]
        return np.bincount(code[idx], weights=w, minlength=n)[:n]

    work = q.device_work if cuda else (a.is_scope & (ev.kind == Kind.ANNOTATION))
    core = total(fwd & work & np.isin(a.phase, _CORE))
    cache = total(fwd & work & (a.phase == _KV_CACHE))
    launches = total(fwd & (q.device_work if cuda else q.top_op), np.ones(len(ev)))
    flops = total(fwd, a.flops)
    mem = np.flatnonzero((a.mem_phase == _KV_CACHE) & ~a.mem_backward & q.mem_ok & (ev.mem_bytes > 0)
                         & np.isin(a.mem_step, steps))
    alloc = np.bincount(np.searchsorted(np.asarray(steps), a.mem_step[mem]), weights=ev.mem_bytes[mem],
                        minlength=n)[:n]
    return {s: {"core": float(core[i]), "kv_cache": float(cache[i]), "launches": float(launches[i]),
                "flops": float(flops[i]), "alloc": float(alloc[i])} for i, s in enumerate(steps)}


def _phase(tokens: list[TokenStats], layers: list[LayerStats]) -> GenerationPhase | None:
    if not tokens:
        return None
    return GenerationPhase(
        steps=len(tokens), step_us=_mean(t.step_us for t in tokens), attention_us=_mean(t.attention_us for t in tokens),
        core_us=_mean(t.core_us for t in tokens), kv_cache_us=_mean(t.kv_cache_us for t in tokens),
        kv_bytes=_mean(t.kv_bytes for t in tokens), launches=_mean(t.launches for t in tokens),
        flops=_mean(t.flops for t in tokens), layers=layers)


def _fit(decode: list[TokenStats]) -> dict[str, Any]:
    """Decode attention time against context (the ``Generation`` fields it sets), where the
    contexts span enough to say something: over a narrow range (one short generation) noise
    decides the exponent, so there is no fit, and ``fit_note`` says why. The cache's growth per
    token is fitted in any case (it is exact)."""
    decode = [t for t in decode if t.context > 0]
    xs = [float(t.context) for t in decode]
    if len(set(xs)) < 2:
        return {}
    out: dict[str, Any] = {"kv_bytes_per_token": max(0.0, float(np.polyfit(xs, [t.kv_bytes for t in decode], 1)[0]))}
    lo, hi = min(xs), max(xs)
    if hi / lo < NARROW_RANGE:
        out["fit_note"] = (f"no fit: the decode steps' contexts span {lo:.0f} to {hi:.0f} keys ({hi / lo:.2f}x), too "
                           f"narrow for an exponent (it takes {NARROW_RANGE:.0f}x); generate more tokens, or sweep "
                           "--prompt-len and compare the runs (tb-attn compare fits decode time against context)")
        return out
    ys = [t.attention_us for t in decode]
    fit = fit_power(xs, ys)
    slope, intercept = np.polyfit(xs, ys, 1)
    out |= {"fit": fit, "per_key_us": float(slope), "fixed_us": float(intercept)}
    if fit is not None and fit.r2 is not None and fit.r2 < POOR_FIT:
        out["fit_note"] = (f"the fit explains little of the steps' variation (R² {fit.r2:.2f}): over these contexts "
                           "decode time hardly depends on the keys; a fixed cost per step (launches, the projections) "
                           "and noise make it")
    return out


def _memory_check(out: Generation, decode: list[TokenStats], prefill: list[TokenStats], memory_events: bool) -> str:
    """The cache's bytes from the shapes against what the kv_cache phase allocates."""
    shapes = _mean(t.kv_bytes for t in decode)
    alloc = out.realloc_bytes_per_token
    if shapes <= 0:
        return "not checked: no K and V shapes (record_shapes off?)"
    if not memory_events:
        return "not checked: the trace has no memory events (profile_memory off)"
    if not any(t.kv_cache_us > 0 or t.kv_alloc_bytes > 0 for t in decode):
        return "not checked: no kv_cache phase in this trace (the appends are in no attention block)"
    if abs(alloc - shapes) <= MEMORY_TOLERANCE * shapes:
        return "agrees: each decode step allocates the whole cache anew, as many bytes as K and V's shapes"
    if alloc <= MEMORY_TOLERANCE * shapes:
        first = prefill[0].kv_alloc_bytes if prefill else 0.0
        last = decode[-1].kv_bytes
        if first >= last * (1 - MEMORY_TOLERANCE):
            return "agrees: decode steps allocate nothing in the kv_cache phase; the prefill allocated the whole cache"
        return "agrees: decode steps allocate nothing in the kv_cache phase (a preallocated cache)"
    return f"differs: the kv_cache phase allocates {alloc:.0f} bytes per decode step; the shapes say {shapes:.0f}"


def _kv_cache_kind(gen: dict[str, object], decode: list[TokenStats]) -> str | None:
    kind = gen.get("kv_cache")
    if isinstance(kind, str) and kind in ("static", "dynamic"):
        return kind
    if not any(t.kv_alloc_bytes for t in decode):
        return None
    grows = all(t.kv_alloc_bytes >= (1 - MEMORY_TOLERANCE) * t.kv_bytes > 0 for t in decode)
    return "dynamic" if grows else None


def _prompt_len(tokens: list[TokenStats]) -> int | None:
    first = next((t for t in tokens if t.role == STEP_ROLES[0]), None)
    return first.context if first else None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _mean(values: object) -> float:
    vals = list(values)  # type: ignore[call-overload]
    return float(sum(vals) / len(vals)) if vals else 0.0

