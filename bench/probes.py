"""How stable the runner's machine probes are (``runner.probes.machine_peaks``): the CPU's copy
bandwidth, fp32 and bf16 matmul FLOP/s and eager op time, each measured in ``--runs`` fresh
processes one after another, as the runner measures them once per run. Prints each run, then
per figure the median, the range, the largest deviation of a run from the median and whether
every run is within 10% of it, and the probes' own wall time.

Run from the repository root on a quiet machine::

    .venv/bin/python bench/probes.py [--runs 5] [--device cpu] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

_CHILD = """
import json, time
import torch
from runner.probes import machine_peaks
start = time.perf_counter()
p = machine_peaks({device!r})
print(json.dumps({{"copy": p["copy_bytes_per_s"], "fp32": p["gemm_flops_per_s"]["fp32"],
                  "bf16": p["gemm_flops_per_s"]["bf16"], "op_us": p["op_us"],
                  "wall_s": time.perf_counter() - start}}))
"""

_FIGURES = (("copy", "copy GB/s", 1e-9), ("fp32", "fp32 GFLOP/s", 1e-9), ("bf16", "bf16 GFLOP/s", 1e-9),
            ("op_us", "op µs", 1.0), ("wall_s", "probe wall s", 1.0))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--json", help="also write every run's figures here")
    args = ap.parse_args()
    runs = []
    for i in range(args.runs):
        out = subprocess.run([sys.executable, "-c", _CHILD.format(device=args.device)], check=True,
                             capture_output=True, text=True).stdout
        runs.append(json.loads(out.strip().splitlines()[-1]))
        print(f"run {i + 1}: " + ", ".join(f"{label} {runs[-1][k] * scale:.3g}" for k, label, scale in _FIGURES),
              file=sys.stderr)
    print("| figure | median | min | max | largest deviation from the median | every run within 10% |")
    print("|---|---|---|---|---|---|")
    for key, label, scale in _FIGURES:
        values = [r[key] * scale for r in runs]
        med = statistics.median(values)
        dev = max(abs(v - med) for v in values) / med if med else 0.0
        ok = "yes" if dev <= 0.10 else "no"
        print(f"| {label} | {med:.3g} | {min(values):.3g} | {max(values):.3g} | {dev:.1%} | "
              f"{ok if key != 'wall_s' else '-'} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(runs, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
