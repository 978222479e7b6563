"""tb-attn gate: passes on identical runs, fails on a real regression, explains itself."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import HAND_TRACES, profile_run

from tb_attn_plugin.analysis.gate import Check, parse_tolerance
from tb_attn_plugin.cli import main


@pytest.fixture(scope="module")
def gate_logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Long enough sequences that the naive implementation's S×S scores dominate.
    logdir = tmp_path_factory.mktemp("gate")
    for impl in ("naive", "sdpa-flash"):
        assert profile_run(logdir, impl, impl=impl, seq=128, d_model=64).status == "ok"
    return logdir


def test_identical_runs_pass(gate_logdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = str(gate_logdir / "naive")
    assert main(["gate", "--baseline", run, "--candidate", run]) == 0
    out = capsys.readouterr().out
    assert "PASS" in out and "+0.0%" in out and "REGRESSION" not in out


def test_run_names_under_a_logdir_and_one_unit(gate_logdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """As summarize --run and compare --runs take them: names relative to the logdir. Times are
    in ms throughout, the steps' spread included."""
    assert main(["gate", str(gate_logdir), "--baseline", "naive", "--candidate", "naive"]) == 0
    out = capsys.readouterr().out
    assert "attention gate: naive against baseline naive" in out and "PASS" in out
    assert " us" not in out and "µs" not in out
    assert "median of 2 step(s), min " in out and " ms, max " in out and "of the median" in out
    assert main(["gate", str(gate_logdir), "--baseline", "nope", "--candidate", "naive"]) == 2
    assert "baseline: no run named 'nope'" in capsys.readouterr().err


def test_naive_against_a_flash_baseline_fails(gate_logdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["gate", "--baseline", str(gate_logdir / "sdpa-flash"), "--candidate", str(gate_logdir / "naive"),
            "--format", "json"]
    assert main(args) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["schema"] == "tb-attn.gate/1" and report["passed"] is False
    checks = {c["name"]: c for c in report["checks"]}
    assert not checks["alloc"]["passed"] and checks["alloc"]["change"] > 1.0  # the S×S scores
    assert not checks["peak"]["passed"]
    assert [layer["layer"] for layer in report["layers"]] == [0, 1]


def test_the_other_direction_passes_and_tolerances_apply(gate_logdir: Path) -> None:
    naive, flash = str(gate_logdir / "naive"), str(gate_logdir / "sdpa-flash")
    assert main(["gate", "--baseline", naive, "--candidate", flash, "--max-time-regression", "1000%"]) == 0
    assert main(["gate", "--baseline", flash, "--candidate", naive, "--max-time-regression", "100000%",
                 "--max-memory-regression", "100000%"]) == 0


@pytest.mark.parametrize(("text", "value"), [("10%", 0.10), ("10", 0.10), ("0.1", 0.1), ("0", 0.0), ("250%", 2.5)])
def test_tolerances(text: str, value: float) -> None:
    assert parse_tolerance(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["ten", "-5%", "", "nan"])
def test_bad_tolerances(text: str) -> None:
    with pytest.raises(ValueError):
        parse_tolerance(text)


def test_checks_with_zero_baselines() -> None:
    assert Check("alloc", "bytes", 0, 0, 0.1).passed
    assert not Check("alloc", "bytes", 0, 10, 0.1).passed
    assert Check("time", "us", 100, 110, 0.1).passed and not Check("time", "us", 100, 111, 0.1).passed


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--baseline", "{tmp}/missing", "--candidate", "{run}"], "No such file or directory"),
        (["--baseline", "{logdir}", "--candidate", "{run}"], "holds 2 runs"),
        (["--baseline", "{run}", "--candidate", "{run}", "--max-time-regression", "lots"], "bad tolerance"),
        (["--baseline", "{run}"], "required"),
    ],
)
def test_bad_usage_exits_2(tmp_path: Path, gate_logdir: Path, capsys: pytest.CaptureFixture[str], args: list[str],
                           message: str) -> None:
    argv = ["gate", *(a.format(tmp=tmp_path, logdir=gate_logdir, run=gate_logdir / "naive") for a in args)]
    with pytest.raises(SystemExit) as exc:
        raise SystemExit(main(argv))
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_a_run_without_attention_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from helpers import SHARED_TRACES

    other = SHARED_TRACES / "other" / "hta_cpu_only_rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
    assert main(["gate", "--baseline", str(other), "--candidate", str(other)]) == 2
    assert "no attention found" in capsys.readouterr().err


@pytest.mark.parametrize("broken", ["baseline", "candidate"])
def test_one_unreadable_trace_fails_the_gate_with_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         broken: str) -> None:
    """Two workers, one file corrupt: the gate must not pass on the other worker alone."""
    import shutil

    trace = HAND_TRACES / "steps.json"
    for side in ("baseline", "candidate"):
        (tmp_path / side).mkdir()
        shutil.copy(trace, tmp_path / side / "w0.1.pt.trace.json")
        shutil.copy(trace, tmp_path / side / "w1.1.pt.trace.json")
    (tmp_path / broken / "w1.1.pt.trace.json").write_text('{"traceEvents": [')
    argv = ["gate", "--baseline", str(tmp_path / "baseline"), "--candidate", str(tmp_path / "candidate")]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert "PASS" not in captured.out
    (line,) = captured.err.splitlines()
    assert line.startswith(f"tb-attn: error: {broken} w1.1.pt.trace.json: ")
    (tmp_path / broken / "w1.1.pt.trace.json").unlink()
    assert main(argv) == 0  # the readable worker alone is a valid run
