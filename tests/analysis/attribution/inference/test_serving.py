"""Serving engines' attention cores found without modules (analysis/attribution/inference/serving.py):
``serving_cores`` on tiny hand-written traces of vLLM and SGLang ops, each core paired with the KV-cache write
the engine runs just before it where there is one, and the walk back stopped by anything that is not the
core's own (another op, an annotation, another thread, a core nested in a core)."""

from __future__ import annotations

import json
from typing import Any

from tb_attn_plugin.analysis.attribution.attribute import attribute
from tb_attn_plugin.analysis.attribution.inference.serving import serving_cores
from tb_attn_plugin.trace.decode import decode_bytes
from tb_attn_plugin.trace.events import Events
from tb_attn_plugin.trace.kineto import Kind

CORE = "vllm::unified_attention_with_output"
WRITE = "vllm::unified_kv_cache_update"


def _x(cat: str, name: str, ts: float, dur: float, tid: int = 1) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": tid, "args": {}}


def _op(name: str, ts: float, dur: float = 2, tid: int = 1) -> dict[str, Any]:
    return _x("cpu_op", name, ts, dur, tid)


def _launch(ts: float) -> dict[str, Any]:
    return _x("cuda_runtime", "cudaLaunchKernel", ts, 0.5)


def _decode(events: list[dict[str, Any]]) -> Events:
    return decode_bytes(json.dumps({"traceEvents": events}).encode())


def _cores(events: list[dict[str, Any]]) -> list[tuple[str, float, str, float]]:
    """Each core found as (first event's name and start, the core's name and start), the starts as
    written (the decoder counts time from the trace's first event)."""
    ev = _decode(events)
    t0 = min(e["ts"] for e in events)
    found = serving_cores(ev, attribute(ev).parent, ev.kind == Kind.CPU_OP)
    return [(ev.names[ev.name[a]], float(ev.ts[a]) + t0, ev.names[ev.name[b]], float(ev.ts[b]) + t0)
            for a, b in found]


def test_a_trace_without_serving_cores_has_none() -> None:
    assert _cores([_op("aten::linear", 0), _op(WRITE, 5), _op("aten::scaled_dot_product_attention", 10)]) == []


def test_vllm_core_starts_at_the_kv_write_before_it() -> None:
    # write (launching its kernel), the output's allocation and a view, then the core.
    events = [_op(WRITE, 10, 5), _launch(11), _op("aten::empty", 16, 1), _launch(17), _op("aten::view", 18, 1),
              _op("_C::weak_ref_tensor", 19, 0.5), _op(CORE, 20, 30)]
    assert _cores(events) == [(WRITE, 10, CORE, 20)]


def test_a_core_without_a_write_is_its_own_start() -> None:
    assert _cores([_op("aten::empty", 5), _op(CORE, 20, 30)]) == [(CORE, 20, CORE, 20)]


def test_another_op_between_write_and_core_ends_the_walk() -> None:
    # The projection is not the core's: the write before it belongs to something else.
    events = [_op(WRITE, 10), _op("aten::linear", 14), _op(CORE, 20, 30)]
    assert _cores(events) == [(CORE, 20, CORE, 20)]


def test_an_annotation_between_write_and_core_ends_the_walk() -> None:
    events = [_op(WRITE, 10), _x("user_annotation", "Torch-Compiled Region: 0/1", 14, 3), _op(CORE, 20, 30)]
    assert _cores(events) == [(CORE, 20, CORE, 20)]


def test_each_layer_gets_its_own_write() -> None:
    # Layer 1's walk back stops at layer 0's core: a core is not what runs between a write and its core.
    events = [_op(WRITE, 0), _op(CORE, 5, 10), _op(WRITE, 20), _op(CORE, 25, 10)]
    assert _cores(events) == [(WRITE, 0, CORE, 5), (WRITE, 20, CORE, 25)]


def test_only_outermost_cores_count() -> None:
    # vLLM's op calling its CUDA paged attention op: one core, the outer one.
    events = [_op(WRITE, 0), _op(CORE, 5, 20), _op("_C::paged_attention_v1", 6, 10)]
    assert _cores(events) == [(WRITE, 0, CORE, 5)]


def test_ops_nested_in_an_earlier_sibling_do_not_end_the_walk() -> None:
    # The write's own children (a cache kernel's op) sit at another depth: skipped, not a stop.
    events = [_op(WRITE, 0, 10), _op("_C_cache_ops::reshape_and_cache_flash", 1, 5), _op("aten::copy_", 7, 1),
              _op(CORE, 12, 10)]
    assert _cores(events) == [(WRITE, 0, CORE, 12)]


def test_a_write_on_another_thread_is_not_the_cores() -> None:
    events = [_op(WRITE, 10, 2, tid=2), _op(CORE, 20, 30, tid=1)]
    assert _cores(events) == [(CORE, 20, CORE, 20)]


def test_a_write_too_far_back_is_not_reached() -> None:
    # 64 events are looked at; 70 allowed ops between push the write out of reach.
    between = [_op("aten::empty", 1 + k * 0.1, 0.05) for k in range(70)]
    assert _cores([_op(WRITE, 0, 0.5), *between, _op(CORE, 20, 5)]) == [(CORE, 20, CORE, 20)]
    near = [_op("aten::empty", 1 + k * 0.1, 0.05) for k in range(62)]
    assert _cores([_op(WRITE, 0, 0.5), *near, _op(CORE, 20, 5)]) == [(WRITE, 0, CORE, 20)]


def test_sglang_profiler_names_are_read_without_their_counter() -> None:
    write = "sglang_profiler::memory_pool__set_kv_buffer_impl_3"
    core = "sglang_profiler::decode_attention_decode_attention_fwd_17"
    store, unified = "sglang::store_cache", "sglang::unified_attention_with_output"
    events = [_op(write, 0), _op(core, 5, 10), _op(store, 20), _op(unified, 25, 10)]
    assert _cores(events) == [(write, 0, core, 5), (store, 20, unified, 25)]
    # A counter is no part of a name elsewhere: vLLM's op with a suffix is no core.
    assert _cores([_op(CORE + "_3", 0)]) == []


def test_only_the_cpu_ops_given_are_cores() -> None:
    ev = _decode([_op(WRITE, 0), _op(CORE, 5, 10)])
    parent = attribute(ev).parent
    # The caller passes forward CPU ops only: a core left out is not found, nor is a write left out.
    assert serving_cores(ev, parent, ev.kind < 0) == []
    only_core = (ev.kind == Kind.CPU_OP) & (ev.ts > 1)
    assert serving_cores(ev, parent, only_core) == [(1, 1)]
