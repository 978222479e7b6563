"""The drill-down's tree (``analysis.drilldown``): call paths merged across calls and steps, device
work under the op that launched it, memory under the op that allocated it, and the cut.

The hand-written trace's figures are computed by hand in the comments; the real traces check that
the tree adds up to the summary's figures for every phase.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from helpers import HAND_TRACES, SHARED_TRACES

from tb_attn_plugin.analysis.attribution.analyze import Analysis, analyze
from tb_attn_plugin.analysis.summary import summarize_analysis
from tb_attn_plugin.analysis.views.drilldown import drilldown
from tb_attn_plugin.analysis.views.views import ViewError
from tb_attn_plugin.engine.loader import load_events
from tb_attn_plugin.trace.decode import decode_bytes
from tb_attn_plugin.types.views import DrillNode, DrillTree

MODEL_TRACES = Path(__file__).resolve().parents[2] / "models" / "traces"
CPU, GPU = {"pid": 1, "tid": 1}, {"pid": 0, "tid": 7}
CUDA, HOST = 1, 0
QK = [[2, 4, 16, 8], [2, 4, 8, 16]]
BMM = [[8, 16, 8], [8, 8, 16]]


def _x(cat: str, name: str, ts: float, dur: float, where: dict[str, int] = CPU, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, **where, "args": args}


def _op(name: str, ts: float, dur: float, dims: list[list[int]] | None = None, **args: Any) -> dict[str, Any]:
    shapes = {} if dims is None else {"Input Dims": dims, "Input type": ["float"] * len(dims)}
    return _x("cpu_op", name, ts, dur, **shapes, **args)


def _mem(ts: float, nbytes: int, device_type: int = CUDA) -> dict[str, Any]:
    return {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "ts": ts, **CPU,
            "args": {"Bytes": nbytes, "Total Allocated": max(nbytes, 0), "Total Reserved": 1 << 20, "Addr": 1,
                     "Device Type": device_type, "Device Id": 0}}


def _hand_trace() -> Analysis:
    """Two steps of layer 0. Its q·kᵀ phase runs ``aten::matmul`` (shapes QK) around ``aten::bmm``
    in both steps; in step 1 a second, smaller matmul of other shapes follows. The bmm's kernel is
    found by its runtime call's correlation in step 1 and by the op's External id in step 2, where
    a ``record_function`` range sits between matmul and bmm."""
    events = [
        _x("user_annotation", "ProfilerStep#1", 0, 100),
        _x("user_annotation", "tbattn.v1/L0", 10, 80),
        _x("user_annotation", "tbattn.v1/L0/qk_matmul", 11, 49),
        _mem(11.5, 32),  # in the phase, in no op
        _op("aten::matmul", 12, 30, QK),
        _mem(13, 64),  # the matmul's own
        _op("aten::bmm", 15, 20, BMM, **{"External id": 41}),
        _x("cuda_runtime", "cudaLaunchKernel", 16, 5, correlation=7),
        _mem(17, 256),
        _mem(18, 1000, HOST),  # host memory on a CUDA trace: not counted
        _mem(40, -256),  # a free: not counted
        _op("aten::matmul", 45, 10, [[2, 4, 16, 8], [2, 4, 8, 32]]),
        _op("aten::relu", 62, 10),  # layer 0, no phase scope and no role: "other"
        _x("user_annotation", "ProfilerStep#2", 100, 100),
        _x("user_annotation", "tbattn.v1/L0", 110, 80),
        _x("user_annotation", "tbattn.v1/L0/qk_matmul", 111, 49),
        _op("aten::matmul", 112, 30, QK),
        _x("user_annotation", "my_range", 114, 22),
        _op("aten::bmm", 115, 20, BMM, **{"External id": 42}),
        _mem(117, 256),
        _x("kernel", "volta_sgemm_128x64_nn", 20, 8, GPU, correlation=7),
        _x("kernel", "volta_sgemm_128x64_nn", 120, 10, GPU, correlation=99, **{"External id": 42}),
    ]
    return analyze(decode_bytes(json.dumps({"schemaVersion": 1, "traceEvents": events}).encode()))


def _check_links(d: DrillTree) -> None:
    """Ids are positions, each child names its parent, and the tree is depth first."""
    for k, node in enumerate(d.tree):
        assert node.id == k
        for c in node.children:
            assert d.tree[c].parent == k and d.tree[c].depth == node.depth + 1
        if node.parent is None:
            assert node.depth == 0
        else:
            assert k in d.tree[node.parent].children and node.parent < k
    order: list[int] = []

    def walk(i: int) -> None:
        order.append(i)
        for c in d.tree[i].children:
            walk(c)

    for root in (n.id for n in d.tree if n.parent is None):
        walk(root)
    assert order == list(range(len(d.tree)))


def _roots(d: DrillTree) -> list[DrillNode]:
    return [n for n in d.tree if n.parent is None]


def test_call_paths_merge_across_steps_with_their_kernels_and_memory() -> None:
    d = drilldown(_hand_trace(), layer=0, phase="qk_matmul", backward=False)
    _check_links(d)
    assert d.step_count == 2 and d.tree_nodes == 4 and not d.tree_truncated
    big, bmm, kernel, small = d.tree
    # The QK matmul ran once per step: 30 µs each, 10 µs outside its bmm; kernels 8 and 10 µs.
    assert (big.name, big.kind, big.input_dims, big.input_types) == ("aten::matmul", "op", QK, ["float", "float"])
    assert (big.calls, big.cpu_us, big.self_us, big.device_us) == (1.0, 30.0, 10.0, 9.0)
    # Allocated: its own 64 B in step 1, and the bmm's 256 B in each step; host memory and frees
    # are left out: (64 + 256 + 256) / 2 steps = 288 B per step, 32 of them its own.
    assert (big.alloc_bytes, big.self_alloc_bytes) == (288.0, 32.0)
    # The bmm is one node though "my_range" sits between it and the matmul in step 2.
    assert (bmm.name, bmm.parent, bmm.depth, bmm.input_dims) == ("aten::bmm", big.id, 1, BMM)
    assert (bmm.calls, bmm.cpu_us, bmm.self_us, bmm.device_us, bmm.alloc_bytes) == (1.0, 20.0, 20.0, 9.0, 256.0)
    # Both kernels under the bmm: one by correlation, one by External id.
    assert (kernel.name, kernel.kind, kernel.parent) == ("volta_sgemm_128x64_nn", "kernel", bmm.id)
    assert (kernel.calls, kernel.cpu_us, kernel.device_us, kernel.input_dims) == (1.0, 0.0, 9.0, [])
    # The other shapes are another node, a root: in step 1 only, so half a call per step.
    assert (small.name, small.parent, small.children, small.input_dims[1]) == ("aten::matmul", None, [], [2, 4, 8, 32])
    assert (small.calls, small.cpu_us, small.self_us, small.alloc_bytes) == (0.5, 5.0, 5.0, 0.0)
    # Roots the most expensive first: 30 + 9 µs before 5 µs.
    assert [n.id for n in _roots(d)] == [big.id, small.id]
    # The phase's allocations, 32 B outside any op included: (32 + 64 + 256 + 256) / 2.
    assert d.alloc_bytes == 304.0
    # The flat lists by name are what they were: matmul (30 + 10 + 30) / 2 µs over 1.5 calls.
    assert [(o.name, o.calls, o.cpu_us, o.self_us, o.top_level) for o in d.ops] == [
        ("aten::matmul", 1.5, 35.0, 15.0, True), ("aten::bmm", 1.0, 20.0, 20.0, False)]
    assert [(k.name, k.calls, k.device_us) for k in d.kernels] == [("volta_sgemm_128x64_nn", 1.0, 9.0)]


def test_phases_and_the_whole_block() -> None:
    analysis = _hand_trace()
    other = drilldown(analysis, layer=0, phase="other", backward=False)
    assert [(n.name, n.calls, n.cpu_us) for n in other.tree] == [("aten::relu", 0.5, 5.0)]
    block = drilldown(analysis, layer=0, phase=None, backward=False)
    _check_links(block)
    # The small matmul and the relu cost 5 µs each: the tie goes to the one that ran first.
    assert [(n.name, n.cpu_us) for n in _roots(block)] == [("aten::matmul", 30.0), ("aten::matmul", 5.0),
                                                           ("aten::relu", 5.0)]
    assert block.tree_nodes == 5 and block.alloc_bytes == 304.0
    assert drilldown(analysis, layer=0, phase="softmax", backward=False).tree == []  # no softmax ran


def test_the_cut_keeps_the_most_expensive_nodes_with_their_parents() -> None:
    analysis = _hand_trace()
    d = drilldown(analysis, layer=0, phase="qk_matmul", backward=False, max_nodes=2)
    _check_links(d)
    # After the QK matmul (39 µs), its bmm (20 + 9 µs) beats the small matmul (5 µs).
    assert [n.name for n in d.tree] == ["aten::matmul", "aten::bmm"]
    assert d.tree_truncated and d.tree_nodes == 4 and d.max_tree_nodes == 2
    assert d.tree[1].children == [] and d.tree[1].omitted_children == 1
    assert d.tree[0].omitted_children == 0
    # The figures of what is kept do not change.
    whole = drilldown(analysis, layer=0, phase="qk_matmul", backward=False)
    assert msgspec.structs.replace(d.tree[0], children=[1]) == msgspec.structs.replace(whole.tree[0], children=[1])
    assert not whole.tree_truncated and whole.max_tree_nodes > 2


@pytest.mark.parametrize(("layer", "phase", "message"), [
    (-1, None, "layer must be 0 or more"), (3, None, "no layer 3"), (0, "bogus", "unknown phase 'bogus'")])
def test_what_the_trace_lacks_is_a_view_error(layer: int, phase: str | None, message: str) -> None:
    with pytest.raises(ViewError, match=message):
        drilldown(_hand_trace(), layer=layer, phase=phase, backward=False)


@pytest.mark.parametrize("layer", [-1, -(2**62), 999, 2**62])
def test_drilldown_of_a_layer_that_is_not_there(layer: int) -> None:
    stepped = analyze(load_events(str(HAND_TRACES / "steps.json")))
    assert (stepped.attr.layer == -1).any()  # unattributed events carry -1: it must not pass as a layer
    with pytest.raises(ViewError, match=f"layer {layer}|layer must be 0 or more"):
        drilldown(stepped, layer=layer, phase=None, backward=False)


def _real(path: Path) -> Analysis:
    return analyze(load_events(str(path)))


REAL = [
    *sorted(MODEL_TRACES.glob("builtin-naive-infer/**/*.pt.trace.json.gz")),
    *sorted(MODEL_TRACES.glob("hf-gpt2-eager-train/**/*.pt.trace.json.gz")),
    SHARED_TRACES / "gpu" / "tracelens_h100_bert-small_sdpa-flash.json.gz",
    SHARED_TRACES / "gpu" / "switchtransformers_a100_naive-bmm-softmax_fp32.json.gz",
]


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name[:40])
def test_the_tree_adds_up_to_the_summary(path: Path) -> None:
    """For every phase of every layer's forward: the roots' device time (kernels at the root
    included) is the phase's device time, the allocations are the phase's, the nodes' calls are
    the flat lists', and each node holds its children's time and bytes."""
    analysis = _real(path)
    summary = summarize_analysis(analysis)
    checked = 0
    for layer in summary.layers:
        for p in layer.phases:
            d = drilldown(analysis, layer=layer.layer, phase=p.phase, backward=False)
            _check_links(d)
            assert not d.tree_truncated
            roots = _roots(d)
            assert sum(n.device_us for n in roots) == pytest.approx(p.device_us, rel=1e-9, abs=1e-6)
            assert d.alloc_bytes == pytest.approx(p.alloc_bytes, rel=1e-12)
            assert sum(n.alloc_bytes for n in roots) <= d.alloc_bytes * (1 + 1e-12)
            assert sum(n.calls for n in d.tree if n.kind == "op") == pytest.approx(sum(o.calls for o in d.ops))
            assert sum(n.calls for n in d.tree if n.kind != "op") == pytest.approx(sum(k.calls for k in d.kernels))
            for node in d.tree:
                kids = [d.tree[c] for c in node.children]
                assert sum(k.cpu_us for k in kids) <= node.cpu_us + 1e-6
                assert node.self_alloc_bytes + sum(k.alloc_bytes for k in kids) == pytest.approx(node.alloc_bytes)
            checked += 1
    assert checked >= 2
