"""Sparse against dense attention on CPU: flex_attention with a sliding window against naive
attention and SDPA given the same mask, at several sequence lengths.

The runner writes one run per (implementation, length), in inference (flex_attention has no
backward on CPU), with the same ``--mask sliding:W`` for every implementation, so all compute
the same attention: flex through a compiled ``BlockMask`` kernel, naive and SDPA on full score
matrices with the mask as a tensor. Each run is summarized by the engine with its metadata, and
the bench reports per run:

- the attention core's time per forward (the ``flex``, ``sdpa`` or naive core phases; device
  time where the trace has some, else CPU time; the mean over the profiled steps and layers);
- the block's memory peak (the largest rise of allocated memory over a block's start);
- the share of scores the mask keeps and whether the work was dense;

and, per dense implementation, the shortest length at which flex's core is faster, and the
ratios at each length. Defaults: the built-in model with 2 layers, 4 heads, d_model 128, batch 1,
W = 256, lengths 1024, 2048, 4096, 5 profiled steps. The compile of flex happens in each flex
run's warm-up step (one per length: the shapes differ).

Run from the repository root::

    python bench/sparse_attention.py [--seqs 1024,2048,4096] [--window 256] [--json OUT]
    python bench/sparse_attention.py --logdir RUNS --seqs 1024,4096,8192   # runs written elsewhere (a GPU)
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

from tb_attn_plugin.analysis.attribution.analyze import analyze
from tb_attn_plugin.analysis.summary import summarize_trace
from tb_attn_plugin.engine.loader import load_events
from tb_attn_plugin.types.schema import WorkerSummary

IMPLS = ("flex", "sdpa", "naive")


def log(msg: str) -> None:
    print(f"[{datetime.now(UTC):%H:%M:%S}] {msg}", file=sys.stderr, flush=True)


def run(logdir: Path, impl: str, seq: int, args: argparse.Namespace) -> Path:
    cmd = [sys.executable, "-m", "runner", "--logdir", str(logdir), "--impl", impl, "--seq", str(seq),
           "--mask", f"sliding:{args.window}", "--mode", "inference", "--layers", str(args.layers),
           "--heads", str(args.heads), "--d-model", str(args.d_model), "--batch", str(args.batch),
           "--wait", "0", "--warmup", "1", "--active", str(args.active), "--no-progress", "--overwrite"]
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"runner failed for {impl} at {seq}: {proc.stderr.strip()[-400:]}")
    log(f"{impl:>6} seq {seq}: written in {time.perf_counter() - started:.1f} s")
    return logdir / "builtin" / f"{impl}-sliding{args.window}" / f"seq{seq}"


def measure(run_dir: Path) -> dict[str, Any]:
    meta = json.loads((run_dir / "tb_attn_run.json").read_text())
    (trace,) = sorted(run_dir.glob("*.pt.trace.json*"))
    s: WorkerSummary = summarize_trace(analyze(load_events(str(trace))), file=trace.name, worker="w", span=None,
                                       metadata=meta)
    layers = s.layers
    masks = [x.mask for x in layers if x.mask is not None]
    calls = sum(x.calls for x in layers)
    return {
        "backend": ",".join(sorted({x.backend for x in layers})),
        "core_ms": sum(m.core_us for m in masks) / calls / 1e3,
        "block_ms": sum(x.device_us or x.cpu_us for x in layers) / calls / 1e3,
        "peak_mib": max(x.peak_bytes for x in layers) / 2**20,
        "kept": masks[0].kept if masks else None,
        "blocks": masks[0].blocks if masks else None,
        "dense_work": all(m.dense_work for m in masks),
        "findings": sorted({f.id for f in s.findings}),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--seqs", default="1024,2048,4096")
    p.add_argument("--window", type=int, default=256)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--active", type=int, default=5)
    p.add_argument("--json", dest="json_out", type=Path)
    p.add_argument("--logdir", type=Path,
                   help="measure runs already written here (e.g. on a GPU machine) instead of writing them")
    args = p.parse_args()
    seqs = [int(x) for x in args.seqs.split(",")]
    results: dict[str, dict[int, dict[str, Any]]] = {impl: {} for impl in IMPLS}
    if args.logdir is not None:
        device = "the runs' device"
        for impl in IMPLS:
            for seq in seqs:
                (run_dir,) = (args.logdir / "builtin" / f"{impl}-sliding{args.window}").glob(f"seq{seq}*")
                results[impl][seq] = measure(run_dir)
                device = json.loads((run_dir / "tb_attn_run.json").read_text()).get("device_name", device)
    else:
        device = f"CPU ({platform.processor() or platform.machine()})"
        with tempfile.TemporaryDirectory(prefix="tb-attn-sparse-") as tmp:
            for seq in seqs:
                for impl in IMPLS:
                    results[impl][seq] = measure(run(Path(tmp), impl, seq, args))
    print(f"sliding:{args.window}, inference, {device}; per forward of a block (device time where there is "
          "some, else CPU)")
    print()
    print("| S | kept | impl | backend | core ms | block ms | peak MiB | flex core vs this |")
    print("|---|---|---|---|---|---|---|---|")
    for seq in seqs:
        flex = results["flex"][seq]["core_ms"]
        for impl in IMPLS:
            r = results[impl][seq]
            ratio = "" if impl == "flex" else f"{r['core_ms'] / flex:.2f}x faster" if flex < r["core_ms"] \
                else f"{flex / r['core_ms']:.2f}x slower"
            print(f"| {seq} | {r['kept']:.3f} | {impl} | {r['backend']} | {r['core_ms']:.3f} | {r['block_ms']:.3f} "
                  f"| {r['peak_mib']:.1f} | {ratio} |")
    print()
    for impl in IMPLS[1:]:
        over = [s for s in seqs if results["flex"][s]["core_ms"] < results[impl][s]["core_ms"]]
        print(f"flex overtakes {impl}: " + (f"from S = {over[0]}" if over else f"not up to S = {seqs[-1]}")
              + (" (and stays ahead)" if over and over == seqs[seqs.index(over[0]):] else ""))
    if args.json_out:
        args.json_out.write_text(json.dumps({"args": vars(args) | {"json_out": None}, "results": results},
                                            indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
