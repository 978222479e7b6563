"""The tab's background work over its job lanes (``jobs``): each trace file's parse as one job,
shared by whoever needs the file's summary or analysis, and the pipeline's schedule for a route
(``Route``), which runs the pipeline's costly steps (``engine.pipeline``) as jobs and waits at
most ``wait_s`` for them before the route answers "loading" (``http_status.Loading``)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, wait
from typing import Any

from tb_attn_plugin.engine.head_events import UNREADABLE, EventStats
from tb_attn_plugin.engine.pipeline import Known, Meta, ParseOne, Schedule
from tb_attn_plugin.engine.workspace import Parsed, Workspace
from tb_attn_plugin.server.http_status import Loading
from tb_attn_plugin.server.jobs import Jobs
from tb_attn_plugin.trace import io
from tb_attn_plugin.trace.discover import Run, TraceFile
from tb_attn_plugin.trace.events import ReadError, TraceError
from tb_attn_plugin.trace.io import FileInfo
from tb_attn_plugin.trace.version import file_version
from tb_attn_plugin.types.schema import WorkerSummary

__all__ = ["HEAVY_TRACE_BYTES", "Lanes", "Route"]

_RunStats = dict[FileInfo, EventStats]  # a run's event files' statistics
#: A trace this large as stored is parsed in the jobs' slow lane from the start (``jobs``): at the
#: decoder's tens of MB/s on a 2-core machine it takes seconds, and a gzip more.
HEAVY_TRACE_BYTES = 64 << 20


class Lanes:
    """The service's background work: ``engine``'s parses and reads in ``jobs``, each waited for
    at most ``wait_s`` by a request; ``logdir``: what a listed file must still be inside."""

    def __init__(self, engine: Workspace, jobs: Jobs, logdir: str, wait_s: float) -> None:
        self.engine, self.jobs, self.logdir, self.wait_s = engine, jobs, logdir, wait_s

    def parse(self, run: Run, trace: TraceFile, metadata: Meta, *, background: bool = False,
              summary_only: bool = False) -> Future[Parsed]:
        """The job that parses ``trace`` (started if need be): one per file, whoever needs its
        summary or its analysis; the engine caches both. ``background``: a parse ahead of clicks,
        in the jobs' background lane, which keeps the summary only (the runs list's figures), unless
        a user asked for the file meanwhile: analyses held are those of runs users opened.
        ``summary_only``: the caches' summary will do (``--tb_attn_cache_dir``): then the job may
        parse nothing, and its result has no analysis. The job is the run's (``jobs``: a slow run's
        jobs share a lane of their own), and a trace of ``HEAVY_TRACE_BYTES`` or more starts in the
        slow lane."""
        key = file_version(trace)

        def job() -> Parsed:
            self.confine(trace)
            if not background:
                return self.engine.parse(trace, metadata=metadata, summary_only=summary_only)
            parsed = self.engine.parse(trace, metadata=metadata, keep=False, summary_only=summary_only)
            if parsed.analysis is not None and not self.jobs.background(key):  # a user asked for it meanwhile
                self.engine.keep(trace, parsed.analysis)
            return parsed

        return self.jobs.submit(key, job, background=background, group=run.path,
                                heavy=trace.size >= HEAVY_TRACE_BYTES)

    def confine(self, trace: TraceFile) -> None:
        """Refuses a listed file whose directory became a link out of the logdir since the
        listing (the file itself is opened without following links)."""
        if not io.inside(self.logdir, trace.path):
            raise ReadError(f"cannot read {trace.name}: it is no longer inside the log directory")

    def wait(self, futures: Sequence[Future[Any]], runs: list[str], files: int) -> None:
        """Waits at most ``wait_s`` for ``futures``; raises Loading while some still run."""
        if not futures:
            return
        wait(futures, timeout=self.wait_s)
        pending = sum(not f.done() for f in futures)
        if pending:
            raise Loading(runs, pending, files)

    def route(self, runs: Sequence[Run], worker: str | None) -> Route:
        """The pipeline's schedule for one request about ``runs`` (each limited to ``worker``)."""
        return Route(self, runs, worker)

    def head_stats(self, runs: Sequence[Run]) -> tuple[dict[FileInfo, EventStats], list[Future[_RunStats]]]:
        """The statistics of the runs' event files already read, and a job reading each other
        run's: one per run version, shared like a trace's parse (``head_events.read_run``: the
        run's bounds and time limit hold for its files together)."""
        done: dict[FileInfo, EventStats] = {}
        reads: list[Future[_RunStats]] = []
        for run in {run.path: run for run in runs if run.event_files}.values():
            got = self.engine.cached_event_stats(run)
            if got is not None:
                done.update(got)
            else:
                key = ("head-stats", run.path, *(file_version(f) for f in run.event_files))
                reads.append(self.jobs.submit(key, functools.partial(self._read_events, run), group=run.path))
        return done, reads

    def _read_events(self, run: Run) -> dict[FileInfo, EventStats]:
        inside = [info for info in run.event_files if io.inside(self.logdir, info.path)]
        got = self.engine.event_stats(run, inside)
        for info in run.event_files:  # its directory became a link out of the logdir
            got.setdefault(info, EventStats({}, None, {UNREADABLE: 1}))
        return got


class Route(Schedule):
    """The pipeline's schedule for one request: the run's event files read in jobs from the start,
    the summary cache read in one job (a thousand ranks' entries on S3 are one batch of requests,
    not a thousand parses), each file's parse a job (``Lanes.parse``), all waited for together."""

    def __init__(self, lanes: Lanes, runs: Sequence[Run], worker: str | None) -> None:
        self.lanes, self.names = lanes, [run.name for run in runs]
        self.owner = {trace: run for run in runs for trace in run.files if worker is None or trace.worker == worker}
        self.stats, self.reads = lanes.head_stats(runs)
        self.files = len(self.owner) + sum(len(run.event_files) for run in {run.path: run for run in runs}.values())

    def from_summary_cache(self, traces: list[TraceFile],
                           read: Callable[[list[TraceFile]], dict[TraceFile, WorkerSummary]]
                           ) -> dict[TraceFile, WorkerSummary]:
        """Files whose own job already runs are left to it."""
        jobs = self.lanes.jobs
        fresh = [t for t in traces if not jobs.running(file_version(t))]
        if not fresh:
            return {}
        key = ("summary-cache", *(file_version(t) for t in fresh))
        batch: Future[dict[TraceFile, WorkerSummary]] = jobs.submit(key, lambda: read(fresh))
        self.lanes.wait([batch], self.names, self.files)
        return batch.result()

    def parse(self, todo: list[tuple[TraceFile, Meta]], parse: ParseOne) -> Known:
        jobs = {trace: self.lanes.parse(self.owner[trace], trace, meta) for trace, meta in todo}
        self.lanes.wait([*jobs.values(), *self.reads], self.names, self.files)
        known: Known = {}
        for trace, job in jobs.items():
            failure = job.exception()
            if failure is not None and not isinstance(failure, TraceError):
                raise failure  # a bug: a 500
            known[trace] = failure if failure is not None else job.result().summary
        for read in self.reads:
            self.stats.update(read.result())
        return known

    def head_stats(self, runs: Sequence[Run]) -> Mapping[FileInfo, EventStats]:
        return self.stats
