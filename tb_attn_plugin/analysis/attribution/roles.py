"""Phases by role: the phase of each op of an attention block that no phase scope encloses.

``runner.instrument()`` scopes what it can wrap (projections, matmuls, softmax, dropout, SDPA),
and inferred blocks have no phase scopes at all; what is left would all be "other". Here each
such op gets the phase its role in the block gives it, read from its name and its place in the
block's sequence of top-level ops (``assign_roles``, a pure function over names). The stage of
the block (before the core, on the scores, on the probabilities, after the core) moves on with
every op whose phase is known, scoped or assigned:

- projections (``linear``, ``addmm``, ``mm``): ``qkv_proj`` before the core, ``out_proj`` after;
- a norm right after a projection, before the core, whole or as RMSNorm's pieces (``to pow mean
  add rsqrt mul``, the weight's ``mul``, a closing ``to``/``type_as``): ``qkv_proj`` (a QK-norm;
  MLA's norms of its low-rank latents between their two projections); a projection's bias, scale
  or residual that Inductor fused into a kernel of its own (``analysis.inductor``): ``qkv_proj``
  before the core, ``out_proj`` after;
- rotary embeddings: ``neg``/``cos``/``sin`` (and the complex form) before the core, and, in a
  block that has them, the ``mul``/``add`` around them and the ``cat`` right after a ``neg``; on
  interleaved pairs (``aten.ROTATION_OPS``: ``mul mul sub``, no ``neg``), the ``mul``/``sub``/``add``
  and the ``cat`` that joins the halves (``aten.ROTATION_JOIN`` before it);
- the KV cache: any other ``cat`` (or ``index_copy_``) before the core, a copy right after one (a
  static cache's), and a serving engine's write into its paged cache (``serving.SERVING_KV_WRITE_OPS``);
- layout copies of q, k and v before the core (``copy_``, ``clone``: MLA's key assembled from its
  parts, and the views they write into): ``copy``;
- a serving engine's attention op (``serving.SERVING_CORE_OPS``): ``sdpa``, the fused core, and its
  RoPE op: ``rope``; names read through ``serving.canonical`` (SGLang's profiler counters dropped,
  a serving GEMM wrapper read as the ``linear`` it wraps);
- an attention library's op (``libraries.ATTENTION_CORE_OPS``: FlashAttention, aiter, xformers,
  SageAttention, Transformer Engine): ``sdpa``; its KV-cache write (``libraries.LIBRARY_KV_WRITE_OPS``):
  ``kv_cache``; its rotary op (``libraries.LIBRARY_ROPE_OPS``): ``rope``;
- ``expand``/``repeat_interleave`` before the core: ``kv_expand``;
- building a mask (``bitwise_not``, ``tril``, ``arange``, ``zeros_like``...) before the core,
  and applying one (``add``, ``where``, ``masked_fill``) on the scores: ``mask``;
- ``mul``/``div`` on the scores: ``scale`` (before the core, in a block without rotary
  embeddings: scaling q, the same phase);
- a dtype conversion of the probabilities: ``softmax``; dropout on them: ``dropout``;
- after the core, dropout, a residual ``add`` and a norm: ``out_proj`` (BERT's attention module
  ends in its output sublayer);
- a collective (``collectives.collective_name``: a row-parallel projection's all-reduce, vLLM's
  ``all_reduce``) and the copies right before and after it: ``comm``;
- ``.contiguous()`` copies right before a fused core: ``copy`` (they make q, k and v, and are
  neither the core's work, whose time and FLOP/s are its op's, nor the phase's before them; after a
  mask they copy the mask, and stay the mask's);
- view and layout ops (``view``, ``transpose``, ``split``...): after the core ``out_proj`` (the
  head merge); before it, they prepare the next op's input where that is a projection, a mask
  or the q·kᵀ matmul (the transpose of k), or the unsqueeze before an expand or a rotary
  product; otherwise they reshape the previous op's output (the head split after a projection).

What has no role stays "other": bookkeeping such as a cache's empty tensors. ``role_scopes``
turns the assignments into synthetic phase scopes, which ``analyze`` adds before attributing
again. One op that runs a whole block (``FUSED_BLOCK_OPS``: nn.MultiheadAttention's fast path)
is read through its own ops.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from tb_attn_plugin.analysis.attribution.attribute import Attribution
from tb_attn_plugin.analysis.attribution.collectives import collective_name
from tb_attn_plugin.analysis.ops.opnames import canonical
from tb_attn_plugin.trace.events import Events
from tb_attn_plugin.trace.kineto import Kind
from tb_attn_plugin.vocab.aten import (
    ARITHMETIC_OPS,
    CAT_OP,
    CONTIGUOUS_OP,
    COPY_OPS,
    DROPOUT_OPS,
    DTYPE_CONVERT_OPS,
    FUSED_BLOCK_OPS,
    INT_MM_OP,
    KV_CACHE_OPS,
    KV_EXPAND_OPS,
    LAYOUT_OPS,
    MASK_MAKING_OPS,
    MASK_OPS,
    MATMUL_OPS,
    MM_OP,
    NEG_OP,
    NORM_OPS,
    NORM_PIECE_OPS,
    PROJECTION_OPS,
    QKV_TRANSFORM_OP,
    ROPE_OPS,
    ROTATION_JOIN,
    ROTATION_OPS,
    SCALE_OPS,
    SDPA_OPS,
    SOFTMAX_OPS,
    TRANSPOSE_OPS,
    UNSQUEEZE_OPS,
)
from tb_attn_plugin.vocab.kernels import INDUCTOR_EPILOGUE_OP
from tb_attn_plugin.vocab.libraries import ATTENTION_CORE_OPS, LIBRARY_KV_WRITE_OPS, LIBRARY_ROPE_OPS
from tb_attn_plugin.vocab.scopes import PHASES, Phase, format_scope
from tb_attn_plugin.vocab.serving import SERVING_CORE_OPS, SERVING_KV_WRITE_OPS, SERVING_QK_NORM_OPS, SERVING_ROPE_OPS

__all__ = ["CORE", "SyntheticScope", "assign_roles", "phase_spans", "role_scopes", "span_scope"]

#: A stand-in phase for a head scope in its block's sequence: the core ran there.
CORE = "core"
_PAD = 1e-4  # synthetic scopes are padded so that they sort before the ops they wrap
_MIN_GAP_US = 0.01  # well above attribute.EPS_US: a shorter gap before a scope is not covered
_PRE, _SCORES, _PROBS, _DONE = range(4)
#: A norm of q or k, whole (a norm op, SGLang's ``apply_qk_norm``, an Inductor kernel read as a
#: norm), right after a projection and before the core: Qwen3's, OLMo's, SD3's QK-norm.
_QK_NORM = NORM_OPS | SERVING_QK_NORM_OPS
_ADDS = ARITHMETIC_OPS - SCALE_OPS
#: What RMSNorm written in Python runs (``to pow mean add rsqrt mul``, the weight's ``mul``, Gemma's
#: ``1 + weight``, a closing ``type_as``): a norm's pieces, after the first of ``NORM_PIECE_OPS``.
_NORM_RUN = NORM_PIECE_OPS | ARITHMETIC_OPS | DTYPE_CONVERT_OPS


@dataclass(frozen=True, slots=True)
class SyntheticScope:
    track: int
    ts: float
    dur: float
    name: str


def _advance(stage: int, phase: str) -> int:
    if phase == Phase.QK_MATMUL:
        return max(stage, _SCORES)
    if phase == Phase.SOFTMAX:
        return max(stage, _PROBS)
    if phase in (Phase.AV_MATMUL, Phase.SDPA, Phase.OUT_PROJ, CORE):
        return _DONE
    return stage


def _role(op: str, stage: int, recent: tuple[str, ...], last_phase: str | None, rope: bool, *,
          interleaved: bool = False, norm: bool = False) -> str | None:
    """The phase of one op outside layout ops, or None (other). ``recent``: the ops before it,
    nearest last; ``interleaved``: the block rotates interleaved pairs; ``norm``: the op is one of
    a norm's pieces (``_norm_pieces``)."""
    if collective_name(op) is not None:  # a row-parallel projection's all-reduce, wherever in the block
        return Phase.COMM
    if op in SDPA_OPS or op in SERVING_CORE_OPS or op in ATTENTION_CORE_OPS:
        return Phase.SDPA
    if op in SOFTMAX_OPS:
        return Phase.SOFTMAX if stage < _DONE else None
    if op == QKV_TRANSFORM_OP:
        return Phase.QKV_PROJ
    if op == INT_MM_OP:  # int8 attention's integer q·kᵀ
        return Phase.QK_MATMUL if stage < _PROBS else None
    if op in MATMUL_OPS and not (op == MM_OP and stage == _PRE):
        return (Phase.AV_MATMUL if stage == _PROBS else Phase.OUT_PROJ if stage == _DONE else Phase.QK_MATMUL)
    if op in PROJECTION_OPS:
        return Phase.QKV_PROJ if stage == _PRE else Phase.OUT_PROJ if stage == _DONE else None
    if op == INDUCTOR_EPILOGUE_OP:  # a projection's bias, scale or residual, fused by Inductor
        return Phase.QKV_PROJ if stage == _PRE else Phase.OUT_PROJ if stage == _DONE else None
    if (op in _QK_NORM or norm) and stage == _PRE and last_phase == Phase.QKV_PROJ:
        return Phase.QKV_PROJ
    if stage == _DONE:
        return Phase.OUT_PROJ if op in DROPOUT_OPS | _ADDS | NORM_OPS | {CAT_OP} else None
    if op in DROPOUT_OPS:
        return Phase.DROPOUT if stage == _PROBS else None
    if op in DTYPE_CONVERT_OPS:
        return Phase.SOFTMAX if stage == _PROBS else None
    if stage == _SCORES:
        if op in SCALE_OPS:
            return Phase.SCALE
        if op in MASK_OPS | _ADDS | MASK_MAKING_OPS | KV_EXPAND_OPS:
            return Phase.MASK
        return None
    if stage == _PROBS:
        return None
    # Before the core.
    if op in ROPE_OPS or op in SERVING_ROPE_OPS or op in LIBRARY_ROPE_OPS:
        return Phase.ROPE
    if op in SERVING_KV_WRITE_OPS or op in LIBRARY_KV_WRITE_OPS:
        return Phase.KV_CACHE
    if op in KV_CACHE_OPS:
        rotary = recent[-1:] == (NEG_OP,) or (interleaved and recent[-3:] == ROTATION_JOIN)
        return Phase.ROPE if op == CAT_OP and rotary else Phase.KV_CACHE
    if op in COPY_OPS:  # a static cache's copy right after its write, else q, k or v laid out anew
        return Phase.KV_CACHE if last_phase == Phase.KV_CACHE else Phase.COPY
    if op in KV_EXPAND_OPS:  # right after building a mask: broadcasting it
        return Phase.MASK if last_phase == Phase.MASK else Phase.KV_EXPAND
    if op in MASK_MAKING_OPS or op in MASK_OPS - ARITHMETIC_OPS:
        return Phase.MASK
    if op in ARITHMETIC_OPS:
        return Phase.ROPE if rope else Phase.SCALE if op in SCALE_OPS else None
    return None


def assign_roles(ops: Sequence[str], phases: Sequence[str | None]) -> list[str | None]:
    """Each op's phase: ``phases[i]`` where a scope gave one, else by role (module docstring),
    else None. ``ops``: a block's top-level op names in order; ``phases``: their scopes' phases,
    None for an op outside phase scopes, ``CORE`` for a head scope."""
    return list(_assign(tuple(canonical(op) for op in ops), tuple(phases)))


@lru_cache(maxsize=1024)  # every call of a layer, and usually every layer, is the same sequence
def _assign(ops: tuple[str, ...], phases: tuple[str | None, ...]) -> tuple[str | None, ...]:
    n = len(ops)
    out: list[str | None] = list(phases)
    stage_at = [_PRE] * n
    interleaved = any(ops[i - 2:i + 1] == ROTATION_OPS and phases[i - 2:i + 1] == (None,) * 3 for i in range(2, n))
    rope = interleaved or any(op in ROPE_OPS for op, ph in zip(ops, phases, strict=True) if ph is None)
    norms = _norm_pieces(ops, phases)
    stage = _PRE
    last_phase: str | None = None
    for i, (op, ph) in enumerate(zip(ops, phases, strict=True)):
        stage_at[i] = stage
        if ph is None and op not in LAYOUT_OPS:
            out[i] = _role(op, stage, ops[max(i - 3, 0):i], last_phase, rope, interleaved=interleaved,
                           norm=i in norms)
        if out[i] is not None:
            stage = _advance(stage, out[i])  # type: ignore[arg-type]
            last_phase = out[i]
    for i in np.flatnonzero([p == Phase.COMM for p in out]).tolist():  # the copies a collective makes
        for step in (-1, 1):
            j = i + step
            while 0 <= j < n and phases[j] is None and out[j] is None and ops[j] in COPY_OPS:
                out[j] = Phase.COMM
                j += step
    i = 0
    while i < n:  # runs of layout ops outside phase scopes
        if phases[i] is not None or ops[i] not in LAYOUT_OPS:
            i += 1
            continue
        j = i
        while j < n and phases[j] is None and ops[j] in LAYOUT_OPS:
            j += 1
        _layout_run(ops, out, i, j, stage_at[i])
        i = j
    return tuple(None if p == CORE else p for p in out)


def _norm_pieces(ops: tuple[str, ...], phases: tuple[str | None, ...]) -> frozenset[int]:
    """The ops of each norm written in pieces outside phase scopes: from a dtype conversion right
    before its first ``NORM_PIECE_OPS`` op (at least two of them in the run) through the product with
    the weight (the second ``mul``), and a closing conversion."""
    out: set[int] = set()
    n = len(ops)
    i = 0
    while i < n:
        if phases[i] is not None or ops[i] not in NORM_PIECE_OPS:
            i += 1
            continue
        lo = i - 1 if i > 0 and phases[i - 1] is None and ops[i - 1] in DTYPE_CONVERT_OPS else i
        j, muls, pieces = i, 0, 0
        while j < n and phases[j] is None and ops[j] in _NORM_RUN and muls < 2:
            muls += ops[j] in SCALE_OPS
            pieces += ops[j] in NORM_PIECE_OPS
            j += 1
        if j < n and phases[j] is None and ops[j] in DTYPE_CONVERT_OPS:
            j += 1
        if pieces >= 2:
            out.update(range(lo, j))
        i = max(j, i + 1)
    return frozenset(out)


def _layout_run(ops: Sequence[str], out: list[str | None], lo: int, hi: int, stage: int) -> None:
    """Phases for the layout ops ``ops[lo:hi]`` (module docstring)."""
    after = out[hi] if hi < len(ops) else None
    before = next((p for p in reversed(out[:lo]) if p is not None and p != CORE), None)
    if stage == _DONE:
        out[lo:hi] = [Phase.OUT_PROJ] * (hi - lo)
        return
    if after in (Phase.QKV_PROJ, Phase.MASK, Phase.COPY):  # a copy's views: what it writes into
        out[lo:hi] = [after] * (hi - lo)
        return
    tail = hi
    if after == Phase.QK_MATMUL and ops[hi - 1] in TRANSPOSE_OPS:
        tail = hi - 1
    elif after == Phase.SDPA and before != Phase.MASK:
        # The copies that make q, k and v contiguous for a fused core are layout work, neither the
        # core's (its time and FLOP/s are its op's) nor the phase's before them (v has no RoPE).
        # After a mask they copy the mask (T5's position bias), and stay the mask's.
        copies = hi
        while copies > lo and ops[copies - 1] == CONTIGUOUS_OP:
            copies -= 1
        out[copies:hi] = [Phase.COPY] * (hi - copies)
        hi = tail = copies
    elif after in (Phase.KV_EXPAND, Phase.ROPE):
        while tail > lo and ops[tail - 1] in UNSQUEEZE_OPS:
            tail -= 1
    out[tail:hi] = [after] * (hi - tail)
    fill = before if before is not None else after
    out[lo:tail] = [fill] * (tail - lo)


def role_scopes(events: Events, attr: Attribution) -> list[SyntheticScope]:
    """Synthetic phase scopes for the forward ops of scoped blocks that no phase scope encloses
    and whose role gives them a phase; none when every op is in a phase scope (the built-in
    model), so such traces cost one pass over their ops."""
    a = attr
    cpu = events.kind == Kind.CPU_OP
    par = a.parent
    up = np.maximum(par, 0)
    top = np.flatnonzero(cpu & (par >= 0) & a.is_scope[up] & (a.layer >= 0) & ~a.backward)
    if not (a.phase[top] < 0).any():
        return []
    fused_ids = [k for k, name in enumerate(events.names) if name in FUSED_BLOCK_OPS]
    fused = top[(a.phase[top] < 0) & np.isin(events.name[top], fused_ids)] if fused_ids else top[:0]
    inner = np.flatnonzero(cpu & np.isin(par, fused)) if fused.size else top[:0]
    # Head scopes stand in their block's sequence for the core they ran.
    heads = np.flatnonzero(a.is_scope & (par >= 0) & a.is_scope[up] & (a.phase < 0) & (a.head >= 0) & ~a.backward)
    members = np.union1d(np.union1d(np.setdiff1d(top, fused), inner), heads)
    # Each member's sequence: the nearest enclosing block or head scope (a phase scope's parent).
    owner = par[members].copy()
    in_fused = np.isin(members, inner)
    owner[in_fused] = par[owner[in_fused]]
    is_head = np.isin(members, heads)
    via_phase = a.phase[owner] >= 0
    owner[via_phase] = par[owner[via_phase]]
    out: list[SyntheticScope] = []
    order = np.lexsort((members, owner))
    members, owner, is_head = members[order], owner[order], is_head[order]
    bounds = np.flatnonzero(np.diff(owner)) + 1
    names = events.names
    for group, heads_mark in zip(np.split(members, bounds), np.split(is_head, bounds), strict=True):
        ids = group.tolist()
        given = [CORE if h else PHASES[a.phase[i]] if a.phase[i] >= 0 else None
                 for i, h in zip(ids, heads_mark.tolist(), strict=True)]
        if all(g is not None for g in given):
            continue
        assigned = assign_roles([names[events.name[i]] for i in ids], given)
        for first, last, phase in phase_spans(ids, given, assigned, par):
            out.append(span_scope(events, first, last, _phase_scope(a, first, phase), par))
        # The Python time before a written phase scope is that phase's too, as above.
        for i, g in zip(ids, given, strict=True):
            scope = int(par[i])
            if g is None or g == CORE or not a.is_scope[scope] or a.phase[scope] < 0 or i != scope + 1:
                continue  # not the first op of a phase scope
            start, end = _previous_end(events, scope, par), float(events.ts[scope])
            if int(par[scope]) >= 0 and end - start > _MIN_GAP_US:
                out.append(SyntheticScope(int(events.track[scope]), start + _PAD, end - start - 2 * _PAD,
                                          _phase_scope(a, scope, g)))
    return out


def _phase_scope(a: Attribution, i: int, phase: str) -> str:
    """The scope name of ``phase`` in event ``i``'s layer (and measured head)."""
    head = int(a.head[i])
    return format_scope(int(a.layer[i]), head=head if head >= 0 else None, phase=phase)


def phase_spans(ids: list[int], given: Sequence[str | None], assigned: Sequence[str | None],
                parent: np.ndarray) -> list[tuple[int, int, str]]:
    """(first op, last op, phase) of each run of consecutive sibling ops whose phase was
    assigned here (``given`` None): one synthetic scope each."""
    spans: list[tuple[int, int, str]] = []
    for k, (i, g, phase) in enumerate(zip(ids, given, assigned, strict=True)):
        if g is not None or phase is None:
            continue
        if spans and spans[-1][2] == phase and k > 0 and ids[k - 1] == spans[-1][1] and parent[i] == parent[ids[k - 1]]:
            spans[-1] = (spans[-1][0], i, phase)
        else:
            spans.append((i, i, phase))
    return spans


def _previous_end(events: Events, i: int, parent: np.ndarray) -> float:
    """Where the sibling before event ``i`` ends (its parent's start if it is the first child)."""
    p = int(parent[i])
    j = i - 1
    while j > p and int(parent[j]) != p:
        j -= 1  # back over the previous sibling's descendants to the sibling (or the parent)
    return float(events.ts[j] + events.dur[j]) if j > p else float(events.ts[p])


def span_scope(events: Events, first: int, last: int, name: str, parent: np.ndarray) -> SyntheticScope:
    """A scope over ops ``first`` to ``last``, from the end of whatever ran before ``first``
    under the same parent (the Python time that led to the op belongs to its phase, as it does
    inside a ``record_function`` scope), padded to sort before the ops."""
    p = int(parent[first])
    start = float(events.ts[first])
    if p >= 0:
        start = min(start, max(_previous_end(events, first, parent), float(events.ts[p]) + 2 * _PAD))
    stop = float(events.ts[last] + events.dur[last])
    return SyntheticScope(int(events.track[first]), start - _PAD, stop - start + 2 * _PAD, name)
