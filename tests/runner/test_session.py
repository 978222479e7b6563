"""``runner.session``: one configuration profiled into its run directory (the schedule's active
steps in one trace, the metadata saying what ran and how it ended), repeats appended, and what
cannot run recorded as unsupported rather than raised."""

from __future__ import annotations

import json
from pathlib import Path

from runner.config import ModelConfig, ProfileConfig
from runner.metadata import read_metadata
from runner.session import SDPA_BACKENDS, RunSpec, run_one
from tb_attn_plugin.vocab.impls import IMPLS

CFG = ModelConfig(layers=1, heads=2, d_model=16, seq=16, batch=1, vocab=32, mode="inference")
PROF = ProfileConfig(wait=0, warmup=1, active=2)


def _steps(trace: Path) -> list[str]:
    events = json.loads(trace.read_text())["traceEvents"]
    return sorted(e["name"] for e in events if e.get("name", "").startswith("ProfilerStep#"))


def test_a_run_writes_its_trace_and_metadata_and_a_repeat_appends(tmp_path: Path) -> None:
    spec = RunSpec(model="builtin", cfg=CFG.replace(impl="sdpa-math"), name="builtin/sdpa-math")
    result = run_one(spec, tmp_path, PROF)
    assert (result.name, result.status, result.error, len(result.traces)) == ("builtin/sdpa-math", "ok", None, 1)
    (trace,) = result.traces
    assert trace.parent == tmp_path / "builtin" / "sdpa-math" and len(_steps(trace)) == PROF.active
    meta = read_metadata(trace.parent)
    assert meta is not None and (meta["status"], meta["impl"], meta["model"]) == ("ok", "sdpa-math", "builtin")
    assert meta["config"] == spec.cfg.to_dict() and meta["profile"] == PROF.to_dict()
    again = run_one(spec, tmp_path, PROF, append=True)
    assert again.status == "ok" and not set(again.traces) & set(result.traces)
    meta = read_metadata(trace.parent)
    assert meta is not None and [r["status"] for r in meta["repeats"]] == ["ok", "ok"]


def test_what_cannot_run_here_is_unsupported_not_raised(tmp_path: Path) -> None:
    """cuDNN's SDPA kernel on the CPU: PyTorch finds no kernel; the run says so and writes no trace."""
    result = run_one(RunSpec(model="builtin", cfg=CFG.replace(impl="sdpa-cudnn"), name="cudnn"), tmp_path, PROF)
    assert result.status == "unsupported" and result.error is not None and result.error.startswith("sdpa-cudnn on cpu")
    assert result.traces == []
    meta = read_metadata(tmp_path / "cudnn")
    assert meta is not None and (meta["status"], meta["error"]) == ("unsupported", result.error)


def test_every_pinned_sdpa_implementation_has_its_backend() -> None:
    assert set(SDPA_BACKENDS) == {i for i in IMPLS if i.startswith("sdpa-")}
