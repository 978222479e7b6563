"""The memory view's backward blocks and step peak (``analysis.views.memory_curve``), checked on
hand-written traces whose answers are worked out in the comments."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from tb_attn_plugin.analysis.attribution.analyze import Analysis, analyze
from tb_attn_plugin.analysis.views import views
from tb_attn_plugin.trace.decode import decode_bytes

ENGINE = "autograd::engine::evaluate_function: "


def _x(name: str, ts: float, dur: float, cat: str = "cpu_op", *, tid: int = 1, pid: int = 1,
       **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _scope(name: str, ts: float, dur: float) -> dict[str, Any]:
    return _x(f"tbattn.v1/{name}", ts, dur, "user_annotation")


def _seq(name: str, ts: float, dur: float, seq: int) -> dict[str, Any]:
    """An op or engine function carrying an autograd sequence number."""
    return _x(name, ts, dur, **{"Sequence number": seq})


def _mem(ts: float, nbytes: int, total: int, tid: int = 1) -> dict[str, Any]:
    return {"ph": "i", "s": "t", "name": "[memory]", "pid": 1, "tid": tid, "ts": ts,
            "args": {"Bytes": nbytes, "Total Allocated": total, "Total Reserved": 1 << 20, "Addr": 1,
                     "Device Type": 0, "Device Id": -1}}


def _analysis(events: list[dict[str, Any]]) -> Analysis:
    return analyze(decode_bytes(json.dumps({"schemaVersion": 1, "profile_memory": 1,
                                            "traceEvents": events}).encode()))


def _curve(analysis: Analysis, step: int | None) -> dict[str, Any]:
    return json.loads(msgspec.json.encode(views.memory_curve(analysis, step=step)))


def _blocks(curve: dict[str, Any]) -> list[tuple[list[int], float, float]]:
    return [(b["layers"], b["start_us"], b["end_us"]) for b in curve["backward"]]


def _training_step(t0: float, step: int) -> list[dict[str, Any]]:
    """One training step of two layers from ``t0``: the forward ops of L0, L1 and a loss op outside
    attention carry sequence numbers 10·step + 1, 2, 3; backward runs them in reverse, each engine
    function taking the layer and phase of its forward op."""
    s = 10 * step
    return [
        _x(f"ProfilerStep#{step}", t0, 1000, "user_annotation"),
        _scope("L0", t0 + 10, 100), _scope("L0/softmax", t0 + 50, 40), _seq("aten::mm", t0 + 20, 20, s + 1),
        _scope("L1", t0 + 120, 100), _scope("L1/qk_matmul", t0 + 125, 30), _seq("aten::mm", t0 + 130, 20, s + 2),
        _seq("aten::sum", t0 + 230, 10, s + 3),
        _seq(ENGINE + "SumBackward0", t0 + 300, 20, s + 3),
        _seq(ENGINE + "MmBackward0", t0 + 330, 70, s + 2), _x("aten::mm", t0 + 340, 50),
        # a kernel launched from L1's backward runs later on the device: no part of the host block
        _x("cudaLaunchKernel", t0 + 345, 2, "cuda_runtime", correlation=s + 7),
        _x("mm_kernel", t0 + 700, 80, "kernel", pid=0, tid=7, correlation=s + 7, device=0, stream=7),
        _seq(ENGINE + "MmBackward0", t0 + 420, 80, s + 1),
    ]


def test_backward_blocks_and_the_peak_of_each_step() -> None:
    events = [*_training_step(0, 1), *_training_step(2000, 2)]
    events += [
        # step 1: 100 before, +50 in L0's softmax, +300 in L1's backward of Q·Kᵀ (the peak: 450), -400 after
        _mem(5, 100, 100), _mem(60, 50, 150), _mem(350, 300, 450), _mem(450, 100, 550 - 100), _mem(600, -400, 50),
        # step 2: the peak (700) is reached in SumBackward0, outside attention, then again in L0's
        # backward: the first time counts
        _mem(2005, 100, 100), _mem(2310, 600, 700), _mem(2315, -600, 100), _mem(2430, 600, 700),
    ]
    analysis = _analysis(events)
    one, two = _curve(analysis, 1), _curve(analysis, 2)
    # Backward runs L1 before L0; L1's block ends with its engine function (the kernel at 700 is
    # the device's), not at the end of the step.
    assert _blocks(one) == [([1], 330.0, 400.0), ([0], 420.0, 500.0)]
    assert _blocks(two) == [([1], 2330.0, 2400.0), ([0], 2420.0, 2500.0)]
    assert one["peak"] == {"t_us": 350.0, "allocated_bytes": 450, "layer": 1, "backward": True,
                           "phase": "qk_matmul", "op": "aten::mm"}
    assert two["peak"] == {"t_us": 2310.0, "allocated_bytes": 700, "layer": -1, "backward": True,
                           "phase": None, "op": ENGINE + "SumBackward0"}
    # the curve's highest point is the peak
    assert max(y for _, y in one["points"]) == one["peak"]["allocated_bytes"]
    # the forward scopes are what they were, with no backward work among them
    assert [(s["layer"], s["start_us"]) for s in one["scopes"] if s["phase"] is None] == [(0, 10.0), (1, 120.0)]
    assert max(s["end_us"] for s in one["scopes"]) == 220.0


def test_a_forward_peak_names_its_phase() -> None:
    analysis = _analysis([*_training_step(0, 1), _mem(5, 100, 100), _mem(60, 500, 600), _mem(95, -500, 100)])
    assert _curve(analysis, 1)["peak"] == {"t_us": 60.0, "allocated_bytes": 600, "layer": 0, "backward": False,
                                           "phase": "softmax", "op": "tbattn.v1/L0/softmax"}


def test_interleaved_layers_share_one_block() -> None:
    # L0's backward runs at 300-320 and 360-380, L1's at 330-350 inside that span: the two extents
    # overlap, so one block [300, 380] names both. L2's starts as that one ends (touching, apart).
    events = [
        _scope("L0", 0, 30), _seq("aten::mm", 11, 5, 1), _seq("aten::add", 20, 5, 2),
        _scope("L1", 40, 20), _seq("aten::mm", 41, 5, 3),
        _scope("L2", 70, 20), _seq("aten::mm", 71, 5, 4),
        _seq(ENGINE + "AddBackward0", 300, 20, 2), _seq(ENGINE + "MmBackward0", 330, 20, 3),
        _seq(ENGINE + "MmBackward0", 360, 20, 1), _seq(ENGINE + "MmBackward0", 380, 30, 4),
        _mem(301, 10, 10),
    ]
    curve = _curve(_analysis(events), None)
    assert _blocks(curve) == [([0, 1], 300.0, 380.0), ([2], 380.0, 410.0)]


def test_no_memory_no_backward() -> None:
    curve = _curve(_analysis([_scope("L0", 0, 10), _x("aten::mm", 1, 5)]), None)
    assert curve["peak"] is None and curve["backward"] == [] and curve["points"] == []


@pytest.mark.parametrize("step", [1, 2])
def test_blocks_lie_in_their_step(step: int) -> None:
    analysis = _analysis([*_training_step(0, 1), *_training_step(2000, 2), _mem(5, 1, 1)])
    curve = _curve(analysis, step)
    assert all(curve["start_us"] <= b["start_us"] <= b["end_us"] <= curve["end_us"] for b in curve["backward"])
