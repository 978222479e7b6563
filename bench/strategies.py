"""Where approximate attention starts to pay on this machine: measured crossover lengths.

The runner writes one run per (implementation, length), in inference, of the built-in model;
the engine's strategies view (``tb_attn_plugin.analysis.cross_run.strategies``) fits each
implementation's attention time per step to a·Lᵏ and reports where each crosses the
baseline's fit. Reported per implementation against the baseline (SDPA by default, fp32):

- time per step at each length, and the speed-up over the baseline there;
- the fitted exponent k and the crossover length (measured inside the lengths, or extrapolated);
- the error the runner measured against exact fp32 attention (relative L1, worst layer).

int8-qk computes its scores with ``torch._int_mm``, whose CPU kernel is slow (it runs far below
the fp32 GEMM's rate on this machine), so it is run at the shorter lengths only
(``--int8-seqs``).

Run from the repository root::

    python bench/strategies.py [--seqs 512,1024,2048,4096] [--int8-seqs 256,512,1024] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tb_attn_plugin.analysis.cross_run.strategies import strategies
from tb_attn_plugin.engine.loader import Loader, resolve_runs


def log(msg: str) -> None:
    print(f"[{datetime.now(UTC):%H:%M:%S}] {msg}", file=sys.stderr, flush=True)


def run(logdir: Path, impl: str, seqs: list[int], args: argparse.Namespace) -> None:
    cmd = [sys.executable, "-m", "runner", "--logdir", str(logdir), "--impl", impl,
           "--seq", ",".join(map(str, seqs)), "--mode", "inference", "--layers", str(args.layers),
           "--heads", str(args.heads), "--d-model", str(args.d_model), "--batch", str(args.batch),
           "--wait", "0", "--warmup", "1", "--active", str(args.active), "--no-progress", "--overwrite"]
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"runner failed for {impl}: {proc.stderr.strip()[-400:]}")
    log(f"{impl:>10} seq {','.join(map(str, seqs))}: written in {time.perf_counter() - started:.1f} s")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seqs", default="512,1024,2048,4096")
    p.add_argument("--int8-seqs", default="256,512,1024")
    p.add_argument("--impls", default="sdpa,naive,linear-elu,performer")
    p.add_argument("--baseline", default="sdpa")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--active", type=int, default=3)
    p.add_argument("--logdir", help="keep the runs here (default: a temporary directory)")
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args()
    seqs = [int(s) for s in args.seqs.split(",")]
    int8 = [int(s) for s in args.int8_seqs.split(",")] if args.int8_seqs else []
    with tempfile.TemporaryDirectory() as tmp:
        logdir = Path(args.logdir or tmp)
        for impl in args.impls.split(","):
            run(logdir, impl, seqs, args)
        if int8:
            run(logdir, "int8-qk", int8, args)
            if args.baseline not in args.impls.split(",") or not set(int8) <= set(seqs):
                run(logdir, args.baseline, sorted(set(int8) - set(seqs)), args)
        loader = Loader()
        result = strategies([loader.summarize_run(r) for r in resolve_runs(str(logdir))], baseline=args.baseline)
    (group,) = result.groups
    out: dict[str, Any] = {"machine": platform.processor() or platform.machine(), "date": f"{datetime.now(UTC):%F}",
                           "config": vars(args), "group": group.label, "baseline": group.baseline, "strategies": []}
    print(f"{group.label}; attention {group.clock} time per step; baseline {group.baseline}")
    print(f"{'strategy':<18}{'seq':>6}{'ms':>10}{'speed-up':>10}{'error':>10}")
    for x in group.rows:
        err = f"{x.accuracy.rel_l1:.2%}" if x.accuracy else "-"
        print(f"{x.strategy:<18}{x.seq:>6}{x.time_us / 1e3:>10.2f}{x.speedup or 0:>9.2f}x{err:>10}")
    print()
    for s in group.series:
        if s.fit is None:
            continue
        c = s.crossover
        print(f"{s.strategy:<18} k={s.fit.k:.2f}  " + (c.text if c else "(baseline)"))
        out["strategies"].append({"strategy": s.strategy, "seqs": s.seqs, "time_us": s.time_us,
                                  "k": s.fit.k, "a": s.fit.a,
                                  "crossover": None if c is None else {"seq": c.seq, "faster": c.faster,
                                                                       "extrapolated": c.extrapolated},
                                  "error": [x.accuracy.rel_l1 if x.accuracy else None for x in group.rows
                                            if x.strategy == s.strategy]})
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
