"""``analysis.collectives`` counts a trace's NCCL/Gloo collectives per step (a call once, its CPU and kernel time) and
finds attention's communication; the tests decode tiny hand-built traces whose calls and times are counted by hand."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from tb_attn_plugin.analysis.attribution.attribute import attribute
from tb_attn_plugin.analysis.attribution.collectives import (
    KINDS_MERGED,
    MAX_KINDS,
    OTHER,
    attention_comm,
    collective_name,
    collectives,
)
from tb_attn_plugin.trace.decode import decode_bytes
from tb_attn_plugin.trace.events import Events
from tb_attn_plugin.types.schema import CollectiveStats

CPU = {"pid": 1, "tid": 1}
GLOO = {"pid": 1, "tid": 2}  # the process group's worker thread
GPU = {"pid": 0, "tid": 7}
NCCL_KERNEL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def _x(cat: str, name: str, ts: float, dur: float, where: dict[str, int] = CPU, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, **where, "args": args}


def _events(events: list[dict[str, Any]]) -> Events:
    # Event times are relative to the trace's first: an op at 0 on a thread of its own keeps them as written,
    # so the steps below are in the same clock.
    anchor = _x("cpu_op", "aten::empty", 0, 1, {"pid": 1, "tid": 99})
    return decode_bytes(json.dumps({"traceEvents": [anchor, *events]}).encode())


def _stats(events: list[dict[str, Any]], steps: list[tuple[float, float]] | None = None,
           diagnostics: dict[str, int] | None = None) -> list[CollectiveStats]:
    ev = _events(events)
    return collectives(ev, attribute(ev).parent, steps or [], diagnostics=diagnostics)


def _nccl_call(t: float, kernel_us: float = 200.0, corr: int = 1) -> list[dict[str, Any]]:
    """PyTorch 2.x's NCCL all_reduce at ``t``: c10d op (50 µs) around record_param_comms around the
    process group's annotation, launching one NCCL kernel of ``kernel_us``."""
    return [_x("cpu_op", "c10d::allreduce_", t, 50), _x("cpu_op", "record_param_comms", t + 2, 40),
            _x("user_annotation", "nccl:all_reduce", t + 4, 30),
            _x("cuda_runtime", "cudaLaunchKernel", t + 10, 5, correlation=corr),
            _x("kernel", NCCL_KERNEL, t + 90, kernel_us, GPU, correlation=corr)]


# -- one call ---------------------------------------------------------------------------------------

def test_a_nested_nccl_call_counts_once_with_its_kernel() -> None:
    # Three nested CPU events and one kernel: one call; CPU time the outermost event's 50 µs, device 200 µs.
    assert _stats(_nccl_call(10)) == [CollectiveStats(name="all_reduce", calls=1.0, cpu_us=50.0, device_us=200.0)]


def test_gloo_work_on_its_own_thread_gives_the_cpu_time() -> None:
    """The calling thread only enqueues (5 µs); the work annotation on Gloo's thread spans the transfer
    and the wait for the other ranks (400 µs): one call, timed by the work."""
    events = [_x("cpu_op", "c10d::allreduce_", 10, 5), _x("cpu_op", "record_param_comms", 11, 3),
              _x("user_annotation", "gloo:all_reduce", 12, 400, GLOO)]
    assert _stats(events) == [CollectiveStats(name="all_reduce", calls=1.0, cpu_us=400.0, device_us=0.0)]


def test_work_recorded_without_its_calling_side_still_counts() -> None:
    events = [_x("user_annotation", "gloo:broadcast", 12, 70, GLOO),
              _x("user_annotation", "gloo:broadcast", 100, 30, GLOO)]
    # Two calls, 70 + 30 µs of work.
    assert _stats(events) == [CollectiveStats(name="broadcast", calls=2.0, cpu_us=100.0, device_us=0.0)]


def test_the_call_is_named_after_the_most_specific_event_inside_it() -> None:
    # record_param_comms alone says "collective"; the nccl annotation inside it names the kind.
    inner = [_x("cpu_op", "record_param_comms", 10, 40), _x("user_annotation", "nccl:all_gather", 12, 30)]
    assert [c.name for c in _stats(inner)] == ["all_gather"]
    alone = [_x("cpu_op", "record_param_comms", 10, 40)]
    assert _stats(alone) == [CollectiveStats(name="collective", calls=1.0, cpu_us=40.0, device_us=0.0)]


def test_kernels_count_the_calls_only_where_the_cpu_side_is_missing() -> None:
    # Two all_gather kernels of 30 and 50 µs and no CPU op: two calls, 80 µs on the device.
    events = [_x("cpu_op", "aten::mm", 0, 5),
              _x("kernel", "ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", 10, 30,
                 GPU),
              _x("kernel", "ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", 60, 50,
                 GPU)]
    assert _stats(events) == [CollectiveStats(name="all_gather", calls=2.0, cpu_us=0.0, device_us=80.0)]
    # With the CPU side: one call whatever the kernels (a call may launch several).
    two_kernels = [*_nccl_call(10, corr=1), _x("kernel", NCCL_KERNEL, 400, 10, GPU, correlation=1)]
    (stat,) = _stats(two_kernels)
    assert (stat.calls, stat.device_us) == (1.0, 200.0 + 10.0)


def test_a_trace_without_collectives_has_none() -> None:
    assert _stats([_x("cpu_op", "aten::broadcast_tensors", 0, 5), _x("cpu_op", "aten::all", 10, 5)]) == []


# -- steps ------------------------------------------------------------------------------------------

def test_figures_are_means_over_the_steps_by_start_time() -> None:
    """Two steps; three calls start inside them (two in the first), one after the last step and one
    between the steps. Per step: 3 / 2 calls, 3 x 50 / 2 µs of CPU, 3 x 200 / 2 µs of kernels."""
    events = [*_nccl_call(10, corr=1), *_nccl_call(300, corr=2), *_nccl_call(1500, corr=3),
              *_nccl_call(1100, corr=4), *_nccl_call(5000, corr=5)]
    steps = [(0.0, 1000.0), (1200.0, 2000.0)]
    expected = [CollectiveStats(name="all_reduce", calls=1.5, cpu_us=75.0, device_us=300.0)]
    assert _stats(events, steps) == expected
    assert _stats(events, list(reversed(steps))) == expected  # steps in any order


def test_a_kernel_belongs_to_the_step_its_start_falls_in() -> None:
    # The call starts at 950, inside the one step; its kernel (on another timeline) at 1040, after it.
    (stat,) = _stats(_nccl_call(950), [(0.0, 1000.0)])
    assert (stat.calls, stat.cpu_us, stat.device_us) == (1.0, 50.0, 0.0)
    # Kineto's steps end where the next begins: a start at the end belongs to the next one.
    (stat,) = _stats(_nccl_call(1000), [(0.0, 1000.0), (1000.0, 2000.0)])
    assert (stat.calls, stat.cpu_us, stat.device_us) == (0.5, 25.0, 100.0)
    assert _stats(_nccl_call(1000), [(0.0, 1000.0)]) == []


def test_without_steps_the_whole_trace_is_one_step() -> None:
    events = [*_nccl_call(10, corr=1), *_nccl_call(5000, corr=2)]
    assert _stats(events) == [CollectiveStats(name="all_reduce", calls=2.0, cpu_us=100.0, device_us=400.0)]


# -- order and bound --------------------------------------------------------------------------------

def test_kinds_are_listed_the_most_expensive_first_then_by_name() -> None:
    events = [_x("user_annotation", "gloo:broadcast", 10, 20, GLOO),
              _x("user_annotation", "gloo:all_reduce", 40, 90, GLOO),
              _x("user_annotation", "gloo:barrier", 200, 20, GLOO)]
    # 90 µs first; broadcast and barrier tie at 20 µs and go by name.
    assert [c.name for c in _stats(events)] == ["all_reduce", "barrier", "broadcast"]


def _kinds(n: int) -> list[dict[str, Any]]:
    """``n`` kinds of Gloo work ("gloo:kind_a", ...), the k-th lasting 1000 - k µs."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    return [_x("user_annotation", f"gloo:kind_{letters[k // 26]}{letters[k % 26]}", 10.0 * k, 1000.0 - k,
               {"pid": 1, "tid": 100 + k}) for k in range(n)]


def test_past_the_bound_the_cheapest_kinds_are_summed_as_one_row() -> None:
    n = MAX_KINDS + 3
    diagnostics: dict[str, int] = {}
    out = _stats(_kinds(n), diagnostics=diagnostics)
    assert len(out) == MAX_KINDS
    assert [c.cpu_us for c in out[:-1]] == [1000.0 - k for k in range(MAX_KINDS - 1)]
    # The rest: kinds MAX_KINDS - 1 .. n - 1, one call each.
    rest = range(MAX_KINDS - 1, n)
    assert out[-1] == CollectiveStats(name=OTHER, calls=float(len(rest)), cpu_us=sum(1000.0 - k for k in rest),
                                      device_us=0.0)
    assert diagnostics == {KINDS_MERGED: len(rest)}
    assert len(_stats(_kinds(n), diagnostics=None)) == MAX_KINDS  # no diagnostics to count in: no crash


def test_at_the_bound_nothing_is_merged() -> None:
    diagnostics: dict[str, int] = {}
    out = _stats(_kinds(MAX_KINDS), diagnostics=diagnostics)
    assert len(out) == MAX_KINDS and OTHER not in [c.name for c in out] and diagnostics == {}


# -- names ------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "expected"), [
    ("rccl:all_reduce", "all_reduce"), ("mpi:barrier", "barrier"), ("ucc:all_to_all", "all_to_all"),
    ("xccl:all_gather", "all_gather"), ("c10d::reduce_scatter_tensor_", "reduce_scatter"),
    ("c10d::allreduce_coalesced_", "all_reduce"), ("rcclKernel_Broadcast_RING_LL", "broadcast"),
    ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL", "reduce_scatter"), ("ncclDevKernel_Recv", "recv"),
    ("ncclKernel_Gather", "gather"),  # no alias: the kernel's word, lower case
    ("nccl:All_Reduce", None), ("nccl:", None), ("c10d::", None), ("my_nccl:all_reduce", None), ("", None),
    # NCCL's symmetric-memory kernels (src/device/symmetric/generate.py)
    ("ncclSymkDevKernel_AllReduce_RSxLD_AGxST_sum_bf16", "all_reduce"),
    # vLLM's collective ops (vllm/distributed/parallel_state.py) and its custom all-reduce (csrc/torch_bindings.cpp,
    # csrc/custom_all_reduce.cuh); TensorRT-LLM's all-reduce fusion as FlashInfer ships it
    ("vllm::all_reduce", "all_reduce"), ("vllm::all_gather", "all_gather"), ("_C_custom_ar::all_reduce", "all_reduce"),
    ("void vllm::cross_device_reduce_2stage<__nv_bfloat16, 2>(vllm::RankData*, vllm::RankSignals, vllm::Signal*, "
     "__nv_bfloat16*, int, int)", "all_reduce"),
    ("void flashinfer::trtllm_allreduce_fusion::allreduce_fusion_kernel_oneshot_lamport<...>(...)", "all_reduce"),
    ("vllm::unified_attention", None),
])
def test_collective_names_beyond_the_common_ones(name: str, expected: str | None) -> None:
    assert collective_name(name) == expected


# -- attention's communication ----------------------------------------------------------------------

def test_attention_comm_takes_the_outermost_attention_op_around_each_call() -> None:
    """Layer 0's out_proj runs a row-parallel op that all-reduces inside; its kernel is attributed to
    attention; a broadcast after the block is not attention's."""
    events = [_x("user_annotation", "tbattn.v1/L0", 0, 1000), _x("user_annotation", "tbattn.v1/L0/out_proj", 10, 500),
              _x("cpu_op", "RowParallelLinear", 20, 400), _x("cpu_op", "aten::mm", 25, 50),
              _x("cpu_op", "c10d::allreduce_", 100, 50), _x("cpu_op", "record_param_comms", 102, 40),
              _x("cuda_runtime", "cudaLaunchKernel", 110, 5, correlation=9),
              _x("kernel", NCCL_KERNEL, 200, 80, GPU, correlation=9),
              _x("cpu_op", "c10d::broadcast_", 2000, 10)]
    ev = _events(events)
    a = attribute(ev)
    cpu, device = attention_comm(ev, a.parent, a.layer, a.is_scope)
    assert [ev.names[ev.name[i]] for i in cpu.tolist()] == ["RowParallelLinear"]
    assert [ev.names[ev.name[i]] for i in device.tolist()] == [NCCL_KERNEL]
    assert cpu.dtype == np.int64


def test_attention_comm_counts_a_nested_top_once_as_the_outer_one() -> None:
    """An op inside the block runs one all-reduce directly and holds a phase scope with another: the
    second's walk stops at the scope, but its top lies inside the first's, so only the outer counts."""
    events = [_x("user_annotation", "tbattn.v1/L0", 0, 1000), _x("cpu_op", "MyAutogradFn", 10, 500),
              _x("cpu_op", "c10d::allreduce_", 20, 10), _x("user_annotation", "tbattn.v1/L0/out_proj", 100, 300),
              _x("cpu_op", "c10d::allreduce_", 110, 10)]
    ev = _events(events)
    a = attribute(ev)
    cpu, device = attention_comm(ev, a.parent, a.layer, a.is_scope)
    assert [ev.names[ev.name[i]] for i in cpu.tolist()] == ["MyAutogradFn"] and device.size == 0


def test_attention_comm_of_a_trace_without_collectives_is_empty() -> None:
    ev = _events([_x("user_annotation", "tbattn.v1/L0", 0, 100), _x("cpu_op", "aten::bmm", 10, 50)])
    a = attribute(ev)
    cpu, device = attention_comm(ev, a.parent, a.layer, a.is_scope)
    assert cpu.size == 0 and device.size == 0


def test_attention_comm_holds_the_comm_phase_and_its_copies() -> None:
    """A ``comm`` phase scope (``roles`` gives one to a collective inside a block) holds vLLM's all-reduce
    op, which copies the input into its buffer (a device-to-device memcpy) and runs NCCL's kernel: the scope
    is the CPU side, the memcpy and the kernel the device side."""
    events = [_x("user_annotation", "tbattn.v1/L0", 0, 1000), _x("user_annotation", "tbattn.v1/L0/comm", 100, 300),
              _x("cpu_op", "vllm::all_reduce", 110, 280),
              _x("cuda_runtime", "cudaMemcpyAsync", 120, 5, correlation=8),
              _x("gpu_memcpy", "Memcpy DtoD (Device -> Device)", 150, 3, GPU, correlation=8),
              _x("cuda_runtime", "cudaLaunchKernel", 130, 5, correlation=9),
              _x("kernel", NCCL_KERNEL, 200, 80, GPU, correlation=9)]
    ev = _events(events)
    a = attribute(ev)
    cpu, device = attention_comm(ev, a.parent, a.layer, a.is_scope, a.phase)
    assert [ev.names[ev.name[i]] for i in cpu.tolist()] == ["tbattn.v1/L0/comm"]
    assert sorted(ev.names[ev.name[i]] for i in device.tolist()) == ["Memcpy DtoD (Device -> Device)", NCCL_KERNEL]
    assert collectives(ev, a.parent, []) == [CollectiveStats(name="all_reduce", calls=1, cpu_us=280, device_us=80)]
