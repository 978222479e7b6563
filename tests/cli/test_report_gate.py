"""``tb-attn gate``'s report (``cli/report_gate.py``): the CI log's text and the ``tb-attn.gate/1`` JSON of a
hand-built ``GateReport``, checked line by line against the figures, units and verdicts worked out by hand."""

from __future__ import annotations

import json

import pytest

from tb_attn_plugin.analysis.cross_run.gate import Check, GateReport
from tb_attn_plugin.cli.report_gate import gate_json, gate_text
from tb_attn_plugin.vocab.names import display_name

MIB = 1 << 20


def _report(checks: list[Check], **changes: object) -> GateReport:
    fields: dict[str, object] = dict(baseline="base", candidate="cand", clock="cpu", checks=checks, layers=[],
                                     warnings=[])
    return GateReport(**(fields | changes))  # type: ignore[arg-type]


SLOWER = Check("time", "us", 1500.0, 1800.0, 0.10, "cpu time per step")  # 1800 / 1500 - 1 = +20%
HUNGRIER = Check("alloc", "bytes", float(MIB), 1.5 * MIB, 0.10, "bytes allocated")  # +50%
NONE_BOTH = Check("peak", "bytes", 0.0, 0.0, 0.10, "largest rise")  # no baseline: no change, 0 == 0 passes
SAME = Check("time", "us", 1000.0, 1050.0, 0.10, "within")  # +5%
NOISY = Check("time", "us", 1000.0, 1000.0, 0.05, "noisy", interval=(-0.2, 0.3), noisy=True)


def test_each_check_is_a_line_in_ms_or_mib_with_its_change_and_verdict() -> None:
    lines = gate_text(_report([SLOWER, HUNGRIER, NONE_BOTH])).splitlines()
    assert lines[0] == "attention gate: cand against baseline base (cpu time)"
    # 1500 µs = 1.500 ms and 1 MiB = 1.00 MiB, each right-aligned in 12 columns; the change in 7
    assert lines[1:7] == [
        "  time   baseline     1.500 ms  candidate     1.800 ms  change  +20.0%  tolerance 10%  REGRESSION",
        "         (cpu time per step)",
        "  alloc  baseline     1.00 MiB  candidate     1.50 MiB  change  +50.0%  tolerance 10%  REGRESSION",
        "         (bytes allocated)",
        "  peak   baseline     0.00 MiB  candidate     0.00 MiB  change     n/a  tolerance 10%  ok",
        "         (largest rise)",
    ]
    assert lines[7] == "FAIL: attention regressed beyond the tolerances" and len(lines) == 8


def test_a_pass_says_pass_and_a_drop_is_a_negative_change() -> None:
    faster = Check("time", "us", 2000.0, 1000.0, 0.10, "d")  # 1000 / 2000 - 1 = -50%
    lines = gate_text(_report([SAME, faster], clock="device")).splitlines()
    assert lines[0].endswith("(device time)")
    assert "change   +5.0%  tolerance 10%  ok" in lines[1]
    assert "baseline     2.000 ms  candidate     1.000 ms  change  -50.0%" in lines[3]
    assert lines[-1] == "PASS: attention did not regress beyond the tolerances"


def test_undecided_is_neither_pass_nor_fail() -> None:
    lines = gate_text(_report([NOISY, NONE_BOTH])).splitlines()
    assert lines[1].endswith("change   +0.0%  tolerance 5%  UNDECIDED")
    assert lines[-1].startswith("UNDECIDED: what the runs can tell spans the tolerance (the time check says why)")
    assert lines[-1].endswith("profile both with --repeats 3 in one sweep, or in turns with --append (docs/ci.md)")


def test_a_regression_outweighs_noise() -> None:
    # One check noisy and another a clear regression: the run did regress.
    assert gate_text(_report([NOISY, HUNGRIER])).splitlines()[-1] == "FAIL: attention regressed beyond the tolerances"


def test_growth_from_nothing_has_no_change_but_is_a_regression() -> None:
    grew = Check("alloc", "bytes", 0.0, 2.0 * MIB, 0.10, "d")
    (line,) = [x for x in gate_text(_report([grew])).splitlines() if x.startswith("  alloc")]
    assert line.endswith("candidate     2.00 MiB  change     n/a  tolerance 10%  REGRESSION")


def test_layers_are_listed_in_ms_with_a_dash_for_none() -> None:
    report = _report([SAME], layers=[(0, 1000.0, 1200.0), (12, 500.0, 0.0)])
    lines = gate_text(report).splitlines()
    i = lines.index("  per layer, time per step (baseline -> candidate):")
    assert lines[i + 1:i + 3] == ["    L0        1.000 ms ->      1.200 ms",
                                  "    L12       0.500 ms ->          - ms"]


def test_no_layers_no_layer_heading() -> None:
    assert "per layer" not in gate_text(_report([SAME]))


def test_warnings_come_before_the_checks_and_names_are_escaped() -> None:
    report = _report([SAME], candidate="c\x1b[2J", baseline="b\u202e", warnings=["differ in seq\x07"])
    lines = gate_text(report).splitlines()
    assert lines[0] == r"attention gate: c\x1b[2J against baseline b\u202e (cpu time)"
    assert lines[1] == r"  warning: differ in seq\x07"
    assert lines[2].startswith("  time ")


def test_json_carries_every_field_of_every_check() -> None:
    within = Check("time", "us", 1000.0, 1050.0, 0.10, "boot", interval=(0.02, 0.08))  # all of it under 10%
    body = json.loads(gate_json(_report([within, HUNGRIER, NONE_BOTH], layers=[(3, 10.0, 20.0)],
                                        warnings=["w"])))
    assert {k: body[k] for k in ("schema", "baseline", "candidate", "clock", "passed", "noisy", "warnings")} == {
        "schema": "tb-attn.gate/1", "baseline": "base", "candidate": "cand", "clock": "cpu", "passed": False,
        "noisy": False, "warnings": ["w"]}
    time, alloc, peak = body["checks"]
    assert time.pop("change") == pytest.approx(0.05)  # 1050 / 1000 - 1
    assert time == {"name": "time", "unit": "us", "baseline": 1000.0, "candidate": 1050.0, "tolerance": 0.10,
                    "passed": True, "verdict": "ok", "interval": [0.02, 0.08], "detail": "boot"}
    assert (alloc["change"], alloc["passed"], alloc["verdict"], alloc["interval"]) == (0.5, False, "regression", None)
    assert (peak["change"], peak["passed"], peak["verdict"]) == (None, True, "ok")  # no baseline: null, not 0
    assert body["layers"] == [{"layer": 3, "baseline_us": 10.0, "candidate_us": 20.0}]


def test_json_of_a_noisy_report_says_so() -> None:
    body = json.loads(gate_json(_report([NOISY])))
    assert (body["passed"], body["noisy"]) == (False, True)
    assert body["checks"][0]["verdict"] == "undecided" and body["checks"][0]["interval"] == [-0.2, 0.3]


def test_json_is_ascii_and_keeps_hostile_names_whole() -> None:
    """The name as the routes and --run take it (``names.display_name``): the byte 0xFF as ``\\xff``,
    the text ``\\xff`` with its backslash doubled, so two runs never read alike."""
    out = gate_json(_report([SAME], candidate="c\x1b[2J\udcff"))
    assert out.isascii() and json.loads(out)["candidate"] == "c\x1b[2J\\xff" == display_name("c\x1b[2J\udcff")
    other = gate_json(_report([SAME], candidate="c\x1b[2J\\xff"))
    assert json.loads(other)["candidate"] == "c\x1b[2J\\\\xff"
