"""Which attention implementation really ran, per layer, from op and kernel names. The names,
with their labels and families, are ``tb_attn_plugin.vocab.backends.Backend``; the rules are here.

Kernel names decide first, then op names (the first rule that matches wins). An attention
library's op or kernel (FlashAttention, FlashInfer, TensorRT-LLM, aiter, Composable Kernel,
xformers, SageAttention, Transformer Engine: ``LIBRARY_BACKENDS``, docs/production.md) decides
before the rules below, and a serving engine's attention op or kernel (vLLM, SGLang:
``SERVING_BACKENDS``, ``<engine>-<implementation>``) before that:

- ``cudnn``: kernels ``cudnn_generated*``, ``*fmha*`` from cuDNN; op
  ``aten::_scaled_dot_product_cudnn_attention`` (cuDNN launches through ``cuLaunchKernelEx``).
- ``efficient``: kernels ``fmha_cutlass*``, ``*mem_efficient*``, ``*efficient_attention*``;
  ops ``aten::_scaled_dot_product_efficient_attention``, ``aten::_efficient_attention_forward``.
- ``rocm-flash``: kernel ``attn_fwd`` (AMD's aotriton flash attention).
- ``flash``: kernels ``*flash_fwd*``, ``*flash::*``; ops ``aten::_scaled_dot_product_flash_attention``,
  ``aten::_flash_attention_forward``.
- ``cpu-flash``: op ``aten::_scaled_dot_product_flash_attention_for_cpu``.
- ``flex``: compiled ``flex_attention``: kernels whose names carry ``flex``, or a ``flex`` phase
  scope with no eager sign (on CPU the generated kernel is not in the trace, only the compiled
  region).
- ``flex-eager``: op ``FlexAttentionAutogradOp``, the autograd function of ``flex_attention``'s
  unfused reference path (which materializes the scores, and runs inside a region compiled with
  the eager backend, so it is checked before ``compiled``); or, in a ``flex`` phase, softmax and
  matmul ops (the reference path without gradients: inference runs no autograd function).
- ``compiled``: kernels ``triton_*``; ops ``CompiledFunction``, ``Torch-Compiled Region``; a
  ``compiled`` phase scope (``--compile``): torch.compile'd dense attention.
- ``int8-qk``: op ``aten::_int_mm`` (an int8 GEMM) with a softmax: the scores computed in
  integers, as SageAttention does (the runner's ``int8-qk``, and anyone's with these ops).
- ``performer``, ``linear``: a ``feature_map`` phase scope (linear attention: the runner's
  ``performer`` and ``linear-elu``), told apart by the feature map's ops: ``exp`` of a random
  projection, or ``elu``. Without scopes such linear attention has no op that is its own (matmuls,
  elementwise ops, no softmax), so it is not recognized. A hybrid model's Gated DeltaNet layers
  are linear attention with ops and kernels of their own (vLLM's ``gdn_attention_core``, the gated
  delta rule's kernels): ``gated-deltanet``, among the serving engines' rules.
- ``sdpa-math``: op ``aten::_scaled_dot_product_attention_math`` (with ``aten::_safe_softmax``).
- ``naive``: softmax and matmul/bmm ops without SDPA.
- ``unknown``: none of the above.
"""

from __future__ import annotations

from collections.abc import Iterable

from tb_attn_plugin.analysis.ops.opnames import canonical
from tb_attn_plugin.vocab import libraries as vocab
from tb_attn_plugin.vocab.aten import (
    COMPILED_REGION_OPS,
    COMPILED_REGION_PREFIX,
    EFFICIENT_FORWARD_OP,
    ELU_OPS,
    EXP_OPS,
    FLASH_FORWARD_OP,
    FLEX_EAGER_OP,
    INT_MM_OP,
    MATMUL_OPS,
    SDPA_CPU_FLASH_OP,
    SDPA_CUDNN_OP,
    SDPA_EFFICIENT_OP,
    SDPA_FLASH_OP,
    SDPA_MATH_OP,
    SOFTMAX_OPS,
)
from tb_attn_plugin.vocab.backends import Backend, Family
from tb_attn_plugin.vocab.scopes import Phase
from tb_attn_plugin.vocab.serving import (
    GDN_KERNELS,
    SERVING_CORE_OPS,
    SGLANG_AITER_DECODE_OPS,
    SGLANG_AITER_PREFILL_OPS,
    SGLANG_CORE_OPS,
    SGLANG_TRITON_OPS,
    VLLM_GDN_OPS,
    VLLM_MLA_OPS,
    VLLM_PAGED_KERNELS,
    VLLM_PAGED_OPS,
    VLLM_ROCM_PAGED_KERNELS,
    VLLM_ROCM_PAGED_OPS,
    VLLM_TRITON_KERNELS,
    VLLM_UNIFIED_OPS,
)

__all__ = ["BACKENDS", "LIBRARY_BACKENDS", "SERVING_BACKENDS", "detect_backend", "is_attention_kernel"]

#: Every backend this module names (``tb_attn_plugin.vocab.backends``): PyTorch's, then the serving
#: engines' and the attention libraries'.
BACKENDS: tuple[Backend, ...] = tuple(Backend)

_KERNEL_RULES: tuple[tuple[Backend, tuple[str, ...]], ...] = (
    (Backend.CUDNN, ("cudnn_generated", "cudnn", "fmha_fprop", "fmha_bprop")),
    (Backend.EFFICIENT, ("fmha_cutlass", "mem_efficient", "efficient_attention", "attention_kernel_batched")),
    (Backend.ROCM_FLASH, ("attn_fwd",)),
    (Backend.FLASH, ("flash_fwd", "flash::", "flash_bwd", "flash_attn")),
    (Backend.FLEX, ("flex_attention", "flex_decoding", "triton_tem_fused_flex")),
    (Backend.COMPILED, ("triton_",)),
)
_OP_RULES: tuple[tuple[Backend, frozenset[str]], ...] = (
    (Backend.CUDNN, frozenset({SDPA_CUDNN_OP})),
    (Backend.EFFICIENT, frozenset({SDPA_EFFICIENT_OP, EFFICIENT_FORWARD_OP})),
    (Backend.FLASH, frozenset({SDPA_FLASH_OP, FLASH_FORWARD_OP})),
    (Backend.CPU_FLASH, frozenset({SDPA_CPU_FLASH_OP})),
    (Backend.FLEX_EAGER, frozenset({FLEX_EAGER_OP})),
    (Backend.COMPILED, COMPILED_REGION_OPS),
    (Backend.SDPA_MATH, frozenset({SDPA_MATH_OP})),
)


def detect_backend(ops: Iterable[str], kernels: Iterable[str], phases: Iterable[str] = ()) -> tuple[str, list[str]]:
    """The backend of one layer's forward attention and the names that show it (``phases``: the
    layer's phase scopes, which name a flex_attention call or a compiled block). The backend is a
    plain string, a ``Backend``'s value: a summary holds builtins only, as it does decoded from JSON."""
    backend, evidence = _detect(ops, kernels, phases)
    return backend.value, evidence


def _detect(ops: Iterable[str], kernels: Iterable[str], phases: Iterable[str]) -> tuple[Backend, list[str]]:
    # "Torch-Compiled Region: 0/1" (frame 0, its second compile) -> "Torch-Compiled Region".
    op_set = {COMPILED_REGION_PREFIX if o.startswith(COMPILED_REGION_PREFIX) else o for o in ops}
    phase_set = set(phases)
    kernel_list = list(dict.fromkeys(kernels))
    serving = _serving_backend(op_set, kernel_list)
    if serving is not None:
        return serving
    library = _library_backend(op_set, kernel_list)
    if library is not None:
        return library
    for backend, needles in _KERNEL_RULES:
        hits = [k for k in kernel_list if any(n in k for n in needles) and not _is_gemm_noise(k, backend)]
        if hits:
            return backend, sorted(hits)[:3]
    if Phase.FLEX in phase_set:
        # The eager path computes the scores op by op (its autograd function shows only when
        # gradients are recorded); the compiled kernel shows no softmax or matmul of its own.
        eager = (op_set & {FLEX_EAGER_OP}) or ((op_set & SOFTMAX_OPS) and (op_set & MATMUL_OPS))
        if eager:
            return Backend.FLEX_EAGER, sorted(op_set & ({FLEX_EAGER_OP} | SOFTMAX_OPS | MATMUL_OPS))[:3]
        return Backend.FLEX, ["flex phase", *sorted(op_set & COMPILED_REGION_OPS)][:3]
    for backend, names in _OP_RULES:
        hits = sorted(op_set & names)
        if hits:
            return backend, hits
    if INT_MM_OP in op_set and op_set & SOFTMAX_OPS:
        return Backend.INT8_QK, sorted({INT_MM_OP} | (op_set & SOFTMAX_OPS))
    if Phase.FEATURE_MAP in phase_set:
        if op_set & EXP_OPS:
            return Backend.PERFORMER, ["feature_map phase", *sorted(op_set & EXP_OPS)]
        return Backend.LINEAR, ["feature_map phase", *sorted(op_set & ELU_OPS)]
    if Phase.COMPILED in phase_set:
        return Backend.COMPILED, ["compiled phase"]
    if op_set & SOFTMAX_OPS and op_set & MATMUL_OPS:
        return Backend.NAIVE, sorted((op_set & SOFTMAX_OPS) | (op_set & MATMUL_OPS))
    return Backend.UNKNOWN, []


# -- serving engines: vLLM, SGLang ---------------------------------------------------------------
# Named ``<engine>-<implementation>``: the implementation is the kernel family where the trace
# names its kernel (``vllm-triton``, ``vllm-paged``), else the engine's op that dispatched it
# (``vllm-unified``: vLLM's backend-agnostic op, the kernel unseen).
SERVING_BACKENDS: tuple[Backend, ...] = tuple(b for b in Backend if b.family is Family.SERVING)
_SERVING_KERNEL_RULES: tuple[tuple[Backend, tuple[str, ...]], ...] = (
    (Backend.VLLM_TRITON, VLLM_TRITON_KERNELS),
    (Backend.VLLM_PAGED, VLLM_PAGED_KERNELS),
    (Backend.VLLM_ROCM_PAGED, VLLM_ROCM_PAGED_KERNELS),
    (Backend.GATED_DELTANET, GDN_KERNELS),
)
_SERVING_OP_RULES: tuple[tuple[Backend, frozenset[str]], ...] = (
    (Backend.GATED_DELTANET, VLLM_GDN_OPS),
    (Backend.VLLM_PAGED, VLLM_PAGED_OPS),
    (Backend.VLLM_ROCM_PAGED, VLLM_ROCM_PAGED_OPS),
    (Backend.VLLM_UNIFIED_MLA, VLLM_MLA_OPS),
    (Backend.VLLM_UNIFIED, VLLM_UNIFIED_OPS),
    (Backend.SGLANG_AITER_PAGED, SGLANG_AITER_DECODE_OPS),
    (Backend.SGLANG_AITER_PREFILL, SGLANG_AITER_PREFILL_OPS),
    (Backend.SGLANG_TRITON, SGLANG_TRITON_OPS),
    (Backend.SGLANG_UNIFIED, SGLANG_CORE_OPS),
)


#: The engines' ops that dispatch to a kernel they do not name: where the layer's kernel names an
#: attention library, the library names the backend (vLLM on Blackwell runs TensorRT-LLM's
#: ``fmhaSm100*`` through FlashInfer, or FlashInfer's own paged prefill, under ``unified_attention``).
_KERNEL_UNSEEN = frozenset({Backend.VLLM_UNIFIED, Backend.VLLM_UNIFIED_MLA, Backend.SGLANG_UNIFIED})


def _serving_backend(ops: set[str], kernels: list[str]) -> tuple[Backend, list[str]] | None:
    """A serving engine's backend, where the layer runs one of its attention ops: its kernel family
    where a kernel names it; else, under an op that names no implementation (``_KERNEL_UNSEEN``), an
    attention library's kernel family (``_LIBRARY_KERNEL_RULES``); else one of PyTorch's kernels
    (``_KERNEL_RULES``, but not ``compiled``: Triton kernels beside a serving op are Inductor's fused
    element-wise work); else the op. None without a serving op or kernel."""
    for backend, needles in _SERVING_KERNEL_RULES:
        hits = [k for k in kernels if any(n in k for n in needles)]
        if hits:
            return backend, sorted(hits)[:3]
    served = {canonical(o) for o in ops} & SERVING_CORE_OPS
    if not served:
        return None
    by_op = next(((backend, sorted(o for o in ops if canonical(o) in names)[:3])
                  for backend, names in _SERVING_OP_RULES if served & names), None)
    if by_op is None or by_op[0] in _KERNEL_UNSEEN:
        for backend, needles in _LIBRARY_KERNEL_RULES:
            hits = [k for k in kernels if any(n in k for n in needles)]
            if hits:
                return backend, sorted(hits)[:3]
    for backend, needles in _KERNEL_RULES:
        hits = [k for k in kernels if any(n in k for n in needles) and not _is_gemm_noise(k, backend)]
        if hits and backend != Backend.COMPILED:
            return backend, sorted(hits)[:3]
    return by_op


# -- attention libraries ------------------------------------------------------------------------
# Named for the library that owns the entry point the trace shows: its op where one shows (the op is
# the library's own; the kernel under it may be another's, as aiter's CK path is Composable Kernel's),
# else its kernel. A library with a path per vendor names the AMD one so (``xformers-ck``); AMD's own
# libraries keep their names (``aiter``, ``ck-fmha``). docs/production.md lists the names.
LIBRARY_BACKENDS: tuple[Backend, ...] = tuple(b for b in Backend if b.family is Family.LIBRARY)
_LIBRARY_OP_RULES: tuple[tuple[Backend, frozenset[str]], ...] = (
    (Backend.FLASH_ATTN, vocab.FA2_OPS),
    (Backend.FLASH_ATTN_3, vocab.FA3_OPS),
    (Backend.AITER, vocab.AITER_ATTENTION_OPS),
    (Backend.XFORMERS_CK, vocab.XFORMERS_CK_OPS),
    (Backend.XFORMERS, vocab.XFORMERS_CUTLASS_OPS),
    (Backend.XFORMERS_FLASH, vocab.XFORMERS_FLASH_OPS),
    (Backend.SAGE, frozenset(vocab.SAGE_OPS)),
    (Backend.TE_FUSED, frozenset({vocab.TE_FUSED_ATTN_OP})),
)
#: Before the SDPA kernels' rules: FlashAttention 4's symbols contain ``flash_fwd``.
_LIBRARY_KERNEL_RULES: tuple[tuple[Backend, tuple[str, ...]], ...] = (
    (Backend.FLASH_ATTN_3, vocab.FA3_KERNELS),
    (Backend.FLASH_ATTN_4, vocab.FA4_KERNELS),
    (Backend.FLASHINFER, vocab.FLASHINFER_KERNELS),
    (Backend.TRTLLM_FMHA, vocab.TRTLLM_FMHA_KERNELS),
    (Backend.AITER, vocab.AITER_ASM_KERNELS),
    (Backend.CK_FMHA, vocab.CK_FMHA_KERNELS),
    (Backend.SAGE, vocab.SAGE_KERNELS),
    (Backend.AITER_SAGE, vocab.AITER_SAGE_KERNELS),
)


def _library_backend(ops: set[str], kernels: list[str]) -> tuple[Backend, list[str]] | None:
    """An attention library's backend: from its op, with the library kernels under it as evidence;
    else from its kernel. None where neither shows."""
    library_kernels = [k for k in kernels if any(n in k for _, needles in _LIBRARY_KERNEL_RULES for n in needles)]
    for backend, names in _LIBRARY_OP_RULES:
        hits = sorted(ops & names)
        if hits:
            return backend, (hits[:2] + sorted(library_kernels)[:1])
    for backend, needles in _LIBRARY_KERNEL_RULES:
        hits = [k for k in kernels if any(n in k for n in needles)]
        if hits:
            return backend, sorted(hits)[:3]
    return None


def _is_gemm_noise(kernel: str, backend: Backend) -> bool:
    # cuDNN also names plain convolution/gemm kernels; only attention ones count.
    return (backend == Backend.CUDNN and "fmha" not in kernel and "cudnn_generated" not in kernel
            and "flash" not in kernel)


#: Too broad for a kernel alone to say "attention": cuDNN runs convolutions too, Triton anything.
_BROAD = frozenset({"cudnn", "triton_"})


def is_attention_kernel(name: str) -> bool:
    """Whether a kernel's name alone says it is an attention core: a serving engine's, a library's
    or one of PyTorch's SDPA kernels (this module's rules, but for needles that name other work
    too), not a GEMM that a rule's needle happens to match."""
    for rules in (_SERVING_KERNEL_RULES, _LIBRARY_KERNEL_RULES, _KERNEL_RULES):
        for backend, needles in rules:
            if backend != Backend.COMPILED and any(n in name for n in needles if n not in _BROAD) \
                    and not _is_gemm_noise(name, backend):
                return True
    return False
