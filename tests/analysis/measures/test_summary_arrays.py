"""``analysis.summary_arrays``: the per-trace arrays and the reductions every summary figure reads.

A hand-written trace of three steps of 1000 µs, each with layer 0's block (400, 600 and 500 µs)
and, in the first two, allocations inside the block: per-step sums, means, spreads, the top names
and the peak rise of allocated memory are all read off by hand."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from tb_attn_plugin.analysis.attribution.analyze import Analysis, analyze
from tb_attn_plugin.analysis.measures.summary_arrays import TraceArrays
from tb_attn_plugin.trace.decode import decode_bytes

CPU = {"pid": 1, "tid": 1}
BLOCKS = (400, 600, 500)


def _x(cat: str, name: str, ts: float, dur: float) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, **CPU, "args": {}}


def _mem(ts: float, nbytes: int, total: int) -> dict[str, Any]:
    return {"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "ts": ts, **CPU,
            "args": {"Total Reserved": 1 << 20, "Total Allocated": total, "Bytes": nbytes, "Addr": 1,
                     "Device Type": 0, "Device Id": -1}}


def _trace() -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for n, block in enumerate(BLOCKS):
        t0 = n * 1000
        events += [_x("user_annotation", f"ProfilerStep#{n + 1}", t0, 1000),
                   _x("user_annotation", "tbattn.v1/L0", t0 + 100, block),
                   _x("cpu_op", "aten::softmax", t0 + 110, 30), _x("cpu_op", "aten::bmm", t0 + 150, 80)]
    # Step 1: 100 B held before the block, +64 and +256 inside it, -64: a rise of 320 B over its start.
    # Step 2: +32 inside the block: a rise of 32 B. Memory events are sorted by time.
    events += [_mem(50, 100, 100), _mem(120, 64, 164), _mem(130, 256, 420), _mem(140, -64, 356),
               _mem(1120, 32, 388)]
    return events


@pytest.fixture(scope="module")
def analysis() -> Analysis:
    return analyze(decode_bytes(json.dumps({"schemaVersion": 1, "traceEvents": _trace()}).encode()))


@pytest.fixture(scope="module")
def arrays(analysis: Analysis) -> TraceArrays:
    return TraceArrays(analysis.events, analysis.attr)


def _blocks(arrays: TraceArrays) -> np.ndarray:
    ev = arrays.ev
    return np.flatnonzero(np.asarray(ev.name) == ev.names.index("tbattn.v1/L0"))


def test_the_steps_and_the_layer_groups(arrays: TraceArrays) -> None:
    assert arrays.steps == [1, 2, 3] and arrays.step_count == 3
    assert list(arrays.layer_idx) == [0]  # layer 0's events, in the steps
    assert set(_blocks(arrays).tolist()) <= set(arrays.layer_idx[0].tolist())
    assert not arrays.has_device


def test_per_step_means_and_sums(arrays: TraceArrays) -> None:
    blocks = _blocks(arrays)
    assert arrays.per_step(sum(BLOCKS)) == 500.0  # 1500 µs over 3 steps
    assert type(arrays.per_step(3)) is float
    assert arrays.by_step(blocks).tolist() == [400.0, 600.0, 500.0]


def test_spreads_need_two_steps(arrays: TraceArrays) -> None:
    spreads = arrays.spreads(cpu_us=arrays.by_step(_blocks(arrays)))
    assert set(spreads) == {"cpu_us"} and spreads["cpu_us"].steps == 3
    assert spreads["cpu_us"].lo <= 500.0 <= spreads["cpu_us"].hi


def test_top_names_by_time(arrays: TraceArrays) -> None:
    ev = arrays.ev
    ops = np.flatnonzero(np.isin(np.asarray(ev.name), [ev.names.index("aten::softmax"), ev.names.index("aten::bmm")]))
    assert arrays.top_names(ops) == ["aten::bmm", "aten::softmax"]  # 240 µs against 90 µs
    assert arrays.top_names(ops, top=1) == ["aten::bmm"]


def test_the_peak_rise_over_a_scopes_start(arrays: TraceArrays) -> None:
    blocks = _blocks(arrays)
    assert arrays.peak(blocks) == 320  # 420 B at its highest in step 1's block, over the 100 B before it
    assert arrays.peak(blocks[2:]) == 0  # step 3's block allocates nothing
    assert arrays.peak(blocks[1:2]) == 32
