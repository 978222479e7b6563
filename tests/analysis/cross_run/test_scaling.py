"""``analysis.scaling``: series of runs that differ only in their length, with power-law fits, on the
runner sweep of the ``sweep`` fixture (naive and SDPA at three lengths)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import msgspec

from tb_attn_plugin.analysis.cross_run.scaling import expected_exponent, scaling
from tb_attn_plugin.engine.loader import Loader, resolve_runs
from tb_attn_plugin.types.schema import RunSummary

SEQS = (32, 64, 128)  # the sweep fixture's (conftest.SWEEP_SEQS)


def _summaries(logdir: Path) -> list[RunSummary]:
    loader = Loader()
    return [loader.summarize_run(r) for r in resolve_runs(str(logdir))]


def test_scaling_memory_exponents(sweep: Path) -> None:
    series = {s["impl"]: s for s in msgspec.to_builtins(scaling(_summaries(sweep)))["series"]}
    assert set(series) == {"naive", "sdpa"}
    for s in series.values():
        assert [p["seq"] for p in s["points"]] == list(SEQS)
        assert s["time_fit"] is not None and s["memory_fit"] is not None
    # Materialized scores grow with S²; the fused kernel's memory grows about linearly.
    assert series["naive"]["memory_fit"]["k"] > 1.4
    assert series["sdpa"]["memory_fit"]["k"] < 1.2
    assert series["naive"]["memory_fit"]["k"] > series["sdpa"]["memory_fit"]["k"] + 0.4


def test_scaling_series_keep_configurations_apart(sweep: Path, tmp_path: Path) -> None:
    """A tensor-parallel two-rank run is no point of a single-process series: series are grouped
    by everything but the sequence length, and labelled by what tells equal labels apart."""
    logdir = tmp_path / "logdir"
    shutil.copytree(sweep, logdir)
    for seq in SEQS:
        run = logdir / f"tp/naive/seq{seq}"
        shutil.copytree(sweep / f"naive/seq{seq}", run)
        meta_path = run / "tb_attn_run.json"
        meta = json.loads(meta_path.read_text())
        meta["config"]["parallel"], meta["world_size"] = "tp", 2
        meta_path.write_text(json.dumps(meta))
    series = {s.label: s for s in scaling(_summaries(logdir)).series}
    assert set(series) == {"builtin naive float32 (parallel none, world_size 1)",
                           "builtin naive float32 (parallel tp, world_size 2)", "builtin sdpa float32"}
    assert all(len(s.points) == len(SEQS) for s in series.values())


def test_a_trace_without_memory_events_gives_no_memory_fit(sweep: Path) -> None:
    """Memory a trace did not record is no 0 B point: its series has time points and no memory fit."""
    bare = [msgspec.structs.replace(r, workers=[msgspec.structs.replace(w, memory_recorded=False) for w in r.workers])
            for r in _summaries(sweep) if r.run.startswith("sdpa/")]
    (series,) = scaling(bare).series
    assert all(p.alloc_bytes is None and p.peak_bytes is None for p in series.points)
    assert series.time_fit is not None and series.memory_fit is None


def test_what_a_sliding_window_series_should_show() -> None:
    assert "k ≈ 1" in str(expected_exponent("flex", "sliding:128"))
    assert "k ≈ 2" in str(expected_exponent("naive", "sliding:128"))
    assert expected_exponent("flex", "causal") is None and expected_exponent("flex", None) is None
