"""The one per-file pipeline, which every door's summaries go through: for each trace file,

1. memory (the ``Loader``'s summary, or the failure it remembers),
2. the summary cache (one batch of reads for every file memory did not answer),
3. a parse (reading, analysis and summary: ``Loader.parse``),

then each run's summary assembled from its files' (``Loader.summarize_run``). Each cache is
asked once per file. How the steps that cost I/O run is the ``Schedule``'s: this module's runs
them here, one file after another; ``fanout.Fanout`` parses in a pool of processes or on an
executor (Dask); the tab's service runs them in its job lanes with a wait budget
(``server.lanes``), answering "loading" when they take longer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import EllipsisType
from typing import TYPE_CHECKING, Protocol

from tb_attn_plugin.engine.metadata import read_metadata
from tb_attn_plugin.trace.discover import Run, TraceFile
from tb_attn_plugin.trace.events import TraceError
from tb_attn_plugin.trace.io import FileInfo
from tb_attn_plugin.types.schema import RunSummary, WorkerSummary

if TYPE_CHECKING:
    from tb_attn_plugin.engine.head_events import EventStats
    from tb_attn_plugin.engine.loader import Loader, Parsed

__all__ = ["Known", "Meta", "Schedule", "cached_or_none", "summarize_files", "summarize_runs"]

Meta = dict[str, object] | None  # a run's metadata, as the analysis reads it
#: What the pipeline knows of each file: its summary, or why it failed.
Known = dict[TraceFile, WorkerSummary | TraceError]


class ParseOne(Protocol):
    """The third step, for one file (``Loader.parse``). Raises TraceError."""

    def __call__(self, trace: TraceFile, *, metadata: Meta) -> Parsed: ...


class Schedule:
    """How the pipeline's costly steps run. This one: here, one file after another, with the run's
    event files read when its summary is assembled. A subclass overrides what it runs elsewhere."""

    def begin(self, traces: Sequence[TraceFile]) -> None:
        """The files the pipeline is about to summarize (a progress bar counts them)."""

    def answered(self, traces: Sequence[TraceFile]) -> None:
        """Files the caches answered (no parse)."""

    def from_summary_cache(self, traces: list[TraceFile],
                           read: Callable[[list[TraceFile]], dict[TraceFile, WorkerSummary]]
                           ) -> dict[TraceFile, WorkerSummary]:
        """Step 2, for the files memory did not answer: ``read`` them, in one batch."""
        return read(traces)

    def parse(self, todo: list[tuple[TraceFile, Meta]], parse: ParseOne) -> Known:
        """Step 3, for the files no cache answered (possibly none): each one's summary or error."""
        known: Known = {}
        for trace, meta in todo:
            try:
                known[trace] = parse(trace, metadata=meta).summary
            except TraceError as exc:
                known[trace] = exc
        return known

    def head_stats(self, runs: Sequence[Run]) -> Mapping[FileInfo, EventStats] | EllipsisType:
        """The statistics of the runs' event files, or ``...``: read as each run is assembled."""
        return ...


def _lookup(loader: Loader, files: Sequence[tuple[TraceFile, Meta]],
            schedule: Schedule) -> tuple[Known, list[tuple[TraceFile, Meta]]]:
    """Steps 1 and 2: what the caches know, and the files left to parse."""
    known: Known = {}
    todo: list[tuple[TraceFile, Meta]] = []
    for trace, meta in files:
        hit = loader.cached(trace)
        if hit is None:
            todo.append((trace, meta))
        else:
            known[trace] = hit
    if loader.disk is not None and todo:
        hits = schedule.from_summary_cache([t for t, _ in todo], loader.from_summary_cache)
        if hits:
            known.update(hits)
            todo = [(t, m) for t, m in todo if t not in hits]
    if known:
        schedule.answered(list(known))
    return known, todo


def cached_or_none(loader: Loader, trace: TraceFile) -> WorkerSummary | None:
    """Steps 1 and 2 for one file: its summary from the caches, or None (it needs a parse). Raises
    its remembered failure (TraceError)."""
    known, _ = _lookup(loader, [(trace, None)], Schedule())
    hit = known.get(trace)
    if isinstance(hit, TraceError):
        raise hit
    return hit


def summarize_files(loader: Loader, files: Sequence[tuple[TraceFile, Meta]],
                    schedule: Schedule | None = None) -> Known:
    """Steps 1 to 3 for ``files`` (each with its run's metadata), as ``schedule`` runs them
    (None: here, one after another)."""
    schedule = schedule or Schedule()
    schedule.begin([t for t, _ in files])
    known, todo = _lookup(loader, files, schedule)
    known.update(schedule.parse(todo, loader.parse))
    return known


def summarize_runs(loader: Loader, runs: Sequence[Run], *, worker: str | None = None,
                   metadata: Sequence[Meta] | None = None, schedule: Schedule | None = None,
                   warn: Callable[[str], None] | None = None) -> list[RunSummary]:
    """Every run's summary (each limited to ``worker``): the pipeline's steps for all their files
    at once, as ``schedule`` runs them, then each run assembled in order. ``metadata``: the runs',
    if the caller has them (None: each run's file is read here, and what was done to it said
    through ``warn``)."""
    schedule = schedule or Schedule()
    if metadata is None:
        read = [read_metadata(run.metadata_path) for run in runs]
        for _, note in read:
            if note is not None and warn is not None:
                warn(note)
        metadata = [value for value, _ in read]
    files = [(trace, meta) for run, meta in zip(runs, metadata, strict=True) for trace in run.files
             if worker is None or trace.worker == worker]
    known = summarize_files(loader, files, schedule)
    stats = schedule.head_stats(runs)
    return [loader.summarize_run(run, worker=worker, metadata=meta, known=known, head_stats=stats)
            for run, meta in zip(runs, metadata, strict=True)]
