"""``runner.torch_models``: PyTorch's own attention modules in small language models, causal when
asked (a later token leaves earlier logits alone), with ``nn.MultiheadAttention`` returning its
weights for ``naive`` (its unfused path)."""

from __future__ import annotations

import pytest
import torch

from runner.config import ModelConfig
from runner.torch_models import MHAStack, TorchEncoder

CFG = ModelConfig(layers=2, heads=2, d_model=16, seq=8, batch=1, vocab=32, mode="inference")


@pytest.mark.parametrize("cls", [TorchEncoder, MHAStack])
@pytest.mark.parametrize("causal", [True, False])
def test_logits_and_causality(cls: type[TorchEncoder | MHAStack], causal: bool) -> None:
    torch.manual_seed(0)
    model = cls(CFG.replace(causal=causal)).eval()
    ids = torch.randint(0, CFG.vocab, (1, CFG.seq))
    changed = ids.clone()
    changed[0, -1] = (ids[0, -1] + 1) % CFG.vocab
    with torch.no_grad():
        out, out_changed = model(ids), model(changed)
    assert out.shape == (1, CFG.seq, CFG.vocab)
    # Causal: the earlier positions never see the last token; otherwise every position does.
    assert torch.allclose(out[:, :-1], out_changed[:, :-1]) == causal
    assert not torch.allclose(out[:, -1], out_changed[:, -1])


def test_the_shared_mask_is_sliced_per_call() -> None:
    model = MHAStack(CFG)
    mask = model.mask_for(3)
    assert mask is not None and mask.tolist() == [[False, True, True], [False, False, True], [False, False, False]]
    assert MHAStack(CFG.replace(causal=False)).mask_for(3) is None


def test_naive_asks_for_the_weights() -> None:
    assert [b.need_weights for b in MHAStack(CFG.replace(impl="naive")).blocks] == [True, True]  # type: ignore[union-attr]
    assert [b.need_weights for b in MHAStack(CFG.replace(impl="sdpa")).blocks] == [False, False]  # type: ignore[union-attr]
