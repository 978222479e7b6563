"""The page helpers' own check: ``pages.py``'s Python mirror of ``frontend/src/format.ts``, against
values whose JavaScript formatting is known."""

from __future__ import annotations

from pages import fmt_flops, fmt_share, fmt_us, to_fixed


def test_format_mirror() -> None:
    # Values whose JavaScript formatting is known (node: (0.125).toFixed(2) === "0.13").
    assert to_fixed(0.125, 2) == "0.13" and to_fixed(2.5, 0) == "3" and to_fixed(1.005, 2) == "1.00"
    assert fmt_us(12141.937) == "12.1 ms" and fmt_us(999.996) == "1000 \u00b5s" and fmt_us(56.147) == "56.1 \u00b5s"
    assert fmt_flops(327680) == "328 kFLOP" and fmt_flops(999) == "999 FLOP" and fmt_flops(16384) == "16.4 kFLOP"
    assert fmt_share(0.378873) == "37.9 %"
