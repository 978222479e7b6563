"""``analysis.summary``: one trace's summary, assembled whole from its parts and frozen.

A hand-written trace of two steps (each 1000 µs, layer 0's block 400 µs holding a 100 µs
q·kᵀ scope and a 50 µs softmax scope) gives every per-step mean, share and call count by hand;
``summarize_trace`` is its measured part with masks, generation, findings, roofline and headline
added, each part a new value; nothing in it can be assigned after."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from tb_attn_plugin.analysis.analyze import Analysis, analyze
from tb_attn_plugin.analysis.findings import find
from tb_attn_plugin.analysis.generation import generation
from tb_attn_plugin.analysis.peaks import peaks_for
from tb_attn_plugin.analysis.roofline import with_roofline
from tb_attn_plugin.analysis.sparsity import with_masks
from tb_attn_plugin.analysis.summary import summarize, summarize_analysis, summarize_trace, typed
from tb_attn_plugin.trace.decode import decode_bytes
from tb_attn_plugin.types.schema import WorkerSummary

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


def test_the_whole_summary_is_its_parts_assembled(analysis: Analysis) -> None:
    """Masks, generation, findings, then the roofline with its far-from-roof findings and the
    headline: each a new value from the one before, nothing written into one after."""
    measured = summarize_analysis(analysis, file="f", worker="w", span="1")
    frozen_bytes = msgspec.msgpack.encode(measured)
    masked = with_masks(measured, META)
    assert masked.layers[0].mask is not None and measured.layers[0].mask is None
    gen = msgspec.structs.replace(masked, generation=generation(analysis, masked, META,
                                                                lambda part: summarize_analysis(part).layers))
    found = msgspec.structs.replace(gen, findings=find(analysis, gen, metadata=META))
    whole = with_roofline(found, peaks_for(found.device, analysis.events.meta.device_properties, META))
    assert summarize_trace(analysis, file="f", worker="w", span="1", metadata=META) == typed(whole)
    assert whole.roofline is not None and whole.headline.startswith("Attention is 40% of the CPU step time")
    assert msgspec.msgpack.encode(measured) == frozen_bytes  # the parts never changed what they were given


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


def test_typed_gives_every_value_its_declared_type(analysis: Analysis) -> None:
    w = summarize_analysis(analysis)
    odd = msgspec.structs.replace(w, step_device_us=0)  # an int where a float is declared
    assert type(odd.step_device_us) is int
    fixed = typed(odd)
    assert type(fixed.step_device_us) is float and fixed == w
    assert isinstance(fixed, WorkerSummary)
