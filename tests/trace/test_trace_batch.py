"""The pure path's batch: msgspec's structs read as columns over tables of the batch's own, the
integer arguments and the shapes only for the rows asked for."""

from __future__ import annotations

import numpy as np
import pytest

from tb_attn_plugin.trace.batch import EventBatch
from tb_attn_plugin.trace.coerce import MAX_ARG_BYTES
from tb_attn_plugin.trace.columns import Builder, add_batch
from tb_attn_plugin.trace.kineto import UNSET, decode_events


def _batch(text: bytes) -> EventBatch:
    return EventBatch(decode_events(text))


def test_names_categories_and_tracks_are_tables_in_order_of_first_appearance() -> None:
    b = _batch(b'[{"ph": "X", "name": "b", "cat": "kernel", "pid": 1, "tid": "s", "ts": 3, "dur": 1},'
               b' {"ph": "i", "name": "[memory]", "pid": 2, "tid": 2, "ts": 4, "args": {"Bytes": 8}},'
               b' {"ph": "X", "name": "a", "pid": 1, "tid": "s", "ts": 1, "dur": 2},'
               b' {"ph": "X", "name": "b", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 2, "dur": 2},'
               b' {"ph": "B", "name": "c", "pid": 9, "tid": 9, "ts": 0}]')
    assert (b.names, b.cats, b.tracks) == (["b", "a"], ["kernel", None, "cpu_op"], [(1, "s"), (1, 1), (2, 2)])
    assert b.x["name"].tolist() == [0, 1, 0] and b.x["cat"].tolist() == [0, 1, 2]
    assert b.x["track"].tolist() == [0, 0, 1] and b.m["track"].tolist() == [2]
    assert b.x["ts"].tolist() == [3.0, 1.0, 2.0] and b.m["ts"].tolist() == [4.0]
    (nbytes,) = b.ints("m", ("bytes",), None)
    assert nbytes.tolist() == [8]
    ext, corr = b.ints("x", ("ext", "corr"), np.array([2]))
    assert ext.tolist() == [UNSET] and corr.tolist() == [UNSET]


def test_integers_are_read_only_for_the_rows_asked_for() -> None:
    b = _batch(b'[{"ph": "X", "name": "a", "ts": 1, "dur": 1, "args": {"External id": 18446744073709551615}},'
               b' {"ph": "X", "name": "a", "ts": 2, "dur": 1, "args": {"External id": 7}}]')
    (ext,) = b.ints("x", ("ext",), np.array([1]))
    assert ext.tolist() == [7]
    with pytest.raises(OverflowError):  # the batch is then decoded leniently
        b.ints("x", ("ext",), None)


def test_an_argument_list_too_long_is_read_as_absent_and_marked_cut() -> None:
    dims = "[" + ",".join(["[1]"] * (MAX_ARG_BYTES // 3 + 1)) + "]"
    b = _batch(('[{"ph": "X", "name": "aten::mm", "ts": 1, "dur": 1, "args": {"Input Dims": [[2, 3]]}},'
                '{"ph": "X", "name": "aten::mm", "ts": 2, "dur": 1, "args": {"Input Dims": [[2, 3]],'
                f' "Input type": {dims}}}}}]').encode())
    codes, keys = b.shapes(np.array([0, 1]))
    assert codes.tolist() == [0, 1]
    assert keys == [(b"[[2, 3]]", b"", b"", 0), (b"[[2, 3]]", b"", b"", 0b10)]


def test_a_python_function_dropped_is_not_read() -> None:
    """An event the builder drops (here a Python function other than a module's) is not read, so
    its out-of-range argument does not send the batch to the lenient path."""
    text = (b'[{"ph": "X", "cat": "python_function", "name": "f", "ts": 1, "dur": 1,'
            b' "args": {"External id": 18446744073709551615}},'
            b' {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 2, "dur": 1, "args": {"External id": 5}}]')
    builder = Builder()
    add_batch(builder, text, scan=False)
    assert builder.names == ["aten::mm"] and list(builder.x["ext"]) == [5]
    assert "events decoded leniently" not in builder.diag
