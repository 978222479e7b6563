"""Many trace files parsed at once: in this process, a pool of processes, or a Dask cluster.

``Fanout`` is the pipeline's schedule (``pipeline.Schedule``) for the Python API and every
``tb-attn`` command that reads runs. The pipeline asks the loader's caches first (memory, then
the summary cache in one batch of reads); the files they did not answer are one task each,

- in this process, one after another (``jobs=1``, or a single file: it keeps its own split over
  the cores, ``reading.load_events``);
- in a pool of ``jobs`` processes (``--jobs N``), largest files first, each worker reading its
  file and returning the compact summary (msgpack bytes), as a file's own split does inside it;
- or on any ``concurrent.futures.Executor``: a Dask cluster's (``--executor dask://HOST:PORT``,
  ``dask_executor``), whose workers read each file from its path or URL (local paths only where
  the workers share the file system) and write the shared summary cache themselves.

Every run's summary is then assembled by the pipeline from the per-file summaries, in the
listing's order, exactly as the serial path assembles it: the output is byte for byte the same.

Nothing is lost to a failing executor. A task whose worker died (Dask retries it on another
worker first), a pool that broke, or a worker that cannot read a local path: the file is
summarized in this process instead, with one warning line saying why. A cache that cannot be
written costs speed only, and is said once.
"""

from __future__ import annotations

import concurrent.futures as cf
import functools
import logging
import multiprocessing
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any

import msgspec

from tb_attn_plugin.engine.loader import Loader
from tb_attn_plugin.engine.pipeline import Known, Meta, ParseOne, Schedule
from tb_attn_plugin.engine.progress import Progress
from tb_attn_plugin.trace import io
from tb_attn_plugin.trace.discover import TraceFile
from tb_attn_plugin.trace.events import ReadError, TraceError
from tb_attn_plugin.trace.parallel import may_fork
from tb_attn_plugin.types.schema import WorkerSummary

__all__ = ["AUTO_POOL_BYTES", "ExecutorUnavailable", "Fanout", "Task", "dask_executor", "default_jobs",
           "executor_address", "open_executor", "summarize_task"]

_log = logging.getLogger(__name__)
Warn = Callable[[str], None]


def default_jobs() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


class Task(msgspec.Struct, frozen=True):
    """What a worker needs to summarize one file (plain data: it travels to other machines)."""

    path: str
    name: str
    worker: str
    span: str | None
    size: int
    mtime: float
    etag: str
    metadata: dict[str, Any] | None
    max_trace_bytes: int | None
    cache_dir: str | None
    cache_max_bytes: int | None

    def trace(self) -> TraceFile:
        return TraceFile(self.path, self.name, self.worker, self.span, self.size, self.mtime, self.etag)


class Outcome(msgspec.Struct, frozen=True):
    """A task's result: the summary (msgpack) or the file's error; and the cache's, if any."""

    summary: bytes | None = None
    error: str | None = None
    read_error: bool = False  # the storage failed, not the file
    cache_error: str | None = None
    cache_note: str | None = None  # this file's entry alone could not be written (``Loader.cache_entry_skipped``)


_WORKER_LOADERS: dict[tuple[Any, ...], Loader] = {}


def summarize_task(task: bytes) -> bytes:
    """Runs on a worker: one file's parse (the pipeline's third step: its caller asked the caches)
    as an encoded ``Outcome``. A worker keeps one loader per configuration, so its summary cache's
    state (the size bound, a failed write) lasts; it writes the file's entry there."""
    t = msgspec.msgpack.decode(task, type=Task)
    config = (t.max_trace_bytes, t.cache_dir, t.cache_max_bytes)
    loader = _WORKER_LOADERS.get(config)
    if loader is None:
        loader = _WORKER_LOADERS[config] = Loader(cache_dir=t.cache_dir, max_trace_bytes=t.max_trace_bytes,
                                                  cache_max_bytes=t.cache_max_bytes, cache_bytes=64 << 20,
                                                  warn=False)  # the caller says it, from the outcome
    trace = t.trace()
    loader.cache_notes.clear()
    try:
        with _roomy_malloc():
            summary = loader.parse(trace, metadata=t.metadata).summary
    except TraceError as exc:
        out = Outcome(error=str(exc), read_error=isinstance(exc, ReadError), cache_error=loader.cache_error)
    else:
        note = loader.cache_notes[0] if loader.cache_notes else None
        out = Outcome(summary=msgspec.msgpack.encode(summary), cache_error=loader.cache_error, cache_note=note)
    return msgspec.msgpack.encode(out)


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters


@contextmanager
def _roomy_malloc() -> Iterator[None]:
    """glibc's allocator tuned for one parse, then set back. Dask starts its workers with
    ``MALLOC_TRIM_THRESHOLD_=65536``, which also fixes the mmap threshold at 128 KiB: every large
    array is then mapped and unmapped anew, and a summary costs 25% more CPU (measured in
    bench/fanout.py). During the task, large blocks stay in the heap (an mmap threshold of 32
    MiB, glibc's own dynamic ceiling; a trim threshold of 64 MiB); after it, a worker that set the
    variable gets its settings back and the freed memory returned to the system (``malloc_trim``),
    as Dask wants. (A pool's worker, which lives for one command, keeps the roomier settings.)"""
    libc = _glibc()
    if libc is None:
        yield
        return
    libc.mallopt(_M_MMAP_THRESHOLD, 32 << 20)
    libc.mallopt(_M_TRIM_THRESHOLD, 64 << 20)
    try:
        yield
    finally:
        trim = os.environ.get("MALLOC_TRIM_THRESHOLD_", "")
        if trim.isdigit():  # a worker that wants memory back (Dask's): set back, and trimmed now
            libc.mallopt(_M_TRIM_THRESHOLD, int(trim))
            libc.mallopt(_M_MMAP_THRESHOLD, 128 << 10)  # glibc's default, fixed as the variable fixes it
            libc.malloc_trim(0)


@functools.cache
def _glibc() -> Any:
    import ctypes
    import platform

    if platform.libc_ver()[0] != "glibc":
        return None
    try:
        libc = ctypes.CDLL("libc.so.6")
        return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None
    except OSError:
        return None


class ExecutorUnavailable(Exception):
    """The executor asked for cannot be used (no scheduler there, dask not installed)."""


def executor_address(spec: str | None, env: dict[str, str] | os._Environ[str] = os.environ) -> str | None:
    """The Dask scheduler's address from ``--executor`` (``dask://HOST:PORT``, or ``dask`` for
    ``DASK_SCHEDULER_ADDRESS``), or from ``DASK_SCHEDULER_ADDRESS`` when no executor is named;
    None: this machine's processes. Raises ValueError for anything else."""
    if spec is None or spec == "dask":
        address = env.get("DASK_SCHEDULER_ADDRESS", "").strip()
        if not address and spec == "dask":
            raise ValueError("--executor dask needs DASK_SCHEDULER_ADDRESS, or name the scheduler: dask://HOST:PORT")
        spec = address or None
        if spec is None:
            return None
    if spec == "local":
        return None
    for scheme in ("dask://", "tcp://", "tls://", "ucx://", "inproc://"):
        if spec.startswith(scheme):
            rest = spec[len(scheme):].rstrip("/")
            if not rest:
                break
            return f"tcp://{rest}" if scheme == "dask://" else f"{scheme}{rest}"
    raise ValueError(f"unknown executor {spec!r}: use local, or dask://HOST:PORT for a Dask scheduler")


@contextmanager
def dask_executor(address: str, *, timeout_s: float = 10.0) -> Iterator[cf.Executor]:
    """A ``concurrent.futures`` executor on the Dask cluster at ``address`` (each task retried
    twice on another worker when its worker dies). Raises ExecutorUnavailable."""
    try:
        from distributed import Client
    except ImportError:
        raise ExecutorUnavailable("a Dask executor needs dask.distributed: pip install 'tb-attn[dask]'") from None
    try:
        client = Client(address, timeout=timeout_s, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as exc:
        raise ExecutorUnavailable(f"cannot reach the Dask scheduler at {address}: "
                                  f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    try:
        yield client.get_executor(pure=False, retries=2)
    finally:
        client.close()


@contextmanager
def open_executor(spec: object, warn: Warn) -> Iterator[cf.Executor | None]:
    """The executor ``spec`` names, for ``Fanout``: None (this machine's processes), any
    ``concurrent.futures.Executor`` as it is, a ``distributed.Client``'s executor, or one on the Dask
    scheduler that a string names (``executor_address``; closed on exit). A scheduler that cannot be
    reached is a warning, and None: the files are summarized on this machine instead. Raises
    ValueError for a string that names no executor, TypeError for anything else."""
    if spec is None or isinstance(spec, cf.Executor):
        yield spec
        return
    if hasattr(spec, "get_executor"):
        yield spec.get_executor(pure=False, retries=2)
        return
    if not isinstance(spec, str):
        raise TypeError(f"executor takes a concurrent.futures.Executor, a distributed.Client or 'dask://HOST:PORT', "
                        f"not {type(spec).__name__}")
    address = executor_address(spec)
    with ExitStack() as stack:
        executor = None
        if address is not None:
            try:
                executor = stack.enter_context(dask_executor(address))
            except ExecutorUnavailable as exc:
                warn(f"{exc}; summarizing on this machine instead")
        yield executor


def _local_pool(workers: int) -> cf.ProcessPoolExecutor:
    """Processes forked where this process runs no other thread (fast, nothing re-imported),
    else started by a fork server (safe beside threads: a notebook, TensorBoard)."""

    method = "fork" if may_fork() else "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() \
        else "spawn"
    return cf.ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context(method))


#: With no ``jobs`` given, a pool is started only for this much to parse: below it, starting the
#: processes (about 0.1 s forked, a second or more from a fork server) costs more than it saves.
AUTO_POOL_BYTES = 16 << 20


class Fanout(Schedule):
    """The pipeline's parses in ``jobs`` processes of this machine (None: one per core where
    there are two files or more and ``AUTO_POOL_BYTES`` to parse, else this process) or on
    ``executor``; what they could not do, here. ``progress``: draw a bar on stderr (None: when
    stderr is a terminal). ``warn``: where the warnings go (default: the log)."""

    def __init__(self, loader: Loader, *, jobs: int | None = None, executor: cf.Executor | None = None,
                 progress: bool | None = None, warn: Warn | None = None) -> None:
        self.loader, self.jobs, self.executor, self.progress = loader, jobs, executor, progress
        self.say = warn or _log.warning
        self.bar: Progress  # drawn from ``begin`` on, which the pipeline calls first

    def begin(self, traces: Sequence[TraceFile]) -> None:
        self.bar = Progress(len(traces), sum(t.size for t in traces), enabled=False if self.progress is False else None)

    def answered(self, traces: Sequence[TraceFile]) -> None:
        self.bar.advance(sum(t.size for t in traces), len(traces))

    def parse(self, todo: list[tuple[TraceFile, Meta]], parse: ParseOne) -> Known:
        loader, jobs = self.loader, self.jobs
        known: Known = {}
        if jobs is None:
            jobs = default_jobs() if sum(t.size for t, _ in todo) >= AUTO_POOL_BYTES else 1
        try:
            if self.executor is not None and todo:
                _fan_out(todo, loader, self.executor, known, self.bar, self.say, local=False)
            elif jobs > 1 and len(todo) > 1:
                with _local_pool(min(jobs, len(todo))) as pool:
                    _fan_out(todo, loader, pool, known, self.bar, self.say, local=True)
            for trace, meta in todo:
                if trace not in known:
                    try:
                        known[trace] = parse(trace, metadata=meta).summary
                    except TraceError as exc:
                        known[trace] = exc
                    self.bar.advance(trace.size)
        finally:
            self.bar.close()
        if loader.cache_error is not None and loader.disk is not None:  # found here or by a worker: said once
            from tb_attn_plugin.engine.summary_cache import (
                warn_once,  # lazy: loaded with a cache directory only (it loads OpenSSL)
            )

            warn_once(loader.disk.root, f"{loader.cache_error}; summaries are not cached", self.say)
        return known


def _fan_out(todo: list[tuple[TraceFile, Meta]], loader: Loader, executor: cf.Executor, known: Known,
             bar: Progress, say: Warn, *, local: bool) -> None:
    """Submits the files (largest first) and takes their outcomes as they come; a file whose task
    failed for the executor's sake is left out of ``known``, for the caller to summarize here."""
    futures: dict[cf.Future[bytes], TraceFile] = {}
    for trace, meta in sorted(todo, key=lambda tm: -tm[0].size):
        task = Task(trace.path, trace.name, trace.worker, trace.span, trace.size, trace.mtime, trace.etag, meta,
                    loader.max_trace_bytes, loader.cache_dir, loader.cache_max_bytes)
        try:
            futures[executor.submit(summarize_task, msgspec.msgpack.encode(task))] = trace
        except Exception as exc:  # a pool already broken, a client closed under us
            say(f"cannot hand {trace.name} to the executor ({_why(exc)}); summarizing it here")
            break
    lost: dict[str, int] = {}
    skipped: list[str] = []  # entries the workers could not write, said here (a worker says nothing)
    cache_said = False
    for future in cf.as_completed(futures):
        trace = futures[future]
        try:
            out = msgspec.msgpack.decode(future.result(), type=Outcome)
        except Exception as exc:  # the worker died (after Dask's retries), the pool broke, a bad install
            why = _why(exc)
            lost[why] = lost.get(why, 0) + 1
            continue
        if out.cache_error is not None and not cache_said and loader.cache_error is None:
            cache_said = True
            loader.cache_error = out.cache_error  # said once, at the end
        if out.cache_note is not None:
            skipped.append(out.cache_note)
        if out.summary is not None:
            summary = msgspec.msgpack.decode(out.summary, type=WorkerSummary)
            loader.adopt(trace, summary)
            known[trace] = summary
        elif out.read_error and not local and not io.is_url(trace.path):
            lost[_UNSHARED] = lost.get(_UNSHARED, 0) + 1
            continue
        else:
            known[trace] = ReadError(out.error or "") if out.read_error else TraceError(out.error or "")
        bar.advance(trace.size)
    for why, count in lost.items():
        say(f"{count} file{'s' if count > 1 else ''} could not be summarized by the executor ({why}); "
            "summarizing them here")
    if skipped:
        from tb_attn_plugin.engine.summary_cache import (
            warn_once,  # lazy: loaded with a cache directory only (it loads OpenSSL)
        )

        for note in skipped:
            warn_once(note, note, say)


_UNSHARED = "a worker could not read a local path: workers read local paths only on a shared file system"


def _why(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
