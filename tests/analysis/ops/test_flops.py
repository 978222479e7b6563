"""FLOPs from recorded ``Input Dims``, checked against formulas worked out by hand.

One multiply-add is 2 FLOPs. Unit tests call ``op_flops`` on hand-built shapes; the trace test
checks that only the outermost op of a nest with a formula counts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from tb_attn_plugin.analysis.ops.flops import causal_fraction, elem_bytes, is_causal, op_flops
from tb_attn_plugin.trace.events import OpShapes
from tb_attn_plugin.vocab.aten import SDPA_BACKWARD, SDPA_FORWARD

FLASH_CPU = "aten::_scaled_dot_product_flash_attention_for_cpu"


def shapes(*dims: list[Any], concrete: tuple[str, ...] = ()) -> OpShapes:
    return OpShapes(dims=tuple(dims), types=tuple("float" if d else "" for d in dims), concrete=concrete)


def attention(q: list[int], k: list[int], v: list[int], *, name: str = FLASH_CPU, causal: str = "False") -> float:
    """op_flops of a fused forward op, with q, k, v and is_causal where that op's schema puts them."""
    at = SDPA_FORWARD[name]
    concrete = [""] * (at + 3)
    concrete[at] = causal
    return op_flops(name, shapes(q, k, v, *([[]] * at), concrete=tuple(concrete)))


@pytest.mark.parametrize(
    ("name", "dims", "expected"),
    [
        ("aten::mm", [[16, 32], [32, 8]], 2 * 16 * 32 * 8),
        ("aten::addmm", [[8], [16, 32], [32, 8], [], []], 2 * 16 * 32 * 8),  # the bias add is not counted
        ("aten::bmm", [[4, 16, 32], [4, 32, 8]], 2 * 4 * 16 * 32 * 8),
        ("aten::baddbmm", [[4, 16, 8], [4, 16, 32], [4, 32, 8], [], []], 2 * 4 * 16 * 32 * 8),
        ("aten::matmul", [[2, 4, 16, 8], [2, 4, 8, 16]], 2 * (2 * 4) * 16 * 8 * 16),
        ("aten::matmul", [[2, 16, 32], [32, 8]], 2 * 2 * 16 * 32 * 8),  # weight broadcast over the batch
        ("aten::matmul", [[4, 1, 16, 8], [3, 8, 16]], 2 * (4 * 3) * 16 * 8 * 16),  # both batches broadcast
        ("aten::matmul", [[32], [32]], 2 * 32),  # dot product
        ("aten::matmul", [[16, 32], [32]], 2 * 16 * 32),  # matrix-vector
        ("aten::linear", [[2, 16, 32], [96, 32], [96]], 2 * (2 * 16) * 32 * 96),
        ("aten::linear", [[16, 32], [96, 32], []], 2 * 16 * 32 * 96),  # no bias
    ],
)
def test_matrix_formulas(name: str, dims: list[list[int]], expected: int) -> None:
    assert op_flops(name, shapes(*dims)) == expected


@pytest.mark.parametrize(
    ("name", "op_shapes"),
    [
        ("aten::softmax", shapes([2, 4, 16, 16], [], [])),  # no formula
        ("aten::scaled_dot_product_attention", shapes([2, 4, 16, 8], [2, 4, 16, 8], [2, 4, 16, 8])),  # dispatcher
        ("aten::mm", None),  # shapes not recorded
        ("aten::mm", shapes([16, 32])),  # an input missing
        ("aten::mm", shapes(["16", 32], [32, 8])),  # not integers
        ("aten::mm", shapes([True, 32], [32, 8])),
        ("aten::mm", shapes([], [])),  # scalars
        ("aten::linear", shapes([2, 16, 32], [4, 96, 32], [96])),  # a weight is 2-D
        (FLASH_CPU, shapes([8], [8], [8])),  # not (..., S, D)
    ],
)
def test_no_formula_or_unusable_shapes_count_zero(name: str, op_shapes: OpShapes | None) -> None:
    assert op_flops(name, op_shapes) == 0.0


@pytest.mark.parametrize("name", sorted(SDPA_FORWARD))
@pytest.mark.parametrize("s", [1, 7, 16, 128])
def test_fused_attention_forward(name: str, s: int) -> None:
    b, h, d = 2, 4, 8
    q = [b, h, s, d]
    full = 2 * b * h * s * s * (d + d)  # q·kᵀ and probs·v
    assert attention(q, q, q, name=name, causal="False") == full
    assert attention(q, q, q, name=name, causal="True") == pytest.approx(full * (s + 1) / (2 * s))


def test_value_head_dim_may_differ() -> None:
    q, k, v = [1, 2, 16, 8], [1, 2, 32, 8], [1, 2, 32, 24]
    assert attention(q, k, v) == 2 * 2 * 16 * 32 * (8 + 24)


def test_grouped_query_attention_costs_the_same_as_full() -> None:
    q, kv = [2, 8, 64, 16], [2, 2, 64, 16]
    assert attention(q, kv, kv) == attention(q, q, q) == 2 * 2 * 8 * 64 * 64 * 32
    assert attention(q, kv, kv, causal="True") == attention(q, q, q, causal="True")


@pytest.mark.parametrize("name", sorted(SDPA_BACKWARD))
@pytest.mark.parametrize("causal", ["True", "False"])
def test_fused_attention_backward_is_2_5_forward(name: str, causal: str) -> None:
    qi, ci = SDPA_BACKWARD[name]
    q = [2, 4, 16, 8]
    dims: list[list[int]] = [[] for _ in range(max(qi + 3, ci) + 1)]
    dims[0] = q  # grad_out
    dims[qi:qi + 3] = [q, q, q]
    concrete = [""] * len(dims)
    concrete[ci] = causal
    forward = attention(q, q, q, causal=causal)
    assert forward > 0
    assert op_flops(name, shapes(*dims, concrete=tuple(concrete))) == pytest.approx(2.5 * forward)


@pytest.mark.parametrize(
    ("concrete", "expected"),
    [(("", "", "", "0.", "True"), True), (("", "", "", "0.", " true "), True), (("", "", "", "0.", "False"), False),
     (("", "", "", "0.", ""), False), (("", "", ""), False), ((), False)],
)
def test_is_causal_reads_concrete_inputs(concrete: tuple[str, ...], expected: bool) -> None:
    assert is_causal(shapes(concrete=concrete), 4) is expected


@pytest.mark.parametrize("s", [1, 2, 3, 16, 1000, 4097, 8192])
def test_causal_fraction_square(s: int) -> None:
    assert causal_fraction(s, s) == pytest.approx((s + 1) / (2 * s))


@pytest.mark.parametrize(("sq", "sk"), [(3, 5), (5, 3), (16, 64), (64, 16), (1, 9)])
def test_causal_fraction_top_left_aligned(sq: int, sk: int) -> None:
    kept = np.tril(np.ones((sq, sk), dtype=bool)).sum()  # query i sees keys 0..i, as PyTorch's is_causal
    assert causal_fraction(sq, sk) == pytest.approx(kept / (sq * sk))


@pytest.mark.parametrize(("sq", "sk"), [(5000, 4500), (5000, 6000), (4097, 4097)])
def test_causal_fraction_closed_form_for_long_sequences(sq: int, sk: int) -> None:
    kept = int(np.minimum(np.arange(1, sq + 1), sk).sum())
    assert causal_fraction(sq, sk) == pytest.approx(kept / (sq * sk))


def test_causal_fraction_of_nothing() -> None:
    assert causal_fraction(0, 16) == causal_fraction(16, 0) == 0.0


@pytest.mark.parametrize(
    ("dtype", "size"),
    [("float", 4), ("double", 8), ("c10::Half", 2), ("c10::BFloat16", 2), ("long int", 8), ("int", 4),
     ("bool", 1), ("unsigned char", 1), ("c10::complex<float>", 8), ("c10::Float8_e4m3fn", 1), ("short int", 2)],
)
def test_elem_bytes(dtype: str, size: int) -> None:
    assert elem_bytes(dtype) == size


def test_elem_bytes_complex_double() -> None:
    assert elem_bytes("c10::complex<double>") == 16


def test_flops_count_at_the_outermost_formula_op(
    rows_of: Callable[[str], dict[str, Any]], golden: Callable[[str, dict[str, Any]], None],
    row: Callable[..., dict[str, Any]],
) -> None:
    rows = rows_of("flops")
    golden("flops", rows)
    ev = rows["events"]
    linear = 2 * (2 * 16) * 32 * 96
    assert row(ev, "aten::linear")["flops"] == linear
    assert row(ev, "aten::addmm")["flops"] == 0.0  # inside aten::linear
    matmul = 2 * (2 * 4) * 16 * 8 * 16
    assert row(ev, "aten::matmul")["flops"] == matmul
    assert row(ev, "aten::bmm")["flops"] == 0.0  # inside aten::matmul
    full = 2 * 2 * 4 * 16 * 16 * (8 + 8)
    causal = full * 17 / 32  # (S + 1) / (2 S) with S = 16
    assert row(ev, "aten::scaled_dot_product_attention")["flops"] == 0.0
    by_layer = {r["layer"]: r["flops"] for r in ev if r["name"] == FLASH_CPU}
    assert by_layer == {1: causal, 2: full, 3: full}  # L3 is grouped-query: k and v have 2 heads of 4
    backward = row(ev, FLASH_CPU + "_backward")
    assert (backward["flops"], backward["layer"], backward["backward"]) == (2.5 * causal, 1, True)
    assert row(ev, "aten::mm")["flops"] == 2 * 16 * 32 * 8
    assert row(ev, "aten::baddbmm")["flops"] == 2 * 4 * 16 * 8 * 16
    total = linear + matmul + causal + 2 * full + 2.5 * causal + 2 * 16 * 32 * 8 + 2 * 4 * 16 * 8 * 16
    assert sum(r["flops"] for r in ev) == total
