"""Decoding trace bytes into the event model, fast and in bounded memory.

Kineto pretty-prints traces with every event starting on a line ``  {`` (two spaces), and JSON
strings cannot hold raw newlines, so ``\\n  {`` marks event starts and nothing else. We cut the
byte stream there into batches of a few MB, decode each batch with msgspec into typed structs
that keep only the fields we read (unknown fields are skipped without building Python
objects), and append those fields to compact columns. Memory stays near the size of the
columns, not of the document. Other layouts (minified JSON, a bare event array) fall back to
decoding the whole document at once.

A batch that msgspec rejects (``NaN``, numbers out of range, strings where numbers belong) is
decoded again leniently; events with unusable times are dropped and counted in
``Events.diagnostics``. Input that is not a trace raises ``TraceError`` with a clear message.

Hostile input stays within bounds: nesting deeper than Python's recursion limit, integers of
thousands of digits and invalid UTF-8 raise ``TraceError``, never anything else; times and
sizes beyond any real trace's are dropped like non-finite ones, and shapes are reduced to lists
of integers in range, so the analyses' int64 and float arithmetic cannot overflow. Whitespace
costs no memory however much of it there is (``_Filler``: a 2 MB gzip of 2 GiB of spaces took
6.3 GB), and no decoded string keeps a lone surrogate (``\\ud800`` is valid JSON, but no UTF-8
encoder takes the string it decodes to, so a response carrying it failed).
"""

from __future__ import annotations

import json
import math
import re
from array import array
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

import msgspec
import numpy as np

from tb_attn_plugin.trace.events import Events, OpShapes, TraceError, TraceMeta, Track
from tb_attn_plugin.trace.schema import (
    DEVICE_PROPERTY_KEYS,
    MEMORY_EVENT_NAME,
    MODULE_PREFIX,
    SHAPE_OPS,
    Kind,
    kind_of,
)

__all__ = ["decode", "decode_bytes"]

_HEADER_RE = re.compile(rb'"traceEvents"\s*:\s*\[')
_EVENT_START = b"\n  {"
_EVENT_END = b"\n  }"
_HEADER_LIMIT = 64 << 20  # a header larger than this is not Kineto's layout
_EMPTY_RAW = msgspec.Raw(b"")
_INT64_MAX = 2**63 - 1
#: Larger times (microseconds; about 3 million years) or sizes (bytes or elements) are not from
#: a real trace: treated as unusable, so sums and products downstream stay finite and in int64.
_MAX_TIME_US = 1e20
_MAX_SIZE = 2**53
_MAX_RANK = 64  # sizes of one input (PyTorch tensors have at most 64 dimensions)
_MAX_INPUTS = 4096  # inputs of one op


class _Args(msgspec.Struct, gc=False):
    ext: int | None = msgspec.field(name="External id", default=None)
    ext_lc: int | None = msgspec.field(name="external id", default=None)
    corr: int | None = msgspec.field(name="correlation", default=None)
    seq: int | None = msgspec.field(name="Sequence number", default=None)
    dims: msgspec.Raw = msgspec.field(name="Input Dims", default=_EMPTY_RAW)
    types: msgspec.Raw = msgspec.field(name="Input type", default=_EMPTY_RAW)
    concrete: msgspec.Raw = msgspec.field(name="Concrete Inputs", default=_EMPTY_RAW)
    nbytes: int | None = msgspec.field(name="Bytes", default=None)
    total: int | None = msgspec.field(name="Total Allocated", default=None)
    dev_type: int | None = msgspec.field(name="Device Type", default=None)
    dev_id: int | None = msgspec.field(name="Device Id", default=None)


class _Event(msgspec.Struct, gc=False):
    ph: str = ""
    name: str = ""
    cat: str | None = None
    pid: int | str = 0
    tid: int | str = 0
    ts: float = math.nan
    dur: float = 0.0
    args: _Args | None = None


_batch_decoder = msgspec.json.Decoder(list[_Event])
_top_decoder = msgspec.json.Decoder(dict[str, msgspec.Raw])
_DEVICE_KINDS = frozenset({int(Kind.KERNEL), int(Kind.MEMCPY), int(Kind.MEMSET), int(Kind.GPU_ANNOTATION)})


class _Builder:
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

    def count(self, key: str) -> None:
        self.diag[key] = self.diag.get(key, 0) + 1

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
                self.shapes.append(_shapes(key))
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
        clean = _clean(name)
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
        norm = (_as_id(key[0]), _as_id(key[1]))
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

    def add(self, events: list[_Event]) -> None:
        """Append one batch. Column by column (list comprehensions), which is several times
        faster in CPython than one loop doing every field of every event."""
        complete = [e for e in events if e.ph == "X"]
        memory = [e for e in events if e.ph == "i" and e.name == MEMORY_EVENT_NAME]
        if complete:
            self._add_complete(complete)
        if memory:
            self._add_memory(memory)

    def _kinds(self, xs: list[_Event]) -> list[int]:
        kinds = self.kinds
        cats = [e.cat for e in xs]
        for cat in set(cats):
            if cat not in kinds:
                kinds[cat] = int(kind_of(cat))
        return [kinds[c] for c in cats]

    def _add_complete(self, xs: list[_Event]) -> None:
        kind = self._kinds(xs)
        module = int(Kind.MODULE)
        if module in kind:  # keep nn.Module events only: other Python functions are not read
            pairs = [(e, k) for e, k in zip(xs, kind, strict=True)
                     if k != module or e.name.startswith(MODULE_PREFIX)]
            xs, kind = [e for e, _ in pairs], [k for _, k in pairs]
        ts = np.array([e.ts for e in xs], np.float64)
        dur = np.array([e.dur for e in xs], np.float64)
        bad = ~(np.abs(ts) <= _MAX_TIME_US) | ~(dur <= _MAX_TIME_US)  # NaN compares False: bad
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
        names = [e.name for e in xs]
        name_ids = self.name_ids
        for name in dict.fromkeys(names):  # first-appearance order, so ids do not depend on batching
            if name not in name_ids:
                self.intern(name)
        nids = [name_ids[n] for n in names]
        keys = [(e.pid, e.tid) for e in xs]
        track_ids = self.track_ids
        for track_key in dict.fromkeys(keys):
            if track_key not in track_ids:
                self.new_track(track_key)
        tracks = [track_ids[k] for k in keys]
        for k, tr in set(zip(kind, tracks, strict=True)):
            if k in _DEVICE_KINDS:
                self.device_tracks.add(tr)
        args = [e.args for e in xs]
        ext = [-1 if a is None else a.ext if a.ext is not None else a.ext_lc if a.ext_lc is not None else -1
               for a in args]
        corr = [-1 if a is None or a.corr is None else a.corr for a in args]
        seq = [-1 if a is None or a.seq is None else a.seq for a in args]
        shape = [-1] * len(xs)
        shape_name = self.shape_name
        for i in [i for i, n in enumerate(nids) if shape_name[n]]:
            a = args[i]
            if a is None or a.dims is _EMPTY_RAW:
                continue
            skey = (bytes(a.dims), bytes(a.types), bytes(a.concrete))
            sid = self.shape_ids.get(skey)
            if sid is None:
                sid = self.shape_ids[skey] = len(self.shapes)
                self.shapes.append(_shapes(skey))
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

    def _add_memory(self, events: list[_Event]) -> None:
        ok = [e for e in events if e.args is not None and e.args.nbytes is not None and abs(e.ts) <= _MAX_TIME_US
              and abs(e.args.nbytes) <= _MAX_SIZE]
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
        args: list[_Args] = [e.args for e in ok]  # type: ignore[misc]
        m = self.m
        m["ts"].extend([e.ts for e in ok])
        m["track"].extend([track_ids[k] for k in keys])
        m["bytes"].extend([a.nbytes for a in args])
        m["total"].extend([-1 if a.total is None or abs(a.total) > _MAX_SIZE else a.total for a in args])
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
            device_properties=tuple(_clean_tree(p) for p in props if isinstance(p, dict)),
            distributed_info=_clean_tree(dist) if isinstance(dist, dict) else None,
            record_shapes=_flag(top.get("record_shapes")),
            profile_memory=_flag(top.get("profile_memory")),
            with_flops=_flag(top.get("with_flops")),
            extra={_clean(k): _clean(v) if isinstance(v, str) else v for k, v in top.items()
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


def _as_id(value: int | str) -> int | str:
    if isinstance(value, str):
        return int(value) if value.isdigit() else _clean(value)
    return value


_SURROGATE = re.compile("[\ud800-\udfff]")


def _clean(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD. Only strings seen for the first time
    come here (interned names, tracks, shapes, metadata), so the check costs nothing per event;
    msgspec refuses lone surrogates, so they come only from ``json.loads`` (the lenient path,
    the header and trailer, shapes)."""
    return text if text.isascii() else _SURROGATE.sub("\ufffd", text)


def _clean_tree(value: Any) -> Any:
    """``value`` (decoded JSON) with every string in it cleaned, keys included. In place and
    without recursion: a value may nest as deeply as ``json.loads`` managed."""
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if not all(k.isascii() for k in node):
                items = [(_clean(k), v) for k, v in node.items()]
                node.clear()
                node.update(items)  # two keys that clean to one: the last wins, as with duplicate keys
            children: Iterable[tuple[Any, Any]] = node.items()
        elif isinstance(node, list):
            children = enumerate(node)
        else:
            continue
        for k, v in children:
            if isinstance(v, str):
                node[k] = _clean(v)  # an existing key or index: the container does not change size
            elif isinstance(v, (dict, list)):
                stack.append(v)
    return value


def _flag(value: Any) -> bool | None:
    return bool(value) if isinstance(value, (bool, int)) else None


def _shapes(key: tuple[bytes, bytes, bytes]) -> OpShapes:
    def load(raw: bytes) -> tuple[Any, ...]:
        if not raw:
            return ()
        try:
            value = json.loads(raw)
        except (ValueError, RecursionError):  # not JSON, an int of thousands of digits, nested too deeply
            return ()
        return tuple(value) if isinstance(value, list) else ()

    dims, types, concrete = (load(raw)[:_MAX_INPUTS] for raw in key)
    return OpShapes(dims=tuple(_sizes(d) for d in dims), types=tuple(_text(t) for t in types),
                    concrete=tuple(_text(c) for c in concrete))


def _sizes(value: Any) -> list[int]:
    """One input's sizes: a list of integers in range, else ``[]`` (not a tensor, or unusable: a
    tensor list, strings, floats, sizes no tensor has). Analyses then never meet other types."""
    if isinstance(value, list) and len(value) <= _MAX_RANK and all(
            type(x) is int and -_MAX_SIZE <= x <= _MAX_SIZE for x in value):
        return value
    return []


def _text(value: Any) -> str:
    """A type name or concrete input as text ("" for a value nested too deeply to format)."""
    try:
        return _clean(str(value))
    except RecursionError:
        return ""


# -- lenient path -------------------------------------------------------------------------
def _int_or_none(value: Any) -> int | None:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value if -_INT64_MAX <= value <= _INT64_MAX else None
    if isinstance(value, float) and math.isfinite(value) and abs(value) <= _INT64_MAX:
        return int(value)
    if isinstance(value, str):
        try:
            return _int_or_none(int(value))
        except ValueError:
            return None
    return None


def _float(value: Any, default: float) -> float:
    if isinstance(value, bool):
        return default
    if isinstance(value, (int, float)):
        try:
            return float(value)
        except OverflowError:
            return math.nan
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return math.nan
    return default


def _raw(value: Any) -> msgspec.Raw:
    return _EMPTY_RAW if value is None else msgspec.Raw(json.dumps(value).encode())


def _lenient(objs: Any) -> list[_Event]:
    if not isinstance(objs, list):
        raise TraceError("traceEvents is not a list")
    out = []
    for obj in objs:
        if not isinstance(obj, dict):
            continue
        a = obj.get("args")
        args = None
        if isinstance(a, dict):
            args = _Args(
                ext=_int_or_none(a.get("External id")), ext_lc=_int_or_none(a.get("external id")),
                corr=_int_or_none(a.get("correlation")), seq=_int_or_none(a.get("Sequence number")),
                dims=_raw(a.get("Input Dims")),
                types=_raw(a.get("Input type")), concrete=_raw(a.get("Concrete Inputs")),
                nbytes=_int_or_none(a.get("Bytes")), total=_int_or_none(a.get("Total Allocated")),
                dev_type=_int_or_none(a.get("Device Type")), dev_id=_int_or_none(a.get("Device Id")),
            )
        pid, tid = obj.get("pid", 0), obj.get("tid", 0)
        out.append(_Event(
            ph=str(obj.get("ph", "")), name=str(obj.get("name", "")),
            cat=obj.get("cat") if isinstance(obj.get("cat"), str) else None,
            pid=pid if isinstance(pid, (int, str)) and not isinstance(pid, bool) else str(pid),
            tid=tid if isinstance(tid, (int, str)) and not isinstance(tid, bool) else str(tid),
            ts=_float(obj.get("ts"), math.nan), dur=_float(obj.get("dur"), 0.0), args=args,
        ))
    return out


def _loads(text: bytes) -> Any:
    """``json.loads``, except that an integer of more digits than Python converts (4300) reads
    as a float (infinite, so unusable like any other out-of-range number) instead of failing."""
    try:
        return json.loads(text)
    except ValueError as exc:
        if "integer string conversion" not in str(exc):
            raise
    return json.loads(text, parse_int=_parse_int)


def _parse_int(digits: str) -> int | float:
    return int(digits) if len(digits) <= 4000 else float(digits)


def _nested_too_deeply(exc: RecursionError) -> TraceError:
    return TraceError(f"invalid JSON: nested too deeply to read ({exc})")


def _add_batch(builder: _Builder, text: bytes | bytearray | memoryview) -> None:
    mark = builder.mark()
    try:
        builder.add(_batch_decoder.decode(text))
        return
    except (msgspec.DecodeError, msgspec.ValidationError, OverflowError, TypeError, RecursionError):
        builder.rollback(mark)
    try:
        objs = _loads(bytes(text))
    except RecursionError as exc:
        raise _nested_too_deeply(exc) from None
    except ValueError as exc:
        raise TraceError(f"invalid JSON in traceEvents: {exc}") from None
    builder.count("events decoded leniently")
    try:
        builder.add(_lenient(objs))
    except RecursionError as exc:  # re-encoding a value that json.loads only just managed to nest
        raise _nested_too_deeply(exc) from None


# -- document layouts ---------------------------------------------------------------------
_TRUNCATED = "truncated trace: the JSON ends early (is it still being written?)"


def _load_object(text: bytes, what: str) -> dict[str, Any]:
    try:
        value = _loads(text)
    except json.JSONDecodeError as exc:
        # A cut inside a string reports where the string starts, not where the text ends.
        if exc.pos >= len(text.rstrip()) or exc.msg.startswith("Unterminated string"):
            raise TraceError(_TRUNCATED) from None
        raise TraceError(f"invalid JSON in the trace {what}: {exc}") from None
    except RecursionError as exc:
        raise TraceError(f"invalid JSON in the trace {what}: nested too deeply to read ({exc})") from None
    except ValueError as exc:
        raise TraceError(f"invalid JSON in the trace {what}: {exc}") from None
    if not isinstance(value, dict):
        raise TraceError(f"the trace {what} is not a JSON object")
    return value


def _whole(document: bytes) -> Events:
    """Any layout: decode the whole document (memory ~ a few times its size). The stream's
    callers pass what ``_document`` held: filler squeezed out, and at most ``max_bytes``."""
    stripped = document.strip()
    if not stripped:
        raise TraceError("empty file")
    builder = _Builder()
    if stripped[:1] == b"[":
        _add_batch(builder, stripped)
        return _finish(builder, {})
    if stripped[:1] != b"{":
        raise TraceError("not JSON: a trace is a JSON object with traceEvents")
    try:
        # Fast path: top-level values as raw slices, the events through the typed decoder.
        raw = _top_decoder.decode(stripped)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        raw = None
    if raw is not None and "traceEvents" in raw:
        events_raw = raw.pop("traceEvents")
        try:
            top = {k: _loads(bytes(v)) for k, v in raw.items()}
        except (ValueError, RecursionError):
            top = None
        with memoryview(events_raw) as text:
            if top is not None and text[:1] == b"[":
                _add_batch(builder, text)
                return _finish(builder, top)
    top = _load_object(stripped, "document")
    events = top.pop("traceEvents", None)
    if events is None:
        raise TraceError("not a trace: the JSON object has no traceEvents")
    builder = _Builder()
    try:
        builder.add(_lenient(events))
    except RecursionError as exc:
        raise _nested_too_deeply(exc) from None
    return _finish(builder, top)


def _finish(builder: _Builder, top: dict[str, Any]) -> Events:
    if not builder.x["name"] and not builder.m["ts"]:
        raise TraceError("the trace has no events")
    return builder.finish(top)


def decode(chunks: Iterable[bytes], *, batch_bytes: int = 8 << 20) -> Events:
    """Decode a trace from a stream of byte chunks (already decompressed)."""
    opened = _open(chunks, batch_bytes)
    if isinstance(opened, Events):
        return opened
    builder, header, rest = opened
    return _finish(builder, {**header, **_closing(builder, rest)})


def _open(chunks: Iterable[bytes], batch_bytes: int) -> tuple[_Builder, dict[str, Any], bytearray] | Events:
    """Read the header and decode every whole batch; return what is left at the end of the
    stream (or, for a layout other than Kineto's, the whole document decoded)."""
    it: Iterator[bytes] = iter(chunks)
    head = _header(it)
    if isinstance(head, Events):
        return head
    header, rest = head
    builder = _Builder()
    return builder, header, _batches(builder, it, rest, batch_bytes)


def _header(it: Iterator[bytes]) -> tuple[dict[str, Any], bytearray] | Events:
    """The document's keys before the events and the bytes after ``"traceEvents": [``; or, for
    a layout other than Kineto's, the whole document decoded at once."""
    buf = bytearray()
    filler = _Filler()
    match = None
    for chunk in it:
        buf += chunk
        match = _HEADER_RE.search(buf, 0, min(len(buf), _HEADER_LIMIT))
        if match is not None:
            break
        filler.squeeze(buf)  # whitespace is not held, nor counted against the header's limit
        if len(buf) > _HEADER_LIMIT:
            break
    if match is None:
        return _whole(_document(buf, it))
    header_text = bytes(buf[: match.start()]).rstrip().rstrip(b",").strip()
    if not header_text.startswith(b"{"):
        return _whole(_document(buf, it))
    rest = bytearray(buf[match.end():])
    filler = _Filler()
    seen = bool(rest.strip())
    while not seen:  # whitespace only so far: look at each new chunk once, not at all of it again
        following = next(it, None)
        if following is None:
            raise TraceError(_TRUNCATED)
        rest += following
        filler.squeeze(rest)
        seen = bool(following.strip())
    start = len(rest) - len(rest.lstrip())
    if not rest.startswith(b"]", start) and not (rest.startswith(b"{", start) and rest.endswith(b"\n  ", 0, start)):
        # Not Kineto's layout (events not each on a line at two spaces): decode it whole.
        del buf[match.end():]
        buf += rest
        del rest
        return _whole(_document(buf, it))
    header = _load_object(header_text + b"}", "header") if header_text != b"{" else {}
    return header, rest


def _document(buf: bytearray, it: Iterator[bytes]) -> bytes:
    """The whole document, for a layout decoded at once: ``buf`` (its start) and the rest of the
    stream, stripped. Filler is squeezed out as it arrives, so what is held is the document's
    content, whose size the reader's ``max_bytes`` bounds (a minified trace of real events has
    to be held whole: nothing in it marks where an event starts)."""
    filler = _Filler()
    filler.squeeze(buf)
    for chunk in it:
        buf += chunk
        filler.squeeze(buf)
    del buf[: _stop(_WS_PREFIX, buf, 0, len(buf))]
    if buf:
        del buf[_last_non_space(buf, len(buf)) + 1:]
    document = bytes(buf)
    buf.clear()
    return document


def _batches(builder: _Builder, it: Iterator[bytes], rest: bytearray, batch_bytes: int) -> bytearray:
    """Decode whole batches of events as the stream comes; return what is left at its end."""
    searched = 0  # rest[:searched] holds no event start but the one at 0, if any
    filler = _Filler()
    for chunk in it:
        rest += chunk
        if len(rest) < batch_bytes:
            continue
        low = max(searched - len(_EVENT_START) + 1, 0)  # a start ending before ``searched`` was seen
        cut = rest.rfind(_EVENT_START, low) if rest.find(b"\n", low) >= 0 else -1  # memchr skips filler fast
        if cut <= 0:
            # One event larger than a batch, or whitespace: read on, holding the event only.
            filler.squeeze(rest)
            searched = len(rest)
            continue
        _add_batch_in_place(builder, rest, cut)
        del rest[:cut]
        filler.dropped(cut)
        searched = 0
    return rest


def _closing(builder: _Builder, rest: bytearray) -> dict[str, Any]:
    """The last events, the closing ``]`` and the document's trailing keys (``rest`` is used up).

    ``rest`` is at most a batch and a chunk, or one event larger than those, with filler squeezed
    out by ``_batches``: the copies ``_tail`` makes of it (and its fallbacks) are bounded so."""
    end = _last_non_space(rest, len(rest)) + 1
    if rest[end - 1: end] != b"}":
        raise TraceError(_TRUNCATED)
    del rest[end:]
    tail = bytes(rest)
    rest.clear()
    return _tail(builder, tail)


# -- two halves at once ---------------------------------------------------------------------
# A large local trace can be decoded in two processes: the caller cuts the file at an event
# start near its middle, decodes the second half in a child (``decode_second_half``, whose
# result is plain data that pickles), the first half itself (``decode_first_half``), and
# merges (``merge_halves``). The result equals ``decode`` of the whole file.


def decode_first_half(chunks: Iterable[bytes], *, batch_bytes: int = 8 << 20) -> tuple[_Builder, dict[str, Any]] | None:
    """Decode from the start of the file to the cut (an event start). None: not Kineto's layout."""
    opened = _open(chunks, batch_bytes)
    if isinstance(opened, Events):
        return None
    builder, header, rest = opened
    if rest.strip():
        _add_batch(builder, _as_array(memoryview(rest)))
    return builder, header


def decode_second_half(chunks: Iterable[bytes], *, batch_bytes: int = 8 << 20) -> dict[str, Any]:
    """Decode from the cut to the end of the file; the result pickles."""
    builder = _Builder()
    rest = _batches(builder, iter(chunks), bytearray(), batch_bytes)
    trailer = _closing(builder, rest)
    return {"builder": builder.export(), "trailer": trailer}


def merge_halves(first: _Builder, header: dict[str, Any], second: dict[str, Any]) -> Events:
    first.merge(second["builder"])
    return _finish(first, {**header, **second["trailer"]})


_SPACE = frozenset(b" \t\r\n")


def _add_batch_in_place(builder: _Builder, rest: bytearray, cut: int) -> None:
    """Decode ``rest[:cut]`` (whitespace, events separated by commas, a trailing comma) as an
    array without copying it: the leading whitespace byte becomes ``[`` and the trailing comma
    ``]``. Both bytes are cut off by the caller right after."""
    last = _last_non_space(rest, cut)
    if rest[0] not in _SPACE or rest[last] != ord(","):
        with memoryview(rest) as view:
            _add_batch(builder, _as_array(view[:cut]))
        return
    rest[0] = ord("[")
    rest[last] = ord("]")
    with memoryview(rest) as view, view[: last + 1] as body:
        _add_batch(builder, body)


def _last_non_space(buf: bytearray, end: int, *, window: int = 1 << 16) -> int:
    """The position of the last byte before ``end`` that is not whitespace (0 if none), found a
    window at a time in C: there may be megabytes of whitespace."""
    while end > 0:
        start = max(end - window, 0)
        with memoryview(buf) as view, view[start:end] as part:
            kept = len(bytes(part).rstrip(b" \t\r\n"))
        if kept:
            return start + kept - 1
        end = start
    return 0


# -- filler ---------------------------------------------------------------------------------
_SAMPLE_STEP = 64
_FILLER_RUN = 512 + _SAMPLE_STEP  # whitespace runs this long are always squeezed, shorter ones may be
_WS_ZERO = bytes(0 if b in b" \t\r\n" else 1 for b in range(256))  # a table for bytes.translate
_WS_SAMPLES = bytes(512 // _SAMPLE_STEP + 1)  # whitespace at that many samples in a row: a candidate
_WS_PREFIX = re.compile(rb"[ \t\r\n]*")
# From outside a string: everything up to the opening quote of a string that does not end
# before the end position (or to the end position).
_OUTSIDE = re.compile(rb'[^"]*+(?:"(?:[^"\\]++|\\.)*+"[^"]*+)*+', re.DOTALL)
_INSIDE = re.compile(rb'(?:[^"\\]++|\\.)*+', re.DOTALL)  # from inside a string: up to its closing quote


class _Filler:
    """Squeezes whitespace out of a buffer that grows by chunks and starts outside any string
    (at a document's start, or an event start), so that filler between or inside events costs
    no memory and is copied at most once.

    A run of whitespace is found by sampling every ``_SAMPLE_STEP``-th byte, so ordinary JSON
    (pretty-printed included) costs little more than one look at 1/64 of it in C, nearly never
    a Python step per candidate; a run is squeezed only when it lies outside
    strings (spaces inside a string are content), which is read with regular expressions from
    the last known point, only as far as the run (strings are scanned lazily, never twice). A
    squeezed run keeps its line break and the up to three bytes after it, so ``\\n  {`` marks
    event starts exactly where it did. Only ``_batches`` on an event larger than a batch (or on
    filler), a header not found in the first chunk and the layouts read whole call this: a
    Kineto trace's batches never pay for it.
    """

    __slots__ = ("done", "inside", "pos")

    def __init__(self) -> None:
        self.done = 0  # runs before this are squeezed (or are content)
        self.pos = 0  # strings are read up to here, where a string is open if ``inside``
        self.inside = False

    def dropped(self, n: int) -> None:
        """The buffer lost its first ``n`` bytes, cut at an event start (outside any string)."""
        self.done = max(self.done - n, 0)
        self.pos, self.inside = 0, False

    def squeeze(self, buf: bytearray) -> None:
        start, end, step = self.done, len(buf), _SAMPLE_STEP
        if end - start < _FILLER_RUN:
            return
        runs: list[tuple[int, int, bytes]] = []  # (start, end, what replaces it)
        floor = start  # no run begins before this one's end
        samples = buf[start:end:step].translate(_WS_ZERO)
        k = samples.find(_WS_SAMPLES)
        span = len(_WS_SAMPLES) * step - step
        while k >= 0:
            p = start + k * step
            b = _stop(_WS_PREFIX, buf, p, p + span)
            if b == p + span:  # whitespace throughout, not only at the samples (mostly, in pretty JSON)
                b = _run_end(buf, b, end)
                a = _run_start(buf, max(floor, p - step), p)
                if self._outside(buf, a):
                    runs.append((a, b, _squeezed(buf, a, b)))
                    self.pos = b
                elif self.pos == a:  # spaces in a string: read past them (they hold no quote)
                    self.pos = b
                floor = b
            k = samples.find(_WS_SAMPLES, (b - start) // step + 1)
        if runs:
            buf[start:] = _without(buf, start, end, runs)
        shift = sum(b - a - len(r) for a, b, r in runs)
        before = sum(b - a - len(r) for a, b, r in runs if b <= self.pos)
        self.pos -= before
        if runs and runs[-1][1] == end:  # a trailing run: squeeze it again with what follows
            self.done = self.pos = runs[-1][0] - (shift - (end - runs[-1][0] - len(runs[-1][2])))
            self.inside = False
        else:
            self.done = max(floor - shift, len(buf) - _FILLER_RUN)

    def _outside(self, buf: bytearray, target: int) -> bool:
        """Whether ``buf[target]`` is outside any string, reading strings on from ``self.pos``."""
        pos, inside = self.pos, self.inside
        while pos < target:
            if inside:
                pos = _stop(_INSIDE, buf, pos, target)
                if pos == target or buf[pos] != 0x22:
                    break  # still in the string at the target, or at a backslash just before it
                inside = False
            else:
                pos = _stop(_OUTSIDE, buf, pos, target)
                if pos == target:
                    break
                inside = True  # at a string's opening quote: it goes on past the target
            pos += 1
        self.pos, self.inside = pos, inside
        return pos == target and not inside


def _stop(pattern: re.Pattern[bytes], buf: bytearray, pos: int, end: int) -> int:
    """Where ``pattern``, which also matches the empty string, stops matching from ``pos``."""
    m = pattern.match(buf, pos, end)
    return pos if m is None else m.end()


def _run_start(buf: bytearray, low: int, p: int) -> int:
    """Where the whitespace that ends at ``p`` begins, looking back no further than ``low``."""
    with memoryview(buf) as view, view[low:p] as part:
        return low + len(bytes(part).rstrip(b" \t\r\n"))


def _run_end(buf: bytearray, p: int, end: int) -> int:
    """Where the whitespace from ``p`` ends. Blocks of doubling size are tested first, by
    deleting whitespace from a copy (three times as fast as the regular expression alone, which
    then finds the end within the first block that is not all whitespace)."""
    size = 4096
    with memoryview(buf) as view:
        while p + size <= end:
            with view[p: p + size] as part:
                if bytes(part).translate(None, b" \t\r\n"):
                    break
            p += size
            size = min(2 * size, 1 << 20)
    return _stop(_WS_PREFIX, buf, p, end)


def _squeezed(buf: bytearray, a: int, b: int) -> bytes:
    """What replaces the whitespace ``buf[a:b]``: its last line break and the bytes after it
    if they are three or fewer, else three spaces, so the line it ends still ends (or does not)
    in two spaces, however the next chunk goes on."""
    nl = buf.rfind(b"\n", a, b)
    if nl >= 0 and b - nl <= 4:
        return bytes(buf[nl:b])
    return b"\n   " if nl >= 0 else b"   "


def _without(buf: bytearray, start: int, end: int, runs: list[tuple[int, int, bytes]]) -> bytes:
    """``buf[start:end]`` with each run replaced, in one copy (the views die on return)."""
    with memoryview(buf) as view:
        pieces: list[bytes | memoryview] = []
        last = start
        for a, b, r in runs:
            pieces += (view[last:a], r)
            last = b
        pieces.append(view[last:end])
        return b"".join(pieces)


_TRAILER_RE = re.compile(rb"\]\s*(?:,(?P<keys>.*))?\}$", re.DOTALL)


def _tail(builder: _Builder, tail: bytes) -> dict[str, Any]:
    """Decode the last events and return the document's keys after the events array.

    Usually the tail completes a document that opens with ``{"traceEvents": [``, which one
    decoder call splits into the events and the keys after them, however those keys nest.
    Otherwise (values that only the lenient decoder takes, say) the array's closing bracket is
    the last ``]`` after which only the document's remaining keys follow; a ``]`` inside those
    keys (a path in traceName, say) fails to decode as the end of the events and the search
    moves left.
    """
    trailer = _tail_as_document(builder, tail)
    if trailer is not None:
        return trailer
    pos = len(tail)
    error: TraceError | None = None
    for _ in range(16):
        pos = tail.rfind(b"]", 0, pos)
        if pos < 0:
            break
        m = _TRAILER_RE.match(tail, pos)
        if m is None:
            continue
        keys = (m.group("keys") or b"").strip()
        try:
            trailer = _load_object(b"{" + keys + b"}", "trailer") if keys else {}
        except TraceError:
            continue
        body = tail[:pos].strip()
        try:
            if body:
                _add_batch(builder, _as_array(memoryview(body)))
        except TraceError as exc:
            error = error or exc  # the events before the outermost candidate are broken
            continue
        return trailer
    raise error or TraceError(_TRUNCATED)


def _tail_as_document(builder: _Builder, tail: bytes) -> dict[str, Any] | None:
    try:
        raw = _top_decoder.decode(b'{"traceEvents":[' + tail)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    except RecursionError as exc:
        raise _nested_too_deeply(exc) from None
    events = raw.pop("traceEvents")  # a duplicate key in the trailer wins, as in any JSON reader
    try:
        trailer = {k: _loads(bytes(v)) for k, v in raw.items()}
    except ValueError:
        return None
    except RecursionError as exc:
        raise _nested_too_deeply(exc) from None
    with memoryview(events) as text:
        if text[:1] != b"[":
            return None
        _add_batch(builder, text)
    return trailer


def _as_array(body: memoryview) -> bytes:
    text = bytes(body).strip()
    if text.endswith(b","):
        text = text[:-1]
    return b"[" + text + b"]"


def decode_bytes(data: bytes) -> Events:
    """Decode a whole trace held in memory (tests, small files)."""
    return decode([data])
