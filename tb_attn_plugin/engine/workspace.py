"""One engine for the front doors that read a path: the CLI's commands and the notebook API.

``Workspace(path, cache_dir=..., jobs=..., executor=..., ranks=...)`` says once what to read and
how, then ``runs()`` names the runs (the ones picked by run, worker and rank) and
``summaries()`` summarizes them (``fanout``: this process, a pool of processes or an executor,
through the shared summary cache). Bad input gets the same message from every door: a missing
path is a ``FileNotFoundError`` (storage that cannot answer an ``OSError``), anything else the
engine cannot use a ``ValueError`` (the CLI prints each as its one line, exit code 2).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tb_attn_plugin.engine.fanout import open_executor, summarize_runs
from tb_attn_plugin.engine.loader import Loader, resolve_runs
from tb_attn_plugin.engine.ranksel import RankSet
from tb_attn_plugin.engine.ranksel import select_ranks as _select_ranks
from tb_attn_plugin.trace import io
from tb_attn_plugin.trace.discover import Run
from tb_attn_plugin.trace.events import ReadError, TraceError
from tb_attn_plugin.types.schema import RunSummary

__all__ = ["NO_TRACES_HINT", "Workspace"]

#: Said after "no traces under PATH", whichever door was used.
NO_TRACES_HINT = "write some with: tb-attn-run --logdir ..."
_log = logging.getLogger(__name__)
#: How many run names an unknown run's message lists.
_NAMES_LISTED = 8


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

    def __post_init__(self) -> None:
        if self.cache_max_bytes is not None and self.cache_dir is None:
            raise ValueError("--cache-max-mb bounds --cache-dir: give both")
        if self.cache_dir is not None:
            # lazy: loaded with a cache directory only (it loads OpenSSL)
            from tb_attn_plugin.engine.summary_cache import check_outside

            check_outside(self.cache_dir, self.path)  # the logdir is never written

    def runs(self, *, run: str | None = None, worker: str | None = None) -> list[Run]:
        """The runs under ``path`` (``run``: only the one of that name, relative to the logdir;
        ``worker``: only runs that have it), with only the selected ranks' traces."""
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
            raise ValueError(f"no traces (*.pt.trace.json[.gz]) under {path}; {NO_TRACES_HINT}")
        if run is not None:
            picked = [r for r in runs if r.name == run.strip("/")]
            if not picked:
                names = ", ".join(r.name for r in runs[:_NAMES_LISTED]) + (", ..." if len(runs) > _NAMES_LISTED else "")
                raise ValueError(f"no run named {run!r} under {path} (its runs: {names})")
            runs = picked
        if worker is not None:
            runs = [r for r in runs if worker in r.workers]
            if not runs:
                raise ValueError(f"no worker named {worker!r} in the selected runs under {path}")
        return self.select_ranks(runs)

    def select_ranks(self, runs: Sequence[Run]) -> list[Run]:
        """``runs`` with only the selected ranks' traces (a run left with none is dropped)."""
        if self.ranks is None:
            return list(runs)
        picked = [r for r in (_select_ranks(r, self.ranks) for r in runs) if r.files]
        if not picked:
            raise ValueError(f"no trace of ranks {self.ranks.spec} under {self.path}")
        return picked

    def summaries(self, runs: Sequence[Run], *, worker: str | None = None,
                  loader: Loader | None = None) -> list[RunSummary]:
        """Every run's summary (each limited to ``worker``). ``loader``: one the caller keeps
        (the CLI's peaks and head events go with it); by default one with this workspace's cache."""
        if loader is None:
            loader = Loader(cache_dir=self.cache_dir, cache_max_bytes=self.cache_max_bytes, warn=self.warn)
        with open_executor(self.executor, self.warn or _log.warning) as pool:
            return summarize_runs(runs, loader, worker=worker, jobs=self.jobs, executor=pool, progress=self.progress,
                                  warn=self.warn)
