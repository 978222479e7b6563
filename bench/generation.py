"""Generation with a KV cache on this machine: decode cost per decode step against the context, and what
the runner's scopes cost per decode step.

Part A runs ``tb-attn-run --mode generate`` (the built-in model, SDPA) at several prompt lengths
for four variants: a dynamic and a static KV cache, each with every head its own KV head (MHA)
and with grouped-query attention (``--kv-heads``), and reads the engine's figures: decode
attention time per step (one token per sequence), the whole step's, the K and V read per step,
and the fit a·Lᵏ of decode time against the decode steps' mean context (``tb-attn compare``'s
decode series), the KV cache's exponent beside it.

Part B times decode steps of one model with its scopes (block, phase and step scopes) against the
same model without them, under ``torch.profiler`` as the runner profiles (``record_shapes`` and
``profile_memory`` on) and with no profiler. The two arms share weights and alternate step by step
(A B B A ...) within a block of one generation each, so both see the same machine; a block's ratio
is the ratio of the arms' median decode step, and the result is the median over blocks with a
bootstrap 95% interval.

Run from the repository root::

    python bench/generation.py [--prompts 256,1024,4096] [--new-tokens 32] [--blocks 15] [--json OUT]
"""

from __future__ import annotations

import os

os.environ.setdefault("KINETO_LOG_LEVEL", "6")

import argparse
import json
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from runner.config import ModelConfig
from runner.generate import Generation, builtin_generation
from runner.model import Transformer
from tb_attn_plugin.analysis.cross_run.compare import compare
from tb_attn_plugin.analysis.cross_run.scaling import scaling
from tb_attn_plugin.engine.loader import Loader, resolve_runs

#: (KV cache, grouped): each cache with MHA, and with a quarter of the heads as KV heads.
VARIANTS = (("dynamic", False), ("static", False), ("dynamic", True), ("static", True))


def log(msg: str) -> None:
    print(f"[{datetime.now(UTC):%H:%M:%S}] {msg}", file=sys.stderr, flush=True)


# -- Part A: decode cost against context ---------------------------------------------------------

def part_a(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="tb-attn-gen-") as tmp:
        logdir = Path(tmp)
        for cache, grouped in VARIANTS:
            kv = max(1, args.heads // 4) if grouped else None
            cmd = [sys.executable, "-m", "runner", "--logdir", str(logdir), "--mode", "generate", "--impl", "sdpa",
                   "--prompt-len", args.prompts, "--new-tokens", str(args.new_tokens), "--kv-cache", cache,
                   "--layers", str(args.layers), "--heads", str(args.heads), "--d-model", str(args.d_model),
                   "--batch", str(args.batch), "--no-progress"] + (["--kv-heads", str(kv)] if kv else [])
            started = time.perf_counter()
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                raise SystemExit(f"runner failed: {proc.stderr.strip()[-400:]}")
            log(f"{cache} kv_heads={kv or args.heads}: written in {time.perf_counter() - started:.1f} s")
        loader = Loader()
        runs = [loader.summarize_run(r) for r in resolve_runs(str(logdir))]
    rows = []
    for f in compare(runs).runs:
        d = f.decode
        assert d is not None, f.run
        rows.append({"run": f.run, "kv_cache": d.kv_cache, "kv_heads": d.kv_heads, "context": d.context,
                     "decode_us": d.us_per_step, "step_us": d.step_us, "prefill_us": d.prefill_us,
                     "read_bytes": d.read_bytes_per_token, "launches": d.launches_per_step})
    fits = []
    for s in scaling(runs).series:
        if s.x == "context":
            fits.append({"series": s.label, "time_k": s.time_fit.k if s.time_fit else None,
                         "time_r2": s.time_fit.r2 if s.time_fit else None,
                         "memory_k": s.memory_fit.k if s.memory_fit else None})
    return {"rows": sorted(rows, key=lambda r: (r["kv_cache"], r["kv_heads"], r["context"])), "fits": fits}


# -- Part B: the scopes' cost per decode step -----------------------------------------------------

def _generation(cfg: ModelConfig, scoped: bool, weights: dict[str, torch.Tensor], prompt: torch.Tensor) -> Generation:
    model = Transformer(cfg, scoped=scoped).eval()
    model.load_state_dict(weights)
    gen = builtin_generation(model, cfg.replace(scopes=scoped), prompt)
    return gen


def _block(arms: tuple[Generation, Generation], steps: int, profiled: bool) -> tuple[float, float]:
    """One generation per arm, their decode steps alternating; each arm's median decode step (s)."""
    times: tuple[list[float], list[float]] = ([], [])
    ctx = profile(activities=[ProfilerActivity.CPU], record_shapes=True, profile_memory=True) if profiled \
        else None
    if ctx is not None:
        ctx.__enter__()
    try:
        for arm in arms:
            arm.step(0)
        for i in range(1, steps + 1):
            order = (0, 1) if i % 2 else (1, 0)
            for a in order:
                start = time.perf_counter()
                arms[a].step(i)
                times[a].append(time.perf_counter() - start)
    finally:
        if ctx is not None:
            ctx.__exit__(None, None, None)
    return statistics.median(times[0]), statistics.median(times[1])


def part_b(args: argparse.Namespace) -> dict[str, Any]:
    cfg = ModelConfig(layers=args.layers, heads=args.heads, d_model=args.d_model, batch=args.batch, impl="sdpa",
                      mode="generate", prompt_len=args.overhead_prompt, new_tokens=args.new_tokens,
                      seq=args.overhead_prompt + args.new_tokens, kv_cache="static")
    torch.manual_seed(0)
    weights = Transformer(cfg, scoped=False).state_dict()
    prompt = torch.randint(cfg.vocab, (cfg.batch, cfg.prompt_len), generator=torch.Generator().manual_seed(1))
    scoped, bare = _generation(cfg, True, weights, prompt), _generation(cfg, False, weights, prompt)
    out: dict[str, Any] = {}
    rng = random.Random(0)
    for profiled in (True, False):
        ratios, medians = [], []
        _block((scoped, bare), args.new_tokens, profiled)  # warm-up
        for _ in range(args.blocks):
            arms = (scoped, bare) if rng.random() < 0.5 else (bare, scoped)
            a, b = _block(arms, args.new_tokens, profiled)
            s, n = (a, b) if arms[0] is scoped else (b, a)
            ratios.append(s / n)
            medians.append((s, n))
        boot = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(2000))
        key = "profiled" if profiled else "no_profiler"
        out[key] = {"ratio": statistics.median(ratios), "ci95": [boot[50], boot[1949]],
                    "scoped_ms": 1e3 * statistics.median(m[0] for m in medians),
                    "bare_ms": 1e3 * statistics.median(m[1] for m in medians), "blocks": len(ratios)}
        log(f"{key}: scoped/bare {out[key]['ratio']:.4f} (95% {boot[50]:.4f}-{boot[1949]:.4f}), "
            f"{out[key]['scoped_ms']:.3f} ms against {out[key]['bare_ms']:.3f} ms per decode step")
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--prompts", default="256,1024,4096")
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--d-model", type=int, default=512)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--overhead-prompt", type=int, default=1024, help="part B's prompt length")
    p.add_argument("--blocks", type=int, default=15, help="part B's blocks per arm pair")
    p.add_argument("--skip-a", action="store_true")
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    result: dict[str, Any] = {"machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
                              "torch": torch.__version__, "args": vars(args) | {"json": str(args.json)}}
    if not args.skip_a:
        result["decode"] = part_a(args)
        for r in result["decode"]["rows"]:
            print(f"{r['kv_cache']:>8} kv{r['kv_heads']:<2} ctx {r['context']:>7.0f}: decode attention "
                  f"{r['decode_us'] / 1e3:7.3f} ms/step, step {r['step_us'] / 1e3:7.3f} ms, "
                  f"reads {r['read_bytes'] / 2**20:7.2f} MiB, {r['launches']:.0f} ops")
        for f in result["decode"]["fits"]:
            print(f"{f['series']}: time k={f['time_k']:.2f} (R2 {f['time_r2']}), cache k={f['memory_k']:.2f}")
    result["overhead"] = part_b(args)
    for key, r in result["overhead"].items():
        print(f"scopes, {key}: {r['ratio']:.4f}x ({(r['ratio'] - 1) * 100:+.2f}%), 95% interval "
              f"{r['ci95'][0]:.4f}-{r['ci95'][1]:.4f}, {r['blocks']} blocks")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
