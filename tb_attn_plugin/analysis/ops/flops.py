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
- Attention libraries' ops (``library_flops``, docs/production.md): FlashAttention 2 and 3, aiter's
  dense calls, xformers' CK and CUTLASS ops and SageAttention, from their (B, S, H, D) q and k, as
  2·B·H·(pairs kept)·(D + Dv); their causal masks and local windows are aligned to the bottom right
  (FlashAttention's convention, SageAttention's to the top left, xformers' by its mask type), and a
  window counts the pairs it keeps exactly. Varlen and paged calls carry their lengths in tensor
  values (cu_seqlens, page tables), which the profiler does not record: their FLOPs are unknown,
  counted 0, and counted under ``UNCOUNTED`` in the diagnostics, as are library ops with no formula.

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

import numpy as np

from tb_attn_plugin.trace.events import OpShapes
from tb_attn_plugin.vocab.aten import (
    EFFICIENT_FORWARD_OP,
    INT_MATMUL_ARGS,
    LINEAR_OP,
    MATMUL_ARGS,
    SDPA_BACKWARD,
    SDPA_FORWARD,
)
from tb_attn_plugin.vocab.libraries import (
    ATTENTION_CORE_OPS,
    LIBRARY_ATTENTION,
    LIBRARY_BACKWARD_OPS,
    SAGE_OPS,
    XFORMERS_FORWARD,
)

__all__ = [
    "BACKWARD_FACTOR",
    "IMPLAUSIBLE",
    "MAX_TENSOR_BYTES",
    "UNCOUNTED",
    "causal_fraction",
    "elem_bytes",
    "flop_rate",
    "is_causal",
    "is_integer_op",
    "kept_pairs",
    "library_flops",
    "op_flops",
    "plausible",
    "tensor_bytes",
]

#: A tensor claimed to be larger than this (1 PiB) is not believed.
MAX_TENSOR_BYTES = 1 << 50
#: The diagnostics label for ops whose shapes are not believed.
IMPLAUSIBLE = "ops whose shapes claim a tensor over 1 PiB or a negative size (shapes ignored)"
#: The diagnostics label for attention library calls whose work their recorded shapes do not give.
UNCOUNTED = ("attention library calls whose FLOPs the recorded shapes do not give (varlen or paged: "
             "lengths in tensor values; or no formula): counted as 0")
#: Rows summed one by one for a local window (a causal mask without one has a closed form).
_MAX_WINDOW_ROWS = 1 << 22

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
    if name in ATTENTION_CORE_OPS:
        return library_flops(name, s) or 0.0
    return 0.0


def kept_pairs(sq: int, sk: int, *, offset: int, left: int | None = None, right: int | None = None) -> int | None:
    """(query, key) pairs a mask keeps: query i sits at key position i + ``offset`` (sk - sq for a
    mask aligned to the bottom right, 0 for the top left) and sees ``left`` keys before it and
    ``right`` after (None: all; causal is right = 0). None for a window over more rows than
    ``_MAX_WINDOW_ROWS``."""
    if left is None and right is None:
        return sq * sk
    if left is None and right == 0:
        return _kept_closed_form(sq, sk, offset)
    if sq > _MAX_WINDOW_ROWS:
        return None
    pos = np.arange(sq, dtype=np.int64) + offset
    hi = np.minimum(sk, pos + right + 1) if right is not None else np.full(sq, sk, np.int64)
    lo = np.maximum(0, pos - left) if left is not None else np.zeros(sq, np.int64)
    return int(np.maximum(hi - lo, 0).sum())


def _scalar(s: OpShapes, i: int) -> int | None:
    """An int or bool argument's recorded value (``Concrete Inputs``), or None where it is not."""
    if i >= len(s.concrete):
        return None
    text = s.concrete[i].strip().lower()
    if text in ("true", "false"):
        return int(text == "true")
    try:
        return int(text)
    except ValueError:
        return None


def _recorded(s: OpShapes, i: int) -> bool:
    """Whether an optional argument was passed: a tensor with sizes, or a value other than -1."""
    dims = s.dims[i] if i < len(s.dims) else None
    if isinstance(dims, list) and dims:
        return True
    text = s.concrete[i].strip().lower() if i < len(s.concrete) else ""
    return text not in ("", "none", "-1")


def library_flops(name: str, s: OpShapes) -> float | None:
    """FLOPs of one attention library call (module docstring), or None where its recorded shapes
    and arguments do not determine them (varlen, paged, appended, unrecorded flags, no formula)."""
    if name in LIBRARY_ATTENTION:
        qi, ci, li, ri, varlen, zero = LIBRARY_ATTENTION[name]
        if any(_recorded(s, i) for i in varlen) or any(_scalar(s, i) != 0 for i in zero):
            return None
        q, k, v = _dims(s, qi), _dims(s, qi + 1), _dims(s, qi + 2)
        causal, left, right = _scalar(s, ci), _scalar(s, li), _scalar(s, ri)
        if not q or not k or len(q) != 4 or len(k) != 4 or causal is None or left is None or right is None:
            return None
        b, sq, h, d = q
        sk = k[1]
        pairs = kept_pairs(sq, sk, offset=sk - sq, left=left if left >= 0 else None,
                           right=0 if causal else right if right >= 0 else None)
        if pairs is None:
            return None
        flops = 2.0 * b * h * pairs * (d + (v[3] if v and len(v) == 4 else d))
        return BACKWARD_FACTOR * flops if name in LIBRARY_BACKWARD_OPS else flops
    if name in XFORMERS_FORWARD:
        q, k, v = _dims(s, 0), _dims(s, 1), _dims(s, 2)
        mask = _scalar(s, 9)  # custom_mask_type: 0 none, 1 causal from the top left, 2 from the bottom right
        if any(_recorded(s, i) for i in XFORMERS_FORWARD[name]) or not q or not k or len(q) != 4 or len(k) != 4 \
                or mask not in (0, 1, 2):
            return None
        b, sq, h, d = q
        sk = k[1]
        pairs = kept_pairs(sq, sk, offset=sk - sq if mask == 2 else 0, right=0 if mask else None)
        return 2.0 * b * h * (pairs or 0) * (d + (v[3] if v and len(v) == 4 else d))
    if name in SAGE_OPS:
        at = SAGE_OPS[name]
        layout, causal = _scalar(s, at), _scalar(s, at + 1)
        q, k = _dims(s, 0), _dims(s, 1)
        if layout not in (0, 1) or causal not in (0, 1) or not q or not k or len(q) != 4 or len(k) != 4:
            return None
        # tensor_layout 0: (B, S, H, D); 1: (B, H, S, D). V is quantized and may be laid out
        # otherwise (transposed, padded): its head size is q's.
        b, h, sq, d = (q[0], q[2], q[1], q[3]) if layout == 0 else q
        sk = k[1] if layout == 0 else k[2]
        pairs = kept_pairs(sq, sk, offset=0, right=0 if causal else None)
        return 4.0 * b * h * (pairs or 0) * d
    return None


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
