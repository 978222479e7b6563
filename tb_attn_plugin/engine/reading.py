"""Reading one trace file into events, within the engine's limits: the size limit (``limits``),
the time limit (``timeout_s``, checked between chunks), the garbage collector paused, and the
fastest decoding this process allows (the compiled scanner's threads, or parts in several
processes). The per-file caches that call it are the ``loader``'s."""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Iterator

from tb_attn_plugin.engine.limits import DEFAULT_MAX_TRACE_BYTES
from tb_attn_plugin.trace import io, scanned
from tb_attn_plugin.trace import parallel as parallel_decode
from tb_attn_plugin.trace.decode import decode
from tb_attn_plugin.trace.events import Events, TraceError

__all__ = ["load_events", "prefetch_analysis", "too_slow"]


def prefetch_analysis() -> None:
    """Import the analysis modules in a background thread, so that a short-lived process (the
    CLI) imports them while its trace is read and scanned, rather than after: the scanner's
    threads run without the GIL, which the imports take. Only with the scanner: the pure path's
    several-process decode forks only where no other thread runs. Imports are thread-safe; a
    caller that needs a module first waits for it."""
    if not scanned.available():
        return
    import importlib
    import threading

    threading.Thread(target=importlib.import_module, args=("tb_attn_plugin.analysis.summary",),
                     name="tb-attn-imports", daemon=True).start()


def load_events(path: str, *, max_bytes: int | None = DEFAULT_MAX_TRACE_BYTES, parallel: bool = True,
                timeout_s: float | None = None, deadline: float | None = None) -> Events:
    """Read and decode one trace file. Raises TraceError.

    Batches of events are scanned in several threads at once where the compiled scanner is
    built (``trace.scanned``), in the server too. On the pure path, a large local uncompressed
    trace is decoded in several processes, one per core (``trace.parallel``), when this process
    runs no other thread (the CLI; not inside TensorBoard's server, where forking a threaded
    process is unsafe). Either way the result is the same as decoding it in one thread.
    ``timeout_s`` bounds the reading and decoding in one process (the
    server's case): it is checked between chunks, each of which costs a bounded time; with
    ``deadline`` (``time.monotonic``), the limit's end of a job that began before the reading.
    """
    with _gc_paused():
        if parallel and not scanned.available() and parallel_decode.may_fork():
            size = _splittable_size(path, max_bytes)
            parts = parallel_decode.part_count(size)
            if parts > 1:
                events = parallel_decode.decode_in_parts(path, size, parts)
                if events is not None:
                    return events
        chunks = io.read_chunks(path, max_bytes=max_bytes)
        if timeout_s is None:
            return decode(chunks)
        return decode(_until(chunks, time.monotonic() + timeout_s if deadline is None else deadline, timeout_s))


def too_slow(timeout_s: float) -> TraceError:
    """What a trace whose reading and analysis ran past the time limit becomes (one line)."""
    return TraceError(f"reading and analyzing this trace took longer than the limit of {timeout_s:g} s; it is not "
                      "read (raise the limit to read it)")


def _until(chunks: Iterator[bytes], deadline: float, timeout_s: float) -> Iterator[bytes]:
    for chunk in chunks:
        if time.monotonic() > deadline:
            raise too_slow(timeout_s)
        yield chunk


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Decoding allocates hundreds of thousands of short-lived containers and makes no cycles:
    the cyclic garbage collector only costs time during it."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _splittable_size(path: str, max_bytes: int | None) -> int:
    """The size of a plain local file within the limit, which can be read in parts; else 0.
    A URL or a gzip is ruled out first, so that neither costs a stat (a round trip on a store)."""
    if not io.is_plain_local_file(path):
        return 0
    try:
        size = io.stat(path).size
    except TraceError:
        return 0
    return size if size <= (max_bytes or size) else 0
