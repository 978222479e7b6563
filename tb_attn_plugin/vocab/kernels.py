"""Names of what runs beside ATen's ops: ``torch.compile``'s generated (Inductor) kernels, CUDA/HIP
graph capture and replay, and collectives, as the compiler, the runtimes and the libraries name
them (kernels and runtime calls matched by substring or pattern).
"""

from __future__ import annotations

from tb_attn_plugin.vocab.aten import COPY_OPS, DTYPE_CONVERT_OPS, KV_EXPAND_OPS, LAYOUT_OPS, ROPE_OPS, SDPA_OPS

__all__ = [
    "COLLECTIVE_KERNELS",
    "GRAPH_CAPTURE_BEGIN",
    "GRAPH_CAPTURE_BOOKKEEPING_OPS",
    "GRAPH_CAPTURE_END",
    "GRAPH_LAUNCH",
    "GRAPH_NODE_CALLS",
    "INDUCTOR_ARITH_ORIGINS",
    "INDUCTOR_EPILOGUE_OP",
    "INDUCTOR_GEMM_ORIGINS",
    "INDUCTOR_KERNEL_PREFIX",
    "INDUCTOR_LAYOUT_OP",
    "INDUCTOR_LAYOUT_ORIGINS",
    "INDUCTOR_NORM_OP",
    "INDUCTOR_NORM_ORIGINS",
    "INDUCTOR_NORM_PIECE_ORIGINS",
    "INDUCTOR_RMS_ORIGINS",
    "INDUCTOR_ROPE_ORIGINS",
    "INDUCTOR_TEMPLATE",
    "REPLAY_KV_WRITE_KERNELS",
    "REPLAY_ROPE_KERNELS",
    "SERVING_COLLECTIVE_OPS",
]

# -- Inductor's generated kernels ----------------------------------------------------------------
#: torch.compile's Triton kernels are named ``triton_<category>_fused_<origins>_<n>``: the first three
#: letters of the category (pointwise, reduction, persistent reduction, template, foreach), then
#: the sorted names of the ATen ops the kernel was generated from, joined by "_" (PyTorch
#: ``torch/_inductor/codegen/triton.py`` and ``get_fused_kernel_name`` in ``torch/_inductor/utils.py``).
#: The op events Inductor records around each launch carry the same name.
INDUCTOR_KERNEL_PREFIX = "triton_"
INDUCTOR_TEMPLATE = "tem"
#: A template kernel from these is a GEMM with its epilogue fused: a projection.
INDUCTOR_GEMM_ORIGINS = frozenset({"mm", "addmm", "linear"})
#: Origins that only move, convert or join data (the SDPA op names the layout kernel that feeds
#: it its q, k and v, or takes its output apart).
INDUCTOR_LAYOUT_ORIGINS = frozenset({
    *(op.removeprefix("aten::") for op in LAYOUT_OPS | COPY_OPS | DTYPE_CONVERT_OPS | KV_EXPAND_OPS),
    "cat", "stack", "constant_pad_nd", "copy", "_to_copy", "expand", "clone", "permute",
    *(op.removeprefix("aten::") for op in SDPA_OPS)})
#: A norm: whole, or RMSNorm's pieces (``mean`` with ``rsqrt``).
INDUCTOR_NORM_ORIGINS = frozenset({"native_layer_norm", "layer_norm", "rms_norm", "_fused_rms_norm",
                                   "native_group_norm", "var_mean"})
INDUCTOR_RMS_ORIGINS = frozenset({"mean", "rsqrt"})
INDUCTOR_NORM_PIECE_ORIGINS = frozenset({"mean", "rsqrt", "pow", "sqrt", "sum"})
#: Element-wise arithmetic (``addmm`` in a pointwise kernel is the bias of an extern GEMM).
INDUCTOR_ARITH_ORIGINS = frozenset({"add", "sub", "mul", "div", "rsub", "addmm", "reciprocal"})
#: Rotary embeddings: rotate_half's ``neg``, the tables' ``cos`` and ``sin``, the complex form.
INDUCTOR_ROPE_ORIGINS = frozenset(op.removeprefix("aten::") for op in ROPE_OPS)
#: What an Inductor kernel is read as, for the roles and the block's extent (``analysis.inductor``):
#: a projection's element-wise prologue or epilogue (bias, scale, residual: no ATen op says that),
#: a layout kernel as a view, a norm as ``layer_norm``.
INDUCTOR_EPILOGUE_OP = "inductor::epilogue"
INDUCTOR_LAYOUT_OP = "aten::view"
INDUCTOR_NORM_OP = "aten::layer_norm"

# -- CUDA/HIP graphs ------------------------------------------------------------------------------
#: Runtime calls that capture a stream into a graph: kernels launched between them are recorded
#: into the graph, not run (their launches show; their kernels do not).
GRAPH_CAPTURE_BEGIN = frozenset({"cudaStreamBeginCapture", "hipStreamBeginCapture", "cuStreamBeginCapture",
                                 "cudaStreamBeginCaptureToGraph"})
GRAPH_CAPTURE_END = frozenset({"cudaStreamEndCapture", "hipStreamEndCapture", "cuStreamEndCapture"})
#: Replaying a captured graph: its kernels run under this one launch, not under the ops that
#: captured them.
GRAPH_LAUNCH = frozenset({"cudaGraphLaunch", "hipGraphLaunch", "cuGraphLaunch"})
#: Kernels a graph replay runs around its attention cores, matched by substring: the paged KV
#: write (vLLM csrc/cache_kernels.cu ``reshape_and_cache_kernel``, ``reshape_and_cache_flash_kernel``,
#: ``concat_and_cache_mla_kernel``; SGLang's ``store_kvcache``; FlashInfer's ``AppendPagedKVCacheKernel``)
#: and RoPE (vLLM csrc/pos_encoding_kernels.cu ``rotary_embedding_kernel``,
#: ``batched_rotary_embedding_kernel``; FlashInfer's ``BatchQKApplyRotary``).
REPLAY_KV_WRITE_KERNELS = ("reshape_and_cache_kernel", "reshape_and_cache_flash_kernel", "concat_and_cache_mla_kernel",
                           "store_kvcache", "AppendPagedKVCacheKernel")
REPLAY_ROPE_KERNELS = ("rotary_embedding_kernel", "BatchQKApplyRotary")
#: Runtime and driver calls that add a node to the graph a stream is capturing, matched by substring:
#: kernel launches (``cudaLaunchKernel``, ``cudaLaunchKernelExC``, ``cuLaunchKernel(Ex)``,
#: ``hipLaunchKernel``, ``hipModuleLaunchKernel``, ``hipExtModuleLaunchKernel``...) and asynchronous
#: copies and sets, each one kernel, memcpy or memset of every replay, in the capture's order.
GRAPH_NODE_CALLS = ("LaunchKernel", "LaunchCooperativeKernel", "MemcpyAsync", "Memcpy2DAsync", "Memcpy3DAsync",
                    "MemcpyHtoDAsync", "MemcpyDtoDAsync", "MemcpyDtoHAsync", "MemcpyWithStream", "MemsetAsync",
                    "Memset2DAsync", "MemsetD8Async", "MemsetD16Async", "MemsetD32Async")

# -- collectives ------------------------------------------------------------------------------------
#: Collectives that are a serving engine's own ops, and what each is (``analysis.collectives``): vLLM's
#: (vllm/distributed/parallel_state.py ``direct_register_custom_op(op_name="all_reduce")`` and its
#: siblings) and its custom all-reduce's op (csrc/torch_bindings.cpp ``_C_custom_ar``).
SERVING_COLLECTIVE_OPS = {"vllm::all_reduce": "all_reduce", "vllm::all_gather": "all_gather",
                          "vllm::reduce_scatter": "reduce_scatter", "_C_custom_ar::all_reduce": "all_reduce"}
#: Collective kernels not named ``ncclDevKernel_<Coll>...``, matched by substring, and what each is:
#: vLLM's custom all-reduce (csrc/custom_all_reduce.cuh ``cross_device_reduce_1stage``, ``_2stage``,
#: ``_half_butterfly``) and TensorRT-LLM's all-reduce fused with the residual and norm as FlashInfer ships it
#: (include/flashinfer/comm/trtllm_allreduce_fusion.cuh ``allreduce_fusion_kernel_oneshot_lamport``,
#: ``allreduce_fusion_kernel_twoshot_sync``). NCCL's own kernels (src/device/generate.py
#: ``ncclDevKernel_AllReduce_Sum_bf16_RING_LL``; src/device/symmetric/generate.py
#: ``ncclSymkDevKernel_AllReduce_...``; RCCL keeps the names) are read by their pattern there.
COLLECTIVE_KERNELS = {"cross_device_reduce_": "all_reduce", "allreduce_fusion_kernel": "all_reduce"}
#: What ``torch.cuda.graph`` runs as it begins a capture, between the ops captured before and after:
#: the RNG state's seed and offset filled for the graph (``capture_prologue`` in PyTorch's
#: ``aten/src/ATen/cuda/CUDAGeneratorImpl.cpp``).
GRAPH_CAPTURE_BOOKKEEPING_OPS = frozenset({"aten::fill_"})
