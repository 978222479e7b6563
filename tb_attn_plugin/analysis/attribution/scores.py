"""Find materialized attention scores: the memory events of one layer that allocate a
(B, H, Sq, Sk) score or probability tensor, the S×S bytes per head that grow quadratically
with sequence length. ``summary`` reports them as ``sxs_bytes`` and ``sxs_allocs``.

A size is not enough: when the key length equals the head size, q, k, v, a projection's output
or a norm's have the scores' size. Scores exist from the op that computes q·kᵀ (or, where no
such op shows, the softmax over keys) until the op that multiplies the probabilities by V
(``ScoreSizes.windows``): a score-sized tensor allocated in that stretch of a block call is the
scores, the scaled or masked scores or the probabilities. One allocated outside it, where no
scores exist, is a mask or a bias handed to the core (made by a mask-building op, in the mask
phase, or looked up as a relative position bias: T5's ``embedding``), or a coincidence of sizes
(a q scaled before the core, a norm's output), which is neither.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tb_attn_plugin.analysis.attribution.attribute import Attribution
from tb_attn_plugin.analysis.ops.flops import MAX_TENSOR_BYTES, elem_bytes
from tb_attn_plugin.trace.events import Events
from tb_attn_plugin.trace.kineto import Kind
from tb_attn_plugin.vocab.aten import (
    ADDMM_OP,
    ARITHMETIC_OPS,
    DROPOUT_OPS,
    DTYPE_CONVERT_OPS,
    EMBEDDING_OP,
    GEMM_OPS,
    INT_MM_OP,
    KERNEL_FORWARD_OPS,
    LINEAR_OP,
    MASK_MAKING_OPS,
    MASK_OPS,
    MATMUL_INPUT_COPY_OPS,
    MATMUL_OPS,
    MATMUL_WRAPPER_OPS,
    NATIVE_DROPOUT_OP,
    SCALE_OPS,
    SDPA_MATH_OP,
    SDPA_OPS,
    SOFTMAX_OPS,
)
from tb_attn_plugin.vocab.scopes import OTHER, PHASES, SCORE_PHASES, Phase

__all__ = ["SCORE_ALLOC_PHASES", "ScoreSizes", "ScoreWindows", "allocator_sizes", "score_allocs", "score_windows",
           "sxs_sizes"]

#: Where S×S allocations mean materialized scores (elsewhere an allocation of the same size is a
#: coincidence): the phases that hold scores, and the block's work in no phase scope (``OTHER``),
#: where a block without phase scopes holds them.
SCORE_ALLOC_PHASES = SCORE_PHASES | {OTHER}
_QK_CODE = PHASES.index("qk_matmul")  # in the sdpa phase the SDPA op gives the shape (and attn·V is there too)
_MASK_CODE = PHASES.index(Phase.MASK)
#: Where the matmuls and softmaxes that open and close the scores' stretch run: the phases that
#: hold scores, attn·V's, and no phase (a block without phase scopes). Not the projections'.
_WINDOW_CODES = np.array([PHASES.index(p) for p in sorted(SCORE_PHASES | {Phase.AV_MATMUL})] + [-1])
#: q·kᵀ and attn·V: the matmuls of the core, and int8 attention's integer GEMM.
_CORE_GEMMS = MATMUL_OPS | {INT_MM_OP}
#: Ops a matmul of the core is never nested in: a projection's.
_PROJECTIONS = frozenset({LINEAR_OP, ADDMM_OP})
_MIN_SXS_ELEMS = 256  # smaller "score" tensors are too common to mean anything
_SMALL_ROUND = 512  # CUDA's caching allocator: every size rounded up to this...
_LARGE_FROM = 1 << 20  # ...and a block over 1 MiB to a multiple of 2 MiB
_LARGE_ROUND = 2 << 20
_MASK_APPLIERS = (MASK_OPS - ARITHMETIC_OPS) | DTYPE_CONVERT_OPS
#: Ops whose allocations are never scores (``_stores_no_scores``).
_NO_SCORES = frozenset({*SDPA_OPS, *KERNEL_FORWARD_OPS, LINEAR_OP, ADDMM_OP}) - {SDPA_MATH_OP}


@dataclass(frozen=True, slots=True)
class ScoreSizes:
    """The score tensors of one layer, from the shapes of its ops: ``scores``, the byte sizes of
    one (B, H, Sq, Sk) tensor in its dtype and in float32 (an upcast softmax); ``masks``, the
    byte sizes of a bool mask of that shape and of the (Sq, Sk) and (B, Sq, Sk) masks a model
    builds; ``tensor_bytes`` and ``shape``: the largest score tensor, from its shape and dtype."""

    scores: frozenset[int] = frozenset()
    masks: frozenset[int] = frozenset()
    bool_masks: frozenset[int] = frozenset()
    tensor_bytes: int = 0
    shape: tuple[int, ...] = ()
    windows: ScoreWindows | None = None  # where scores exist (``score_windows``); None: nowhere


@dataclass(frozen=True, slots=True, eq=False)
class ScoreWindows:
    """The stretches of a layer's block calls in which scores exist. Each mark (its start ``ts`` on
    ``track``) opens one (``opens``: a q·kᵀ op or a softmax) or closes it (attn·V); a stretch lasts
    until the next mark on its thread or its call's end (``end``), whichever is first."""

    ts: np.ndarray
    track: np.ndarray
    opens: np.ndarray
    end: np.ndarray

    def holds(self, track: np.ndarray, ts: np.ndarray) -> np.ndarray:
        """Whether each time (on its thread) falls in a stretch where scores exist."""
        out = np.zeros(ts.size, np.bool_)
        for tr in np.unique(track).tolist():
            mine = np.flatnonzero(self.track == tr)
            at = np.flatnonzero(track == tr)
            if mine.size == 0:
                continue
            k = np.searchsorted(self.ts[mine], ts[at], side="right") - 1
            j = mine[np.maximum(k, 0)]
            out[at] = (k >= 0) & self.opens[j] & (ts[at] < self.end[j])
        return out


def sxs_sizes(ev: Events, a: Attribution, fwd: np.ndarray) -> ScoreSizes:
    """The sizes of a (B, H, Sq, Sk) score tensor in a layer, from the shapes of its forward
    events ``fwd``."""
    scores: set[int] = set()
    masks: set[int] = set()
    bools: set[int] = set()
    best: tuple[int, int, tuple[int, ...]] = (0, 0, ())
    with_shape = fwd[ev.shape[fwd] >= 0]
    with_shape = with_shape[a.shape_ok[ev.shape[with_shape]]]
    # Each distinct (name, shapes, is q·kᵀ) once: a layer repeats the same few over its calls.
    key = (ev.name[with_shape].astype(np.int64) * len(ev.shapes) + ev.shape[with_shape]) * 2 \
        + (a.phase[with_shape] == _QK_CODE)
    for i in with_shape[np.unique(key, return_index=True)[1]].tolist():
        name = ev.names[ev.name[i]]
        shapes = ev.shapes[ev.shape[i]]
        dims = shapes.dims
        elem = elem_bytes(shapes.types[0]) if shapes.types else 4
        shape: tuple[int, ...] = ()
        # Python integers: plausible inputs can still claim a score tensor past int64.
        if name in SDPA_OPS and len(dims) >= 2 and len(dims[0]) >= 3 and len(dims[1]) >= 2:
            shape = (*dims[0][:-1], dims[1][-2])
        elif name in SOFTMAX_OPS and dims and len(dims[0]) >= 3:
            shape = tuple(dims[0])
        elif name in MATMUL_OPS and a.phase[i] == _QK_CODE and len(dims) >= 2 and len(dims[0]) >= 3 \
                and len(dims[1]) >= 2:
            shape = (*dims[0][:-1], dims[1][-1])
        count = math.prod(shape) if shape else 0
        if count >= _MIN_SXS_ELEMS and count * max(elem, 4) <= MAX_TENSOR_BYTES:
            scores.update({count * elem, count * 4})
            bools.add(count)
            sq_sk = shape[-2] * shape[-1]
            masks.update({n * e for n in (sq_sk, shape[0] * sq_sk, count) for e in (1, elem, 4)})
            best = max(best, (count * elem, len(shape), shape))  # ties: the 4-D shape of SDPA or softmax
    if not scores:
        return ScoreSizes()
    return ScoreSizes(frozenset(scores), frozenset(masks), frozenset(bools - scores), best[0], best[2],
                      score_windows(ev, a, fwd))


def score_windows(ev: Events, a: Attribution, fwd: np.ndarray) -> ScoreWindows:
    """Where a layer's scores exist, from its forward events ``fwd``: the core's matmuls and
    softmaxes (the outermost of a nest, none inside a projection), in order on each thread. A
    softmax opens a stretch (the probabilities are score-sized); a matmul opens one (q·kᵀ) unless it
    follows a softmax of its call, when it is attn·V and closes it. Each stretch ends at its call's
    end at the latest: the innermost block or head scope around it."""
    names = ev.names
    ops = fwd[(ev.kind[fwd] == Kind.CPU_OP) & np.isin(a.phase[fwd], _WINDOW_CODES)]
    # Per name id of the layer's ops (the ops a mark could be nested in are the layer's too): "g" a core
    # matmul, "s" a softmax.
    kinds = {n: ("g" if names[n] in _CORE_GEMMS else "s") for n in np.unique(ev.name[fwd]).tolist()
             if names[n] in _CORE_GEMMS or names[n] in SOFTMAX_OPS}
    marks: list[tuple[int, str, int]] = []  # (event, "g" or "s", its call)
    for i in ops[np.isin(ev.name[ops], list(kinds))].tolist() if kinds else []:
        call, nested = -1, False
        p = int(a.parent[i])
        while p >= 0:
            if a.is_scope[p]:
                if a.phase[p] < 0:
                    call = p
                    break
            elif names[ev.name[p]] in _PROJECTIONS or int(ev.name[p]) in kinds:
                nested = True
                break
            p = int(a.parent[p])
        if not nested:
            marks.append((i, kinds[int(ev.name[i])], call))
    opens = np.zeros(len(marks), np.bool_)
    end = np.full(len(marks), np.inf)
    after_softmax: dict[int, bool] = {}  # per call: a softmax ran since its last q·kᵀ
    for k, (_, kind, call) in enumerate(marks):
        if kind == "s":
            opens[k] = after_softmax[call] = True
        else:
            opens[k] = not after_softmax.get(call, False)
            after_softmax[call] = False
        if call >= 0:
            end[k] = ev.ts[call] + ev.dur[call]
    at = np.array([m[0] for m in marks], np.int64)
    return ScoreWindows(ts=ev.ts[at], track=ev.track[at], opens=opens, end=end)


def allocator_sizes(sizes: frozenset[int]) -> frozenset[int]:
    """What CUDA's caching allocator records for tensors of these sizes: rounded up to 512 B,
    and blocks over 1 MiB also to a multiple of 2 MiB (a 1.8 GB score tensor is 901 × 2 MiB)."""
    out = set(sizes)
    for n in sizes:
        out.add(-(-n // _SMALL_ROUND) * _SMALL_ROUND)
        if n > _LARGE_FROM:
            out.add(-(-n // _LARGE_ROUND) * _LARGE_ROUND)
    return frozenset(out)


def score_allocs(ev: Events, a: Attribution, mem_idx: np.ndarray, sizes: ScoreSizes) -> tuple[np.ndarray, np.ndarray]:
    """Which of these memory events allocate a score tensor, and which a mask or bias of the
    scores' shape (bool, or score-sized from a mask-building op or dropout's noise, a relative
    position bias's lookup, or where no scores exist yet in the mask phase): sizes as recorded
    (rounded by the caching allocator on CUDA). A score tensor is allocated where scores exist
    (``ScoreSizes.windows``), and not as a copy that a matmul makes of its inputs (q or kᵀ can
    have the score's size when the head dimension equals the key length)."""
    score = np.zeros(mem_idx.size, np.bool_)
    mask = np.zeros(mem_idx.size, np.bool_)
    if not sizes.scores:
        return score, mask
    nbytes = ev.mem_bytes[mem_idx]
    cuda = ev.mem_device_type[mem_idx] == 1
    known = sizes.scores | sizes.masks | sizes.bool_masks
    near = np.flatnonzero((np.isin(nbytes, list(known)) | (cuda & np.isin(nbytes, list(allocator_sizes(known))))) &
                          (nbytes > 0))
    if near.size == 0:
        return score, mask
    # What each size is: 0 a bool mask's, 1 a score tensor's, 2 another mask's (CUDA: any size the
    # allocator rounds to this one).
    size_class: dict[tuple[int, bool], int] = {}
    for n, on_cuda in set(zip(nbytes[near].tolist(), cuda[near].tolist(), strict=True)):
        exact = {n} | ({s for s in known if n in allocator_sizes(frozenset({s}))} if on_cuda else set())
        size_class[(n, on_cuda)] = 0 if exact & sizes.bool_masks else 1 if exact & sizes.scores else 2
    classes = [size_class[(n, c)] for n, c in zip(nbytes[near].tolist(), cuda[near].tolist(), strict=True)]
    m = mem_idx[near]
    # Where each allocation is: 1 where scores exist, 2 in the mask phase before them, 0 elsewhere.
    held = sizes.windows.holds(ev.mem_track[m], ev.mem_ts[m]) if sizes.windows is not None \
        else np.zeros(m.size, np.bool_)
    where = np.where(held, 1, np.where(a.mem_phase[m] == _MASK_CODE, 2, 0))
    # The ops above each allocation up to its scope, as name ids, all at once; each distinct chain
    # (size class and place) is then read once.
    chain = _chains(ev, a, a.mem_event[m])
    verdicts: dict[tuple[int, ...], tuple[bool, bool]] = {}
    for k, row in zip(near.tolist(), np.column_stack([classes, where, chain]).tolist(), strict=True):
        key = tuple(row)
        if key not in verdicts:
            verdicts[key] = _verdict([ev.names[x] for x in row[2:] if x >= 0], row[0], row[1])
        score[k], mask[k] = verdicts[key]
    return score, mask


_MAX_CHAIN = 24  # ops nest this deep under a scope at most, in practice well under 10


def _chains(ev: Events, a: Attribution, start: np.ndarray) -> np.ndarray:
    """Per event in ``start``: the name ids of it and its ancestors below the nearest scope
    (innermost first, -1 padded)."""
    out = np.full((start.size, _MAX_CHAIN), -1, np.int64)
    cur = start.astype(np.int64)
    for depth in range(_MAX_CHAIN):
        valid = cur >= 0
        valid[valid] = ~a.is_scope[cur[valid]]
        if not valid.any():
            break
        out[valid, depth] = ev.name[cur[valid]]
        cur = np.where(valid, a.parent[np.maximum(cur, 0)], -1)
    return out


def _verdict(chain: list[str], size_class: int, where: int) -> tuple[bool, bool]:
    """(score, mask) for an allocation made under ``chain`` (innermost op first), ``where`` scores
    exist (1), in the mask phase before them (2) or elsewhere (0)."""
    if size_class == 0:
        return False, _mask_maker(chain, MASK_MAKING_OPS | _MASK_APPLIERS, bool_size=True)
    if size_class == 1:
        if _mask_maker(chain, MASK_MAKING_OPS) or EMBEDDING_OP in chain:  # a mask, or a position bias looked up
            return False, True
        if where != 1:  # no scores exist here: what the mask phase hands the core is a mask or a bias
            return False, where == 2
        return not _input_copy(chain) and not _stores_no_scores(chain), False
    return False, _mask_maker(chain, MASK_MAKING_OPS | _MASK_APPLIERS)


def _mask_maker(chain: list[str], makers: frozenset[str], *, bool_size: bool = False) -> bool:
    """Whether the op that allocates (``chain[0]``, under the rest) makes a mask: one of
    ``makers`` around it, or dropout's random noise (``aten::dropout`` draws it into a new
    tensor, then multiplies: the product is the dropped probabilities; ``native_dropout``'s mask
    is the allocation of a bool's size). A size alone says nothing: (B, Sq, Sk) fp32 weights
    have the size of a (B, 4, Sq, Sk) bool mask."""
    for name in chain:
        if name in makers:
            return True
        if name in DROPOUT_OPS:
            return bool_size or (name != NATIVE_DROPOUT_OP and chain[0] not in SCALE_OPS)
    return False


def _stores_no_scores(chain: list[str]) -> bool:
    """Whether the allocation is made by an op that stores no scores, whatever its size: a fused
    SDPA kernel (its output, q, k and v have the scores' size when the key length equals the head
    size), the SDPA entry point outside its math backend (copies of its inputs), or a projection.
    The math backend's own matmuls and softmax store scores: the walk stops there."""
    for name in chain:
        if name == SDPA_MATH_OP:
            return False
        if name in _NO_SCORES:
            return True
    return False


def _input_copy(chain: list[str]) -> bool:
    copied = False
    for name in chain:
        if name in MATMUL_INPUT_COPY_OPS:
            copied = True
        elif name in GEMM_OPS:  # the GEMM's own output (no matmul wrapper calls addmm: linear does)
            return False
        elif name in MATMUL_WRAPPER_OPS:
            return copied
    return False
