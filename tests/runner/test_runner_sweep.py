"""``runner.sweep``: runs one after another, each run's repeats interleaved and merged, a full
logdir stopping the rest, and the table and exit code that say how it went. ``run_one`` is
replaced by a recorder: the sweep's own logic, without profiling anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner import sweep
from runner.config import ModelConfig, ProfileConfig
from runner.session import RunResult, RunSpec

PROF = ProfileConfig()


def _spec(name: str, repeats: int = 1) -> RunSpec:
    return RunSpec(model="builtin", cfg=ModelConfig(), name=name, repeats=repeats)


def _recorder(monkeypatch: pytest.MonkeyPatch, outcomes: dict[tuple[str, int], RunResult]) -> list[tuple[str, bool]]:
    calls: list[tuple[str, bool]] = []
    seen: dict[str, int] = {}

    def run_one(spec: RunSpec, logdir: Path, prof: ProfileConfig, *, dist: object, seed: int,
                append: bool) -> RunResult:
        k = seen[spec.name] = seen.get(spec.name, -1) + 1
        calls.append((spec.name, append))
        return outcomes.get((spec.name, k), RunResult(spec.name, "ok", traces=[Path(f"{spec.name}.{k}")], seconds=1.0))

    monkeypatch.setattr(sweep, "run_one", run_one)
    return calls


def test_repeats_interleave_and_merge(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    failed = RunResult("a", "failed", error="boom", traces=[], seconds=2.0)
    calls = _recorder(monkeypatch, {("a", 1): failed})
    code = sweep.run_sweep([_spec("a", repeats=3), _spec("b")], tmp_path, PROF, progress=False)
    assert code == 1  # a repeat failed
    # Every run once, then the next repeat of those that have more; repeats after the first append.
    assert calls == [("a", False), ("b", False), ("a", True), ("a", True)]
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split() for line in out.splitlines()[1:3]}
    assert rows["a"][:4] == ["a", "failed", "4.0", "2"] and rows["a"][4:] == ["boom"]  # 1 + 2 + 1 s, 2 traces
    assert rows["b"] == ["b", "ok", "1.0", "1"]
    assert f"wrote 3 trace file(s) into {tmp_path}" in out


def test_a_logdir_that_cannot_be_written_stops_the_sweep(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    full = RunResult("a", "failed", error="no space left", write_failed=True)
    calls = _recorder(monkeypatch, {("a", 0): full})
    assert sweep.run_sweep([_spec("a"), _spec("b"), _spec("c")], tmp_path, PROF, progress=False) == 1
    assert calls == [("a", False)]
    err = capsys.readouterr().err
    assert "stopping the sweep" in err and "the other 2 run(s) were not started" in err


def test_overwrite_clears_only_what_a_run_wrote(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    run = tmp_path / "a"
    run.mkdir()
    for name in ("host_1.1.pt.trace.json", "tb_attn_run.json", "x.pt.trace.json.tmp", "notes.txt"):
        (run / name).write_text("{}")
    _recorder(monkeypatch, {})
    assert sweep.run_sweep([_spec("a")], tmp_path, PROF, overwrite=True, progress=False) == 0
    assert sorted(p.name for p in run.iterdir()) == ["notes.txt"]
    sweep.clear_run(tmp_path / "missing")  # nothing to clear: no error


def test_an_empty_table_still_has_its_header() -> None:
    assert sweep.format_results([]) == "run  status       seconds  traces  note"
