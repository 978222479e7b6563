"""The engine's one door, for the CLI's commands, the notebook API and the tab's service.

``Workspace(path, cache_dir=..., jobs=..., executor=..., ranks=..., limits=..., peaks=...)`` says
once what to read and how, and owns the per-file caches (a ``Loader``, which no other layer
touches). ``runs()`` names the runs (the ones picked by run, worker and rank) and
``summaries()`` summarizes them through the one per-file pipeline (``pipeline``), on the
schedule this workspace says (``fanout.Fanout``: this process, a pool of processes or an
executor) or on the caller's (the tab's job lanes, ``server.lanes``). The tab also asks per file
for what its views and listing need: ``cached``, ``parse``, ``keep``, ``run_summary``. Summaries
are handed out under the user's ``peaks`` (copies: the caches keep what each trace says).

Bad input gets the same message from every door: a missing path is a ``FileNotFoundError``
(storage that cannot answer an ``OSError``), anything else the engine cannot use a
``ValueError`` (the CLI prints each as its one line, exit code 2).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from types import EllipsisType
from typing import NamedTuple

from tb_attn_plugin.analysis.attribution.analyze import Analysis
from tb_attn_plugin.engine.fanout import Fanout, open_executor
from tb_attn_plugin.engine.head_events import EventStats
from tb_attn_plugin.engine.limits import Limits
from tb_attn_plugin.engine.loader import Loader, Parsed, resolve_runs
from tb_attn_plugin.engine.metadata import RunMetadata, read_metadata
from tb_attn_plugin.engine.pipeline import Meta, Schedule, summarize_runs
from tb_attn_plugin.engine.ranksel import RankSet
from tb_attn_plugin.engine.ranksel import select_ranks as _select_ranks
from tb_attn_plugin.trace import io
from tb_attn_plugin.trace.discover import Run, TraceFile
from tb_attn_plugin.trace.events import ReadError, TraceError
from tb_attn_plugin.trace.io import FileInfo
from tb_attn_plugin.types.schema import RunSummary, WorkerSummary
from tb_attn_plugin.vocab.names import TRACE_PATTERNS

__all__ = ["NO_TRACES_HINT", "Cached", "Parsed", "Workspace", "no_traces"]

#: Said after "no torch.profiler traces (...) under PATH", whichever door was used.
NO_TRACES_HINT = "write some with: tb-attn-run --logdir ..."
_log = logging.getLogger(__name__)
#: How many run names an unknown run's message lists.
_NAMES_LISTED = 8


def no_traces(path: str) -> str:
    """What every door says of a ``path`` that holds no trace: what it looked for, in one line."""
    return f"no torch.profiler traces ({TRACE_PATTERNS}) under {path}; {NO_TRACES_HINT}"


class Cached(NamedTuple):
    """What the caches say of one trace file, without a parse: its summary, or why it failed
    (a remembered failure), or neither (it needs a parse)."""

    summary: WorkerSummary | None
    failure: str | None


@dataclass(frozen=True)
class Workspace:
    """What to read (``path``: a logdir, a run directory or one trace, local or an fsspec URL) and
    how: ``cache_dir`` (the shared summary cache, bounded locally by ``cache_max_bytes``),
    ``jobs`` (processes of this machine; None: one per core where there is enough to parse),
    ``executor`` (what ``fanout.open_executor`` takes), ``ranks`` (only these ranks' traces),
    ``progress`` (a bar on stderr; None: when stderr is a terminal) and ``warn`` (where warnings
    go)."""

    path: str
    cache_dir: str | None = None
    cache_max_bytes: int | None = None
    jobs: int | None = None
    executor: object = None
    ranks: RankSet | None = None
    progress: bool | None = None
    warn: Callable[[str], None] | None = None
    limits: Limits = field(default_factory=Limits)
    #: The user's peak FLOP/s and bytes/s for every roofline (None: the trace's own).
    peaks: tuple[float | None, float | None] = (None, None)

    def __post_init__(self) -> None:
        if self.cache_max_bytes is not None and self.cache_dir is None:
            raise ValueError("--cache-max-mb bounds --cache-dir: give both")
        if self.cache_dir is not None:
            # lazy: loaded with a cache directory only (it loads OpenSSL)
            from tb_attn_plugin.engine.summary_cache import check_outside

            check_outside(self.cache_dir, self.path)  # the logdir is never written

    def runs(self, *, run: str | Sequence[str] | None = None, worker: str | None = None,
             ranks: bool = True) -> list[Run]:
        """The runs under ``path`` (``run``: only the one of that name, relative to the logdir, or
        those of these names, in this order; ``worker``: only runs that have it), with only the
        selected ranks' traces (``ranks=False``: every trace, for ``select_ranks`` later)."""
        path = self.path
        if not io.is_url(path) and not os.path.lexists(path.removeprefix("file://")):
            raise FileNotFoundError(f"cannot read {path}: No such file or directory")
        try:
            runs = resolve_runs(path)
        except ReadError as exc:  # the storage could not answer (an object store's missing key too)
            raise OSError(str(exc)) from None
        except TraceError as exc:
            raise ValueError(str(exc)) from None
        if not runs:
            raise ValueError(no_traces(path))
        if run is not None:
            by_name = {r.name: r for r in runs}
            wanted = [run] if isinstance(run, str) else list(run)
            missing = [n for n in wanted if n.strip("/") not in by_name]
            if missing:
                names = ", ".join(r.name for r in runs[:_NAMES_LISTED]) + (", ..." if len(runs) > _NAMES_LISTED else "")
                raise ValueError(f"no run named {missing[0]!r} under {path} (its runs: {names})")
            runs = [by_name[n.strip("/")] for n in wanted]
        if worker is not None:
            runs = [r for r in runs if worker in r.workers]
            if not runs:
                raise ValueError(f"no worker named {worker!r} in the selected runs under {path}")
        return self.select_ranks(runs) if ranks else runs

    def select_ranks(self, runs: Sequence[Run]) -> list[Run]:
        """``runs`` with only the selected ranks' traces (a run left with none is dropped)."""
        if self.ranks is None:
            return list(runs)
        picked = [r for r in (_select_ranks(r, self.ranks) for r in runs) if r.files]
        if not picked:
            raise ValueError(f"no trace of ranks {self.ranks.spec} under {self.path}")
        return picked

    @cached_property
    def _files(self) -> Loader:
        """The per-file caches: memory, the summary cache and remembered failures."""
        limits = self.limits
        return Loader(cache_dir=self.cache_dir, cache_max_bytes=self.cache_max_bytes, warn=self.warn,
                      max_trace_bytes=limits.max_trace_bytes, parse_timeout_s=limits.parse_timeout_s,
                      cache_bytes=limits.cache_bytes, keep_analyses=limits.keep_analyses, peaks=self.peaks)

    def summaries(self, runs: Sequence[Run], *, worker: str | None = None, metadata: Sequence[Meta] | None = None,
                  schedule: Schedule | None = None) -> list[RunSummary]:
        """Every run's summary (each limited to ``worker``) through the pipeline, on ``schedule``
        (None: as this workspace says, ``fanout.Fanout``). ``metadata``: the runs', if the caller
        has them (None: read here, and what was done to each said as a warning)."""
        warn = self.warn or _log.warning
        if schedule is not None:
            return summarize_runs(self._files, runs, worker=worker, metadata=metadata, schedule=schedule, warn=warn)
        with open_executor(self.executor, warn) as pool:
            fanout = Fanout(self._files, jobs=self.jobs, executor=pool, progress=self.progress, warn=self.warn)
            return summarize_runs(self._files, runs, worker=worker, metadata=metadata, schedule=fanout, warn=warn)

    # -- per file, for the tab's views, listing and background jobs ------------------------
    def cached(self, trace: TraceFile) -> Cached:
        """The file's summary from memory, or its remembered failure; neither: it needs a parse."""
        summary = self._files.cached_summary(trace)
        return Cached(summary, self._files.cached_failure(trace) if summary is None else None)

    def cached_analysis(self, trace: TraceFile) -> Analysis | None:
        """The file's analysis if it takes no parse; its remembered failure raised (TraceError)."""
        return self._files.analysis_or_none(trace)

    def parse(self, trace: TraceFile, *, metadata: dict[str, object] | None, keep: bool = True,
              summary_only: bool = False) -> Parsed:
        """The file's summary and analysis from one parse (``Loader.parse``). Raises TraceError."""
        return self._files.parse(trace, metadata=metadata, keep=keep, summary_only=summary_only)

    def keep(self, trace: TraceFile, analysis: Analysis, *, spare: bool = False) -> None:
        """Caches a parse's analysis (``spare``: only where that evicts no other)."""
        self._files.keep_analysis(trace, analysis, spare=spare)

    def summaries_room(self, *, guess_bytes: int) -> int:
        """How many summaries the memory cache holds (``Loader.summaries_room``)."""
        return self._files.summaries_room(guess_bytes=guess_bytes)

    def run_summary(self, run: Run, *, worker: str | None = None,
                    metadata: dict[str, object] | EllipsisType | None = ...,
                    known: Mapping[TraceFile, WorkerSummary | TraceError] | None = None,
                    head_stats: Mapping[FileInfo, EventStats] | EllipsisType | None = ...) -> RunSummary:
        """One run's summary from its files' (``known``: those already summarized or failed; the
        others are summarized here), under the user's peaks (``Loader.summarize_run``)."""
        return self._files.summarize_run(run, worker=worker, metadata=metadata, known=known, head_stats=head_stats)

    def metadata(self, run: Run) -> RunMetadata:
        """The run's metadata file (``tb_attn_run.json``), as the analysis reads it, and what was
        done to it (``engine.metadata``: cut, or refused)."""
        return read_metadata(run.metadata_path)

    def cached_event_stats(self, run: Run) -> dict[FileInfo, EventStats] | None:
        """The per-head statistics of the run's event files, if read already (no I/O)."""
        return self._files.head_stats.cached_run(run.event_files)

    def event_stats(self, run: Run, files: Sequence[FileInfo] | None = None) -> dict[FileInfo, EventStats]:
        """The per-head statistics of the run's event files (``files``: only these of them), read
        within the run's bounds and time limit unless cached (never raises)."""
        return self._files.head_stats.read_run(run.event_files if files is None else files,
                                               timeout_s=self.limits.parse_timeout_s)
