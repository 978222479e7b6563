"""``load``: traces to summaries in a notebook, and ``Summaries``: them as pandas DataFrames.

``load`` builds one ``Workspace`` as ``tb-attn summarize`` does, which resolves its source
(``run=``, ``worker=`` and ``ranks=`` as ``--run``, ``--worker`` and ``--ranks``) and summarizes
the files through the engine's one pipeline (``fanout.Fanout``: serially, in ``jobs`` processes or
on an executor), so that
``Summaries.to_json()`` is byte for byte the CLI's ``--format json``. pandas is imported only
when a DataFrame is asked for: the tab and the CLI never import this package.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import tempfile
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tb_attn import frames, html
from tb_attn_plugin.types.encoding import printable

if TYPE_CHECKING:
    import pandas as pd

    from tb_attn_plugin.engine.ranksel import RankSet
    from tb_attn_plugin.types.schema import RunSummary

__all__ = ["Summaries", "TbAttnWarning", "load"]

Source = str | os.PathLike[str] | Any  # a path or URL, or a stopped torch.profiler.profile
#: The file a live profile's trace is written to (its run's name; its worker is "profile").
PROFILE_TRACE = "profile.pt.trace.json"


class TbAttnWarning(UserWarning):
    """What ``load`` says without failing: a trace that could not be read, an executor not reached."""


def _pandas() -> Any:
    try:
        import pandas
    except ImportError:
        raise ImportError("tb_attn's DataFrames need pandas: pip install 'tb-attn[notebook]'") from None
    return pandas


@dataclass(frozen=True)
class Summaries:
    """The summaries of the runs ``load`` found (``runs``: the CLI's JSON ``runs``), as DataFrames.

    Each frame is one tidy table: key columns first (``run``, ``worker``, ``span``, then ``layer``,
    ``phase``, ``head`` or ``step`` where they apply), then the schema's fields under their own
    names (``docs/summary.md``), nested structs flattened with a prefix (``backward_cpu_us``,
    ``roof_share``, ``roof_verdict``). Times are microseconds and memory bytes, means per profiled
    step. A frame with no rows still has its columns.
    """

    runs: list[RunSummary]
    source: str = ""

    def _frame(self, table: frames.Table) -> pd.DataFrame:
        pd = _pandas()
        if not table.rows:
            return pd.DataFrame(columns=list(table.columns))
        return pd.DataFrame.from_records(table.rows, columns=list(table.columns))

    def workers(self) -> pd.DataFrame:
        """One row per run × worker × span: step and attention times, ``rank``, ``headline``, ``roofline_*``."""
        return self._frame(frames.workers(self.runs))

    def phases(self) -> pd.DataFrame:
        """One row per run × worker × span × layer × phase: ``PhaseStats`` (``calls``, ``cpu_us``,
        ``cpu_self_us``, ``device_us``, ``kernels``, ``op_count``, ``flops``, ..., ``backward_*``, ``roof_*``)."""
        return self._frame(frames.phases(self.runs))

    def layers(self) -> pd.DataFrame:
        """One row per run × worker × span × layer: ``LayerStats`` with ``backward_*``, ``mask_*``, ``roof_*``."""
        return self._frame(frames.layers(self.runs))

    def heads(self) -> pd.DataFrame:
        """One row per run × worker × span × layer × head: ``HeadStats``, joined with the run's
        per-head attention statistics where it has some (``weights``, ``local``, ``sink``, ``entropy``,
        ``sink_4``, ``window_W``...; nulls where there are none)."""
        return self._frame(frames.heads(self.runs))

    def steps(self) -> pd.DataFrame:
        """One row per run × worker × span × profiled step: step and attention times (``per_step``)."""
        return self._frame(frames.steps(self.runs))

    def tokens(self) -> pd.DataFrame:
        """One row per generation step (prefill, decode) of traces that hold a generation."""
        return self._frame(frames.tokens(self.runs))

    def generation(self) -> pd.DataFrame:
        """One row per worker with a generation: KV cache, ``prefill_*``, ``decode_*``, the decode ``fit_*``."""
        return self._frame(frames.generation(self.runs))

    def kernels(self) -> pd.DataFrame:
        """One row per run × worker × span × layer × phase × kernel (``kernel_rank`` 1: the most
        expensive). The summary keeps each phase's 5 most expensive kernels only; CPU traces have none."""
        return self._frame(frames.kernels(self.runs))

    def ops(self) -> pd.DataFrame:
        """As ``kernels`` for the top-level ops (``op_rank``, ``op``): each phase's 5 most expensive."""
        return self._frame(frames.ops(self.runs))

    def memory(self) -> pd.DataFrame:
        """One row per run × worker × span × layer × phase: allocated, freed and peak bytes, score
        tensors (``sxs_*``), the layer's peak (``layer_peak_bytes``) and ``score_tensor_bytes``."""
        return self._frame(frames.memory(self.runs))

    def collectives(self) -> pd.DataFrame:
        """One row per run × worker × span × kind of collective (``name``): calls and times per step."""
        return self._frame(frames.collectives(self.runs))

    def spreads(self) -> pd.DataFrame:
        """How far the profiled steps were apart, per figure of a worker, layer or phase (``noisy``)."""
        return self._frame(frames.spreads(self.runs))

    def findings(self) -> pd.DataFrame:
        """One row per finding: ``id``, ``severity``, ``title``, ``explanation``, ``suggestion``, and
        its evidence (``time_us``, ``bytes``, ``layers``, ``ops``, ``kernels``, ``details``)."""
        return self._frame(frames.findings(self.runs))

    def ranks(self, *, margin: float | None = None) -> pd.DataFrame:
        """One row per run × rank, for the runs with two or more workers: as ``tb-attn ranks``
        (``straggler``: attention in the rank's fastest step over the median of the ranks by more
        than ``margin``, 0.2 by default)."""
        from tb_attn_plugin.analysis.cross_run.ranks import DEFAULT_MARGIN, ranks

        views = [ranks(r, margin=DEFAULT_MARGIN if margin is None else margin)
                 for r in self.runs if len({w.worker for w in r.workers}) > 1]
        return self._frame(frames.ranks(views))

    def errors(self) -> pd.DataFrame:
        """One row per trace that could not be read: ``run``, ``file``, ``error``."""
        return self._frame(frames.errors(self.runs))

    def to_json(self) -> str:
        """The summaries as ``tb-attn summarize --format json`` writes them."""
        from tb_attn_plugin.types.encoding import summaries_json  # lazy: the engine loads on the first use

        return summaries_json(self.runs).decode("ascii")

    def __repr__(self) -> str:
        return html.overview_text(self.runs, self.source)

    def _repr_html_(self) -> str:
        return html.overview_html(self.runs, self.source)


def load(source: Source, *, run: str | None = None, worker: str | None = None, ranks: str | RankSet | None = None,
         jobs: int | None = None, executor: cf.Executor | str | Any | None = None, cache_dir: str | None = None,
         progress: bool | None = None) -> Summaries:
    """Summarize the traces of ``source``: a logdir, a run directory, a trace file (a local path or
    an fsspec URL such as ``s3://bucket/run/``), or a ``torch.profiler.profile`` that has stopped
    (its trace is exported to a temporary file, summarized, and deleted).

    ``run``: only the run of that name (its path relative to the logdir); ``worker``: only that
    worker's traces; ``ranks``: only these ranks' traces (``"0-7,512"`` or a ``ranksel.RankSet``).
    ``jobs``: processes of this machine (default: one per core where there are 16 MB or more to
    parse, else this process); ``executor``: summarize the files on
    a ``concurrent.futures.Executor``, a ``distributed.Client``, or ``"dask://HOST:PORT"`` (a
    scheduler that cannot be reached is a warning, and the files are summarized here).
    ``cache_dir``: the shared summary cache (a directory or fsspec URL; not for a live profile).
    ``progress``: draw a bar on stderr (None: when stderr is a terminal).

    Raises FileNotFoundError for a missing path, ValueError for anything else it cannot use (no
    traces, an unknown run or worker, a bad selection). A trace that cannot be read is a
    ``TbAttnWarning`` and a row of ``Summaries.errors()``; the other traces are summarized.
    """
    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1):
        raise ValueError(f"jobs must be a whole number of processes, at least 1, got {jobs!r}")
    _check_executor(executor)
    from tb_attn_plugin.engine.workspace import Workspace  # the engine loads on the first load(), not on import

    said: list[str] = []
    wanted = _ranks(ranks)
    if hasattr(source, "export_chrome_trace"):
        with tempfile.TemporaryDirectory(prefix="tb-attn-") as tmp:
            path = os.path.join(tmp, PROFILE_TRACE)
            try:
                source.export_chrome_trace(path)
            except Exception as exc:
                raise ValueError(f"cannot export the profile's trace ({type(exc).__name__}: {exc}); "
                                 "pass the profile after it stopped (after its `with` block)") from None
            space = Workspace(path, jobs=jobs, executor=executor, ranks=wanted, progress=progress, warn=said.append)
            summaries = space.summaries(space.runs(run=run, worker=worker), worker=worker)
        source_name = "a torch.profiler profile"
    else:
        if not isinstance(source, str | os.PathLike):
            raise TypeError(f"load() takes a path, a URL or a torch.profiler.profile, not {type(source).__name__}")
        path = os.fspath(source)
        if not isinstance(path, str):
            raise TypeError("load() takes a path as str, not bytes")
        space = Workspace(path, cache_dir=cache_dir, jobs=jobs, executor=executor, ranks=wanted, progress=progress,
                          warn=said.append)
        summaries = space.summaries(space.runs(run=run, worker=worker), worker=worker)
        source_name = path
    for s in summaries:
        if s.errors:
            first = s.errors[0]
            more = f" (and {len(s.errors) - 1} more)" if len(s.errors) > 1 else ""
            said.append(f"run {s.run}: {first.file} could not be read: {first.error}{more}; see Summaries.errors()")
    for message in said:
        warnings.warn(printable(message), TbAttnWarning, stacklevel=2)
    return Summaries(summaries, source_name)


def _ranks(ranks: str | RankSet | None) -> RankSet | None:
    """A rank selection as the engine takes it; TypeError for anything but a spec or a RankSet."""
    from tb_attn_plugin.engine.ranksel import RankSet, parse_ranks

    if ranks is None or isinstance(ranks, RankSet):
        return ranks
    if not isinstance(ranks, str):
        raise TypeError(f"ranks takes a str such as '0-7,512' or a RankSet, not {type(ranks).__name__}")
    return parse_ranks(ranks)


def _check_executor(spec: object) -> None:
    """Raises, before anything is read, for an executor ``fanout.open_executor`` cannot use."""
    if isinstance(spec, str):
        from tb_attn_plugin.engine.fanout import executor_address

        executor_address(spec)  # ValueError for anything but local and Dask
    elif not (spec is None or isinstance(spec, cf.Executor) or hasattr(spec, "get_executor")):
        raise TypeError(f"executor takes a concurrent.futures.Executor, a distributed.Client or 'dask://HOST:PORT', "
                        f"not {type(spec).__name__}")
