"""torch.compile's generated Triton kernels, read by the ATen ops they were generated from.

Inside a compiled region there are no module events and few ATen ops: the GEMMs stay extern
(``aten::mm``, ``aten::addmm``) and the SDPA call stays an op, but what lies between them (a
projection's bias, a QK-norm, rotary embeddings, the head split, joint attention's concatenation
of text and image) runs as Triton kernels that Inductor generated. Their names say what they were
generated from (``kernels.INDUCTOR_KERNEL_PREFIX``): ``triton_per_fused__to_copy_add_addmm_mean_mul_
pow_rsqrt_transpose_view_8`` is a bias add and an RMSNorm; ``triton_poi_fused__scaled_dot_product_
flash_attention_cat_transpose_view_10`` joins and lays out the SDPA call's inputs.

``representative`` reads such a name as one op the role and extent rules already know, or as None
where an origin is not one this module knows (an activation, a softmax, a custom op such as vLLM's
``moe_forward``): such a kernel is the model's other work, and a block's walk stops at it.

- a template kernel over a GEMM: ``aten::linear`` (a projection, its epilogue fused);
- a norm (whole, or ``mean`` with ``rsqrt``): ``kernels.INDUCTOR_NORM_OP``;
- rotary embeddings (``neg``, ``cos``, ``sin``...): ``aten::neg``;
- only layout, copies and conversions (with the SDPA op they feed or drain):
  ``kernels.INDUCTOR_LAYOUT_OP``, a layout op;
- element-wise arithmetic besides: ``kernels.INDUCTOR_EPILOGUE_OP``, a projection's prologue or
  epilogue (bias, scale, residual).
"""

from __future__ import annotations

import re
from functools import lru_cache

from tb_attn_plugin.vocab.aten import LINEAR_OP, NEG_OP
from tb_attn_plugin.vocab.kernels import (
    INDUCTOR_ARITH_ORIGINS,
    INDUCTOR_EPILOGUE_OP,
    INDUCTOR_GEMM_ORIGINS,
    INDUCTOR_KERNEL_PREFIX,
    INDUCTOR_LAYOUT_OP,
    INDUCTOR_LAYOUT_ORIGINS,
    INDUCTOR_NORM_OP,
    INDUCTOR_NORM_ORIGINS,
    INDUCTOR_NORM_PIECE_ORIGINS,
    INDUCTOR_RMS_ORIGINS,
    INDUCTOR_ROPE_ORIGINS,
    INDUCTOR_TEMPLATE,
)

__all__ = ["origins", "representative"]

_NAME = re.compile(r"^triton_(?P<kind>[a-z]{3})_fused_(?P<origins>.+)_\d+$")
_KNOWN = (INDUCTOR_GEMM_ORIGINS | INDUCTOR_LAYOUT_ORIGINS | INDUCTOR_NORM_ORIGINS | INDUCTOR_NORM_PIECE_ORIGINS
          | INDUCTOR_ARITH_ORIGINS | INDUCTOR_ROPE_ORIGINS)
# Longest first: at each place the longest origin that ends at an underscore is tried first.
_BY_LENGTH = tuple(sorted(_KNOWN, key=len, reverse=True))


def origins(name: str) -> tuple[str, frozenset[str]] | None:
    """A generated kernel's category (``poi``, ``red``, ``per``, ``tem``...) and origins, or None
    for another name, or one with an origin outside ``_KNOWN``."""
    if not name.startswith(INDUCTOR_KERNEL_PREFIX):
        return None
    m = _NAME.match(name)
    if m is None:
        return None
    found = _split(m.group("origins"))
    return None if found is None else (m.group("kind"), frozenset(found))


@lru_cache(maxsize=4096)
def _split(text: str) -> tuple[str, ...] | None:
    """``text`` as known origins joined by "_", or None. Origins may hold underscores themselves
    (``_to_copy``, ``native_layer_norm``), so every split is tried, longest origin first."""
    if not text:
        return ()
    for origin in _BY_LENGTH:
        if text.startswith(origin) and (len(text) == len(origin) or text[len(origin)] == "_"):
            rest = _split(text[len(origin) + 1:]) if len(text) > len(origin) else ()
            if rest is not None:
                return (origin, *rest)
    return None


@lru_cache(maxsize=4096)
def representative(name: str) -> str | None:
    """The op a generated kernel is read as (module docstring), or None."""
    read = origins(name)
    if read is None:
        return None
    kind, ops = read
    if kind == INDUCTOR_TEMPLATE:
        return LINEAR_OP if ops & INDUCTOR_GEMM_ORIGINS else None
    if ops & INDUCTOR_NORM_ORIGINS or INDUCTOR_RMS_ORIGINS <= ops:
        return INDUCTOR_NORM_OP
    if ops & INDUCTOR_ROPE_ORIGINS:
        return NEG_OP
    if ops <= INDUCTOR_LAYOUT_ORIGINS:
        return INDUCTOR_LAYOUT_OP
    if ops <= INDUCTOR_LAYOUT_ORIGINS | INDUCTOR_ARITH_ORIGINS:
        return INDUCTOR_EPILOGUE_OP
    return None
