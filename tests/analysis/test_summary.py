"""``analysis.summary``: one trace's summary, assembled whole from its stages and frozen.

A hand-written trace of two steps (each 1000 µs, layer 0's block 400 µs holding a 100 µs
q·kᵀ scope and a 50 µs softmax scope) gives every per-step mean, share and call count by hand;
``summarize_trace`` is its measures (with masks and generation), then roofs, findings and
headline, each stage once and a new value; nothing in it can be assigned after. The builder
gives every value its declared type, as msgpack's typed decoding (a worker process, Dask, the
summary cache) would."""

from __future__ import annotations

import json
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tb_attn_plugin.analysis.attribution.analyze import Analysis, analyze
from tb_attn_plugin.analysis.findings.findings import find
from tb_attn_plugin.analysis.measures.overview import headline
from tb_attn_plugin.analysis.measures.peaks import Peaks, peaks_for
from tb_attn_plugin.analysis.measures.roofline import far_from_roof, peaks_of, with_roofline
from tb_attn_plugin.analysis.measures.sparsity import with_masks
from tb_attn_plugin.analysis.summary import summarize, summarize_analysis, summarize_trace, under_peaks, with_peaks
from tb_attn_plugin.engine.loader import load_events
from tb_attn_plugin.trace.decode import decode_bytes
from tb_attn_plugin.types.schema import WorkerSummary, finding_order

CPU = {"pid": 1, "tid": 1}
#: A causal mask over 4 of 8 positions' rows: the runner's metadata for a masked run.
META: dict[str, Any] = {"impl": "naive", "config": {"seq": 8, "heads": 2, "d_model": 8, "batch": 1,
                                                     "dtype": "float32", "causal": True},
                        "mask": {"spec": "causal", "kept": 0.5625}}


def _x(cat: str, name: str, ts: float, dur: float, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, **CPU, "args": args}


def _step(n: int, t0: float) -> list[dict[str, Any]]:
    return [
        _x("user_annotation", f"ProfilerStep#{n}", t0, 1000),
        _x("user_annotation", "tbattn.v1/L0", t0 + 100, 400),
        _x("user_annotation", "tbattn.v1/L0/qk_matmul", t0 + 110, 100),
        _x("cpu_op", "aten::bmm", t0 + 111, 90, **{"Input Dims": [[2, 8, 4], [2, 4, 8]]}),
        _x("user_annotation", "tbattn.v1/L0/softmax", t0 + 220, 50),
        _x("cpu_op", "aten::softmax", t0 + 221, 40, **{"Input Dims": [[2, 8, 8], [], []]}),
    ]


@pytest.fixture(scope="module")
def analysis() -> Analysis:
    trace = {"schemaVersion": 1, "traceEvents": _step(1, 0) + _step(2, 1000)}
    return analyze(decode_bytes(json.dumps(trace).encode()))


def test_the_measured_summary_by_hand(analysis: Analysis) -> None:
    w = summarize_analysis(analysis, file="f", worker="w", span="1")
    assert (w.file, w.worker, w.span, w.device, w.steps, w.step_count) == ("f", "w", "1", "cpu", [1, 2], 2)
    assert w.step_cpu_us == 1000.0  # two steps of 1000 µs: the mean
    (layer,) = w.layers
    assert layer.cpu_us == 400.0 and layer.calls == 1.0 and layer.backend == "naive"
    assert w.attention_cpu_us == 400.0 and w.attention_share_cpu == pytest.approx(0.4)  # 400 of 1000 µs
    phases = {p.phase: p for p in layer.phases}
    assert phases["qk_matmul"].cpu_us == 100.0 and phases["softmax"].cpu_us == 50.0
    assert phases["other"].cpu_us == 250.0  # the block's 400 µs less its two scopes
    assert phases["qk_matmul"].flops == 2 * 2 * 8 * 4 * 8  # a batched (8×4)·(4×8) per step: 2·B·M·K·N
    assert not w.findings and w.roofline is None and w.headline == "" and w.generation is None
    assert summarize(analysis.events, file="f", worker="w", span="1") == w  # the same, from the events


def test_the_whole_summary_is_its_stages_in_order(analysis: Analysis) -> None:
    """Measures (masks included; no generation here), roofs, findings, headline: each a new value
    from the one before, nothing written into one after."""
    measured = summarize_analysis(analysis, file="f", worker="w", span="1")
    frozen_bytes = msgspec.msgpack.encode(measured)
    masked = with_masks(measured, META)
    assert masked.layers[0].mask is not None and measured.layers[0].mask is None
    roofed = with_roofline(masked, peaks_for(masked.device, analysis.events.meta.device_properties, META))
    assert roofed.roofline is not None and not roofed.findings and roofed.headline == ""  # roofs alone
    rules = find(analysis, masked, metadata=META)
    found = msgspec.structs.replace(roofed, findings=sorted(rules + far_from_roof(roofed), key=finding_order))
    whole = msgspec.structs.replace(found, headline=headline(found))
    assert summarize_trace(analysis, file="f", worker="w", span="1", metadata=META) == whole
    assert whole.headline.startswith("Attention is 40% of the CPU step time")
    assert msgspec.msgpack.encode(measured) == frozen_bytes  # the stages never changed what they were given


def test_the_users_peaks_run_the_stages_after_the_measures(analysis: Analysis) -> None:
    """Under peaks so low that every phase runs far above them (no far-from-roof finding) and so
    high that every phase is far below (one at least), the measures and the rules' findings stand;
    the roofs, the far-from-roof findings and the headline follow the peaks."""
    w = summarize_trace(analysis, file="f", worker="w", span="1", metadata=META)
    rules = [f for f in w.findings if f.id != "far-from-roof"]
    far = under_peaks(w, Peaks("x", "test", {"fp32": 1e18}, 1e18, launch_us=0.0))
    near = under_peaks(w, Peaks("x", "test", {"fp32": 1.0}, 1.0, launch_us=0.0))
    for s in (far, near):
        assert s.layers[0].cpu_us == w.layers[0].cpu_us and s.layers[0].mask == w.layers[0].mask
        assert [f for f in s.findings if f.id != "far-from-roof"] == rules
        assert [finding_order(f) for f in s.findings] == sorted(finding_order(f) for f in s.findings)
        assert s.headline == headline(s)
    assert any(f.id == "far-from-roof" for f in far.findings)
    assert not any(f.id == "far-from-roof" for f in near.findings)
    assert far.roofline is not None and far.roofline.peak_flops == {"fp32": 1e18}
    assert w.roofline is not None and under_peaks(far, peaks_of(w.roofline)) == w  # back under its own peaks
    given = with_peaks(w, 1e18, 1e15)
    assert given.roofline is not None and given.roofline.source == "given by --peak-flops and --peak-bw"
    assert with_peaks(w, None, None) is w


def test_a_whole_summary_cannot_be_changed(analysis: Analysis) -> None:
    w = summarize_trace(analysis, file="f", worker="w", span="1", metadata=META)
    layer = w.layers[0]
    for obj, field in ((w, "headline"), (layer, "cpu_us"), (layer.phases[0], "flops"), (layer.backward, "flops")):
        with pytest.raises(AttributeError):
            setattr(obj, field, 0)
    assert layer.mask is not None
    with pytest.raises(AttributeError):
        layer.mask.kept = 1.0  # type: ignore[misc]


def test_masks_are_applied_to_a_copy_and_state_the_masks_work(analysis: Analysis) -> None:
    """Causal over S = 8 keeps 36 of 64 pairs (0.5625); the dense core is 2·B·H·S²·(D + Dv) with
    D = d_model / heads = 4: 2·1·2·64·8 = 2048 FLOPs, the mask's share 1152."""
    w = summarize_trace(analysis, file="f", worker="w", span="1", metadata=META)
    mask = w.layers[0].mask
    assert mask is not None and mask.spec == "causal" and mask.kept == 0.5625
    assert mask.dense_flops == 2048.0 and mask.mask_flops == 1152.0
    plain = summarize_trace(analysis, file="f", worker="w", span="1")
    assert plain.layers[0].mask is None  # no metadata: nothing guessed


def _mistyped(value: Any, declared: Any, path: str = "$") -> Iterator[str]:
    """Each path whose value is not exactly of its declared type: an int where a float is
    declared, a tuple for a list, a numpy scalar or a str subclass for a plain one."""
    origin, args = typing.get_origin(declared), typing.get_args(declared)
    if declared is Any or origin is typing.Literal:
        return
    if origin in (typing.Union, types.UnionType):
        exact = [a for a in args if type(value) is (typing.get_origin(a) or a) or (a is type(None) and value is None)]
        if exact:
            yield from _mistyped(value, exact[0], path)
        else:
            yield f"{path}: {type(value).__name__} for {_name(declared)}"
        return
    if type(value) is not (origin or declared):
        yield f"{path}: {type(value).__name__} for {_name(declared)}"
    elif origin is list:
        for i, x in enumerate(value):
            yield from _mistyped(x, args[0], f"{path}[{i}]")
    elif origin is dict:
        for k, x in value.items():
            yield from _mistyped(k, args[0], f"{path}{{key}}")
            yield from _mistyped(x, args[1], f"{path}[{k!r}]")
    elif isinstance(value, msgspec.Struct):
        hints = typing.get_type_hints(type(value))
        for name in value.__struct_fields__:
            yield from _mistyped(getattr(value, name), hints[name], f"{path}.{name}")


def _name(declared: Any) -> str:
    return str(declared) if typing.get_origin(declared) is not None else getattr(declared, "__name__", str(declared))


def test_the_type_check_sees_what_msgpack_would_change(analysis: Analysis) -> None:
    w = summarize_analysis(analysis)
    odd = msgspec.structs.replace(w, step_device_us=0, steps=(1, 2))  # type: ignore[arg-type]
    assert sorted(_mistyped(odd, WorkerSummary)) == ["$.step_device_us: int for float", "$.steps: tuple for list[int]"]


HAND_WRITTEN = Path(__file__).resolve().parents[1] / "traces"


@pytest.mark.parametrize("name", sorted(p.stem for p in HAND_WRITTEN.glob("*.json")))
def test_every_value_has_its_declared_type(name: str) -> None:
    """Built directly, the summary is what msgpack's typed decoding gives back, byte for byte in
    JSON: so serial, ``--jobs N``, Dask and cached summaries print alike (``odd_values`` and the
    traces without attention sum no layer: 0.0, not 0)."""
    w = summarize_trace(analyze(load_events(str(HAND_WRITTEN / f"{name}.json"))), file=name, worker="w", span=None,
                        metadata=META)
    assert list(_mistyped(w, WorkerSummary)) == []
    decoded = msgspec.msgpack.decode(msgspec.msgpack.encode(w), type=WorkerSummary)
    assert decoded == w and msgspec.json.encode(decoded) == msgspec.json.encode(w)
