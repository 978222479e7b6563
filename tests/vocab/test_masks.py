"""The mask grammar and the pairs each mask keeps, against a pair-by-pair count."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tb_attn_plugin.vocab.masks import MAX_VALUE, MaskSpec, kept_pairs, parse_mask


def allows(spec: MaskSpec, q: int, k: int, *, causal: bool, sq: int, sk: int) -> bool:
    """Whether query ``q`` sees key ``k``: the definitions of ``tb_attn_plugin.vocab.masks``, pair by pair."""
    if spec.kind == "causal":
        return k <= q
    value = int(spec.value)  # type: ignore[arg-type]
    if spec.kind == "sliding":
        return 0 <= q - k < value if causal else abs(q - k) < value
    if spec.kind == "document":
        return q * value // sq == k * value // sk and (k <= q or not causal)
    assert spec.kind == "prefix"
    return k < value or k <= q


def brute(spec: MaskSpec, sq: int, sk: int, causal: bool) -> int:
    return sum(allows(spec, q, k, causal=causal, sq=sq, sk=sk) for q in range(sq) for k in range(sk))


SPECS = [MaskSpec("causal"), *(MaskSpec("sliding", w) for w in (1, 2, 5, 16, 40)),
         *(MaskSpec("document", n) for n in (1, 2, 3, 7)), *(MaskSpec("prefix", p) for p in (1, 4, 9, 50))]


@pytest.mark.parametrize("spec", SPECS, ids=str)
def test_kept_pairs_match_a_pair_by_pair_count(spec: MaskSpec) -> None:
    for sq, sk, causal in itertools.product((1, 7, 16, 33), (1, 7, 16, 33), (True, False)):
        if not causal and spec.kind in ("causal", "prefix"):
            continue
        assert kept_pairs(spec, sq, sk, causal=causal) == brute(spec, sq, sk, causal), (sq, sk, causal)


def test_kept_pairs_by_hand() -> None:
    # S = 4, W = 2, causal: rows keep 1, 2, 2, 2 keys; two-sided: 2, 3, 3, 2.
    assert kept_pairs(MaskSpec("sliding", 2), 4, 4, causal=True) == 7
    assert kept_pairs(MaskSpec("sliding", 2), 4, 4, causal=False) == 10
    # S = 1024, W = 256: the sum of min(i + 1, W).
    assert kept_pairs(MaskSpec("sliding", 256), 1024, 1024, causal=True) == 256 * 257 // 2 + (1024 - 256) * 256
    # 2 documents of 4 tokens: 2 * (1 + 2 + 3 + 4) causal, 2 * 16 not.
    assert kept_pairs(MaskSpec("document", 2), 8, 8, causal=True) == 20
    assert kept_pairs(MaskSpec("document", 2), 8, 8, causal=False) == 32
    # prefix 3 of 5: rows 3, 3, 3, 4, 5.
    assert kept_pairs(MaskSpec("prefix", 3), 5, 5, causal=True) == 18
    assert kept_pairs(MaskSpec("causal"), 10**6, 10**6, causal=True) == 10**6 * (10**6 + 1) // 2
    assert kept_pairs(MaskSpec("block", 0.5), 8, 8, causal=True) is None


@pytest.mark.parametrize(("text", "expected"), [
    ("causal", MaskSpec("causal")), ("sliding:256", MaskSpec("sliding", 256)),
    (" document:4 ", MaskSpec("document", 4)),
    ("prefix:64", MaskSpec("prefix", 64)), ("block:0.25", MaskSpec("block", 0.25)), ("block:1", MaskSpec("block", 1.0)),
])
def test_parse(text: str, expected: MaskSpec) -> None:
    assert parse_mask(text) == expected
    assert parse_mask(str(expected)) == expected


@pytest.mark.parametrize("text", ["", "window:4", "sliding", "sliding:", "sliding:0", "sliding:-3", "sliding:2.5",
                                  "document:x", "block:0", "block:1.5", "block:nan", "block:-0.1", "causal:3",
                                  "prefix:0", "x" * 100])
def test_bad_specs_are_one_line_errors(text: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_mask(text)
    assert "\n" not in str(info.value) and len(str(info.value)) < 140


def test_causal_only_masks_refuse_no_causal() -> None:
    for text in ("causal", "prefix:4"):
        with pytest.raises(ValueError, match="causal"):
            parse_mask(text, causal=False)
    assert parse_mask("sliding:4", causal=False) == MaskSpec("sliding", 4)


@settings(max_examples=300, deadline=None, database=None, derandomize=True)
@given(kind=st.sampled_from(["causal", "sliding", "document", "prefix"]), value=st.integers(1, 70),
       sq=st.integers(1, 48), sk=st.integers(1, 48), causal=st.booleans())
def test_the_closed_forms_match_a_pair_by_pair_count_at_any_shape(kind: str, value: int, sq: int, sk: int,
                                                                   causal: bool) -> None:
    if kind in ("causal", "prefix"):
        causal = True
    spec = MaskSpec(kind, None if kind == "causal" else value)
    assert kept_pairs(spec, sq, sk, causal=causal) == brute(spec, sq, sk, causal)


def test_values_past_a_context_length_are_bad_specs() -> None:
    assert parse_mask(f"sliding:{MAX_VALUE}") == MaskSpec("sliding", MAX_VALUE)
    for text in (f"sliding:{MAX_VALUE + 1}", "document:99999999999999999999", "prefix:" + "9" * 50):
        with pytest.raises(ValueError, match=r"must be in 1\.\.2147483647") as info:
            parse_mask(text)
        assert len(str(info.value)) < 140
