"""The shared trace queries, on a hand-written trace, and the summary and views agreeing through them."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from tb_attn_plugin.analysis.attribution.analyze import Analysis, analyze
from tb_attn_plugin.analysis.attribution.query import RuleQuery, TraceQuery, ancestors
from tb_attn_plugin.analysis.summary import summarize_analysis
from tb_attn_plugin.analysis.views import views
from tb_attn_plugin.analysis.views.drilldown import drilldown
from tb_attn_plugin.trace.decode import decode_bytes

CPU, GPU = {"pid": 1, "tid": 1}, {"pid": 0, "tid": 7}


def _x(cat: str, name: str, ts: float, dur: float, where: dict[str, int] = CPU, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, **where, "args": args}


def _mem(ts: float, nbytes: int, total: int, device_type: int) -> dict[str, Any]:
    return {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "ts": ts, **CPU,
            "args": {"Bytes": nbytes, "Total Allocated": total, "Total Reserved": 1 << 20, "Addr": 1,
                     "Device Type": device_type, "Device Id": 0}}


def _trace() -> bytes:
    """Two steps; in the first, layer 0 with a matmul around a bmm that launches one kernel."""
    events = [
        _x("user_annotation", "ProfilerStep#1", 0, 100),
        _x("user_annotation", "tbattn.v1/L0", 10, 80),
        _x("user_annotation", "tbattn.v1/L0/qk_matmul", 11, 35),
        _x("cpu_op", "aten::matmul", 12, 30),
        _x("cpu_op", "aten::bmm", 15, 20),
        _x("cuda_runtime", "cudaLaunchKernel", 16, 5, correlation=7),
        _x("cpu_op", "aten::softmax", 50, 10),
        _x("cpu_op", "aten::_softmax", 52, 6),
        _x("user_annotation", "ProfilerStep#2", 100, 50),
        _x("cpu_op", "aten::add", 110, 10),
        _x("cpu_op", "aten::mul", 200, 5),  # after the steps
        _x("kernel", "volta_sgemm_128x64_nn", 20, 8, GPU, correlation=7),
        _x("gpu_user_annotation", "tbattn.v1/L0", 18, 12, GPU),
        _mem(13, 64, 64, 0),
        _mem(16, 256, 256, 1),
        _mem(17, 256, 512, 1),
        _mem(53, -256, 256, 1),
    ]
    return json.dumps({"schemaVersion": 1, "traceEvents": events}).encode()


@pytest.fixture
def analysis() -> Analysis:
    return analyze(decode_bytes(_trace()))


def _named(a: Analysis, name: str) -> int:
    """The one event of that name, on the CPU side where the device shows it too."""
    named = np.array(a.events.names)[a.events.name] == name
    (i,) = np.flatnonzero(named & ~TraceQuery(a.events, a.attr).on_device) if named.sum() > 1 else np.flatnonzero(named)
    return int(i)


def test_steps_self_time_and_top_level_ops(analysis: Analysis) -> None:
    q = TraceQuery(analysis.events, analysis.attr)
    assert q.steps == [1, 2] and q.step_count == 2
    assert [analysis.events.names[analysis.events.name[i]] for i in q.step_events] == ["ProfilerStep#1",
                                                                                       "ProfilerStep#2"]
    assert not q.in_steps[_named(analysis, "aten::mul")] and q.in_steps[_named(analysis, "aten::add")]
    matmul, bmm, softmax = (_named(analysis, n) for n in ("aten::matmul", "aten::bmm", "aten::softmax"))
    assert q.self_us[matmul] == 10 and q.self_us[bmm] == 20 and q.self_us[softmax] == 4
    assert q.self_us[_named(analysis, "cudaLaunchKernel")] == 0  # not a CPU op
    assert q.top_op[matmul] and q.top_op[softmax] and not q.top_op[bmm]


def test_device_work_memory_device_and_nesting(analysis: Analysis) -> None:
    q = TraceQuery(analysis.events, analysis.attr)
    kernel = _named(analysis, "volta_sgemm_128x64_nn")
    annotation = int(np.flatnonzero(q.on_device & ~q.device_work)[0])
    assert q.device_work[kernel] and q.on_device[annotation] and not q.device_work[annotation]
    assert q.mem_device == 1  # three CUDA events against one on the CPU
    bmm = _named(analysis, "aten::bmm")
    chain = [q.name(p) for p in ancestors(analysis.attr.parent, bmm)]
    assert chain == ["aten::matmul", "tbattn.v1/L0/qk_matmul", "tbattn.v1/L0", "ProfilerStep#1"]
    matmul = _named(analysis, "aten::matmul")
    assert q.outermost(np.array([bmm, matmul])).tolist() == [matmul] and q.top_level(bmm) == matmul
    assert q.subtree_end(_named(analysis, "tbattn.v1/L0")) == _named(analysis, "aten::_softmax") + 1


def test_summary_and_drilldown_agree_on_steps_and_self_time(analysis: Analysis) -> None:
    summary = summarize_analysis(analysis)
    (layer,) = summary.layers
    assert summary.steps == views.steps_of(analysis) == [1, 2]
    for phase in layer.phases:
        drill = drilldown(analysis, layer=0, phase=phase.phase, backward=False)
        assert drill.step_count == summary.step_count
        assert sum(op.self_us for op in drill.ops) == pytest.approx(phase.cpu_self_us)
        assert sum(k.device_us for k in drill.kernels) == pytest.approx(phase.device_us)
    assert views.memory_curve(analysis, step=1).device == "cuda"


def test_layers_grouped_by_model_and_a_position_bias_per_model() -> None:
    """Three layers of two models (their paths' first parts); model ``t5`` looks up a relative position
    bias in its first layer (an ``embedding`` indexed by a (16, 16) bucket table), model ``clip`` none."""
    events = [_x("user_annotation", "ProfilerStep#1", 0, 1000),
              _x("user_annotation", "tbattn.v1/L0 clip.encoder.layers.0.self_attn", 10, 100),
              _x("user_annotation", "tbattn.v1/L1 t5.encoder.block.0.layer.0", 200, 100),
              _x("cpu_op", "aten::embedding", 210, 10, **{"Input Dims": [[32, 4], [16, 16]],
                                                          "Input type": ["float", "long int"]}),
              _x("user_annotation", "tbattn.v1/L2 t5.encoder.block.1.layer.0", 400, 100)]
    a = analyze(decode_bytes(json.dumps({"traceEvents": events}).encode()))
    t = RuleQuery(a.events, a.attr, summarize_analysis(a), {})
    assert t.models == {0: "clip", 1: "t5", 2: "t5"}
    assert t.by_model([2, 0, 1]) == [[0], [1, 2]]
    assert t.model_name([1, 2]) == "t5"
    assert t.looks_up_bias([2]) and not t.looks_up_bias([0])  # layer 2 is handed the bias layer 1 looked up
    assert t.bias_lookups.tolist() == [_named(a, "aten::embedding")]
