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
  projection, or ``elu``. Without scopes linear attention has no op that is its own (matmuls,
  elementwise ops, no softmax), so it is not recognized.
- ``sdpa-math``: op ``aten::_scaled_dot_product_attention_math`` (with ``aten::_safe_softmax``).
- ``naive``: softmax and matmul/bmm ops without SDPA.
- ``unknown``: none of the above.
"""

from __future__ import annotations

from collections.abc import Iterable

from tb_attn_plugin.ops import (
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

__all__ = ["BACKENDS", "detect_backend"]

BACKENDS = ("cudnn", "efficient", "rocm-flash", "flash", "cpu-flash", "flex", "flex-eager", "compiled", "int8-qk",
            "performer", "linear", "sdpa-math", "naive", "unknown")

_KERNEL_RULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("cudnn", ("cudnn_generated", "cudnn", "fmha_fprop", "fmha_bprop")),
    ("efficient", ("fmha_cutlass", "mem_efficient", "efficient_attention", "attention_kernel_batched")),
    ("rocm-flash", ("attn_fwd",)),
    ("flash", ("flash_fwd", "flash::", "flash_bwd", "flash_attn")),
    ("flex", ("flex_attention", "flex_decoding", "triton_tem_fused_flex")),
    ("compiled", ("triton_",)),
)
_OP_RULES: tuple[tuple[str, frozenset[str]], ...] = (
    ("cudnn", frozenset({SDPA_CUDNN_OP})),
    ("efficient", frozenset({SDPA_EFFICIENT_OP, EFFICIENT_FORWARD_OP})),
    ("flash", frozenset({SDPA_FLASH_OP, FLASH_FORWARD_OP})),
    ("cpu-flash", frozenset({SDPA_CPU_FLASH_OP})),
    ("flex-eager", frozenset({FLEX_EAGER_OP})),
    ("compiled", COMPILED_REGION_OPS),
    ("sdpa-math", frozenset({SDPA_MATH_OP})),
)


def detect_backend(ops: Iterable[str], kernels: Iterable[str], phases: Iterable[str] = ()) -> tuple[str, list[str]]:
    """The backend of one layer's forward attention and the names that show it (``phases``: the
    layer's phase scopes, which name a flex_attention call or a compiled block)."""
    # "Torch-Compiled Region: 0/1" (frame 0, its second compile) -> "Torch-Compiled Region".
    op_set = {COMPILED_REGION_PREFIX if o.startswith(COMPILED_REGION_PREFIX) else o for o in ops}
    phase_set = set(phases)
    kernel_list = list(dict.fromkeys(kernels))
    for backend, needles in _KERNEL_RULES:
        hits = [k for k in kernel_list if any(n in k for n in needles) and not _is_gemm_noise(k, backend)]
        if hits:
            return backend, sorted(hits)[:3]
    if "flex" in phase_set:
        # The eager path computes the scores op by op (its autograd function shows only when
        # gradients are recorded); the compiled kernel shows no softmax or matmul of its own.
        eager = (op_set & {FLEX_EAGER_OP}) or ((op_set & SOFTMAX_OPS) and (op_set & MATMUL_OPS))
        if eager:
            return "flex-eager", sorted(op_set & ({FLEX_EAGER_OP} | SOFTMAX_OPS | MATMUL_OPS))[:3]
        return "flex", ["flex phase", *sorted(op_set & COMPILED_REGION_OPS)][:3]
    for backend, names in _OP_RULES:
        hits = sorted(op_set & names)
        if hits:
            return backend, hits
    if INT_MM_OP in op_set and op_set & SOFTMAX_OPS:
        return "int8-qk", sorted({INT_MM_OP} | (op_set & SOFTMAX_OPS))
    if "feature_map" in phase_set:
        if op_set & EXP_OPS:
            return "performer", ["feature_map phase", *sorted(op_set & EXP_OPS)]
        return "linear", ["feature_map phase", *sorted(op_set & ELU_OPS)]
    if "compiled" in phase_set:
        return "compiled", ["compiled phase"]
    if op_set & SOFTMAX_OPS and op_set & MATMUL_OPS:
        return "naive", sorted((op_set & SOFTMAX_OPS) | (op_set & MATMUL_OPS))
    return "unknown", []


def _is_gemm_noise(kernel: str, backend: str) -> bool:
    # cuDNN also names plain convolution/gemm kernels; only attention ones count.
    return backend == "cudnn" and "fmha" not in kernel and "cudnn_generated" not in kernel and "flash" not in kernel
