"""The fast path of decoding: a batch read by the compiled Kineto event scanner (``_scan.c``),
with no Python object per event, handed to ``Builder.append`` as columns.

The scanner returns the complete and memory events' fields as columns, and names (clipped as
``Builder.intern`` clips them), categories and shape triples once each; the builder applies the
same rules to this batch as to the pure path's (``batch.EventBatch``), so the columns are the
same (``tests/trace/test_scanned.py`` checks them on every trace and on mutated ones). Where the
scanner is not built (no compiler at install, a platform without wheels) or
``TB_ATTN_PURE_DECODE=1``, or for a batch it does not accept, the pure path decodes the batch.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from tb_attn_plugin.trace.batch import Batch, ShapeKey

try:
    from tb_attn_plugin.trace import _scan  # type: ignore[attr-defined]
except ImportError:  # not compiled: the pure path
    _scan = None

__all__ = ["Pipeline", "ScannedBatch", "available", "scan"]

_X = {"ts": np.float64, "dur": np.float64, "name": np.int32, "cat": np.int32, "track": np.int32, "ext": np.int64,
      "ext_lc": np.int64, "corr": np.int64, "seq": np.int64, "shape": np.int32, "graph": np.int64}
_M = {"ts": np.float64, "track": np.int32, "bytes": np.int64, "total": np.int64, "dtype": np.int64, "did": np.int64}


def available() -> bool:
    """Whether batches go through the scanner (built, and not turned off)."""
    return _scan is not None and os.environ.get("TB_ATTN_PURE_DECODE") != "1"


class ScannedBatch(Batch):
    """The scanner's answer for one batch, as columns over its own tables."""

    def __init__(self, got: tuple[Any, ...]) -> None:
        x_raw, m_raw, names, cats, tracks, shape_keys = got
        super().__init__([n.decode() for n in names], [c.decode() for c in cats], tracks,
                         x={k: np.frombuffer(x_raw[k], dtype=t) for k, t in _X.items()},
                         m={k: np.frombuffer(m_raw[k], dtype=t) for k, t in _M.items()})
        self.shape_keys: list[ShapeKey] = shape_keys

    def ints(self, table: str, fields: tuple[str, ...], rows: np.ndarray | None) -> list[np.ndarray]:
        cols = self.x if table == "x" else self.m
        return [cols[field] if rows is None else cols[field][rows] for field in fields]

    def shapes(self, rows: np.ndarray) -> tuple[np.ndarray, list[ShapeKey]]:
        return self.x["shape"][rows], self.shape_keys


def scan(text: bytes | bytearray | memoryview) -> ScannedBatch | None:
    """The events of ``text`` (a JSON array) as columns; None where the scanner is off or does
    not accept the batch."""
    if not available():
        return None
    got = _scan.scan(text)
    return None if got is None else ScannedBatch(got)


class Pipeline:
    """Batches scanned in worker threads while the caller reads on, and handed to ``append`` in
    file order, so the result is the same as adding each batch in turn. The scanner releases
    the GIL, so the threads scan at once, and beside the caller's own Python work (reading,
    cutting, appending); a batch the scanner does not take goes to ``fallback`` (the pure path)
    in its turn. At most ``2 x threads`` batches are held at a time."""

    def __init__(self, append: Callable[[Batch], None], fallback: Callable[[bytes], None]) -> None:
        self.append = append
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
            self.fallback(text)
        else:
            self.append(ScannedBatch(got))


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
