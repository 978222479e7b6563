"""The PyTorch models the runner profiles besides its own: ``torch:encoder``
(``nn.TransformerEncoder`` of ``nn.TransformerEncoderLayer``) and ``torch:mha`` (a stack of
``nn.MultiheadAttention`` blocks), scoped by ``instrument()``."""

from __future__ import annotations

import torch
from torch import nn

from runner.config import ModelConfig

__all__ = ["MHAStack", "TorchEncoder"]


class _LanguageModel(nn.Module):
    """Token embeddings in, vocabulary logits out, and the causal mask its layers share (built once,
    sliced per call)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.causal = cfg.causal
        self.emb = nn.Embedding(cfg.vocab, cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab)
        self.mask: torch.Tensor
        self.register_buffer("mask", torch.ones(cfg.seq, cfg.seq, dtype=torch.bool).triu(1),  # True: masked out
                             persistent=False)

    def mask_for(self, length: int) -> torch.Tensor | None:
        return self.mask[:length, :length] if self.causal else None


class TorchEncoder(_LanguageModel):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg)
        layer = nn.TransformerEncoderLayer(cfg.d_model, cfg.heads, 4 * cfg.d_model, cfg.dropout,
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, cfg.layers, enable_nested_tensor=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.emb(ids), mask=self.mask_for(ids.size(1)), is_causal=self.causal))


class _MHABlock(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = nn.MultiheadAttention(cfg.d_model, cfg.heads, dropout=cfg.dropout, batch_first=True)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.mlp = nn.Sequential(nn.Linear(cfg.d_model, 4 * cfg.d_model), nn.GELU(),
                                 nn.Linear(4 * cfg.d_model, cfg.d_model))
        self.need_weights = cfg.impl == "naive"

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=self.need_weights)[0]
        return x + self.mlp(self.ln2(x))


class MHAStack(_LanguageModel):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg)
        self.blocks = nn.ModuleList(_MHABlock(cfg) for _ in range(cfg.layers))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        mask = self.mask_for(ids.size(1))
        x = self.emb(ids)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(x)
