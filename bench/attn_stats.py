"""What ``--attn-stats`` costs: the memory of the statistics at S = 8192, and whether they add
time to the profiled steps.

A. Memory: ``runner.attn_stats.head_stats`` on q and k of (1, 8, 8192, 64) fp32, causal, chunk 256,
   in a fresh process; its peak RSS over the RSS with q and k allocated, against one (8, S, S)
   fp32 probability matrix (2 GiB), what an O(S²) computation would hold.
B. Time: the runner's built-in model (4 layers, d_model 256, 8 heads, seq 512, batch 2, naive,
   inference), profiled with and without ``--attn-stats 2``, in one process, the two arms
   alternating over ``--rounds`` rounds after one untimed run; each run's mean profiled step time
   from its summary.
   The statistics run before the profiler starts, so the ratio should be 1 within noise.

    .venv/bin/python bench/attn_stats.py [--rounds 5] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_MEMORY = """
import resource, time, torch
from runner.attn_stats import head_stats
torch.manual_seed(0)
q = torch.randn(1, 8, 8192, 64)
k = torch.randn(1, 8, 8192, 64)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
stats = head_stats(q, k, causal=True, chunk=256).means()
wall = time.perf_counter() - start
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print((after - before) * 1024, wall, stats["entropy"][0])
"""


def memory() -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", _MEMORY], check=True, capture_output=True, text=True).stdout.split()
    rise, wall = float(out[0]), float(out[1])
    full = 8 * 8192 * 8192 * 4
    return {"rss_rise_bytes": rise, "wall_s": wall, "full_matrix_bytes": full, "ratio": rise / full}


def step_times(rounds: int) -> dict[str, object]:
    from runner.config import ModelConfig, ProfileConfig
    from runner.session import RunSpec, run_one
    from tb_attn_plugin.engine.loader import Loader, resolve_runs

    base = ModelConfig(layers=4, d_model=256, heads=8, seq=512, batch=2, impl="naive", mode="inference")
    prof = ProfileConfig(wait=0, warmup=1, active=5)
    times: dict[str, list[float]] = {"without": [], "with": []}
    with tempfile.TemporaryDirectory() as tmp:
        # One untimed run first: a process's first profile pays for imports, allocator growth, first calls.
        run_one(RunSpec(model="builtin", cfg=base, name="warmup"), Path(tmp), prof)
        for r in range(rounds):
            arms = ("without", "with") if r % 2 == 0 else ("with", "without")
            for arm in arms:
                cfg = base.replace(attn_stats=2 if arm == "with" else 0)
                name = f"{arm}-{r}"
                result = run_one(RunSpec(model="builtin", cfg=cfg, name=name), Path(tmp), prof)
                assert result.status == "ok", result.error
                (run,) = [x for x in resolve_runs(tmp) if x.name == name]
                (w,) = Loader().summarize_run(run).workers
                times[arm].append(w.step_cpu_us)
                print(f"round {r} {arm}: {w.step_cpu_us / 1e3:.2f} ms per profiled step", file=sys.stderr)
    ratios = [a / b for a, b in zip(times["with"], times["without"], strict=True)]
    return {"without_ms": [t / 1e3 for t in times["without"]], "with_ms": [t / 1e3 for t in times["with"]],
            "ratio_median": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json")
    args = ap.parse_args()
    start = time.perf_counter()
    mem = memory()
    print(f"A. head_stats at S=8192, 8 heads, chunk 256: peak RSS +{mem['rss_rise_bytes'] / 2**20:.0f} MiB in "
          f"{mem['wall_s']:.1f} s; one (8, S, S) fp32 matrix is {mem['full_matrix_bytes'] / 2**30:.1f} GiB "
          f"({mem['ratio']:.1%} of it)")
    steps = step_times(args.rounds)
    print(f"B. profiled step time with --attn-stats 2 over without: median {steps['ratio_median']:.3f} "
          f"(min {steps['ratio_min']:.3f}, max {steps['ratio_max']:.3f}) over {args.rounds} rounds; "
          f"without {statistics.median(steps['without_ms']):.2f} ms, "  # type: ignore[arg-type]
          f"with {statistics.median(steps['with_ms']):.2f} ms")  # type: ignore[arg-type]
    print(f"({time.perf_counter() - start:.0f} s)")
    if args.json:
        Path(args.json).write_text(json.dumps({"memory": mem, "steps": steps}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
