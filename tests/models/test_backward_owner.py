"""Backward work belongs to the forward op that created its autograd node (``analysis/attribution/autograd.py``),
on real training steps of models that run a no-op ``aten::to`` just before their SDPA call, scoped
(``instrument()``) and plain.

What was read in the traces (torch 2.13, transformers 5.25):

- ModernBERT: the rotary embedding's ``to`` ops and two ``aten::to`` of q and k (to the dtype they
  have: no copy) carry the SDPA call's sequence number, then ``scaled_dot_product_attention`` and
  ``_scaled_dot_product_flash_attention_for_cpu``. ``ScaledDotProductFlashAttentionForCpuBackward0``
  was the ``to``'s, in no phase: the sdpa phase had 0 backward FLOPs and "other" 2.5 × its forward.
- Falcon: ``where``, ``to``, ``where`` (its mask) between the SDPA call and its kernel op, the same
  number.

The core's backward FLOPs are counted from the fused backward op's shapes: 2.5 × the forward's
2·B·H·Sq·Sk·(D + Dv) (no causal mask here: ModernBERT is bidirectional and Falcon passes its mask
as a tensor).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from tiny import TIMED, Profiled, profile_step

from tb_attn_plugin.types.schema import LayerStats, PhaseStats

transformers = pytest.importorskip("transformers")

B, S, D, H, L = 2, 16, 64, 4, 2
HEAD = D // H
SDPA_FORWARD = 2 * B * H * S * S * (HEAD + HEAD)


def _modernbert() -> tuple[Any, dict[str, torch.Tensor]]:
    c = transformers.ModernBertConfig(vocab_size=64, hidden_size=D, num_hidden_layers=L, num_attention_heads=H,
                                      intermediate_size=4 * D, global_attn_every_n_layers=1, pad_token_id=0,
                                      bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2,
                                      attn_implementation="sdpa")
    return transformers.ModernBertForMaskedLM(c), {"input_ids": torch.randint(3, 64, (B, S))}


def _falcon() -> tuple[Any, dict[str, torch.Tensor]]:
    c = transformers.FalconConfig(vocab_size=64, hidden_size=D, num_hidden_layers=L, num_attention_heads=H,
                                  attn_implementation="sdpa")
    return transformers.FalconForCausalLM(c), {"input_ids": torch.randint(64, (B, S))}


MODELS: dict[str, Callable[[], tuple[Any, dict[str, torch.Tensor]]]] = {"modernbert": _modernbert,
                                                                        "falcon": _falcon}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, bool], Profiled]:
    out = {}
    for model, build in MODELS.items():
        for scoped in (True, False):
            torch.manual_seed(0)
            net, inputs = build()

            def step(net: Any = net, inputs: dict[str, torch.Tensor] = inputs) -> None:
                net(**inputs).logits.float().sum().backward()

            logdir = tmp_path_factory.mktemp(f"{model}-{'scoped' if scoped else 'plain'}")
            out[(model, scoped)] = profile_step(Path(logdir), net, step, scoped=scoped, train=True)
    return out


def _phase(layer: LayerStats, name: str) -> PhaseStats | None:
    return next((p for p in layer.phases if p.phase == name), None)


@pytest.mark.parametrize("scoped", [True, False], ids=["scoped", "plain"])
@pytest.mark.parametrize("model", sorted(MODELS))
def test_the_sdpa_calls_backward_is_in_the_sdpa_phase(runs: dict[tuple[str, bool], Profiled], model: str,
                                                      scoped: bool) -> None:
    _, summary = runs[(model, scoped)]
    assert len(summary.layers) == L
    for layer in summary.layers:
        sdpa, other = _phase(layer, "sdpa"), _phase(layer, "other")
        assert sdpa is not None and sdpa.flops == SDPA_FORWARD
        assert sdpa.backward.flops == 2.5 * SDPA_FORWARD
        assert other is None or other.backward.flops == 0


@pytest.mark.parametrize("model", sorted(MODELS))
def test_scoped_and_plain_agree_on_the_core(runs: dict[tuple[str, bool], Profiled], model: str) -> None:
    """The same core FLOPs forward and backward, whichever way the layers were found. (Falcon's plain
    layers are their core alone: nothing of ours widens its fused ``query_key_value`` block yet.)"""
    (_, scoped), (_, plain) = runs[(model, True)], runs[(model, False)]
    for a, b in zip(scoped.layers, plain.layers, strict=True):
        pa, pb = _phase(a, "sdpa"), _phase(b, "sdpa")
        assert pa is not None and pb is not None
        assert (pa.flops, pa.backward.flops) == (pb.flops, pb.backward.flops)


def test_modernbert_scoped_and_plain_agree_on_every_phase(runs: dict[tuple[str, bool], Profiled]) -> None:
    (_, scoped), (_, plain) = runs[("modernbert", True)], runs[("modernbert", False)]
    for a, b in zip(scoped.layers, plain.layers, strict=True):
        flops = {p.phase: (p.flops, p.backward.flops) for p in a.phases if p.flops or p.backward.flops}
        assert flops == {p.phase: (p.flops, p.backward.flops) for p in b.phases if p.flops or p.backward.flops}
        assert (a.flops, a.backward.flops) == (b.flops, b.backward.flops)
    assert {f.id for f in scoped.findings} - TIMED == {f.id for f in plain.findings} - TIMED
