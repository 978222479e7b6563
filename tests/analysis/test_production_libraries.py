"""Attention libraries' ops and kernels (issue 33): backend, FLOPs and phase of each, by the names
and argument lists their own sources register, and FLOPs checked against hand formulas.

Sources (repository, file), as docs/production.md lists them:
- FlashAttention 2: Dao-AILab/flash-attention flash_attn/flash_attn_interface.py (ops),
  csrc/flash_attn/src/flash_fwd_launch_template.h (``flash_fwd_kernel``); 3: hopper/flash_attn_interface.py,
  hopper/flash_fwd_kernel_sm90.h (``FlashAttnFwdSm90``); 4: flash_attn/cute/flash_fwd_sm100.py.
- aiter: ROCm/aiter aiter/ops/mha.py (``mha_fwd``, ``mha_batch_prefill``), aiter/ops/cache.py,
  aiter/ops/rope.py, hsa/gfx942/fmha_v3_fwd/fmha_fwd.csv (assembly kernels).
- Composable Kernel: ck_tile ``FmhaBatchPrefillWithPagedKVCacheKernel``, as the SGLang trace records it.
- FlashInfer: flashinfer-ai/flashinfer include/flashinfer/attention/prefill.cuh, decode.cuh.
- TensorRT-LLM fmha cubins (FlashInfer's tests/test_artifacts.py lists ``fmhaSm100aKernel_...``).
- xformers: facebookresearch/xformers xformers/csrc/attention/attention.cpp (the CK op),
  xformers/ops/fmha/flash.py (``xformers_flash::flash_fwd``).
- SageAttention: thu-ml/SageAttention sageattention/sm80_compile.py, sm90_compile.py.
- Transformer Engine: NVIDIA/TransformerEngine transformer_engine/pytorch/attention/dot_product_attention/backends.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers import SHARED_TRACES

from tb_attn_plugin.analysis.attribution.analyze import analyze
from tb_attn_plugin.analysis.attribution.roles import assign_roles
from tb_attn_plugin.analysis.ops.backend import LIBRARY_BACKENDS, detect_backend
from tb_attn_plugin.analysis.ops.flops import UNCOUNTED, kept_pairs, library_flops, op_flops
from tb_attn_plugin.analysis.summary import summarize_trace
from tb_attn_plugin.engine.loader import load_events
from tb_attn_plugin.trace.decode import decode_bytes
from tb_attn_plugin.trace.events import OpShapes
from tb_attn_plugin.types.schema import WorkerSummary

SGLANG = SHARED_TRACES.parent / "production-traces" / "tracelens_sglang_qwen3-8b_mi300_prefilldecode.json.gz"

FA2 = "flash_attn::_flash_attn_forward"
FA2_BWD = "flash_attn::_flash_attn_backward"
FA2_VARLEN = "flash_attn::_flash_attn_varlen_forward"
FA3 = "flash_attn_3::_flash_attn_forward"
AITER = "aiter::mha_fwd"
AITER_PREFILL = "aiter::mha_batch_prefill"
XF_CK = "xformers::efficient_attention_forward_ck"
SAGE = "sageattention::qk_int8_sv_f16_accum_f16_attn"
SAGE_SM90 = "sageattention_sm90::qk_int8_sv_f8_accum_f32_fuse_v_scale_attn_inst_buf"
#: The CK-tile kernel of the SGLang trace (its start, as the trace spells it).
CK_PREFILL_KERNEL = ("_ZN7ck_tile6kentryILi2ENS_38FmhaBatchPrefillWithPagedKVCacheKernelINS_40BlockFmhaBatchPrefill"
                     "PipelineQRKSVSAsyncINS_36BlockFmhaBatchPrefillPipelineProblemIDF16bDF16bDF16bffDF16bhfDF16b")


def call(n_args: int, dims: dict[int, list[int]], concrete: dict[int, str]) -> OpShapes:
    """An op's recorded inputs: ``dims`` at their positions, ``concrete`` values at theirs."""
    return OpShapes(dims=tuple(dims.get(i, []) for i in range(n_args)),
                    types=tuple("c10::BFloat16" if i in dims else "Scalar" for i in range(n_args)),
                    concrete=tuple(concrete.get(i, "") for i in range(n_args)))


def fa2(q: list[int], k: list[int], *, causal: bool, left: int = -1, right: int = -1) -> OpShapes:
    # (q, k, v, dropout_p, softmax_scale, causal, window_size_left, window_size_right, softcap,
    #  alibi_slopes, return_softmax): flash_attn/flash_attn_interface.py ``_flash_attn_forward``
    return call(11, {0: q, 1: k, 2: k}, {3: "0.", 4: "0.125", 5: str(causal), 6: str(left), 7: str(right),
                                         8: "0.", 10: "False"})


# -- FLOPs: 2·B·H·(pairs kept)·(D + Dv), i.e. 4·B·H·pairs·D when Dv = D ---------------------------

def test_flash_attn_2_dense_counts_every_pair_with_grouped_query_heads_from_q() -> None:
    # q (B=2, Sq=128, H=8, D=64), k and v (2, Sk=256, Hkv=2, 64): every query head attends.
    assert op_flops(FA2, fa2([2, 128, 8, 64], [2, 256, 2, 64], causal=False)) == 4 * 2 * 8 * 128 * 256 * 64


def test_flash_attn_2_causal_is_aligned_to_the_bottom_right() -> None:
    # 4 queries, 10 keys: query i sees keys 0..6+i, so 7+8+9+10 = 34 of the 40 pairs (PyTorch's
    # top-left is_causal would keep 1+2+3+4 = 10).
    assert op_flops(FA2, fa2([1, 4, 2, 16], [1, 10, 2, 16], causal=True)) == 4 * 1 * 2 * 34 * 16
    # Square: S(S+1)/2 pairs.
    assert op_flops(FA2, fa2([2, 64, 4, 32], [2, 64, 4, 32], causal=True)) == 4 * 2 * 4 * (64 * 65 // 2) * 32


def test_a_sliding_window_counts_the_pairs_it_keeps() -> None:
    # S = 8, causal, window_size_left = 2: query i sees keys i-2..i, so 1 + 2 + 3·6 = 21 pairs.
    assert kept_pairs(8, 8, offset=0, left=2, right=0) == 21
    assert op_flops(FA2, fa2([1, 8, 1, 16], [1, 8, 1, 16], causal=True, left=2)) == 4 * 21 * 16
    # Not causal, window (1, 1): the two end queries see 2 keys, the 6 others 3: 22 pairs.
    assert op_flops(FA2, fa2([1, 8, 1, 16], [1, 8, 1, 16], causal=False, left=1, right=1)) == 4 * 22 * 16


def test_flash_attn_2_backward_is_two_and_a_half_forwards() -> None:
    # (dout, q, k, v, out, softmax_lse, dq, dk, dv, dropout_p, softmax_scale, causal, window_size_left,
    #  window_size_right, softcap, alibi_slopes, deterministic, rng_state)
    q, k = [2, 32, 4, 64], [2, 32, 4, 64]
    bwd = call(18, {0: q, 1: q, 2: k, 3: k, 4: q}, {11: "False", 12: "-1", 13: "-1", 16: "False"})
    assert op_flops(FA2_BWD, bwd) == 2.5 * 4 * 2 * 4 * 32 * 32 * 64


def test_flash_attn_3_dense_and_its_varlen_or_paged_calls() -> None:
    # hopper/flash_attn_interface.py: causal at 24, window_size_left/right at 25/26, attention_chunk 27.
    dense = call(28, {0: [1, 16, 4, 128], 1: [1, 48, 4, 128], 2: [1, 48, 4, 128]},
                 {24: "True", 25: "-1", 26: "-1", 27: "0"})
    pairs = sum(48 - 16 + i + 1 for i in range(16))  # bottom right: query i sees 33 + i keys
    assert op_flops(FA3, dense) == 4 * 4 * pairs * 128
    # With cu_seqlens_q (7) the lengths are tensor values: unknown, not guessed.
    varlen = call(28, {0: [64, 4, 128], 1: [64, 4, 128], 2: [64, 4, 128], 7: [3], 8: [3]},
                  {12: "32", 13: "32", 24: "True", 25: "-1", 26: "-1"})
    assert library_flops(FA3, varlen) is None and op_flops(FA3, varlen) == 0
    paged = call(28, {0: [2, 1, 4, 128], 1: [100, 16, 4, 128], 2: [100, 16, 4, 128], 11: [2], 14: [2, 8]},
                 {24: "True", 25: "-1", 26: "-1"})
    assert library_flops(FA3, paged) is None


def test_aiter_dense_forward_and_its_sink() -> None:
    # aiter/ops/mha.py mha_fwd: (q, k, v, dropout_p, softmax_scale, is_causal, window_size_left,
    # window_size_right, sink_size, return_softmax_lse, return_dropout_randval, cu_seqlens_q, ...).
    args = {3: "0.", 4: "0.088", 5: "True", 6: "-1", 7: "0", 8: "0", 9: "False", 10: "False"}
    shapes = call(21, {0: [2, 16, 8, 128], 1: [2, 16, 8, 128], 2: [2, 16, 8, 128]}, args)
    assert op_flops(AITER, shapes) == 4 * 2 * 8 * (16 * 17 // 2) * 128
    with_sink = call(21, {0: [2, 16, 8, 128], 1: [2, 16, 8, 128], 2: [2, 16, 8, 128]}, {**args, 8: "4"})
    assert library_flops(AITER, with_sink) is None


def test_varlen_and_paged_prefill_are_unknown() -> None:
    # The SGLang trace's aiter::mha_batch_prefill: q (total_q, H, D), a paged cache, cu_seqlens_q,
    # kv_indptr, kv_page_indices; the lengths per sequence are in their values.
    prefill = call(30, {0: [15360, 32, 128], 1: [835874, 8, 128], 2: [835874, 8, 128], 3: [16], 4: [16],
                        5: [15616]}, {6: "1024", 7: "1024", 12: "True", 13: "-1", 14: "-1", 15: "0"})
    assert library_flops(AITER_PREFILL, prefill) is None and op_flops(AITER_PREFILL, prefill) == 0
    varlen = call(19, {0: [300, 8, 64], 1: [300, 8, 64], 2: [300, 8, 64], 3: [4], 4: [4]},
                  {5: "128", 6: "128", 9: "True"})
    assert library_flops(FA2_VARLEN, varlen) is None


def test_xformers_ck_reads_its_mask_type() -> None:
    # attention.cpp: (query, key, value, attn_bias, seqstart_q, seqstart_k, max_seqlen_q, dropout_p,
    # compute_logsumexp, custom_mask_type, scale, seqlen_k, window_size, block_tables, page_size).
    def ck(mask: str, extra: dict[int, list[int]] | None = None) -> OpShapes:
        dims = {0: [1, 4, 2, 64], 1: [1, 10, 2, 64], 2: [1, 10, 2, 64], **(extra or {})}
        return call(15, dims, {7: "0.", 8: "False", 9: mask})

    assert op_flops(XF_CK, ck("0")) == 4 * 2 * 40 * 64
    assert op_flops(XF_CK, ck("1")) == 4 * 2 * 10 * 64  # top left: 1+2+3+4
    assert op_flops(XF_CK, ck("2")) == 4 * 2 * 34 * 64  # bottom right: 7+8+9+10
    assert library_flops(XF_CK, ck("2", {4: [3], 5: [3]})) is None  # seqstart_q/k: varlen


@pytest.mark.parametrize(("name", "layout_at"), [(SAGE, 6), (SAGE_SM90, 7)])
def test_sage_reads_its_tensor_layout_and_aligns_causal_to_the_top_left(name: str, layout_at: int) -> None:
    # HND (1): q (B=1, H=4, Sq=32, D=64), k (1, 4, Sk=48, 64); query i sees keys 0..i: 32·33/2 = 528.
    hnd = call(layout_at + 5, {0: [1, 4, 32, 64], 1: [1, 4, 48, 64], 2: [1, 4, 48, 64]},
               {layout_at: "1", layout_at + 1: "1"})
    assert op_flops(name, hnd) == 4 * 1 * 4 * 528 * 64
    # NHD (0): the same call with S before H, not causal.
    nhd = call(layout_at + 5, {0: [1, 32, 4, 64], 1: [1, 48, 4, 64], 2: [1, 48, 4, 64]},
               {layout_at: "0", layout_at + 1: "0"})
    assert op_flops(name, nhd) == 4 * 1 * 4 * 32 * 48 * 64


def test_unrecorded_flags_are_unknown_not_assumed() -> None:
    # A trace without Concrete Inputs: causal could be either.
    bare = OpShapes(dims=([1, 8, 1, 16], [1, 8, 1, 16], [1, 8, 1, 16]), types=("c10::Half",) * 3, concrete=())
    assert library_flops(FA2, bare) is None
    assert library_flops("FusedAttnFunc", bare) is None  # Transformer Engine: no formula


# -- backends -----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("ops", "kernels", "backend"), [
    ([FA2, "aten::empty_like"],
     ["void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::half_t>, "
      "false, true, false, false, true, true, false, false>(Flash_fwd_params)"], "flash-attn"),
    ([FA3], ["void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<...> > >(...)"],
     "flash-attn-3"),
    ([], ["void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<...> > >(...)"],
     "flash-attn-3"),
    ([], ["kernel_cutlass_kernel_flash_attncuteflash_fwd_sm100FlashAttentionForwardSm100_object_at__tensor0000o"],
     "flash-attn-4"),
    ([], ["void flashinfer::BatchPrefillWithPagedKVCacheKernel<flashinfer::KernelTraits<...> >(...)"], "flashinfer"),
    ([], ["void flashinfer::BatchDecodeWithPagedKVCacheKernel<...>(...)"], "flashinfer"),
    ([], ["fmhaSm100aKernel_QE4m3KvE2m1OE4m3H128PagedKvCausalP32VarSeqQ128Kv128PersistentContext"],
     "trtllm-fmha"),
    ([AITER_PREFILL], [CK_PREFILL_KERNEL], "aiter"),
    ([], [CK_PREFILL_KERNEL], "ck-fmha"),
    (["aiter::fmha_v3_fwd"], ["_ZN5aiter24fmha_fwd_hd128_bf16_rtneE"], "aiter"),
    ([], ["_ZN5aiter24fmha_fwd_hd128_bf16_rtneE"], "aiter"),
    ([XF_CK], [CK_PREFILL_KERNEL], "xformers-ck"),
    (["xformers_flash::flash_fwd"], ["void flash_fwd_kernel<...>(Flash_fwd_params)"], "xformers-flash"),
    ([SAGE], ["void qk_int_sv_f16_attn_kernel<128, 64, ...>(...)"], "sage"),
    (["FusedAttnFunc"], ["cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1"],
     "te-fused"),
])
def test_the_library_is_named_from_its_op_or_its_kernel(ops: list[str], kernels: list[str], backend: str) -> None:
    assert backend in LIBRARY_BACKENDS
    got, evidence = detect_backend(ops, kernels)
    assert got == backend and evidence


def test_sdpa_backends_are_unchanged() -> None:
    # PyTorch's own kernels keep their names: flash (its vendored FA2), rocm-flash (aotriton's attn_fwd).
    assert detect_backend(["aten::_scaled_dot_product_flash_attention"],
                          ["void pytorch_flash::flash_fwd_kernel<...>(pytorch_flash::Flash_fwd_params)"])[0] == "flash"
    assert detect_backend(["aten::_scaled_dot_product_flash_attention"], ["attn_fwd"])[0] == "rocm-flash"


# -- phases ------------------------------------------------------------------------------------------

def test_library_ops_take_their_phases() -> None:
    ops = ["aten::linear", "aiter::rope_cached_positions_fwd_impl", "aiter::reshape_and_cache_flash",
           AITER, "aten::linear"]
    assert assign_roles(ops, [None] * 5) == ["qkv_proj", "rope", "kv_cache", "sdpa", "out_proj"]
    assert assign_roles(["aten::linear", "te_kv_cache::copy_to_kv_cache", "FusedAttnFunc", "aten::linear"],
                        [None] * 4) == ["qkv_proj", "kv_cache", "sdpa", "out_proj"]


# -- whole traces ------------------------------------------------------------------------------------

def _trace(core: str, dims: list[list[int]], concrete: list[str], kernel: str, between: tuple[str, ...] = ()) -> bytes:
    """One step: a q/k/v projection, ``between`` (2 µs each), a library's core op launching its kernel,
    an output projection."""
    pid = 7
    rows: list[dict[str, Any]] = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": pid,
                                   "tid": pid, "ts": 0, "dur": 400, "args": {"External id": 1}}]

    def op(name: str, ts: int, dur: int, ext: int, op_dims: list[list[int]], values: list[str]) -> None:
        rows.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": pid, "tid": pid, "ts": ts, "dur": dur,
                     "args": {"External id": ext, "Input Dims": op_dims, "Concrete Inputs": values,
                              "Input type": ["c10::BFloat16" if d else "Scalar" for d in op_dims]}})

    op("aten::linear", 10, 40, 2, [[2, 16, 64], [192, 64], [192]], ["", "", ""])
    for k, name in enumerate(between):
        op(name, 51 + 2 * k, 1, 10 + k, [], [])
    op(core, 60, 100, 3, dims, concrete)
    rows.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": pid, "tid": pid, "ts": 70,
                 "dur": 5, "args": {"correlation": 9, "External id": 3}})
    rows.append({"ph": "X", "cat": "kernel", "name": kernel, "pid": 0, "tid": 7, "ts": 80, "dur": 50,
                 "args": {"device": 0, "stream": 7, "correlation": 9, "External id": 3}})
    op("aten::linear", 200, 40, 4, [[2, 16, 64], [64, 64], [64]], ["", "", ""])
    return json.dumps({"schemaVersion": 1, "traceEvents": rows}).encode()


def _summary(data: bytes) -> WorkerSummary:
    return summarize_trace(analyze(decode_bytes(data)), file="t", worker="w", span=None)


def test_a_flash_attn_block_is_found_named_and_counted() -> None:
    """No scopes, no modules: the FA2 op anchors the block, names its backend, and its FLOPs are
    the sdpa phase's (q (2, 16, 4, 16), causal, square: 16·17/2 pairs)."""
    q = [2, 16, 4, 16]
    s = _summary(_trace(FA2, [q, q, q, [], [], [], [], [], [], [], []],
                        ["", "", "", "0.", "0.25", "True", "-1", "-1", "0.", "", "False"],
                        "void flash_fwd_kernel<Flash_fwd_kernel_traits<16, 128, 64, 4> >(Flash_fwd_params)"))
    (layer,) = s.layers
    assert layer.backend == "flash-attn" and FA2 in layer.backend_evidence
    flops = {p.phase: p.flops for p in layer.phases}
    assert flops["sdpa"] == 4 * 2 * 4 * (16 * 17 // 2) * 16
    assert flops["qkv_proj"] == 2 * (2 * 16) * 64 * 192 and flops["out_proj"] == 2 * (2 * 16) * 64 * 64
    assert UNCOUNTED not in s.diagnostics


def test_a_library_rotary_and_kv_write_between_projection_and_core_keep_the_block_whole() -> None:
    """aiter's RoPE and KV-cache write between the q/k/v projection and the core: the widening walks
    over them (they stopped it, and the block was its core alone), and they take their phases."""
    q = [2, 16, 4, 16]
    s = _summary(_trace(FA2, [q, q, q, [], [], [], [], [], [], [], []],
                        ["", "", "", "0.", "0.25", "True", "-1", "-1", "0.", "", "False"],
                        "void flash_fwd_kernel<Flash_fwd_kernel_traits<16, 128, 64, 4> >(Flash_fwd_params)",
                        between=("aiter::rope_cached_positions_2c_fwd_impl", "aiter::reshape_and_cache_flash")))
    (layer,) = s.layers
    assert not layer.core_only
    phases = {p.phase: p for p in layer.phases}
    assert phases["qkv_proj"].flops == 2 * (2 * 16) * 64 * 192 and phases["out_proj"].flops == 2 * (2 * 16) * 64 * 64
    assert phases["rope"].ops == ["aiter::rope_cached_positions_2c_fwd_impl"]
    assert phases["kv_cache"].ops == ["aiter::reshape_and_cache_flash"]


def test_a_paged_prefill_is_named_and_its_flops_said_unknown() -> None:
    s = _summary(_trace(AITER_PREFILL, [[32, 4, 16], [500, 1, 16], [500, 1, 16], [3], [3], [40]],
                        ["", "", "", "", "", "", "16", "24", "0.", "0.25", "0.", "False", "True", "-1", "-1", "0"],
                        CK_PREFILL_KERNEL))
    (layer,) = s.layers
    assert layer.backend == "aiter"
    assert {p.phase: p.flops for p in layer.phases}.get("sdpa") == 0
    assert s.diagnostics[UNCOUNTED] == 1


@pytest.fixture(scope="module")
def sglang() -> WorkerSummary:
    if not SGLANG.exists():
        pytest.skip(f"{SGLANG} is not here")
    return summarize_trace(analyze(load_events(str(SGLANG))), file=SGLANG.name, worker="w", span=None)


def test_the_sglang_prefill_trace_names_its_backend(sglang: WorkerSummary) -> None:
    """Its core is ``aiter::mha_batch_prefill`` running CK-tile's paged prefill kernel (it said
    "unknown" before). The serving engine's op names it first where SGLang's profiler wraps the call
    (``sglang-aiter-prefill``); either way the name is aiter's."""
    assert len(sglang.layers) == 36
    assert all("aiter" in layer.backend and layer.backend_evidence for layer in sglang.layers)
    assert "aiter" in sglang.backend
    # Paged and varlen: the shapes do not give the FLOPs, but the engine's batch annotation does
    # (tests/analysis/attribution/test_serving_batch.py), so no call is left uncounted.
    assert UNCOUNTED not in sglang.diagnostics
    assert all({p.phase: p.flops for p in layer.phases}["sdpa"] > 0 for layer in sglang.layers)


def test_every_library_backend_is_documented() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "production.md").read_text(encoding="utf-8")
    assert [b for b in LIBRARY_BACKENDS if f"`{b}`" not in text] == []
