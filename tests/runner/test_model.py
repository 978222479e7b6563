"""``runner.model``: the built-in transformer's implementations compute the same attention, each
phase of each block in its scope while a profiler records, none when unscoped."""

from __future__ import annotations

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from runner.config import ModelConfig
from runner.model import Transformer
from tb_attn_plugin.vocab.scopes import format_scope, parse_scope

CFG = ModelConfig(layers=2, heads=2, d_model=16, seq=16, batch=1, vocab=32, mode="inference")
IDS = torch.randint(0, 32, (1, 16), generator=torch.Generator().manual_seed(0))


def _logits(impl: str, **changes: object) -> torch.Tensor:
    torch.manual_seed(0)  # the same weights for every implementation
    with torch.no_grad():
        return Transformer(CFG.replace(impl=impl, **changes)).eval()(IDS)


@pytest.mark.parametrize("impl", ["naive-inplace", "sdpa", "sdpa-math", "flex-eager"])
@pytest.mark.parametrize("causal", [True, False])
def test_exact_implementations_agree(impl: str, causal: bool) -> None:
    torch.testing.assert_close(_logits(impl, causal=causal), _logits("naive", causal=causal), atol=1e-5, rtol=1e-5)


def test_causal_logits_ignore_later_tokens() -> None:
    torch.manual_seed(0)
    model = Transformer(CFG).eval()
    changed = IDS.clone()
    changed[0, -1] = (IDS[0, -1] + 1) % 32
    with torch.no_grad():
        a, b = model(IDS), model(changed)
    assert a.shape == (1, 16, 32) and torch.equal(a[:, :-1], b[:, :-1]) and not torch.equal(a[:, -1], b[:, -1])


def _scopes(model: Transformer) -> list[str]:
    with profile(activities=[ProfilerActivity.CPU]) as prof, torch.no_grad():
        model(IDS)
    return [e.name for e in prof.events() if e.name.startswith("tbattn.")]


def test_every_phase_of_every_block_is_scoped_in_order() -> None:
    names = _scopes(Transformer(CFG.replace(impl="naive")))
    phases = [(s.layer, s.phase) for n in names if (s := parse_scope(n)) is not None and s.phase is not None]
    order = ["qkv_proj", "qk_matmul", "scale", "mask", "softmax", "av_matmul", "out_proj"]
    assert phases == [(layer, p) for layer in (0, 1) for p in order]
    assert sum(1 for n in names if n.startswith(format_scope(0) + " ") or n == format_scope(0)) == 1  # one block scope
    assert _scopes(Transformer(CFG, scoped=False)) == []
