"""``analysis.backend`` names the attention backend a layer really ran from its ops, kernels and phase scopes, the
first matching rule winning, and tells attention kernels from GEMMs; the tests give each rule its names by hand."""

from __future__ import annotations

import pytest

from tb_attn_plugin.analysis.ops.backend import detect_backend, is_attention_kernel
from tb_attn_plugin.vocab.backends import Backend

SDPA_FLASH = "aten::_scaled_dot_product_flash_attention"
SDPA_MATH = "aten::_scaled_dot_product_attention_math"
CUDNN_CONV = "sm80_xmma_fprop_implicit_gemm_indexed_f16f16_f16f32_cudnn"  # a convolution cuDNN runs, no attention
EFFICIENT_KERNEL = "fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<...>::Params)"


# -- PyTorch's ops --------------------------------------------------------------------------------

@pytest.mark.parametrize(("ops", "backend"), [
    (["aten::scaled_dot_product_attention", "aten::_scaled_dot_product_cudnn_attention"], Backend.CUDNN),
    (["aten::_scaled_dot_product_efficient_attention", "aten::_efficient_attention_forward"], Backend.EFFICIENT),
    ([SDPA_FLASH, "aten::_flash_attention_forward"], Backend.FLASH),
    (["aten::_scaled_dot_product_flash_attention_for_cpu"], Backend.CPU_FLASH),
    (["FlexAttentionAutogradOp"], Backend.FLEX_EAGER),
    (["CompiledFunction"], Backend.COMPILED),
    ([SDPA_MATH, "aten::_safe_softmax", "aten::bmm"], Backend.SDPA_MATH),
])
def test_each_sdpa_op_names_its_backend_with_the_op_as_evidence(ops: list[str], backend: Backend) -> None:
    got, evidence = detect_backend(ops, [])
    assert got == backend.value
    # The evidence is the rule's own op names among the layer's, sorted: the dispatcher op and _safe_softmax are not.
    others = {"aten::scaled_dot_product_attention", "aten::_safe_softmax", "aten::bmm"}
    assert evidence == sorted(o for o in ops if o not in others)


def test_op_rules_go_in_their_documented_order() -> None:
    # A fused SDPA op inside a compiled region is the fused kernel's; of a fused op and the math op, the fused one
    # comes first.
    assert detect_backend(["CompiledFunction", SDPA_FLASH], [])[0] == Backend.FLASH
    assert detect_backend(["aten::_scaled_dot_product_flash_attention_for_cpu", SDPA_MATH], [])[0] == Backend.CPU_FLASH
    # flex's eager path runs inside a region compiled with the eager backend: checked before "compiled".
    assert detect_backend(["FlexAttentionAutogradOp", "CompiledFunction"], [])[0] == Backend.FLEX_EAGER


def test_a_compiled_regions_recompile_number_is_not_part_of_its_name() -> None:
    # "Torch-Compiled Region: 3/2" is frame 3's third compile: the same region.
    assert detect_backend(["Torch-Compiled Region: 3/2"], []) == (Backend.COMPILED.value, ["Torch-Compiled Region"])


# -- kernels --------------------------------------------------------------------------------------

@pytest.mark.parametrize(("kernel", "backend"), [
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1", Backend.CUDNN),
    ("cudnn_infer_fmha_fprop_sm80", Backend.CUDNN),
    (EFFICIENT_KERNEL, Backend.EFFICIENT),
    ("mem_efficient_attention_forward", Backend.EFFICIENT),
    ("attn_fwd", Backend.ROCM_FLASH),
    ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4>>(pytorch_flash::Flash_fwd_params)",
     Backend.FLASH),
    ("triton_tem_fused_flex_attention_0", Backend.FLEX),
    ("triton_per_fused__softmax_0", Backend.COMPILED),
])
def test_each_kernel_rule_names_its_backend(kernel: str, backend: Backend) -> None:
    assert detect_backend([], [kernel]) == (backend.value, [kernel])


def test_kernels_decide_before_ops() -> None:
    # The SDPA flash op's name says what was asked; the kernel says what ran.
    assert detect_backend([SDPA_FLASH], [EFFICIENT_KERNEL])[0] == Backend.EFFICIENT
    # Hand-written attention compiled by Inductor keeps its op names but runs Triton kernels.
    compiled = detect_backend(["aten::softmax", "aten::bmm"], ["triton_poi_fused_0"])
    assert compiled == (Backend.COMPILED.value, ["triton_poi_fused_0"])


def test_a_cudnn_convolution_kernel_is_not_cudnn_attention() -> None:
    # "cudnn" in a GEMM's name is noise: the op decides, and without one nothing is known.
    assert detect_backend([SDPA_FLASH], [CUDNN_CONV]) == (Backend.FLASH.value, [SDPA_FLASH])
    assert detect_backend([], [CUDNN_CONV]) == (Backend.UNKNOWN.value, [])


def test_kernel_evidence_is_the_first_three_distinct_names_in_order() -> None:
    kernels = ["z_flash_fwd", "a_flash_fwd", "m_flash_fwd", "a_flash_fwd", "b_flash_fwd"]
    # Four distinct names, sorted: a, b, m, z; the first three are kept.
    assert detect_backend([], kernels) == (Backend.FLASH.value, ["a_flash_fwd", "b_flash_fwd", "m_flash_fwd"])


# -- phases and op patterns -----------------------------------------------------------------------

def test_a_flex_phase_is_compiled_flex_unless_the_eager_path_shows() -> None:
    compiled = detect_backend(["Torch-Compiled Region: 0/0"], [], ["flex"])
    assert compiled == (Backend.FLEX.value, ["flex phase", "Torch-Compiled Region"])
    # Inference runs no autograd function: softmax and a matmul inside the flex phase are the reference path.
    eager = detect_backend(["aten::_softmax", "aten::bmm"], [], ["flex"])
    assert eager == (Backend.FLEX_EAGER.value, ["aten::_softmax", "aten::bmm"])
    # A softmax alone is not the eager path (the compiled kernel has neither).
    assert detect_backend(["aten::_softmax"], [], ["flex"]) == (Backend.FLEX.value, ["flex phase"])


def test_int8_scores_need_the_integer_gemm_and_a_softmax() -> None:
    assert detect_backend(["aten::_int_mm", "aten::_softmax", "aten::bmm"], []) == (
        Backend.INT8_QK.value, ["aten::_int_mm", "aten::_softmax"])
    # An int8 GEMM alone is a quantized linear, not attention's scores.
    assert detect_backend(["aten::_int_mm"], [])[0] == Backend.UNKNOWN


def test_the_feature_map_tells_performer_from_linear() -> None:
    assert detect_backend(["aten::exp", "aten::matmul"], [], ["feature_map"]) == (
        Backend.PERFORMER.value, ["feature_map phase", "aten::exp"])
    assert detect_backend(["aten::elu", "aten::matmul"], [], ["feature_map"]) == (
        Backend.LINEAR.value, ["feature_map phase", "aten::elu"])
    # Without scopes linear attention has no op of its own: the same ops are nothing.
    assert detect_backend(["aten::elu", "aten::matmul"], []) == (Backend.UNKNOWN.value, [])


def test_a_compiled_phase_with_no_other_sign_is_compiled() -> None:
    assert detect_backend(["aten::addmm"], [], ["compiled"]) == (Backend.COMPILED.value, ["compiled phase"])


@pytest.mark.parametrize("ops", [["aten::softmax"], ["aten::bmm"], ["aten::softmax", "aten::add"]])
def test_naive_attention_needs_both_a_softmax_and_a_matmul(ops: list[str]) -> None:
    assert detect_backend(ops, []) == (Backend.UNKNOWN.value, [])
    assert detect_backend([*ops, "aten::softmax", "aten::matmul"], [])[0] == Backend.NAIVE


def test_nothing_known_is_unknown_and_a_plain_string() -> None:
    backend, evidence = detect_backend([], [], [])
    assert (backend, evidence) == ("unknown", []) and type(backend) is str


def test_any_iterables_are_read_once() -> None:
    backend, _ = detect_backend(iter(["aten::softmax", "aten::bmm"]), iter([]), iter([]))
    assert backend == Backend.NAIVE


# -- is_attention_kernel --------------------------------------------------------------------------

@pytest.mark.parametrize("name", [
    "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1",
    EFFICIENT_KERNEL,
    "attn_fwd",
    "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4>>(pytorch_flash::Flash_fwd_params)",
    "triton_tem_fused_flex_attention_0",
    "kernel_unified_attention_2d",
    "void vllm::paged_attention_v2_kernel<...>(...)",
    "sage_fwd",  # aiter/ops/triton/_triton_kernels/attention/fav3_sage_attention.py
    "chunk_gated_delta_rule_fwd_kernel_h_blockdim64",  # vllm/model_executor/layers/fla/ops/chunk_delta_h.py
    "fused_sigmoid_gating_delta_rule_update_kernel",  # .../fla/ops/fused_sigmoid_gating.py
])
def test_attention_cores_are_attention_kernels(name: str) -> None:
    assert is_attention_kernel(name)


@pytest.mark.parametrize("name", [
    "triton_poi_fused_add_0",  # Inductor runs anything in Triton
    "triton_per_fused__softmax_0",
    CUDNN_CONV,  # "cudnn" alone is too broad
    "cudnn::gemm::computeOffsetsKernel",
    "volta_sgemm_128x64_nn",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64",
    "sage_quant_kernel",  # SageAttention's quantization: the quantize phase, not the core
    "_causal_conv1d_fwd_kernel",  # Gated DeltaNet's convolution, before its core
    "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgs4K)",
    "",
])
def test_gemms_and_generic_kernels_are_not_attention_kernels(name: str) -> None:
    assert not is_attention_kernel(name)


# -- serving engines' ops over an attention library's kernels ---------------------------------------

#: TensorRT-LLM's trtllm-gen FMHA as FlashInfer ships it and vLLM runs it on Blackwell (flashinfer
#: tests/test_artifacts.py lists the cubins; vllm/v1/attention/backends/flashinfer.py calls them).
TRTLLM = "fmhaSm100aKernel_QE4m3KvE2m1OE4m3H128PagedKvCausalP64VarSeqQ128Kv128PersistentContext"
#: FlashInfer's paged prefill (include/flashinfer/attention/prefill.cuh).
FLASHINFER = "void flashinfer::BatchPrefillWithPagedKVCacheKernel<flashinfer::KernelTraits<...> >(...)"


@pytest.mark.parametrize(("kernel", "backend"), [(TRTLLM, Backend.TRTLLM_FMHA), (FLASHINFER, Backend.FLASHINFER),
                                                 ("_ZN5aiter24fmha_fwd_hd128_bf16_rtneE", Backend.AITER)])
def test_vllms_op_names_no_kernel_so_a_librarys_kernel_names_the_backend(kernel: str, backend: Backend) -> None:
    """``vllm::unified_attention_with_output`` dispatches to whatever backend vLLM chose: where the
    layer's kernel names a library's kernel family, the family names the backend, not the op."""
    assert detect_backend(["vllm::unified_attention_with_output", "vllm::unified_kv_cache_update"], [kernel]) == \
        (backend, [kernel])
    assert detect_backend(["vllm::unified_attention_with_output"], []) == (Backend.VLLM_UNIFIED,
                                                                           ["vllm::unified_attention_with_output"])


def test_an_engines_op_that_names_its_implementation_keeps_its_name() -> None:
    """SGLang's profiler op says it ran aiter's paged prefill: the CK kernel under it does not rename it."""
    kernels = ["void ck_tile::kentry<ck_tile::FmhaBatchPrefillWithPagedKVCacheKernel<...> >(...)"]
    assert detect_backend(["sglang_profiler::mha__mha_batch_prefill_3"], kernels)[0] == Backend.SGLANG_AITER_PREFILL


def test_gated_deltanet_is_named_by_its_op_or_its_kernels() -> None:
    """vLLM's ``gdn_attention_core`` (vllm/model_executor/layers/mamba/gdn_linear_attn.py) and the gated delta
    rule's kernels (vllm/model_executor/layers/fla/ops/)."""
    assert detect_backend(["vllm::gdn_attention_core"], ["_causal_conv1d_fwd_kernel"]) == \
        (Backend.GATED_DELTANET, ["vllm::gdn_attention_core"])
    assert detect_backend([], ["fused_recurrent_gated_delta_rule_fwd_kernel"]) == \
        (Backend.GATED_DELTANET, ["fused_recurrent_gated_delta_rule_fwd_kernel"])
    assert Backend.GATED_DELTANET.family.value == "linear"


def test_aiters_sageattention_is_named_by_its_kernel() -> None:
    assert detect_backend([], ["sage_quant_kernel", "sage_fwd"]) == (Backend.AITER_SAGE, ["sage_fwd"])
