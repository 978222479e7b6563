"""Attention masks by name: the ``--mask`` grammar and the work each mask asks for.

This module is the contract between the runner, which builds the masks (``runner.masks``: a
``flex_attention`` ``BlockMask`` and, for the dense implementations, the same mask as a boolean
tensor), and the analysis, which counts the (query, key) pairs a mask keeps to give FLOPs of
the work the mask asks for beside the dense-equivalent. It imports nothing but numpy. The grammar
is documented in ``docs/runner.md`` ("Masks")::

    spec := "causal" | "sliding:" W | "document:" N | "prefix:" P | "block:" DENSITY

- ``causal``: query i sees keys j <= i.
- ``sliding:W``: a window of W keys: 0 <= i - j < W when causal (W keys, the query's own
  included), |i - j| < W otherwise (up to 2W - 1 keys).
- ``document:N``: N documents of equal length (token i is in document i·N // S); a query sees
  only its own document's keys, and only earlier ones when causal.
- ``prefix:P``: prefix-LM: the first P tokens see each other, every later token sees the
  prefix and the tokens before it (j < P or j <= i). Causal after the prefix by definition.
- ``block:DENSITY``: random block-sparse: each (query block, key block) pair of
  ``BLOCK_SIZE`` tokens is kept with probability DENSITY (seeded), the diagonal blocks always,
  so that no query is left without keys; combined with causal when causal. Its kept share comes
  from the draw (the run metadata), not from the spec.

Positions are aligned at the top left, as PyTorch's ``is_causal`` does when the query and key
lengths differ. Every mask but ``block`` keeps one contiguous run of keys per query (``key_ranges``), so
counts are exact integers summed over queries (``kept_pairs``), checked pair by pair against the
definitions above in ``tests/test_masks.py``. The analysis takes a mask's kept share from the run
metadata, where the runner measured it on the mask itself, and from ``kept_pairs`` where the
metadata names a mask without one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["BLOCK_SIZE", "MASK_KINDS", "MaskSpec", "kept_pairs", "key_ranges", "parse_mask"]

MASK_KINDS: tuple[str, ...] = ("causal", "sliding", "document", "prefix", "block")
#: ``flex_attention``'s default block size (queries and keys), the granularity it skips work at.
BLOCK_SIZE = 128
#: Longest spec text read; anything longer is not a mask spec.
_MAX_SPEC = 64


@dataclass(frozen=True, slots=True)
class MaskSpec:
    """One parsed mask. ``value``: W, N or P (int), or the block density (float); None for
    ``causal``."""

    kind: str
    value: int | float | None = None

    def __str__(self) -> str:
        if self.value is None:
            return self.kind
        return f"{self.kind}:{self.value:g}" if isinstance(self.value, float) else f"{self.kind}:{self.value}"


def parse_mask(text: str, *, causal: bool = True) -> MaskSpec:
    """Parse a ``--mask`` spec. Raises ValueError with a one-line message."""
    if not isinstance(text, str) or len(text) > _MAX_SPEC:
        raise ValueError(f"not a mask spec: {str(text)[:_MAX_SPEC]!r}")
    kind, sep, arg = text.strip().partition(":")
    kind = kind.strip().lower()
    if kind not in MASK_KINDS:
        raise ValueError(f"unknown mask {text!r}; use causal, sliding:W, document:N, prefix:P or block:DENSITY")
    if kind == "causal":
        if sep:
            raise ValueError(f"the causal mask takes no value, got {text!r}")
        if not causal:
            raise ValueError("--mask causal contradicts --no-causal")
        return MaskSpec("causal")
    if not sep or not arg.strip():
        raise ValueError(f"{kind} needs a value: {kind}:{_PLACEHOLDER[kind]}")
    if kind == "block":
        try:
            density = float(arg)
        except ValueError:
            raise ValueError(f"block:DENSITY needs a number in (0, 1], got {arg!r}") from None
        if not (0.0 < density <= 1.0) or not math.isfinite(density):
            raise ValueError(f"block density must be in (0, 1], got {arg.strip()}")
        return MaskSpec("block", density)
    try:
        value = int(arg.strip())
    except ValueError:
        raise ValueError(f"{kind}:{_PLACEHOLDER[kind]} needs a whole number, got {arg!r}") from None
    if value <= 0:
        raise ValueError(f"{kind}:{_PLACEHOLDER[kind]} must be > 0, got {value}")
    if kind == "prefix" and not causal:
        raise ValueError("prefix:P is causal after the prefix: drop --no-causal")
    return MaskSpec(kind, value)


_PLACEHOLDER = {"sliding": "W", "document": "N", "prefix": "P", "block": "DENSITY"}


def key_ranges(spec: MaskSpec, sq: int, sk: int, *, causal: bool) -> tuple[np.ndarray, np.ndarray]:
    """For each query, the keys it sees as one range ``[lo, hi)``: every mask here keeps a
    contiguous run of keys per query (not ``block``)."""
    i = np.arange(sq, dtype=np.int64)
    if spec.kind == "causal":
        lo, hi = np.zeros_like(i), i + 1
    elif spec.kind == "sliding":
        w = int(spec.value)  # type: ignore[arg-type]
        lo, hi = i - w + 1, (i + 1 if causal else i + w)
    elif spec.kind == "document":
        n = int(spec.value)  # type: ignore[arg-type]
        doc = i * n // sq
        lo, hi = -(-doc * sk // n), -(-(doc + 1) * sk // n)  # keys j with j * n // sk == doc
        if causal:
            hi = np.minimum(hi, i + 1)
    elif spec.kind == "prefix":
        lo, hi = np.zeros_like(i), np.maximum(i + 1, int(spec.value))  # type: ignore[arg-type]
    else:
        raise ValueError("a block mask is a random draw: it has no key ranges of its own")
    lo = np.clip(lo, 0, sk)
    return lo, np.clip(hi, lo, sk)


def kept_pairs(spec: MaskSpec, sq: int, sk: int, *, causal: bool) -> int | None:
    """The (query, key) pairs ``spec`` keeps for ``sq`` queries and ``sk`` keys; None for a block
    mask (its share comes from its draw)."""
    if spec.kind == "block":
        return None
    if sq <= 0 or sk <= 0:
        return 0
    lo, hi = key_ranges(spec, sq, sk, causal=causal)
    return int((hi - lo).sum())
