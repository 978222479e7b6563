"""Numbers and lists in words, shared by the findings' sentences and the CLI's tables."""

from __future__ import annotations

import pytest

from tb_attn_plugin.analysis.common import wording
from tb_attn_plugin.cli import report, text


@pytest.mark.parametrize(("us", "text"), [(0.0, "0.0 µs"), (999.94, "999.9 µs"), (1000.0, "1.00 ms"),
                                          (123456.0, "123.46 ms")])
def test_duration(us: float, text: str) -> None:
    assert wording.duration(us) == text


@pytest.mark.parametrize(("nbytes", "text"), [(0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"),
                                              (3 << 19, "1.5 MiB"), (5 << 30, "5.0 GiB")])
def test_size(nbytes: int, text: str) -> None:
    assert wording.size(nbytes) == text


def test_counts_shares_and_numbers() -> None:
    assert wording.count(1, "copy", "copies") == "1 copy"
    assert wording.count(2.5, "copy", "copies") == "2.5 copies"
    assert wording.count(3.0, "copy", "copies") == "3 copies"
    assert wording.pct(0.426) == "43%"
    assert (wording.ms(1234.5), wording.mib(3 << 20)) == ("1.234", "3.00")


@pytest.mark.parametrize(("layers", "text"), [
    ([3], "layer 3"), ([0, 1, 2, 3], "layers 0-3"), ([0, 2, 5], "layers 0, 2 and 5"),
    (list(range(0, 40, 2)), "layers 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22 and 8 more"),
])
def test_layer_list(layers: list[int], text: str) -> None:
    assert wording.layer_list(layers) == text


def test_the_tables_write_times_and_sizes_as_the_findings_do() -> None:
    assert text.ms_text(1234.5) == wording.ms(1234.5) and text.ms_text(0.0) == "-"
    assert text.mib_text(3 << 20) == wording.mib(3 << 20) and text.mib_text(0.0) == "-"
    assert [report._head_span(h) for h in ([], [4], [4, 5, 6, 7], [0, 2])] == ["-", "4", "4-7", "0,2"]


def test_the_attention_core_where_every_layer_is_its_core_alone() -> None:
    assert [wording.attention(c, n) for c, n in ((0, 4), (2, 4), (4, 4), (0, 0))] == [
        "attention", "attention", "the attention core", "attention"]
    assert [wording.core_only_note(c, n) for c, n in ((0, 4), (2, 4), (4, 4))] == [
        "", "2 of 4 layers: the core only", ""]
