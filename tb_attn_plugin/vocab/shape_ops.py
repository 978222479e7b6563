"""The ops whose recorded inputs (shapes, types, concrete values) the decoder keeps: the union of
the ops whose shapes the analysis reads, in every family (``aten``, ``libraries``, ``serving``;
``tests/vocab/test_shape_ops.py`` checks that it holds every one), and the rule that tells them
by name.
"""

from __future__ import annotations

import re

from tb_attn_plugin.vocab.aten import (
    COPY_OPS,
    DTYPE_CONVERT_OPS,
    EFFICIENT_FORWARD_OP,
    ELEMENTWISE_OPS,
    EMBEDDING_OP,
    FLASH_FORWARD_OP,
    FUSED_BLOCK_OPS,
    INT_MATMUL_ARGS,
    KERNEL_BACKWARD_OPS,
    KV_EXPAND_OPS,
    LINEAR_OP,
    MASKED_FILL_OPS,
    MATMUL_ARGS,
    NATIVE_DROPOUT_OP,
    NORM_OPS,
    SDPA_BACKWARD,
    SDPA_OPS,
    SOFTMAX_OPS,
)
from tb_attn_plugin.vocab.libraries import LIBRARY_SHAPE_OPS
from tb_attn_plugin.vocab.serving import SERVING_SHAPE_OPS, SGLANG_PROFILER_COUNTER, SGLANG_PROFILER_PREFIX

__all__ = ["SHAPE_OPS", "keeps_shapes"]

#: Ops whose ``Input Dims`` / ``Input type`` / ``Concrete Inputs`` are read (FLOPs, bytes moved,
#: S×S score sizes, dtypes, copies, a serving core's q and its KV cache's element type). The
#: decoder skips the shapes of every other op to save memory and time; the element-wise ops' shapes
#: cost about N% more decoding time on a trace of a whole model (bench/README.md, "Bytes model").
SHAPE_OPS: frozenset[str] = frozenset(
    {*MATMUL_ARGS, *INT_MATMUL_ARGS, LINEAR_OP, *SOFTMAX_OPS, *MASKED_FILL_OPS, *SDPA_OPS, FLASH_FORWARD_OP,
     EFFICIENT_FORWARD_OP, *SDPA_BACKWARD, *KERNEL_BACKWARD_OPS, *COPY_OPS, *DTYPE_CONVERT_OPS, *FUSED_BLOCK_OPS,
     *KV_EXPAND_OPS, *ELEMENTWISE_OPS, NATIVE_DROPOUT_OP, *NORM_OPS, EMBEDDING_OP, *LIBRARY_SHAPE_OPS,
     *SERVING_SHAPE_OPS})

_COUNTER = re.compile(SGLANG_PROFILER_COUNTER)


def keeps_shapes(name: str) -> bool:
    """Whether op ``name``'s shapes are read (``SHAPE_OPS``; SGLang's ranges without their counter)."""
    return name in SHAPE_OPS or (name.startswith(SGLANG_PROFILER_PREFIX) and _COUNTER.sub("", name) in SHAPE_OPS)
