"""From a path (logdir, run directory or trace file) to runs, and the per-file caches.

``resolve_runs`` names the runs; a ``Loader`` holds what each trace file gave (its summary, its
analysis, or why it failed) and the steps of the per-file pipeline (``pipeline``): its caches,
one file's parse (``reading.load_events``, ``analysis``) and a run's summary assembled from its
files'. Each trace file is summarized on its own: a broken file becomes a ``FileError`` in its
run and leaves other files and runs alone.
"""

# Not split (over 400 lines): the Loader's caches (summaries, analyses, failures) and the steps
# that fill and read them share one memory budget (``cache_bytes``).

from __future__ import annotations

import contextlib
import functools
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from types import EllipsisType
from typing import TYPE_CHECKING, Literal, NamedTuple

import msgspec

from tb_attn_plugin.analysis.attribution.analyze import analyze
from tb_attn_plugin.analysis.common.bounds import out_of_bounds
from tb_attn_plugin.analysis.summary import summarize_trace, with_peaks
from tb_attn_plugin.engine.cache import LRUCache
from tb_attn_plugin.engine.deadline import Expired, within
from tb_attn_plugin.engine.head_events import EventStats, HeadStatsReader, with_head_stats
from tb_attn_plugin.engine.limits import DEFAULT_MAX_TRACE_BYTES
from tb_attn_plugin.engine.metadata import read_metadata
from tb_attn_plugin.engine.pipeline import cached_or_none, summarize_files
from tb_attn_plugin.engine.reading import load_events, too_slow
from tb_attn_plugin.trace import io
from tb_attn_plugin.trace.discover import Run, TraceFile, find_runs
from tb_attn_plugin.trace.events import ReadError, TraceError
from tb_attn_plugin.trace.io import FileInfo
from tb_attn_plugin.trace.sniff import Verdicts
from tb_attn_plugin.trace.version import Version, file_version
from tb_attn_plugin.types.schema import FileError, RunSummary, WorkerSummary
from tb_attn_plugin.vocab.names import GZIP_SUFFIX, display_name, parse_candidate_name, parse_trace_name

if TYPE_CHECKING:
    from tb_attn_plugin.analysis.attribution.analyze import Analysis
    from tb_attn_plugin.engine.summary_cache import SummaryCache

__all__ = ["Loader", "Parsed", "resolve_runs"]

_log = logging.getLogger(__name__)


def resolve_runs(path: str) -> list[Run]:
    """The runs under a logdir, the run a directory is, or a single trace file as a run.

    A file given by name is read whatever it is called (``trace.txt`` too); in directories the
    traces are the ``*.pt.trace.json[.gz]`` files and the other ``*.json[.gz]`` files whose heads
    show a torch.profiler trace (``sniff``: each head read once per call).
    """
    if io.is_dir(path):
        files = io.list_tree(path)
        return find_runs(path, files, traces=Verdicts().traces(files))
    # A link the user names is the file they mean: resolved here, since trace.io opens no link.
    target = path if io.is_url(path) else os.path.realpath(path)
    info = io.stat(target)  # raises TraceError: no such file
    name = path.rstrip("/").rsplit("/", 1)[-1]
    parsed = parse_trace_name(name) or parse_candidate_name(name)
    # Any other name: the worker is the name less its last suffix (and .gz), dots kept.
    worker, span = parsed if parsed is not None else (_stem(name), None)
    directory = path.rstrip("/").rsplit("/", 1)[0] if "/" in path.rstrip("/") else "."
    shown = display_name(name)
    trace = TraceFile(path=info.path, name=shown, worker=display_name(worker), span=span, size=info.size,
                      mtime=info.mtime, etag=info.etag)
    return [Run(name=shown, path=directory, files=(trace,))]


def _stem(name: str) -> str:
    """``name`` less ``.gz`` and then its last suffix: ``sd3.5_run.txt`` is ``sd3.5_run``."""
    base = name.removesuffix(GZIP_SUFFIX) or name
    return base.rsplit(".", 1)[0] if "." in base.lstrip(".") else base


class Parsed(NamedTuple):
    """A trace file's summary and analysis, from one parse (or the caches)."""

    summary: WorkerSummary
    analysis: Analysis | None  # None: the summary came from the summary cache (``parse(summary_only=True)``)


@dataclass
class Loader:
    """Summarizes runs, caching per-file summaries in memory (and optionally in a summary cache,
    ``cache_dir``: a local directory or an fsspec URL, bounded by ``cache_max_bytes`` locally;
    ``summary_cache``).

    With ``keep_analyses`` > 0 it also keeps that many analyzed traces (events and their
    attribution) for the tab's drill-down, memory and timeline views. ``cache_bytes`` bounds
    the memory both caches hold together: summaries get an eighth of it (at most 64 MiB),
    analyses the rest. Failures are remembered per file version, so a broken file is not
    re-parsed on every request; storage failures (``ReadError``) only for ``read_retry_s``,
    since the storage may come back. ``parse_timeout_s`` bounds one file's whole parse (``parse``:
    reading, decoding, analysis and summary; ``deadline.within`` stops the analysis where it is).

    Any exception while analyzing or summarizing a file becomes that file's ``TraceError``
    (logged with its traceback: it is a bug to fix), remembered like any other failure: one
    odd trace costs one parse and one line in its run, never a 500 or a re-parse per request.

    Only the engine uses it: ``Workspace`` (every door's), ``pipeline`` (whose steps are its
    ``cached``, ``from_summary_cache``, ``parse`` and ``summarize_run``) and ``fanout``: the loader
    is the only per-file cache. The run's event files (per-head statistics) are read on their
    own (``head_stats``, ``head_events``).
    """

    cache_dir: str | None = None
    max_trace_bytes: int | None = DEFAULT_MAX_TRACE_BYTES
    keep_analyses: int = 0
    cache_bytes: int = 1 << 30
    read_retry_s: float = 10.0
    parse_timeout_s: float | None = None
    #: The user's peaks (FLOP/s, bytes/s) for every roofline, in place of the trace's
    #: (``--tb_attn_peak_flops``/``--tb_attn_peak_bw``; None: the trace's own).
    peaks: tuple[float | None, float | None] = (None, None)
    cache_max_bytes: int | None = None
    #: Where the summary cache's warning (it cannot be written) goes, once per process and cache:
    #: None, the log; False, nowhere (a worker, whose outcome carries ``cache_error`` to its caller).
    warn: Callable[[str], None] | Literal[False] | None = None

    def __post_init__(self) -> None:
        self.disk: SummaryCache | None = None
        if self.cache_dir:
            from tb_attn_plugin.engine.summary_cache import (
                SummaryCache,  # lazy: loaded with a cache directory only (it loads OpenSSL)
            )

            self.disk = SummaryCache(self.cache_dir, max_bytes=self.cache_max_bytes)
        #: Why the summary cache is no longer written (the first write that failed), or None.
        self.cache_error: str | None = None
        #: Entries that could not be written, for a worker's caller to say (``cache_entry_skipped``).
        self.cache_notes: list[str] = []
        summary_bytes = min(64 << 20, self.cache_bytes // 8)
        self.memory: LRUCache[WorkerSummary] = LRUCache(max_entries=1 << 16, max_bytes=summary_bytes,
                                                        sizeof=_summary_nbytes)
        self.analyses: LRUCache[Analysis] = LRUCache(max_entries=max(self.keep_analyses, 1),
                                                     max_bytes=self.cache_bytes - summary_bytes,
                                                     sizeof=lambda a: a.nbytes)
        self.failures: LRUCache[str] = LRUCache(max_entries=4096)
        self._read_errors: dict[Version, tuple[str, float]] = {}

    @functools.cached_property
    def head_stats(self) -> HeadStatsReader:
        """The per-head statistics of runs' event files, read on first use."""
        return HeadStatsReader()

    def summaries_room(self, *, guess_bytes: int) -> int:
        """How many summaries the memory cache holds: its byte bound over the mean size of the
        summaries in it (``guess_bytes`` while it holds none), at most its entry bound."""
        held = len(self.memory)
        mean = self.memory.nbytes / held if held else guess_bytes
        return min(self.memory.max_entries, int(self.memory.max_bytes // max(mean, 1.0)))

    @property
    def cache_nbytes(self) -> int:
        """Bytes held by the summary and analysis caches."""
        return self.memory.nbytes + self.analyses.nbytes

    def cached_summary(self, trace: TraceFile) -> WorkerSummary | None:
        return self.memory.get(file_version(trace))

    def cached(self, trace: TraceFile) -> WorkerSummary | TraceError | None:
        """The pipeline's first step: the file's summary from memory, or its remembered failure
        (a TraceError, returned); None: neither."""
        key = file_version(trace)
        summary = self.memory.get(key)
        if summary is not None:
            return summary
        failure = self._failure(key)
        return None if failure is None else TraceError(failure)

    def cached_analysis(self, trace: TraceFile) -> Analysis | None:
        return self.analyses.get(file_version(trace)) if self.keep_analyses else None

    def cached_failure(self, trace: TraceFile) -> str | None:
        return self._failure(file_version(trace))

    def _failure(self, key: Version) -> str | None:
        failure = self.failures.get(key)
        if failure is not None:
            return failure
        read_error = self._read_errors.get(key)
        if read_error is not None and time.monotonic() - read_error[1] < self.read_retry_s:
            return read_error[0]
        return None

    def analysis_or_none(self, trace: TraceFile) -> Analysis | None:
        """The file's analysis if it takes no parse: cached in memory, or its remembered failure
        raised (TraceError). None: it needs a parse."""
        analysis = self.cached_analysis(trace)
        if analysis is None:
            self._raise_failure(trace)
        return analysis

    def _raise_failure(self, trace: TraceFile) -> None:
        failure = self.cached_failure(trace)
        if failure is not None:
            raise TraceError(failure)

    def _fail(self, key: Version, exc: TraceError) -> None:
        if isinstance(exc, ReadError):
            if len(self._read_errors) > 4096:
                self._read_errors.clear()
            self._read_errors[key] = (str(exc), time.monotonic())
        else:
            self.failures.put(key, str(exc))

    def analyze_file(self, trace: TraceFile, *, keep: bool = True, deadline: float | None = None) -> Analysis:
        """Events and attribution of one trace file; raises TraceError. ``keep``: cache it
        (else the caller does, with ``keep_analysis``). ``deadline`` (``time.monotonic``): the
        time limit's end, for the reading and the analysis."""
        key = file_version(trace)
        cached = self.analyses.get(key) if self.keep_analyses else None
        if cached is not None:
            return cached
        failure = self._failure(key)
        if failure is not None:
            raise TraceError(failure)
        if deadline is None and self.parse_timeout_s is not None:  # a caller other than ``parse``
            deadline = time.monotonic() + self.parse_timeout_s
        try:
            self._check_size(trace)
            with self._timed(deadline), _as_trace_error(trace):
                events = load_events(trace.path, max_bytes=self.max_trace_bytes, timeout_s=self.parse_timeout_s,
                                     deadline=deadline)
                with within(deadline):
                    analysis = analyze(events)
        except TraceError as exc:
            self._fail(key, exc)
            raise
        self._read_errors.pop(key, None)
        if keep:
            self.keep_analysis(trace, analysis)
        return analysis

    def keep_analysis(self, trace: TraceFile, analysis: Analysis, *, spare: bool = False) -> None:
        """Caches the file's analysis. ``spare``: only if that evicts no other analysis (a parse
        ahead of clicks must not push out what a user is looking at)."""
        if not self.keep_analyses:
            return
        if spare:
            self.analyses.put_if_room(file_version(trace), analysis)
        else:
            self.analyses.put(file_version(trace), analysis)

    def _check_size(self, trace: TraceFile) -> None:
        """Refuses a file that is over the limit as stored, from the listing's size: without even
        opening it (trace.io refuses it too, for callers that read it directly)."""
        limit = self.max_trace_bytes
        if limit is not None and trace.size > limit:
            raise TraceError(f"{trace.name} is {trace.size / 2**20:.0f} MiB, over the limit of "
                             f"{limit / 2**20:.0f} MiB; it is not read (raise the limit to read it)")

    def summarize_file(self, trace: TraceFile, *, metadata: dict[str, object] | None = None) -> WorkerSummary:
        """One file through the pipeline (``pipeline.summarize_files``). Raises TraceError."""
        got = summarize_files(self, [(trace, metadata)])[trace]
        if isinstance(got, TraceError):
            raise got
        return got

    def from_summary_cache(self, traces: list[TraceFile]) -> dict[TraceFile, WorkerSummary]:
        """The pipeline's second step: the summaries of ``traces`` that the summary cache holds
        (in one batch of reads on object stores), kept in memory too; damaged entries are misses."""
        if self.disk is None or not traces:
            return {}
        found: dict[TraceFile, WorkerSummary] = {}
        for trace, payload in self.disk.get_many(traces).items():
            summary = self.disk.decode(payload)
            if summary is not None:
                self.memory.put(file_version(trace), summary)
                found[trace] = summary
        return found

    def parse(self, trace: TraceFile, *, metadata: dict[str, object] | None = None, keep: bool = True,
              summary_only: bool = False) -> Parsed:
        """The pipeline's third step: the file's summary and analysis from one parse (a summary
        already in memory is kept), the plugin's background job, which a summary request and a
        view request of one file share. ``keep``: cache the analysis (else the caller does).
        ``summary_only``: the caches' answer will do (``pipeline.cached_or_none``: memory, then the
        summary cache; no analysis then), for a job that asked no cache before. Raises TraceError."""
        if summary_only:
            summary = cached_or_none(self, trace)
            if summary is not None:
                return Parsed(summary, None)
        timeout_s = self.parse_timeout_s
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        analysis = self.analyze_file(trace, keep=keep, deadline=deadline)
        summary = self.memory.get(file_version(trace))
        return Parsed(summary if summary is not None else self._summarize(trace, analysis, metadata, deadline),
                      analysis)

    @contextlib.contextmanager
    def _timed(self, deadline: float | None) -> Iterator[None]:
        """The time limit's end turned into the file's one-line error."""
        try:
            yield
        except Expired:
            raise too_slow(self.parse_timeout_s or 0.0) from None

    def _summarize(self, trace: TraceFile, analysis: Analysis, metadata: dict[str, object] | None,
                   deadline: float | None = None) -> WorkerSummary:
        key = file_version(trace)
        try:
            with self._timed(deadline), _as_trace_error(trace), within(deadline):
                summary = summarize_trace(analysis, file=trace.name, worker=trace.worker, span=trace.span,
                                          metadata=metadata)
        except TraceError as exc:
            self._fail(key, exc)
            raise
        if self.disk is not None and self.cache_error is None:  # as the trace has it: peaks are the reader's

            from tb_attn_plugin.engine.summary_cache import (
                CacheEntryError,  # lazy: loaded with a cache directory only (it loads OpenSSL)
                CacheWriteError,
            )

            broken = out_of_bounds(summary)
            try:
                if broken is None:  # else no reader would take it (a bug: the summary is served all the same)
                    self.disk.put(trace, msgspec.msgpack.encode(summary))
                else:
                    _log.info("the summary of %s is not cached: %s", trace.name, broken)
            except CacheEntryError as exc:  # this entry alone: the others are written
                self.cache_entry_skipped(str(exc))
            except CacheWriteError as exc:  # a cache that cannot be written is only slower
                self.cache_unwritable(str(exc))
        self.memory.put(key, summary)
        return summary

    def cache_unwritable(self, error: str) -> None:
        """The summary cache cannot be written (``error`` says where and why): it is not written
        again, and that is said once per process and cache, however many threads find it (``warn``)."""
        if self.cache_error is None:
            self.cache_error = error
        if self.disk is not None and self.warn is not False:
            from tb_attn_plugin.engine.summary_cache import (
                warn_once,  # lazy: loaded with a cache directory only (it loads OpenSSL)
            )

            warn_once(self.disk.root, f"{error}; summaries are not cached", self.warn or _log.warning)

    def cache_entry_skipped(self, note: str) -> None:
        """One entry of the summary cache cannot be written (``note`` says which and why): the
        others still are, and the note is said once per process and entry (a worker, whose
        ``warn`` is False, keeps it in ``cache_notes`` for its caller)."""
        if self.warn is False:
            self.cache_notes.append(note)
            return
        from tb_attn_plugin.engine.summary_cache import (
            warn_once,  # lazy: loaded with a cache directory only (it loads OpenSSL)
        )

        warn_once(note, note, self.warn or _log.warning)

    def adopt(self, trace: TraceFile, summary: WorkerSummary) -> None:
        """Keeps a summary made elsewhere (a worker process, another machine) as this loader's own."""
        self.memory.put(file_version(trace), summary)

    def _with_peaks(self, summary: WorkerSummary) -> WorkerSummary:
        """The summary as this loader hands it out: under the user's peaks where given (a copy:
        the caches keep what the trace says, and peaks are the reader's)."""
        return with_peaks(summary, *self.peaks)

    def summarize_run(self, run: Run, *, worker: str | None = None,
                      metadata: dict[str, object] | EllipsisType | None = ...,
                      known: Mapping[TraceFile, WorkerSummary | TraceError] | None = None,
                      head_stats: Mapping[FileInfo, EventStats] | EllipsisType | None = ...) -> RunSummary:
        """The pipeline's last step: the run's summary from its traces' (or one worker's).
        ``metadata``: the run's, if the caller has it already (the plugin caches it; ``...``: read
        it here). ``known``: files already summarized or failed (``pipeline.summarize_runs``), used
        as they are; the others are summarized here (``pipeline.summarize_files``, serially).
        ``head_stats``: the statistics of the run's event files (the plugin's jobs; ``...``: read
        them here; None: leave them out)."""
        workers: list[WorkerSummary] = []
        errors: list[FileError] = []
        if isinstance(metadata, EllipsisType):
            metadata = read_metadata(run.metadata_path).value
        files = [t for t in run.files if worker is None or t.worker == worker]
        missing = [(t, metadata) for t in files if known is None or t not in known]
        if missing:  # summarized here, one after another
            known = {**(known or {}), **summarize_files(self, missing)}
        for trace in files:
            got = known[trace] if known is not None else None
            if isinstance(got, TraceError):
                errors.append(FileError(file=trace.name, error=str(got)))
            elif got is not None:
                workers.append(self._with_peaks(got))
        summary = RunSummary(run=run.name, metadata=metadata, workers=workers, errors=errors)
        if run.event_files and head_stats is not None:
            stats = head_stats if not isinstance(head_stats, EllipsisType) else \
                self.head_stats.read_run(run.event_files, timeout_s=self.parse_timeout_s)
            summary = with_head_stats(summary, [(f, stats[f]) for f in run.event_files if f in stats], metadata)
        return summary



@contextlib.contextmanager
def _as_trace_error(trace: TraceFile) -> Iterator[None]:
    try:
        yield
    except TraceError:
        raise
    except MemoryError:
        raise TraceError("out of memory while reading this trace") from None
    except Exception as exc:
        _log.exception("analyzing %s failed", trace.name)
        raise TraceError(f"internal error while analyzing this trace ({type(exc).__name__}: {exc}); "
                         "please report it with the trace") from None



def _summary_nbytes(summary: WorkerSummary) -> int:
    return len(msgspec.msgpack.encode(summary))
