"""``tb-attn gate``: read both runs whole, compare them (``analysis.gate``), print the report."""

from __future__ import annotations

import argparse
import gc
import sys

from tb_attn_plugin.cli_batch import Usage, fail, listed_runs

__all__ = ["GATE_NOISY", "run_gate"]

#: gate's exit code where the steps' noise spans the tolerance: too noisy to judge.
GATE_NOISY = 3


def run_gate(args: argparse.Namespace) -> int:
    """``tb-attn gate``: the exit code (module docstring of ``cli``, and ``GATE_NOISY``)."""
    from tb_attn_plugin.analysis.gate import gate, parse_tolerance
    from tb_attn_plugin.loader import Loader, resolve_runs
    from tb_attn_plugin.trace.events import TraceError

    try:
        max_time = parse_tolerance(args.max_time_regression)
        max_memory = parse_tolerance(args.max_memory_regression)
    except ValueError as exc:
        return fail(f"bad tolerance: {exc}")
    gc.disable()
    loader = Loader()
    summaries = []
    unreadable = 0
    for label, path in (("baseline", args.baseline), ("candidate", args.candidate)):
        try:
            runs = listed_runs(args.path, path) if args.path is not None else resolve_runs(path)
        except (TraceError, Usage) as exc:
            return fail(f"{label}: {exc}")
        if len(runs) != 1:
            names = ", ".join(r.name for r in runs[:5]) or "none"
            return fail(f"{label}: {path} holds {len(runs)} runs ({names}); point at one run directory")
        summary = loader.summarize_run(runs[0])
        if summary.run == ".":
            summary.run = path
        # Gating on the readable workers alone would compare a different run: with one rank's
        # trace corrupt, a slower rank could pass unseen. Every error is printed, then exit 2.
        for err in summary.errors:
            fail(f"{label} {err.file}: {err.error}")
        unreadable += len(summary.errors)
        summaries.append(summary)
    if unreadable:
        return 2
    try:
        outcome = gate(summaries[0], summaries[1], max_time=max_time, max_memory=max_memory, clock=args.clock)
    except ValueError as exc:
        return fail(str(exc))
    from tb_attn_plugin.report_gate import gate_json, gate_text

    sys.stdout.write(gate_json(outcome) if args.format == "json" else gate_text(outcome))
    return 0 if outcome.passed else 1 if outcome.regressed else GATE_NOISY
