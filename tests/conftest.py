"""Shared fixtures: traces written by our own runner, once per test session."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # tracetools

from runner.config import ModelConfig, ProfileConfig
from runner.session import RunResult, RunSpec, run_one

SHARED_TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"

#: A model small enough for the suite: every run takes well under a second.
TINY = ModelConfig(layers=2, heads=4, d_model=32, seq=16, batch=2, vocab=64)
#: Two active steps, no gzip: what the tests count against.
PROFILE = ProfileConfig(wait=0, warmup=1, active=2)
ACTIVE_STEPS = PROFILE.active


def profile_run(logdir: Path, name: str, model: str = "builtin", **changes: object) -> RunResult:
    spec = RunSpec(model=model, cfg=TINY.replace(**changes), name=name)
    return run_one(spec, logdir, PROFILE)


@pytest.fixture(scope="session")
def builtin_logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One training run per implementation of the built-in transformer (efficient/cudnn skip on CPU)."""
    logdir = tmp_path_factory.mktemp("builtin")
    for impl in ("naive", "naive-inplace", "sdpa", "sdpa-math", "sdpa-flash", "sdpa-efficient", "sdpa-cudnn"):
        profile_run(logdir, impl, impl=impl)
    profile_run(logdir, "naive-per-head", impl="naive", per_head=True)
    profile_run(logdir, "sdpa-per-head", impl="sdpa", per_head=True)
    profile_run(logdir, "naive-gqa", impl="naive", kv_heads=2)
    profile_run(logdir, "naive-dropout", impl="naive", dropout=0.1)
    profile_run(logdir, "naive-inference", impl="naive", mode="inference")
    return logdir
