"""The attention backends the analysis names: each backend once, with its label and its family.

A backend is what really ran a layer's attention, read from its op and kernel names by
``analysis.backend`` (``detect_backend``), whose rules say how each one is told apart. This module
holds the names only, and imports nothing from ``analysis``. ``Backend`` is a ``str`` enum: a
member equals its name as a string, and msgspec and ``json`` write it as that string, so summaries,
caches and responses read the same whether they hold members or the plain strings decoded from
JSON. Groups of backends are named here, beside the names, built from the families;
``tests/vocab/test_vocabulary.py`` keeps backend names as literals out of every other module.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["APPROXIMATE_BACKENDS", "DENSE_WORK_BACKENDS", "LINEAR_BACKENDS", "MODEL_LINEAR_BACKENDS",
           "UNFUSED_BACKENDS", "Backend", "Family", "of_family"]


class Family(StrEnum):
    """How a backend computes attention, as far as the analysis cares."""

    FUSED = "fused"  # PyTorch's fused SDPA kernels: scores in tiles on chip, never stored, every pair computed
    UNFUSED = "unfused"  # op by op: every (query, key) score computed and stored, the mask applied afterwards
    SPARSE = "sparse"  # compiled flex_attention: a generated kernel that skips the blocks a mask empties
    COMPILED = "compiled"  # torch.compile'd attention: Inductor's kernels, whatever they fuse
    QUANTIZED = "quantized"  # the scores computed in integers (approximate)
    LINEAR = "linear"  # linear attention: a state of the keys and values, no (Sq, Sk) scores
    LIBRARY = "library"  # an attention library's op or kernel (docs/production.md)
    SERVING = "serving"  # a serving engine's attention (vLLM, SGLang): ``<engine>-<implementation>``
    UNKNOWN = "unknown"  # nothing in the layer names a backend


class Backend(StrEnum):
    """One attention backend: its name in summaries (the value), ``label`` (in words) and ``family``."""

    label: str
    family: Family

    # Called once per member, with its (value, label, family). ``Backend("flash")`` looks a member
    # up by value and never calls it: the defaults only tell the type checker that it may.
    def __new__(cls, value: str, label: str = "", family: Family = Family.UNKNOWN) -> Backend:
        member = str.__new__(cls, value)
        member._value_ = value
        member.label = label
        member.family = family
        return member

    # PyTorch: SDPA's kernels, flex_attention, torch.compile, and what the runner writes by hand.
    CUDNN = "cudnn", "SDPA's cuDNN kernel", Family.FUSED
    EFFICIENT = "efficient", "SDPA's memory-efficient kernel", Family.FUSED
    ROCM_FLASH = "rocm-flash", "SDPA's flash kernel on ROCm (aotriton)", Family.FUSED
    FLASH = "flash", "SDPA's flash kernel", Family.FUSED
    CPU_FLASH = "cpu-flash", "SDPA's flash kernel for the CPU", Family.FUSED
    FLEX = "flex", "compiled flex_attention", Family.SPARSE
    FLEX_EAGER = "flex-eager", "eager flex_attention (its unfused reference path)", Family.UNFUSED
    COMPILED = "compiled", "torch.compile'd attention", Family.COMPILED
    INT8_QK = "int8-qk", "int8 q·kᵀ (integer scores)", Family.QUANTIZED
    PERFORMER = "performer", "Performer (linear attention, random features)", Family.LINEAR
    LINEAR = "linear", "linear attention (elu feature map)", Family.LINEAR
    GATED_DELTANET = "gated-deltanet", "Gated DeltaNet (linear attention with a gated delta rule)", Family.LINEAR
    SDPA_MATH = "sdpa-math", "SDPA's math backend", Family.UNFUSED
    NAIVE = "naive", "hand-written attention (matmul and softmax ops)", Family.UNFUSED
    UNKNOWN = "unknown", "unknown", Family.UNKNOWN
    # Serving engines.
    VLLM_TRITON = "vllm-triton", "vLLM's Triton unified attention kernel", Family.SERVING
    VLLM_PAGED = "vllm-paged", "vLLM's CUDA paged attention", Family.SERVING
    VLLM_ROCM_PAGED = "vllm-rocm-paged", "vLLM's ROCm paged attention", Family.SERVING
    VLLM_UNIFIED = "vllm-unified", "vLLM's attention op (its kernel unseen)", Family.SERVING
    VLLM_UNIFIED_MLA = "vllm-unified-mla", "vLLM's MLA attention op (its kernel unseen)", Family.SERVING
    SGLANG_AITER_PAGED = "sglang-aiter-paged", "SGLang's aiter paged decode", Family.SERVING
    SGLANG_AITER_PREFILL = "sglang-aiter-prefill", "SGLang's aiter paged prefill", Family.SERVING
    SGLANG_TRITON = "sglang-triton", "SGLang's Triton attention kernels", Family.SERVING
    SGLANG_UNIFIED = "sglang-unified", "SGLang's attention op (its kernel unseen)", Family.SERVING
    # Attention libraries (docs/production.md).
    FLASH_ATTN = "flash-attn", "FlashAttention 2", Family.LIBRARY
    FLASH_ATTN_3 = "flash-attn-3", "FlashAttention 3", Family.LIBRARY
    FLASH_ATTN_4 = "flash-attn-4", "FlashAttention 4 (cute-DSL)", Family.LIBRARY
    FLASHINFER = "flashinfer", "FlashInfer", Family.LIBRARY
    TRTLLM_FMHA = "trtllm-fmha", "TensorRT-LLM's FMHA", Family.LIBRARY
    AITER = "aiter", "AMD aiter", Family.LIBRARY
    CK_FMHA = "ck-fmha", "Composable Kernel's FMHA", Family.LIBRARY
    XFORMERS = "xformers", "xformers' CUTLASS op", Family.LIBRARY
    XFORMERS_CK = "xformers-ck", "xformers on ROCm (Composable Kernel)", Family.LIBRARY
    XFORMERS_FLASH = "xformers-flash", "xformers' FlashAttention wrappers", Family.LIBRARY
    SAGE = "sage", "SageAttention", Family.LIBRARY
    AITER_SAGE = "aiter-sage", "aiter's SageAttention (Triton, ROCm)", Family.LIBRARY
    TE_FUSED = "te-fused", "Transformer Engine's fused attention", Family.LIBRARY


def of_family(*families: Family) -> frozenset[Backend]:
    """The backends of the given families."""
    return frozenset(b for b in Backend if b.family in families)


#: Linear attention: no (Sq, Sk) scores, a state of the keys and values instead.
LINEAR_BACKENDS = of_family(Family.LINEAR)
#: Linear attention that is what the model computes, not a stand-in for its softmax attention: a
#: hybrid model's Gated DeltaNet layers (Qwen3-Next, Qwen3.5) were trained so.
MODEL_LINEAR_BACKENDS = frozenset({Backend.GATED_DELTANET})
#: Backends whose results only approximate exact attention: linear attention in place of softmax
#: attention and integer scores (a library's quantized kernel, SageAttention's, is a library's: not
#: counted).
APPROXIMATE_BACKENDS = (LINEAR_BACKENDS - MODEL_LINEAR_BACKENDS) | of_family(Family.QUANTIZED)
#: Backends that compute and store every (query, key) score, op by op.
UNFUSED_BACKENDS = of_family(Family.UNFUSED)
#: Backends that compute every score whatever the mask, which they apply to the scores: op by op,
#: and SDPA's fused kernels (which take the mask as a tensor).
DENSE_WORK_BACKENDS = of_family(Family.UNFUSED, Family.FUSED)
