"""Phases by role (``analysis.roles.assign_roles``): op sequences as real models write them, each
phase read by hand. The corpus (``tests/models``) checks the same rules on whole traces."""

from __future__ import annotations

import pytest

from tb_attn_plugin.analysis.roles import CORE, assign_roles


def _roles(ops: str, given: dict[int, str] | None = None) -> list[str | None]:
    names = [f"aten::{op}" for op in ops.split()]
    phases = [(given or {}).get(k) for k in range(len(names))]
    return assign_roles(names, phases)


def _compact(ops: str, roles: list[str | None]) -> list[tuple[str, str | None]]:
    return list(zip(ops.split(), roles, strict=True))


def test_llama_eager_rope_cache_and_repeat_kv() -> None:
    ops = ("linear view transpose linear view transpose linear view transpose unsqueeze unsqueeze mul slice slice neg "
           "cat mul add empty to cat cat unsqueeze expand reshape unsqueeze expand reshape transpose matmul mul add "
           "softmax to dropout matmul transpose contiguous reshape linear")
    roles = _roles(ops)
    assert roles[:9] == ["qkv_proj"] * 9
    assert roles[9:18] == ["rope"] * 9  # cos/sin unsqueeze, mul, rotate_half (slice slice neg cat), mul, add
    assert roles[18:20] == [None, None]  # a cache's bookkeeping: other
    assert roles[20:22] == ["kv_cache", "kv_cache"]  # cat not after neg: the cache's append
    assert roles[22:28] == ["kv_expand"] * 6
    assert _compact(ops, roles)[28:] == [
        ("transpose", "qk_matmul"), ("matmul", "qk_matmul"), ("mul", "scale"), ("add", "mask"), ("softmax", "softmax"),
        ("to", "softmax"), ("dropout", "dropout"), ("matmul", "av_matmul"), ("transpose", "out_proj"),
        ("contiguous", "out_proj"), ("reshape", "out_proj"), ("linear", "out_proj")]


def test_contiguous_copies_before_sdpa_are_the_cores() -> None:
    """Qwen2 with SDPA (a real H100 trace, issue 36): after RoPE and repeat_kv, q, k and v are made
    contiguous for the fused call. Those copies are the core's inputs, not RoPE (v has none)."""
    ops = ("linear view transpose linear view transpose linear view transpose unsqueeze unsqueeze mul slice slice neg "
           "cat mul add contiguous contiguous contiguous scaled_dot_product_attention transpose reshape linear")
    roles = _roles(ops)
    assert roles[9:18] == ["rope"] * 9
    assert _compact(ops, roles)[18:22] == [("contiguous", "sdpa")] * 3 + [("scaled_dot_product_attention", "sdpa")]
    # a contiguous not right before the core keeps its neighbours' phase
    assert _roles("linear view transpose contiguous neg cat mul scaled_dot_product_attention")[3] == "qkv_proj"


def test_scoped_phases_anchor_the_stage() -> None:
    """instrument() scopes the matmuls and softmax; the ops between are placed around them."""
    ops = "addmm split view transpose transpose matmul mul add softmax matmul transpose reshape addmm dropout"
    given = {0: "qkv_proj", 5: "qk_matmul", 8: "softmax", 9: "av_matmul", 12: "out_proj"}
    assert _roles(ops, given) == ["qkv_proj", "qkv_proj", "qkv_proj", "qkv_proj", "qk_matmul", "qk_matmul", "scale",
                                  "mask", "softmax", "av_matmul", "out_proj", "out_proj", "out_proj", "out_proj"]


def test_without_rotary_embeddings_a_mul_before_the_core_scales_q() -> None:
    assert _roles("linear mul bmm softmax bmm")[1] == "scale"  # F.multi_head_attention_forward scales q
    assert _roles("linear neg mul add bmm softmax bmm")[1:4] == ["rope", "rope", "rope"]


def test_masks_before_the_core() -> None:
    # nn.MultiheadAttention: a bool mask made float, then broadcast.
    assert _roles("zeros_like masked_fill_ view expand linear")[:4] == ["mask"] * 4
    # The builtin model's explicit mask: a slice of a buffer, inverted.
    assert _roles("alias bitwise_not scaled_dot_product_attention")[:2] == ["mask", "mask"]


def test_fused_block_ops_and_the_output_sublayer() -> None:
    ops = "t reshape mm _unsafe_view _transform_bias_rescale_qkv view transpose bmm _masked_softmax bmm permute addmm"
    assert _roles(ops) == ["qkv_proj"] * 6 + ["qk_matmul", "qk_matmul", "softmax", "av_matmul", "out_proj", "out_proj"]
    # BERT: dense, dropout, residual add, LayerNorm after the core are the output sublayer.
    assert _roles("linear scaled_dot_product_attention linear dropout add layer_norm")[2:] == ["out_proj"] * 4


def test_head_scopes_are_the_core() -> None:
    """Per-head mode: the heads' own scopes stand in for the core; the cat after them merges."""
    roles = _roles("linear view cat linear", {1: CORE})
    assert roles == ["qkv_proj", None, "out_proj", "out_proj"]


@pytest.mark.parametrize("ops", ["", "empty", "view view"])
def test_nothing_to_place(ops: str) -> None:
    assert _roles(ops) == [None] * len(ops.split())
