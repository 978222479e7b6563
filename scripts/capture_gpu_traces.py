"""Capture the GPU trace fixtures: every attention implementation on a CUDA device, at bf16.

Runs the runner over implementations × sequence lengths × causal × mode (forward only or
training) × batched / per-head, one profiled step each, with record_shapes and profile_memory
on, and writes gzipped traces (about 2 MB or less each) plus a README that records the GPU,
driver, torch and CUDA versions and the command. On a machine without CUDA (``--device cpu``)
it runs the same grid so the script itself can be tested; the CUDA-only backends are recorded as
unsupported there.

    python scripts/capture_gpu_traces.py --out tests/fixtures/gpu            # on a CUDA machine
    python scripts/capture_gpu_traces.py --device cpu --quick --out /tmp/x   # smoke test
"""

from __future__ import annotations

import argparse
import itertools
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

import torch

from runner.config import ModelConfig, ProfileConfig
from runner.session import RunResult, RunSpec, run_one

IMPLS = ("naive", "naive-inplace", "sdpa-math", "sdpa-flash", "sdpa-efficient", "sdpa-cudnn")
MAX_TRACE_BYTES = 2 << 20


def _driver() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def grid(*, quick: bool, device: str, dtype: str) -> list[RunSpec]:
    seqs = (64,) if quick else (256, 1024)
    impls = ("naive", "sdpa-flash", "sdpa-efficient") if quick else IMPLS
    specs = []
    for impl, seq, causal, mode, per_head in itertools.product(
            impls, seqs, (True, False), ("inference", "training"), (False, True)):
        if quick and (per_head or not causal):
            continue
        cfg = ModelConfig(layers=2, heads=8, d_model=512, seq=seq, batch=2, vocab=512, dtype=dtype, causal=causal,
                          device=device, mode=mode, impl=impl, per_head=per_head)  # type: ignore[arg-type]
        name = f"{impl}{'-per-head' if per_head else ''}/seq{seq}-{'causal' if causal else 'full'}-" \
               f"{'fwd' if mode == 'inference' else 'train'}"
        specs.append(RunSpec("builtin", cfg, name))
    return specs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("tests/fixtures/gpu"))
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--quick", action="store_true", help="a few configurations, for a smoke test")
    args = p.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("capture_gpu_traces: no CUDA device here; use --device cpu for a smoke test", file=sys.stderr)
        return 2
    prof = ProfileConfig(wait=0, warmup=1, active=1, gzip=True, gzip_level=9)
    started = time.time()
    results: list[RunResult] = []
    for spec in grid(quick=args.quick, device=args.device, dtype=args.dtype):
        results.append(run_one(spec, args.out, prof))
        print(f"{spec.name:<48} {results[-1].status:<11} {results[-1].error or ''}", flush=True)
    big = [(r.name, t.stat().st_size) for r in results for t in r.traces if t.stat().st_size > MAX_TRACE_BYTES]
    device_name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    summary = {
        "device": device_name, "driver": _driver(), "torch": torch.__version__, "cuda": torch.version.cuda,
        "command": shlex.join([sys.executable, *sys.argv]), "seconds": round(time.time() - started, 1),
        "runs": {r.name: {"status": r.status, "error": r.error, "traces": [t.name for t in r.traces]}
                 for r in results},
        "over_2mb": big,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "capture.json").write_text(json.dumps(summary, indent=2) + "\n")
    lines = [
        "# GPU trace fixtures",
        "",
        f"Written by `{summary['command']}` in {summary['seconds']} s.",
        "",
        f"- device: {device_name}; driver: {summary['driver'] or 'unknown'}",
        f"- torch {summary['torch']}, CUDA {summary['cuda']}",
        f"- dtype {args.dtype}; built-in transformer, 2 layers, d_model 512, 8 heads, batch 2; one profiled step",
        "",
        "| run | status | note |",
        "|---|---|---|",
        *(f"| {r.name} | {r.status} | {r.error or ''} |" for r in results),
    ]
    (args.out / "README.md").write_text("\n".join(lines) + "\n")
    if big:
        print(f"capture_gpu_traces: {len(big)} trace(s) over 2 MB: {big[:3]}", file=sys.stderr)
    return 1 if any(r.status == "failed" for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
