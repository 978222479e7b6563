"""Find materialized attention scores: the memory events of one layer that allocate a
(B, H, Sq, Sk) score or probability tensor, the S×S bytes per head that grow quadratically
with sequence length. ``summary`` reports them as ``sxs_bytes`` and ``sxs_allocs``.
"""

from __future__ import annotations

import math

import numpy as np

from tb_attn_plugin.analysis.attribute import Attribution
from tb_attn_plugin.analysis.flops import MAX_TENSOR_BYTES, elem_bytes
from tb_attn_plugin.ops import (
    GEMM_OPS,
    MATMUL_INPUT_COPY_OPS,
    MATMUL_OPS,
    MATMUL_WRAPPER_OPS,
    SDPA_OPS,
    SOFTMAX_OPS,
)
from tb_attn_plugin.scopes import PHASES
from tb_attn_plugin.trace.events import Events

__all__ = ["OTHER", "SCORE_PHASES", "score_allocs", "sxs_sizes"]

#: The phase of a layer's events that no phase scope encloses.
OTHER = "other"
#: Phases whose outputs are (B, H, Sq, Sk) scores or probabilities, where S×S allocations mean
#: materialized scores (elsewhere an allocation of the same size is a coincidence).
SCORE_PHASES = frozenset({"qk_matmul", "scale", "mask", "softmax", "dropout", "sdpa", OTHER})
_QK_CODES = (PHASES.index("qk_matmul"), PHASES.index("sdpa"))
_MIN_SXS_ELEMS = 256  # smaller "score" tensors are too common to mean anything


def sxs_sizes(ev: Events, a: Attribution, fwd: np.ndarray) -> set[int]:
    """Byte sizes of a (B, H, Sq, Sk) score tensor in a layer, from the shapes of its forward
    events ``fwd``."""
    sizes: set[int] = set()
    with_shape = fwd[ev.shape[fwd] >= 0]
    for i in with_shape[a.shape_ok[ev.shape[with_shape]]].tolist():
        name = ev.names[ev.name[i]]
        shapes = ev.shapes[ev.shape[i]]
        dims = shapes.dims
        elem = elem_bytes(shapes.types[0]) if shapes.types else 4
        count = 0
        # Python integers: plausible inputs can still claim a score tensor past int64.
        if name in SDPA_OPS and len(dims) >= 2 and len(dims[0]) >= 3 and len(dims[1]) >= 2:
            q, k = dims[0], dims[1]
            count = math.prod(q[:-1]) * k[-2]
        elif name in SOFTMAX_OPS and dims and len(dims[0]) >= 3:
            count = math.prod(dims[0])
        elif name in MATMUL_OPS and a.phase[i] in _QK_CODES and len(dims) >= 2 and len(dims[0]) >= 3 \
                and len(dims[1]) >= 2:
            count = math.prod(dims[0][:-1]) * dims[1][-1]
        if count >= _MIN_SXS_ELEMS and count * max(elem, 4) <= MAX_TENSOR_BYTES:
            sizes.update({count * elem, count * 4})
    return sizes


def score_allocs(ev: Events, a: Attribution, mem_idx: np.ndarray, sizes: set[int]) -> np.ndarray:
    """Which of these memory events allocate a score tensor: the size of B·H·Sq·Sk elements,
    and not a copy that a matmul makes of its inputs (q or kᵀ can have the same size when
    the head dimension equals the key length)."""
    out = np.zeros(mem_idx.size, np.bool_)
    if not sizes:
        return out
    nbytes = ev.mem_bytes[mem_idx]
    candidates = np.flatnonzero(np.isin(nbytes, list(sizes)) & (nbytes > 0))
    for k in candidates.tolist():
        out[k] = not _input_copy(ev, a, int(a.mem_event[mem_idx[k]]))
    return out


def _input_copy(ev: Events, a: Attribution, i: int) -> bool:
    copied = False
    while i >= 0 and not a.is_scope[i]:
        name = ev.names[ev.name[i]]
        if name in MATMUL_INPUT_COPY_OPS:
            copied = True
        elif name in GEMM_OPS:  # the GEMM's own output (no matmul wrapper calls addmm: linear does)
            return False
        elif name in MATMUL_WRAPPER_OPS:
            return copied
        i = int(a.parent[i])
    return False
