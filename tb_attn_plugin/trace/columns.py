"""The column builder: how decoded events become ``Events`` columns with interned names. Each
batch comes as columns (``batch.Batch``): from the compiled scanner where it takes the batch
(``scanned``), else from msgspec's typed structs, which keep only the fields we read (unknown
fields are skipped without building Python objects, ``batch.EventBatch``); ``Builder.append``
applies one set of rules to both, so memory stays near the size of the columns, not of the
document. A batch that msgspec rejects (``NaN``, numbers out of range, strings where numbers
belong) is rolled back and decoded again leniently (the values through ``coerce``); events with
unusable times are dropped and counted in ``Events.diagnostics``. Names, tracks and shapes are
interned as first seen, so ids do not depend on batching, and two builders (two halves of a
file) merge. A name is interned clipped to ``MAX_NAME_CHARS`` characters: names that differ only
after that are one name.
"""

# Not split (over 400 lines): the builder's state and the one set of rules that appends to it
# (keep, count, intern, roll back, merge) are one piece; apart, the two paths' rules would drift.

from __future__ import annotations

from array import array
from collections.abc import Callable
from typing import Any

import msgspec
import numpy as np

from tb_attn_plugin.trace import scanned
from tb_attn_plugin.trace.batch import Batch, EventBatch, TrackKey
from tb_attn_plugin.trace.coerce import (
    ARG_NAMES,
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
    MODULE_PREFIX,
    UNSET,
    Kind,
    WireEvent,
    decode_events,
    kind_of,
    lenient_event,
    scopes_as_annotations,
)
from tb_attn_plugin.vocab.shape_ops import keeps_shapes

__all__ = ["CLIPPED_NAMES", "Builder", "add_batch", "add_loaded"]

#: The diagnostic that counts the names clipped to ``MAX_NAME_CHARS`` characters (each once).
CLIPPED_NAMES = f"names longer than {MAX_NAME_CHARS} characters (clipped)"

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
            self.shape_name[nid] = keeps_shapes(clean)
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

    def append(self, batch: Batch) -> None:
        """Append one batch (either path's), column by column in numpy: which events are kept,
        what is counted, and in which order names, tracks and shapes are interned."""
        if batch.x["ts"].size:
            self._complete(batch)
        if batch.m["ts"].size:
            self._memory(batch)

    def _kind(self, category: str | None) -> int:
        kind = self.kinds.get(category)
        if kind is None:
            kind = int(kind_of(category))
            if category is None or len(category) <= MAX_NAME_CHARS:  # no category is that long: not kept
                self.kinds[category] = kind
        return kind

    def _complete(self, b: Batch) -> None:
        x = b.x
        kind = np.array([*map(self._kind, b.cats), self._kind(None)], dtype=np.int8)[x["cat"]]  # -1: none
        nid, cat, track, ts, dur = x["name"], x["cat"], x["track"], x["ts"], x["dur"]
        module = kind == int(Kind.MODULE)
        keep: np.ndarray | None = None
        if module.any():  # keep nn.Module events only: other Python functions are not read
            is_module_name = np.zeros(len(b.names), dtype=bool)
            for i in np.unique(nid[module]).tolist():
                is_module_name[i] = b.names[i].startswith(MODULE_PREFIX)
            keep = ~module | is_module_name[nid]
        bad = ~(np.abs(ts) <= MAX_TIME_US) | ~(dur <= MAX_TIME_US)  # NaN compares False: bad
        if keep is not None:
            bad &= keep
        if bad.any():
            self.count("events with unusable times", int(bad.sum()))
            keep = ~bad if keep is None else keep & ~bad
        rows = None if keep is None else np.flatnonzero(keep)
        if rows is not None:
            kind, nid, cat, track, ts, dur = kind[rows], nid[rows], cat[rows], track[rows], ts[rows], dur[rows]
        negative = dur < 0
        if negative.any():
            self.count("negative durations (set to 0)", int(negative.sum()))
            dur = np.where(negative, 0.0, dur)
        other = kind == int(Kind.OTHER)
        if other.any():
            counts = np.bincount(cat[other] + 1, minlength=len(b.cats) + 1)
            for c in _first_seen(cat[other]).tolist():
                self.count_category(b.cats[c] if c >= 0 else None, int(counts[c + 1]))
        name_table = np.full(len(b.names), -1, np.int32)
        for i in _first_seen(nid).tolist():  # first-appearance order, so ids do not depend on batching
            name_table[i] = self.name_id(b.names[i])
        nids = name_table[nid]
        tracks = self._tracks(track, b.tracks)
        device = np.isin(kind, DEVICE_KINDS)
        if device.any():
            self.device_tracks.update(np.unique(tracks[device]).tolist())
        ext, corr, seq, graph = b.ints("x", ("ext", "corr", "seq", "graph"), rows)
        absent = ext == UNSET
        if absent.any():  # "External id", else "external id"
            ext = ext.copy()
            (ext[absent],) = b.ints("x", ("ext_lc",), np.flatnonzero(absent) if rows is None else rows[absent])
        _append(self.x, name=nids, kind=kind, track=tracks, ts=ts, dur=dur, ext=or_minus_one(ext),
                corr=or_minus_one(corr), seq=or_minus_one(seq), shape=self._shapes(b, rows, nids),
                graph=or_minus_one(graph))

    def _shapes(self, b: Batch, rows: np.ndarray | None, nids: np.ndarray) -> np.ndarray:
        """The shape id of each kept event's inputs (-1: not an op whose shapes are kept, or no
        ``Input Dims``); an argument list read as absent (cut) is counted by argument and op."""
        shape = np.full(nids.size, -1, np.int32)
        wanted = np.flatnonzero(np.array(self.shape_flags(), dtype=bool)[nids])
        if not wanted.size:
            return shape
        local, keys = b.shapes(wanted if rows is None else rows[wanted])
        recorded = local >= 0
        wanted, local = wanted[recorded], local[recorded]
        cut = np.array([k[3] for k in keys], np.int64)[local] if local.size else local
        if cut.any():  # by argument, then in event order
            for arg in range(len(ARG_NAMES)):
                for nid in nids[wanted][(cut >> arg) & 1 == 1].tolist():
                    self.count(cut_arg_label(arg, self.names[nid]))
        table = np.full(len(keys), -1, np.int32)
        shape_ids = self.shape_ids
        for t in _first_seen(local).tolist():
            key = keys[t][:3]
            if not key[0]:  # no "Input Dims" (or its list cut): no shapes
                continue
            sid = shape_ids.get(key)
            if sid is None:
                sid = shape_ids[key] = len(self.shapes)
                self.shapes.append(op_shapes(key))
            table[t] = sid
        shape[wanted] = table[local]
        return shape

    def shape_flags(self) -> list[bool]:
        """Whether each name id is an op whose shapes are kept, in id order."""
        return [self.shape_name[i] for i in range(len(self.names))]

    def _tracks(self, local: np.ndarray, keys: list[TrackKey]) -> np.ndarray:
        """Each event's track id from its index into the batch's (pid, tid) pairs, new pairs
        interned in order of first appearance."""
        table = np.full(len(keys), -1, np.int32)
        track_ids = self.track_ids
        for i in _first_seen(local).tolist():
            tr = track_ids.get(keys[i])
            table[i] = self.new_track(keys[i]) if tr is None else tr
        return table[local]

    def _memory(self, b: Batch) -> None:
        (nbytes,) = b.ints("m", ("bytes",), None)
        ok = usable_memory(self.count, b.m["ts"], nbytes)
        rows = None if ok is None else np.flatnonzero(ok)
        ts, track = (b.m["ts"], b.m["track"]) if rows is None else (b.m["ts"][rows], b.m["track"][rows])
        if rows is not None:
            nbytes = nbytes[rows]
        tracks = self._tracks(track, b.tracks)
        total, dev_type, dev_id = b.ints("m", ("total", "dtype", "did"), rows)
        _append(self.m, ts=ts, track=tracks, bytes=nbytes,
                total=np.where((total == UNSET) | (np.abs(total) > MAX_SIZE), -1, total),
                dtype=np.where((dev_type >= 0) & (dev_type < 128), dev_type, -1),
                did=np.where((dev_id >= 0) & (dev_id < 2**31), dev_id, -1))

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


def _first_seen(codes: np.ndarray) -> np.ndarray:
    """The distinct values of ``codes`` in order of first appearance."""
    values, first = np.unique(codes, return_index=True)
    return values[np.argsort(first, kind="stable")]


def _append(cols: dict[str, array[Any]], **values: np.ndarray) -> None:
    for k, v in values.items():
        cols[k].frombytes(v.astype(cols[k].typecode, copy=False).tobytes())


def or_minus_one(values: np.ndarray) -> np.ndarray:
    """``values`` with the fields an event did not have (``UNSET``) as -1, the columns' "none"."""
    return np.where(values == UNSET, -1, values)


def usable_memory(count: Callable[[str, int], None], ts: np.ndarray, nbytes: np.ndarray) -> np.ndarray | None:
    """Which memory events to keep (with Bytes, a finite time, sizes in range), the others counted
    in the diagnostics; None when every one is kept."""
    without = nbytes == UNSET
    ok = ~without & (np.abs(ts) <= MAX_TIME_US) & (np.abs(nbytes) <= MAX_SIZE)
    if ok.all():
        return None
    if without.any():
        count("memory events without Bytes", int(without.sum()))
    dropped = int((~ok & ~without).sum())
    if dropped:
        count("memory events dropped (time not finite or Bytes out of range)", dropped)
    return ok


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
        batch = scanned.scan(text) if scan else None
        builder.append(EventBatch(decode_events(text)) if batch is None else batch)
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
        builder.append(EventBatch(_lenient(objs)))
    except RecursionError as exc:  # re-encoding a value that json.loads only just managed to nest
        raise nested_too_deeply(exc) from None
