"""Shared constants and helpers for tests (importable as ``helpers``; fixtures live in conftest.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from devtools.tbserver import free_port
from runner.config import ModelConfig, ProfileConfig
from runner.session import RunResult, RunSpec, run_one

SHARED_TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"
#: Hand-written traces, each of at most about 30 events.
HAND_TRACES = Path(__file__).resolve().parent / "traces"

#: A model small enough for the suite: every run takes well under a second.
TINY = ModelConfig(layers=2, heads=4, d_model=32, seq=16, batch=2, vocab=64)
#: Two active steps, no gzip: what the tests count against.
PROFILE = ProfileConfig(wait=0, warmup=1, active=2)
ACTIVE_STEPS = PROFILE.active
#: Sparse and compiled attention (``sparse_logdir``): long enough for flex_attention's 128-token
#: blocks to matter (4 x 4 blocks, of which a window of 64 keeps 7), in inference
#: (flex_attention has no backward on CPU).
SPARSE: dict[str, Any] = dict(layers=2, heads=2, d_model=32, seq=512, batch=1, mode="inference")
WINDOW = 64
#: Strategies (``strategies_logdir``): exact and approximate attention at three lengths, inference.
STRATEGIES: dict[str, Any] = dict(layers=2, heads=2, d_model=32, batch=1, mode="inference")
STRATEGY_IMPLS = ("naive", "sdpa", "linear-elu", "performer", "int8-qk")
STRATEGY_SEQS = (64, 128, 256)
#: Generation (``generation_logdir``): a prompt, then decode steps against a KV cache.
GENERATION: dict[str, Any] = dict(layers=2, heads=4, d_model=64, batch=2, mode="generate", new_tokens=6)
#: Its runs: (name, changes), as the runner names them.
GENERATION_RUNS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("builtin/sdpa/gen-p64-n6-dynamic", dict(impl="sdpa", prompt_len=64)),
    ("builtin/sdpa/gen-p128-n6-dynamic", dict(impl="sdpa", prompt_len=128)),
    ("builtin/sdpa/gen-p256-n6-dynamic", dict(impl="sdpa", prompt_len=256)),
    ("builtin/sdpa/gen-p128-n6-static", dict(impl="sdpa", prompt_len=128, kv_cache="static")),
    ("builtin/sdpa/gen-p128-n6-dynamic-kv1", dict(impl="sdpa", prompt_len=128, kv_heads=1)),
    ("builtin/naive/gen-p128-n6-dynamic", dict(impl="naive", prompt_len=128)),
)


def profile_run(logdir: Path, name: str, model: str = "builtin", **changes: object) -> RunResult:
    spec = RunSpec(model=model, cfg=TINY.replace(**changes), name=name)
    return run_one(spec, logdir, PROFILE)


def accelerate_run(run_dir: Path, trace: Path, *, processes: int = 4) -> list[Path]:
    """``run_dir`` as Hugging Face Accelerate's ``accelerator.profile()`` with
    ``ProfileKwargs(output_trace_dir=run_dir)`` leaves it: one ``profile_<process index>.json`` per
    process (here copies of ``trace``, a real runner trace: ``profile_run(...).traces[0]``)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    written = [run_dir / f"profile_{i}.json" for i in range(processes)]
    for path in written:
        shutil.copyfile(trace, path)
    return written


def profile_script(logdir: Path, step: Callable[[], object]) -> Path:
    """The trace of ``step`` profiled as any script profiles it, without tb-attn: CPU, recorded
    shapes, a warm-up step and two active ones, written by ``tensorboard_trace_handler``."""
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    # repeat=1: with the default, a new cycle begins after the last step, and leaving the
    # profiler in its warm-up crashed the process.
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                 schedule=schedule(wait=0, warmup=1, active=2, repeat=1),
                 on_trace_ready=tensorboard_trace_handler(str(logdir))) as prof:
        for _ in range(3):
            step()
            prof.step()
    (path,) = logdir.glob("*.pt.trace.json*")
    return path


def bare_sdpa(calls: int = 3, shape: tuple[int, int, int, int] = (2, 4, 32, 16)) -> None:
    """``calls`` calls of ``F.scaled_dot_product_attention`` on random q, k, v ``(B, H, S, D)``: a
    core with no projection around it."""
    import torch
    import torch.nn.functional as F

    q, k, v = (torch.randn(shape) for _ in range(3))
    for _ in range(calls):
        F.scaled_dot_product_attention(q, k, v)


def torchrun(*args: str, ranks: int = 2, timeout: float = 240) -> str:
    """``torchrun --nproc_per_node ranks ARGS`` on loopback (gloo), one thread per process; its stdout."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(ranks), "--master_addr",
           "127.0.0.1", "--master_port", str(free_port()), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout
