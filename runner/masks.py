"""Attention masks for the runner: one ``--mask`` spec (``tb_attn_plugin.vocab.masks``) built as a
``flex_attention`` ``BlockMask`` and, for the dense implementations, as the same mask in a
boolean tensor, so that sparse and dense runs compute the same attention.

Both come from one ``mask_mod`` (``mask_mod(b, h, q_idx, kv_idx) -> bool``, True: attend):
``create_block_mask`` evaluates it block by block, and ``dense_mask`` evaluates it on every
(query, key) pair with broadcasting. The block-sparse mask's random block table is drawn from
its own generator seeded with the run's seed, so every layer and every rerun draws the same.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from tb_attn_plugin.vocab.masks import BLOCK_SIZE, MaskSpec

__all__ = ["MaskInfo", "build_block_mask", "dense_mask", "mask_info", "mask_mod"]

MaskMod = Callable[[Any, Any, torch.Tensor, torch.Tensor], torch.Tensor]


def mask_mod(spec: MaskSpec, seq: int, *, causal: bool, device: torch.device | str = "cpu",
             seed: int = 0) -> MaskMod:
    """The ``mask_mod`` of ``spec`` for self-attention over ``seq`` tokens."""
    kind = spec.kind
    if kind == "causal":
        def causal_mod(b: Any, h: Any, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
            return q >= k
        return causal_mod
    if kind == "sliding":
        w = int(spec.value)  # type: ignore[arg-type]
        if causal:
            def sliding_causal(b: Any, h: Any, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
                return (q >= k) & (q - k < w)
            return sliding_causal

        def sliding(b: Any, h: Any, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
            return (q - k < w) & (k - q < w)
        return sliding
    if kind == "document":
        n = int(spec.value)  # type: ignore[arg-type]
        doc = torch.arange(seq, device=device) * n // seq  # token -> its document

        def document(b: Any, h: Any, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
            same = doc[q] == doc[k]
            return same & (q >= k) if causal else same
        return document
    if kind == "prefix":
        p = int(spec.value)  # type: ignore[arg-type]

        def prefix(b: Any, h: Any, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
            return (k < p) | (q >= k)
        return prefix
    if kind == "block":
        keep = block_table(float(spec.value), seq, seed=seed).to(device)  # type: ignore[arg-type]

        def block(b: Any, h: Any, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
            kept = keep[q // BLOCK_SIZE, k // BLOCK_SIZE]
            return kept & (q >= k) if causal else kept
        return block
    raise ValueError(f"unknown mask kind {kind!r}")


def block_table(density: float, seq: int, *, seed: int = 0) -> torch.Tensor:
    """Which (query block, key block) pairs a block-sparse mask keeps: each with probability
    ``density``, the diagonal always (no query without keys)."""
    n = -(-seq // BLOCK_SIZE)
    gen = torch.Generator().manual_seed(seed)
    keep = torch.rand(n, n, generator=gen) < density
    keep.fill_diagonal_(True)
    return keep


def dense_mask(mod: MaskMod, seq: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """The (seq, seq) boolean mask (True: attend) that ``mod`` describes."""
    idx = torch.arange(seq, device=device)
    return mod(None, None, idx[:, None], idx[None, :]).expand(seq, seq).contiguous()


def build_block_mask(mod: MaskMod, seq: int, device: torch.device | str = "cpu") -> Any:
    """A ``BlockMask`` for every batch and head (they share it) at the default block size."""
    from torch.nn.attention.flex_attention import create_block_mask

    return create_block_mask(mod, None, None, seq, seq, device=str(device), BLOCK_SIZE=BLOCK_SIZE)


@dataclass(frozen=True)
class MaskInfo:
    """What the run metadata records of a mask: its spec, the share of (query, key) pairs it
    keeps, and the share of ``BLOCK_SIZE`` blocks that have any pair kept (the blocks
    ``flex_attention`` computes)."""

    spec: str
    kept: float
    blocks: float
    block_size: int = BLOCK_SIZE

    def to_dict(self) -> dict[str, Any]:
        return {"spec": self.spec, "kept": self.kept, "blocks": self.blocks, "block_size": self.block_size}


def mask_info(spec: MaskSpec, dense: torch.Tensor) -> MaskInfo:
    """The kept shares of ``dense`` (the mask's boolean tensor), computed from it: the
    element share exactly, the block share as ``create_block_mask`` counts it (a block is
    computed when any of its pairs is kept)."""
    seq = dense.size(-1)
    n = -(-seq // BLOCK_SIZE)
    padded = torch.zeros(n * BLOCK_SIZE, n * BLOCK_SIZE, dtype=torch.bool, device=dense.device)
    padded[:seq, :seq] = dense
    any_kept = padded.view(n, BLOCK_SIZE, n, BLOCK_SIZE).any(dim=3).any(dim=1)
    return MaskInfo(spec=str(spec), kept=float(dense.sum().item()) / dense.numel(),
                    blocks=float(any_kept.sum().item()) / any_kept.numel())
