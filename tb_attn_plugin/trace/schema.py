"""The trace schema adapter: the one place that knows how torch.profiler traces spell things.

Kineto's chrome-trace JSON has drifted since 2021: capitalised categories in old traces
(``Operator``, ``Kernel``, ``Runtime``), ``External id`` vs ``external id``, memory events with
or without a category and ``Total Allocated``, ``deviceProperties`` vs ``computeProperties``,
ROCm's spellings. Everything downstream sees the normalised ``Kind`` codes and field names
defined here, never raw category strings.
"""

from __future__ import annotations

from enum import IntEnum

__all__ = [
    "BACKWARD_PREFIX",
    "CATEGORY_KIND",
    "DEVICE_PROPERTY_KEYS",
    "MEMORY_EVENT_NAME",
    "MODULE_PREFIX",
    "SHAPE_OPS",
    "STEP_PREFIX",
    "Kind",
    "kind_of",
]


class Kind(IntEnum):
    """Normalised kinds of complete ("X") events."""

    OTHER = 0
    CPU_OP = 1  # an ATen op or autograd function on a CPU thread
    ANNOTATION = 2  # record_function / user annotation on a CPU thread (our scopes, ProfilerStep#N)
    GPU_ANNOTATION = 3  # a user annotation projected on the device timeline
    KERNEL = 4
    MEMCPY = 5
    MEMSET = 6
    RUNTIME = 7  # cudaLaunchKernel, hipLaunchKernel, cuLaunchKernelEx (driver), ...
    MODULE = 8  # nn.Module python_function events (with_modules / with_stack)
    SYNC = 9  # cuda_sync


CATEGORY_KIND: dict[str, Kind] = {
    "cpu_op": Kind.CPU_OP,
    "operator": Kind.CPU_OP,
    "user_annotation": Kind.ANNOTATION,
    "gpu_user_annotation": Kind.GPU_ANNOTATION,
    "kernel": Kind.KERNEL,
    "gpu_memcpy": Kind.MEMCPY,
    "memcpy": Kind.MEMCPY,
    "gpu_memset": Kind.MEMSET,
    "memset": Kind.MEMSET,
    "cuda_runtime": Kind.RUNTIME,
    "runtime": Kind.RUNTIME,
    "cuda_driver": Kind.RUNTIME,
    "cuda_sync": Kind.SYNC,
    "python_function": Kind.MODULE,  # kept only for nn.Module events, see MODULE_PREFIX
}


def kind_of(category: str | None) -> Kind:
    if not category:
        return Kind.OTHER
    return CATEGORY_KIND.get(category.lower(), Kind.OTHER)


MEMORY_EVENT_NAME = "[memory]"
STEP_PREFIX = "ProfilerStep#"
MODULE_PREFIX = "nn.Module: "
BACKWARD_PREFIX = "autograd::engine::evaluate_function: "

#: Ops whose ``Input Dims`` / ``Input type`` / ``Concrete Inputs`` the analysis reads (FLOPs,
#: S×S score sizes, dtypes). Shapes of other ops are skipped while decoding to save memory.
SHAPE_OPS: frozenset[str] = frozenset(
    {
        "aten::mm",
        "aten::bmm",
        "aten::matmul",
        "aten::linear",
        "aten::addmm",
        "aten::baddbmm",
        "aten::softmax",
        "aten::_softmax",
        "aten::_safe_softmax",
        "aten::masked_fill",
        "aten::masked_fill_",
        "aten::scaled_dot_product_attention",
        "aten::_scaled_dot_product_attention_math",
        "aten::_scaled_dot_product_flash_attention",
        "aten::_scaled_dot_product_flash_attention_for_cpu",
        "aten::_scaled_dot_product_efficient_attention",
        "aten::_scaled_dot_product_cudnn_attention",
        "aten::_scaled_dot_product_fused_attention_overrideable",
        "aten::_flash_attention_forward",
        "aten::_efficient_attention_forward",
        "aten::_scaled_dot_product_flash_attention_backward",
        "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
        "aten::_scaled_dot_product_efficient_attention_backward",
        "aten::_scaled_dot_product_cudnn_attention_backward",
        "aten::_flash_attention_backward",
        "aten::_efficient_attention_backward",
        "aten::copy_",
        "aten::to",
        "aten::_to_copy",
        "aten::clone",
    }
)

#: Top-level keys that describe devices, by schema generation.
DEVICE_PROPERTY_KEYS: tuple[str, ...] = ("deviceProperties", "computeProperties")
