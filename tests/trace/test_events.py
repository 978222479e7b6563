"""The event model (``trace/events.py``): ``Events`` columns with interned names and shapes, and the
two errors. Events are built by hand, column by column, and their length, memory figure, input
dims and name ids checked against what the columns hold.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tb_attn_plugin.trace.events import Events, OpShapes, ReadError, TraceError, TraceMeta, Track

META = TraceMeta(t0_us=0.0, base_time_ns=None, schema_version=1, device_properties=(), distributed_info=None,
                 record_shapes=True, profile_memory=False, with_flops=None)


def _events(n: int = 2, memory: int = 1, names: tuple[str, ...] = ("aten::mm", "a"),
            shapes: tuple[OpShapes, ...] = (), shape: list[int] | None = None) -> Events:
    """``n`` complete events on one thread and ``memory`` memory events (every column its dtype)."""
    return Events(
        names=names, tracks=(Track(1, 1, False),), shapes=shapes,
        name=np.arange(n, dtype=np.int32) % len(names), kind=np.ones(n, np.int8), track=np.zeros(n, np.int32),
        ts=np.arange(n, dtype=np.float64), dur=np.ones(n, np.float64), ext=np.full(n, -1, np.int64),
        corr=np.full(n, -1, np.int64), seq=np.full(n, -1, np.int64),
        shape=np.array(shape if shape is not None else [-1] * n, np.int32), graph=np.full(n, -1, np.int64),
        mem_ts=np.zeros(memory, np.float64), mem_track=np.zeros(memory, np.int32),
        mem_bytes=np.full(memory, 1024, np.int64), mem_total=np.full(memory, -1, np.int64),
        mem_device_type=np.zeros(memory, np.int8), mem_device_id=np.zeros(memory, np.int32), meta=META)


def test_errors_are_value_errors_and_a_read_error_is_a_trace_error() -> None:
    # Callers catch TraceError for both; a ReadError is the storage's fault, so it is also told apart.
    assert issubclass(TraceError, ValueError) and issubclass(ReadError, TraceError)
    assert not issubclass(TraceError, ReadError)
    with pytest.raises(TraceError, match="cannot read /x"):
        raise ReadError("cannot read /x")


def test_length_counts_complete_events_not_memory_events() -> None:
    assert len(_events(n=3, memory=5)) == 3
    assert len(_events(n=0, memory=2)) == 0


def test_nbytes_is_the_columns_plus_the_strings_and_shapes() -> None:
    shapes = (OpShapes(dims=([2, 2],), types=("float",), concrete=("",)),)
    e = _events(n=2, memory=1, names=("aten::mm", "a"), shapes=shapes, shape=[0, -1])
    # Per complete event: name 4 + kind 1 + track 4 + ts 8 + dur 8 + ext 8 + corr 8 + seq 8 + shape 4 + graph 8
    # = 61 bytes.
    # Per memory event: ts 8 + track 4 + bytes 8 + total 8 + device type 1 + device id 4 = 33 bytes.
    # Names: each its length plus 49 (a str's overhead): (8 + 49) + (1 + 49) = 107. One shape: 200.
    assert e.nbytes == 2 * 61 + 1 * 33 + 107 + 200


def test_input_dims_reads_the_shape_of_one_input() -> None:
    shapes = (OpShapes(dims=([2, 16, 32], [], "x"), types=("float", "", "str"), concrete=("", "", "")),)
    e = _events(n=2, shapes=shapes, shape=[0, -1])
    assert e.input_dims(0, 0) == [2, 16, 32]
    assert e.input_dims(0, 1) is None  # no sizes: not a tensor
    assert e.input_dims(0, 2) is None  # not a list
    assert e.input_dims(0, 3) is None  # past the inputs recorded
    assert e.input_dims(1, 0) is None  # an event without shapes


def test_input_dims_hands_out_a_copy_of_plain_ints() -> None:
    dims = [np.int64(4), 8]
    e = _events(n=1, shapes=(OpShapes(dims=(dims,), types=("float",), concrete=("",)),), shape=[0])
    got = e.input_dims(0, 0)
    assert got is not None and got == [4, 8] and all(type(x) is int for x in got)
    got.append(99)
    assert e.shapes[0].dims[0] == dims and len(dims) == 2  # the interned shape is unchanged


def test_name_ids_are_the_ids_of_the_wanted_names_present() -> None:
    e = _events(names=("aten::mm", "aten::bmm", "aten::softmax", "x"))
    got = e.name_ids({"aten::softmax", "aten::mm", "aten::absent"})
    assert got.dtype == np.int32 and got.tolist() == [0, 2]  # in id order
    empty = e.name_ids(frozenset())
    assert empty.dtype == np.int32 and empty.size == 0


def test_tracks_and_shapes_are_values_and_events_compare_by_identity() -> None:
    assert Track(1, 2, True) == Track(1, 2, True) and len({Track(1, 2, True), Track(1, 2, True)}) == 1
    assert Track(1, 2, True) != Track(1, 2, False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        Track(1, 2, True).pid = 3  # type: ignore[misc]
    # Arrays cannot be compared with ==: two Events are equal only if they are the same object.
    a, b = _events(), _events()
    assert a == a and a != b
    assert a.diagnostics == {} and META.extra == {}
