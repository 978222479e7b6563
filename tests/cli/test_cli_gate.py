"""``run_gate`` (``cli/gate.py``): both runs resolved and read, compared by ``analysis.gate``, the report
printed and the exit code chosen. Runs in-process on tiny hand-written traces whose attention time per step is
known (one block scope a step), so each exit code and figure follows from the times written."""

from __future__ import annotations

import argparse
import gc
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tb_attn_plugin.cli.gate import GATE_NOISY, run_gate


@pytest.fixture(autouse=True)
def _collector_back_on() -> Iterator[None]:
    """run_gate turns the cyclic collector off for its short-lived process; not for the rest of the suite."""
    yield
    gc.enable()


@pytest.fixture(autouse=True)
def _no_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DASK_SCHEDULER_ADDRESS", raising=False)


def _x(cat: str, name: str, ts: float, dur: float) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": 1, "args": {}}


def _write_run(run: Path, blocks: Sequence[float], worker: str = "w", attention: bool = True) -> Path:
    """A run of one worker: one profiler step of 1 ms per entry of ``blocks``, each holding layer 0's
    block of that many µs (a softmax inside it), CPU only, no memory events: its attention time per
    step is ``blocks``."""
    events = []
    for n, block in enumerate(blocks, start=1):
        t0 = n * 1000.0
        events.append(_x("user_annotation", f"ProfilerStep#{n}", t0, 1000))
        if attention:
            events += [_x("user_annotation", "tbattn.v1/L0", t0 + 10, block),
                       _x("user_annotation", "tbattn.v1/L0/softmax", t0 + 11, block - 2)]
        events.append(_x("cpu_op", "aten::add", t0 + 12, 1))
    run.mkdir(parents=True, exist_ok=True)
    (run / f"{worker}.1.pt.trace.json").write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    return run


def _write_repeats(run: Path, repeats: Sequence[Sequence[float]], starts: Sequence[int]) -> Path:
    """A run profiled ``len(repeats)`` times (the runner's ``--repeats``): one trace per repeat, written
    after it started (its span), and the metadata listing each repeat's start."""
    for k, (blocks, start) in enumerate(zip(repeats, starts, strict=True)):
        _write_run(run, blocks, worker="w")
        (run / "w.1.pt.trace.json").rename(run / f"w.{start + 1 + k}.pt.trace.json")
    meta = {"repeats": [{"started_ns": start, "status": "ok"} for start in starts]}
    (run / "tb_attn_run.json").write_text(json.dumps(meta))
    return run


def _in_turns(tmp_path: Path, base: Sequence[Sequence[float]], cand: Sequence[Sequence[float]]) -> tuple[Path, Path]:
    """Two runs whose repeats were profiled in turns: base, cand, base, cand..."""
    starts = [1000 * (2 * k + 1) for k in range(len(base))]
    return (_write_repeats(tmp_path / "base", base, starts),
            _write_repeats(tmp_path / "cand", cand, [t + 1000 for t in starts]))


def _args(baseline: Path | str, candidate: Path | str, path: Path | None = None, **changes: Any) -> argparse.Namespace:
    fields: dict[str, Any] = dict(
        path=None if path is None else str(path), baseline=str(baseline), candidate=str(candidate),
        max_time_regression="10%", max_memory_regression="10%", clock="auto", format="text", jobs=None,
        executor=None, ranks=None, cache_dir=None, cache_max_mb=None, no_progress=True)
    return argparse.Namespace(**(fields | changes))


def test_a_candidate_within_the_tolerance_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base, cand = _in_turns(tmp_path, [[100.0, 100.0]] * 3, [[105.0, 105.0], [104.0, 104.0], [106.0, 106.0]])
    assert run_gate(_args(base, cand)) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    # runs named by path are called by the path given, not "."
    assert lines[0] == f"attention gate: {cand} against baseline {base} (cpu time)"
    # the representative repeat of each (the lower median): 100 and 105 µs, +5% against 10%
    assert lines[1] == "  time   baseline     0.100 ms  candidate     0.105 ms  change   +5.0%  tolerance 10%  ok"
    # floors 100 and 104 µs; the candidate's second-fastest repeat 105/104 above its floor: 1.03x to 1.04x
    assert "3 pairs of repeats profiled in turns: 1.03x to 1.04x" in out
    assert lines[-1] == "PASS: attention did not regress beyond the tolerances" and err == ""


def test_a_slower_candidate_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base, cand = _in_turns(tmp_path, [[100.0, 100.0]] * 2, [[200.0, 200.0], [300.0, 300.0]])
    assert run_gate(_args(base, cand, format="json")) == 1
    body = json.loads(capsys.readouterr().out)
    time = body["checks"][0]
    # floors 100 and 200 µs: 2x, and the candidate's second repeat 1.5x its floor: 1.33x to 2x, all over +10%
    assert (time["baseline"], time["candidate"], time["change"], time["verdict"]) == (100.0, 200.0, 1.0, "regression")
    assert time["interval"] == pytest.approx([2 / 1.5 - 1, 1.0])
    assert body["passed"] is False and body["layers"] == [{"layer": 0, "baseline_us": 100.0, "candidate_us": 200.0}]


def test_one_run_each_is_judged_only_beyond_drift(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two runs of one repeat: a 2x change is within what drift between runs makes (exit 3, and how to
    decide it); 150x is beyond it (100x, then the 10% tolerance): a regression."""
    base = _write_run(tmp_path / "base", [100.0, 100.0])
    assert run_gate(_args(base, _write_run(tmp_path / "twice", [200.0, 200.0]))) == GATE_NOISY == 3
    out = capsys.readouterr().out
    assert "one run each, not profiled in turns: drift between runs makes up to 100x" in out
    assert "--repeats 3" in out.splitlines()[-1] and out.splitlines()[-1].startswith("UNDECIDED")
    assert run_gate(_args(base, _write_run(tmp_path / "hundredfifty", [15000.0, 15000.0]))) == 1


def test_repeats_that_leave_it_open_exit_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Floors 100 and 110 µs (1.1x), but the baseline's second-fastest repeat is 1.5x its floor and the
    candidate's 120/110 above its own: 1.01x to 1.65x, across the 10% tolerance."""
    base, cand = _in_turns(tmp_path, [[100.0], [150.0], [160.0]], [[110.0], [120.0], [300.0]])
    assert run_gate(_args(base, cand)) == GATE_NOISY == 3
    out = capsys.readouterr().out
    assert "their 3 pairs of repeats profiled in turns leave it open (1.01x to 1.65x" in out


def test_a_wider_tolerance_lets_the_slower_candidate_pass(tmp_path: Path) -> None:
    base, cand = _in_turns(tmp_path, [[100.0, 100.0]] * 2, [[200.0, 200.0]] * 2)
    assert run_gate(_args(base, cand, max_time_regression="100%")) == 0  # +100% is within 100%
    assert run_gate(_args(base, cand, max_time_regression="99")) == 1  # "99" is 99%


@pytest.mark.parametrize("flag", ["max_time_regression", "max_memory_regression"])
def test_a_bad_tolerance_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                flag: str) -> None:
    assert run_gate(_args(tmp_path / "a", tmp_path / "b", **{flag: "-5%"})) == 2
    out, err = capsys.readouterr()
    assert (out, err) == ("", "tb-attn: error: bad tolerance: tolerance must be a non-negative percentage, "
                              "got '-5%'\n")


def test_names_under_a_logdir_are_runs_of_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _write_run(tmp_path / "logdir" / "a", [100.0])
    _write_run(tmp_path / "logdir" / "b", [100.0])
    assert run_gate(_args("a", "b/", path=tmp_path / "logdir")) == GATE_NOISY  # one run each
    assert capsys.readouterr().out.startswith("attention gate: b against baseline a (cpu time)\n")
    assert run_gate(_args("a", "c", path=tmp_path / "logdir")) == 2
    assert capsys.readouterr().err.startswith("tb-attn: error: candidate: no run named 'c' under ")


def test_a_directory_of_several_runs_is_refused_naming_five(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    base = _write_run(tmp_path / "base", [100.0])
    for name in "abcdef":
        _write_run(tmp_path / "many" / name, [100.0])
    assert run_gate(_args(base, tmp_path / "many")) == 2
    assert capsys.readouterr().err == (f"tb-attn: error: candidate: {tmp_path / 'many'} holds 6 runs (a, b, c, d, e); "
                                       "point at one run directory\n")


def test_a_run_gated_against_itself_is_read_once(tmp_path: Path, decodes: list[str],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    run = _write_run(tmp_path / "run", [100.0, 100.0])
    assert run_gate(_args(run, run)) == 0
    assert len(decodes) == 1
    assert "change   +0.0%" in capsys.readouterr().out


def test_every_unreadable_trace_of_both_runs_is_printed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = _write_run(tmp_path / "base", [100.0])
    cand = _write_run(tmp_path / "cand", [100.0])
    (base / "v.1.pt.trace.json").write_text("not json")
    (cand / "v.1.pt.trace.json").write_text('{"traceEvents": [')
    assert run_gate(_args(base, cand)) == 2
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert out == "" and len(lines) == 2
    assert lines[0].startswith("tb-attn: error: baseline v.1.pt.trace.json: ")
    assert lines[1].startswith("tb-attn: error: candidate v.1.pt.trace.json: ")


def test_a_run_without_attention_is_one_line_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = _write_run(tmp_path / "base", [100.0], attention=False)
    cand = _write_run(tmp_path / "cand", [100.0])
    assert run_gate(_args(base, cand)) == 2
    assert capsys.readouterr().err == f"tb-attn: error: no attention found in the baseline run {str(base)!r}\n"


def test_the_clock_asked_for_is_the_clock_compared(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """CPU traces have no device time: on the device clock both runs read 0, which the gate passes, and
    the report says which clock it used."""
    base = _write_run(tmp_path / "base", [100.0])
    cand = _write_run(tmp_path / "cand", [15000.0])
    assert run_gate(_args(base, cand, clock="device")) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].endswith("(device time)") and "change     n/a" in out
    assert run_gate(_args(base, cand, clock="cpu")) == 1  # 150x: beyond what drift between runs makes


def test_hostile_run_names_are_escaped_in_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    logdir = tmp_path / "logdir"
    _write_run(logdir / "a", [100.0])
    assert run_gate(_args("a", "x\x1b[2J", path=logdir)) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and r"no run named 'x\x1b[2J'" in err and err.count("\n") == 1
