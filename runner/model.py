"""The built-in transformer: a small pre-LayerNorm decoder with pluggable attention.

Attention comes in several implementations (see ``runner.config.IMPLS``). Every phase of every
block runs inside a scope from ``tb_attn_plugin.scopes``, so traces show where attention spends
time and memory. Shapes in comments: B batch, T sequence, C d_model, H heads, Hkv kv heads,
D head dim.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from runner.config import ModelConfig
from runner.scoping import scope
from tb_attn_plugin.scopes import Phase, format_scope

__all__ = ["TORCH_DTYPES", "Attention", "Transformer"]

TORCH_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}


class _PhaseNames:
    """Scope names for one (layer, head), formatted once instead of on every call."""

    def __init__(self, layer: int, head: int | None) -> None:
        self.block = format_scope(layer, head=head)
        for phase in Phase:
            setattr(self, phase.name.lower(), format_scope(layer, head=head, phase=phase))

    # Attributes set above, declared for type checkers.
    qkv_proj: str
    kv_expand: str
    qk_matmul: str
    scale: str
    mask: str
    softmax: str
    dropout: str
    av_matmul: str
    sdpa: str
    out_proj: str


class Attention(nn.Module):
    """Multi-head (or grouped-query) self-attention with a selectable implementation."""

    def __init__(self, cfg: ModelConfig, layer: int, *, scoped: bool = True) -> None:
        super().__init__()
        self.cfg = cfg
        self.layer = layer
        self.scoped = scoped
        self.n_head = cfg.heads
        self.n_kv_head = cfg.n_kv_heads
        self.head_dim = cfg.head_dim
        kv_dim = self.n_kv_head * self.head_dim
        self.qkv = nn.Linear(cfg.d_model, cfg.d_model + 2 * kv_dim)
        self.out_proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.scale = 1.0 / math.sqrt(self.head_dim)
        # True above the diagonal: the positions a causal query must not see. Built once, not
        # per call, so that the mask phase measures masking rather than mask construction.
        self.causal_mask: torch.Tensor
        self.register_buffer(
            "causal_mask", torch.ones(cfg.seq, cfg.seq, dtype=torch.bool).triu(1), persistent=False
        )
        self.names = _PhaseNames(layer, None)
        self.head_names = [_PhaseNames(layer, h) for h in range(cfg.heads)] if cfg.per_head else []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        n = self.names
        on = self.scoped
        with scope(n.block, on):
            with scope(n.qkv_proj, on):
                kv_dim = self.n_kv_head * self.head_dim
                q, k, v = self.qkv(x).split([C, kv_dim, kv_dim], dim=-1)
                q = q.view(B, T, self.n_head, self.head_dim).transpose(1, 2)  # (B, H, T, D)
                k = k.view(B, T, self.n_kv_head, self.head_dim).transpose(1, 2)  # (B, Hkv, T, D)
                v = v.view(B, T, self.n_kv_head, self.head_dim).transpose(1, 2)  # (B, Hkv, T, D)
            if self.cfg.per_head:
                y = self._per_head(q, k, v)
            else:
                y = self._core(q, k, v, n)  # (B, H, T, D)
            with scope(n.out_proj, on):
                y = y.transpose(1, 2).contiguous().view(B, T, C)
                y = self.out_proj(y)
        return y

    def _per_head(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        group = self.n_head // self.n_kv_head
        outs = []
        for h, names in enumerate(self.head_names):
            g = h // group
            with scope(names.block, self.scoped):
                outs.append(self._core(q[:, h : h + 1], k[:, g : g + 1], v[:, g : g + 1], names))
        return torch.cat(outs, dim=1)

    def _core(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, n: _PhaseNames) -> torch.Tensor:
        impl = self.cfg.impl
        on = self.scoped
        dropout_p = self.cfg.dropout if self.training else 0.0
        if impl.startswith("sdpa"):
            with scope(n.sdpa, on):
                return F.scaled_dot_product_attention(
                    q,
                    k,
                    v,
                    dropout_p=dropout_p,
                    is_causal=self.cfg.causal,
                    enable_gqa=q.size(1) != k.size(1),
                )
        T = q.size(-2)
        if q.size(1) != k.size(1):
            with scope(n.kv_expand, on):
                rep = q.size(1) // k.size(1)
                k = k.repeat_interleave(rep, dim=1)  # (B, H, T, D)
                v = v.repeat_interleave(rep, dim=1)
        with scope(n.qk_matmul, on):
            att = q @ k.transpose(-2, -1)  # (B, H, T, T): the materialized scores
        with scope(n.scale, on):
            att = att * self.scale
        if self.cfg.causal:
            with scope(n.mask, on):
                mask = self.causal_mask[:T, :T]
                if impl == "naive-inplace":
                    att.masked_fill_(mask, float("-inf"))
                else:
                    att = att.masked_fill(mask, float("-inf"))  # a full (B, H, T, T) copy
        with scope(n.softmax, on):
            att = F.softmax(att, dim=-1)
        if dropout_p > 0.0:
            with scope(n.dropout, on):
                att = F.dropout(att, p=dropout_p, training=True)
        with scope(n.av_matmul, on):
            return att @ v  # (B, H, T, D)


class _MLP(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(cfg.d_model, 4 * cfg.d_model)
        self.proj = nn.Linear(4 * cfg.d_model, cfg.d_model)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.proj(F.gelu(self.fc(x))))


class _Block(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int, scoped: bool) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = Attention(cfg, layer, scoped=scoped)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.mlp = _MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Transformer(nn.Module):
    """Token and position embeddings, ``cfg.layers`` blocks, and a language-model head."""

    def __init__(self, cfg: ModelConfig, *, scoped: bool = True) -> None:
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab, cfg.d_model)
        self.wpe = nn.Embedding(cfg.seq, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(_Block(cfg, i, scoped) for i in range(cfg.layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        T = idx.size(1)  # token ids (B, T) -> logits (B, T, vocab)
        pos = torch.arange(T, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))
