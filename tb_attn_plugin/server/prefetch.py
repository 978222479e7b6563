"""Parsing ahead of clicks for the runs list: which traces, how many, and the figures it yields.

Listing the runs (``/runs``) queues the parse of the newest runs' traces in the jobs'
background lane, so that their figures (``analysis/cross_run/figures.py``) fill in without anyone opening
each run. How many: three quarters of what the summary cache holds, so that parsing ahead never
evicts what it parsed and leaves room for the runs users open; which: the newest runs, by their
newest trace's modification time. A file version is queued ahead once: a summary the cache let
go since is parsed again only when a user asks for it, never by listings in a loop. The figures
are read from the caches only: listing never waits for a parse.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from tb_attn_plugin.analysis.cross_run.figures import NO_ATTENTION, run_figures
from tb_attn_plugin.engine.workspace import Workspace
from tb_attn_plugin.trace.discover import Run, TraceFile
from tb_attn_plugin.trace.events import TraceError
from tb_attn_plugin.trace.version import Version, file_version
from tb_attn_plugin.types.schema import WorkerSummary
from tb_attn_plugin.types.views import RunFigures

__all__ = ["SUMMARY_GUESS_BYTES", "Prefetch", "budget", "cached_figures"]

#: A summary's size in the cache before any is known: a 12-layer model's is about 100 KiB, the
#: test models' about 10 KiB. Guessed large, so that the first parses ahead fit in the cache.
SUMMARY_GUESS_BYTES = 64 << 10
_REMEMBERED = 1 << 16  # file versions remembered as queued ahead (a few MiB at most)


def budget(engine: Workspace, limit: int | None) -> int:
    """How many trace files may be parsed ahead: three quarters of the summaries the engine's
    cache holds (guessing ``SUMMARY_GUESS_BYTES`` each while it holds none), leaving the rest
    to the runs users open beyond them and to summaries larger than the mean; or ``limit`` if
    that is less."""
    room = engine.summaries_room(guess_bytes=SUMMARY_GUESS_BYTES) * 3 // 4
    return room if limit is None else max(0, min(room, limit))


class Prefetch:
    """Which traces to parse ahead, remembering those queued once."""

    def __init__(self) -> None:
        self._queued: dict[Version, None] = {}
        self._lock = threading.Lock()

    def plan(self, runs: list[Run], files: int, *, done: Callable[[TraceFile], bool]) -> list[tuple[Run, TraceFile]]:
        """The traces to queue now: those of the newest runs within ``files`` trace files (the
        ``budget``), counted from the newest run whether parsed or not (so the set stays the same
        from one listing to the next), that are not ``done`` (parsed, failed or queued) and were
        never queued ahead before. A run with more traces than the budget has left is skipped whole;
        an older, smaller one may still fit."""
        left = files
        if left <= 0:
            return []
        newest = sorted(runs, key=lambda r: (-max((f.mtime for f in r.files), default=0.0), r.name))
        todo: list[tuple[Run, TraceFile]] = []
        with self._lock:
            for run in newest:
                if len(run.files) > left:
                    continue
                left -= len(run.files)
                for trace in run.files:
                    key = file_version(trace)
                    if key in self._queued or done(trace):
                        continue
                    self._queued[key] = None
                    todo.append((run, trace))
            while len(self._queued) > _REMEMBERED:
                del self._queued[next(iter(self._queued))]
        return todo


def cached_figures(engine: Workspace, run: Run,
                   metadata: dict[str, object] | None) -> tuple[RunFigures | None, str | None]:
    """The run's figures once every trace of it is parsed or failed, from the engine's caches;
    or why it has none (no trace could be read: their errors; or ``NO_ATTENTION``); (None, None)
    while some trace is not parsed yet."""
    known: dict[TraceFile, WorkerSummary | TraceError] = {}
    for trace in run.files:
        summary, failure = engine.cached(trace)
        if summary is None and failure is None:
            return None, None
        known[trace] = summary if summary is not None else TraceError(failure or "")
    if not known:
        return None, None
    whole = engine.run_summary(run, metadata=metadata, known=known, head_stats=None)  # figures need none
    figures = run_figures(whole)
    if figures is not None:
        return figures, None
    if not whole.workers:
        return None, "; ".join(sorted({e.error for e in whole.errors}))
    return None, NO_ATTENTION
