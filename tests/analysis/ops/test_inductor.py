"""Inductor's generated kernels read by their origins, and joint attention's two streams (issue 33).

The kernel names below are the ones the SD3.5 and vLLM production traces hold
(``shared/production-traces``); the naming rule is PyTorch's (``torch/_inductor/codegen/triton.py``:
``triton_<category[:3]>_fused_<sorted original ATen op names>_<n>``).
"""

from __future__ import annotations

import json

import pytest
from test_production_compiled import _x

from tb_attn_plugin.analysis.attribution.analyze import analyze
from tb_attn_plugin.analysis.ops.inductor import origins, representative
from tb_attn_plugin.analysis.summary import summarize_trace
from tb_attn_plugin.trace.decode import decode_bytes
from tb_attn_plugin.types.schema import WorkerSummary
from tb_attn_plugin.vocab.aten import LINEAR_OP, NEG_OP
from tb_attn_plugin.vocab.kernels import INDUCTOR_EPILOGUE_OP, INDUCTOR_LAYOUT_OP, INDUCTOR_NORM_OP


@pytest.mark.parametrize(("name", "kind", "ops"), [
    ("triton_per_fused__to_copy_add_addmm_mean_mul_pow_rsqrt_transpose_view_8", "per",
     {"_to_copy", "add", "addmm", "mean", "mul", "pow", "rsqrt", "transpose", "view"}),
    ("triton_poi_fused__scaled_dot_product_flash_attention_cat_transpose_view_10", "poi",
     {"_scaled_dot_product_flash_attention", "cat", "transpose", "view"}),
    ("triton_red_fused__unsafe_view_add_addmm_mul_native_layer_norm_split_unsqueeze_19", "red",
     {"_unsafe_view", "add", "addmm", "mul", "native_layer_norm", "split", "unsqueeze"}),
    ("triton_poi_fused__to_copy_1", "poi", {"_to_copy"}),
    ("triton_tem_fused_addmm_0", "tem", {"addmm"}),
])
def test_origins_are_split_at_every_known_name(name: str, kind: str, ops: set[str]) -> None:
    assert origins(name) == (kind, frozenset(ops))


@pytest.mark.parametrize("name", [
    "triton_poi_fused_addmm_gelu_view_15",  # an activation: the MLP's
    "triton_poi_fused_constant_pad_nd_moe_forward_0",  # vLLM's MoE custom op
    "triton_red_fused__softmax_0",  # a softmax may be a core's own
    "flash_fwd_kernel", "aten::mm", "triton_poi_fused_", "triton_kernel_abc",
])
def test_a_name_with_an_unknown_origin_is_not_read(name: str) -> None:
    assert representative(name) is None


@pytest.mark.parametrize(("name", "read"), [
    ("triton_per_fused__to_copy_add_addmm_mean_mul_pow_rsqrt_transpose_view_8", INDUCTOR_NORM_OP),  # bias + RMSNorm
    ("triton_red_fused__unsafe_view_add_addmm_mul_native_layer_norm_split_unsqueeze_19", INDUCTOR_NORM_OP),
    ("triton_poi_fused__scaled_dot_product_flash_attention_cat_transpose_view_10", INDUCTOR_LAYOUT_OP),
    ("triton_poi_fused__unsafe_view_clone_slice_transpose_11", INDUCTOR_LAYOUT_OP),
    ("triton_poi_fused__to_copy_1", INDUCTOR_LAYOUT_OP),
    ("triton_poi_fused_add_cat_mul_neg_slice_2", NEG_OP),  # rotate_half
    ("triton_poi_fused_add_addmm_view_3", INDUCTOR_EPILOGUE_OP),  # a bias add
    ("triton_tem_fused_addmm_0", LINEAR_OP),  # a GEMM template: a projection
    ("triton_tem_fused_bmm_0", None),  # a batched GEMM may be q·kᵀ
])
def test_a_kernel_is_read_as_the_op_it_stands_for(name: str, read: str | None) -> None:
    assert representative(name) == read


# -- joint attention, eager: diffusers' JointAttnProcessor2_0 order ------------------------------

B, H, D, IMG, TXT = 2, 4, 16, 64, 8
HID = H * D


def _joint(out_text: bool = True, text_rows: int = TXT) -> WorkerSummary:
    """Image q, k, v projections, text q, k, v projections, the concatenation, SDPA over both, the
    split, the image's output projection, a dropout, the text's output projection (when
    ``out_text``), then the feed-forward's projection."""
    img, txt = [B, IMG, HID], [B, text_rows, HID]
    w = [[HID, HID], [HID]]
    events, t = [_x("ProfilerStep#1", 0, 2000, "user_annotation")], 10.0
    for dims in (img, img, img, txt, txt, txt):
        events.append(_x("aten::linear", t, 20, dims=[dims, *w]))
        t += 30
    events += [_x("aten::cat", t, 10), _x("aten::scaled_dot_product_attention", t + 20, 50,
                                           dims=[[B, H, IMG + TXT, D]] * 3)]
    t += 80
    events += [_x("aten::slice", t, 5), _x("aten::slice", t + 10, 5)]
    t += 20
    events.append(_x("aten::linear", t, 20, dims=[img, *w]))
    events.append(_x("aten::dropout", t + 30, 5))
    t += 40
    if out_text:
        events.append(_x("aten::linear", t, 20, dims=[txt, *w]))
        t += 30
    events.append(_x("aten::linear", t, 20, dims=[img, [4 * HID, HID], [4 * HID]]))
    return summarize_trace(analyze(decode_bytes(json.dumps({"traceEvents": events}).encode())),
                           file="joint.json", worker="w", span=None)


def _flops(s: WorkerSummary) -> dict[str, float]:
    (layer,) = s.layers
    return {p.phase: p.flops for p in layer.phases}


def test_joint_attention_is_one_block_with_both_streams() -> None:
    """The text stream's projections are the block's: their rows and the image's add up to the
    core's B·S. Both output projections are, and the feed-forward's after them is not."""
    flops = _flops(_joint())
    rows = B * (IMG + TXT)
    assert flops["qkv_proj"] == 3 * 2 * rows * HID * HID
    assert flops["out_proj"] == 2 * rows * HID * HID


def test_a_stream_that_ends_before_the_output_has_one_output_projection() -> None:
    """SD3's last block (``context_pre_only``): no text output projection; the next projection
    (the feed-forward's, 4x wider, of the image's rows) is not taken for it."""
    flops = _flops(_joint(out_text=False))
    assert flops["qkv_proj"] == 3 * 2 * B * (IMG + TXT) * HID * HID
    assert flops["out_proj"] == 2 * B * IMG * HID * HID


def test_a_second_input_whose_rows_do_not_add_up_is_another_sublayers() -> None:
    """Rows that do not make up the core's tokens together: walking back from the core, the text
    projections (the nearest) are the block's and the image's are another sublayer's; after the
    core, the first output projection ends the block."""
    flops = _flops(_joint(text_rows=TXT + 1))
    assert flops["qkv_proj"] == 3 * 2 * B * (TXT + 1) * HID * HID
    assert flops["out_proj"] == 2 * B * IMG * HID * HID
