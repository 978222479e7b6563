"""Approximate attention for the built-in transformer: linear, random-feature and int8 attention.

Each function takes q (B, H, T, D), k and v (B, H, T, D) with the kv heads already expanded,
and returns the attention output (B, H, T, D). Every phase runs in its scope (``n``: the
block's ``_PhaseNames``; ``on``: scopes recorded), so a trace shows the cost of each step.

- ``linear_attention`` (``linear-elu``): softmax(q·kᵀ) replaced by the kernel φ(q)·φ(k)ᵀ with
  φ(x) = elu(x) + 1 (Katharopoulos et al., 2020, "Transformers are RNNs"). Not causal, the keys
  and values are summed once into a state φ(K)ᵀV (D×Dv) and a normalizer Σφ(k): O(T·D·Dv)
  instead of O(T²·D). Causal, the sequence is cut into chunks of ``CHUNK`` tokens: each chunk
  reads the state of every chunk before it (a prefix sum over chunks) and computes the pairs
  within itself exactly, as a C×C masked product.
- ``performer`` : the same linear attention with FAVOR+ positive orthogonal random features
  (Choromanski et al., 2021, "Rethinking Attention with Performers"), whose kernel estimates
  exp(q·kᵀ/√D), so that it approximates softmax attention itself; the error falls as the
  number of features M grows.
- ``int8_qk_attention`` (``int8-qk``): SageAttention's int8 Q·Kᵀ (Zhang et al., 2025). K is
  smoothed (its mean over tokens subtracted, which leaves softmax unchanged), Q and K are
  quantized to int8 with one scale per block of tokens, Q·Kᵀ runs in int32
  (``torch._int_mm``), the scores are dequantized, and softmax runs in fp32 and P·V in the
  model's dtype.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from runner.scoping import scope

__all__ = ["CHUNK", "K_BLOCK", "Q_BLOCK", "elu_features", "feature_map", "int8_qk_attention", "linear_attention",
           "orthogonal_features", "performer_features", "quantize_blocks"]

#: Tokens per chunk of causal linear attention: the exact C×C products within a chunk, the
#: prefix state between chunks.
CHUNK = 64
#: Tokens per quantization block of Q and K (SageAttention's defaults).
Q_BLOCK = 128
K_BLOCK = 64
#: Added to the random features so that no key's weight is exactly 0 (FAVOR+'s stabilizer).
FEATURE_EPS = 1e-6


def elu_features(x: torch.Tensor) -> torch.Tensor:
    """φ(x) = elu(x) + 1: positive, so that every weight and the normalizer are > 0."""
    return F.elu(x) + 1.0


def orthogonal_features(m: int, d: int, generator: torch.Generator) -> torch.Tensor:
    """FAVOR+'s random projection (m, d): blocks of d orthogonal rows (QR of a Gaussian matrix),
    each row scaled to the norm of a Gaussian vector, so that every row is distributed as
    N(0, I) while the rows of a block are exactly orthogonal."""
    blocks = []
    for _ in range(math.ceil(m / d)):
        g = torch.randn(d, d, generator=generator)
        q, _ = torch.linalg.qr(g)
        blocks.append(q.T)
    w = torch.cat(blocks)[:m]
    norms = torch.randn(m, d, generator=generator).norm(dim=1, keepdim=True)
    return w * norms


def performer_features(x: torch.Tensor, omega: torch.Tensor, *, query: bool) -> torch.Tensor:
    """FAVOR+'s positive features of q or k (…, T, D) -> (…, T, M), with
    E[φ(q)·φ(k)] = exp(q·k/√D). The stabilizer subtracted before exp cancels in the
    normalization: per query row for queries, one constant per head for keys."""
    d, m = x.size(-1), omega.size(0)
    x = x * d**-0.25  # so that the kernel's exp(x·y) is exp(q·k/√D)
    proj = x @ omega.T.to(x.dtype)  # (…, T, M)
    sq_norm = (x * x).sum(-1, keepdim=True) / 2
    stab = proj.amax(-1, keepdim=True) if query else proj.amax((-2, -1), keepdim=True)
    # (exp(proj - |x|²/2 - stab) + eps) / √M, in three passes over the (…, T, M) features.
    return torch.exp(proj - (sq_norm + stab.detach() + 0.5 * math.log(m))).add_(FEATURE_EPS / math.sqrt(m))


def feature_map(q: torch.Tensor, k: torch.Tensor, omega: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """φ(q), φ(k): FAVOR+'s with the random projection ``omega`` (performer), else elu + 1."""
    if omega is None:
        return elu_features(q), elu_features(k)
    return performer_features(q, omega, query=True), performer_features(k, omega, query=False)


def linear_attention(fq: torch.Tensor, fk: torch.Tensor, v: torch.Tensor, causal: bool, n: Any, on: bool,
                     chunk: int = CHUNK, above: torch.Tensor | None = None) -> torch.Tensor:
    """Σⱼ φ(qᵢ)·φ(kⱼ) vⱼ / Σⱼ φ(qᵢ)·φ(kⱼ) over the keys j each query i sees, from the features
    fq (B, H, T, F), fk (B, H, T, F) and v (B, H, T, Dv). ``above``: a boolean (chunk, chunk) or
    larger matrix, True above the diagonal, built once by the caller (else here, per call)."""
    if not causal:
        with scope(n.kv_state, on):
            kv = fk.transpose(-2, -1) @ v  # (B, H, F, Dv): the whole sequence's state
            z = fk.sum(-2).unsqueeze(-1)  # (B, H, F, 1): its normalizer
            num = fq @ kv  # (B, H, T, Dv)
        with scope(n.normalize, on):
            return num / (fq @ z)
    B, H, T, _ = fq.shape
    c = min(chunk, T)
    pad = -T % c
    if pad:  # zero features past the end: padded keys weigh nothing, padded queries are dropped
        fq, fk, v = (F.pad(t, (0, 0, 0, pad)) for t in (fq, fk, v))
    nc = (T + pad) // c
    fq, fk, v = (t.reshape(B, H, nc, c, t.size(-1)) for t in (fq, fk, v))  # (B, H, N, C, ·)
    with scope(n.kv_state, on):
        kv = fk.transpose(-2, -1) @ v  # (B, H, N, F, Dv): each chunk's own state
        kv = kv.cumsum(2) - kv  # the state of the chunks before each chunk
        z = fk.sum(-2)  # (B, H, N, F)
        z = (z.cumsum(2) - z).unsqueeze(-1)  # (B, H, N, F, 1)
        num = fq @ kv  # (B, H, N, C, Dv)
        den = fq @ z  # (B, H, N, C, 1)
    with scope(n.qk_matmul, on):
        a = fq @ fk.transpose(-2, -1)  # (B, H, N, C, C): the pairs within each chunk
    with scope(n.mask, on):
        if above is None:
            above = torch.ones(c, c, dtype=torch.bool, device=a.device).triu(1)
        a.masked_fill_(above[:c, :c], 0.0)  # a is ours: in place
    with scope(n.av_matmul, on):
        num = num + a @ v
    with scope(n.normalize, on):
        out = num / (den + a.sum(-1, keepdim=True))
        return out.reshape(B, H, nc * c, -1)[:, :, :T]


def quantize_blocks(x: torch.Tensor, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """x (…, T, D) -> int8 values and one fp32 scale per token (its block's amax / 127): each
    block of ``block`` tokens shares a scale, as SageAttention's per-block quantization does."""
    T = x.size(-2)
    pad = -T % block
    xp = F.pad(x.float(), (0, 0, 0, pad)) if pad else x.float()
    blocks = xp.reshape(*x.shape[:-2], (T + pad) // block, block, x.size(-1))
    scale = (blocks.abs().amax((-2, -1), keepdim=True) / 127.0).clamp_min(1e-12)
    q = torch.round(blocks / scale).clamp_(-127, 127).to(torch.int8)
    per_token = scale.expand(*scale.shape[:-2], block, 1).reshape(*x.shape[:-2], T + pad)
    return q.reshape(*x.shape[:-2], T + pad, x.size(-1))[..., :T, :], per_token[..., :T]


def int8_qk_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: float,
                      blocked: torch.Tensor | None, dropout_p: float, n: Any, on: bool) -> torch.Tensor:
    """softmax(dequant(int8(Q)·int8(K - mean K)ᵀ)·scale, masked) · V. ``blocked`` (T, T): True
    where a query must not see a key (causal or ``--mask``), None for full attention."""
    B, H, T, D = q.shape
    if q.is_cuda and (T <= 16 or T % 8 or D % 8):
        # cuBLAS's int8 GEMM needs m > 16 and k, n multiples of 8.
        raise NotImplementedError(f"int8-qk on CUDA needs seq > 16 and seq and head_dim multiples of 8 "
                                  f"(torch._int_mm); got seq {T}, head_dim {D}")
    with scope(n.quantize, on):
        k = k - k.mean(dim=-2, keepdim=True)  # smoothing: the same shift for every key
        q8, sq = quantize_blocks(q, Q_BLOCK)  # (B, H, T, D) int8, (B, H, T) fp32
        k8, sk = quantize_blocks(k, K_BLOCK)
    with scope(n.qk_matmul, on):
        # _int_mm is a 2-D GEMM: one call per (batch, head).
        s32 = torch.stack([torch._int_mm(q8[b, h], k8[b, h].T) for b in range(B) for h in range(H)])
    with scope(n.dequantize, on):
        att = s32.view(B, H, T, T).float() * (sq.unsqueeze(-1) * sk.unsqueeze(-2))  # fp32 scores
    with scope(n.scale, on):
        att = att * scale
    if blocked is not None:
        with scope(n.mask, on):
            att = att.masked_fill(blocked, float("-inf"))
    with scope(n.softmax, on):
        att = F.softmax(att, dim=-1)  # fp32
    if dropout_p > 0.0:
        with scope(n.dropout, on):
            att = F.dropout(att, p=dropout_p, training=True)
    with scope(n.av_matmul, on):
        return att.to(v.dtype) @ v
