"""A bounded cache of per-file results in memory, keyed by file version (``trace.version``).

A file that changes (new size or mtime) gets a new key, so a stale entry is never served. The
cache is an LRU bounded by entry count and by approximate bytes. Summaries kept across processes
and machines are the summary cache's (``summary_cache.py``).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

__all__ = ["LRUCache"]

V = TypeVar("V")


class LRUCache(Generic[V]):
    """Thread-safe LRU bounded by ``max_entries`` and by ``max_bytes`` as ``sizeof`` reports."""

    def __init__(self, *, max_entries: int = 256, max_bytes: int = 512 << 20,
                 sizeof: Callable[[V], int] = lambda v: 1) -> None:
        self.max_entries, self.max_bytes, self.sizeof = max_entries, max_bytes, sizeof
        self._data: OrderedDict[Hashable, tuple[V, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> V | None:
        with self._lock:
            item = self._data.get(key)
            if item is None:
                return None
            self._data.move_to_end(key)
            return item[0]

    def put(self, key: Hashable, value: V) -> None:
        size = self.sizeof(value)
        with self._lock:
            old = self._data.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            if size > self.max_bytes:
                return
            self._data[key] = (value, size)
            self._bytes += size
            while len(self._data) > self.max_entries or self._bytes > self.max_bytes:
                _, (_, evicted) = self._data.popitem(last=False)
                self._bytes -= evicted

    def put_if_room(self, key: Hashable, value: V) -> bool:
        """Stores ``value`` only if that evicts nothing; whether it did."""
        size = self.sizeof(value)
        with self._lock:
            if key in self._data or len(self._data) >= self.max_entries or self._bytes + size > self.max_bytes:
                return False
            self._data[key] = (value, size)
            self._bytes += size
            return True

    def __len__(self) -> int:
        return len(self._data)

    @property
    def nbytes(self) -> int:
        return self._bytes
