"""The column builder: how decoded events become ``Events`` columns with interned names. A batch
is decoded with msgspec into typed structs that keep only the fields we read (unknown fields are
skipped without building Python objects), and their fields are appended to compact columns
column by column, so memory stays near the size of the columns, not of the document. A batch
that msgspec rejects (``NaN``, numbers out of range, strings where numbers belong) is rolled
back and decoded again leniently (the values through ``coerce``); events with unusable times
are dropped and counted in ``Events.diagnostics``. Names, tracks and shapes are interned as
first seen, so ids do not depend on batching, and two builders (two halves of a file) merge.
"""

from __future__ import annotations

from array import array
from collections import Counter
from operator import attrgetter
from typing import Any

import msgspec
import numpy as np

from tb_attn_plugin.ops import SHAPE_OPS
from tb_attn_plugin.trace.coerce import (
    EMPTY_RAW,
    MAX_SIZE,
    MAX_TIME_US,
    as_id,
    clean_text,
    clean_tree,
    flag,
    loads,
    nested_too_deeply,
    op_shapes,
)
from tb_attn_plugin.trace.events import Events, OpShapes, TraceError, TraceMeta, Track
from tb_attn_plugin.trace.kineto import (
    DEVICE_PROPERTY_KEYS,
    MEMORY_EVENT_NAME,
    MODULE_PREFIX,
    Kind,
    WireArgs,
    WireEvent,
    decode_events,
    kind_of,
    lenient_event,
)

__all__ = ["Builder", "add_batch", "add_loaded"]

# Field readers: map() with these runs in C, several times faster than a comprehension per field.
_TS, _DUR, _NAME, _CAT, _ARGS = (attrgetter(f) for f in ("ts", "dur", "name", "cat", "args"))
_TRACK = attrgetter("pid", "tid")
_DEVICE_KINDS = frozenset({int(Kind.KERNEL), int(Kind.MEMCPY), int(Kind.MEMSET), int(Kind.GPU_ANNOTATION)})


class Builder:
    """Accumulates columns; one instance per trace."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.name_ids: dict[str, int] = {}  # also maps each name as written to the id of its cleaned form
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
                  ("corr", "q"), ("seq", "q"), ("shape", "i"))
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
        name_map = []
        for name in other["names"]:
            nid = self.name_ids.get(name)
            name_map.append(self.intern(name) if nid is None else nid)
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
        the same name as one written with U+FFFD, so that the analyses see one op, not two."""
        clean = clean_text(name)
        nid = self.name_ids.get(clean)
        if nid is None:
            nid = self.name_ids[clean] = len(self.names)
            self.names.append(clean)
            self.shape_name[nid] = clean in SHAPE_OPS
        if clean is not name:
            self.name_ids[name] = nid
            self.aliases.append(name)
        return nid

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
        """Append one batch. Column by column (list comprehensions), which is several times
        faster in CPython than one loop doing every field of every event."""
        complete = [e for e in events if e.ph == "X"]
        memory = [e for e in events if e.ph == "i" and e.name == MEMORY_EVENT_NAME]
        if complete:
            self._add_complete(complete)
        if memory:
            self._add_memory(memory)

    def _kinds(self, xs: list[WireEvent]) -> list[int]:
        kinds = self.kinds
        cats = list(map(_CAT, xs))
        for cat in set(cats):
            if cat not in kinds:
                kinds[cat] = int(kind_of(cat))
        return list(map(kinds.__getitem__, cats))

    def _add_complete(self, xs: list[WireEvent]) -> None:
        kind = self._kinds(xs)
        module = int(Kind.MODULE)
        if module in kind:  # keep nn.Module events only: other Python functions are not read
            pairs = [(e, k) for e, k in zip(xs, kind, strict=True)
                     if k != module or e.name.startswith(MODULE_PREFIX)]
            xs, kind = [e for e, _ in pairs], [k for _, k in pairs]
        ts = np.fromiter(map(_TS, xs), np.float64, len(xs))
        dur = np.fromiter(map(_DUR, xs), np.float64, len(xs))
        bad = ~(np.abs(ts) <= MAX_TIME_US) | ~(dur <= MAX_TIME_US)  # NaN compares False: bad
        if bad.any():
            self.diag["events with unusable times"] = self.diag.get("events with unusable times", 0) + int(bad.sum())
            keep = np.flatnonzero(~bad).tolist()
            xs, kind = [xs[i] for i in keep], [kind[i] for i in keep]
            ts, dur = ts[~bad], dur[~bad]
        negative = dur < 0
        if negative.any():
            self.diag["negative durations (set to 0)"] = self.diag.get("negative durations (set to 0)", 0) + int(
                negative.sum())
            dur[negative] = 0.0
        other = int(Kind.OTHER)
        if other in kind:
            for cat, n in Counter(e.cat for e, k in zip(xs, kind, strict=True) if k == other).items():
                if cat not in ("Trace", None, ""):
                    label = f"category {cat!r}"
                    self.diag[label] = self.diag.get(label, 0) + n
        names = list(map(_NAME, xs))
        name_ids = self.name_ids
        for name in dict.fromkeys(names):  # first-appearance order, so ids do not depend on batching
            if name not in name_ids:
                self.intern(name)
        nids = list(map(name_ids.__getitem__, names))
        keys = list(map(_TRACK, xs))
        track_ids = self.track_ids
        for track_key in dict.fromkeys(keys):
            if track_key not in track_ids:
                self.new_track(track_key)
        tracks = list(map(track_ids.__getitem__, keys))
        for k, tr in set(zip(kind, tracks, strict=True)):
            if k in _DEVICE_KINDS:
                self.device_tracks.add(tr)
        args = list(map(_ARGS, xs))
        ext = [-1 if a is None else a.external_id for a in args]
        corr = [-1 if a is None or a.corr is None else a.corr for a in args]
        seq = [-1 if a is None or a.seq is None else a.seq for a in args]
        shape = [-1] * len(xs)
        shape_name = self.shape_name
        for i in [i for i, n in enumerate(nids) if shape_name[n]]:
            a = args[i]
            if a is None or a.dims is EMPTY_RAW:
                continue
            skey = (bytes(a.dims), bytes(a.types), bytes(a.concrete))
            sid = self.shape_ids.get(skey)
            if sid is None:
                sid = self.shape_ids[skey] = len(self.shapes)
                self.shapes.append(op_shapes(skey))
            shape[i] = sid
        x = self.x
        x["name"].extend(nids)
        x["kind"].extend(kind)
        x["track"].extend(tracks)
        x["ts"].frombytes(ts.tobytes())
        x["dur"].frombytes(dur.tobytes())
        x["ext"].extend(ext)
        x["corr"].extend(corr)
        x["seq"].extend(seq)
        x["shape"].extend(shape)

    def _add_memory(self, events: list[WireEvent]) -> None:
        ok = [e for e in events if e.args is not None and e.args.nbytes is not None and abs(e.ts) <= MAX_TIME_US
              and abs(e.args.nbytes) <= MAX_SIZE]
        if len(ok) != len(events):
            without = sum(1 for e in events if e.args is None or e.args.nbytes is None)
            if without:
                self.diag["memory events without Bytes"] = self.diag.get("memory events without Bytes", 0) + without
            if len(events) - len(ok) - without:
                label = "memory events dropped (time not finite or Bytes out of range)"
                self.diag[label] = self.diag.get(label, 0) + len(events) - len(ok) - without
        track_ids = self.track_ids
        keys = [(e.pid, e.tid) for e in ok]
        for key in dict.fromkeys(keys):
            if key not in track_ids:
                self.new_track(key)
        args: list[WireArgs] = [e.args for e in ok]  # type: ignore[misc]
        m = self.m
        m["ts"].extend([e.ts for e in ok])
        m["track"].extend([track_ids[k] for k in keys])
        m["bytes"].extend([a.nbytes for a in args])
        m["total"].extend([-1 if a.total is None or abs(a.total) > MAX_SIZE else a.total for a in args])
        m["dtype"].extend([a.dev_type if a.dev_type is not None and 0 <= a.dev_type < 128 else -1 for a in args])
        m["did"].extend([a.dev_id if a.dev_id is not None and 0 <= a.dev_id < 2**31 else -1 for a in args])

    def finish(self, top: dict[str, Any]) -> Events:
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
        return Events(
            names=tuple(self.names),
            tracks=tracks,
            shapes=tuple(self.shapes),
            name=x["name"][order].astype(np.int32, copy=False),
            kind=x["kind"][order].astype(np.int8, copy=False),
            track=x["track"][order].astype(np.int32, copy=False),
            ts=x["ts"][order] - t0,
            dur=x["dur"][order],
            ext=x["ext"][order].astype(np.int64, copy=False),
            corr=x["corr"][order].astype(np.int64, copy=False),
            seq=x["seq"][order].astype(np.int64, copy=False),
            shape=x["shape"][order].astype(np.int32, copy=False),
            mem_ts=m["ts"][morder] - t0,
            mem_track=m["track"][morder].astype(np.int32, copy=False),
            mem_bytes=m["bytes"][morder].astype(np.int64, copy=False),
            mem_total=m["total"][morder].astype(np.int64, copy=False),
            mem_device_type=m["dtype"][morder].astype(np.int8, copy=False),
            mem_device_id=m["did"][morder].astype(np.int32, copy=False),
            meta=meta,
            diagnostics=dict(self.diag),
        )


def _lenient(objs: Any) -> list[WireEvent]:
    if not isinstance(objs, list):
        raise TraceError("traceEvents is not a list")
    return [lenient_event(obj) for obj in objs if isinstance(obj, dict)]


def add_batch(builder: Builder, text: bytes | bytearray | memoryview) -> None:
    """Append the events of ``text``, a JSON array; leniently if msgspec rejects any of it."""
    mark = builder.mark()
    try:
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
