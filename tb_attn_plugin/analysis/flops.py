"""FLOPs of matrix and attention ops, from the ``Input Dims`` the profiler records.

``with_flops=True`` writes nothing into the trace and ``FlopCounterMode`` counts 0 for the
CPU flash kernel, so we compute FLOPs ourselves (one multiply-add = 2 FLOPs):

- ``mm(A[M,K], B[K,N])``: 2·M·K·N; ``addmm(bias, A, B)``: the same (the bias add is ignored).
- ``bmm(A[b,M,K], B[b,K,N])`` and ``baddbmm(C, A, B)``: 2·b·M·K·N.
- ``matmul(A[...,M,K], B[...,K,N])``: 2·prod(broadcast batch)·M·K·N (1-D operands as in numpy).
- ``linear(X[...,K], W[N,K])``: 2·prod(X[:-1])·K·N.
- ``_int_mm(A[M,K], B[K,N])`` (int8 in, int32 out): 2·M·K·N integer ops (IOPs), which
  ``op_flops`` counts like a matmul's and the attribution then reports apart from FLOPs
  (``is_integer_op``).
- Fused attention forward, ``q[B,H,Sq,D]``, ``k[B,Hkv,Sk,D]``, ``v[B,Hkv,Sk,Dv]``:
  2·B·H·Sq·Sk·(D + Dv), times the causal fraction. Grouped-query attention costs the same as
  full attention (every query head attends), so H comes from q. The causal fraction is the
  share of (query, key) pairs left unmasked with the mask aligned to the top left, as PyTorch
  does: for Sq = Sk = S it is (S + 1) / (2·S). ``is_causal`` comes from ``Concrete Inputs``;
  without them the op is counted as not causal.
- ``_efficient_attention_forward`` called on its own (``torch.nn.attention.bias.causal_lower_right``
  calls it so, without an SDPA op around it): the same, from its (B, S, H, D) inputs, with its
  ``custom_mask_type``: 1 a top-left causal mask, 2 a bottom-right one (a KV cache's queries,
  the last Sq of Sk positions: ``causal_fraction(..., bottom_right=True)``). Inside an SDPA op it
  is not counted again (only the outermost op of a nest counts).
- Fused attention backward: 2.5 × the forward (it recomputes q·kᵀ and runs four more matmuls:
  five matmul-sized products against two).

The math backend and naive attention are not fused: their matmuls are counted one by one, at
full S×S even when causal, because that is the work they do. Only the outermost counted op of
a nest counts (``linear`` and not the ``addmm`` inside it): see ``analysis.attribute``.

Shapes are believed only when every input is a tensor of at most ``MAX_TENSOR_BYTES`` (1 PiB,
beyond any device's memory) with no negative size (``plausible``). Other shapes count 0 FLOPs,
and the other analyses (score sizes, head counts, findings) ignore them too; the attribution
counts such ops in the summary's diagnostics (``IMPLAUSIBLE``). Products are Python integers,
so no claimed size overflows.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from tb_attn_plugin.ops import (
    EFFICIENT_FORWARD_OP,
    INT_MATMUL_ARGS,
    LINEAR_OP,
    MATMUL_ARGS,
    SDPA_BACKWARD,
    SDPA_FORWARD,
)
from tb_attn_plugin.trace.events import OpShapes

__all__ = [
    "BACKWARD_FACTOR",
    "IMPLAUSIBLE",
    "MAX_TENSOR_BYTES",
    "causal_fraction",
    "elem_bytes",
    "flop_rate",
    "is_causal",
    "is_integer_op",
    "op_flops",
    "plausible",
    "tensor_bytes",
]

#: A tensor claimed to be larger than this (1 PiB) is not believed.
MAX_TENSOR_BYTES = 1 << 50
#: The diagnostics label for ops whose shapes are not believed.
IMPLAUSIBLE = "ops whose shapes claim a tensor over 1 PiB or a negative size (shapes ignored)"

#: A fused attention backward's FLOPs over its forward's (``flex_attention``'s too).
BACKWARD_FACTOR = 2.5


def _prod(values: Iterable[int]) -> int:
    out = 1
    for v in values:
        out *= int(v)
    return out


def _dims(shapes: OpShapes, i: int) -> list[int] | None:
    if i >= len(shapes.dims):
        return None
    d = shapes.dims[i]
    if not isinstance(d, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in d):
        return None
    return [int(x) for x in d]


def is_causal(shapes: OpShapes, index: int) -> bool:
    return index < len(shapes.concrete) and shapes.concrete[index].strip().lower() == "true"


def causal_fraction(sq: int, sk: int, *, bottom_right: bool = False) -> float:
    """Share of (query, key) pairs a causal mask keeps. Aligned to the top left (PyTorch's
    ``is_causal``: query i sees keys 0..i), or to the bottom right (a KV cache's queries are the
    last ``sq`` of ``sk`` positions: query i sees keys 0..sk-sq+i, so one decode query sees every
    key). The two agree when sq = sk."""
    if sq <= 0 or sk <= 0:
        return 0.0
    offset = sk - sq if bottom_right else 0
    kept = sum(min(max(i + 1 + offset, 0), sk) for i in range(sq)) if sq <= 4096 \
        else _kept_closed_form(sq, sk, offset)
    return kept / (sq * sk)


def _kept_closed_form(sq: int, sk: int, offset: int = 0) -> int:
    """Σ over queries i < sq of min(max(i + 1 + offset, 0), sk)."""
    first = max(0, -offset)  # queries before this one see no key
    full = min(sq, max(first, sk - offset))  # from this query on, every key
    ramp = range(first, full)  # the queries in between see i + 1 + offset keys
    ramp_sum = len(ramp) * (2 * offset + ramp.start + ramp.stop + 1) // 2 if len(ramp) else 0
    return ramp_sum + (sq - full) * sk


def _matmul(a: list[int], b: list[int]) -> float:
    if not a or not b:
        return 0.0
    if len(a) == 1:
        a = [1, a[0]]
    if len(b) == 1:
        b = [b[0], 1]
    m, k = a[-2], a[-1]
    n = b[-1]
    batch_a, batch_b = a[:-2], b[:-2]
    width = max(len(batch_a), len(batch_b))
    batch_a = [1] * (width - len(batch_a)) + batch_a
    batch_b = [1] * (width - len(batch_b)) + batch_b
    batch = _prod(max(x, y) for x, y in zip(batch_a, batch_b, strict=True))
    return 2.0 * batch * m * k * n


def _attention(q: list[int], k: list[int], v: list[int] | None, causal: bool) -> float:
    if len(q) < 2 or len(k) < 2:
        return 0.0
    sq, d = q[-2], q[-1]
    sk = k[-2]
    dv = v[-1] if v else d
    batch_heads = _prod(q[:-2])
    flops = 2.0 * batch_heads * sq * sk * (d + dv)
    return flops * causal_fraction(sq, sk) if causal else flops


def tensor_bytes(dims: Sequence[int], dtype: str) -> int | None:
    """Bytes of a tensor of these sizes (exact, however large), or None if a size is negative."""
    if any(d < 0 for d in dims):
        return None
    return math.prod(dims) * elem_bytes(dtype)


def plausible(shapes: OpShapes) -> bool:
    """Whether every input's sizes describe a tensor that could exist (``MAX_TENSOR_BYTES``)."""
    for i, dims in enumerate(shapes.dims):
        if isinstance(dims, list) and dims:
            nbytes = tensor_bytes(dims, shapes.types[i] if i < len(shapes.types) else "float")
            if nbytes is None or nbytes > MAX_TENSOR_BYTES:
                return False
    return True


def op_flops(name: str, shapes: OpShapes | None) -> float:
    """FLOPs of one op; 0 for ops we do not count, whose shapes were not recorded or are not
    ``plausible``."""
    if shapes is None:
        return 0.0
    try:
        return _op_flops(name, shapes) if plausible(shapes) else 0.0
    except (TypeError, ValueError, IndexError, OverflowError):
        return 0.0


def is_integer_op(name: str) -> bool:
    """Whether ``op_flops`` of this op counts integer operations (IOPs), not floating point."""
    return name in INT_MATMUL_ARGS


def _op_flops(name: str, s: OpShapes) -> float:
    if name in MATMUL_ARGS or name in INT_MATMUL_ARGS:
        ia, ib = MATMUL_ARGS.get(name) or INT_MATMUL_ARGS[name]
        a, b = _dims(s, ia), _dims(s, ib)
        return _matmul(a, b) if a and b else 0.0
    if name == LINEAR_OP:
        x, w = _dims(s, 0), _dims(s, 1)
        if not x or not w or len(w) != 2:
            return 0.0
        return 2.0 * _prod(x[:-1]) * x[-1] * w[0]
    if name == EFFICIENT_FORWARD_OP:
        q, k, v = _dims(s, 0), _dims(s, 1), _dims(s, 2)
        if not q or not k or len(q) != 4 or len(k) != 4:
            return 0.0
        mask_type = s.concrete[9].strip() if len(s.concrete) > 9 else "0"
        flops = 2.0 * q[0] * q[2] * q[1] * k[1] * (q[3] + (v[3] if v and len(v) == 4 else q[3]))
        if mask_type in ("1", "2"):
            flops *= causal_fraction(q[1], k[1], bottom_right=mask_type == "2")
        return flops
    if name in SDPA_FORWARD:
        q, k, v = _dims(s, 0), _dims(s, 1), _dims(s, 2)
        if not q or not k:
            return 0.0
        return _attention(q, k, v, is_causal(s, SDPA_FORWARD[name]))
    if name in SDPA_BACKWARD:
        qi, ci = SDPA_BACKWARD[name]
        q, k, v = _dims(s, qi), _dims(s, qi + 1), _dims(s, qi + 2)
        if not q or not k:
            return 0.0
        return BACKWARD_FACTOR * _attention(q, k, v, is_causal(s, ci))
    return 0.0


def elem_bytes(dtype: str) -> int:
    """Bytes per element of a profiler ``Input type`` string (e.g. 'float', 'c10::BFloat16')."""
    t = dtype.lower()
    if "complex" in t:
        return 16 if "double" in t else 4 if "half" in t else 8
    if "double" in t or "long" in t or "int64" in t or "complex<float" in t:
        return 8
    if "half" in t or "bfloat16" in t or "short" in t:
        return 2
    if "bool" in t or "char" in t or "byte" in t or "float8" in t:
        return 1
    return 4


def flop_rate(flops: float, us: float) -> float:
    """FLOP/s of ``flops`` done in ``us`` microseconds; 0 without time."""
    return flops / (us * 1e-6) if us > 0 else 0.0
