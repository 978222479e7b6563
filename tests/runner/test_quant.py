"""``runner.quant``: ``--quant int8`` quantizes the attention's projections, and only them; a model
without any is unsupported, with the reason."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from runner.config import Unsupported
from runner.quant import quantize_projections


class _Attn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q_proj, self.o_proj = nn.Linear(32, 32), nn.Linear(32, 32)


class _Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.self_attn, self.mlp = _Attn(), nn.Linear(32, 32)


def test_the_projections_are_quantized_and_nothing_else() -> None:
    model = _Model()
    quantize_projections(model, "int8", torch.device("cpu"))
    quantized = {name for name, m in model.named_modules()
                 if isinstance(m, nn.Linear) and type(m.weight) is not nn.Parameter}
    assert quantized == {"self_attn.q_proj", "self_attn.o_proj"}
    assert type(model.mlp.weight) is nn.Parameter
    x = torch.randn(1, 4, 32)
    assert model.self_attn.q_proj(x).shape == (1, 4, 32)  # still a projection, in int8


def test_a_model_without_projections_is_unsupported() -> None:
    with pytest.raises(Unsupported, match=r"^--quant int8: no nn.Linear attention projection in Sequential$"):
        quantize_projections(nn.Sequential(nn.Linear(4, 4)), "int8", torch.device("cpu"))
