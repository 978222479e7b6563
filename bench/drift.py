"""How far two runs of one configuration drift apart on this machine: the bound that keeps a
cross-run verdict honest (``tb_attn_plugin.analysis.common.spread.DRIFT_BOUND``).

One configuration (the built-in model, ``--size small``, naive attention, 256 tokens, training: the
issue's example) is profiled as separate runs, each its own ``tb-attn-run`` process, as a CI job
profiles a baseline and a candidate. Between runs the machine's load changes: each run starts with
0, 1 or 2 busy processes beside it (``python -c 'while True: pass'``, one per core at most), in a
shuffled order, so that runs meet the slow spells a shared machine has. For every run the
attention time per step (CPU, the mean over its profiled steps, as the gate reads it) is read with
``tb-attn summarize --format json``; the drift is the largest ratio between two runs' times (every
run: each load level's first and second), and the same per load level.

A second measure, the one repeats rely on: runs profiled back to back (A then A again, with the
same load) give the drift that interleaving leaves.

Run from the repository root: ``python bench/drift.py [--runs 12] [--json OUT]`` (about 10 minutes).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

CONFIG = ["--size", "small", "--impl", "naive", "--seq", "256", "--mode", "training", "--wait", "0", "--warmup",
          "1", "--active", "5", "--no-progress"]


def _busy(n: int) -> list[subprocess.Popen[bytes]]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def _profile(logdir: Path, name: str) -> float:
    """One run in its own process; its attention CPU time per step (µs), as ``summarize`` gives it."""
    subprocess.run([sys.executable, "-m", "runner", "--logdir", str(logdir), "--name", name, *CONFIG], check=True,
                   capture_output=True)
    out = subprocess.run([sys.executable, "-m", "tb_attn_plugin.cli", "summarize", str(logdir / name), "--format",
                          "json"], check=True, capture_output=True, text=True).stdout
    (run,) = json.loads(out)["runs"]
    (worker,) = run["workers"]
    return float(worker["attention_cpu_us"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=12, help="separate runs, spread over the load levels")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    levels = [i % 3 for i in range(args.runs)]
    random.Random(0).shuffle(levels)
    rows: list[dict[str, Any]] = []
    pairs: list[float] = []
    with tempfile.TemporaryDirectory(prefix="tb-attn-drift-") as tmp:
        for i, load in enumerate(levels):
            busy = _busy(load)
            try:
                time.sleep(1.0)  # the busy processes take their share before the run starts
                first = _profile(Path(tmp), f"r{i}")
                second = _profile(Path(tmp), f"r{i}-again")  # back to back, same load: what pairs see
            finally:
                for p in busy:
                    p.kill()
                    p.wait()
            rows.append({"run": i, "busy": load, "attention_ms": first / 1e3, "again_ms": second / 1e3})
            pairs.append(max(first, second) / min(first, second))
            print(f"run {i + 1}/{args.runs}: {load} busy, {first / 1e3:.2f} ms, again {second / 1e3:.2f} ms",
                  file=sys.stderr)
    times = [r[k] for r in rows for k in ("attention_ms", "again_ms")]  # every run, each its own process
    by_level = {level: [r[k] for r in rows if r["busy"] == level for k in ("attention_ms", "again_ms")]
                for level in range(3)}
    result = {
        "config": CONFIG, "cpus": os.cpu_count(), "runs": rows,
        "drift": max(times) / min(times),
        "drift_by_load": {str(k): max(v) / min(v) for k, v in by_level.items() if v},
        "median_by_load_ms": {str(k): statistics.median(v) for k, v in by_level.items() if v},
        "back_to_back": {"median": statistics.median(pairs), "max": max(pairs)},
    }
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
