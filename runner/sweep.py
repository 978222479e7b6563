"""Run a list of configurations one after another, with progress, and report the outcome.

A configuration with repeats (``RunSpec.repeats``, ``--repeats N``) is profiled that many times,
interleaved with the others: every configuration once, then every one again (A B C A B C), so that
a slow spell of the machine hits each configuration alike rather than one of them. The repeats are
one run's parts: one run directory, one metadata file listing each repeat's window (``repeats``),
a trace per repeat (per rank and profiler cycle). ``append`` makes even the first round a repeat
added to runs that exist (``--append``: a baseline and a candidate profiled in turns by two
checkouts).

A failed or unsupported configuration is recorded and the sweep goes on, except when the logdir
cannot be written (a full disk, a file-size limit): then the sweep stops, since every later run
would profile only to fail the same way. Ctrl-C stops the
sweep: completed runs stay as they are, the run in progress is marked ``interrupted``, and no
temporary file is left behind.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path

from runner.config import ProfileConfig
from runner.distributed import any_rank, barrier, init_from_env, shutdown
from runner.metadata import METADATA_FILE
from runner.session import RunResult, RunSpec, run_one
from runner.traces import TMP_SUFFIX, TRACE_FILE_RE

__all__ = ["clear_run", "format_results", "run_sweep"]


def clear_run(run_dir: Path) -> None:
    """Remove what an earlier run wrote into ``run_dir`` (traces, metadata, leftovers)."""
    if not run_dir.is_dir():
        return
    for p in run_dir.iterdir():
        if p.is_file() and (TRACE_FILE_RE.match(p.name) or p.name == METADATA_FILE or p.name.endswith(TMP_SUFFIX)):
            p.unlink()


def _traces_on_disk(run_dir: Path) -> list[Path]:
    return sorted(p for p in run_dir.iterdir() if TRACE_FILE_RE.match(p.name)) if run_dir.is_dir() else []


def _on_disk(logdir: Path, results: Sequence[RunResult]) -> int:
    """The trace files in the runs' directories: every rank's."""
    dirs = {logdir / r.name for r in results}
    return sum(1 for d in dirs if d.is_dir() for f in d.iterdir() if TRACE_FILE_RE.match(f.name))


def _merged(before: RunResult | None, repeat: RunResult) -> RunResult:
    """A run's result over its repeats so far: every trace, the seconds summed, and the first repeat
    that did not end ok (else the last) for its status and error."""
    if before is None:
        return repeat
    worst = before if before.status not in ("ok",) else repeat
    return RunResult(name=repeat.name, status=worst.status, error=worst.error, traces=before.traces + repeat.traces,
                     seconds=before.seconds + repeat.seconds, write_failed=before.write_failed or repeat.write_failed)


def format_results(results: Sequence[RunResult]) -> str:
    width = max((len(r.name) for r in results), default=3)
    lines = [f"{'run':<{width}}  {'status':<11}  {'seconds':>7}  traces  note"]
    for r in results:
        note = r.error or ""
        lines.append(f"{r.name:<{width}}  {r.status:<11}  {r.seconds:7.1f}  {len(r.traces):>6}  {note}")
    return "\n".join(lines)


def run_sweep(
    specs: Sequence[RunSpec],
    logdir: Path,
    prof: ProfileConfig,
    *,
    overwrite: bool = False,
    append: bool = False,
    progress: bool = True,
    seed: int = 0,
) -> int:
    """Run every spec; return the exit code (0 ok, 1 some run failed, 130 interrupted)."""
    dist = init_from_env(specs[0].cfg.device) if specs else None
    if dist is not None and specs[0].cfg.device.startswith("cuda"):
        specs = [dataclasses.replace(s, cfg=s.cfg.replace(device=f"cuda:{dist.local_rank}")) for s in specs]
    lead = dist is None or dist.rank == 0
    plan = [(spec, r) for r in range(max((s.repeats for s in specs), default=1)) for spec in specs if r < spec.repeats]
    by_name: dict[str, RunResult] = {}
    done = 0
    bar = None
    if progress and lead:
        from tqdm import tqdm

        bar = tqdm(total=len(plan), unit="run", file=sys.stderr, dynamic_ncols=True)
    try:
        for spec, repeat in plan:
            if bar is not None:
                bar.set_description(spec.name if spec.repeats == 1 else f"{spec.name} ({repeat + 1}/{spec.repeats})")
            if overwrite and lead and repeat == 0:
                clear_run(logdir / spec.name)
            barrier(dist)
            result = run_one(spec, logdir, prof, dist=dist, seed=seed, append=append or repeat > 0)
            by_name[spec.name] = _merged(by_name.get(spec.name), result)
            done += 1
            barrier(dist)
            if bar is not None:
                bar.update()
            left = len(plan) - done
            if any_rank(dist, result.write_failed) and left:
                if lead:
                    what = "run(s)" if len(plan) == len(specs) else "profile(s) of its runs"
                    print(f"tb-attn-run: stopping the sweep: {logdir} cannot be written; the other {left} "
                          f"{what} were not started", file=sys.stderr)
                break
    except KeyboardInterrupt:
        if bar is not None:
            bar.close()
        if lead:
            what = "runs" if len(plan) == len(specs) else "profiles"
            print(f"\ninterrupted: {done} of {len(plan)} {what} complete and kept in {logdir}; "
                  "the run in progress is marked interrupted", file=sys.stderr)
        return 130
    finally:
        if bar is not None:
            bar.close()
        shutdown(dist)
    results = list(by_name.values())
    if lead and dist is not None:
        # Every rank's traces, not the lead's alone: the table's "traces" and the total agree.
        results = [dataclasses.replace(r, traces=_traces_on_disk(logdir / r.name)) for r in results]
    if lead:
        print(format_results(results))
        # Under torchrun each rank writes its own trace: the lead counts every rank's on disk (the
        # barrier after each run has let them all finish), not only its own.
        written = sum(len(r.traces) for r in results) if dist is None else _on_disk(logdir, results)
        print(f"\nwrote {written} trace file(s) into {logdir}; view them with: tensorboard --logdir {logdir}")
    return 1 if any(r.status == "failed" for r in results) else 0
