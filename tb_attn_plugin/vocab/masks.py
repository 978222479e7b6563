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
lengths differ. Every mask but ``block`` keeps one contiguous run of keys per query, so its kept
pairs are exact integers (``kept_pairs``), checked pair by pair against the definitions above in
``tests/vocab/test_masks.py``. They are computed in closed form, in time independent of the lengths: the
lengths and the mask's value come from run metadata, which anyone can write, and a sequence of
2^31 tokens must cost what 512 does. The analysis takes a mask's kept share from the run
metadata, where the runner measured it on the mask itself, and from ``kept_pairs`` where the
metadata names a mask without one.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from itertools import pairwise

__all__ = ["BLOCK_SIZE", "MASK_KINDS", "MAX_VALUE", "MaskSpec", "kept_pairs", "parse_mask"]

MASK_KINDS: tuple[str, ...] = ("causal", "sliding", "document", "prefix", "block")
#: ``flex_attention``'s default block size (queries and keys), the granularity it skips work at.
BLOCK_SIZE = 128
#: Longest spec text read; anything longer is not a mask spec.
_MAX_SPEC = 64
#: The largest window, document count or prefix a spec may name (a context length's bound,
#: ``scopes.MAX_CONTEXT`` - 1): a larger one is a bad spec, not a number to compute with.
MAX_VALUE = (1 << 31) - 1
#: Documents counted one by one when the query and key lengths differ (equal lengths, the
#: analysis's case, take a closed form): past this many, ``kept_pairs`` gives None.
_MAX_DOCUMENTS = 1 << 16


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
    if not 0 < value <= MAX_VALUE:
        raise ValueError(f"{kind}:{_PLACEHOLDER[kind]} must be in 1..{MAX_VALUE}, got {_clip_digits(value)}")
    if kind == "prefix" and not causal:
        raise ValueError("prefix:P is causal after the prefix: drop --no-causal")
    return MaskSpec(kind, value)


_PLACEHOLDER = {"sliding": "W", "document": "N", "prefix": "P", "block": "DENSITY"}


def _clip_digits(value: int) -> str:
    text = str(value)
    return text if len(text) <= 24 else f"{text[:12]}…({len(text)} digits)"


def kept_pairs(spec: MaskSpec, sq: int, sk: int, *, causal: bool) -> int | None:
    """The (query, key) pairs ``spec`` keeps for ``sq`` queries and ``sk`` keys; None for a block
    mask (its share comes from its draw), and for a document mask over lengths that differ with
    more than ``_MAX_DOCUMENTS`` documents holding queries. Constant time otherwise."""
    if spec.kind == "block":
        return None
    if sq <= 0 or sk <= 0:
        return 0
    if spec.kind == "document":
        return _document_pairs(int(spec.value), sq, sk, causal=causal)  # type: ignore[arg-type]
    lo, hi, kinks = _key_range(spec, sk, causal=causal)
    return _sum_counts(lo, hi, 0, sq, kinks)


KeyBound = Callable[[int], int]


def _key_range(spec: MaskSpec, sk: int, *, causal: bool) -> tuple[KeyBound, KeyBound, list[int]]:
    """Query i's keys as ``[lo(i), hi(i))``, each a clipped linear function of i, and the
    queries at which either may bend."""
    def clip(x: int) -> int:
        return min(max(x, 0), sk)

    if spec.kind == "causal":
        return (lambda i: 0), (lambda i: clip(i + 1)), [sk - 1]
    value = int(spec.value)  # type: ignore[arg-type]
    if spec.kind == "sliding":
        reach = 1 if causal else value  # keys up to i (causal), or up to i + W - 1
        return ((lambda i: clip(i - value + 1)), (lambda i: clip(i + reach)),
                [value - 1, sk + value - 1, -reach, sk - reach])
    if spec.kind == "prefix":
        return (lambda i: 0), (lambda i: clip(max(i + 1, value))), [value - 1, sk - 1]
    raise ValueError(f"no key range for a {spec.kind} mask")


def _sum_counts(lo: KeyBound, hi: KeyBound, start: int, end: int, kinks: list[int]) -> int:
    """Σ over queries i in [start, end) of hi(i) - lo(i) (at least 0), where both are linear
    between ``kinks``: an arithmetic series per stretch, (first + last) · n / 2."""
    cuts = sorted({start, end, *(k for k in kinks if start < k < end)})
    total = 0
    for a, b in pairwise(cuts):
        first, last = max(hi(a) - lo(a), 0), max(hi(b - 1) - lo(b - 1), 0)
        total += (first + last) * (b - a) // 2
    return total


def _constant(value: int, i: int) -> int:
    return value


def _within(lo: int, hi: int, i: int) -> int:
    """Causal keys up to query i, within a document's keys [lo, hi)."""
    return min(max(i + 1, lo), hi)


def _document_pairs(n: int, sq: int, sk: int, *, causal: bool) -> int | None:
    """Pairs within documents: query i is in document i·n // sq, key j in j·n // sk, so document
    d holds the positions [⌈d·len/n⌉, ⌈(d+1)·len/n⌉)."""
    if sq == sk:  # r documents of a + 1 tokens, n - r of a: whatever n, two terms
        a, r = divmod(sq, n)
        if causal:
            return r * (a + 1) * (a + 2) // 2 + (n - r) * a * (a + 1) // 2
        return r * (a + 1) ** 2 + (n - r) * a**2
    if min(n, sq) > _MAX_DOCUMENTS:
        return None

    def bounds(d: int, length: int) -> tuple[int, int]:
        return -(-d * length // n), -(-(d + 1) * length // n)

    docs = range(n) if n <= sq else sorted({i * n // sq for i in range(sq)})
    total = 0
    for d in docs:
        q0, q1 = bounds(d, sq)
        k0, k1 = bounds(d, sk)
        if not causal:
            total += (q1 - q0) * (k1 - k0)
            continue
        total += _sum_counts(partial(_constant, k0), partial(_within, k0, k1), q0, q1, [k0 - 1, k1 - 1])
    return total
