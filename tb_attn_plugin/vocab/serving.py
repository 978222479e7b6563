"""Serving engines' names: vLLM's and SGLang's attention, KV-cache, RoPE and GEMM ops, their
attention kernels (matched by substring) and their batch annotations.

A serving engine runs attention as its own custom op over a paged KV cache, not as SDPA; its
RoPE and its KV-cache write are ops of their own too. Names as the engines register them (the
source file beside each set); ``docs/production.md`` lists them.
"""

from __future__ import annotations

__all__ = [
    "GDN_KERNELS",
    "SERVING_BATCH_DETAILED_PATTERN",
    "SERVING_BATCH_PATTERN",
    "SERVING_BOOKKEEPING_OPS",
    "SERVING_CORE_OPS",
    "SERVING_GEMM_OPS",
    "SERVING_KV_CACHE_ARG",
    "SERVING_KV_WRITE_OPS",
    "SERVING_LINEAR_CORE_OPS",
    "SERVING_QK_NORM_OPS",
    "SERVING_ROPE_OPS",
    "SERVING_SHAPE_OPS",
    "SGLANG_AITER_DECODE_OPS",
    "SGLANG_AITER_PREFILL_OPS",
    "SGLANG_CORE_OPS",
    "SGLANG_PROFILER_CORE_OPS",
    "SGLANG_PROFILER_COUNTER",
    "SGLANG_PROFILER_PREFIX",
    "SGLANG_TRITON_OPS",
    "VLLM_CORE_OPS",
    "VLLM_GDN_OPS",
    "VLLM_MLA_OPS",
    "VLLM_PAGED_KERNELS",
    "VLLM_PAGED_OPS",
    "VLLM_ROCM_PAGED_KERNELS",
    "VLLM_ROCM_PAGED_OPS",
    "VLLM_TRITON_KERNELS",
    "VLLM_UNIFIED_OPS",
]

#: vLLM's attention ops (``direct_register_custom_op`` in vllm/model_executor/layers/attention/
#: attention.py, vllm/attention/layer.py before it): one per layer and forward, whatever backend
#: runs inside; MLA's (.../attention/mla_attention.py) apart.
VLLM_UNIFIED_OPS = frozenset({"vllm::unified_attention", "vllm::unified_attention_with_output"})
VLLM_MLA_OPS = frozenset({"vllm::unified_mla_attention", "vllm::unified_mla_attention_with_output"})
#: vLLM's paged-attention ops: CUDA (csrc/torch_bindings.cpp, the V0 decode path) and ROCm
#: (csrc/rocm/torch_bindings.cpp).
VLLM_PAGED_OPS = frozenset({"_C::paged_attention_v1", "_C::paged_attention_v2"})
VLLM_ROCM_PAGED_OPS = frozenset({"_rocm_C::paged_attention"})
#: vLLM's Gated DeltaNet core, the linear attention of Qwen3-Next's and Qwen3.5's hybrid layers: the
#: causal conv1d and the gated delta rule's state update, one op per layer and forward
#: (vllm/model_executor/layers/mamba/gdn_linear_attn.py ``direct_register_custom_op(op_name="gdn_attention_core")``;
#: ``qwen_gdn_attention_core`` in .../mamba/gdn/qwen_gdn_linear_attn.py). A state, no (Sq, Sk) scores.
VLLM_GDN_OPS = frozenset({"vllm::gdn_attention_core", "vllm::qwen_gdn_attention_core"})
#: The gated delta rule's kernels, flash-linear-attention's as vLLM vendors them, matched by substring
#: (vllm/model_executor/layers/fla/ops/chunk_delta_h.py ``chunk_gated_delta_rule_fwd_kernel_h_blockdim64``,
#: fused_recurrent.py ``fused_recurrent_gated_delta_rule_fwd_kernel``, fused_sigmoid_gating.py
#: ``fused_sigmoid_gating_delta_rule_update_kernel``).
GDN_KERNELS = ("gated_delta_rule", "gating_delta_rule")
VLLM_CORE_OPS = VLLM_UNIFIED_OPS | VLLM_MLA_OPS | VLLM_PAGED_OPS | VLLM_ROCM_PAGED_OPS | VLLM_GDN_OPS
#: Serving cores of linear attention: no (query, key) pairs, so a batch annotation's pairs do not
#: give their work (``analysis.batch``).
SERVING_LINEAR_CORE_OPS = VLLM_GDN_OPS
#: SGLang's attention op (``unified_attention_with_output`` in python/sglang/srt/layers/
#: radix_attention.py, the piecewise-graph path of ``RadixAttention``).
SGLANG_CORE_OPS = frozenset({"sglang::unified_attention_with_output"})
#: SGLang's kernel-shape profiler (python/sglang/srt/utils/kernel_shape_profiler.py) wraps kernel
#: entry points as ops named ``sglang_profiler::<last module name>_<function>_<counter>``; the
#: counter differs between runs, so the names below are without it (``analysis.opnames.canonical``).
SGLANG_PROFILER_PREFIX = "sglang_profiler::"
SGLANG_PROFILER_COUNTER = r"_\d+$"
#: Its attention entry points: aiter's paged decode (aiter/ops/attention.py ``paged_attention_ragged``,
#: which SGLang's aiter backend calls), aiter's paged prefill (aiter/ops/mha.py ``_mha_batch_prefill``),
#: and SGLang's Triton kernels (python/sglang/srt/layers/attention/triton_ops/decode_attention.py,
#: extend_attention.py, prefill_attention.py).
SGLANG_AITER_DECODE_OPS = frozenset({"sglang_profiler::attention_paged_attention_ragged"})
SGLANG_AITER_PREFILL_OPS = frozenset({"sglang_profiler::mha__mha_batch_prefill"})
SGLANG_TRITON_OPS = frozenset({
    "sglang_profiler::decode_attention_decode_attention_fwd",
    "sglang_profiler::decode_attention_decode_attention_fwd_normal",
    "sglang_profiler::decode_attention_decode_attention_fwd_grouped",
    "sglang_profiler::extend_attention_extend_attention_fwd",
    "sglang_profiler::prefill_attention_context_attention_fwd"})
SGLANG_PROFILER_CORE_OPS = SGLANG_AITER_DECODE_OPS | SGLANG_AITER_PREFILL_OPS | SGLANG_TRITON_OPS
#: Every serving-engine op that is one layer's attention core (the fused kernel's own work: q·kᵀ,
#: softmax and attn·v over the paged cache, like a fused SDPA call).
SERVING_CORE_OPS = VLLM_CORE_OPS | SGLANG_CORE_OPS | SGLANG_PROFILER_CORE_OPS
#: Writing this step's k and v into the paged KV cache: vLLM's op (attention.py above) and its cache
#: kernels' ops (csrc/torch_bindings.cpp ``_C_cache_ops``), SGLang's ``store_cache`` (its JIT
#: kernel, python/sglang/jit_kernel) and its profiler range around it
#: (python/sglang/srt/mem_cache/memory_pool.py ``_set_kv_buffer_impl``).
SERVING_KV_WRITE_OPS = frozenset({
    "vllm::unified_kv_cache_update", "vllm::unified_mla_kv_cache_update", "_C_cache_ops::reshape_and_cache",
    "_C_cache_ops::reshape_and_cache_flash", "_C_cache_ops::concat_and_cache_mla", "sglang::store_cache",
    "sglang_profiler::memory_pool__set_kv_buffer_impl"})
#: A serving engine's ops whose shapes are read: its core's q (heads and head size, analysis/attribution/batch.py),
#: its KV write's k, v and cache (the cache's bytes per token). SGLang's are matched without their
#: counter (``SGLANG_PROFILER_COUNTER``).
SERVING_SHAPE_OPS = SERVING_CORE_OPS | SERVING_KV_WRITE_OPS
#: Where a KV write op's cache is among its inputs (k, v, cache...: vLLM's ``reshape_and_cache*`` and
#: ``concat_and_cache_mla``, SGLang's ``store_cache`` and ``set_kv_buffer``): its element type is the
#: cache's (``unsigned char`` where vLLM stores FP8 as bytes).
SERVING_KV_CACHE_ARG = 2
#: vLLM's annotation of each engine iteration (vllm/v1/worker/gpu_worker.py ``annotate_profile``):
#: ``execute_context_<requests>(<tokens>)_generation_<requests>(<tokens>)``, prefill ("context": no
#: token generated yet) and decode requests and their scheduled tokens. A detailed form, seen in
#: AMD's SGLang traces (shared/production-traces), adds the step's tokens and, per kind, the sums of
#: the query lengths, key lengths, their squares and their products (``analysis.batch``).
SERVING_BATCH_PATTERN = r"^execute_context_(?P<cn>\d+)\((?P<ct>\d+)\)_generation_(?P<gn>\d+)\((?P<gt>\d+)\)$"
SERVING_BATCH_DETAILED_PATTERN = "".join((
    r"^execute_(?P<tokens>\d+)_context_(?P<cn>\d+)\(",
    r"sq(?P<csq>\d+)sk(?P<csk>\d+)sqsq(?P<csqsq>\d+)sqsk(?P<csqsk>\d+)",
    r"\)_generation_(?P<gn>\d+)\(",
    r"sq(?P<gsq>\d+)sk(?P<gsk>\d+)sqsq(?P<gsqsq>\d+)sqsk(?P<gsqsk>\d+)\)$"))
#: Rotary embeddings as one op: vLLM's (csrc/torch_bindings.cpp) and sgl-kernel's
#: (sgl-kernel/csrc/common_extension.cc).
SERVING_ROPE_OPS = frozenset({"_C::rotary_embedding", "_C::batched_rotary_embedding", "sgl_kernel::rotary_embedding",
                              "sgl_kernel::apply_rope_pos_ids_cos_sin_cache"})
#: Serving engines' GEMM wrappers around ``aten::linear``: vLLM's ROCm GEMM op
#: (vllm/model_executor/layers/utils.py ``rocm_unquantized_gemm``) and aiter's, which SGLang calls
#: on ROCm (aiter/ops/gemm_op_a16w16.py). Read as the projection inside them.
SERVING_GEMM_OPS = frozenset({"vllm::rocm_unquantized_gemm", "aiter::gemm_a16w16"})
#: A serving model's QK-norm as one op: SGLang's ``apply_qk_norm`` (python/sglang/srt/models/utils.py)
#: under its kernel-shape profiler, read through ``serving.canonical``.
SERVING_QK_NORM_OPS = frozenset({"sglang_profiler::utils_apply_qk_norm"})
#: Bookkeeping between vLLM's graph pieces: weak references to the pieces' outputs
#: (vllm/utils/torch_utils.py ``weak_ref_tensor``); no work of the model's.
SERVING_BOOKKEEPING_OPS = frozenset({"_C::weak_ref_tensor"})
#: Kernels that are a serving engine's attention core, matched by substring: vLLM's Triton unified
#: attention (vllm/attention/ops/triton_unified_attention.py ``kernel_unified_attention_2d``/``_3d``),
#: its CUDA paged attention (csrc/attention/paged_attention_v1.cu, _v2.cu) and its ROCm one
#: (csrc/rocm/attention.cu ``paged_attention_ll4mi_*``).
VLLM_TRITON_KERNELS = ("kernel_unified_attention",)
VLLM_PAGED_KERNELS = ("paged_attention_v1_kernel", "paged_attention_v2_kernel")
VLLM_ROCM_PAGED_KERNELS = ("paged_attention_ll4mi",)
