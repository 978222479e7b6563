"""Fixtures of the Python API's tests: the runs the session's logdirs lack."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import GENERATION, profile_run


@pytest.fixture(scope="session")
def api_logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A generation (prefill, then six decode steps: ``tokens``, ``generation``) and a run with
    per-head attention statistics at 128 tokens (window_64 recorded: ``heads``' join)."""
    logdir = tmp_path_factory.mktemp("api")
    result = profile_run(logdir, "generate", **{**GENERATION, "impl": "sdpa", "prompt_len": 32, "seq": 38})
    assert result.status == "ok", result.error
    result = profile_run(logdir, "stats", impl="naive", attn_stats=2, mode="inference", seq=128)
    assert result.status == "ok", result.error
    return logdir
