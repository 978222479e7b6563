"""Bytes moved by attention's ops: the least memory traffic each op must make, from the shapes and
dtypes the profiler records (``record_shapes=True``). It is the roofline's denominator
(``analysis.roofline``); the formulas and their sources are in ``docs/analysis.md`` ("Bytes moved").

Every op reads each of its tensor inputs once and writes its output once; nothing is assumed to
stay in a cache between ops, and nothing is counted twice within one op (a broadcast operand is read
once). Per op (sizes times element bytes):

- GEMMs ``mm(A, B)``, ``bmm``, ``_int_mm``: A + B + the output (M·N per batch; int32 for
  ``_int_mm``); ``addmm(C, A, B)``, ``baddbmm``: C + A + B + the output. ``linear(X, W[, b])``:
  X + W + b + the output (``X[..., N]``).
- Fused attention (``SDPA_FORWARD`` ops, ``_flash_attention_forward``,
  ``_efficient_attention_forward``): Q + K + V + O (O is Q's shape with V's last size, in Q's
  dtype), plus the mask where one is passed. The softmax statistics (B·H·Sq floats) are left out:
  under 4/D of O.
- Softmax (``softmax``, ``_softmax``, ``_safe_softmax``, ``special_softmax``): the input and an
  output of its shape; ``_masked_softmax`` adds its mask.
- Element-wise ops (``ELEMENTWISE_OPS``: mul, div, add, sub, where, masked_fill, in place or
  not): every tensor input, plus an output of their broadcast shape in the first input's dtype.
  Scalars count nothing.
- ``clone``: its input and an output of its shape; ``copy_(dst, src)``: src + dst, each in its own
  dtype (a conversion reads one dtype and writes another); ``native_dropout``: the input, the
  output and its bool mask.

Composite ops run other ops: ``scaled_dot_product_attention`` dispatches to a fused op or to the
math backend's decomposition, ``matmul`` and ``einsum`` call a GEMM (after a copy of an operand
where its layout asks for one), an out-of-place ``masked_fill`` clones then fills in place,
``to`` copies. Their bytes are the sum of their counted ops, so the math backend costs what its
decomposition moves and an out-of-place mask counts its clone; a composite op counts by its own
formula only where none of its ops has one (a trace that recorded it alone). Other ops count at
the outermost op of a nest with a formula (``linear``, not the ``addmm`` inside it).

Views, allocations, bookkeeping and mask building (``aten.NO_TRAFFIC_OPS``) move nothing here.
Any other top-level op that moves data but has no formula (``cat``, ``index_copy_``, a rotary
``neg``, a compiled region in a ``compiled`` phase) is counted as *unmodeled*: the phase's bytes are then a lower bound,
which the summary says (``PhaseStats.unmodeled_ops``).

To model a new implementation, give its ops a formula in ``_FORMULAS`` (or its composite op a
place in ``aten.COMPOSITE_OPS``): the phases, layers and roofline pick it up.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from tb_attn_plugin.analysis.attribution.attribute import Attribution
from tb_attn_plugin.analysis.attribution.batch import batch_bytes
from tb_attn_plugin.analysis.attribution.nesting import nearest_marked_ancestor
from tb_attn_plugin.analysis.ops.flops import elem_bytes, plausible
from tb_attn_plugin.trace.events import Events, OpShapes
from tb_attn_plugin.trace.kineto import Kind
from tb_attn_plugin.vocab.aten import (
    ATEN_PREFIX,
    CLONE_OP,
    COMPILED_REGION_OPS,
    COMPILED_REGION_PREFIX,
    COMPOSITE_OPS,
    EFFICIENT_FORWARD_OP,
    ELEMENTWISE_OPS,
    FLASH_FORWARD_OP,
    INPLACE_COPY_OP,
    INT_MATMUL_ARGS,
    LINEAR_OP,
    MASKED_SOFTMAX_OP,
    MATMUL_ARGS,
    NATIVE_DROPOUT_OP,
    NO_TRAFFIC_OPS,
    NORM_OPS,
    SDPA_CPU_FLASH_OP,
    SDPA_CUDNN_OP,
    SDPA_EFFICIENT_OP,
    SDPA_FORWARD,
    SDPA_MATH_OP,
    SDPA_OP,
    SDPA_OVERRIDEABLE_OP,
    SOFTMAX_OPS,
)
from tb_attn_plugin.vocab.scopes import PHASES

__all__ = ["event_bytes", "flop_dtype", "op_bytes", "peak_dtype"]

_COMPILED = PHASES.index("compiled")
F64 = npt.NDArray[np.float64]
B = npt.NDArray[np.bool_]

def _tensor(shapes: OpShapes, i: int) -> tuple[list[int], str] | None:
    """Input ``i``'s sizes and dtype, if it is a tensor of at least one dimension."""
    if i >= len(shapes.dims):
        return None
    d = shapes.dims[i]
    if not isinstance(d, list) or not d or not all(isinstance(x, int) and not isinstance(x, bool) for x in d):
        return None
    return [int(x) for x in d], shapes.types[i] if i < len(shapes.types) else "float"


def _nbytes(t: tuple[list[int], str] | None) -> int:
    return math.prod(t[0]) * elem_bytes(t[1]) if t else 0


def _broadcast(dims: list[list[int]]) -> list[int]:
    width = max(len(d) for d in dims)
    padded = [[1] * (width - len(d)) + d for d in dims]
    return [max(sizes) for sizes in zip(*padded, strict=True)]


def _gemm(a_at: int, b_at: int, extra: tuple[int, ...] = (), out_dtype: str | None = None
          ) -> Callable[[OpShapes], float | None]:
    def formula(s: OpShapes) -> float | None:
        a, b = _tensor(s, a_at), _tensor(s, b_at)
        if a is None or b is None:
            return None
        (ad, at), bd = a, b[0]
        ad2 = [1, *ad] if len(ad) == 1 else ad
        bd2 = [*bd, 1] if len(bd) == 1 else bd
        batch = _broadcast([ad2[:-2] or [1], bd2[:-2] or [1]])
        out = math.prod(batch) * ad2[-2] * bd2[-1] * elem_bytes(out_dtype or at)
        return float(_nbytes(a) + _nbytes(b) + out + sum(_nbytes(_tensor(s, i)) for i in extra))
    return formula


def _linear(s: OpShapes) -> float | None:
    x, w = _tensor(s, 0), _tensor(s, 1)
    if x is None or w is None or len(w[0]) != 2:
        return None
    out = math.prod(x[0][:-1]) * w[0][0] * elem_bytes(x[1])
    return float(_nbytes(x) + _nbytes(w) + _nbytes(_tensor(s, 2)) + out)


def _attention(mask_at: int | None) -> Callable[[OpShapes], float | None]:
    def formula(s: OpShapes) -> float | None:
        q, k, v = _tensor(s, 0), _tensor(s, 1), _tensor(s, 2)
        if q is None or k is None or v is None:
            return None
        out = math.prod(q[0][:-1]) * v[0][-1] * elem_bytes(q[1])
        mask = _nbytes(_tensor(s, mask_at)) if mask_at is not None else 0
        return float(_nbytes(q) + _nbytes(k) + _nbytes(v) + out + mask)
    return formula


def _same_out(extra: tuple[int, ...] = ()) -> Callable[[OpShapes], float | None]:
    """An op that reads its first input (and ``extra`` ones) and writes a tensor of its shape."""
    def formula(s: OpShapes) -> float | None:
        x = _tensor(s, 0)
        if x is None:
            return None
        return float(2 * _nbytes(x) + sum(_nbytes(_tensor(s, i)) for i in extra))
    return formula


def _elementwise(s: OpShapes) -> float | None:
    tensors = [t for t in (_tensor(s, i) for i in range(len(s.dims))) if t is not None]
    if not tensors:
        return None
    # The output's dtype: the first operand's that is not a bool condition (``where``'s x), scalars
    # included; a comparison's output would be bool, but none is in ELEMENTWISE_OPS.
    values = [t for t in s.types if t and t.lower() not in ("bool", "scalar", "scalarlist")]
    out = math.prod(_broadcast([t[0] for t in tensors])) * elem_bytes(values[0] if values else tensors[0][1])
    return float(sum(_nbytes(t) for t in tensors) + out)


def _copy(s: OpShapes) -> float | None:
    dst, src = _tensor(s, 0), _tensor(s, 1)
    if dst is None or src is None:
        return None
    return float(_nbytes(dst) + _nbytes(src))


def _dropout(s: OpShapes) -> float | None:
    x = _tensor(s, 0)
    return None if x is None else float(2 * _nbytes(x) + math.prod(x[0]))


#: Where a fused attention op takes its mask (the others take none).
_MASK_AT = {SDPA_EFFICIENT_OP: 3, SDPA_CUDNN_OP: 3, SDPA_OVERRIDEABLE_OP: 3, SDPA_CPU_FLASH_OP: 5}

#: op name -> its bytes from its shapes (None: the shapes do not fit the formula).
_FORMULAS: dict[str, Callable[[OpShapes], float | None]] = {
    # addmm and baddbmm take their bias (added to the output) before the operands: read it too.
    **{name: _gemm(a, b, (0,) if a > 0 else ()) for name, (a, b) in MATMUL_ARGS.items()},
    **{name: _gemm(a, b, out_dtype="int") for name, (a, b) in INT_MATMUL_ARGS.items()},
    LINEAR_OP: _linear,
    **{name: _attention(_MASK_AT.get(name)) for name in SDPA_FORWARD},
    SDPA_OP: _attention(3),
    SDPA_MATH_OP: _attention(3),
    FLASH_FORWARD_OP: _attention(None),
    EFFICIENT_FORWARD_OP: _attention(3),
    **{name: _same_out((1,) if name == MASKED_SOFTMAX_OP else ()) for name in SOFTMAX_OPS},
    **{name: _elementwise for name in ELEMENTWISE_OPS},
    **{name: _same_out((2,) if "rms" in name else (2, 3)) for name in NORM_OPS},
    CLONE_OP: _same_out(),
    INPLACE_COPY_OP: _copy,
    NATIVE_DROPOUT_OP: _dropout,
}


def op_bytes(name: str, shapes: OpShapes | None) -> float | None:
    """The bytes one op moves, from its shapes; None where it has no formula or its shapes do not
    fit one (or are not ``plausible``)."""
    formula = _FORMULAS.get(name)
    if formula is None or shapes is None or not plausible(shapes):
        return None
    try:
        return formula(shapes)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


def event_bytes(events: Events, attr: Attribution) -> tuple[F64, B]:
    """(bytes counted at each event, whether each event moves data with no formula: an *unmodeled*
    op), for the forward events of attention blocks (0 and False elsewhere). Works on those events
    alone (a few percent of a whole model's trace), their nesting cut at the block."""
    n = len(events)
    out = np.zeros(n, np.float64)
    unmodeled_all = np.zeros(n, np.bool_)
    idx = np.flatnonzero((attr.layer >= 0) & ~attr.backward)
    if idx.size == 0:
        return out, unmodeled_all
    pos = np.full(n, -1, np.int64)
    pos[idx] = np.arange(idx.size)
    up = attr.parent[idx]
    parent = np.where(up >= 0, pos[np.maximum(up, 0)], -1)  # -1 above the subset too
    shape = events.shape[idx]
    raw = np.full(idx.size, np.nan)
    sel = np.flatnonzero(shape >= 0)
    if sel.size:
        nid = events.name[idx[sel]].astype(np.int64)
        pairs, which = np.unique(nid * len(events.shapes) + shape[sel], return_inverse=True)
        per_pair = np.array([_pair_bytes(events, int(p)) for p in pairs], np.float64)
        raw[sel] = per_pair[which]
    served = batch_bytes(events, idx)  # serving cores: their bytes from the engine's batch annotations
    raw = np.where(np.isnan(raw), served, raw)
    has = ~np.isnan(raw)
    names = events.name[idx]
    per_name = np.array([nm in COMPOSITE_OPS for nm in events.names], np.bool_)
    composite = per_name[names] & has
    # A composite op with a counted op inside it is transparent: it is some event's nearest formula.
    near = nearest_marked_ancestor(parent, has)
    transparent = np.zeros(idx.size, np.bool_)
    transparent[near[has & (near >= 0)]] = True
    counts = has & ~(composite & transparent)
    counts &= nearest_marked_ancestor(parent, counts) < 0
    out[idx[counts]] = raw[counts]
    # Unmodeled: an ATen op with no formula whose name moves data, with nothing counted inside it
    # or around it; only the outermost such op of a nest (its children are its implementation).
    covered = has | (nearest_marked_ancestor(parent, counts) >= 0) | _ancestors_of(parent, counts)
    moves = np.array([nm.startswith(ATEN_PREFIX) and nm not in NO_TRAFFIC_OPS and nm not in _FORMULAS
                      for nm in events.names], np.bool_)[names]
    unmodeled = moves & ~covered & ~attr.is_scope[idx] & (events.kind[idx] == Kind.CPU_OP)
    # A torch.compile'd region of the block: its generated kernels are no ops, so whatever GEMMs it
    # calls as ops, its bytes are a lower bound (compiled flex's kernel gets its own term from
    # the run's shapes: ``sparsity``).
    region = np.array([nm in COMPILED_REGION_OPS or nm.startswith(COMPILED_REGION_PREFIX) for nm in events.names],
                      np.bool_)[names]
    unmodeled |= region & (attr.phase[idx] == _COMPILED)
    unmodeled &= nearest_marked_ancestor(parent, unmodeled | counts) < 0
    unmodeled_all[idx[unmodeled]] = True
    return out, unmodeled_all


def _pair_bytes(events: Events, pair: int) -> float:
    name = events.names[pair // len(events.shapes)]
    value = op_bytes(name, events.shapes[pair % len(events.shapes)])
    return np.nan if value is None else value


def _ancestors_of(parent: npt.NDArray[np.int32], marked: B) -> B:
    """Every strict ancestor of a marked event (nests are a few tens deep: one pass per level)."""
    out = np.zeros(marked.size, np.bool_)
    frontier = parent[marked]
    frontier = frontier[frontier >= 0]
    while frontier.size:
        frontier = np.unique(frontier[~out[frontier]])
        out[frontier] = True
        frontier = parent[frontier]
        frontier = frontier[frontier >= 0]
    return out


#: The peak classes of ``roofline.Peaks``, by the dtype a FLOP op's first input has.
_PEAK_DTYPES = (("float8", "fp8"), ("bfloat16", "bf16"), ("half", "fp16"), ("double", "fp64"),
                ("char", "int8"), ("byte", "int8"), ("float", "fp32"))


def peak_dtype(type_name: str) -> str | None:
    """The peak class ("fp32", "bf16", "fp16", "fp8", "int8", "fp64") of a profiler ``Input type``."""
    t = type_name.lower()
    return next((cls for key, cls in _PEAK_DTYPES if key in t), None)


def flop_dtype(events: Events, attr: Attribution, idx: npt.NDArray[np.int64]) -> str | None:
    """The peak class most of the FLOPs of events ``idx`` ran in (their op's first tensor input's
    dtype); None where they count no FLOPs or recorded no dtype."""
    idx = idx[attr.flops[idx] > 0]
    totals: dict[str, float] = {}
    for sid, flops in zip(events.shape[idx].tolist(), attr.flops[idx].tolist(), strict=True):
        if sid < 0:
            continue
        s = events.shapes[sid]
        first = next((i for i in range(len(s.dims)) if _tensor(s, i) is not None), None)
        cls = peak_dtype(s.types[first]) if first is not None and first < len(s.types) else None
        if cls is not None:
            totals[cls] = totals.get(cls, 0.0) + flops
    return max(totals, key=lambda k: (totals[k], k)) if totals else None
