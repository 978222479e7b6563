"""The fast path of the column builder: a batch read by the compiled Kineto event scanner
(``_scan.c``) and appended to a ``Builder`` in numpy, with no Python object per event.

The scanner returns the complete and memory events' fields as columns, and names (clipped as
``Builder.intern`` clips them), categories and shape triples once each; this module applies
exactly the rules of ``Builder.add`` (which events are kept, what is counted, in which order
names, tracks and shapes are interned), so the columns are the same as the pure path's
(``tests/trace/test_scanned.py`` checks them on every trace and on mutated ones). Where the
scanner is not built (no compiler at install, a platform without wheels) or
``TB_ATTN_PURE_DECODE=1``, or for a batch it does not accept, the pure path decodes the batch.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np

from tb_attn_plugin.trace.coerce import ARG_NAMES, MAX_SIZE, MAX_TIME_US, cut_arg_label, op_shapes
from tb_attn_plugin.trace.kineto import DEVICE_KINDS, MODULE_PREFIX, UNSET, Kind, kind_of

if TYPE_CHECKING:
    from tb_attn_plugin.trace.columns import Builder

try:
    from tb_attn_plugin.trace import _scan  # type: ignore[attr-defined]
except ImportError:  # not compiled: the pure path
    _scan = None

__all__ = ["add_scanned", "available"]

_X = {"ts": np.float64, "dur": np.float64, "name": np.int32, "cat": np.int32, "track": np.int32, "ext": np.int64,
      "ext_lc": np.int64, "corr": np.int64, "seq": np.int64, "shape": np.int32, "graph": np.int64}
_M = {"ts": np.float64, "track": np.int32, "bytes": np.int64, "total": np.int64, "dtype": np.int64, "did": np.int64}


def available() -> bool:
    """Whether batches go through the scanner (built, and not turned off)."""
    return _scan is not None and os.environ.get("TB_ATTN_PURE_DECODE") != "1"


def add_scanned(builder: Builder, text: bytes | bytearray | memoryview) -> bool:
    """Append the events of ``text`` (a JSON array) to ``builder``; False, with nothing added,
    where the scanner is off or does not accept the batch."""
    if not available():
        return False
    got = _scan.scan(text)
    if got is None:
        return False
    _add(builder, got)
    return True


class Pipeline:
    """Batches scanned in worker threads while the caller reads on, and appended to the builder
    in file order, so the result is the same as adding each batch in turn. The scanner releases
    the GIL, so the threads scan at once, and beside the caller's own Python work (reading,
    cutting, appending); a batch the scanner does not take goes to ``fallback`` (the pure path)
    in its turn. At most ``2 x threads`` batches are held at a time."""

    def __init__(self, builder: Builder, fallback: Callable[[Builder, bytes], None]) -> None:
        self.builder = builder
        self.fallback = fallback
        self.pending: deque[tuple[bytes, Future[Any]]] = deque()

    def submit(self, text: bytes) -> None:
        pool, threads = _pool()
        self.pending.append((text, pool.submit(_scan.scan, text)))
        while len(self.pending) > 2 * threads:
            self._next()

    def finish(self) -> None:
        """Append every batch submitted (call before adding anything after them)."""
        while self.pending:
            self._next()

    def _next(self) -> None:
        text, future = self.pending.popleft()
        got = future.result()
        if got is None:
            self.fallback(self.builder, text)
        else:
            _add(self.builder, got)


_POOL: tuple[ThreadPoolExecutor, int] | None = None
_POOL_LOCK = threading.Lock()


def _pool() -> tuple[ThreadPoolExecutor, int]:
    """One pool of scanning threads for the process (one per core, at most 4: a server decoding
    several traces at once shares them)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            threads = max(1, min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                                 else os.cpu_count() or 1))
            _POOL = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="tb-attn-scan"), threads
        return _POOL


def _add(builder: Builder, got: tuple[Any, ...]) -> None:
    x_raw, m_raw, names, cats, tracks, shape_keys = got
    x = {k: np.frombuffer(x_raw[k], dtype=t) for k, t in _X.items()}
    m = {k: np.frombuffer(m_raw[k], dtype=t) for k, t in _M.items()}
    if x["ts"].size:
        _complete(builder, x, [n.decode() for n in names], [c.decode() for c in cats], tracks, shape_keys)
    if m["ts"].size:
        _memory(builder, m, tracks)


def _first_seen(codes: np.ndarray) -> np.ndarray:
    """The distinct values of ``codes`` in order of first appearance."""
    values, first = np.unique(codes, return_index=True)
    return values[np.argsort(first, kind="stable")]


def _tracks(builder: Builder, local: np.ndarray, tracks: list[tuple[int | str, int | str]]) -> np.ndarray:
    """Each event's track id from its index into the batch's (pid, tid) pairs, new pairs
    interned in order of first appearance."""
    table = np.full(len(tracks), -1, np.int32)
    track_ids = builder.track_ids
    for i in _first_seen(local).tolist():
        key = tracks[i]
        tr = track_ids.get(key)
        table[i] = builder.new_track(key) if tr is None else tr
    return table[local]


def _complete(builder: Builder, x: dict[str, np.ndarray], names: list[str], cats: list[str],
              track_keys: list[tuple[int | str, int | str]], keys: list[tuple[bytes, bytes, bytes, int]]) -> None:
    kind_by_cat = np.array([kind_of(c) for c in cats] + [kind_of(None)], dtype=np.int8)
    cat = x["cat"]
    kind = kind_by_cat[cat]  # -1 (no category) is the last entry
    nid = x["name"]
    module = kind == int(Kind.MODULE)
    keep: np.ndarray | None = None
    if module.any():  # keep nn.Module events only: other Python functions are not read
        is_module_name = np.array([n.startswith(MODULE_PREFIX) for n in names], dtype=bool)
        keep = ~module | is_module_name[nid]
    ts, dur = x["ts"], x["dur"]
    bad = ~(np.abs(ts) <= MAX_TIME_US) | ~(dur <= MAX_TIME_US)  # NaN compares False: bad
    if keep is not None:
        bad &= keep
    if bad.any():
        builder.count("events with unusable times", int(bad.sum()))
        keep = ~bad if keep is None else keep & ~bad
    if keep is not None:
        x = {k: v[keep] for k, v in x.items()}
        kind, cat, nid, ts, dur = kind[keep], x["cat"], x["name"], x["ts"], x["dur"]
    else:
        dur = dur.copy()
    negative = dur < 0
    if negative.any():
        builder.count("negative durations (set to 0)", int(negative.sum()))
        dur[negative] = 0.0
    other = kind == int(Kind.OTHER)
    if other.any():
        counts = np.bincount(cat[other] + 1, minlength=len(cats) + 1)
        for c in _first_seen(cat[other]).tolist():
            builder.count_category(cats[c] if c >= 0 else None, int(counts[c + 1]))
    name_table = np.full(len(names), -1, np.int32)
    for i in _first_seen(nid).tolist():  # first-appearance order, so ids do not depend on batching
        name_table[i] = builder.name_id(names[i])
    nids = name_table[nid]
    tracks = _tracks(builder, x["track"], track_keys)
    device = np.isin(kind, DEVICE_KINDS)
    if device.any():
        builder.device_tracks.update(np.unique(tracks[device]).tolist())
    ext = np.where(x["ext"] != UNSET, x["ext"], x["ext_lc"])
    shape = np.full(nids.size, -1, np.int32)
    wanted = np.array(builder.shape_flags(), dtype=bool)[nids] & (x["shape"] >= 0)
    if wanted.any():
        local = x["shape"][wanted]
        _count_cut(builder, np.array([k[3] for k in keys], np.int64)[local], nids[wanted])
        table = np.full(len(keys), -1, np.int32)
        shape_ids = builder.shape_ids
        for t in _first_seen(local).tolist():
            key = keys[t][:3]
            if not key[0]:  # Input Dims absent (its list cut): no shapes, as on the pure path
                continue
            sid = shape_ids.get(key)
            if sid is None:
                sid = shape_ids[key] = len(builder.shapes)
                builder.shapes.append(op_shapes(key))
            table[t] = sid
        shape[wanted] = table[local]
    _append(builder.x, name=nids, kind=kind, track=tracks, ts=ts, dur=dur, ext=or_minus_one(ext),
            corr=or_minus_one(x["corr"]), seq=or_minus_one(x["seq"]), shape=shape, graph=or_minus_one(x["graph"]))


def _count_cut(builder: Builder, cut: np.ndarray, nids: np.ndarray) -> None:
    """Count the events whose argument lists the scanner read as absent (bit ``arg`` of ``cut``), by
    argument and then in event order, as ``Builder._shape_ids`` counts them."""
    if not cut.any():
        return
    for arg in range(len(ARG_NAMES)):
        for nid in nids[(cut >> arg) & 1 == 1].tolist():
            builder.count(cut_arg_label(arg, builder.names[nid]))


def _memory(builder: Builder, m: dict[str, np.ndarray], track_keys: list[tuple[int | str, int | str]]) -> None:
    ok = usable_memory(builder.count, m["ts"], m["bytes"])
    if ok is not None:
        m = {k: v[ok] for k, v in m.items()}
    total, dev_type, dev_id = m["total"], m["dtype"], m["did"]
    _append(builder.m, ts=m["ts"], track=_tracks(builder, m["track"], track_keys), bytes=m["bytes"],
            total=np.where((total == UNSET) | (np.abs(total) > MAX_SIZE), -1, total),
            dtype=np.where((dev_type >= 0) & (dev_type < 128), dev_type, -1),
            did=np.where((dev_id >= 0) & (dev_id < 2**31), dev_id, -1))


def _append(cols: dict[str, Any], **values: np.ndarray) -> None:
    for k, v in values.items():
        cols[k].frombytes(v.astype(cols[k].typecode, copy=False).tobytes())


def or_minus_one(values: np.ndarray) -> np.ndarray:
    """``values`` with the fields an event did not have (``UNSET``) as -1, the columns' "none"."""
    return np.where(values == UNSET, -1, values)


def usable_memory(count: Callable[[str, int], None], ts: np.ndarray, nbytes: np.ndarray) -> np.ndarray | None:
    """Which memory events to keep (with Bytes, a finite time, sizes in range), the others counted
    in the diagnostics; None when every one is kept. Both decoding paths filter with it."""
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
