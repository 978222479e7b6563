"""What the tab's routes do: background parsing, cached views, and each route's result.

Routes (``plugin.py``) parse arguments and respond; everything else is here: each route's body
(``types``, ``server.responses``). Which runs there are is the ``Registry``'s; per-file caching
and summarizing are the engine's (``engine.Workspace``: its pipeline, run on the jobs' lanes,
``server.lanes``). Errors are raised as TensorBoard's ``errors.NotFoundError`` /
``errors.InvalidArgumentError``, which carry their HTTP status; ``http_errors`` is the one place
that turns the engine's errors into them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING

import msgspec
from tensorboard import errors

from tb_attn_plugin.analysis.attribution.analyze import Analysis
from tb_attn_plugin.analysis.cross_run.compare import compare
from tb_attn_plugin.analysis.cross_run.ranks import DEFAULT_MARGIN, ranks
from tb_attn_plugin.analysis.cross_run.scaling import scaling
from tb_attn_plugin.analysis.cross_run.strategies import LOSS_TOL, REL_TOL, check_tolerance, strategies
from tb_attn_plugin.analysis.views import views
from tb_attn_plugin.analysis.views.drilldown import drilldown as drilldown_view
from tb_attn_plugin.engine.cache import LRUCache
from tb_attn_plugin.engine.limits import DEFAULT_MAX_TRACE_BYTES, Limits
from tb_attn_plugin.engine.ranksel import RankSet, file_ranks, select_ranks
from tb_attn_plugin.engine.workspace import Workspace
from tb_attn_plugin.server.http_status import Loading, http_errors
from tb_attn_plugin.server.jobs import Jobs
from tb_attn_plugin.server.lanes import Lanes
from tb_attn_plugin.server.prefetch import Prefetch, budget, cached_figures
from tb_attn_plugin.server.profiler_link import profiler_link
from tb_attn_plugin.server.registry import Registry
from tb_attn_plugin.server.responses import MetadataResponse, RunEntry, RunsResponse, RunStatus, SpanEntry, WorkerEntry
from tb_attn_plugin.trace import io
from tb_attn_plugin.trace.discover import Run, TraceFile
from tb_attn_plugin.trace.version import file_version
from tb_attn_plugin.types.encoding import to_json
from tb_attn_plugin.types.results import Comparison, RankView, ScalingFits
from tb_attn_plugin.types.schema import RunSummary
from tb_attn_plugin.types.strategies import StrategyTable
from tb_attn_plugin.vocab.names import encodable

if TYPE_CHECKING:
    from tb_attn_plugin.engine.ranksel import RankSet

__all__ = ["Loading", "Service", "http_errors"]

_RECENT_S = 60.0  # an incomplete trace modified this recently is still being written
POLL_RUNS_MS = 1000  # how soon a client lists the runs again while their figures are parsed in the background


class Service:
    """The tab's routes over one logdir: its registry, a background parser and cached views.

    ``cache_bytes`` bounds the parsed data kept in memory (``--tb_attn_cache_mb``),
    ``max_trace_bytes`` refuses larger traces (``--tb_attn_max_trace_mb``), ``parse_workers``
    threads parse what users ask for, and a route waits at most ``wait_s`` for them before it
    answers "loading". Listing the runs also parses the newest runs' traces ahead of clicks, on
    a thread of its own (``prefetch``), at most ``prefetch_files`` of them: None is as many as
    fit in the summary cache (``prefetch.budget``); 0, the default, none. The plugin passes
    ``--tb_attn_prefetch_files``, which is None unless set. ``peaks``: the user's peak FLOP/s and
    bytes/s for every roofline (``--tb_attn_peak_flops``, ``--tb_attn_peak_bw``). ``cache_dir``:
    the summary cache (``--tb_attn_cache_dir``, a directory or an fsspec URL, bounded locally by
    ``cache_max_bytes``), read before any trace is parsed: summaries a batch job put there cost
    no parse.
    """

    def __init__(self, logdir: str, *, scan_ttl_s: float = 5.0, relist_min_s: float = 1.0, keep_analyses: int = 256,
                 cache_bytes: int = 1 << 30, max_trace_bytes: int | None = DEFAULT_MAX_TRACE_BYTES,
                 parse_workers: int = 2, wait_s: float = 0.5, parse_timeout_s: float | None = 600.0,
                 prefetch_files: int | None = 0, peaks: tuple[float | None, float | None] = (None, None),
                 cache_dir: str | None = None, cache_max_bytes: int | None = None) -> None:
        self.logdir = logdir
        self.registry = Registry(logdir, scan_ttl_s=scan_ttl_s, relist_min_s=relist_min_s)
        engine = Workspace(logdir, cache_dir=cache_dir, cache_max_bytes=cache_max_bytes, peaks=peaks,
                           limits=Limits(max_trace_bytes=max_trace_bytes, parse_timeout_s=parse_timeout_s,
                                         cache_bytes=cache_bytes, keep_analyses=keep_analyses))
        self.jobs = Jobs(parse_workers)
        self.lanes = Lanes(engine, self.jobs, logdir, wait_s)
        self.prefetch_files = prefetch_files
        self._prefetch = Prefetch()
        # Views of one trace, encoded: small next to the analyses they come from (a timeline is at
        # most ``limit`` events), so a sixteenth of the cache, and a view's second request is free.
        self._views: LRUCache[bytes] = LRUCache(max_entries=512, max_bytes=max(cache_bytes // 16, 1 << 20),
                                                sizeof=len)

    @property
    def engine(self) -> Workspace:
        """The engine, which the routes and the background jobs (``lanes``) share."""
        return self.lanes.engine

    @engine.setter
    def engine(self, engine: Workspace) -> None:
        self.lanes.engine = engine

    @property
    def wait_s(self) -> float:
        """How long a route waits for its jobs before it answers "loading"."""
        return self.lanes.wait_s

    @wait_s.setter
    def wait_s(self, wait_s: float) -> None:
        self.lanes.wait_s = wait_s

    def runs(self, *, refresh: bool = False) -> list[Run]:
        return self.registry.runs(refresh=refresh)

    def has_traces(self) -> bool:
        return self.registry.has_traces()

    def metadata(self, run: Run) -> dict[str, object] | None:
        return self.registry.metadata(run)

    def run(self, name: str) -> Run:
        found = self.registry.find(name)
        if found is None:
            raise errors.NotFoundError(f"no run named {encodable(name)!r} in {encodable(self.logdir)}")
        return found

    def trace_file(self, run: Run, worker: str | None, span: str | None) -> TraceFile:
        files = [f for f in run.files if worker is None or f.worker == worker]
        if not files:
            raise errors.NotFoundError(f"no worker {worker!r} in run {run.name!r}")
        if span is not None:
            files = [f for f in files if f.span == span]
            if not files:
                raise errors.NotFoundError(f"no span {span!r} for worker {worker!r} in run {run.name!r}")
        if len(files) > 1:
            choices = ", ".join(f"{f.worker}/{f.span}" for f in files[:8])
            raise errors.InvalidArgumentError(f"run {run.name!r} has several traces; pass worker and span ({choices})")
        return files[0]

    def _status(self, run: Run, metadata: dict[str, object] | None) -> tuple[RunStatus, str | None]:
        if metadata is not None and metadata.get("status") == "running":
            return "running", None
        if any(self.jobs.running(file_version(f)) for f in run.files):
            return "loading", None
        cached = [self.engine.cached(f) for f in run.files]
        failures = [c.failure for c in cached]
        if any(c.summary is not None for c in cached):
            return "ready", None
        if run.files and all(f is not None for f in failures):
            # abs: a file stamped in the future (a skewed clock) is not "being written" forever
            recent = any(abs(time.time() - f.mtime) < _RECENT_S for f in run.files)
            if recent and any(_incomplete(msg or "") for msg in failures):
                return "loading", None
            return "error", "; ".join(sorted({m for m in failures if m}))
        return "unloaded", None

    def prefetch(self, runs: list[Run]) -> int:
        """Queues the parse of the newest runs' traces ahead of clicks, in the jobs' background
        lane (``prefetch.Prefetch``, which says which). Returns the files queued."""
        todo = self._prefetch.plan(runs, budget(self.engine, self.prefetch_files),
                                   done=lambda trace: self.jobs.running(file_version(trace))
                                   or self.engine.cached(trace) != (None, None))
        for run, trace in todo:
            self.lanes.parse(run, trace, self.metadata(run), background=True, summary_only=True)
        return len(todo)

    def _summaries(self, runs: list[Run], worker: str | None = None) -> list[RunSummary]:
        """The summaries of ``runs`` (each limited to ``worker``): the engine's pipeline, on the
        jobs' lanes (``lanes.Route``), answering "loading" while they run."""
        return self.engine.summaries(runs, worker=worker, metadata=[self.metadata(run) for run in runs],
                                     schedule=self.lanes.route(runs, worker))

    # -- routes ---------------------------------------------------------------------------
    def runs_response(self, *, refresh: bool) -> RunsResponse:
        """The listing, with each parsed run's figures (from the caches only: listing never waits
        for a parse), after queuing the parse of the newest runs not parsed yet (``prefetch``);
        ``poll_after_ms`` while some are being parsed."""
        asked_at = time.monotonic()
        runs = self.runs(refresh=refresh)
        retry_after_s = self.registry.refresh_due_in(asked_at) if refresh else None
        self.prefetch(runs)
        out = []
        for run in runs:
            metadata = self.metadata(run)
            status, error = self._status(run, metadata)
            figures, figures_error = cached_figures(self.engine, run, metadata)
            workers: dict[str, list[SpanEntry]] = {}
            for f in run.files:
                workers.setdefault(f.worker, []).append(SpanEntry(span=f.span, file=f.name, size=f.size, mtime=f.mtime))
            out.append(RunEntry(run=run.name, group=run.name.rsplit("/", 1)[0] if "/" in run.name else "",
                                info=self.registry.info(run), status=status, error=error,
                                workers=[WorkerEntry(worker=w, spans=spans) for w, spans in workers.items()],
                                figures=figures, figures_error=figures_error,
                                parsing=any(self.jobs.running(file_version(f)) for f in run.files)))
        return RunsResponse(logdir=self.logdir, runs=out, listing_error=self.registry.listing_error,
                            retry_after_s=retry_after_s,
                            poll_after_ms=POLL_RUNS_MS if any(r.parsing for r in out) else None)

    def metadata_body(self, run_name: str) -> bytes:
        """The run's whole metadata file as ``/metadata`` sends it (a ``MetadataResponse``,
        encoded): ``/runs`` carries a few fields of it, and the listing keeps only what the analysis
        reads, so the file is read again here (at most 1 MiB; no trace is parsed), once per file
        version: the body is cached with the views."""
        run = self.run(run_name)
        if run.metadata_file is None:
            return to_json(MetadataResponse(run=run.name, metadata=None))
        key = ("metadata", *file_version(run.metadata_file))
        body = self._views.get(key)
        if body is None:
            value, note = self.engine.metadata(run)
            body = to_json(MetadataResponse(run=run.name, metadata=value, note=note))
            self._views.put(key, body)
        return body

    def summary(self, run_name: str, worker: str | None, span: str | None) -> RunSummary:
        run = self.run(run_name)
        if worker is not None and worker not in run.workers:
            raise errors.NotFoundError(f"no worker {worker!r} in run {run_name!r}")
        (summary,) = self._summaries([run], worker)
        if span is not None:
            summary = msgspec.structs.replace(summary, workers=[w for w in summary.workers if w.span == span])
            if not summary.workers and not summary.errors:
                raise errors.NotFoundError(f"no span {span!r} in run {run_name!r}")
        return summary

    def ranks(self, run_name: str, *, margin: float | None, selection: RankSet | None = None) -> RankView:
        """The ranks view of the run, of only the ranks in ``selection`` (None: every rank): the
        other ranks' traces are never read, so a few ranks of a thousand load in a few parses."""

        if margin is not None and not 0 <= margin <= 10:
            raise errors.InvalidArgumentError("margin must be in 0..10 (a fraction: 0.2 is 20%)")
        run = self.run(run_name)
        picked = select_ranks(run, selection)
        if selection is not None and not picked.files:
            have = RankSet.of(file_ranks(run).values()).spec
            raise errors.NotFoundError(f"run {run_name!r} has no trace of ranks {selection.spec}"
                                       + (f" (its ranks are {have})" if have else " (it has no traces)"))
        (summary,) = self._summaries([picked])
        view = ranks(summary, margin=DEFAULT_MARGIN if margin is None else margin)
        return msgspec.structs.replace(view, ranks_total=len(run.workers),
                                       ranks_selected=None if selection is None else selection.spec)

    def _analysis(self, run_name: str, worker: str | None, span: str | None) -> tuple[Run, TraceFile, Analysis]:
        run = self.run(run_name)
        trace = self.trace_file(run, worker, span)
        with http_errors(trace.name):
            analysis = self.engine.cached_analysis(trace)
            for _ in range(2):  # the second: the job joined read only the summary cache
                if analysis is not None:
                    break
                job = self.lanes.parse(run, trace, self.metadata(run))
                self.lanes.wait([job], [run.name], 1)
                analysis = job.result().analysis
        if analysis is None:
            raise Loading([run.name], 1, 1)
        return run, trace, analysis

    def _view(self, run_name: str, worker: str | None, span: str | None, params: tuple[object, ...],
              compute: Callable[[Run, TraceFile, Analysis], msgspec.Struct]) -> bytes:
        """A view of one trace, encoded, as a background job like parsing: the request thread
        only waits ``wait_s`` for it (then 202), many clients share one job, and the result is
        cached per file version and arguments, so a view costs its compute once."""
        run, trace, analysis = self._analysis(run_name, worker, span)
        key = ("view", *file_version(trace), params)
        cached = self._views.get(key)
        if cached is not None:
            return cached

        def job() -> bytes:
            body = to_json(compute(run, trace, analysis))
            self._views.put(key, body)
            return body

        future: Future[bytes] = self.jobs.submit(key, job, group=run.path)
        self.lanes.wait([future], [run.name], 1)
        with http_errors():
            return future.result()

    def drilldown(self, run_name: str, worker: str | None, span: str | None, *, layer: int, phase: str | None,
                  backward: bool, profiler_installed: bool) -> bytes:
        def compute(run: Run, trace: TraceFile, analysis: Analysis) -> msgspec.Struct:
            return msgspec.structs.replace(
                drilldown_view(analysis, layer=layer, phase=phase, backward=backward),
                trace_file=trace.name, download=f"./trace?{_query(run=run.name, file=trace.name)}",
                profiler=profiler_link(run, trace, self.logdir) if profiler_installed else None)

        return self._view(run_name, worker, span, ("drilldown", layer, phase, backward, profiler_installed), compute)

    def memory(self, run_name: str, worker: str | None, span: str | None, *, step: int | None) -> bytes:
        return self._view(run_name, worker, span, ("memory", step),
                          lambda run, trace, analysis: views.memory_curve(analysis, step=step))

    def timeline(self, run_name: str, worker: str | None, span: str | None, *, step: int | None,
                 start_us: float | None, end_us: float | None, limit: int) -> bytes:
        return self._view(run_name, worker, span, ("timeline", step, start_us, end_us, limit),
                          lambda run, trace, analysis: views.timeline(analysis, step=step, start_us=start_us,
                                                                      end_us=end_us, limit=limit))

    def _runs_named(self, names: list[str]) -> list[RunSummary]:
        if not names:
            raise errors.InvalidArgumentError("pass runs=R1,R2,... (run names as /runs lists them)")
        if len(names) > 200:
            raise errors.InvalidArgumentError("at most 200 runs at once")
        return self._summaries([self.run(name) for name in names])

    @http_errors()
    def compare(self, names: list[str], baseline: str | None) -> Comparison:

        if baseline is not None and baseline not in names:
            raise errors.InvalidArgumentError(f"the baseline {baseline!r} is not one of the runs")
        return compare(self._runs_named(names), baseline=baseline)

    def scaling(self, names: list[str]) -> ScalingFits:

        return scaling(self._runs_named(names))

    @http_errors()
    def strategies(self, names: list[str], baseline: str | None, rel_tol: float | None,
                   loss_tol: float | None) -> StrategyTable:

        try:
            rel = check_tolerance("rel_tol", REL_TOL if rel_tol is None else rel_tol)
            loss = check_tolerance("loss_tol", LOSS_TOL if loss_tol is None else loss_tol)
        except ValueError as exc:
            raise errors.InvalidArgumentError(str(exc)) from None
        return strategies(self._runs_named(names), baseline=baseline, rel_tol=rel, loss_tol=loss)

    def open_trace(self, run_name: str, file: str) -> tuple[TraceFile, io.FileChunks]:
        """One of the run's trace files, opened for download (so that a storage error is a 404,
        not a 500 once the response has started)."""
        trace = self.trace_download(run_name, file)
        with http_errors(trace.name):
            return trace, io.raw_chunks(trace.path)

    def trace_download(self, run_name: str, file: str) -> TraceFile:
        run = self.run(run_name)
        for f in run.files:
            if f.name == file:
                with http_errors():
                    self.lanes.confine(f)
                return f
        raise errors.NotFoundError(f"no trace file {file!r} in run {run_name!r}")


def _incomplete(message: str) -> bool:
    """Whether a failure may only mean that the file is still being written."""
    return "truncated" in message or message.startswith("empty file")



def _query(**params: str) -> str:
    from urllib.parse import urlencode

    return urlencode(params)
