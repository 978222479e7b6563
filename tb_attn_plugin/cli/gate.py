"""``tb-attn gate``: read both runs whole, compare them (``analysis.gate``), print the report."""

from __future__ import annotations

import argparse
import gc
import sys
from typing import TYPE_CHECKING

from tb_attn_plugin.cli import batch as cli_batch
from tb_attn_plugin.cli.batch import Usage, fail

if TYPE_CHECKING:
    from tb_attn_plugin.engine.workspace import Workspace
    from tb_attn_plugin.trace.discover import Run

__all__ = ["GATE_NOISY", "run_gate"]

#: gate's exit code where the steps' noise spans the tolerance: too noisy to judge.
GATE_NOISY = 3

_SIDES = ("baseline", "candidate")


def run_gate(args: argparse.Namespace) -> int:
    """``tb-attn gate``: the exit code (module docstring of ``cli``, and ``GATE_NOISY``)."""
    import msgspec

    from tb_attn_plugin.analysis.cross_run.gate import (  # lazy: usage errors answer before the engine loads
        gate,
        parse_tolerance,
    )

    try:
        max_time = parse_tolerance(args.max_time_regression)
        max_memory = parse_tolerance(args.max_memory_regression)
    except ValueError as exc:
        return fail(f"bad tolerance: {exc}")
    names = (args.baseline, args.candidate)
    try:  # one workspace: the logdir's; without one, each side's path is its own
        spaces = [cli_batch.workspace(args, path) for path in ([args.path] if args.path is not None else names)]
    except Usage as exc:
        return fail(str(exc))
    picked: list[Run] = []
    for label, name, space in zip(_SIDES, names, spaces if len(spaces) == 2 else spaces * 2, strict=True):
        try:
            picked.append(_one_run(space, name if args.path is not None else None))
        except (Usage, OSError, ValueError) as exc:
            return fail(f"{label}: {exc}")
    gc.disable()
    unique = list(dict.fromkeys(picked))  # a run gated against itself is read once
    try:
        read = dict(zip(unique, spaces[0].summaries(unique), strict=True))
    except ValueError as exc:
        return fail(str(exc))
    summaries = []
    for label, name, run in zip(_SIDES, names, picked, strict=True):
        summary = read[run]
        if summary.run == ".":
            summary = msgspec.structs.replace(summary, run=name)
        # Gating on the readable workers alone would compare a different run: with one rank's
        # trace corrupt, a slower rank could pass unseen. Every error is printed, then exit 2.
        for err in summary.errors:
            fail(f"{label} {err.file}: {err.error}")
        summaries.append(summary)
    if any(s.errors for s in summaries):
        return 2
    try:
        outcome = gate(summaries[0], summaries[1], max_time=max_time, max_memory=max_memory, clock=args.clock)
    except ValueError as exc:
        return fail(str(exc))
    from tb_attn_plugin.cli.report_gate import gate_json, gate_text  # lazy: usage errors answer before the engine loads

    sys.stdout.write(gate_json(outcome) if args.format == "json" else gate_text(outcome))
    return 0 if outcome.passed else 1 if outcome.regressed else GATE_NOISY


def _one_run(space: Workspace, name: str | None) -> Run:
    """The run ``name`` stands for under the workspace's logdir (None: the run directory or trace
    the workspace is), with only the ``--ranks`` selected. Raises Usage, or OSError and ValueError
    as ``Workspace.runs`` does."""
    runs = space.runs(run=name, ranks=False)
    if len(runs) != 1:
        shown = ", ".join(r.name for r in runs[:5]) or "none"
        raise Usage(f"{space.path} holds {len(runs)} runs ({shown}); point at one run directory")
    (run,) = space.select_ranks(runs)
    return run
