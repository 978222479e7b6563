"""Decoding one large local trace in several processes at once: the pure path's parallelism,
used where the compiled scanner is not built (with it, batches are scanned in threads instead,
``scanned``).

The file is cut at event starts (``\\n  {``, see ``decode``) into one part per process. This
process decodes the first part (the header and the first events) while a standard-library
process pool decodes the others, each into a builder's plain columns that pickle; the parts are
then merged in file order, so names, tracks and shapes are interned as ``decode`` would intern
them, and the result equals ``decode`` of the whole file.

Forking a process that runs other threads is unsafe, so callers fork only where no other thread
runs (the CLI; not inside TensorBoard's server): ``may_fork``. The pool's processes are forked
before its own manager thread starts.
"""

from __future__ import annotations

import itertools
import os
import threading
from typing import Any

from tb_attn_plugin.trace import io
from tb_attn_plugin.trace.decode import decode_first_part, decode_last_part, decode_middle_part, merge_parts
from tb_attn_plugin.trace.events import Events, TraceError

__all__ = ["PARALLEL_MIN_BYTES", "decode_in_parts", "may_fork", "part_count"]

#: Smaller traces decode in one process: starting the pool and merging would cost more.
PARALLEL_MIN_BYTES = 32 << 20
#: The least a part should hold, so that each process's start-up (about 10 ms) stays small.
_MIN_PART_BYTES = 16 << 20
#: The head of a trace decodes a little slower per byte than the rest (measured: 0.30 s against
#: 0.26 s for the halves of a 97 MB trace), and this process also merges: its part is smaller.
_FIRST_PART_SHARE = 0.94
_EVENT_START = b"\n  {"


def may_fork() -> bool:
    """Two cores or more, and no other thread in this process."""
    return (os.cpu_count() or 1) >= 2 and threading.active_count() == 1 and hasattr(os, "fork")


def part_count(size: int, *, cpus: int | None = None, max_processes: int = 8) -> int:
    """How many processes decode a file of ``size`` bytes: one per core, at most
    ``max_processes`` (the merge in this process grows with their number), and none for a part
    under ``_MIN_PART_BYTES``. 1: decode it in this process alone."""
    if size < PARALLEL_MIN_BYTES:
        return 1
    cores = cpus if cpus is not None else len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        os.cpu_count() or 1
    return max(1, min(cores, max_processes, size // _MIN_PART_BYTES))


def _cuts(path: str, size: int, parts: int) -> list[int]:
    """Offsets of the event starts where the parts begin, the first part a little smaller."""
    first = size * _FIRST_PART_SHARE / parts
    rest = (size - first) / (parts - 1) if parts > 1 else 0.0
    cuts = [0]
    for i in range(1, parts):
        at = io.find_after(path, max(int(first + rest * (i - 1)), cuts[-1] + 1), _EVENT_START)
        if at is None:
            break
        if at > cuts[-1]:
            cuts.append(at)
    return [*cuts, size]


def _middle(path: str, start: int, end: int) -> dict[str, Any]:
    return decode_middle_part(io.read_range(path, start, end))


def _last(path: str, start: int, end: int) -> dict[str, Any]:
    return decode_last_part(io.read_range(path, start, end))


def decode_in_parts(path: str, size: int, parts: int) -> Events | None:
    """Decode the local plain file ``path`` of ``size`` bytes in ``parts`` processes. None: it
    is not in Kineto's layout, holds too few event starts to cut, or a worker failed; the caller
    then decodes it in one process, which reports any error in the file itself. Raises
    TraceError for an error in the first part."""
    # Imported here, not at the top: they cost about 30 ms, which a small trace would pay for nothing.
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    cuts = _cuts(path, size, parts)
    if len(cuts) < 3:
        return None
    spans = list(itertools.pairwise(cuts[1:]))
    with ProcessPoolExecutor(max_workers=len(spans), mp_context=multiprocessing.get_context("fork")) as pool:
        futures = [pool.submit(_middle if i < len(spans) - 1 else _last, path, start, end)
                   for i, (start, end) in enumerate(spans)]
        first = decode_first_part(io.read_range(path, 0, cuts[1]))
        if first is None:
            for future in futures:
                future.cancel()
            return None
        try:
            others = [future.result() for future in futures]
        except (TraceError, BrokenProcessPool, OSError):
            return None
    builder, header = first
    return merge_parts(builder, header, others)
