"""The jitter knob (``--jitter-ms``): a run noisy on purpose, for the spread and the noisy marks."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import ACTIVE_STEPS, TINY, profile_run
from tracetools import load_trace, trace_files

from runner.config import ConfigError, ModelConfig
from runner.model import JITTER_SCOPE


def test_jitter_sleeps_in_every_other_call(tmp_path: Path) -> None:
    assert profile_run(tmp_path, "j", impl="naive", jitter_ms=1).status == "ok"
    (trace,) = (load_trace(f) for f in trace_files(tmp_path / "j"))
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    jitter = [e for e in events if e["name"] == JITTER_SCOPE]
    steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e["name"].startswith("ProfilerStep#"))
    assert len(steps) == ACTIVE_STEPS == 2
    per_step = [sum(a <= e["ts"] < b for e in jitter) for a, b in steps]
    # Consecutive steps alternate: every block sleeps in one of the two, in neither the other.
    assert sorted(per_step) == [0, TINY.layers]
    assert all(e["dur"] >= 1000 for e in jitter)


@pytest.mark.parametrize("bad", [-1.0, float("inf"), 60_000.0])
def test_jitter_is_bounded(bad: float) -> None:
    with pytest.raises(ConfigError, match="--jitter-ms"):
        ModelConfig(jitter_ms=bad)
