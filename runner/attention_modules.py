"""Which of a model's modules are its attention blocks: by type (``nn.MultiheadAttention``) or by
a class name ending in ``Attention``, outermost only, and the paths they are named by. Shared by
instrumentation, attention statistics and the accuracy check."""

from __future__ import annotations

from torch import nn

__all__ = ["WRAPPER_PARTS", "attention_modules", "module_path"]

#: The parts that wrappers add to a module's path: FSDP's, activation checkpointing's,
#: ``torch.compile``'s. A block keeps the path its model gives it, wrapped or not.
WRAPPER_PARTS = frozenset({"_fsdp_wrapped_module", "_checkpoint_wrapped_module", "_orig_mod"})


def module_path(name: str) -> str:
    """``name`` (as ``named_modules`` gives it) without the wrappers' parts:
    ``model.layers.0._fsdp_wrapped_module.self_attn`` is ``model.layers.0.self_attn``."""
    return ".".join(part for part in name.split(".") if part not in WRAPPER_PARTS)


def attention_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The model's attention blocks found by type or name (rules 1 and 2 above), outermost only,
    in ``named_modules`` order: (module path, module)."""
    found: list[tuple[str, nn.Module]] = []
    for name, module in model.named_modules():
        if any(name.startswith(outer + ".") or (not outer and name) for outer, _ in found):
            continue
        if isinstance(module, nn.MultiheadAttention) or type(module).__name__.endswith("Attention"):
            found.append((name, module))
    return found
