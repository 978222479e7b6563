"""The one per-file pipeline (``engine/pipeline.py``): memory, then the summary cache (one batch),
then a parse, each asked once per file and in that order, on whichever schedule runs them; and
each run assembled as ``Loader.summarize_run`` assembles it."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from tb_attn_plugin.engine import summary_cache
from tb_attn_plugin.engine.loader import Loader, resolve_runs
from tb_attn_plugin.engine.pipeline import Known, Meta, ParseOne, Schedule, cached_or_none, summarize_runs
from tb_attn_plugin.trace.discover import Run, TraceFile
from tb_attn_plugin.trace.events import TraceError
from tb_attn_plugin.types.schema import WorkerSummary


class _Recording(Schedule):
    """The serial schedule, saying which step it was asked for, for which files."""

    def __init__(self) -> None:
        self.steps: list[tuple[str, list[str]]] = []

    def answered(self, traces: Sequence[TraceFile]) -> None:
        self.steps.append(("answered", sorted(t.worker for t in traces)))

    def from_summary_cache(self, traces: list[TraceFile],
                           read: Callable[[list[TraceFile]], dict[TraceFile, WorkerSummary]]
                           ) -> dict[TraceFile, WorkerSummary]:
        self.steps.append(("summary cache", sorted(t.worker for t in traces)))
        return super().from_summary_cache(traces, read)

    def parse(self, todo: list[tuple[TraceFile, Meta]], parse: ParseOne) -> Known:
        self.steps.append(("parse", sorted(t.worker for t, _ in todo)))
        return super().parse(todo, parse)


@pytest.fixture
def logdir(tmp_path: Path, builtin_logdir: Path) -> Path:
    for run in ("naive", "sdpa"):
        shutil.copytree(builtin_logdir / run, tmp_path / "logdir" / run)
    return tmp_path / "logdir"


def _runs(logdir: Path) -> list[Run]:
    return resolve_runs(str(logdir))


def test_each_cache_is_asked_once_per_file_in_order(logdir: Path, tmp_path: Path, decodes: list[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    read: list[str] = []
    real = summary_cache._read_entry

    def counting(root: int, key: str, **kwargs: bool) -> bytes | None:
        read.append(key)
        return real(root, key, **kwargs)

    monkeypatch.setattr(summary_cache, "_read_entry", counting)
    (tmp_path / "cache").mkdir()
    runs = _runs(logdir)
    workers = sorted(t.worker for r in runs for t in r.files)
    schedule = _Recording()
    loader = Loader(cache_dir=str(tmp_path / "cache"))
    first = summarize_runs(loader, runs, schedule=schedule)
    # nothing cached: both files asked of the summary cache once, in one batch, then parsed once
    assert schedule.steps == [("summary cache", workers), ("parse", workers)]
    assert len(read) == 2 and len(decodes) == 2
    again = _Recording()
    assert summarize_runs(loader, runs, schedule=again) == first  # memory answers: no other step
    assert again.steps == [("answered", workers), ("parse", [])] and len(read) == 2
    fresh = _Recording()
    assert summarize_runs(Loader(cache_dir=str(tmp_path / "cache")), runs, schedule=fresh) == first
    assert fresh.steps == [("summary cache", workers), ("answered", workers), ("parse", [])]
    assert len(read) == 4 and len(decodes) == 2  # another process's loader: the cache, no parse


def test_the_pipeline_assembles_each_run_as_the_loader_does(logdir: Path) -> None:
    runs = _runs(logdir)
    assert summarize_runs(Loader(), runs) == [Loader().summarize_run(r) for r in runs]
    (naive,) = [r for r in runs if r.name == "naive"]
    worker = naive.files[0].worker
    (one,) = summarize_runs(Loader(), [naive], worker=worker)
    assert [w.worker for w in one.workers] == [worker]


def test_a_remembered_failure_is_answered_by_memory_without_a_parse(tmp_path: Path, decodes: list[str]) -> None:
    bad = tmp_path / "run" / "w.1.pt.trace.json"
    bad.parent.mkdir()
    bad.write_bytes(b'{"traceEvents": [')
    (run,) = resolve_runs(str(tmp_path / "run"))
    loader = Loader()
    (first,) = summarize_runs(loader, [run])
    assert "truncated" in first.errors[0].error and len(decodes) == 1
    schedule = _Recording()
    (second,) = summarize_runs(loader, [run], schedule=schedule)
    assert second == first and len(decodes) == 1 and schedule.steps == [("answered", ["w"]), ("parse", [])]
    with pytest.raises(TraceError, match="truncated"):
        cached_or_none(loader, run.files[0])


def test_cached_or_none_is_none_for_a_file_no_cache_holds(logdir: Path, decodes: list[str]) -> None:
    trace = _runs(logdir)[0].files[0]
    loader = Loader()
    assert cached_or_none(loader, trace) is None and decodes == []
    summary = loader.summarize_file(trace)
    assert cached_or_none(loader, trace) is summary


def test_metadata_notes_are_said_once_per_run(tmp_path: Path, builtin_logdir: Path) -> None:
    shutil.copytree(builtin_logdir / "naive", tmp_path / "run")
    os.link(tmp_path / "run" / "tb_attn_run.json", tmp_path / "elsewhere.json")  # refused, with a note
    said: list[str] = []
    (summary,) = summarize_runs(Loader(), resolve_runs(str(tmp_path / "run")), warn=said.append)
    assert len(said) == 1 and "tb_attn_run.json" in said[0] and summary.metadata is None
