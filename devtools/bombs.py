"""Hostile files for the tests and benchmarks: gzip bombs of whitespace between two events, or of
one event's name."""

from __future__ import annotations

import json
import zlib
from pathlib import Path

__all__ = ["BOMBS", "write_name_bomb", "write_whitespace_bomb"]

#: zlib at level 9 packs a run of spaces (or of one letter) about 1030:1, so a MiB of gzip holds
#: about a GiB.
RATIO = 1030
_EVENT = json.dumps({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1, "dur": 1})


def _write(path: Path, head: bytes, block: bytes, blocks: int, tail: bytes) -> int:
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)
    with path.open("wb") as f:
        f.write(comp.compress(head))
        for _ in range(blocks):
            f.write(comp.compress(block))
        f.write(comp.compress(tail))
        f.write(comp.flush())
    return len(head) + blocks * len(block) + len(tail)


def write_whitespace_bomb(path: Path, *, stored_mib: float = 1.0) -> int:
    """A Kineto-like gzip trace of two ``aten::mm`` events with about ``stored_mib`` x 1030 MiB of
    spaces between them (a newline every MiB). Returns the uncompressed size in bytes."""
    head, tail = f'{{"traceEvents": [\n  {_EVENT},'.encode(), f"\n  {_EVENT}\n]}}\n".encode()
    return _write(path, head, b" " * ((1 << 20) - 1) + b"\n", round(stored_mib * RATIO), tail)


def write_name_bomb(path: Path, *, stored_mib: float = 1.0) -> int:
    """A Kineto-like gzip trace of two events, the second named by about ``stored_mib`` x 1030 MiB
    of the letter a. Returns the uncompressed size in bytes."""
    head = f'{{"traceEvents": [\n  {_EVENT},\n  {{"ph": "X", "cat": "cpu_op", "name": "'.encode()
    tail = b'", "pid": 1, "tid": 1, "ts": 2, "dur": 1}\n]}\n'
    return _write(path, head, b"a" * (1 << 20), round(stored_mib * RATIO), tail)


#: The bombs by kind, for ``--bomb-kind`` and the tests.
BOMBS = {"whitespace": write_whitespace_bomb, "name": write_name_bomb}
