"""Hostile logdirs, round 4 (issue 48, part C): scheduling, totals and stalls.

Each case failed before its fix: a run of 64 hard links to one event file full of our tags was
read 64 times with no bound on the run's total (234 s of ``/summary``); the time limit covered
reading a trace, not its analysis, so an analysis that did not end held a worker for ever; and a
run of large traces occupied every parse worker, so a small run's ``/summary`` waited for them.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from eventfiles import event
from helpers import HAND_TRACES
from tensorboard.compat.proto import event_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from tb_attn_plugin.engine import head_events
from tb_attn_plugin.engine import loader as loader_module
from tb_attn_plugin.engine.head_events import RUN_BYTES, RUN_FULL, RUN_RECORDS, HeadStatsReader, parse_event_file
from tb_attn_plugin.engine.loader import Loader, resolve_runs
from tb_attn_plugin.server import lanes as lanes_module
from tb_attn_plugin.server.http_status import Loading
from tb_attn_plugin.server.service import Service
from tb_attn_plugin.trace.version import file_version

LINKS = 64


def _tag(layer: int, head: int) -> str:
    return f"attn_stats.entropy/L{layer}.H{head}"


def _event_file(directory: Path, records: int) -> Path:
    """One event file by TensorBoard's writer: ``records`` values, one a record, heads 0..records-1."""
    before = set(directory.iterdir())
    writer = EventFileWriter(str(directory))
    for i in range(records):
        writer.add_event(event_pb2.Event.FromString(event(3, [(_tag(0, i), 0.5)])))
    writer.close()
    (path,) = set(directory.iterdir()) - before
    return path


@pytest.fixture
def flood(tmp_path: Path) -> Path:
    """A run of a trace and 64 hard links to one event file (the attack: each link a file)."""
    run = tmp_path / "logdir" / "flood"
    run.mkdir(parents=True)
    shutil.copy(HAND_TRACES / "steps.json", run / "w0.1.pt.trace.json")
    first = _event_file(run, 40)
    for i in range(1, LINKS):
        os.link(first, run / f"events.out.tfevents.{i:04d}.link")
    return tmp_path / "logdir"


def _note(summary: Any) -> str:
    stats = summary.attn_stats
    assert stats is not None
    return str(stats.note)


def test_a_runs_event_files_are_read_within_one_total_of_records(flood: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(head_events, "MAX_RUN_RECORDS", 100)  # 2.5 files of 40 records
    reads: list[str] = []
    real = head_events.parse_event_file

    def counting(data: bytes, **kwargs: Any) -> Any:
        reads.append(str(kwargs.get("max_records")))
        return real(data, **kwargs)

    monkeypatch.setattr(head_events, "parse_event_file", counting)
    (run,) = resolve_runs(str(flood))
    assert len(run.event_files) == LINKS
    got = HeadStatsReader().read_run(run.event_files)
    assert reads == ["100", "60", "20"]  # the third file is read in part; the others not at all
    assert sum(s.records for s in got.values()) == 100
    assert sum(s.dropped.get(RUN_RECORDS, 0) for s in got.values()) == 1
    assert sum(s.dropped.get(RUN_FULL, 0) for s in got.values()) == LINKS - 3
    # The CLI and the tab say the same, in the statistics' note.
    summary = Loader().summarize_run(run)
    assert f"{RUN_FULL} ({LINKS - 3})" in _note(summary) and f"{RUN_RECORDS} (1)" in _note(summary)
    tab = Service(str(flood), wait_s=30).summary("flood", None, None)
    assert _note(tab) == _note(summary) and tab.attn_stats == summary.attn_stats


def test_a_runs_event_files_are_read_within_one_total_of_bytes(flood: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (run,) = resolve_runs(str(flood))
    size = run.event_files[0].size
    monkeypatch.setattr(head_events, "MAX_RUN_EVENT_BYTES", 3 * size)
    got = HeadStatsReader().read_run(run.event_files)
    assert sum(s.records for s in got.values()) == 3 * 40
    assert sum(s.dropped.get(RUN_BYTES, 0) for s in got.values()) == LINKS - 3
    assert f"{RUN_BYTES} ({LINKS - 3})" in _note(Loader().summarize_run(run))


def test_a_files_records_of_ours_stop_at_the_bound() -> None:
    """The walk ends at the bound: what lies after it is neither checked nor parsed."""
    from eventfiles import records

    data = records(*(event(1, [(_tag(0, i), 0.25)]) for i in range(50)))
    got = parse_event_file(data, max_records=20)
    assert got.records == 20 and len(got.table[0]) == 20 and got.dropped == {RUN_RECORDS: 1}
    assert parse_event_file(data, max_records=50).dropped == {}


# -- the time limit covers the analysis -----------------------------------------------------

@pytest.fixture
def two_runs(tmp_path: Path) -> Path:
    for name in ("slow", "good"):
        (tmp_path / name).mkdir()
        shutil.copy(HAND_TRACES / "steps.json", tmp_path / name / "w0.1.pt.trace.json")
    return tmp_path


def test_the_time_limit_covers_the_analysis(two_runs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: ``--tb_attn_parse_timeout_s`` was checked between chunks of the file only, so an
    analysis that did not end held its worker for ever and the run stayed ``loading``."""
    real = loader_module.analyze
    calls: list[str] = []

    def analyze(events: Any) -> Any:
        calls.append("analyze")
        if len(calls) == 1:
            while True:  # an analysis that never ends (pure Python, as the analysis is)
                pass
        return real(events)

    monkeypatch.setattr(loader_module, "analyze", analyze)  # the name the loader calls
    service = Service(str(two_runs), wait_s=60, parse_timeout_s=0.5, parse_workers=1)
    slow = service.summary("slow", None, None)
    (error,) = slow.errors
    assert slow.workers == [] and "\n" not in error.error
    assert "reading and analyzing this trace took longer than the limit of 0.5 s" in error.error
    # the one worker is free again, and the failure is remembered (not parsed per request)
    assert service.summary("good", None, None).workers
    assert service.summary("slow", None, None).errors == [error] and calls == ["analyze", "analyze"]
    (listed,) = [r for r in service.runs_response(refresh=False).runs if r.run == "slow"]
    assert listed.status == "error" and "longer than the limit" in (listed.error or "")


# -- a slow or huge run delays no other run -------------------------------------------------

def _big_trace(path: Path, events: int) -> None:
    """A real Kineto trace of ``events`` CPU ops (about 120 bytes each)."""
    with path.open("w") as f:
        f.write('{"schemaVersion": 1, "traceEvents": [\n')
        for i in range(events):
            f.write(f'{{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": {i * 2}, '
                    f'"dur": 1, "args": {{"External id": {i}}}}},\n')
        f.write('{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 0, "dur": 1}\n]}\n')


def test_a_run_of_large_traces_does_not_delay_a_small_runs_summary(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: the large run's traces took both parse workers, and the small run's ``/summary``
    waited behind them."""
    big = tmp_path / "huge"
    big.mkdir()
    for w in range(4):
        _big_trace(big / f"w{w}.1.pt.trace.json", 100_000)
    small = tmp_path / "small"
    small.mkdir()
    shutil.copy(HAND_TRACES / "steps.json", small / "w0.1.pt.trace.json")
    size = (big / "w0.1.pt.trace.json").stat().st_size
    monkeypatch.setattr(lanes_module, "HEAVY_TRACE_BYTES", size)  # the large run's files are "large"
    service = Service(str(tmp_path), wait_s=0.05)
    with pytest.raises(Loading):
        service.summary("huge", None, None)
    (huge,) = [r for r in service.runs() if r.name == "huge"]
    started = time.monotonic()
    service.wait_s = 60
    answered = service.summary("small", None, None)
    took = time.monotonic() - started
    assert answered.workers and not answered.errors
    # The large run was still being parsed when the small one was answered: it waited for none of it.
    still = [t for t in huge.files if service.jobs.running(file_version(t))]
    assert len(still) == len(huge.files), f"{len(huge.files) - len(still)} large trace(s) parsed first ({took:.2f} s)"
    assert service.jobs.slow(huge.path) is False  # large by size: its own lane, without being marked
