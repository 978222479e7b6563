"""The column builder: how decoded events become ``Events`` columns with interned names. A batch
the compiled scanner takes is appended by ``scanned`` under the same rules; any other batch is
decoded with msgspec into typed structs that keep only the fields we read (unknown fields are
skipped without building Python objects), and their fields are appended to compact columns
column by column, so memory stays near the size of the columns, not of the document. A batch
that msgspec rejects (``NaN``, numbers out of range, strings where numbers belong) is rolled
back and decoded again leniently (the values through ``coerce``); events with unusable times
are dropped and counted in ``Events.diagnostics``. Names, tracks and shapes are interned as
first seen, so ids do not depend on batching, and two builders (two halves of a file) merge. A
name is interned clipped to ``MAX_NAME_CHARS`` characters: names that differ only after that are
one name.
"""

# Not split (over 400 lines): the strict and the lenient decoders append through one Builder;
# apart, their rules would diverge.

from __future__ import annotations

import re
from array import array
from collections import Counter
from itertools import compress, repeat
from operator import attrgetter
from typing import Any

import msgspec
import numpy as np

from tb_attn_plugin.trace.coerce import (
    EMPTY_RAW,
    MAX_ARG_BYTES,
    MAX_NAME_CHARS,
    MAX_SIZE,
    MAX_TIME_US,
    as_id,
    clean_text,
    clean_tree,
    clip,
    cut_arg_label,
    flag,
    loads,
    nested_too_deeply,
    op_shapes,
)
from tb_attn_plugin.trace.events import Events, OpShapes, TraceError, TraceMeta, Track
from tb_attn_plugin.trace.kineto import (
    DEVICE_KINDS,
    DEVICE_PROPERTY_KEYS,
    MEMORY_EVENT_NAME,
    MODULE_PREFIX,
    NO_ARGS,
    UNSET,
    Kind,
    WireArgs,
    WireEvent,
    decode_events,
    kind_of,
    lenient_event,
    scopes_as_annotations,
)
from tb_attn_plugin.trace.scanned import add_scanned, or_minus_one, usable_memory
from tb_attn_plugin.vocab.ops import SGLANG_PROFILER_COUNTER, SGLANG_PROFILER_PREFIX, SHAPE_OPS

__all__ = ["CLIPPED_NAMES", "Builder", "add_batch", "add_loaded"]

#: The diagnostic that counts the names clipped to ``MAX_NAME_CHARS`` characters (each once).
CLIPPED_NAMES = f"names longer than {MAX_NAME_CHARS} characters (clipped)"

# Field readers: map() with these runs in C, several times faster than a comprehension per field.
_TS, _DUR, _NAME, _CAT, _ARGS, _PH = (attrgetter(f) for f in ("ts", "dur", "name", "cat", "args", "ph"))
_TRACK = attrgetter("pid", "tid")
_PH_NAME = attrgetter("ph", "name")
_EXT, _EXT_LC, _CORR, _SEQ, _BYTES, _TOTAL, _DEV_TYPE, _DEV_ID, _GRAPH = (
    attrgetter(f) for f in ("ext", "ext_lc", "corr", "seq", "nbytes", "total", "dev_type", "dev_id", "graph"))
_DIMS, _TYPES, _CONCRETE = (attrgetter(f) for f in ("dims", "types", "concrete"))
_COUNTER = re.compile(SGLANG_PROFILER_COUNTER)


def _keeps_shapes(name: str) -> bool:
    """Whether op ``name``'s shapes are read (``ops.SHAPE_OPS``; SGLang's ranges without their counter)."""
    return name in SHAPE_OPS or (name.startswith(SGLANG_PROFILER_PREFIX) and _COUNTER.sub("", name) in SHAPE_OPS)


_IS_COMPLETE = "X".__eq__
_IS_MEMORY = ("i", MEMORY_EVENT_NAME).__eq__


class Builder:
    """Accumulates columns; one instance per trace."""

    def __init__(self) -> None:
        self.names: list[str] = []
        # Also maps each name as written (if not clipped) to the id of its cleaned form.
        self.name_ids: dict[str, int] = {}
        self.aliases: list[str] = []  # the names as written that differ from their cleaned form
        self.shape_name: dict[int, bool] = {}
        self.tracks: list[tuple[int | str, int | str]] = []
        self.track_ids: dict[tuple[int | str, int | str], int] = {}
        self.norm_ids: dict[tuple[int | str, int | str], int] = {}
        self.device_tracks: set[int] = set()
        self.shapes: list[OpShapes] = []
        self.shape_ids: dict[tuple[bytes, bytes, bytes], int] = {}
        self.kinds: dict[str | None, int] = {}
        self.diag: dict[str, int] = {}
        x_cols = (("name", "i"), ("kind", "b"), ("track", "i"), ("ts", "d"), ("dur", "d"), ("ext", "q"),
                  ("corr", "q"), ("seq", "q"), ("shape", "i"), ("graph", "q"))
        m_cols = (("ts", "d"), ("track", "i"), ("bytes", "q"), ("total", "q"), ("dtype", "b"), ("did", "i"))
        self.x: dict[str, array[Any]] = {k: array(t) for k, t in x_cols}
        self.m: dict[str, array[Any]] = {k: array(t) for k, t in m_cols}

    def count(self, key: str, n: int = 1) -> None:
        self.diag[key] = self.diag.get(key, 0) + n

    def export(self) -> dict[str, Any]:
        """Plain data for another process: columns, and names, tracks and shapes in id order."""
        return {
            "names": self.names, "tracks": self.tracks, "device_tracks": sorted(self.device_tracks),
            "shape_keys": list(self.shape_ids), "diag": self.diag,
            "x": {k: v.tobytes() for k, v in self.x.items()}, "m": {k: v.tobytes() for k, v in self.m.items()},
        }

    def merge(self, other: dict[str, Any]) -> None:
        """Append an exported builder's events, re-numbering its names, tracks and shapes."""
        name_map = [self.name_id(name) for name in other["names"]]
        track_map = []
        for key in other["tracks"]:
            tr = self.norm_ids.get(key)
            if tr is None:
                tr = self.new_track(key)
            track_map.append(tr)
        shape_map = []
        for key in other["shape_keys"]:
            sid = self.shape_ids.get(key)
            if sid is None:
                sid = self.shape_ids[key] = len(self.shapes)
                self.shapes.append(op_shapes(key))
            shape_map.append(sid)
        self.device_tracks.update(track_map[t] for t in other["device_tracks"])
        for label, n in other["diag"].items():
            self.diag[label] = self.diag.get(label, 0) + n
        remap = {"name": name_map, "track": track_map, "shape": shape_map}
        for cols, raw in ((self.x, other["x"]), (self.m, other["m"])):
            for k, col in cols.items():
                values = np.frombuffer(raw[k], dtype=col.typecode)
                if k in remap and values.size:
                    table = np.asarray(remap[k] + [-1], dtype=np.int64)  # -1 (no shape) maps to -1
                    values = table[values].astype(col.typecode)
                col.frombytes(values.tobytes())

    def intern(self, name: str) -> int:
        """The id of a name not seen before (as written). A name cleaned of lone surrogates is
        the same name as one written with U+FFFD, so that the analyses see one op, not two; a
        name longer than ``MAX_NAME_CHARS`` is the same name as any other with its first
        ``MAX_NAME_CHARS - 1`` characters, and is not kept as written."""
        clean = clean_text(clip(name))
        nid = self.name_ids.get(clean)
        if nid is None:
            nid = self.name_ids[clean] = len(self.names)
            self.names.append(clean)
            self.shape_name[nid] = _keeps_shapes(clean)
        if clean is not name and len(name) <= MAX_NAME_CHARS:
            self.name_ids[name] = nid
            self.aliases.append(name)
        return nid

    def name_id(self, name: str) -> int:
        """The id of a name as written, interned if new."""
        nid = self.name_ids.get(name)
        return self.intern(name) if nid is None else nid

    def count_category(self, category: str | None, n: int) -> None:
        """Count ``n`` events of a category the analyses do not read (none, "" and "Trace" are not counted)."""
        if category not in ("Trace", None, ""):
            self.count(f"category {clip(category)!r}", n)

    def new_track(self, key: tuple[int | str, int | str]) -> int:
        """A track id for (pid, tid); "25738" and 25738 are the same thread (2021 traces mix them)."""
        norm = (as_id(key[0]), as_id(key[1]))
        tr = self.norm_ids.get(norm)
        if tr is None:
            tr = self.norm_ids[norm] = len(self.tracks)
            self.tracks.append(norm)
        self.track_ids[key] = tr
        return tr

    def mark(self) -> tuple[int, int, int, int, int, dict[str, int], set[int]]:
        """The state to go back to if the batch about to be added fails part way."""
        return (len(self.x["name"]), len(self.m["ts"]), len(self.names), len(self.tracks), len(self.shapes),
                dict(self.diag), set(self.device_tracks))

    def rollback(self, mark: tuple[int, int, int, int, int, dict[str, int], set[int]]) -> None:
        """Forget everything added since ``mark``: events, and the names, tracks, shapes and
        diagnostics they brought (the batch is decoded again, leniently, and counted then)."""
        xs, ms, names, tracks, shapes, self.diag, self.device_tracks = mark
        for col in self.x.values():
            del col[xs:]
        for col in self.m.values():
            del col[ms:]
        if self.aliases:
            kept = [a for a in self.aliases if self.name_ids[a] < names]
            for alias in self.aliases:
                if self.name_ids[alias] >= names:
                    del self.name_ids[alias]
            self.aliases = kept
        for name in self.names[names:]:
            del self.shape_name[self.name_ids.pop(name)]
        del self.names[names:]
        if len(self.tracks) > tracks:
            for ids in (self.track_ids, self.norm_ids):
                for key in [k for k, v in ids.items() if v >= tracks]:
                    del ids[key]
            del self.tracks[tracks:]
        if len(self.shapes) > shapes:
            for skey in [k for k, v in self.shape_ids.items() if v >= shapes]:
                del self.shape_ids[skey]
            del self.shapes[shapes:]

    def add(self, events: list[WireEvent]) -> None:
        """Append one batch, column by column: fields are read with ``map`` and ``attrgetter``
        and checked in numpy, so no Python code runs per event (an order of magnitude faster in
        CPython than a loop doing every field of every event)."""
        complete = list(compress(events, map(_IS_COMPLETE, map(_PH, events))))
        memory = list(compress(events, map(_IS_MEMORY, map(_PH_NAME, events))))
        if complete:
            self._add_complete(complete)
        if memory:
            self._add_memory(memory)

    def _kinds(self, xs: list[WireEvent]) -> np.ndarray:
        kinds = self.kinds
        cats = list(map(_CAT, xs))
        local = {}
        for cat in set(cats):
            kind = kinds.get(cat)
            if kind is None:
                kind = int(kind_of(cat))
                if cat is None or len(cat) <= MAX_NAME_CHARS:  # no category is that long: not kept
                    kinds[cat] = kind
            local[cat] = kind
        return np.fromiter(map(local.__getitem__, cats), np.int8, len(cats))

    def _add_complete(self, xs: list[WireEvent]) -> None:
        kind = self._kinds(xs)
        module = kind == int(Kind.MODULE)
        if module.any():  # keep nn.Module events only: other Python functions are not read
            keep = ~module
            for i in np.flatnonzero(module).tolist():
                keep[i] = xs[i].name.startswith(MODULE_PREFIX)
            xs, kind = _take(xs, keep), kind[keep]
        ts = np.fromiter(map(_TS, xs), np.float64, len(xs))
        dur = np.fromiter(map(_DUR, xs), np.float64, len(xs))
        bad = ~(np.abs(ts) <= MAX_TIME_US) | ~(dur <= MAX_TIME_US)  # NaN compares False: bad
        if bad.any():
            self.count("events with unusable times", int(bad.sum()))
            xs, kind, ts, dur = _take(xs, ~bad), kind[~bad], ts[~bad], dur[~bad]
        negative = dur < 0
        if negative.any():
            self.count("negative durations (set to 0)", int(negative.sum()))
            dur[negative] = 0.0
        other = kind == int(Kind.OTHER)
        if other.any():
            for cat, n in Counter(xs[i].cat for i in np.flatnonzero(other).tolist()).items():
                self.count_category(cat, n)
        names = list(map(_NAME, xs))
        # First-appearance order, so ids do not depend on batching.
        ids = {name: self.name_id(name) for name in dict.fromkeys(names)}
        nids = np.fromiter(map(ids.__getitem__, names), np.int32, len(names))
        keys = list(map(_TRACK, xs))
        track_ids = self.track_ids
        for track_key in dict.fromkeys(keys):
            if track_key not in track_ids:
                self.new_track(track_key)
        tracks = np.fromiter(map(track_ids.__getitem__, keys), np.int32, len(keys))
        device = np.isin(kind, DEVICE_KINDS)
        if device.any():
            self.device_tracks.update(np.unique(tracks[device]).tolist())
        args = _args(xs)
        ext = _ints(args, _EXT)
        absent = ext == UNSET
        if absent.any():
            ext[absent] = _ints(_take(args, absent), _EXT_LC)
        shape = np.full(len(xs), -1, np.int32)
        with_shapes = np.flatnonzero(np.array(self.shape_flags(), dtype=bool)[nids])
        if with_shapes.size:
            shape[with_shapes] = self._shape_ids(_take(args, with_shapes), _take(names, with_shapes))
        x = self.x
        for col, values in (("name", nids), ("kind", kind), ("track", tracks), ("ts", ts), ("dur", dur),
                            ("ext", or_minus_one(ext)), ("corr", or_minus_one(_ints(args, _CORR))),
                            ("seq", or_minus_one(_ints(args, _SEQ))), ("shape", shape),
                            ("graph", or_minus_one(_ints(args, _GRAPH)))):
            x[col].frombytes(values.astype(x[col].typecode, copy=False).tobytes())

    def shape_flags(self) -> list[bool]:
        """Whether each name id is an op whose shapes are kept, in id order."""
        return [self.shape_name[i] for i in range(len(self.names))]

    def _shape_ids(self, args: list[WireArgs], ops: list[str]) -> list[int]:
        """The shape id of each event's inputs (-1: the op has no recorded inputs). An argument list
        longer than ``MAX_ARG_BYTES`` is read as absent, counted by argument and op, before it is copied."""
        cols = [list(map(field, args)) for field in (_DIMS, _TYPES, _CONCRETE)]
        for arg, col in enumerate(cols):
            if max(map(len, col)) > MAX_ARG_BYTES:
                for i, raw in enumerate(col):
                    if len(raw) > MAX_ARG_BYTES:
                        col[i] = EMPTY_RAW
                        self.count(cut_arg_label(arg, ops[i]))
        keys = list(zip(*(map(bytes, col) for col in cols), strict=True))
        shape_ids = self.shape_ids
        for key in dict.fromkeys(keys):
            if key[0] and key not in shape_ids:  # no "Input Dims": no shapes (EMPTY_RAW reads as b"")
                shape_ids[key] = len(self.shapes)
                self.shapes.append(op_shapes(key))
        return list(map(shape_ids.get, keys, repeat(-1)))

    def _add_memory(self, events: list[WireEvent]) -> None:
        ts = np.fromiter(map(_TS, events), np.float64, len(events))
        args = _args(events)
        nbytes = _ints(args, _BYTES)
        ok = usable_memory(self.count, ts, nbytes)
        if ok is not None:
            events, args, ts, nbytes = _take(events, ok), _take(args, ok), ts[ok], nbytes[ok]
        track_ids = self.track_ids
        keys = list(map(_TRACK, events))
        for key in dict.fromkeys(keys):
            if key not in track_ids:
                self.new_track(key)
        total = _ints(args, _TOTAL)
        dev_type = _ints(args, _DEV_TYPE)
        dev_id = _ints(args, _DEV_ID)
        m = self.m
        for col, values in (
                ("ts", ts), ("track", np.fromiter(map(track_ids.__getitem__, keys), np.int32, len(keys))),
                ("bytes", nbytes), ("total", np.where((total == UNSET) | (np.abs(total) > MAX_SIZE), -1, total)),
                ("dtype", np.where((dev_type >= 0) & (dev_type < 128), dev_type, -1)),
                ("did", np.where((dev_id >= 0) & (dev_id < 2**31), dev_id, -1))):
            m[col].frombytes(values.astype(m[col].typecode, copy=False).tobytes())

    def finish(self, top: dict[str, Any]) -> Events:
        clipped = sum(1 for n in self.names if len(n) == MAX_NAME_CHARS and n.endswith("…"))
        if clipped:  # counted here, once: names are the same however the trace was batched or split
            self.count(CLIPPED_NAMES, clipped)
        x = {k: np.frombuffer(v, dtype=v.typecode) if len(v) else np.empty(0, v.typecode) for k, v in self.x.items()}
        m = {k: np.frombuffer(v, dtype=v.typecode) if len(v) else np.empty(0, v.typecode) for k, v in self.m.items()}
        starts = [a.min() for a in (x["ts"], m["ts"]) if a.size]
        t0 = float(min(starts)) if starts else 0.0
        order = np.lexsort((-x["dur"], x["ts"], x["track"]))
        morder = np.lexsort((m["ts"], m["track"]))
        base = top.get("baseTimeNanoseconds")
        props: list[Any] = next((top[k] for k in DEVICE_PROPERTY_KEYS if isinstance(top.get(k), list)), [])
        dist = top.get("distributedInfo")
        # Only what the metadata keeps is cleaned of lone surrogates: the rest of the header is dropped.
        meta = TraceMeta(
            t0_us=t0,
            base_time_ns=base if isinstance(base, int) else None,
            schema_version=top.get("schemaVersion") if isinstance(top.get("schemaVersion"), int) else None,
            device_properties=tuple(clean_tree(p) for p in props if isinstance(p, dict)),
            distributed_info=clean_tree(dist) if isinstance(dist, dict) else None,
            record_shapes=flag(top.get("record_shapes")),
            profile_memory=flag(top.get("profile_memory")),
            with_flops=flag(top.get("with_flops")),
            extra={clean_text(k): clean_text(v) if isinstance(v, str) else v for k, v in top.items()
                   if isinstance(v, (str, int, float, bool)) and len(str(v)) < 512},
        )
        tracks = tuple(Track(pid, tid, i in self.device_tracks) for i, (pid, tid) in enumerate(self.tracks))
        name = x["name"][order].astype(np.int32, copy=False)
        kind = scopes_as_annotations(self.names, name, x["kind"][order].astype(np.int8, copy=False))
        return Events(
            names=tuple(self.names),
            tracks=tracks,
            shapes=tuple(self.shapes),
            name=name, kind=kind,
            track=x["track"][order].astype(np.int32, copy=False),
            ts=x["ts"][order] - t0,
            dur=x["dur"][order],
            ext=x["ext"][order].astype(np.int64, copy=False),
            corr=x["corr"][order].astype(np.int64, copy=False),
            seq=x["seq"][order].astype(np.int64, copy=False),
            shape=x["shape"][order].astype(np.int32, copy=False),
            graph=x["graph"][order].astype(np.int64, copy=False),
            mem_ts=m["ts"][morder] - t0,
            mem_track=m["track"][morder].astype(np.int32, copy=False),
            mem_bytes=m["bytes"][morder].astype(np.int64, copy=False),
            mem_total=m["total"][morder].astype(np.int64, copy=False),
            mem_device_type=m["dtype"][morder].astype(np.int8, copy=False),
            mem_device_id=m["did"][morder].astype(np.int32, copy=False),
            meta=meta,
            diagnostics=dict(self.diag),
        )


def _take(items: list[Any], which: np.ndarray) -> list[Any]:
    """The items where ``which`` (a boolean mask or positions) selects them, in order."""
    positions = np.flatnonzero(which) if which.dtype == bool else which
    return list(map(items.__getitem__, positions.tolist()))


def _args(events: list[WireEvent]) -> list[WireArgs]:
    args = list(map(_ARGS, events))
    if None in args:  # "args": null, as if absent
        args = [NO_ARGS if a is None else a for a in args]
    return args


def _ints(args: list[WireArgs], field: attrgetter[Any]) -> np.ndarray:
    """An integer field of every event's args as int64, ``UNSET`` where absent or null. Raises
    OverflowError for a value outside int64 (the batch is then decoded leniently)."""
    values = list(map(field, args))
    if None in values:
        values = [UNSET if v is None else v for v in values]
    return np.fromiter(values, np.int64, len(values))


def _lenient(objs: Any) -> list[WireEvent]:
    if not isinstance(objs, list):
        raise TraceError("traceEvents is not a list")
    return [lenient_event(obj) for obj in objs if isinstance(obj, dict)]


def add_batch(builder: Builder, text: bytes | bytearray | memoryview, *, scan: bool = True) -> None:
    """Append the events of ``text``, a JSON array: through the compiled scanner where it takes
    them (unless ``scan`` is False: it did not), else with msgspec, leniently if msgspec rejects
    any of it."""
    mark = builder.mark()
    try:
        if not (scan and add_scanned(builder, text)):
            builder.add(decode_events(text))
        return
    except (msgspec.DecodeError, msgspec.ValidationError, OverflowError, TypeError, RecursionError):
        builder.rollback(mark)
    try:
        objs = loads(bytes(text))
    except RecursionError as exc:
        raise nested_too_deeply(exc) from None
    except ValueError as exc:
        raise TraceError(f"invalid JSON in traceEvents: {exc}") from None
    # Events, not batches: the count is the same however the file was cut (batches, parts).
    builder.count("events decoded leniently", len(objs) if isinstance(objs, list) else 1)
    add_loaded(builder, objs)


def add_loaded(builder: Builder, objs: Any) -> None:
    """Append the events of ``objs``, as ``json.loads`` decoded them, whatever their types."""
    try:
        builder.add(_lenient(objs))
    except RecursionError as exc:  # re-encoding a value that json.loads only just managed to nest
        raise nested_too_deeply(exc) from None
