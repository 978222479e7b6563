"""Which of a model's modules are its attention blocks: by type (``nn.MultiheadAttention``) or by
a class name ending in ``Attention``, outermost only. Shared by instrumentation, attention
statistics and the accuracy check."""

from __future__ import annotations

from torch import nn

__all__ = ["attention_modules"]


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
