"""The bytes model (analysis/measures/traffic.py) against hand computations: one op at a time on small
shapes, then every phase of the built-in transformer's implementations as our runner traces them."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import TINY
from tracetools import trace_files

from tb_attn_plugin.analysis.measures.traffic import op_bytes, peak_dtype
from tb_attn_plugin.analysis.summary import summarize
from tb_attn_plugin.engine.loader import load_events
from tb_attn_plugin.trace.events import OpShapes
from tb_attn_plugin.types.schema import LayerStats, PhaseStats

F32, BF16 = 4, 2


def _shapes(*inputs: tuple[list[int] | None, str], concrete: tuple[str, ...] = ()) -> OpShapes:
    return OpShapes(dims=tuple([] if d is None else d for d, _ in inputs), types=tuple(t for _, t in inputs),
                    concrete=concrete)


@pytest.mark.parametrize(("name", "shapes", "expected"), [
    # A[M,K] + B[K,N] + out[M,N]
    ("aten::mm", _shapes(([8, 4], "float"), ([4, 16], "float")), (32 + 64 + 128) * F32),
    # bias[N] + A + B + out
    ("aten::addmm", _shapes(([16], "float"), ([8, 4], "float"), ([4, 16], "float"), (None, "Scalar")),
     (16 + 32 + 64 + 128) * F32),
    # batched: b·(M·K + K·N + M·N)
    ("aten::bmm", _shapes(([3, 8, 4], "c10::BFloat16"), ([3, 4, 8], "c10::BFloat16")), 3 * (32 + 32 + 64) * BF16),
    # broadcast batch: A[2,1,M,K] @ B[1,3,K,N] writes a [2,3,M,N] output
    ("aten::matmul", _shapes(([2, 1, 4, 5], "float"), ([1, 3, 5, 6], "float")), (40 + 90 + 2 * 3 * 24) * F32),
    # X[B,T,K] + W[N,K] + b[N] + out[B,T,N]
    ("aten::linear", _shapes(([2, 5, 8], "float"), ([12, 8], "float"), ([12], "float")),
     (80 + 96 + 12 + 120) * F32),
    # int8 operands, an int32 output
    ("aten::_int_mm", _shapes(([16, 32], "signed char"), ([32, 8], "signed char")), 16 * 32 + 32 * 8 + 16 * 8 * 4),
    # Q + K + V + O, each [B,H,S,D]; no S×S term
    ("aten::_scaled_dot_product_flash_attention",
     _shapes(([1, 8, 141, 64], "c10::BFloat16"), ([1, 8, 141, 64], "c10::BFloat16"),
             ([1, 8, 141, 64], "c10::BFloat16"), (None, "Scalar"), (None, "Scalar")), 4 * 8 * 141 * 64 * BF16),
    # grouped-query: K and V with 2 heads of 8; O has Q's heads and V's head size
    ("aten::_scaled_dot_product_flash_attention_for_cpu",
     _shapes(([2, 8, 16, 4], "float"), ([2, 2, 16, 4], "float"), ([2, 2, 16, 4], "float")),
     (2 * 8 * 16 * 4 * 2 + 2 * 2 * 16 * 4 * 2) * F32),
    # the mask is read too: Q, K, V, O and a bool [S,S] bias
    ("aten::_scaled_dot_product_efficient_attention",
     _shapes(([1, 2, 16, 4], "float"), ([1, 2, 16, 4], "float"), ([1, 2, 16, 4], "float"), ([16, 16], "bool")),
     4 * 2 * 16 * 4 * F32 + 16 * 16),
    # the scores in and out
    ("aten::_softmax", _shapes(([2, 4, 16, 16], "float"), (None, "Scalar"), (None, "Scalar")), 2 * 2048 * F32),
    # in place: the scores read and written, the broadcast mask read once
    ("aten::masked_fill_", _shapes(([2, 4, 16, 16], "float"), ([16, 16], "bool"), (None, "Scalar")),
     2 * 2048 * F32 + 256),
    # scaling by a Python scalar: the scores in and out
    ("aten::mul", _shapes(([2, 4, 16, 16], "float"), (None, "double")), 2 * 2048 * F32),
    # adding a float mask broadcast over batch and heads
    ("aten::add_", _shapes(([2, 4, 16, 16], "float"), ([16, 16], "float"), (None, "Scalar")),
     (2048 + 256 + 2048) * F32),
    # where(cond, scalar, float tensor): the output is float, not the condition's bool
    ("aten::where", _shapes(([16, 16], "bool"), (None, "Scalar"), (None, "float")), 256 + 256 * F32),
    ("aten::clone", _shapes(([2, 4, 16, 16], "float"), (None, "Scalar")), 2 * 2048 * F32),
    # a conversion: reads bf16, writes fp32 (copy_(dst, src))
    ("aten::copy_", _shapes(([64, 32], "float"), ([64, 32], "c10::BFloat16"), (None, "Scalar")),
     64 * 32 * (F32 + BF16)),
    # the input, the output and a bool mask
    ("aten::native_dropout", _shapes(([2, 4, 16, 16], "float"), (None, "double"), (None, "bool")),
     2 * 2048 * F32 + 2048),
    # x, weight, bias, output
    ("aten::layer_norm", _shapes(([2, 5, 8], "float"), (None, "ScalarList"), ([8], "float"), ([8], "float")),
     (80 + 8 + 8 + 80) * F32),
    ("aten::rms_norm", _shapes(([2, 5, 8], "float"), (None, "ScalarList"), ([8], "float")), (80 + 8 + 80) * F32),
])
def test_op_bytes_equal_a_hand_count(name: str, shapes: OpShapes, expected: int) -> None:
    assert op_bytes(name, shapes) == expected


def test_ops_without_a_formula_or_believable_shapes_have_none() -> None:
    assert op_bytes("aten::cat", _shapes(([2, 3], "float"),)) is None
    assert op_bytes("aten::mm", _shapes(([2, 3], "float"),)) is None  # an operand missing
    assert op_bytes("aten::mm", _shapes(([1 << 30, 1 << 30], "float"), ([1 << 30, 2], "float"))) is None  # > 1 PiB
    assert op_bytes("aten::softmax", None) is None


def test_peak_classes_of_profiler_dtypes() -> None:
    assert [peak_dtype(t) for t in ("float", "c10::BFloat16", "c10::Half", "c10::Float8_e4m3fn", "signed char",
                                    "double", "bool")] == ["fp32", "bf16", "fp16", "fp8", "int8", "fp64", None]


# -- the built-in transformer's phases, as the runner traces them (TINY: fp32, causal, training) -----

B, T, C, H = TINY.batch, TINY.seq, TINY.d_model, TINY.heads
D = C // H
X = B * T * C * F32  # one activation, and one of q, k, v, o
SXS = B * H * T * T * F32  # one score tensor
MASK = T * T  # the causal mask, bool
QKV = X + 3 * C * C * F32 + 3 * C * F32 + 3 * X  # x, W_qkv, b_qkv, the fused projection's output
OUT = X + C * C * F32 + C * F32 + X  # o, W_o, b_o, the output
MERGE = 2 * X  # merging heads: the transposed output made contiguous (a copy)
QK = 2 * X + SXS  # q and kᵀ in, the scores out
AV = SXS + X + X  # probabilities and v in, o out
#: matmul's reshape of q, kᵀ or v (transposed views of the fused projection's output) to
#: (B·H, T, D) for bmm copies it when B > 1: the operand read and written once more.
COPY = 2 * X

NAIVE = {"qkv_proj": QKV, "qk_matmul": QK + 2 * COPY, "scale": 2 * SXS, "mask": 2 * SXS + 2 * SXS + MASK,
         "softmax": 2 * SXS, "av_matmul": AV + COPY, "out_proj": MERGE + OUT}
EXPECTED = {
    "naive": NAIVE,
    # masked_fill_ in place: no clone of the scores
    "naive-inplace": {**NAIVE, "mask": 2 * SXS + MASK},
    # Q, K, V and O once; the output is laid out for the projection already
    "sdpa-flash": {"qkv_proj": QKV, "sdpa": 4 * X, "out_proj": OUT},
    # the decomposition: q and k scaled (in and out each), the causal mask built (bool in, float
    # out), q·kᵀ with q and kᵀ copied for bmm, the mask added in place, the safe softmax, probs·v
    # with v copied
    "sdpa-math": {"qkv_proj": QKV, "sdpa": 2 * X + 2 * X + (MASK + MASK * F32) + (QK + 2 * COPY)
                  + (2 * SXS + MASK * F32) + 2 * SXS + (AV + COPY), "out_proj": MERGE + OUT},
}


def _phase(layer: LayerStats, name: str) -> PhaseStats:
    return next(p for p in layer.phases if p.phase == name)


@pytest.mark.parametrize("run", sorted(EXPECTED))
def test_each_phase_moves_what_a_hand_count_says(builtin_logdir: Path, run: str) -> None:
    (path,) = trace_files(builtin_logdir / run)
    s = summarize(load_events(str(path)), file=path.name)
    for layer in s.layers:
        got = {p.phase: p.bytes for p in layer.phases if p.bytes}
        assert got == EXPECTED[run], (run, layer.layer)
        assert all(p.unmodeled_ops == 0 for p in layer.phases), [(p.phase, p.unmodeled_ops) for p in layer.phases]
        assert layer.bytes == sum(EXPECTED[run].values())
        # FLOPs per byte: the naive core's scores make it far less intense than the fused kernel
        qkv = _phase(layer, "qkv_proj")
        assert qkv.flops / qkv.bytes == pytest.approx(2 * B * T * C * 3 * C / QKV)
        assert qkv.dtype == "fp32"
