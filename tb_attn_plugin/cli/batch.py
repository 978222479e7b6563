"""The CLI's many-file options, shared by every command that reads runs (``summarize``, ``compare``,
``strategies``, ``heads``, ``ranks``, ``gate``).

    --jobs N                 processes on this machine (default: its cores)
    --executor dask://H:P    the files on a Dask cluster instead (also DASK_SCHEDULER_ADDRESS)
    --ranks 0-7,512          only these ranks' traces (``ranksel``)
    --cache-dir DIR|URL      the shared summary cache (``summary_cache``)
    --cache-max-mb N         its size bound, for a local directory
    --no-progress            no progress bar (none is drawn when stderr is not a terminal anyway)

An executor that cannot be used (no scheduler at that address, dask not installed) is a warning,
and the files are summarized on this machine instead: nothing is lost, only time.

It also holds what every command shares: its one ``Workspace`` (``workspace``: what to read and
how, as the flags say), which names the command's runs once and summarizes them, and the one-line
error (``fail``, exit code 2) and stderr lines that bad input gets.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tb_attn_plugin.engine.workspace import Workspace
    from tb_attn_plugin.types.results import RankView

__all__ = ["PROG", "Usage", "add_flags", "fail", "sampled", "stderr", "whole", "workspace"]

PROG = "tb-attn"


class Usage(Exception):
    """Input that the command cannot work on: printed as one line, exit code 2."""


def fail(message: str) -> int:
    """Prints a usage or input error (one line, escaped) and returns exit code 2."""
    stderr(f"error: {message}")
    return 2


def stderr(message: str) -> None:
    """One line on stderr, after the program's name, with its control characters escaped."""
    from tb_attn_plugin.types.encoding import printable  # lazy: `--help` loads no engine

    print(f"{PROG}: {printable(message)}", file=sys.stderr)


def whole(unit: str) -> Callable[[str], int]:
    """An argparse type: a whole number of ``unit``, at least 1."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = 0
        if value < 1:
            raise argparse.ArgumentTypeError(f"must be a whole number of {unit}, at least 1, got {text!r}")
        return value

    return parse


def _ranks(text: str) -> object:
    from tb_attn_plugin.engine.ranksel import (
        parse_ranks,  # lazy: `--help` loads no engine
    )

    try:
        return parse_ranks(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--jobs", type=whole("processes"), default=None, metavar="N",
                        help="summarize the files in N processes (default: one per core, where there are 16 MB or "
                             "more to parse)")
    parser.add_argument("--executor", default=None, metavar="URL",
                        help="dask://HOST:PORT: summarize the files on that Dask cluster (default: this machine; "
                             "DASK_SCHEDULER_ADDRESS when set)")
    parser.add_argument("--ranks", type=_ranks, default=None, metavar="SPEC",
                        help="only these ranks' traces, e.g. 0-7,512 (ranks from the file names, else the workers' "
                             "order)")
    parser.add_argument("--cache-dir", default=None, metavar="DIR|URL",
                        help="keep summaries in this directory or fsspec URL (e.g. s3://team/tb-attn-cache/), shared "
                             "with other runs of tb-attn and with TensorBoard's --tb_attn_cache_dir")
    parser.add_argument("--cache-max-mb", type=whole("MiB"), default=None, metavar="MB",
                        help="bound a local --cache-dir to this size, evicting the least recently used summaries")
    parser.add_argument("--no-progress", action="store_true", help="draw no progress bar on the terminal")


def sampled(view: RankView, total: int, args: argparse.Namespace) -> RankView:
    """The ranks view with the run's rank count and the ``--ranks`` selection, as the tab's has them."""
    import msgspec

    return msgspec.structs.replace(view, ranks_total=total,
                                   ranks_selected=None if args.ranks is None else args.ranks.spec)


def workspace(args: argparse.Namespace, path: str, *, max_trace_bytes: int | None = None,
              peaks: tuple[float | None, float | None] = (None, None)) -> Workspace:
    """The command's one ``Workspace``: ``path`` read as the flags say, under the user's ``peaks``
    (``--peak-flops``, ``--peak-bw``) and ``max_trace_bytes`` (None: the engine's default). Raises
    Usage for a bad ``--executor``, a ``--cache-max-mb`` without ``--cache-dir``, or a cache
    directory inside ``path`` (which is never written)."""
    from tb_attn_plugin.engine.fanout import executor_address  # lazy: `--help` loads no engine
    from tb_attn_plugin.engine.limits import Limits  # lazy: as above
    from tb_attn_plugin.engine.workspace import Workspace  # lazy: as above

    def warn(message: str) -> None:
        stderr(f"warning: {message}")

    cache_max = None if args.cache_max_mb is None else args.cache_max_mb << 20
    limits = Limits() if max_trace_bytes is None else Limits(max_trace_bytes=max_trace_bytes)
    try:
        address = executor_address(args.executor)  # a bad --executor is a usage error before anything runs
        return Workspace(path, cache_dir=args.cache_dir, cache_max_bytes=cache_max, jobs=args.jobs, executor=address,
                         ranks=args.ranks, progress=False if args.no_progress else None, warn=warn, limits=limits,
                         peaks=peaks)
    except ValueError as exc:
        raise Usage(str(exc)) from None
