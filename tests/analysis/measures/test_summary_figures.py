"""``analysis.summary_figures``: the measured summary, figure by figure, by hand.

Two steps of 1000 µs; layer 0's block (300 µs) holds a q·kᵀ scope of 100 µs and head 1's
scope of 60 µs; layer 1's block (200 µs) a softmax scope of 50 µs. Every mean is per step."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tb_attn_plugin.analysis.attribution.analyze import Analysis, analyze
from tb_attn_plugin.analysis.measures.summary_figures import measure
from tb_attn_plugin.trace.decode import decode_bytes

CPU = {"pid": 1, "tid": 1}


def _x(cat: str, name: str, ts: float, dur: float, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, **CPU, "args": args}


def _step(n: int, t0: float) -> list[dict[str, Any]]:
    return [
        _x("user_annotation", f"ProfilerStep#{n}", t0, 1000),
        _x("user_annotation", "tbattn.v1/L0", t0 + 100, 300),
        _x("user_annotation", "tbattn.v1/L0/qk_matmul", t0 + 110, 100),
        _x("cpu_op", "aten::bmm", t0 + 111, 90, **{"Input Dims": [[2, 8, 4], [2, 4, 8]]}),
        _x("user_annotation", "tbattn.v1/L0/H1", t0 + 220, 60),
        _x("user_annotation", "tbattn.v1/L1", t0 + 500, 200),
        _x("user_annotation", "tbattn.v1/L1/softmax", t0 + 510, 50),
        _x("cpu_op", "aten::softmax", t0 + 511, 40, **{"Input Dims": [[2, 8, 8], [], []]}),
    ]


def _analysis(events: list[dict[str, Any]]) -> Analysis:
    return analyze(decode_bytes(json.dumps({"schemaVersion": 1, "traceEvents": events}).encode()))


@pytest.fixture(scope="module")
def analysis() -> Analysis:
    return _analysis(_step(1, 0) + _step(2, 1000))


def test_layers_phases_and_heads_by_hand(analysis: Analysis) -> None:
    w = measure(analysis, file="f", worker="w", span="1")
    assert (w.file, w.worker, w.span, w.steps, w.step_count) == ("f", "w", "1", [1, 2], 2)
    l0, l1 = w.layers
    assert (l0.layer, l0.cpu_us, l1.layer, l1.cpu_us) == (0, 300.0, 1, 200.0)
    assert w.attention_cpu_us == 500.0 and w.attention_share_cpu == pytest.approx(0.5)
    assert {p.phase: p.cpu_us for p in l1.phases}["softmax"] == 50.0
    qk = {p.phase: p for p in l0.phases}["qk_matmul"]
    assert qk.cpu_us == 100.0 and qk.calls == 1.0 and qk.flops == 2 * 2 * 8 * 4 * 8  # 2·B·M·K·N per step
    assert l0.flops == qk.flops and l0.backward.calls == 0.0
    (head,) = l0.heads
    assert head.head == 1 and not head.derived and head.cpu_us == 60.0
    assert [s.cpu_us for s in w.per_step] == [1000.0, 1000.0]
    assert set(w.spread) == {"step_cpu_us", "attention_cpu_us"}  # two steps: a spread, CPU only
    assert not w.findings and w.roofline is None and w.headline == "" and w.generation is None


def test_a_trace_without_attention_sums_no_layer_as_floats() -> None:
    w = measure(_analysis([_x("user_annotation", "ProfilerStep#1", 0, 1000), _x("cpu_op", "aten::mm", 10, 50)]))
    assert w.layers == [] and w.backend == "none"
    assert type(w.attention_cpu_us) is float and type(w.attention_device_us) is float  # 0.0, not 0
    assert w.step_cpu_us == 1000.0 and w.attention_share_cpu == 0.0
