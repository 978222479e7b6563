"""Phases by role (``analysis.roles.assign_roles``): op sequences as real models write them, each
phase read by hand. The corpus (``tests/models``) checks the same rules on whole traces, and a
small GPU trace written here checks what they give the device figures."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tb_attn_plugin.analysis.attribution.roles import CORE, assign_roles
from tb_attn_plugin.analysis.summary import summarize
from tb_attn_plugin.trace.decode import decode_bytes


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


def test_contiguous_copies_before_sdpa_are_layout_copies() -> None:
    """Qwen2 with SDPA (a real H100 trace, issue 36; fidelity round 3): after RoPE and repeat_kv, q, k
    and v are made contiguous for the fused call. Those copies are layout work, the copy phase: neither
    RoPE's (v has none) nor the core's, whose time is then its op's (the flash kernel's alone)."""
    ops = ("linear view transpose linear view transpose linear view transpose unsqueeze unsqueeze mul slice slice neg "
           "cat mul add contiguous contiguous contiguous scaled_dot_product_attention transpose reshape linear")
    roles = _roles(ops)
    assert roles[9:18] == ["rope"] * 9
    assert _compact(ops, roles)[18:22] == [("contiguous", "copy")] * 3 + [("scaled_dot_product_attention", "sdpa")]
    # after repeat_kv, and right after the head split: copies too
    assert _roles("linear view transpose unsqueeze expand reshape contiguous contiguous "
                  "scaled_dot_product_attention")[3:] == ["kv_expand"] * 3 + ["copy", "copy", "sdpa"]
    assert _roles("linear view transpose contiguous scaled_dot_product_attention") == [*["qkv_proj"] * 3, "copy",
                                                                                       "sdpa"]
    # a contiguous not right before the core keeps its neighbours' phase
    assert _roles("linear view transpose contiguous neg cat mul scaled_dot_product_attention")[3] == "qkv_proj"
    # after a mask it copies the mask (T5's position bias): the mask's
    assert _roles("linear arange abs embedding permute contiguous scaled_dot_product_attention")[4:6] == ["mask"] * 2
    # scoped: instrument()'s sdpa scope holds the call alone, and the copies before it are placed by role
    assert _roles("linear view transpose contiguous scaled_dot_product_attention",
                  {0: "qkv_proj", 4: "sdpa"})[3] == "copy"


def _gpu_block(scoped: bool) -> list[dict[str, Any]]:
    """A Qwen2-style block on a GPU (issue "fidelity round 3"): q, k and v projected, RoPE (one
    kernel, 5 µs), q, k and v made contiguous (a copy kernel each, 20 µs), SDPA (its flash kernel,
    40 µs), the output projection; with instrument()'s scopes, RoPE and the copies lie in the block
    outside every phase scope, as there."""
    cpu, gpu = {"pid": 1, "tid": 1}, {"pid": 0, "tid": 7}
    hidden, weight, q = [2, 16, 64], [64, 64], [2, 4, 16, 16]
    out: list[dict[str, Any]] = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0, "dur": 1000,
                                  **cpu, "args": {}}]

    def op(name: str, ts: float, dur: float, ext: int, kernel: str, kernel_us: float,
           dims: list[list[int]] | None = None) -> None:
        out.append({"ph": "X", "cat": "cpu_op", "name": name, "ts": ts, "dur": dur, **cpu,
                    "args": {"External id": ext, **({"Input Dims": dims} if dims else {})}})
        out.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": ts + 2, "dur": 3, **cpu,
                    "args": {"correlation": ext, "External id": ext}})
        out.append({"ph": "X", "cat": "kernel", "name": kernel, "ts": 400 + 50 * ext, "dur": kernel_us, **gpu,
                    "args": {"correlation": ext, "device": 0, "stream": 7}})

    def scope(name: str, ts: float, dur: float) -> None:
        if scoped:
            out.append({"ph": "X", "cat": "user_annotation", "name": name, "ts": ts, "dur": dur, **cpu, "args": {}})

    scope("tbattn.v1/L0 model.layers.0.self_attn", 10, 300)
    scope("tbattn.v1/L0/qkv_proj", 20, 40)
    op("aten::linear", 22, 36, 1, "sm90_gemm", 30, [hidden, [3 * 64, 64]])
    op("aten::neg", 62, 6, 7, "neg_kernel", 5)
    for k in range(3):
        op("aten::contiguous", 70 + 30 * k, 25, 2 + k, "elementwise_copy_kernel", 20)
    scope("tbattn.v1/L0/sdpa", 160, 100)
    op("aten::scaled_dot_product_attention", 162, 96, 5, "flash_fwd_kernel", 40, [q, q, q])
    scope("tbattn.v1/L0/out_proj", 265, 40)
    op("aten::linear", 267, 36, 6, "sm90_gemm", 30, [hidden, weight])
    return out


@pytest.mark.parametrize("scoped", [True, False], ids=["scoped", "plain"])
def test_the_cores_device_time_is_its_kernels_and_the_copies_are_copies(scoped: bool) -> None:
    """The sdpa phase is the flash kernel's 40 µs and one kernel, as the SDPA op launched; the three
    copies before it are the copy phase's 60 µs and three kernels, with or without scopes."""
    events = decode_bytes(json.dumps({"traceEvents": _gpu_block(scoped)}).encode())
    (layer,) = summarize(events).layers
    by_phase = {p.phase: (p.kernels, p.device_us) for p in layer.phases}
    assert by_phase["sdpa"] == (1, 40) and by_phase["copy"] == (3, 3 * 20) and by_phase["rope"] == (1, 5)
    assert by_phase["qkv_proj"] == by_phase["out_proj"] == (1, 30) and by_phase.get("other", (0, 0)) == (0, 0)


def test_copies_that_lay_out_q_k_and_v() -> None:
    """DeepSeek's MLA assembles each key from its two parts, copied into a new tensor (the slices are
    the views it writes into); a static cache's copy right after its write is the cache's."""
    ops = ("linear view transpose split_with_sizes expand new_empty slice copy_ slice copy_ "
           "scaled_dot_product_attention")
    assert _compact(ops, _roles(ops))[4:] == [
        ("expand", "kv_expand"), ("new_empty", None), ("slice", "copy"), ("copy_", "copy"), ("slice", "copy"),
        ("copy_", "copy"), ("scaled_dot_product_attention", "sdpa")]
    assert _roles("linear view transpose index_put_ copy_ scaled_dot_product_attention")[3:5] == ["kv_cache"] * 2


def test_norms_in_pieces_after_a_projection_are_the_projections() -> None:
    """Gemma 3's QK-norm (RMSNorm in Python: to pow mean add rsqrt mul, the weight's 1 + w, type_as) and
    MLA's norm of its q latent between q_a_proj and q_b_proj: q, k and v's making, not RoPE or scale."""
    gemma = "linear view transpose to pow mean add rsqrt mul to add mul type_as unsqueeze mul neg cat mul add"
    roles = _roles(gemma)
    assert roles[:13] == ["qkv_proj"] * 13
    assert roles[13:] == ["rope"] * 6
    mla = "linear to pow mean add rsqrt mul to mul linear view transpose scaled_dot_product_attention"
    assert _roles(mla)[:12] == ["qkv_proj"] * 12


def test_rotary_embeddings_on_interleaved_pairs() -> None:
    """DeepSeek's interleaved RoPE has no neg: x1 * cos - x2 * sin, x2 * cos + x1 * sin, joined by cat;
    then the cache's two appends."""
    ops = ("linear view transpose slice slice mul mul sub mul mul add cat empty cat cat "
           "scaled_dot_product_attention")
    assert _compact(ops, _roles(ops))[3:] == [
        *[(op, "rope") for op in "slice slice mul mul sub mul mul add cat".split()], ("empty", None),
        ("cat", "kv_cache"), ("cat", "kv_cache"), ("scaled_dot_product_attention", "sdpa")]
    # Without the rotation, a cat after an add is the cache's, as in Llama's decode steps.
    assert _roles("linear neg cat mul add cat cat scaled_dot_product_attention")[5:7] == ["kv_cache"] * 2


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
