"""The pure path's column builder (``trace/columns.py``): events decoded by msgspec, or leniently
where msgspec refuses them, appended to numpy columns with names, tracks and shapes interned as
first seen. Small hand-written batches go through ``add_batch(..., scan=False)`` and ``Builder``
directly; each column, id and diagnostic is checked against what the batch holds.
"""

from __future__ import annotations

import json
import pickle
from typing import Any

import numpy as np
import pytest

from tb_attn_plugin.trace.coerce import MAX_NAME_CHARS, MAX_SIZE
from tb_attn_plugin.trace.columns import CLIPPED_NAMES, Builder, add_batch, add_loaded
from tb_attn_plugin.trace.events import TraceError
from tb_attn_plugin.trace.kineto import Kind

LENIENT = "events decoded leniently"


def _x(name: str, ts: float, dur: float = 1.0, cat: str | None = "cpu_op", pid: int | str = 1, tid: int | str = 1,
       **args: Any) -> dict[str, Any]:
    event: dict[str, Any] = {"ph": "X", "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
    if cat is not None:
        event["cat"] = cat
    if args:
        event["args"] = args
    return event


def _mem(ts: float, **args: Any) -> dict[str, Any]:
    return {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": ts, "args": args}


def _add(builder: Builder, *events: dict[str, Any]) -> None:
    add_batch(builder, json.dumps(list(events)).encode(), scan=False)


def _col(builder: Builder, key: str) -> list[Any]:
    return builder.x[key].tolist()


def _state(b: Builder) -> dict[str, Any]:
    return {"names": list(b.names), "name_ids": dict(b.name_ids), "aliases": list(b.aliases),
            "shape_name": dict(b.shape_name), "tracks": list(b.tracks), "track_ids": dict(b.track_ids),
            "norm_ids": dict(b.norm_ids), "device": set(b.device_tracks), "shapes": list(b.shapes),
            "shape_ids": dict(b.shape_ids), "diag": dict(b.diag),
            "x": {k: v.tobytes() for k, v in b.x.items()}, "m": {k: v.tobytes() for k, v in b.m.items()}}


# -- interning -------------------------------------------------------------------------------
def test_names_are_interned_in_order_of_first_appearance_across_batches() -> None:
    b = Builder()
    _add(b, _x("b", 0), _x("a", 1), _x("b", 2))
    _add(b, _x("c", 3), _x("a", 4))
    assert b.names == ["b", "a", "c"]
    assert _col(b, "name") == [0, 1, 0, 2, 1]


def test_a_lone_surrogate_is_the_same_name_as_its_replacement() -> None:
    b = Builder()
    lone = b.intern("x\ud800")
    assert b.names == ["x\ufffd"] and b.aliases == ["x\ud800"]
    assert b.name_id("x\ufffd") == lone == b.name_id("x\ud800") == 0


def test_names_that_differ_past_the_limit_are_one_clipped_name_counted_once() -> None:
    b = Builder()
    over = "a" * (MAX_NAME_CHARS + 1)
    other = "a" * (MAX_NAME_CHARS - 1) + "b" * 5  # the same first 1999 characters
    _add(b, _x(over, 0), _x(other, 1), _x("short", 2))
    clipped = "a" * (MAX_NAME_CHARS - 1) + "…"
    assert b.names == [clipped, "short"] and _col(b, "name") == [0, 0, 1]
    assert b.aliases == []  # a clipped name is not kept as written: it could be of any size
    events = b.finish({})
    assert events.diagnostics[CLIPPED_NAMES] == 1
    assert CLIPPED_NAMES == "names longer than 2000 characters (clipped)"


def test_a_thread_of_digits_and_of_an_int_are_one_track() -> None:
    b = Builder()
    _add(b, _x("a", 0, pid="25738", tid="7"), _x("a", 1, pid=25738, tid=7), _x("a", 2, pid="Spans", tid=7))
    assert b.tracks == [(25738, 7), ("Spans", 7)]
    assert _col(b, "track") == [0, 0, 1]
    assert b.track_ids == {("25738", "7"): 0, (25738, 7): 0, ("Spans", 7): 1}


@pytest.mark.parametrize(("name", "kept"), [
    ("aten::mm", True), ("aten::t", False),
    ("sglang_profiler::attention_paged_attention_ragged_3", True),  # SGLang's counter suffix is not the op
    ("sglang_profiler::attention_paged_attention_ragged_x", False),
])
def test_shapes_are_kept_only_for_the_ops_the_analysis_reads(name: str, kept: bool) -> None:
    b = Builder()
    _add(b, _x(name, 0, **{"Input Dims": [[2, 3], [3, 4]], "Input type": ["float", "float"]}))
    assert _col(b, "shape") == ([0] if kept else [-1])
    assert [s.dims for s in b.shapes] == ([([2, 3], [3, 4])] if kept else [])


def test_equal_shapes_are_interned_once_and_an_op_without_dims_has_none() -> None:
    b = Builder()
    dims = {"Input Dims": [[2, 3], [3, 4]]}
    _add(b, _x("aten::mm", 0, **dims), _x("aten::mm", 1), _x("aten::mm", 2, **dims),
         _x("aten::mm", 3, **{"Input Dims": [[1]]}))
    assert _col(b, "shape") == [0, -1, 0, 1]
    assert [s.dims for s in b.shapes] == [([2, 3], [3, 4]), ([1],)]


# -- what each event becomes ---------------------------------------------------------------
def test_kinds_module_events_and_device_tracks() -> None:
    b = Builder()
    _add(b, _x("aten::mm", 0), _x("cudaLaunchKernel", 1, cat="cuda_runtime"),
         _x("gemm", 2, cat="kernel", pid=0, tid=7), _x("Memcpy HtoD", 3, cat="gpu_memcpy", pid=0, tid=8),
         _x("nn.Module: Linear_0", 4, cat="python_function"), _x("model.py(3): forward", 5, cat="python_function"))
    # The Python frame that is no nn.Module is dropped without a count; the module event is kept.
    assert b.names == ["aten::mm", "cudaLaunchKernel", "gemm", "Memcpy HtoD", "nn.Module: Linear_0"]
    assert _col(b, "kind") == [Kind.CPU_OP, Kind.RUNTIME, Kind.KERNEL, Kind.MEMCPY, Kind.MODULE]
    assert b.tracks == [(1, 1), (0, 7), (0, 8)] and b.device_tracks == {1, 2}
    assert b.diag == {}


def test_unusable_times_are_dropped_and_negative_durations_zeroed() -> None:
    b = Builder()
    _add(b, _x("ok", 1e20), _x("far", 1.0000001e20), _x("before", -1e21), _x("long", 0, dur=1e21),
         _x("negative", 2, dur=-5), _x("very negative", 3, dur=-1e30))
    # |ts| <= 1e20 and dur <= 1e20 are usable; a negative duration of any size is set to 0.
    assert b.names == ["ok", "negative", "very negative"]
    assert _col(b, "dur") == [1.0, 0.0, 0.0]
    assert b.diag == {"events with unusable times": 3, "negative durations (set to 0)": 2}


def test_nan_times_send_the_batch_down_the_lenient_path_and_are_dropped() -> None:
    b = Builder()
    add_batch(b, b'[{"ph": "X", "name": "a", "ts": NaN, "dur": 1}, {"ph": "X", "name": "b", "ts": 4, "dur": 1}]',
              scan=False)
    assert b.names == ["b"] and _col(b, "ts") == [4.0]
    assert b.diag == {LENIENT: 2, "events with unusable times": 1}


def test_categories_the_analyses_do_not_read_are_counted_by_name() -> None:
    b = Builder()
    long_category = "c" * (MAX_NAME_CHARS + 100)
    _add(b, _x("a", 0, cat="my_category"), _x("b", 1, cat="my_category"), _x("c", 2, cat="Trace"),
         _x("d", 3, cat=""), _x("e", 4, cat=None), _x("f", 5, cat=long_category))
    # "Trace", "" and no category are not counted; a long category is named clipped (2000 characters).
    assert b.diag == {"category 'my_category'": 2, f"category '{'c' * (MAX_NAME_CHARS - 1)}…'": 1}
    assert _col(b, "kind") == [Kind.OTHER] * 6


def test_ids_read_either_spelling_of_the_external_id_and_absent_is_minus_one() -> None:
    b = Builder()
    _add(b, _x("a", 0, **{"External id": 3, "correlation": 10, "Sequence number": 20}),
         _x("b", 1, **{"external id": 4}), _x("c", 2),
         _x("d", 3, **{"External id": 5, "external id": 6, "graph id": 7}))  # both: the current spelling wins
    assert _col(b, "ext") == [3, 4, -1, 5]
    assert _col(b, "corr") == [10, -1, -1, -1] and _col(b, "seq") == [20, -1, -1, -1]
    assert _col(b, "graph") == [-1, -1, -1, 7]  # a replayed kernel's graph (CUDA 12+)


def test_args_null_reads_as_no_arguments() -> None:
    b = Builder()
    add_batch(b, b'[{"ph": "X", "name": "a", "ts": 1, "dur": 1, "args": null}]', scan=False)
    assert (_col(b, "ext"), _col(b, "shape"), b.diag) == ([-1], [-1], {})


def test_memory_events_keep_sizes_and_devices_in_range() -> None:
    b = Builder()
    _add(b, _mem(1, **{"Bytes": 1024, "Total Allocated": 4096, "Device Type": 1, "Device Id": 0}),
         _mem(2, **{"Bytes": -1024}),
         _mem(3, **{"Bytes": 8, "Total Allocated": MAX_SIZE + 1, "Device Type": 200, "Device Id": 2**31}),
         _mem(4, **{"Bytes": 8, "Device Type": -1, "Device Id": -3}),
         _mem(5, **{"Total Allocated": 1}),  # no Bytes: not a memory event we can use
         _mem(6, **{"Bytes": MAX_SIZE + 1}),
         {"ph": "i", "name": "other instant", "ts": 7, "args": {"Bytes": 1}},  # not memory, not complete
         _x("[memory]", 8, cat=None))  # a complete event of that name, on the same thread
    m = {k: v.tolist() for k, v in b.m.items()}
    assert m == {"ts": [1.0, 2.0, 3.0, 4.0], "track": [0, 0, 0, 0], "bytes": [1024, -1024, 8, 8],
                 "total": [4096, -1, -1, -1], "dtype": [1, -1, -1, -1], "did": [0, -1, -1, -1]}
    assert b.diag == {"memory events without Bytes": 1,
                      "memory events dropped (time not finite or Bytes out of range)": 1}
    assert b.names == ["[memory]"] and _col(b, "ts") == [8.0]


# -- lenient decoding, errors and rollback ---------------------------------------------------
def test_an_int_past_int64_rolls_the_batch_back_before_the_lenient_path() -> None:
    """msgspec takes the batch, the int64 column refuses 2**64 after names are interned: the batch
    is rolled back and decoded once, leniently, with that id absent."""
    b = Builder()
    _add(b, _x("first", 1), _x("second", 2, correlation=2**64))
    assert b.names == ["first", "second"] and len(b.x["name"]) == 2
    assert _col(b, "corr") == [-1, -1]
    assert b.diag == {LENIENT: 2}


def test_rollback_forgets_everything_added_after_the_mark() -> None:
    b = Builder()
    _add(b, _x("aten::mm", 0, **{"Input Dims": [[1]]}), _mem(1, Bytes=4))
    before = _state(b)
    mark = b.mark()
    _add(b, _x("x\ud800", 2, pid=9, tid=9), _x("aten::mm", 3, **{"Input Dims": [[2]]}),
         _x("k", 4, cat="kernel", pid=0, tid=3), _x("odd", 5, cat="odd"), _mem(6, Bytes=8))
    assert _state(b) != before
    b.rollback(mark)
    assert _state(b) == before
    # And the builder goes on as if the batch had never come.
    _add(b, _x("x\ud800", 7))
    assert b.names == ["aten::mm", "x\ufffd"] and b.aliases == ["x\ud800"]


@pytest.mark.parametrize(("text", "message"), [
    (b"[1,", "invalid JSON in traceEvents"),
    (b"[{\"ph\": \"X\"} junk]", "invalid JSON in traceEvents"),
    (b'{"ph": "X"}', "traceEvents is not a list"),
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
])
def test_a_batch_that_is_no_array_of_events_is_a_trace_error(text: bytes, message: str) -> None:
    b = Builder()
    with pytest.raises(TraceError, match=message):
        add_batch(b, text, scan=False)
    assert b.names == [] and len(b.x["name"]) == 0


def test_add_loaded_skips_what_is_not_an_object() -> None:
    b = Builder()
    add_loaded(b, [1, "x", None, [2], _x("a", 1)])
    assert b.names == ["a"] and _col(b, "ts") == [1.0]
    with pytest.raises(TraceError, match="not a list"):
        add_loaded(b, {"a": 1})


# -- parts merged ----------------------------------------------------------------------------
def test_an_exported_builder_merges_as_if_its_batches_were_added_here() -> None:
    first = [_x("a", 0), _x("aten::mm", 1, **{"Input Dims": [[1, 2]]}), _x("b", 2)]
    second = [_x("b", 3, pid=2, tid=2), _x("c", 4, cat="kernel", pid=0, tid=1), _x("aten::mm", 5),
              _x("aten::mm", 6, **{"Input Dims": [[3]]}), _x("d", 7, cat="odd"), _mem(8, Bytes=16)]
    here, there, whole = Builder(), Builder(), Builder()
    _add(here, *first)
    _add(there, *second)
    _add(whole, *first)
    _add(whole, *second)
    here.merge(pickle.loads(pickle.dumps(there.export())))  # plain data, as from another process
    # "there" numbered b, c, aten::mm as 0, 1, 2; here they are 2, 3, 1. Its shape 0 is here's 1;
    # its track (2, 2) is here's 1, (0, 1) here's 2 (a device track).
    assert here.names == ["a", "aten::mm", "b", "c", "d"]
    assert _col(here, "name") == [0, 1, 2, 2, 3, 1, 1, 4]
    assert _col(here, "shape") == [-1, 0, -1, -1, -1, -1, 1, -1]
    assert _col(here, "track") == [0, 0, 0, 1, 2, 0, 0, 0]
    assert here.device_tracks == {2} and here.diag == {"category 'odd'": 1}
    assert _state(here) == _state(whole)


def test_merged_diagnostics_add_up() -> None:
    here, there = Builder(), Builder()
    _add(here, _x("a", 0, dur=-1), _x("u", 1, cat="odd"))
    _add(there, _x("b", 0, dur=-2), _x("c", 0, dur=-3), _x("v", 1, cat="odd"))
    here.merge(there.export())
    assert here.diag == {"negative durations (set to 0)": 3, "category 'odd'": 2}


# -- finish ------------------------------------------------------------------------------------
def test_finish_sorts_by_track_start_and_longest_first_relative_to_the_first_event() -> None:
    b = Builder()
    _add(b, _x("late", 30, dur=1), _x("other thread", 20, tid=2), _x("short", 10, dur=2), _x("long", 10, dur=9),
         _mem(5, Bytes=4))
    e = b.finish({})
    # t0 is the earliest time, the memory event's (5): complete events start 5, 5, 25 and 15 after it.
    assert e.meta.t0_us == 5.0 and e.mem_ts.tolist() == [0.0]
    assert [e.names[i] for i in e.name.tolist()] == ["long", "short", "late", "other thread"]
    assert e.ts.tolist() == [5.0, 5.0, 25.0, 15.0] and e.dur.tolist() == [9.0, 2.0, 1.0, 1.0]
    assert e.track.tolist() == [0, 0, 0, 1]
    assert (e.name.dtype, e.kind.dtype, e.ext.dtype, e.mem_device_type.dtype) == (np.int32, np.int8, np.int64, np.int8)


def test_finish_makes_scope_names_annotations_and_marks_device_tracks() -> None:
    b = Builder()
    _add(b, _x("tbattn.v1/L0/softmax", 0), _x("aten::softmax", 1), _x("k", 2, cat="kernel", pid=0, tid=7))
    e = b.finish({})
    assert e.kind.tolist() == [Kind.ANNOTATION, Kind.CPU_OP, Kind.KERNEL]
    assert [(t.pid, t.tid, t.device) for t in e.tracks] == [(1, 1, False), (0, 7, True)]


def test_finish_reads_the_metadata_it_keeps_and_drops_the_rest() -> None:
    b = Builder()
    _add(b, _x("a", 0))
    long_text = "z" * 512
    e = b.finish({"schemaVersion": "1", "baseTimeNanoseconds": 17, "deviceProperties": {"not": "a list"},
                  "computeProperties": [{"name": "gfx90a\ud800"}, 3], "distributedInfo": ["rank", 0],
                  "record_shapes": 1, "profile_memory": "yes", "traceName": "t\ud800", "long": long_text,
                  "nested": {"a": 1}, "n": 2.5})
    meta = e.meta
    assert (meta.schema_version, meta.base_time_ns) == (None, 17)
    # deviceProperties is not a list: computeProperties (ROCm's spelling) is read, its non-objects left out.
    assert meta.device_properties == ({"name": "gfx90a\ufffd"},)
    assert meta.distributed_info is None
    assert (meta.record_shapes, meta.profile_memory, meta.with_flops) == (True, None, None)
    # Scalars whose text is under 512 characters: "long" (512) and "nested" are left out.
    assert meta.extra == {"schemaVersion": "1", "baseTimeNanoseconds": 17, "record_shapes": 1, "profile_memory": "yes",
                          "traceName": "t\ufffd", "n": 2.5}


def test_finish_of_memory_events_only_and_of_nothing() -> None:
    b = Builder()
    _add(b, _mem(7, Bytes=4))
    e = b.finish({})
    assert len(e) == 0 and e.meta.t0_us == 7.0 and e.mem_bytes.tolist() == [4]
    empty = Builder().finish({})
    assert len(empty) == 0 and empty.meta.t0_us == 0.0 and empty.names == ()
