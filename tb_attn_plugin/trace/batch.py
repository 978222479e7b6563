"""A batch of events as columns: what a decoding path hands to ``Builder.append``, and the pure
path's batch, read from msgspec's typed structs (``kineto.WireEvent``) field by field.

A batch holds its complete ("X") and memory events' columns, with names, categories and (pid,
tid) pairs as indexes into tables of the batch's own. The fields that can be out of range for a
column (the integer arguments) and the shapes are read only for the rows the builder keeps, when
it asks: the pure path then builds no Python object for an event it drops, and a value it drops
cannot fail the batch. The compiled scanner's batch is ``scanned.ScannedBatch``.
"""

from __future__ import annotations

from itertools import compress, repeat
from operator import attrgetter
from typing import Any

import numpy as np

from tb_attn_plugin.trace.coerce import EMPTY_RAW, MAX_ARG_BYTES
from tb_attn_plugin.trace.kineto import MEMORY_EVENT_NAME, NO_ARGS, UNSET, WireArgs, WireEvent

__all__ = ["Batch", "EventBatch", "ShapeKey", "TrackKey"]

#: A thread as the trace writes it: (pid, tid).
TrackKey = tuple[int | str, int | str]
#: An op's recorded inputs as written: (Input Dims, Input type, Concrete Inputs, cut), where bit i
#: of cut says that argument i was longer than ``MAX_ARG_BYTES`` and is read as absent (empty).
ShapeKey = tuple[bytes, bytes, bytes, int]


class Batch:
    """One batch's events as columns. ``x``: the complete events' ``ts``, ``dur`` (float64),
    ``name``, ``cat`` (int32 indexes into ``names``, ``cats``; a category of -1 is none) and
    ``track`` (into ``tracks``); ``m``: the memory events' ``ts`` and ``track``."""

    def __init__(self, names: list[str], cats: list[str | None], tracks: list[TrackKey],
                 x: dict[str, np.ndarray], m: dict[str, np.ndarray]) -> None:
        self.names, self.cats, self.tracks, self.x, self.m = names, cats, tracks, x, m

    def ints(self, table: str, fields: tuple[str, ...], rows: np.ndarray | None) -> list[np.ndarray]:
        """Integer fields (int64, ``UNSET`` where absent) of the complete (``table`` "x": ``ext``,
        ``ext_lc``, ``corr``, ``seq``, ``graph``) or memory ("m": ``bytes``, ``total``, ``dtype``,
        ``did``) events at positions ``rows`` (None: all). Raises OverflowError for a value outside
        int64."""
        raise NotImplementedError

    def shapes(self, rows: np.ndarray) -> tuple[np.ndarray, list[ShapeKey]]:
        """The recorded inputs of the complete events at positions ``rows``: each one's index into
        the keys returned (-1: none recorded), and the keys."""
        raise NotImplementedError


# Field readers: map() with these runs in C, several times faster than a comprehension per field.
_TS, _DUR, _NAME, _CAT, _ARGS, _PH = (attrgetter(f) for f in ("ts", "dur", "name", "cat", "args", "ph"))
_TRACK = attrgetter("pid", "tid")
_PH_NAME = attrgetter("ph", "name")
_INTS = {"ext": attrgetter("ext"), "ext_lc": attrgetter("ext_lc"), "corr": attrgetter("corr"),
         "seq": attrgetter("seq"), "graph": attrgetter("graph"), "bytes": attrgetter("nbytes"),
         "total": attrgetter("total"), "dtype": attrgetter("dev_type"), "did": attrgetter("dev_id")}
_RAWS = tuple(attrgetter(f) for f in ("dims", "types", "concrete"))
_IS_COMPLETE = "X".__eq__
_IS_MEMORY = ("i", MEMORY_EVENT_NAME).__eq__


class EventBatch(Batch):
    """The pure path's batch: decoded events read column by column with ``map`` and
    ``attrgetter``, so no Python code runs per event and field (an order of magnitude faster in
    CPython than a loop doing every field of every event)."""

    def __init__(self, events: list[WireEvent]) -> None:
        xs = list(compress(events, map(_IS_COMPLETE, map(_PH, events))))
        ms = list(compress(events, map(_IS_MEMORY, map(_PH_NAME, events))))
        names, name = _codes(list(map(_NAME, xs)))
        cats, cat = _codes(list(map(_CAT, xs)))
        tracks, track = _codes([*map(_TRACK, xs), *map(_TRACK, ms)])
        super().__init__(
            names, cats, tracks,
            x={"ts": _floats(xs, _TS), "dur": _floats(xs, _DUR), "name": name, "cat": cat, "track": track[:len(xs)]},
            m={"ts": _floats(ms, _TS), "track": track[len(xs):]})
        self.args = {"x": _args(xs), "m": _args(ms)}

    def ints(self, table: str, fields: tuple[str, ...], rows: np.ndarray | None) -> list[np.ndarray]:
        args = self.args[table] if rows is None else _take(self.args[table], rows)
        return [_ints(args, _INTS[field]) for field in fields]

    def shapes(self, rows: np.ndarray) -> tuple[np.ndarray, list[ShapeKey]]:
        args = _take(self.args["x"], rows)
        cols = [list(map(field, args)) for field in _RAWS]
        cut: list[int] | None = None
        for arg, col in enumerate(cols):
            if max(map(len, col)) > MAX_ARG_BYTES:  # read as absent, before it is copied
                cut = cut or [0] * len(col)
                for i, raw in enumerate(col):
                    if len(raw) > MAX_ARG_BYTES:
                        col[i] = EMPTY_RAW
                        cut[i] |= 1 << arg
        keys, codes = _codes(list(zip(*(map(bytes, col) for col in cols), cut or repeat(0), strict=False)))
        return codes, keys


def _codes(values: list[Any]) -> tuple[list[Any], np.ndarray]:
    """The distinct ``values`` in order of first appearance, and each value's index among them."""
    ids = {v: i for i, v in enumerate(dict.fromkeys(values))}
    return list(ids), np.fromiter(map(ids.__getitem__, values), np.int32, len(values))


def _floats(events: list[WireEvent], field: attrgetter[Any]) -> np.ndarray:
    return np.fromiter(map(field, events), np.float64, len(events))


def _take(items: list[Any], rows: np.ndarray) -> list[Any]:
    return list(map(items.__getitem__, rows.tolist()))


def _args(events: list[WireEvent]) -> list[WireArgs]:
    args = list(map(_ARGS, events))
    if None in args:  # "args": null, as if absent
        args = [NO_ARGS if a is None else a for a in args]
    return args


def _ints(args: list[WireArgs], field: attrgetter[Any]) -> np.ndarray:
    values = list(map(field, args))
    if None in values:
        values = [UNSET if v is None else v for v in values]
    return np.fromiter(values, np.int64, len(values))
