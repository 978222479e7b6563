"""What the tab's routes do: the run registry over a logdir, caches, and each route's result.

Routes (``plugin.py``) parse arguments and respond; everything else is here. Errors are
raised as TensorBoard's ``errors.NotFoundError`` / ``errors.InvalidArgumentError``, which carry
their HTTP status.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, wait
from typing import Any

from tensorboard import errors

from tb_attn_plugin.analysis import views
from tb_attn_plugin.analysis.summary import Analysis
from tb_attn_plugin.cache import LRUCache
from tb_attn_plugin.jobs import Jobs
from tb_attn_plugin.loader import Loader, parse_metadata
from tb_attn_plugin.schema import FileError, RanksResponse, RunSummary, WorkerSummary, to_json
from tb_attn_plugin.trace import io
from tb_attn_plugin.trace.discover import Run, TraceFile, display_name, find_runs
from tb_attn_plugin.trace.events import ReadError, TraceError

__all__ = ["Loading", "Service"]

RUNS_SCHEMA = "tb-attn.runs/1"
_RECENT_S = 60.0  # an incomplete trace modified this recently is still being written
RETRY_AFTER_MS = 300  # how soon a client polls a route that answered "loading"


class Loading(Exception):
    """A route's traces are still being parsed in the background: answer 202 and be polled."""

    def __init__(self, runs: list[str], pending: int, files: int) -> None:
        super().__init__(f"parsing {pending} of {files} trace files")
        self.runs, self.pending, self.files = runs, pending, files

    def body(self) -> dict[str, Any]:
        return {"status": "loading", "runs": self.runs, "pending": self.pending, "files": self.files,
                "retry_after_ms": RETRY_AFTER_MS}


class Service:
    """The run registry over one logdir, with caches and a background parser.

    ``cache_bytes`` bounds the parsed data kept in memory (``--tb_attn_cache_mb``),
    ``max_trace_bytes`` refuses larger traces (``--tb_attn_max_trace_mb``), ``parse_workers``
    threads parse in the background, and a route waits at most ``wait_s`` for them before it
    answers "loading".
    """

    def __init__(self, logdir: str, *, scan_ttl_s: float = 5.0, relist_min_s: float = 1.0, keep_analyses: int = 256,
                 cache_bytes: int = 1 << 30, max_trace_bytes: int | None = 4 << 30,
                 parse_workers: int = 2, wait_s: float = 0.5, parse_timeout_s: float | None = 600.0) -> None:
        self.logdir = logdir
        self.scan_ttl_s = scan_ttl_s
        self.relist_min_s = min(relist_min_s, scan_ttl_s)
        self.wait_s = wait_s
        self.loader = Loader(keep_analyses=keep_analyses, cache_bytes=cache_bytes, max_trace_bytes=max_trace_bytes,
                             parse_timeout_s=parse_timeout_s)
        self.jobs = Jobs(parse_workers)
        # Views of one trace, encoded: small next to the analyses they come from (a timeline is at
        # most ``limit`` events), so a sixteenth of the cache, and a view's second request is free.
        self._views: LRUCache[bytes] = LRUCache(max_entries=512, max_bytes=max(cache_bytes // 16, 1 << 20),
                                                sizeof=len)
        self._runs: list[Run] = []
        self._by_name: dict[str, Run] = {}
        self._scanned_at = -1e18
        self._lock = threading.Lock()  # guards the registry's fields; never held while reading storage
        self._listing = threading.Lock()  # one listing at a time
        self._active = False
        self._active_checked_at = -1e18
        self._metadata: dict[tuple[str, float | None], dict[str, object] | None] = {}
        self.listing_error: str | None = None

    # -- the registry ---------------------------------------------------------------------
    # Invariants: no storage is read while ``_lock`` is held, so a slow store (or a FIFO swapped
    # in for a metadata file) delays one listing, never the other requests; and listings are
    # rate-limited: a regular one every ``scan_ttl_s``, a forced one (``refresh=1``, or a run
    # name that the last listing lacks) at most every ``relist_min_s``, whoever asks for it and
    # however often. While one request lists, the others answer from the last listing.
    def runs(self, *, refresh: bool = False) -> list[Run]:
        return self._fresh(self.relist_min_s if refresh else self.scan_ttl_s)

    def _fresh(self, max_age_s: float) -> list[Run]:
        with self._lock:
            if time.monotonic() - self._scanned_at <= max_age_s:
                return self._runs
            listed_before = self._scanned_at > -1e18
        # The first listing is waited for; later ones are not, if another request is at it.
        if not self._listing.acquire(blocking=not listed_before):
            with self._lock:
                return self._runs
        try:
            with self._lock:
                if time.monotonic() - self._scanned_at <= max_age_s:
                    return self._runs  # listed by another request while this one waited
            return self._relist()
        finally:
            self._listing.release()

    def _relist(self) -> list[Run]:
        """A fresh listing (under ``_listing``). When the storage cannot be listed (a network
        error), the last listing stands and the error is reported: nothing was deleted, so
        nothing disappears."""
        started = time.monotonic()
        try:
            # A missing prefix lists as empty on object stores: no separate existence check.
            files = io.list_tree(self.logdir) if io.is_url(self.logdir) or io.is_dir(self.logdir) else []
        except TraceError as exc:
            with self._lock:
                self.listing_error = str(exc)
                self._scanned_at = started
                return self._runs
        runs = find_runs(self.logdir, files)
        self._read_metadata(runs)
        with self._lock:
            self.listing_error = None
            self._runs = runs
            # A display name can repeat only if one directory's name holds a literal "\xNN" and
            # another's that undecodable byte: the first in order is the one served.
            self._by_name = {}
            for run in runs:
                self._by_name.setdefault(run.name, run)
            self._scanned_at = started
            return runs

    def _read_metadata(self, runs: list[Run]) -> None:
        """Reads the metadata files that are new or changed since the last listing, in one batch,
        without the registry lock."""
        wanted = {(r.metadata_path, r.metadata_mtime) for r in runs if r.metadata_path is not None}
        with self._lock:
            missing = [key for key in wanted if key not in self._metadata]
        if not missing:
            return
        got = io.read_many([path for path, _ in missing if path is not None])
        parsed = {}
        for path, mtime in missing:
            raw = got.get(path or "")
            if isinstance(raw, ReadError):
                continue  # read again on the next listing
            parsed[(path, mtime)] = parse_metadata(raw) if isinstance(raw, bytes) else None
        with self._lock:
            if len(self._metadata) + len(parsed) > 16384:
                self._metadata = {k: v for k, v in self._metadata.items() if k in wanted}
            self._metadata.update(parsed)

    def has_traces(self) -> bool:
        """Cheap enough for ``is_active``: a fresh listing if there is one, else a local walk
        that stops at the first trace file (remote logdirs are listed, with the usual TTL)."""
        with self._lock:
            now = time.monotonic()
            if now - self._scanned_at <= self.scan_ttl_s:
                return bool(self._runs)
            if not io.is_url(self.logdir) and now - self._active_checked_at <= self.scan_ttl_s:
                return self._active
        if io.is_url(self.logdir):
            return bool(self.runs())
        active = io.has_trace_file(self.logdir)
        with self._lock:
            self._active, self._active_checked_at = active, time.monotonic()
        return active

    def run(self, name: str) -> Run:
        self.runs()
        with self._lock:
            found = self._by_name.get(name)
        if found is None:
            self.runs(refresh=True)  # created since the last listing? (rate-limited)
            with self._lock:
                found = self._by_name.get(name)
        if found is None:
            raise errors.NotFoundError(f"no run named {display_name(name)!r} in {display_name(self.logdir)}")
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

    def metadata(self, run: Run) -> dict[str, object] | None:
        if run.metadata_path is None:
            return None
        key = (run.metadata_path, run.metadata_mtime)
        with self._lock:
            if key in self._metadata:
                return self._metadata[key]
        self._read_metadata([run])
        with self._lock:
            return self._metadata.get(key)

    def _status(self, run: Run, metadata: dict[str, object] | None) -> tuple[str, str | None]:
        if metadata is not None and metadata.get("status") == "running":
            return "running", None
        if any(self.jobs.running(_file_key(f)) for f in run.files):
            return "loading", None
        summaries = [self.loader.cached_summary(f) for f in run.files]
        failures = [self.loader.cached_failure(f) for f in run.files]
        if any(s is not None for s in summaries):
            return "ready", None
        if run.files and all(f is not None for f in failures):
            # abs: a file stamped in the future (a skewed clock) is not "being written" forever
            recent = any(abs(time.time() - f.mtime) < _RECENT_S for f in run.files)
            if recent and any(_incomplete(msg or "") for msg in failures):
                return "loading", None
            return "error", "; ".join(sorted({m for m in failures if m}))
        return "unloaded", None

    # -- background parsing ---------------------------------------------------------------
    def _parse(self, trace: TraceFile, metadata: dict[str, object] | None) -> Future[WorkerSummary]:
        """The job that parses ``trace`` (started if need be); its result is the summary, and
        the analysis lands in the loader's cache for the views."""
        def job() -> WorkerSummary:
            self._confine(trace)
            return self.loader.summarize_file(trace, metadata=metadata)

        return self.jobs.submit(_file_key(trace), job)

    def _confine(self, trace: TraceFile) -> None:
        """Refuses a listed file whose directory became a link out of the logdir since the
        listing (the file itself is opened without following links)."""
        if not io.inside(self.logdir, trace.path):
            raise ReadError(f"cannot read {trace.name}: it is no longer inside the log directory")

    def _await(self, futures: list[Future[Any]], runs: list[str], files: int) -> None:
        if not futures:
            return
        wait(futures, timeout=self.wait_s)
        pending = sum(not f.done() for f in futures)
        if pending:
            raise Loading(runs, pending, files)

    def _start_summaries(self, run: Run, worker: str | None,
                         metadata: dict[str, object] | None) -> list[tuple[TraceFile, Future[WorkerSummary] | None]]:
        out: list[tuple[TraceFile, Future[WorkerSummary] | None]] = []
        for trace in run.files:
            if worker is not None and trace.worker != worker:
                continue
            done = self.loader.cached_summary(trace) is not None or self.loader.cached_failure(trace) is not None
            out.append((trace, None if done else self._parse(trace, metadata)))
        return out

    def _finish_summary(self, run: Run, metadata: dict[str, object] | None,
                        started: list[tuple[TraceFile, Future[WorkerSummary] | None]]) -> RunSummary:
        workers: list[WorkerSummary] = []
        failed: list[FileError] = []
        for trace, future in started:
            try:
                summary = future.result() if future is not None else self.loader.cached_summary(trace)
                if summary is None:  # evicted in the meantime: the failure or a fresh parse
                    summary = self.loader.summarize_file(trace, metadata=metadata)
                workers.append(summary)
            except TraceError as exc:
                failed.append(FileError(file=trace.name, error=str(exc)))
        return RunSummary(run=run.name, metadata=metadata, workers=workers, errors=failed)

    # -- routes ---------------------------------------------------------------------------
    def runs_response(self, *, refresh: bool) -> dict[str, Any]:
        out = []
        for run in self.runs(refresh=refresh):
            metadata = self.metadata(run)
            status, error = self._status(run, metadata)
            workers: dict[str, list[dict[str, object]]] = {}
            for f in run.files:
                workers.setdefault(f.worker, []).append(
                    {"span": f.span, "file": f.name, "size": f.size, "mtime": f.mtime})
            out.append({
                "run": run.name,
                "group": run.name.rsplit("/", 1)[0] if "/" in run.name else "",
                "metadata": metadata,
                "status": status,
                "error": error,
                "workers": [{"worker": w, "spans": spans} for w, spans in workers.items()],
            })
        return {"schema": RUNS_SCHEMA, "logdir": self.logdir, "runs": out, "listing_error": self.listing_error}

    def summary(self, run_name: str, worker: str | None, span: str | None) -> RunSummary:
        run = self.run(run_name)
        if worker is not None and worker not in run.workers:
            raise errors.NotFoundError(f"no worker {worker!r} in run {run_name!r}")
        metadata = self.metadata(run)
        started = self._start_summaries(run, worker, metadata)
        self._await([f for _, f in started if f is not None], [run.name], len(started))
        summary = self._finish_summary(run, metadata, started)
        if span is not None:
            summary.workers = [w for w in summary.workers if w.span == span]
            if not summary.workers and not summary.errors:
                raise errors.NotFoundError(f"no span {span!r} in run {run_name!r}")
        return summary

    def ranks(self, run_name: str, *, margin: float | None) -> RanksResponse:
        from tb_attn_plugin.analysis.ranks import DEFAULT_MARGIN, ranks

        if margin is not None and not 0 <= margin <= 10:
            raise errors.InvalidArgumentError("margin must be in 0..10 (a fraction: 0.2 is 20%)")
        return ranks(self.summary(run_name, None, None), margin=DEFAULT_MARGIN if margin is None else margin)

    def _analysis(self, run_name: str, worker: str | None, span: str | None) -> tuple[Run, TraceFile, Analysis]:
        run = self.run(run_name)
        trace = self.trace_file(run, worker, span)
        analysis = self.loader.cached_analysis(trace)
        if analysis is None:
            failure = self.loader.cached_failure(trace)
            if failure is None:
                future = self._parse(trace, self.metadata(run))
                self._await([future], [run.name], 1)
                failure = _error(future)
            if failure is not None:
                raise errors.NotFoundError(f"cannot read {trace.name}: {failure}")
            analysis = self.loader.cached_analysis(trace)
            if analysis is None:  # summarized earlier, analysis evicted since: parse it again
                def analyze() -> Analysis:
                    self._confine(trace)
                    return self.loader.analyze_file(trace)

                job: Future[Analysis] = self.jobs.submit(("analysis", _file_key(trace)), analyze)
                self._await([job], [run.name], 1)
                failure = _error(job)
                if failure is not None:
                    raise errors.NotFoundError(f"cannot read {trace.name}: {failure}")
                analysis = job.result()
        return run, trace, analysis

    def _view(self, run_name: str, worker: str | None, span: str | None, params: tuple[object, ...],
              compute: Callable[[Run, TraceFile, Analysis], dict[str, Any]]) -> bytes:
        """A view of one trace, encoded, as a background job like parsing: the request thread
        only waits ``wait_s`` for it (then 202), many clients share one job, and the result is
        cached per file version and arguments, so a view costs its compute once."""
        run, trace, analysis = self._analysis(run_name, worker, span)
        key = ("view", *_file_key(trace), params)
        cached = self._views.get(key)
        if cached is not None:
            return cached

        def job() -> bytes:
            body = to_json(compute(run, trace, analysis))
            self._views.put(key, body)
            return body

        future: Future[bytes] = self.jobs.submit(key, job)
        self._await([future], [run.name], 1)
        exc = future.exception()
        if isinstance(exc, views.ViewError):
            raise errors.NotFoundError(str(exc))
        if exc is not None:
            raise exc
        return future.result()

    def drilldown(self, run_name: str, worker: str | None, span: str | None, *, layer: int, phase: str | None,
                  backward: bool, profiler_installed: bool) -> bytes:
        def compute(run: Run, trace: TraceFile, analysis: Analysis) -> dict[str, Any]:
            out = views.drilldown(analysis, layer=layer, phase=phase, backward=backward)
            out["trace_file"] = trace.name
            out["download"] = f"./trace?{_query(run=run.name, file=trace.name)}"
            out["profiler"] = ({"plugin": "pytorch_profiler", "run": run.name, "worker": trace.worker,
                                "span": trace.span} if profiler_installed else None)
            return out

        return self._view(run_name, worker, span, ("drilldown", layer, phase, backward, profiler_installed), compute)

    def memory(self, run_name: str, worker: str | None, span: str | None, *, step: int | None) -> bytes:
        return self._view(run_name, worker, span, ("memory", step),
                          lambda run, trace, analysis: views.memory_curve(analysis, step=step))

    def timeline(self, run_name: str, worker: str | None, span: str | None, *, step: int | None,
                 start_us: float | None, end_us: float | None, limit: int) -> bytes:
        return self._view(run_name, worker, span, ("timeline", step, start_us, end_us, limit),
                          lambda run, trace, analysis: views.timeline(analysis, step=step, start_us=start_us,
                                                                      end_us=end_us, limit=limit))

    def _summaries(self, names: list[str]) -> list[RunSummary]:
        if not names:
            raise errors.InvalidArgumentError("pass runs=R1,R2,... (run names as /runs lists them)")
        if len(names) > 200:
            raise errors.InvalidArgumentError("at most 200 runs at once")
        runs = [self.run(name) for name in names]
        metadata = [self.metadata(run) for run in runs]
        started = [self._start_summaries(run, None, meta) for run, meta in zip(runs, metadata, strict=True)]
        self._await([f for s in started for _, f in s if f is not None], [r.name for r in runs],
                    sum(len(s) for s in started))
        return [self._finish_summary(run, meta, s) for run, meta, s in zip(runs, metadata, started, strict=True)]

    def compare(self, names: list[str], baseline: str | None) -> dict[str, Any]:
        from tb_attn_plugin.analysis.compare import compare

        if baseline is not None and baseline not in names:
            raise errors.InvalidArgumentError(f"the baseline {baseline!r} is not one of the runs")
        try:
            return compare(self._summaries(names), baseline=baseline)
        except ValueError as exc:
            raise errors.InvalidArgumentError(str(exc)) from None

    def scaling(self, names: list[str]) -> dict[str, Any]:
        from tb_attn_plugin.analysis.compare import scaling

        return scaling(self._summaries(names))

    def trace_download(self, run_name: str, file: str) -> TraceFile:
        run = self.run(run_name)
        for f in run.files:
            if f.name == file:
                try:
                    self._confine(f)
                except ReadError as exc:
                    raise errors.NotFoundError(str(exc)) from None
                return f
        raise errors.NotFoundError(f"no trace file {file!r} in run {run_name!r}")


def _incomplete(message: str) -> bool:
    """Whether a failure may only mean that the file is still being written."""
    return "truncated" in message or message.startswith("empty file")


def _file_key(trace: TraceFile) -> tuple[str, int, float]:
    return (trace.path, trace.size, trace.mtime)


def _error(future: Future[Any]) -> str | None:
    """The message of a finished job's TraceError, or None if it succeeded (other errors raise)."""
    exc = future.exception()
    if exc is None:
        return None
    if isinstance(exc, TraceError):
        return str(exc)
    raise exc


def _query(**params: str) -> str:
    from urllib.parse import urlencode

    return urlencode(params)
