"""Hostile files for the tests and benchmarks: a gzip bomb of whitespace between two events."""

from __future__ import annotations

import json
import zlib
from pathlib import Path

__all__ = ["write_whitespace_bomb"]

#: zlib at level 9 packs a run of spaces about 1030:1, so a MiB of gzip holds about a GiB.
RATIO = 1030


def write_whitespace_bomb(path: Path, *, stored_mib: float = 1.0) -> int:
    """A Kineto-like gzip trace of two ``aten::mm`` events with about ``stored_mib`` x 1030 MiB of
    spaces between them (a newline every MiB). Returns the uncompressed size in bytes."""
    event = json.dumps({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1, "dur": 1})
    head, tail = f'{{"traceEvents": [\n  {event},'.encode(), f"\n  {event}\n]}}\n".encode()
    filler = b" " * ((1 << 20) - 1) + b"\n"
    blocks = round(stored_mib * RATIO)
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)
    with path.open("wb") as f:
        f.write(comp.compress(head))
        for _ in range(blocks):
            f.write(comp.compress(filler))
        f.write(comp.compress(tail))
        f.write(comp.flush())
    return len(head) + blocks * len(filler) + len(tail)
