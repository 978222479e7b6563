"""``tb-attn``: attention summaries of torch.profiler traces in the terminal and in CI.

    tb-attn summarize PATH [--run R] [--worker W] [--format table|json|csv] [--peak-flops F --peak-bw B] [MANY]
    tb-attn compare PATH [--runs A,B] [--baseline A] [--format table|json] [--peak-flops F --peak-bw B] [MANY]
    tb-attn strategies PATH [--runs A,B] [--baseline S] [--rel-tol 0.01] [--loss-tol 0.01] [--format F] [MANY]
    tb-attn heads PATH [--run R] [--worker W] [--window W] [--threshold 0.99] [--format table|json|csv] [MANY]
    tb-attn ranks PATH [--run R] [--margin 0.2] [--fail-on-straggler] [--format table|json] [MANY]
    tb-attn gate [LOGDIR] --baseline RUN --candidate RUN [--max-time-regression 10%] [--max-memory-regression 10%]
        [MANY]

MANY, for every command: ``--jobs N --executor dask://HOST:PORT --ranks 0-7,512 --cache-dir DIR|URL
--cache-max-mb MB --no-progress`` (``cli.batch``). PATH is a logdir, a run directory or one trace
file (local or an fsspec URL). Exit codes of summarize, compare, strategies, heads and ranks: 0 when
every selected trace was read, 1 when some trace could not be read (its error is printed, the others
are still reported; ranks: also a straggler with ``--fail-on-straggler``), 2 for bad usage (nothing
to read, an unknown run or worker, a bad flag). gate: 0 when attention did not regress, 1 when it
did, 2 for bad usage or when any trace of either run cannot be read: a run missing a worker is not
the run that was profiled, so it must not pass, 3 when the steps' noise spans the tolerance: too
noisy to judge (``docs/ci.md``).

Each error is one line on stderr, ``tb-attn: ...``. Names and messages go through
``types.encoding.printable``: a file, run or worker name cannot send escape sequences to the terminal.

Each command builds one ``Workspace`` (``batch.workspace``), asks it for its runs once and has it
summarize them.
"""

# Each command imports what it needs inside it (`# lazy:`): `tb-attn --help` and a usage error answer
# without loading the engine.

from __future__ import annotations

import argparse
import gc
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, NoReturn

from tb_attn_plugin.cli import batch, report, text
from tb_attn_plugin.cli.batch import PROG, Usage, fail, stderr
from tb_attn_plugin.engine.limits import DEFAULT_MAX_TRACE_MB
from tb_attn_plugin.types.encoding import printable

if TYPE_CHECKING:  # the CLI imports the engine lazily: `tb-attn --help` stays fast
    from tb_attn_plugin.types.schema import RunSummary

__all__ = ["main"]



class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {printable(message)}\n")


def _rate(text: str) -> float:
    """A peak rate (``analysis.peaks.parse_rate``: "312T", "2.0e12", "1.9 TB/s")."""
    from tb_attn_plugin.analysis.measures.peaks import (
        parse_rate,  # lazy: only this command needs it
    )

    try:
        return parse_rate(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _peak_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--peak-flops", type=_rate, metavar="RATE",
                        help="the roofline's peak FLOP/s, for every dtype (e.g. 312T): for traces of a device the "
                        "table does not know, or a CPU trace without the runner's probes")
    parser.add_argument("--peak-bw", type=_rate, metavar="RATE",
                        help="the roofline's peak memory bandwidth in bytes/s (e.g. 2.0T)")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description="Where attention spends time and memory, from torch.profiler traces.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    s = sub.add_parser("summarize", help="per layer x phase time, FLOPs, memory and backend")
    s.add_argument("path", help="a logdir, a run directory or a trace file (local path or fsspec URL)")
    s.add_argument("--run", help="only this run (its path relative to the logdir)")
    s.add_argument("--worker", help="only this worker")
    s.add_argument("--format", choices=("table", "json", "csv"), default="table")
    s.add_argument("--tokens", action="store_true",
                   help="with --format csv: one row per generation step (prefill, decode) instead of per layer x phase")
    s.add_argument("--max-trace-mb", type=batch.whole("MiB"), default=DEFAULT_MAX_TRACE_MB,
                   help="refuse traces larger than this, uncompressed (default %(default)s)")
    _peak_flags(s)
    batch.add_flags(s)
    c = sub.add_parser("compare", help="runs side by side with ratios to a baseline, and scaling with seq")
    c.add_argument("path", help="a logdir (local path or fsspec URL)")
    c.add_argument("--runs", help="comma-separated run names (default: every run)")
    c.add_argument("--baseline", help="the run the ratios are against (default: the first)")
    c.add_argument("--format", choices=("table", "json"), default="table")
    _peak_flags(c)
    batch.add_flags(c)
    t = sub.add_parser("strategies", help="attention strategies side by side: time, memory, error and speed-up "
                       "per implementation and length, with fitted crossovers")
    t.add_argument("path", help="a logdir (local path or fsspec URL)")
    t.add_argument("--runs", help="comma-separated run names (default: every run)")
    t.add_argument("--baseline", help="the strategy speed-ups and crossovers are against, e.g. naive or sdpa "
                   "(default: naive where present, else the first exact one)")
    t.add_argument("--rel-tol", type=float, default=None,
                   help="accuracy-cost: relative error over this (a fraction; default 0.01)")
    t.add_argument("--loss-tol", type=float, default=None, help="accuracy-cost: loss moved by more than this "
                   "(default 0.01)")
    t.add_argument("--format", choices=("table", "json", "csv"), default="table")
    batch.add_flags(t)
    hd = sub.add_parser("heads", help="each head's cost next to its attention statistics (runner --attn-stats): "
                        "which heads are local, which are sinks")
    hd.add_argument("path", help="a logdir or a run directory (local path or fsspec URL)")
    hd.add_argument("--run", help="only this run")
    hd.add_argument("--worker", help="only this worker")
    hd.add_argument("--window", type=int, default=None, metavar="W",
                    help="the window of the local verdict (one recorded: 64, 128, 256, 512, 1024; default: the "
                         "largest recorded up to 256)")
    hd.add_argument("--threshold", type=float, default=None, metavar="SHARE",
                    help="the share of a head's mass within W that makes it local (default 0.99)")
    hd.add_argument("--format", choices=("table", "json", "csv"), default="table")
    batch.add_flags(hd)
    r = sub.add_parser("ranks", help="multi-rank runs: attention per rank and layer, stragglers, collectives")
    r.add_argument("path", help="a logdir or a run directory (local path or fsspec URL)")
    r.add_argument("--run", help="only this run (default: every run with two or more workers)")
    r.add_argument("--margin", type=float, default=0.2,
                   help="a straggler's attention time exceeds the median over ranks by more than this (default 0.2)")
    r.add_argument("--fail-on-straggler", action="store_true", help="exit 1 when a straggler is found")
    r.add_argument("--format", choices=("table", "json"), default="table")
    batch.add_flags(r)
    g = sub.add_parser("gate", help="fail (exit 1) when attention got slower or hungrier than a baseline; "
                       "exit 2 when a trace of either run cannot be read; exit 3 when the steps are too noisy to "
                       "judge the time")
    g.add_argument("path", nargs="?", help="a log directory: --baseline and --candidate are then run names in it, "
                   "as summarize --run and compare --runs take them")
    g.add_argument("--baseline", required=True, help="the baseline run: a run name under PATH, or without PATH a run "
                   "directory or a trace file")
    g.add_argument("--candidate", required=True, help="the candidate run (as --baseline)")
    g.add_argument("--max-time-regression", default="10%", help="tolerated slowdown (default 10%%)")
    g.add_argument("--max-memory-regression", default="10%", help="tolerated memory growth (default 10%%)")
    g.add_argument("--clock", choices=("auto", "cpu", "device"), default="auto",
                   help="compare device time (auto: when both runs have kernels) or CPU time")
    g.add_argument("--format", choices=("text", "json"), default="text")
    batch.add_flags(g)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    # The engine does no linear algebra: without this, numpy's OpenBLAS starts a thread per core
    # at import that spins for a while, taking a core from the scanner's threads (10% of the CPU
    # of a summary of a 100 MB trace on 2 cores). Before numpy is imported; a user's value wins.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    args = build_parser().parse_args(argv)
    if args.command == "gate":
        from tb_attn_plugin.cli.gate import (
            run_gate,  # lazy: only this command needs it
        )

        return run_gate(args)
    if args.command == "compare":
        return _compare(args)
    if args.command == "ranks":
        return _ranks(args)
    if args.command == "strategies":
        return _strategies(args)
    if args.command == "heads":
        return _heads(args)
    from tb_attn_plugin.engine.reading import (
        prefetch_analysis,  # lazy: only this command needs it
    )

    if args.jobs == 1 and args.executor is None:
        prefetch_analysis()  # a thread: only where no pool of processes is forked
    try:
        space = batch.workspace(args, args.path, max_trace_bytes=args.max_trace_mb << 20,
                                peaks=(args.peak_flops, args.peak_bw))
        runs = space.runs(run=args.run, worker=args.worker)
    except (Usage, OSError, ValueError) as exc:
        return fail(str(exc))
    # A short-lived process that builds large numpy columns and no reference cycles: the cyclic
    # garbage collector only costs time here.
    gc.disable()
    try:
        summaries = space.summaries(runs, worker=args.worker)
    except ValueError as exc:
        return fail(str(exc))
    render = {"table": report.summary_table, "json": report.summary_json, "csv": report.summary_csv}[args.format]
    if args.tokens:
        if args.format != "csv":
            return fail("--tokens writes CSV: use it with --format csv (JSON carries the steps in generation.tokens)")
        from tb_attn_plugin.cli.report_generation import (
            tokens_csv,  # lazy: only this command needs it
        )

        render = tokens_csv
    sys.stdout.write(render(summaries))
    return _file_errors(summaries)


def _file_errors(summaries: Sequence[RunSummary]) -> int:
    """Each trace that could not be read, a line on stderr; 1 if any."""
    failed = [(s.run, e) for s in summaries for e in s.errors]
    for run, err in failed:
        stderr(f"{run}/{err.file}: {err.error}")
    return 1 if failed else 0


def _compare(args: argparse.Namespace) -> int:
    from tb_attn_plugin.analysis.cross_run.compare import compare  # lazy: only this command needs it
    from tb_attn_plugin.analysis.cross_run.scaling import scaling  # lazy: only this command needs it

    try:
        space = batch.workspace(args, args.path, peaks=(args.peak_flops, args.peak_bw))
        runs = space.runs(run=_names(args.runs))
    except (Usage, OSError, ValueError) as exc:
        return fail(str(exc))
    if args.baseline is not None and args.baseline.strip("/") not in {r.name for r in runs}:
        return fail(f"the baseline {args.baseline!r} is not one of the runs")
    gc.disable()
    try:
        summaries = space.summaries(runs)
    except ValueError as exc:
        return fail(str(exc))
    try:
        result = compare(summaries, baseline=args.baseline.strip("/") if args.baseline else None)
    except ValueError as exc:
        return fail(str(exc))
    scale = scaling(summaries)
    if args.format == "json":
        sys.stdout.write(text.json_text({"compare": result, "scaling": scale}))
    else:
        sys.stdout.write(report.compare_table(result, scale))
    for err in result.errors:
        stderr(f"{err.run}: {err.error}")
    return 1 if result.errors else 0


def _names(names: str | None) -> list[str] | None:
    """The run names of ``--runs A,B`` (None: every run)."""
    picked = [n for n in (names or "").split(",") if n.strip()]
    return picked or None


def _strategies(args: argparse.Namespace) -> int:
    from tb_attn_plugin.analysis.cross_run.strategies import (  # lazy: only this command needs it
        LOSS_TOL,
        REL_TOL,
        check_tolerance,
        strategies,
    )
    from tb_attn_plugin.cli.report_strategies import (  # lazy: only this command needs it
        strategies_csv,
        strategies_table,
    )

    try:
        rel = check_tolerance("--rel-tol", REL_TOL if args.rel_tol is None else args.rel_tol)
        loss = check_tolerance("--loss-tol", LOSS_TOL if args.loss_tol is None else args.loss_tol)
        space = batch.workspace(args, args.path)
        runs = space.runs(run=_names(args.runs))
    except (ValueError, Usage, OSError) as exc:
        return fail(str(exc))
    gc.disable()
    try:
        summaries = space.summaries(runs)
    except ValueError as exc:
        return fail(str(exc))
    result = strategies(summaries, baseline=args.baseline, rel_tol=rel, loss_tol=loss)
    if args.baseline is not None and not any(args.baseline in g.strategies for g in result.groups):
        names = sorted({s for g in result.groups for s in g.strategies})
        return fail(f"no strategy named {args.baseline!r}; the runs have: {', '.join(names) or 'none'}")
    render = {"table": strategies_table, "json": text.json_text, "csv": strategies_csv}[args.format]
    sys.stdout.write(render(result))
    return _file_errors(summaries)


def _heads(args: argparse.Namespace) -> int:
    from tb_attn_plugin.cli.report_heads import (  # lazy: only this command needs it
        heads_csv,
        heads_runs,
        heads_table,
    )

    if args.threshold is not None and not 0 < args.threshold <= 1:
        return fail(f"--threshold must be a share in (0, 1], got {args.threshold}")
    try:
        space = batch.workspace(args, args.path)
        runs = space.runs(run=args.run, worker=args.worker)
    except (Usage, OSError, ValueError) as exc:
        return fail(str(exc))
    gc.disable()
    try:
        summaries = space.summaries(runs, worker=args.worker)
        views = heads_runs(summaries, window=args.window, threshold=args.threshold)
    except ValueError as exc:
        return fail(str(exc))
    render = {"table": heads_table, "csv": heads_csv,
              "json": lambda v: text.json_text(v if len(v) > 1 else v[0])}[args.format]
    sys.stdout.write(render(views))
    return _file_errors(summaries)


def _ranks(args: argparse.Namespace) -> int:
    from tb_attn_plugin.analysis.cross_run.ranks import (
        ranks,  # lazy: only this command needs it
    )

    if not 0 <= args.margin <= 10:
        return fail("--margin must be in 0..10 (a fraction: 0.2 is 20%)")
    try:
        space = batch.workspace(args, args.path)
        runs = space.runs(run=args.run, ranks=False)  # every rank: the view counts them
    except (Usage, OSError, ValueError) as exc:
        return fail(str(exc))
    if args.run is None:
        runs = [r for r in runs if len(r.workers) > 1]
        if not runs:
            return fail(f"no run with two or more workers (ranks) under {args.path}")
    total = {r.name: len(r.workers) for r in runs}
    gc.disable()
    try:
        runs = space.select_ranks(runs)
        views = [batch.sampled(ranks(s, margin=args.margin), total[s.run], args) for s in space.summaries(runs)]
    except ValueError as exc:
        return fail(str(exc))
    if args.format == "json":
        sys.stdout.write(text.json_text(views if len(views) > 1 else views[0]))
    else:
        sys.stdout.write("\n".join(report.ranks_table(v) for v in views))
    for v in views:
        for err in v.errors:
            stderr(f"{v.run}/{err.file}: {err.error}")
    if any(v.errors for v in views):
        return 1
    return 1 if args.fail_on_straggler and any(v.stragglers for v in views) else 0
