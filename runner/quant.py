"""``--quant``: the attention's projections quantized by torchao (int8 weights, activations
quantized per token at run time)."""

from __future__ import annotations

import warnings

import torch
from torch import nn

from runner.config import Unsupported

__all__ = ["quantize_projections"]


#: Where each model family keeps its attention projections (module paths end so): --quant's targets.
_PROJECTIONS = (".attn.qkv", ".attn.out_proj", ".attn.c_attn", ".attn.c_proj", ".q_proj", ".k_proj", ".v_proj",
                ".o_proj", ".self.query", ".self.key", ".self.value", ".output.dense")


def quantize_projections(model: nn.Module, scheme: str, device: torch.device) -> None:
    """--quant: the attention's q/k/v and output projections quantized by torchao (int8: int8
    weights, activations quantized per token at run time). Raises ``Unsupported`` with the
    reason where torchao is missing or cannot run here."""
    try:
        from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_
    except ImportError as exc:
        raise Unsupported(f"--quant {scheme} needs torchao (pip install torchao): {exc}") from None

    def target(module: nn.Module, fqn: str) -> bool:
        return isinstance(module, nn.Linear) and ("." + fqn).endswith(_PROJECTIONS)

    if not any(target(m, name) for name, m in model.named_modules()):
        raise Unsupported(f"--quant {scheme}: no nn.Linear attention projection in {type(model).__name__}")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torchao's deprecation notices
            quantize_(model, Int8DynamicActivationInt8WeightConfig(), filter_fn=target)
            probe = next(m for name, m in model.named_modules() if target(m, name))
            probe(torch.zeros(1, 16, probe.in_features, device=device, dtype=probe.weight.dtype))
    except (RuntimeError, NotImplementedError, TypeError, AssertionError) as exc:
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise Unsupported(f"--quant {scheme} on {device.type}: {reason}") from None
