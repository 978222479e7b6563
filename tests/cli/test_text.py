"""The CLI's text primitives (``cli/text.py``): ASCII JSON, aligned cells and the short
forms of figures. Each is checked against the string worked out by hand, at the edges each is written for."""

from __future__ import annotations

import json
import textwrap

import msgspec
import pytest

from tb_attn_plugin.cli.text import (
    findings_lines,
    json_text,
    lines_text,
    mib_text,
    ms_text,
    num_text,
    ratio_text,
    si_text,
    table_cells,
)
from tb_attn_plugin.types.encoding import printable
from tb_attn_plugin.types.schema import Evidence, Finding, Spread


def _finding(explanation: str = "why", suggestion: str = "what to do", title: str = "a title") -> Finding:
    return Finding(id="hidden-copy", severity="high", title=title, explanation=explanation, suggestion=suggestion,
                   evidence=Evidence(layers=[0], ops=[], kernels=[], time_us=0.0, bytes=0.0, details={}))


# -- json_text --------------------------------------------------------------------------------------


def test_json_text_is_ascii_indented_and_ends_with_a_newline() -> None:
    out = json_text({"name": "é\x1b", "n": [1, 2]})
    assert out.isascii() and out.endswith("}\n")
    # msgspec's two-space indent, one key or item a line; é is U+00E9, ESC U+001B
    assert out == '{\n  "name": "\\u00e9\\u001b",\n  "n": [\n    1,\n    2\n  ]\n}\n'
    assert json.loads(out) == {"name": "é\x1b", "n": [1, 2]}


def test_json_text_writes_non_finite_floats_as_null_at_any_depth() -> None:
    doc = {"a": float("nan"), "b": [1.5, float("inf"), {"c": -float("inf")}], "d": 0.0}
    assert json.loads(json_text(doc)) == {"a": None, "b": [1.5, None, {"c": None}], "d": 0.0}


def test_json_text_turns_structs_into_their_fields() -> None:
    s = Spread(median=2.0, lo=1.0, hi=float("nan"), kind="range", steps=3, noisy=True)
    assert json.loads(json_text([s])) == [
        {"median": 2.0, "lo": 1.0, "hi": None, "kind": "range", "steps": 3, "noisy": True}]


def test_json_text_writes_a_lone_surrogate_as_the_tab_does() -> None:
    """One encoder for every door: an undecodable byte that slipped through as a lone surrogate is
    written as its ``\\xNN`` text, in the CLI as in the tab's bodies."""
    out = json_text({"run": "bad\udcffname", "x": [1]})
    assert out.isascii()
    assert out == '{\n  "run": "bad\\\\xffname",\n  "x": [\n    1\n  ]\n}\n'
    assert json.loads(out) == {"run": "bad\\xffname", "x": [1]}


def test_json_text_of_empty_containers() -> None:
    assert (json_text([]), json_text({})) == ("[]\n", "{}\n")


def test_json_text_refuses_what_json_cannot_hold() -> None:
    with pytest.raises(TypeError):
        json_text({"x": object()})


# -- cells and lines ---------------------------------------------------------------------------------


def test_table_cells_stringify_and_escape_every_cell() -> None:
    assert table_cells([(1, 2.5, None, "a\x1bb"), ("\t",)]) == [("1", "2.5", "None", r"a\x1bb"), (r"\x09",)]
    assert table_cells([]) == []


def test_lines_text_ends_each_line_and_keeps_a_line_one_line() -> None:
    assert lines_text(["a", "", "b"]) == "a\n\nb\n"
    # A newline inside a line would start a line the caller did not write.
    assert lines_text(["x\ny"]) == "x\\x0ay\n"
    assert lines_text([]) == ""


# -- figures -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("x", "text"), [(None, "-"), (0.0, "0.00x"), (1.0, "1.00x"), (2.345, "2.35x"),
                                         (0.125, "0.12x")])  # 0.125 is exact in binary: half to even
def test_ratio_text(x: float | None, text: str) -> None:
    assert ratio_text(x) == text


@pytest.mark.parametrize(("x", "text"), [(0.0, "0"), (100.0, "100"), (0.5, "0.5"), (1234567.0, "1.23457e+06"),
                                         (123456.0, "123456"), (1 / 3, "0.333333"), (float("nan"), "nan")])
def test_num_text_keeps_six_significant_digits(x: float, text: str) -> None:
    assert num_text(x) == text


@pytest.mark.parametrize(("us", "text"), [(0.0, "-"), (1500.0, "1.500"), (0.4, "0.000"), (-2500.0, "-2.500"),
                                          (12_345_678.0, "12345.678")])
def test_ms_text_is_milliseconds_and_a_dash_for_nothing(us: float, text: str) -> None:
    # 0.4 µs is 0.0004 ms: some time, shown as 0.000 rather than the "-" of none at all
    assert ms_text(us) == text


@pytest.mark.parametrize(("x", "unit", "text"), [
    (0.0, "", "-"), (999.0, "", "999"), (0.4, "", "0"), (1000.0, "", "1.00k"), (1.5e6, "B", "1.50MB"),
    (2.5e9, "", "2.50G"), (3e12, "FLOP", "3.00TFLOP"), (5e15, "", "5000.00T"), (-2e9, "", "-2.00G"),
])
def test_si_text_picks_the_largest_prefix_that_fits(x: float, unit: str, text: str) -> None:
    assert si_text(x, unit) == text


@pytest.mark.parametrize(("nbytes", "text"), [(0.0, "-"), (1.5 * (1 << 20), "1.50"), (1 << 30, "1024.00"),
                                              (1024.0, "0.00")])
def test_mib_text_is_mebibytes_and_a_dash_for_nothing(nbytes: float, text: str) -> None:
    assert mib_text(nbytes) == text


# -- findings ------------------------------------------------------------------------------------------


def test_no_findings_give_no_lines() -> None:
    assert findings_lines([]) == []


def test_a_short_finding_is_four_lines_under_a_count() -> None:
    f = _finding()
    assert findings_lines([f, f]) == [
        "", "  findings (2):",
        "  [high] hidden-copy: a title", "      why", "      -> what to do",
        "  [high] hidden-copy: a title", "      why", "      -> what to do",
    ]


def test_long_text_wraps_at_100_columns_under_its_indent() -> None:
    explanation = " ".join(f"word{i}" for i in range(40))  # 40 words of 5-6 letters: over 100 columns
    suggestion = " ".join(f"step{i}" for i in range(40))
    lines = findings_lines([_finding(explanation, suggestion)])[3:]
    assert all(len(line) <= 100 for line in lines)
    expl = [line for line in lines if not line.lstrip().startswith(("->", "step"))]
    sugg = lines[len(expl):]
    assert len(expl) > 1 and all(line.startswith("      word") for line in expl)
    assert sugg[0].startswith("      -> step0") and all(line.startswith("         step") for line in sugg[1:])
    assert " ".join(line.strip() for line in expl) == explanation
    assert " ".join(line.strip() for line in sugg) == "-> " + suggestion


def test_explanation_is_escaped_before_it_is_wrapped() -> None:
    """A newline or ESC in the text shows as its escape, and the widths count the escape: wrapping
    the raw text would turn the newline into a space and escaping afterwards overflow the width."""
    explanation = "a\nb " + "x\x1b " * 40
    lines = findings_lines([_finding(explanation, "go\x07")])
    body = lines[3:-1]
    assert all(len(line) <= 100 for line in lines)
    assert body[0].startswith(r"      a\x0ab x\x1b x\x1b")
    assert " ".join(line.strip() for line in body) == textwrap.fill(printable(explanation), 10_000)
    assert lines[-1] == r"      -> go\x07"


def test_the_title_is_left_for_the_line_escape() -> None:
    # findings_lines escapes only what it wraps; the caller's lines_text escapes whole lines.
    (title_line,) = [line for line in findings_lines([_finding(title="t\x1b")]) if "hidden-copy" in line]
    assert title_line == "  [high] hidden-copy: t\x1b"
    assert lines_text([title_line]) == "  [high] hidden-copy: t\\x1b\n"


def test_finding_struct_round_trips_through_json_text() -> None:
    f = _finding("é")
    assert msgspec.convert(json.loads(json_text(f)), Finding) == f
