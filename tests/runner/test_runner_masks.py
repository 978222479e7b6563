"""``runner.masks``: a ``--mask`` as the boolean (query, key) tensor the dense implementations
apply and as flex's BlockMask, the same pairs kept, with its real density."""

from __future__ import annotations

import pytest
import torch

from runner.masks import build_block_mask, dense_mask, mask_info, mask_mod
from tb_attn_plugin.vocab.masks import BLOCK_SIZE, kept_pairs, parse_mask

S = 256


def test_the_dense_mask_keeps_the_pairs_the_spec_names() -> None:
    """Causal and a sliding window of 3 over 6 positions, by hand: query i sees keys i-2..i."""
    window = dense_mask(mask_mod(parse_mask("sliding:3"), 6, causal=True, seed=0), 6)
    assert window.tolist() == [[q - 2 <= k <= q for k in range(6)] for q in range(6)]
    causal = dense_mask(mask_mod(parse_mask("causal"), 6, causal=True, seed=0), 6)
    assert causal.tolist() == [[k <= q for k in range(6)] for q in range(6)]


@pytest.mark.parametrize("spec", ["causal", "sliding:64", "sliding:200", "document:3", "prefix:100", "block:0.3"])
def test_mask_info_is_the_masks_real_density(spec: str) -> None:
    mask = parse_mask(spec)
    mod = mask_mod(mask, S, causal=True, seed=7)
    info = mask_info(mask, dense_mask(mod, S))
    exact = kept_pairs(mask, S, S, causal=True)
    if exact is not None:
        assert info.kept == exact / (S * S)
    block_mask = build_block_mask(mod, S)
    assert info.blocks == pytest.approx(1 - block_mask.sparsity() / 100, abs=1e-12)
    assert info.block_size == BLOCK_SIZE


def test_block_masks_are_seeded_and_keep_the_diagonal() -> None:
    first = dense_mask(mask_mod(parse_mask("block:0.25"), 1024, causal=False, seed=5), 1024)
    again = dense_mask(mask_mod(parse_mask("block:0.25"), 1024, causal=False, seed=5), 1024)
    other = dense_mask(mask_mod(parse_mask("block:0.25"), 1024, causal=False, seed=6), 1024)
    assert torch.equal(first, again) and not torch.equal(first, other)
    assert bool(first.diagonal().all())
