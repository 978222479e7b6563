"""Run metadata (``tb_attn_run.json``) written by anyone: no number it claims sizes the work.

Issue 34: a 90-byte file, ``{"mask": {"spec": "sliding:128"}, "config": {"seq": N}}``, made the
mask's kept-pair count build int64 arrays of length N (2.1 GB at N = 2^26, about 64 GB at 2^31),
and ``sliding:99999999999999999999`` raised ``OverflowError``, so a valid trace became an internal
error. Now kept pairs are arithmetic, a bad mask is ignored with a note on the trace, and
Hypothesis throws metadata of every shape at the summary, compare, scaling and strategies.
"""

from __future__ import annotations

import json
import os
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tracetools import trace_files

from tb_attn_plugin.analysis.attribution.analyze import Analysis, analyze
from tb_attn_plugin.analysis.cross_run.compare import compare
from tb_attn_plugin.analysis.cross_run.scaling import scaling
from tb_attn_plugin.analysis.cross_run.strategies import strategies
from tb_attn_plugin.analysis.measures.heads import window_keeps
from tb_attn_plugin.analysis.summary import summarize_trace
from tb_attn_plugin.cli import main as cli
from tb_attn_plugin.engine.loader import load_events
from tb_attn_plugin.types.encoding import to_json
from tb_attn_plugin.types.schema import RunSummary, WorkerSummary
from tb_attn_plugin.vocab.masks import MAX_VALUE, MaskSpec, kept_pairs

SIZES = {"batch": 1, "heads": 2, "d_model": 32}
#: What the hostile metadata may add to a summary's peak allocation (the 2^26 case took 2.1 GB).
EXTRA_BYTES = 8 << 20


@pytest.fixture(scope="module")
def analysis(builtin_logdir: Path) -> Analysis:
    (path,) = trace_files(builtin_logdir / "naive-inference")
    return analyze(load_events(str(path)))


def _summary(analysis: Analysis, metadata: dict[str, Any] | None) -> WorkerSummary:
    return summarize_trace(analysis, file="t.pt.trace.json", worker="w", span=None, metadata=metadata)


def _peak(analysis: Analysis, metadata: dict[str, Any] | None) -> tuple[int, WorkerSummary]:
    tracemalloc.start()
    try:
        summary = _summary(analysis, metadata)
        return tracemalloc.get_traced_memory()[1], summary
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("seq", [1 << 26, 1 << 31])
@pytest.mark.parametrize("spec", ["sliding:128", "document:3", "prefix:64", "causal"])
def test_a_claimed_sequence_length_allocates_nothing(analysis: Analysis, seq: int, spec: str) -> None:
    meta = {"mask": {"spec": spec}, "config": {"seq": seq, **SIZES}}
    assert len(json.dumps(meta)) < 120
    base, _ = _peak(analysis, {"config": {"seq": 64, **SIZES}})
    peak, summary = _peak(analysis, meta)
    assert peak < base + EXTRA_BYTES, (peak, base)
    # The share is still counted, exactly: a window of 128 over 2^26 tokens keeps 128 keys a query.
    (layer, *_) = summary.layers
    assert layer.mask is not None and layer.mask.spec == spec
    assert layer.mask.kept == pytest.approx(kept_pairs(MaskSpec(*_parts(spec)), seq, seq, causal=True) / seq**2)
    if spec == "sliding:128":
        assert layer.mask.kept == pytest.approx((128 * 129 / 2 + (seq - 128) * 128) / seq**2)


def _parts(spec: str) -> tuple[str, int] | tuple[str]:
    kind, _, value = spec.partition(":")
    return (kind, int(value)) if value else (kind,)


@pytest.mark.parametrize("spec", ["sliding:99999999999999999999", "document:99999999999999999999",
                                  "prefix:99999999999999999999", f"sliding:{MAX_VALUE + 1}", "sliding:0", 7, None])
def test_a_mask_that_cannot_be_used_is_ignored_with_a_note(analysis: Analysis, spec: object) -> None:
    summary = _summary(analysis, {"mask": {"spec": spec}, "config": {"seq": 512, **SIZES}})
    assert all(layer.mask is None for layer in summary.layers)
    (note,) = [n for n in summary.notes if n.startswith("Run metadata ignored")]
    assert "mask" in note and len(note) < 300


def test_a_bad_layer_mask_falls_back_to_the_run_mask_with_a_note(analysis: Analysis) -> None:
    meta = {"mask": {"spec": "sliding:8", "layers": {"0": {"spec": "prefix:-1"}}}, "config": {"seq": 64, **SIZES}}
    summary = _summary(analysis, meta)
    assert {layer.mask.spec for layer in summary.layers if layer.mask} == {"sliding:8"}
    assert any("mask of layer 0 'prefix:-1'" in n for n in summary.notes)


def test_claimed_shares_out_of_range_are_ignored_with_a_note(analysis: Analysis) -> None:
    for kept in (0, 1.5, -1, True, "0.5", 1e308):
        summary = _summary(analysis, {"mask": {"spec": "sliding:8", "kept": kept}, "config": {"seq": 64, **SIZES}})
        assert all(layer.mask is None for layer in summary.layers), kept
        assert any(n.startswith("Run metadata ignored") for n in summary.notes), kept


def test_kept_pairs_take_constant_time_at_any_length() -> None:
    started = time.perf_counter()
    for spec in (MaskSpec("causal"), MaskSpec("sliding", 128), MaskSpec("sliding", MAX_VALUE),
                 MaskSpec("document", 3), MaskSpec("document", MAX_VALUE), MaskSpec("prefix", 5)):
        for causal in (True, False):
            if spec.kind not in ("causal", "prefix") or causal:
                assert kept_pairs(spec, 1 << 62, 1 << 62, causal=causal) is not None
    assert time.perf_counter() - started < 1.0
    # By hand at 2^40 tokens: W keys a query past the first W, and the causal triangle.
    s, w = 1 << 40, 128
    assert kept_pairs(MaskSpec("sliding", w), s, s, causal=True) == w * (w + 1) // 2 + (s - w) * w
    assert kept_pairs(MaskSpec("sliding", w), s, s, causal=False) == s * (2 * w - 1) - w * (w - 1)
    assert kept_pairs(MaskSpec("document", 4), s, s, causal=False) == 4 * (s // 4) ** 2


def test_a_heads_window_share_takes_constant_time() -> None:
    # Two-sided, W = 2 over 4 tokens: rows keep 2, 3, 3, 2 of 16.
    assert window_keeps(4, 2, causal=False) == 10 / 16
    assert window_keeps(4, 2, causal=True) == 7 / 16
    started = time.perf_counter()
    assert 0 < window_keeps(1 << 62, 256, causal=False) < 1e-15
    assert time.perf_counter() - started < 0.5


def test_the_cli_reads_a_run_with_hostile_metadata(builtin_logdir: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    (source,) = trace_files(builtin_logdir / "naive-inference")
    run.mkdir()
    os.link(source, run / source.name) if source.stat().st_dev == run.stat().st_dev else \
        (run / source.name).write_bytes(source.read_bytes())
    (run / "tb_attn_run.json").write_text(json.dumps(
        {"mask": {"spec": "sliding:99999999999999999999"}, "config": {"seq": 1 << 31}}))
    assert cli.main(["summarize", str(run), "--format", "json"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    (worker,) = json.loads(out)["runs"][0]["workers"]
    assert any(n.startswith("Run metadata ignored: the mask 'sliding:") for n in worker["notes"])


# -- Hypothesis: metadata of any shape ---------------------------------------------------------

huge = st.one_of(st.integers(-3, 600), st.sampled_from([2**31 - 1, 2**31, 2**53, 2**63, 10**20, 10**300, 10**400]),
                 st.integers(-(2**70), 2**80))
scalar = st.one_of(st.none(), st.booleans(), huge, st.floats(), st.text(max_size=8),
                   st.sampled_from(["causal", "sliding:8", "sliding:99999999999999999999", "document:0",
                                    "document:3", "prefix:12", "block:0.5", "block:nan", "float32", "bfloat16",
                                    "generate", "training", "inference", "naive", "sdpa", "flex", "running"]))
value = st.recursive(scalar, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                      st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                     max_leaves=8)
config = st.fixed_dictionaries({}, optional={
    k: st.one_of(huge, value) for k in ("batch", "heads", "seq", "d_model", "kv_heads", "prompt_len", "new_tokens")
} | {k: value for k in ("dtype", "mode", "causal", "compile", "impl", "mask", "model", "world_size", "parallel")})
mask = st.fixed_dictionaries({}, optional={"spec": value, "kept": value, "blocks": value,
                                           "layers": st.dictionaries(st.sampled_from(["0", "1", "-1", "9999"]),
                                                                     st.fixed_dictionaries({"spec": value}),
                                                                     max_size=3)})
metadata = st.fixed_dictionaries({}, optional={
    "config": st.one_of(config, value), "mask": st.one_of(mask, value), "impl": value, "model": value, "dtype": value,
    "world_size": st.one_of(huge, value), "status": value, "peaks": value, "generation": value,
    "accuracy": value, "attn_stats": value, "device_name": value})


@settings(max_examples=int(os.environ.get("TB_ATTN_FUZZ_EXAMPLES", "120")), deadline=None, database=None,
          derandomize="TB_ATTN_FUZZ_SEED" not in os.environ, suppress_health_check=[HealthCheck.too_slow])
@given(meta=metadata, other=metadata)
def test_any_metadata_summarizes_and_compares_in_bounded_time(analysis: Analysis, meta: dict[str, Any],
                                                               other: dict[str, Any]) -> None:
    started = time.perf_counter()
    runs = [RunSummary(run=f"r{i}", metadata=m, workers=[_summary(analysis, m)], errors=[])
            for i, m in enumerate((meta, other))]
    for response in (compare(runs), scaling(runs), strategies(runs)):
        assert len(to_json(response)) < 4 << 20
    for run in runs:
        assert len(to_json(run)) < 4 << 20
    assert time.perf_counter() - started < 20


# -- issue 48: counts no float holds, negative, fractional, infinite ----------------------------

@pytest.mark.parametrize("seq", [int("9" * 400), -4096, 0, 512.5, float("inf"), float("nan"), True])
def test_a_count_out_of_range_is_absent_with_a_note_in_every_command(tmp_path: Path, seq: object,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """A 461-byte metadata file with a 400-digit ``config.seq`` made /scaling and /strategies answer 500 and
    ``tb-attn compare``/``strategies`` exit with an OverflowError: now the count is read as absent, with a note."""
    trace = Path(__file__).resolve().parent.parent / "traces" / "steps.json"
    for run, value, impl in (("a", seq, "naive"), ("b", 512, "sdpa")):
        (tmp_path / run).mkdir()
        (tmp_path / run / "w.1.pt.trace.json").write_bytes(trace.read_bytes())
        (tmp_path / run / "tb_attn_run.json").write_text(json.dumps(
            {"impl": impl, "model": "builtin", "config": {"seq": value, "batch": -1, "impl": impl}}))
    for command in ("compare", "strategies"):
        assert cli.main([command, str(tmp_path)]) == 0, command
        assert capsys.readouterr().err == "", command
    assert cli.main(["summarize", str(tmp_path / "a"), "--format", "json"]) == 0
    (worker,) = json.loads(capsys.readouterr().out)["runs"][0]["workers"]
    notes = [n for n in worker["notes"] if n.startswith("Run metadata ignored: config.")]
    assert [n.split(" (")[0] for n in notes] == [f"Run metadata ignored: config.{k}" for k in ("seq", "batch")]
    assert "1..2147483648" in notes[0] and len(notes[0]) < 200


def test_scaling_and_strategies_skip_a_run_whose_length_is_no_count(analysis: Analysis) -> None:
    runs = [RunSummary(run=f"r{i}", workers=[_summary(analysis, None)], errors=[],
                       metadata={"config": {"seq": seq, "impl": "naive", "model": "m"}})
            for i, seq in enumerate([int("9" * 400), 256, 512, -1, float("inf")])]
    fits = scaling(runs)
    assert [p.seq for s in fits.series for p in s.points] == [256, 512]
    table = strategies(runs)
    assert sorted(r.seq for g in table.groups for r in g.rows) == [256, 512]
