"""The DataFrames hold the summary's own values: each row compared field by field with the JSON that
``tb-attn summarize --format json`` writes (``ranks()``: with ``tb-attn ranks --format json``)."""

from __future__ import annotations

import contextlib
import io
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from helpers import SHARED_TRACES

import tb_attn
from tb_attn_plugin.cli.main import main

# Fields holding a dict keyed by data (not a struct): never columns.
MAPS = frozenset({"spread", "diagnostics", "peak_flops", "details", "values", "metadata"})
# Fields holding a struct or null: a null one gives null columns under its prefix.
STRUCTS = frozenset({"backward", "roof", "mask", "roofline", "attention", "attention_spread", "prefill", "decode",
                     "fit", "generation", "serving"})
GPU = sorted((SHARED_TRACES / "gpu").glob("*.json.gz"))
FRAMES = ("workers", "phases", "layers", "heads", "steps", "tokens", "generation", "kernels", "ops", "memory",
          "collectives", "spreads", "findings", "ranks", "errors")
Doc = dict[str, Any]


def _json(*argv: str) -> Any:
    """What ``tb-attn ARGV`` writes, parsed."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(list(argv)) == 0
    return json.loads(out.getvalue())


@pytest.fixture(scope="module")
def datasets(builtin_logdir: Path, api_logdir: Path) -> dict[str, Path]:
    return {"builtin": builtin_logdir, "api": api_logdir, **{p.name.split("_")[1]: p for p in GPU}}


@pytest.fixture(scope="module", params=["builtin", "api", "h100", "mi300x", "a100"])
def loaded(request: pytest.FixtureRequest, datasets: dict[str, Path]) -> tuple[tb_attn.Summaries, Doc]:
    """(the API's summaries, the CLI's JSON) of one dataset: runner runs or one public GPU trace."""
    path = str(datasets[request.param])
    return tb_attn.load(path, jobs=1), _json("summarize", path, "--format", "json", "--jobs", "1")


def _same(actual: object, expected: object) -> bool:
    if expected is None:  # null in the JSON: None, or a non-finite float that the JSON writes as null
        return actual is None or (isinstance(actual, float) and not math.isfinite(actual))
    if isinstance(expected, list):
        return list(actual) == expected  # type: ignore[call-overload]
    return bool(actual == expected)


def _flat(obj: Doc, prefix: str = "") -> tuple[dict[str, Any], list[str]]:
    """The struct's scalars by column name (nested structs under their prefix), and the prefixes of
    its null structs."""
    out: dict[str, Any] = {}
    nulls: list[str] = []
    for key, value in obj.items():
        name = prefix + key
        if isinstance(value, list) or key in MAPS or key == "schema":
            continue
        if isinstance(value, dict):
            inner, more = _flat(value, name + "_")
            out.update(inner)
            nulls.extend(more)
        elif value is None and key in STRUCTS:
            nulls.append(name + "_")
        else:
            out[name] = value
    return out, nulls


def _check(row: dict[str, Any], keys: dict[str, Any], obj: Doc, *, drop: tuple[str, ...] = ()) -> None:
    """``row`` holds ``keys`` and exactly ``obj``'s scalars: every field a column of its value,
    every other column null under a null struct."""
    for key, value in keys.items():
        assert _same(row[key], value), (key, row[key], value)
    expected, nulls = _flat({k: v for k, v in obj.items() if k not in drop})
    for column, value in row.items():
        if column in keys:
            continue
        if column in expected:
            assert _same(value, expected[column]), (column, value, expected[column], keys)
        else:
            assert any(column.startswith(p) for p in nulls), (column, keys)
            assert _same(value, None), (column, value, keys)
    assert set(expected) <= set(row), set(expected) - set(row)


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    return frame.to_dict("records")  # type: ignore[no-any-return]


def _workers(doc: Doc) -> Iterator[tuple[dict[str, Any], Doc]]:
    for run in doc["runs"]:
        for w in run["workers"]:
            yield {"run": run["run"], "worker": w["worker"], "span": w["span"]}, w


def test_to_json_is_the_clis_json(loaded: tuple[tb_attn.Summaries, Doc]) -> None:
    r, doc = loaded
    assert json.loads(r.to_json()) == doc
    assert doc["runs"] and all(run["errors"] == [] for run in doc["runs"])


def test_phases_are_the_phase_stats(loaded: tuple[tb_attn.Summaries, Doc]) -> None:
    r, doc = loaded
    expected = [({**k, "layer": layer["layer"], "phase": ph["phase"]}, ph)
                for k, w in _workers(doc) for layer in w["layers"] for ph in layer["phases"]]
    rows = _records(r.phases())
    assert len(rows) == len(expected) == sum(len(layer["phases"]) for _, w in _workers(doc) for layer in w["layers"])
    assert len(expected) > 0
    for row, (keys, ph) in zip(rows, expected, strict=True):
        _check(row, keys, ph)
    assert list(r.phases().columns[:5]) == ["run", "worker", "span", "layer", "phase"]


def test_layers_steps_collectives_and_workers_are_the_summary(loaded: tuple[tb_attn.Summaries, Doc]) -> None:
    r, doc = loaded
    layers = [({**k, "layer": layer["layer"]}, layer) for k, w in _workers(doc) for layer in w["layers"]]
    for row, (keys, layer) in zip(_records(r.layers()), layers, strict=True):
        _check(row, keys, layer)
    steps = [({**k, "step": s["step"]}, s) for k, w in _workers(doc) for s in w["per_step"]]
    for row, (keys, s) in zip(_records(r.steps()), steps, strict=True):
        _check(row, keys, s)
    coll = [(k, c) for k, w in _workers(doc) for c in w["collectives"]]
    for row, (keys, c) in zip(_records(r.collectives()), coll, strict=True):
        _check(row, keys, c)
    for row, (keys, w) in zip(_records(r.workers()), list(_workers(doc)), strict=True):
        _check(row, keys, w, drop=("generation",))


def test_memory_kernels_and_ops(loaded: tuple[tb_attn.Summaries, Doc]) -> None:
    r, doc = loaded
    memory = _records(r.memory())
    kernels = _records(r.kernels())
    ops = _records(r.ops())
    phases = [(k, layer, ph) for k, w in _workers(doc) for layer in w["layers"] for ph in layer["phases"]]
    assert len(memory) == len(phases)
    for row, (keys, layer, ph) in zip(memory, phases, strict=True):
        for field in ("alloc_bytes", "freed_bytes", "peak_bytes", "sxs_bytes", "sxs_allocs", "sxs_mask_bytes",
                      "sxs_mask_allocs"):
            assert row[field] == ph[field], field
        assert (row["layer"], row["phase"]) == (layer["layer"], ph["phase"])
        assert row["layer_peak_bytes"] == layer["peak_bytes"]
        assert row["score_tensor_bytes"] == layer["score_tensor_bytes"]
        assert all(_same(row[c], keys[c]) for c in keys)
    want_kernels = [(keys["run"], layer["layer"], ph["phase"], i, name) for keys, layer, ph in phases
                    for i, name in enumerate(ph["kernel_names"], 1)]
    assert [(x["run"], x["layer"], x["phase"], x["kernel_rank"], x["kernel"]) for x in kernels] == want_kernels
    want_ops = [(keys["run"], layer["layer"], ph["phase"], i, name) for keys, layer, ph in phases
                for i, name in enumerate(ph["ops"], 1)]
    assert [(x["run"], x["layer"], x["phase"], x["op_rank"], x["op"]) for x in ops] == want_ops
    assert len(ops) > 0


def test_findings_are_the_summarys(loaded: tuple[tb_attn.Summaries, Doc]) -> None:
    r, doc = loaded
    expected = [(k, f) for k, w in _workers(doc) for f in w["findings"]]
    rows = _records(r.findings())
    assert len(rows) == len(expected) > 0
    for row, (keys, f) in zip(rows, expected, strict=True):
        assert all(_same(row[c], keys[c]) for c in keys)
        for field in ("id", "severity", "title", "explanation", "suggestion"):
            assert row[field] == f[field]
        for field in ("time_us", "bytes", "layers", "ops", "kernels", "details"):
            assert _same(row[field], f["evidence"][field]), field


def test_spreads_are_every_spread(loaded: tuple[tb_attn.Summaries, Doc]) -> None:
    r, doc = loaded
    expected = []
    for k, w in _workers(doc):
        expected += [({**k, "level": "worker", "figure": f}, s) for f, s in w["spread"].items()]
        for layer in w["layers"]:
            expected += [({**k, "level": "layer", "layer": layer["layer"], "figure": f}, s)
                         for f, s in layer["spread"].items()]
            expected += [({**k, "level": "phase", "layer": layer["layer"], "phase": ph["phase"], "figure": f}, s)
                         for ph in layer["phases"] for f, s in ph["spread"].items()]
    rows = _records(r.spreads())
    assert len(rows) == len(expected)
    for row, (keys, s) in zip(rows, expected, strict=True):
        _check({c: v for c, v in row.items() if c in keys or c in s}, keys, s)


def test_generation_and_tokens(api_logdir: Path) -> None:
    r = tb_attn.load(str(api_logdir / "generate"), jobs=1)
    doc = _json("summarize", str(api_logdir / "generate"), "--format", "json", "--jobs", "1")
    ((keys, w),) = list(_workers(doc))
    gen = w["generation"]
    tokens = _records(r.tokens())
    assert len(tokens) == len(gen["tokens"]) == 7 and {t["role"] for t in tokens} == {"prefill", "decode"}
    for row, t in zip(tokens, gen["tokens"], strict=True):
        _check(row, {**keys, "step": t["step"], "clock": gen["clock"]}, t)
    (row,) = _records(r.generation())
    _check(row, keys, gen)
    assert row["decode_steps"] == 6 and row["prefill_steps"] == 1


def test_heads_join_the_attention_statistics(api_logdir: Path) -> None:
    r = tb_attn.load(str(api_logdir), jobs=1)
    frame = r.heads()
    (stats_run,) = [s for s in r.runs if s.run == "stats"]
    stats = stats_run.attn_stats
    assert stats is not None and stats.window == 64
    assert list(frame.columns[:5]) == ["run", "worker", "span", "layer", "head"]
    assert {"entropy", "sink_4", "window_64", "local", "sink", "weights", "derived", "cpu_us"} <= set(frame.columns)
    rows = {(x["run"], x["layer"], x["head"]): x for x in _records(frame)}
    (w,) = stats_run.workers
    cost = {(layer.layer, h.head): h for layer in w.layers for h in layer.heads}
    assert len(stats.heads) == len(cost) == 8
    for a in stats.heads:
        row = rows[("stats", a.layer, a.head)]
        assert (row["local"], row["sink"], row["weights"]) == (a.local, a.sink, "random")
        for stat in stats.stats:
            assert row[stat] == a.values[stat]
        h = cost[(a.layer, a.head)]
        assert (row["derived"], row["cpu_us"], row["flops"], row["sxs_bytes"]) == (h.derived, h.cpu_us, h.flops,
                                                                                   h.sxs_bytes)
    # A run without statistics: the heads' cost, nulls for the statistics.
    generate = [x for x in _records(frame) if x["run"] == "generate"]
    assert generate and all(pd.isna(x["entropy"]) and x["local"] is None for x in generate)


def test_measured_heads(builtin_logdir: Path) -> None:
    r = tb_attn.load(str(builtin_logdir), run="naive-per-head", jobs=1)
    frame = r.heads()
    ((w,),) = [s.workers for s in r.runs]
    assert len(frame) == sum(len(layer.heads) for layer in w.layers) > 0
    assert not frame["derived"].any()
    assert list(frame["cpu_us"]) == [h.cpu_us for layer in w.layers for h in layer.heads]


def test_ranks_are_the_ranks_command(torchrun_logdir: Path) -> None:
    r = tb_attn.load(str(torchrun_logdir), jobs=1)
    views = _json("ranks", str(torchrun_logdir), "--format", "json", "--jobs", "1")
    views = views if isinstance(views, list) else [views]
    expected = [({"run": v["run"], "worker": row["worker"], "rank": row["rank"]}, row)
                for v in views for row in v["ranks"]]
    rows = _records(r.ranks())
    assert len(rows) == len(expected) == 4
    for row, (keys, rank) in zip(rows, expected, strict=True):
        _check(row, keys, rank)
    assert rows[0]["rank"] == 0 and rows[1]["rank"] == 1
    slow = [x for x in rows if x["run"] == "builtin/naive-tp/seq16"]
    assert [x["straggler"] for x in slow] == [False, True]  # rank 1 was slowed by 20 ms per block
    assert r.ranks(margin=1000.0)["straggler"].sum() == 0  # the margin reaches the analysis


def test_every_frame_has_its_columns_when_empty(loaded: tuple[tb_attn.Summaries, Doc]) -> None:
    r, _ = loaded
    empty = tb_attn.Summaries([])
    for name in FRAMES:
        full, none = getattr(r, name)(), getattr(empty, name)()
        assert len(none) == 0 and list(none.columns), name
        if name != "heads":  # heads has one column per statistic recorded
            assert list(none.columns) == list(full.columns), name
    assert r.errors().columns.tolist() == ["run", "file", "error"] and len(r.errors()) == 0


def test_documented_columns() -> None:
    """The README's column names (test-artifacts/api-readme.md) are the frames'."""
    empty = tb_attn.Summaries([])
    assert {"calls", "cpu_us", "cpu_self_us", "device_us", "kernels", "op_count", "flops", "flops_per_s", "iops",
            "alloc_bytes", "freed_bytes", "peak_bytes", "sxs_bytes", "sxs_allocs", "bytes", "dtype",
            "backward_cpu_us", "roof_share", "roof_verdict"} <= set(empty.phases().columns)
    assert {"module", "backend", "heads_count", "score_tensor_bytes", "mask_spec", "roof_intensity"} <= \
        set(empty.layers().columns)
    assert list(empty.kernels().columns) == ["run", "worker", "span", "layer", "phase", "kernel_rank", "kernel"]
    assert list(empty.collectives().columns) == ["run", "worker", "span", "name", "calls", "cpu_us", "device_us"]
    assert {"attention_best_us", "straggler", "attention_spread_noisy"} <= set(empty.ranks().columns)
    assert {"headline", "rank", "world_size", "roofline_attention_verdict"} <= set(empty.workers().columns)
