"""Attention libraries' names: FlashAttention, aiter, xformers, SageAttention and Transformer
Engine, each as the torch.library ops it registers and the kernels it launches (matched by
substring), names as its source spells them; ``docs/production.md`` cites the file of each.
Backend names: ``analysis.backend``.
"""

from __future__ import annotations

__all__ = [
    "AITER_ASM_KERNELS",
    "AITER_ATTENTION_OPS",
    "AITER_FORWARD_OP",
    "AITER_KV_WRITE_OPS",
    "AITER_ROPE_OPS",
    "AITER_SAGE_KERNELS",
    "AITER_SAGE_QUANT_KERNELS",
    "AITER_V3_FORWARD_OP",
    "AITER_VARLEN_OPS",
    "ATTENTION_CORE_OPS",
    "CK_FMHA_KERNELS",
    "FA2_BACKWARD_OP",
    "FA2_FORWARD_OP",
    "FA2_OPS",
    "FA2_VARLEN_FORWARD_OP",
    "FA3_BACKWARD_OP",
    "FA3_FORWARD_OP",
    "FA3_KERNELS",
    "FA3_OPS",
    "FA4_KERNELS",
    "FLASHINFER_KERNELS",
    "LIBRARY_ATTENTION",
    "LIBRARY_BACKWARD_OPS",
    "LIBRARY_KV_WRITE_OPS",
    "LIBRARY_QUANT_KERNELS",
    "LIBRARY_ROPE_OPS",
    "LIBRARY_SHAPE_OPS",
    "SAGE_KERNELS",
    "SAGE_OPS",
    "SAGE_QUANT_KERNELS",
    "TE_FUSED_ATTN_OP",
    "TE_KV_WRITE_OPS",
    "TRTLLM_FMHA_KERNELS",
    "XFORMERS_CK_OPS",
    "XFORMERS_CUTLASS_OPS",
    "XFORMERS_FLASH_OPS",
    "XFORMERS_FORWARD",
]

#: FlashAttention 2 (Dao-AILab/flash-attention, flash_attn/flash_attn_interface.py,
#: ``_torch_custom_op_wrapper``). Forward: (q, k, v, dropout_p, softmax_scale, causal,
#: window_size_left, window_size_right, ...), q (B, Sq, H, D); varlen: (q, k, v, cu_seqlens_q,
#: cu_seqlens_k, max_seqlen_q, max_seqlen_k, ...), q (total_q, H, D).
FA2_FORWARD_OP = "flash_attn::_flash_attn_forward"
FA2_VARLEN_FORWARD_OP = "flash_attn::_flash_attn_varlen_forward"
FA2_BACKWARD_OP = "flash_attn::_flash_attn_backward"
FA2_OPS = frozenset({FA2_FORWARD_OP, FA2_VARLEN_FORWARD_OP, FA2_BACKWARD_OP, "flash_attn::_flash_attn_varlen_backward"})
#: FlashAttention 3 (hopper/flash_attn_interface.py): one forward op for dense, varlen and paged calls.
FA3_FORWARD_OP = "flash_attn_3::_flash_attn_forward"
FA3_BACKWARD_OP = "flash_attn_3::_flash_attn_backward"
FA3_OPS = frozenset({FA3_FORWARD_OP, FA3_BACKWARD_OP})
#: AMD aiter (ROCm/aiter, aiter/ops/mha.py; ``compile_ops`` registers each function as ``aiter::<name>``,
#: aiter/jit/utils/torch_guard.py). Dense: (q, k, v, dropout_p, softmax_scale, is_causal,
#: window_size_left, window_size_right, ...). Varlen and paged prefill: lengths in cu_seqlens/kv_indptr.
AITER_FORWARD_OP = "aiter::mha_fwd"
AITER_V3_FORWARD_OP = "aiter::fmha_v3_fwd"
AITER_VARLEN_OPS = frozenset({"aiter::mha_varlen_fwd", "aiter::fmha_v3_varlen_fwd", "aiter::mha_batch_prefill"})
AITER_ATTENTION_OPS = frozenset({AITER_FORWARD_OP, AITER_V3_FORWARD_OP, *AITER_VARLEN_OPS, "aiter::mha_bwd",
                                 "aiter::fmha_v3_bwd", "aiter::mha_varlen_bwd", "aiter::fmha_v3_varlen_bwd"})
#: aiter's KV-cache writes (aiter/ops/cache.py) and rotary embeddings (aiter/ops/rope.py).
AITER_KV_WRITE_OPS = frozenset({"aiter::reshape_and_cache", "aiter::reshape_and_cache_flash",
                                "aiter::reshape_and_cache_with_pertoken_quant",
                                "aiter::reshape_and_cache_with_block_quant"})
AITER_ROPE_OPS = frozenset({
    "aiter::rope_fwd_impl", "aiter::rope_2c_fwd_impl", "aiter::rope_cached_fwd_impl", "aiter::rope_cached_2c_fwd_impl",
    "aiter::rope_cached_positions_fwd_impl", "aiter::rope_cached_positions_2c_fwd_impl",
    "aiter::rope_cached_positions_offsets_fwd_impl", "aiter::rope_cached_positions_offsets_2c_fwd_impl",
    "aiter::rope_thd_fwd_impl", "aiter::rope_2d_fwd_impl"})
#: xformers (facebookresearch/xformers): its CK ops on ROCm (xformers/csrc/attention/attention.cpp),
#: (query, key, value, attn_bias, seqstart_q, seqstart_k, max_seqlen_q, dropout_p, compute_logsumexp,
#: custom_mask_type, scale, seqlen_k, window_size, block_tables, page_size), q (B, S, H, D); its CUTLASS
#: op before PyTorch took the kernels over (removed in 3d947a67; now ``aten::_efficient_attention_forward``);
#: and its wrappers of FlashAttention 2 and 3 (xformers/ops/fmha/flash.py, flash3.py).
XFORMERS_CK_OPS = frozenset({"xformers::efficient_attention_forward_ck",
                             "xformers::efficient_attention_forward_decoder_splitk_ck",
                             "xformers::efficient_attention_backward_ck"})
XFORMERS_CUTLASS_OPS = frozenset({"xformers::efficient_attention_forward_cutlass",
                                  "xformers::efficient_attention_backward_cutlass"})
XFORMERS_FLASH_OPS = frozenset({"xformers_flash::flash_fwd", "xformers_flash::flash_bwd", "xformers_flash3::flash_fwd",
                                "xformers_flash3::flash_bwd"})
#: SageAttention (thu-ml/SageAttention, sageattention/sm80_compile.py, sm89_compile.py, sm90_compile.py):
#: (query, key, value, output, query_scale, key_scale[, value_scale][, value_mean], tensor_layout,
#: is_causal, ...): name -> index of ``tensor_layout`` (0: (B, S, H, D), 1: (B, H, S, D)); ``is_causal``
#: (an int) follows it. Its causal mask is aligned to the top left (csrc/qattn/qk_int_sv_f16_cuda_sm80.cu).
SAGE_OPS: dict[str, int] = {
    "sageattention::qk_int8_sv_f16_accum_f16_attn": 6, "sageattention::qk_int8_sv_f16_accum_f32_attn": 6,
    "sageattention::qk_int8_sv_f16_accum_f16_attn_inst_buf": 6,
    "sageattention::qk_int8_sv_f16_accum_f16_fuse_v_mean_attn": 7,
    "sageattention_sm89::qk_int8_sv_f8_accum_f32_fuse_v_scale_attn": 7,
    "sageattention_sm89::qk_int8_sv_f8_accum_f32_fuse_v_scale_attn_inst_buf": 7,
    "sageattention_sm89::qk_int8_sv_f8_accum_f16_fuse_v_scale_attn_inst_buf": 7,
    "sageattention_sm89::qk_int8_sv_f8_accum_f32_fuse_v_scale_fuse_v_mean_attn": 8,
    "sageattention_sm90::qk_int8_sv_f8_accum_f32_attn_inst_buf": 6,
    "sageattention_sm90::qk_int8_sv_f8_accum_f32_fuse_v_scale_attn_inst_buf": 7,
}
#: Transformer Engine (NVIDIA/TransformerEngine): its fused attention's autograd function
#: (transformer_engine/pytorch/attention/dot_product_attention/backends.py; the C++ call under it is
#: pybind, no op), and its KV-cache write (transformer_engine/pytorch/attention/custom_ops.py).
TE_FUSED_ATTN_OP = "FusedAttnFunc"
TE_KV_WRITE_OPS = frozenset({"te_kv_cache::copy_to_kv_cache"})

#: Library ops whose ``Input Dims`` can give their work: name -> (index of q, of causal, of
#: window_size_left, of window_size_right, arguments that make the call varlen, paged or appending
#: when recorded (the lengths are then tensor values, which the profiler does not record), scalars
#: that must be 0). q, k, v follow each other as (B, S, H, D); the causal mask is aligned to the
#: bottom right (FlashAttention's convention, which aiter follows: csrc/py_itfs_ck/mha_fwd_kernels.cu "b:").
LIBRARY_ATTENTION: dict[str, tuple[int, int, int, int, tuple[int, ...], tuple[int, ...]]] = {
    FA2_FORWARD_OP: (0, 5, 6, 7, (), ()),
    # (dout, q, k, v, out, softmax_lse, dq, dk, dv, dropout_p, softmax_scale, causal, window_size_left, ...)
    FA2_BACKWARD_OP: (1, 11, 12, 13, (), ()),
    # (q, k, v, k_new, v_new, qv, out_, cu_seqlens_q, cu_seqlens_k, cu_seqlens_k_new, seqused_q, seqused_k,
    #  max_seqlen_q, max_seqlen_k, page_table, kv_batch_idx, leftpad_k, ..., softmax_scale, causal,
    #  window_size_left, window_size_right, attention_chunk, ...)
    FA3_FORWARD_OP: (0, 24, 25, 26, (3, 4, 5, 7, 8, 9, 10, 11, 14, 15, 16), (27,)),
    # (dout, q, k, v, out, softmax_lse, cu_seqlens_q, cu_seqlens_k, seqused_q, seqused_k, ..., is_causal, ...)
    FA3_BACKWARD_OP: (1, 16, 17, 18, (6, 7, 8, 9), ()),
    # (..., window_size_right, sink_size, return_softmax_lse, return_dropout_randval, cu_seqlens_q, cu_seqlens_kv)
    AITER_FORWARD_OP: (0, 5, 6, 7, (11, 12), (8,)),
    AITER_V3_FORWARD_OP: (0, 5, 6, 7, (), ()),
}
#: Backward ops among them: 2.5 times the forward's work, as SDPA's (``flops.BACKWARD_FACTOR``).
LIBRARY_BACKWARD_OPS = frozenset({FA2_BACKWARD_OP, FA3_BACKWARD_OP})
#: xformers' forward ops laid out as ``aten::_efficient_attention_forward`` (q (B, S, H, D), the mask
#: type at 9: 1 top-left causal, 2 bottom-right): name -> arguments that make the call varlen, paged
#: or windowed when recorded.
XFORMERS_FORWARD: dict[str, tuple[int, ...]] = {
    "xformers::efficient_attention_forward_ck": (4, 5, 11, 12, 13),
    # (query, key, value, bias, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
    #  custom_mask_type, compute_log_sumexp, scale, seqlen_k, window_size)
    "xformers::efficient_attention_forward_cutlass": (4, 5, 12, 13),
}
#: Every library op that is one attention call's fused core (forward and backward): the ``sdpa``
#: phase, and a core that inference anchors a block on, as it does an SDPA op.
ATTENTION_CORE_OPS = FA2_OPS | FA3_OPS | AITER_ATTENTION_OPS | XFORMERS_CK_OPS | XFORMERS_CUTLASS_OPS \
    | XFORMERS_FLASH_OPS | frozenset(SAGE_OPS) | {TE_FUSED_ATTN_OP}
#: Library KV-cache writes and rotary embeddings: the ``kv_cache`` and ``rope`` phases.
LIBRARY_KV_WRITE_OPS = AITER_KV_WRITE_OPS | TE_KV_WRITE_OPS
LIBRARY_ROPE_OPS = AITER_ROPE_OPS
#: Library ops whose shapes the analysis reads: every core's (its FLOPs, or why they are unknown).
LIBRARY_SHAPE_OPS = ATTENTION_CORE_OPS

#: Kernels by library, matched by substring (``analysis.backend``), each as its source names it:
#: FlashAttention 3's kernel classes (hopper/flash_fwd_kernel_sm90.h, flash_fwd_kernel_sm80.h, launched as
#: ``cutlass::device_kernel<flash::FlashAttnFwdSm90<...>>``); FlashAttention 4's cute-DSL kernels, whose
#: symbols carry the module path ``flash_attn.cute`` (flash_attn/cute/flash_fwd_sm100.py:
#: ``kernel_cutlass_kernel_flash_attncuteflash_fwd_sm100FlashAttentionForwardSm100_...``);
#: FlashInfer's (include/flashinfer/attention/prefill.cuh, decode.cuh, namespace ``flashinfer``);
#: TensorRT-LLM's (trtllm-gen cubins ``fmhaSm100aKernel_...``, which FlashInfer also ships, and
#: fmha_v2 ``fmha_v2_flash_attention_...``); aiter's assembly kernels (hsa/gfx942/fmha_v3_fwd/fmha_fwd.csv:
#: ``_ZN5aiter24fmha_fwd_hd128_bf16_rtneE``); Composable Kernel's ck_tile FMHA kernels
#: (include/ck_tile/ops/fmha/kernel/); SageAttention's (csrc/qattn/qk_int_sv_f8_cuda_sm89.cuh ...).
FA3_KERNELS = ("FlashAttnFwdSm90", "FlashAttnFwdSm80")
FA4_KERNELS = ("flash_attncute",)
FLASHINFER_KERNELS = ("flashinfer::BatchPrefillWith", "flashinfer::BatchDecodeWith", "flashinfer::SinglePrefillWith",
                      "flashinfer::SingleDecodeWith")
TRTLLM_FMHA_KERNELS = ("fmhaSm", "fmha_v2_")
AITER_ASM_KERNELS = ("fmha_fwd_hd",)
CK_FMHA_KERNELS = ("FmhaFwdKernel", "FmhaFwdSplitKVKernel", "FmhaFwdPagedKVKernel",
                   "FmhaBatchPrefillWithPagedKVCacheKernel")
SAGE_KERNELS = ("qk_int_sv_f16_attn_kernel", "qk_int_sv_f8_attn_kernel")
#: SageAttention's quantization kernels (csrc/fused/fused.cu; sageattention/triton/quant_per_block.py):
#: pybind and Triton calls with no op of their own.
SAGE_QUANT_KERNELS = ("QuantInt8Kernel", "MeanScaleKernel", "SubMeanKernel", "TransposePadPermuteKernel",
                      "quant_per_block_int8_kernel")
#: aiter's Triton SageAttention on ROCm (ROCm/aiter, aiter/ops/triton/_triton_kernels/attention/
#: fav3_sage_attention.py: the kernel ``sage_fwd``; fav3_sage_attention_mxfp4.py: ``sage_fwd_mxfp4``), which
#: ``fav3_sage_func`` (aiter/ops/triton/attention/fav3_sage.py) launches with no op of its own: int8 q·kᵀ.
AITER_SAGE_KERNELS = ("sage_fwd",)
#: Its quantization kernels (aiter/ops/triton/_triton_kernels/quant/sage_attention_quant.py:
#: ``sage_quant_kernel``, ``sage_quant_v_kernel`` and the other ``sage_quant_*``, ``_rotate_quantize_q_kernel``...).
AITER_SAGE_QUANT_KERNELS = ("sage_quant", "_rotate_quantize_")
#: Attention libraries' quantization kernels, matched by substring: their device time is the
#: ``quantize`` phase's wherever in a block they were launched (``analysis.attribute``).
LIBRARY_QUANT_KERNELS = SAGE_QUANT_KERNELS + AITER_SAGE_QUANT_KERNELS
