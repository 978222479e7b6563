"""Which attention implementation really ran, per layer, from op and kernel names.

Kernel names decide first, then op names (the first rule that matches wins):

- ``cudnn``: kernels ``cudnn_generated*``, ``*fmha*`` from cuDNN; op
  ``aten::_scaled_dot_product_cudnn_attention`` (cuDNN launches through ``cuLaunchKernelEx``).
- ``efficient``: kernels ``fmha_cutlass*``, ``*mem_efficient*``, ``*efficient_attention*``;
  ops ``aten::_scaled_dot_product_efficient_attention``, ``aten::_efficient_attention_forward``.
- ``rocm-flash``: kernel ``attn_fwd`` (AMD's aotriton flash attention).
- ``flash``: kernels ``*flash_fwd*``, ``*flash::*``; ops ``aten::_scaled_dot_product_flash_attention``,
  ``aten::_flash_attention_forward``.
- ``cpu-flash``: op ``aten::_scaled_dot_product_flash_attention_for_cpu``.
- ``compiled``: kernels ``triton_*``; ops ``CompiledFunction``, ``Torch-Compiled Region``.
- ``sdpa-math``: op ``aten::_scaled_dot_product_attention_math`` (with ``aten::_safe_softmax``).
- ``naive``: softmax and matmul/bmm ops without SDPA.
- ``unknown``: none of the above.
"""

from __future__ import annotations

from collections.abc import Iterable

from tb_attn_plugin.ops import (
    COMPILED_REGION_OPS,
    EFFICIENT_FORWARD_OP,
    FLASH_FORWARD_OP,
    MATMUL_OPS,
    SDPA_CPU_FLASH_OP,
    SDPA_CUDNN_OP,
    SDPA_EFFICIENT_OP,
    SDPA_FLASH_OP,
    SDPA_MATH_OP,
    SOFTMAX_OPS,
)

__all__ = ["BACKENDS", "detect_backend"]

BACKENDS = ("cudnn", "efficient", "rocm-flash", "flash", "cpu-flash", "compiled", "sdpa-math", "naive", "unknown")

_KERNEL_RULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("cudnn", ("cudnn_generated", "cudnn", "fmha_fprop", "fmha_bprop")),
    ("efficient", ("fmha_cutlass", "mem_efficient", "efficient_attention", "attention_kernel_batched")),
    ("rocm-flash", ("attn_fwd",)),
    ("flash", ("flash_fwd", "flash::", "flash_bwd", "flash_attn")),
    ("compiled", ("triton_",)),
)
_OP_RULES: tuple[tuple[str, frozenset[str]], ...] = (
    ("cudnn", frozenset({SDPA_CUDNN_OP})),
    ("efficient", frozenset({SDPA_EFFICIENT_OP, EFFICIENT_FORWARD_OP})),
    ("flash", frozenset({SDPA_FLASH_OP, FLASH_FORWARD_OP})),
    ("cpu-flash", frozenset({SDPA_CPU_FLASH_OP})),
    ("compiled", COMPILED_REGION_OPS),
    ("sdpa-math", frozenset({SDPA_MATH_OP})),
)


def detect_backend(ops: Iterable[str], kernels: Iterable[str]) -> tuple[str, list[str]]:
    """The backend of one layer's forward attention and the names that show it."""
    op_set = set(ops)
    kernel_list = list(dict.fromkeys(kernels))
    for backend, needles in _KERNEL_RULES:
        hits = [k for k in kernel_list if any(n in k for n in needles) and not _is_gemm_noise(k, backend)]
        if hits:
            return backend, sorted(hits)[:3]
    for backend, names in _OP_RULES:
        hits = sorted(op_set & names)
        if hits:
            return backend, hits
    if op_set & SOFTMAX_OPS and op_set & MATMUL_OPS:
        return "naive", sorted((op_set & SOFTMAX_OPS) | (op_set & MATMUL_OPS))
    return "unknown", []


def _is_gemm_noise(kernel: str, backend: str) -> bool:
    # cuDNN also names plain convolution/gemm kernels; only attention ones count.
    return backend == "cudnn" and "fmha" not in kernel and "cudnn_generated" not in kernel and "flash" not in kernel
