"""The ops whose shapes the decoder keeps: every op whose shapes the analysis reads, and no other
frequent op."""

from __future__ import annotations

from tb_attn_plugin.vocab import aten, libraries, serving
from tb_attn_plugin.vocab.shape_ops import SHAPE_OPS, keeps_shapes


def test_the_decoder_keeps_the_shapes_the_analysis_reads() -> None:
    read = (aten.SDPA_OPS | set(aten.SDPA_FORWARD) | set(aten.SDPA_BACKWARD) | set(aten.MATMUL_ARGS)
            | {aten.LINEAR_OP} | set(aten.INT_MATMUL_ARGS)
            | aten.COPY_OPS | aten.DTYPE_CONVERT_OPS | {aten.FLASH_FORWARD_OP, aten.EFFICIENT_FORWARD_OP}
            | aten.SOFTMAX_OPS | aten.MASKED_FILL_OPS | aten.KERNEL_BACKWARD_OPS | aten.FUSED_BLOCK_OPS
            | aten.KV_EXPAND_OPS  # K and V before grouped-query expansion (analysis/measures/generation.py)
            | aten.ELEMENTWISE_OPS | aten.NORM_OPS | {aten.NATIVE_DROPOUT_OP}  # bytes (analysis/measures/traffic.py)
            | {aten.EMBEDDING_OP}  # a relative position bias's (Sq, Sk) bucket index (analysis/findings/op_findings.py)
            | libraries.LIBRARY_SHAPE_OPS  # libraries' cores: FLOPs (analysis/ops/flops.py library_flops)
            | serving.SERVING_SHAPE_OPS)  # serving cores' q and KV writes' cache (analysis/attribution/batch.py)
    assert read == SHAPE_OPS
    # Element-wise ops whose bytes the roofline needs are kept (their cost: bench/README.md, "Bytes
    # model"); other frequent ops stay out: allocations, activations, reductions.
    assert not {"aten::empty", "aten::gelu", "aten::sum", "aten::view", "aten::cat"} & SHAPE_OPS


def test_sglang_profiler_ranges_are_told_without_their_counter() -> None:
    (core,) = serving.SGLANG_AITER_DECODE_OPS
    assert keeps_shapes(aten.MM_OP) and keeps_shapes(core)
    assert keeps_shapes(f"{core}_17") and not keeps_shapes(f"{core}_x")
    assert not keeps_shapes(f"{aten.MM_OP}_17") and not keeps_shapes("aten::gelu")
