"""Attribution rules, one hand-written trace each (``traces/``), checked against golden rows.

Each test compares the whole attribution with its golden file and also spells out the few
rows that show the rule, so that a regenerated golden file cannot silently flip a rule.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from tb_attn_plugin.trace.decode import decode_bytes
from tb_attn_plugin.trace.events import Events
from tb_attn_plugin.trace.kineto import Kind

Rows = dict[str, Any]
RowsOf = Callable[[str | Events], Rows]
Golden = Callable[[str, Rows], None]
Row = Callable[..., dict[str, Any]]
TraceEvents = Callable[[str], Events]

GOLDEN_TRACES = ["nesting", "threads", "gpu", "gpu_legacy", "memory", "steps", "backward", "flops"]


def _where(r: dict[str, Any]) -> tuple[Any, ...]:
    return r["layer"], r["head"], r["phase"], r["step"], r["backward"]


def test_nesting_innermost_scope_on_the_thread(rows_of: RowsOf, golden: Golden, row: Row) -> None:
    rows = rows_of("nesting")
    golden("nesting", rows)
    ev = rows["events"]
    # A phase scope inside a block scope: the innermost wins, and so for everything nested deeper.
    assert _where(row(ev, "aten::linear", ts=3.0)) == (0, None, "qkv_proj", None, False)
    assert _where(row(ev, "aten::addmm")) == (0, None, "qkv_proj", None, False)
    # In the block but in no phase: layer 0, phase "other" (null).
    assert _where(row(ev, "aten::mul", ts=32.0)) == (0, None, None, None, False)
    # A foreign record_function inside a phase scope changes nothing.
    assert _where(row(ev, "aten::_softmax", ts=43.0)) == (0, None, "softmax", None, False)
    assert row(ev, "my_label")["scope"] is False
    # A name that looks like ours but has an unknown phase is not a scope: the block still holds.
    assert row(ev, "tbattn.v1/L0/bogus")["scope"] is False
    assert _where(row(ev, "aten::add", ts=63.0)) == (0, None, None, None, False)
    # Per-head mode: projections in the block, heads set `head`, head phases set both.
    assert _where(row(ev, "aten::linear", ts=106.0)) == (1, None, "qkv_proj", None, False)
    assert _where(row(ev, "aten::bmm")) == (1, 0, "qk_matmul", None, False)
    assert _where(row(ev, "aten::mul", ts=132.0)) == (1, 0, None, None, False)
    # H1 starts the moment H0 ends: it is a sibling, not a child of H0.
    assert _where(row(ev, "tbattn.v1/L1/H1")) == (1, 1, None, None, False)
    assert _where(row(ev, "aten::_softmax", ts=152.0)) == (1, 1, "softmax", None, False)
    # After every scope: not attention.
    assert _where(row(ev, "aten::add", ts=200.0)) == (None, None, None, None, False)
    assert rows["modules"] == {"0": "encoder.layer.0.attention"}


def test_scope_does_not_capture_other_threads(rows_of: RowsOf, golden: Golden, row: Row) -> None:
    rows = rows_of("threads")
    golden("threads", rows)
    ev = rows["events"]
    a, b = "4242/4242", "4242/4243"
    assert row(ev, "aten::softmax", track=a)["phase"] == "softmax"
    # Thread B runs during thread A's softmax scope: none of it is attributed.
    assert row(ev, "aten::add", track=b)["layer"] is None
    assert row(ev, "aten::empty", track=b)["layer"] is None
    # Same tid in another process: a different thread.
    assert row(ev, "aten::div", track="4249/4242")["layer"] is None
    # B's own scope covers B's op, not A's op running at the same time.
    assert _where(row(ev, "aten::masked_fill", track=b)) == (1, None, "mask", None, False)
    assert row(ev, "aten::mul", track=a)["layer"] is None


def test_kernels_follow_their_launch(rows_of: RowsOf, golden: Golden, row: Row, trace_events: TraceEvents) -> None:
    rows = rows_of("gpu")
    golden("gpu", rows)
    ev = rows["events"]
    # By correlation with the runtime call (cuda_runtime and cuda_driver), nested in an op in a scope.
    assert _where(row(ev, "volta_sgemm_128x64_nn")) == (0, None, "qk_matmul", 2, False)
    assert _where(row(ev, "softmax_warp_forward")) == (0, None, "softmax", 2, False)
    assert _where(row(ev, "ampere_sgemm_64x32_nn")) == (0, None, "av_matmul", 2, False)
    assert _where(row(ev, "Memcpy DtoD (Device -> Device)")) == (0, None, "av_matmul", 2, False)
    # No runtime call with its correlation: found through the op's External id.
    assert _where(row(ev, "masked_fill_kernel")) == (0, None, "mask", 2, False)
    # Launched outside any scope, inside the step; and launched by nothing we recorded.
    assert _where(row(ev, "vectorized_elementwise_kernel")) == (None, None, None, 2, False)
    assert _where(row(ev, "orphan_kernel")) == (None, None, None, None, False)
    events = trace_events("gpu")
    device = {events.names[n] for n, t in zip(events.name.tolist(), events.track.tolist(), strict=True)
              if events.tracks[t].device}
    assert "ampere_sgemm_64x32_nn" in device and "cudaLaunchKernel" not in device


def test_kernels_follow_their_launch_2021_schema(
    rows_of: RowsOf, golden: Golden, row: Row, trace_events: TraceEvents
) -> None:
    """Capitalised categories (Operator, Runtime, Kernel, Memcpy, Memset), `external id`, string tids."""
    rows = rows_of("gpu_legacy")
    golden("gpu_legacy", rows)
    ev = rows["events"]
    assert _where(row(ev, "aten::bmm")) == (2, None, "qk_matmul", 5, False)
    assert _where(row(ev, "volta_sgemm_128x64_nn")) == (2, None, "qk_matmul", 5, False)
    assert _where(row(ev, "softmax_warp_forward")) == (2, None, "softmax", 5, False)
    assert _where(row(ev, "Memcpy DtoD (Device -> Device)")) == (2, None, "softmax", 5, False)
    # Through the lowercase `external id` when no Runtime event has the correlation.
    assert _where(row(ev, "masked_fill_kernel")) == (2, None, "mask", 5, False)
    assert _where(row(ev, "Memset (Device)")) == (2, None, "mask", 5, False)
    events = trace_events("gpu_legacy")
    kinds = {events.names[n]: Kind(k) for n, k in zip(events.name.tolist(), events.kind.tolist(), strict=True)}
    assert kinds["aten::bmm"] == Kind.CPU_OP
    assert kinds["cudaLaunchKernel"] == Kind.RUNTIME
    assert kinds["volta_sgemm_128x64_nn"] == Kind.KERNEL
    assert kinds["Memcpy DtoD (Device -> Device)"] == Kind.MEMCPY
    assert kinds["Memset (Device)"] == Kind.MEMSET
    assert events.diagnostics == {}


def test_memory_goes_to_the_innermost_event_at_its_time(rows_of: RowsOf, golden: Golden) -> None:
    rows = rows_of("memory")
    golden("memory", rows)
    # Times are relative to the earliest event, here the first memory event (absolute ts 5).
    got = {(r["track"], r["ts"] + 5, r["bytes"]): (r["layer"], r["phase"]) for r in rows["memory"]}
    main = "4242/4242"
    assert got == {
        (main, 5.0, 64): (None, None),  # before any event
        (main, 20.0, 128): (0, "softmax"),  # at the start of aten::softmax
        (main, 22.0, 256): (0, "softmax"),  # inside aten::empty, inside aten::softmax
        (main, 30.0, -128): (0, "softmax"),  # a free, at the end of aten::softmax
        (main, 40.0, 32): (0, "softmax"),  # in the scope after its ops ended
        (main, 60.0, 16): (None, None),  # between scopes
        (main, 80.0, 4096): (0, "mask"),  # a CUDA allocation, recorded on the CPU thread
        (main, 90.0, -4096): (0, "mask"),  # at the end of the scope
        ("4242/4243", 80.0, 8): (None, None),  # another thread, in an op outside scopes
        ("4249/4242", 25.0, 512): (None, None),  # same tid, other process, no events there
    }
    cuda = [r for r in rows["memory"] if r["bytes"] == 4096]
    assert cuda[0]["device"] == [1, 0] and cuda[0]["total"] == 4096


def test_steps_nest_everything_inside(rows_of: RowsOf, golden: Golden, row: Row) -> None:
    rows = rows_of("steps")
    golden("steps", rows)
    ev = rows["events"]
    assert _where(row(ev, "aten::softmax", ts=12.0)) == (0, None, "softmax", 3, False)
    assert row(ev, "aten::add", track="4242/4242")["step"] == 3  # in the step, not in a scope
    # ProfilerStep#4 as a cpu_op (older torch), starting where #3 ends.
    assert row(ev, "ProfilerStep#4")["step"] == 4
    assert _where(row(ev, "aten::softmax", ts=112.0)) == (0, None, "softmax", 4, False)
    assert row(ev, "aten::mul")["step"] is None
    assert row(ev, "aten::div")["step"] is None  # ProfilerStep#x has no number
    assert row(ev, "aten::add", track="4242/4243")["step"] is None  # steps are per thread
    assert [(r["step"], r["phase"]) for r in rows["memory"]] == [(3, "softmax"), (4, None), (None, None)]


def test_an_annotation_across_a_steps_end_holds_events_of_both_steps(rows_of: RowsOf, row: Row) -> None:
    """Lightning's ``run_training_batch`` starts in one profiler step and ends in the next: what
    runs in it belongs to the step it starts in, by time, as it would nested in the step; what
    starts outside every step stays outside."""
    def x(name: str, ts: float, dur: float, cat: str = "cpu_op", tid: int = 1) -> dict[str, Any]:
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur}

    ev = rows_of(decode_bytes(json.dumps({"traceEvents": [
        x("ProfilerStep#1", 0, 100, "user_annotation"), x("ProfilerStep#2", 100, 100, "user_annotation"),
        x("[pl][profile]run_training_batch", 50, 200, "user_annotation"),
        x("aten::mm", 60, 10), x("aten::add", 120, 10), x("aten::mul", 220, 10),
        x("aten::div", 150, 10, tid=2),  # steps are per thread
    ]}).encode()))["events"]
    assert [row(ev, name)["step"] for name in ("[pl][profile]run_training_batch", "aten::mm", "aten::add",
                                               "aten::mul", "aten::div")] == [1, 1, 2, None, None]


def test_backward_takes_the_forward_scope(rows_of: RowsOf, golden: Golden, row: Row) -> None:
    rows = rows_of("backward")
    golden("backward", rows)
    ev = rows["events"]
    engine = "autograd::engine::evaluate_function: "
    # Matched by Sequence number with the forward op inside a scope; nested ops follow.
    assert _where(row(ev, engine + "SoftmaxBackward0")) == (0, None, "softmax", 1, True)
    assert _where(row(ev, "SoftmaxBackward0")) == (0, None, "softmax", 1, True)
    assert _where(row(ev, "aten::_softmax_backward_data")) == (0, None, "softmax", 1, True)
    assert _where(row(ev, engine + "BmmBackward0", ts=170.0)) == (0, None, "av_matmul", 1, True)
    assert _where(row(ev, "aten::bmm", ts=172.0)) == (0, None, "av_matmul", 1, True)
    assert _where(row(ev, "aten::bmm", ts=190.0)) == (0, None, "av_matmul", 1, True)
    assert _where(row(ev, engine + "BmmBackward0", ts=270.0)) == (0, None, "qk_matmul", 1, True)
    assert _where(row(ev, "aten::bmm", ts=272.0)) == (0, None, "qk_matmul", 1, True)
    # The forward op of SumBackward0 lies outside scopes: backward, but not attention.
    assert _where(row(ev, "SumBackward0")) == (None, None, None, 1, True)
    # The forward ops themselves, and the optimizer after backward, are not backward.
    assert _where(row(ev, "aten::_softmax")) == (0, None, "softmax", 1, False)
    assert _where(row(ev, "aten::add_")) == (None, None, None, 1, False)
    mem = rows["memory"]
    assert [(r["layer"], r["phase"], r["backward"]) for r in mem] == [(0, "softmax", True), (None, None, False)]


@pytest.mark.parametrize(("copy", "original"), [("threads_minified", "threads"), ("steps_bare_array", "steps")])
def test_fallback_layouts_attribute_like_kineto_layout(rows_of: RowsOf, golden: Golden, copy: str,
                                                       original: str) -> None:
    """A minified document and a bare event array hold the same events as their Kineto-layout twins."""
    golden(original, rows_of(copy))


@pytest.mark.parametrize("name", GOLDEN_TRACES)
def test_attribution_does_not_depend_on_event_order(
    rows_of: RowsOf, trace_bytes: Callable[[str], bytes], name: str
) -> None:
    """Kineto writes kernels and memory events after the ops, not in time order; the order must not matter."""
    doc = json.loads(trace_bytes(name))
    doc["traceEvents"].reverse()
    assert rows_of(decode_bytes(json.dumps(doc).encode())) == rows_of(name)


# -- bugs found while writing these tests -------------------------------------------------
def test_backward_functions_that_touch(rows_of: RowsOf, row: Row) -> None:
    ev = rows_of("backward_adjacent")["events"]
    engine = "autograd::engine::evaluate_function: "
    assert _where(row(ev, engine + "SoftmaxBackward0")) == (0, None, "softmax", None, True)
    assert _where(row(ev, "SoftmaxBackward0")) == (0, None, "softmax", None, True)
    assert _where(row(ev, engine + "BmmBackward0")) == (0, None, "qk_matmul", None, True)
    assert _where(row(ev, "BmmBackward0")) == (0, None, "qk_matmul", None, True)
    assert _where(row(ev, "aten::add_")) == (None, None, None, None, False)


def test_memory_in_2021_schema_with_string_tids(rows_of: RowsOf) -> None:
    rows = rows_of("legacy_memory")
    assert [(r["layer"], r["phase"], r["step"]) for r in rows["memory"]] == [(0, "softmax", 5)]


def test_scope_written_as_operator_in_2021_schema(rows_of: RowsOf, row: Row) -> None:
    ev = rows_of("legacy_operator_scope")["events"]
    assert _where(row(ev, "aten::softmax")) == (0, None, "softmax", 5, False)
