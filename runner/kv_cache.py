"""The built-in model's KV cache, one per attention layer: ``static`` preallocates (B, Hkv, P+N, D)
for K and V once and writes each step's keys into it; ``dynamic`` grows by ``torch.cat``, copying
the whole cache on every token (as Hugging Face's ``DynamicCache`` does)."""

from __future__ import annotations

import torch

__all__ = ["KVCache"]


class KVCache:
    """One layer's keys and values, (B, Hkv, L, D) each, for the tokens seen so far."""

    def __init__(self, kind: str, max_len: int) -> None:
        self.kind = kind
        self.max_len = max_len
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None
        self.length = 0

    def reset(self) -> None:
        """Forget every token. A static cache keeps its buffers (zeroing them is not needed:
        attention reads only the first ``length`` positions)."""
        self.length = 0
        if self.kind == "dynamic":
            self.k = self.v = None

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add this call's (B, Hkv, T, D) keys and values; the whole cache's, as attention reads
        them."""
        start, end = self.length, self.length + k.size(2)
        if end > self.max_len:
            raise RuntimeError(f"KV cache full: {end} positions, made for {self.max_len}")
        self.length = end
        if self.kind == "dynamic":
            if self.k is None or self.v is None or start == 0:
                self.k, self.v = k, v
            else:
                self.k = torch.cat([self.k, k], dim=2)  # a new (B, Hkv, L, D) tensor: the old one copied
                self.v = torch.cat([self.v, v], dim=2)
            return self.k, self.v
        if self.k is None or self.v is None:
            shape = (k.size(0), k.size(1), self.max_len, k.size(3))
            self.k = torch.empty(shape, dtype=k.dtype, device=k.device)
            self.v = torch.empty(shape, dtype=v.dtype, device=v.device)
        self.k[:, :, start:end].copy_(k)
        self.v[:, :, start:end].copy_(v)
        return self.k[:, :, :end], self.v[:, :, :end]
