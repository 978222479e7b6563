"""``analysis.drilldown`` lays one layer and phase's ops out as a tree of call paths with the device work and memory
each accounts for; these tests cover what ``test_drilldown_tree.py`` does not (backward, memcpy and memset, device
work launched from no op, implausible shapes, the step filter, an empty cut) on hand-built traces, figures by hand."""

from __future__ import annotations

import json
from typing import Any

import pytest
from helpers import HAND_TRACES

from tb_attn_plugin.analysis.attribution.analyze import Analysis, analyze
from tb_attn_plugin.analysis.views.drilldown import MAX_TREE_NODES, drilldown
from tb_attn_plugin.trace.decode import decode_bytes
from tb_attn_plugin.types.views import DrillTree

CPU, GPU = {"pid": 1, "tid": 1}, {"pid": 0, "tid": 7}
#: Dims that claim a tensor of 2¹²⁰ elements: no such tensor exists, so the shapes are not believed.
IMPOSSIBLE = [[2**40, 2**40, 2**40], [2**40, 2**40, 2**40]]


def _x(cat: str, name: str, ts: float, dur: float, where: dict[str, int] = CPU, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, **where, "args": args}


def _analysis(events: list[dict[str, Any]]) -> Analysis:
    return analyze(decode_bytes(json.dumps({"schemaVersion": 1, "traceEvents": events}).encode()))


def _device_trace() -> Analysis:
    """One step of layer 0 (a second block runs after the step). Its qk_matmul phase: a bmm (28 µs)
    with impossible shapes launching a GEMM (20 µs); a bmm (25 µs) without shapes doing a memcpy
    (6 µs) and a memset (2 µs); and a kernel (30 µs) launched straight from the phase scope, by no op.
    The softmax phase holds a matmul (40 µs) that encloses the av_matmul scope and its bmm (20 µs)."""
    return _analysis([
        _x("user_annotation", "ProfilerStep#1", 0, 200),
        _x("user_annotation", "tbattn.v1/L0", 10, 180),
        _x("user_annotation", "tbattn.v1/L0/qk_matmul", 11, 100),
        _x("cpu_op", "aten::bmm", 12, 28, **{"Input Dims": IMPOSSIBLE, "Input type": ["float", "float"]}),
        _x("cuda_runtime", "cudaLaunchKernel", 14, 3, correlation=1),
        _x("cpu_op", "aten::bmm", 45, 25),
        _x("cuda_runtime", "cudaMemcpyAsync", 47, 3, correlation=2),
        _x("cuda_runtime", "cudaMemsetAsync", 51, 2, correlation=3),
        _x("cuda_runtime", "cudaLaunchKernel", 80, 3, correlation=4),
        _x("kernel", "gemm_a", 50, 20, GPU, correlation=1),
        _x("gpu_memcpy", "Memcpy DtoD (Device -> Device)", 80, 6, GPU, correlation=2),
        _x("gpu_memset", "Memset (Device)", 90, 2, GPU, correlation=3),
        _x("kernel", "custom_kernel", 100, 30, GPU, correlation=4),
        _x("user_annotation", "tbattn.v1/L0/softmax", 120, 50),
        _x("cpu_op", "aten::matmul", 121, 40),
        _x("user_annotation", "tbattn.v1/L0/av_matmul", 122, 30),
        _x("cpu_op", "aten::bmm", 123, 20),
        # After the profiled step: the same block again, which no figure counts.
        _x("user_annotation", "tbattn.v1/L0", 300, 100),
        _x("user_annotation", "tbattn.v1/L0/qk_matmul", 301, 90),
        _x("cpu_op", "aten::bmm", 302, 50),
    ])


@pytest.fixture(scope="module")
def qk() -> DrillTree:
    return drilldown(_device_trace(), layer=0, phase="qk_matmul", backward=False)


def test_memcpy_and_memset_are_their_own_kinds_under_their_op(qk: DrillTree) -> None:
    bmm, gemm, memcpy, memset, _ = qk.tree
    assert [(n.kind, n.name, n.parent, n.device_us) for n in (gemm, memcpy, memset)] == [
        ("kernel", "gemm_a", bmm.id, 20.0), ("memcpy", "Memcpy DtoD (Device -> Device)", bmm.id, 6.0),
        ("memset", "Memset (Device)", bmm.id, 2.0)]
    # The op holds its device work: 20 + 6 + 2 µs; the children go the most expensive first.
    assert bmm.device_us == 28.0 and bmm.children == [gemm.id, memcpy.id, memset.id]


def test_device_work_launched_by_no_op_of_the_scope_is_a_root(qk: DrillTree) -> None:
    roots = [n for n in qk.tree if n.parent is None]
    assert [(n.kind, n.name) for n in roots] == [("op", "aten::bmm"), ("kernel", "custom_kernel")]
    # The bmm's 53 µs of CPU and 28 µs of device before the kernel's 30 µs; the roots' device time is the phase's.
    assert sum(n.device_us for n in roots) == 28.0 + 30.0
    assert qk.tree_nodes == 5 and not qk.tree_truncated


def test_impossible_shapes_are_no_shapes_and_merge_with_the_unshaped_calls(qk: DrillTree) -> None:
    bmm = qk.tree[0]
    # The two bmm calls are one call path once the impossible shapes are dropped: 28 + 25 µs.
    assert (bmm.calls, bmm.cpu_us, bmm.self_us, bmm.input_dims, bmm.input_types) == (2.0, 53.0, 53.0, [], [])


def test_the_flat_lists_by_name_and_the_step_filter(qk: DrillTree) -> None:
    # Only the profiled step: the block after it (a 50 µs bmm) is left out; one step.
    assert qk.step_count == 1
    assert [(o.name, o.calls, o.cpu_us, o.top_level) for o in qk.ops] == [("aten::bmm", 2.0, 53.0, True)]
    # Kernels, memcpy and memset, the most device time first, whichever op (or none) launched them.
    assert [(k.name, k.device_us) for k in qk.kernels] == [
        ("custom_kernel", 30.0), ("gemm_a", 20.0), ("Memcpy DtoD (Device -> Device)", 6.0), ("Memset (Device)", 2.0)]


def test_an_op_inside_an_op_of_another_phase_is_a_root_but_not_top_level() -> None:
    """The av_matmul bmm runs inside the softmax phase's matmul: in its phase's tree nothing encloses
    it, but the flat list says it is not a top-level op."""
    analysis = _device_trace()
    av = drilldown(analysis, layer=0, phase="av_matmul", backward=False)
    (bmm,) = av.tree
    assert (bmm.name, bmm.parent, bmm.depth, bmm.cpu_us) == ("aten::bmm", None, 0, 20.0)
    assert [(o.name, o.top_level) for o in av.ops] == [("aten::bmm", False)]
    softmax = drilldown(analysis, layer=0, phase="softmax", backward=False)
    (matmul,) = softmax.tree
    # Its self time leaves out the bmm nested in it, though that bmm is another phase's: 40 - 20 µs.
    assert (matmul.name, matmul.cpu_us, matmul.self_us, matmul.children) == ("aten::matmul", 40.0, 20.0, [])


def test_a_cut_to_no_nodes_lists_none_and_says_so() -> None:
    d = drilldown(_device_trace(), layer=0, phase="qk_matmul", backward=False, max_nodes=0)
    assert (d.tree, d.tree_nodes, d.tree_truncated, d.max_tree_nodes) == ([], 5, True, 0)
    # The flat lists are not cut.
    assert len(d.ops) == 1 and len(d.kernels) == 4


def test_the_default_cut_is_the_bound() -> None:
    d = drilldown(_device_trace(), layer=0, phase=None, backward=False)
    assert d.max_tree_nodes == MAX_TREE_NODES and not d.tree_truncated


def test_without_steps_every_block_counts_as_one_step() -> None:
    events = [_x("user_annotation", "tbattn.v1/L0", 10, 100), _x("user_annotation", "tbattn.v1/L0/qk_matmul", 11, 90),
              _x("cpu_op", "aten::bmm", 12, 30),
              _x("user_annotation", "tbattn.v1/L0", 300, 100),
              _x("user_annotation", "tbattn.v1/L0/qk_matmul", 301, 90), _x("cpu_op", "aten::bmm", 302, 50)]
    d = drilldown(_analysis(events), layer=0, phase="qk_matmul", backward=False)
    (bmm,) = d.tree
    assert d.step_count == 1 and (bmm.calls, bmm.cpu_us) == (2.0, 30.0 + 50.0)


# -- backward ------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def backward() -> Analysis:
    """``tests/traces/backward.json``: one step of layer 0's forward (qk_matmul bmm, softmax, av_matmul
    bmm) and its backward, matched by sequence number (BmmBackward0 twice, SoftmaxBackward0), with
    1024 B of host memory allocated inside ``_softmax_backward_data`` on a CPU-only trace."""
    return analyze(decode_bytes((HAND_TRACES / "backward.json").read_bytes()))


def test_a_backward_phase_is_its_autograd_functions_call_path(backward: Analysis) -> None:
    d = drilldown(backward, layer=0, phase="av_matmul", backward=True)
    assert d.backward and d.step_count == 1
    engine, fn, bmm = d.tree
    assert [(n.name, n.depth) for n in d.tree] == [
        ("autograd::engine::evaluate_function: BmmBackward0", 0), ("BmmBackward0", 1), ("aten::bmm", 2)]
    # evaluate_function 40 µs around BmmBackward0's 38: 2 µs its own; BmmBackward0 around two bmm of 17 and
    # 18 µs: 3 µs its own; the two bmm are one call path (no shapes), 35 µs.
    assert (engine.cpu_us, engine.self_us) == (40.0, 2.0)
    assert (fn.cpu_us, fn.self_us) == (38.0, 3.0)
    assert (bmm.calls, bmm.cpu_us, bmm.self_us) == (2.0, 35.0, 35.0)
    assert [(o.name, o.top_level) for o in d.ops] == [
        ("autograd::engine::evaluate_function: BmmBackward0", True), ("BmmBackward0", False), ("aten::bmm", False)]


def test_backward_memory_on_a_cpu_trace_is_counted_where_it_was_allocated(backward: Analysis) -> None:
    d = drilldown(backward, layer=0, phase="softmax", backward=True)
    engine, fn, data = d.tree
    # The CPU is the memory device of a trace with no device memory: its 1024 B count, under the op that
    # allocated them and every op around it; the free after the step does not.
    assert d.alloc_bytes == 1024.0
    assert (data.name, data.self_alloc_bytes, data.alloc_bytes) == ("aten::_softmax_backward_data", 1024.0, 1024.0)
    assert (engine.alloc_bytes, engine.self_alloc_bytes, fn.alloc_bytes) == (1024.0, 0.0, 1024.0)


def test_the_forward_and_the_backward_of_a_phase_are_apart(backward: Analysis) -> None:
    fwd = drilldown(backward, layer=0, phase="av_matmul", backward=False)
    assert [(n.name, n.cpu_us) for n in fwd.tree] == [("aten::bmm", 26.0)]
    whole = drilldown(backward, layer=0, phase=None, backward=True)
    # Every backward phase: two BmmBackward0 paths (40 µs each) merge into one root before SoftmaxBackward0's 40 µs.
    assert [(n.name, n.calls, n.cpu_us) for n in whole.tree if n.parent is None] == [
        ("autograd::engine::evaluate_function: BmmBackward0", 2.0, 80.0),
        ("autograd::engine::evaluate_function: SoftmaxBackward0", 1.0, 40.0)]
    assert whole.alloc_bytes == 1024.0 and not fwd.alloc_bytes


def test_a_layer_with_no_backward_gives_an_empty_tree_not_an_error() -> None:
    d = drilldown(_device_trace(), layer=0, phase=None, backward=True)
    assert (d.tree, d.ops, d.kernels, d.tree_nodes, d.alloc_bytes) == ([], [], [], 0, 0.0)
    assert not d.tree_truncated
