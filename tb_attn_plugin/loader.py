"""From a path (logdir, run directory or trace file) to summaries, with caching.

This ties ``trace.io`` (reading), ``trace.decode`` and ``analysis.summary`` together. Each
trace file is summarized on its own: a broken file becomes a ``FileError`` in its run and
leaves other files and runs alone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import msgspec

from tb_attn_plugin import __version__
from tb_attn_plugin.analysis.summary import summarize
from tb_attn_plugin.cache import DiskCache, LRUCache, cache_key
from tb_attn_plugin.schema import FileError, RunSummary, WorkerSummary
from tb_attn_plugin.trace import io
from tb_attn_plugin.trace.decode import decode
from tb_attn_plugin.trace.discover import Run, TraceFile, find_runs, parse_trace_name
from tb_attn_plugin.trace.events import Events, TraceError

__all__ = ["DEFAULT_MAX_TRACE_BYTES", "Loader", "load_events", "resolve_runs"]

DEFAULT_MAX_TRACE_BYTES = 4 << 30  # uncompressed; larger traces are refused, not parsed


def load_events(path: str, *, max_bytes: int | None = DEFAULT_MAX_TRACE_BYTES) -> Events:
    """Read and decode one trace file. Raises TraceError."""
    return decode(io.read_chunks(path, max_bytes=max_bytes))


def resolve_runs(path: str) -> list[Run]:
    """The runs under a logdir, the run a directory is, or a single trace file as a run."""
    info = None
    try:
        info = io.stat(path)
    except TraceError:
        pass
    name = path.rstrip("/").replace("\\", "/").rsplit("/", 1)[-1]
    if info is not None and parse_trace_name(name) is not None and not io.is_dir(path):
        directory = path.rstrip("/").rsplit("/", 1)[0] if "/" in path.rstrip("/") else "."
        runs = find_runs(directory, [info])
        return [Run(name=name, path=r.path, files=r.files, metadata_path=r.metadata_path) for r in runs]
    if not io.is_dir(path):
        raise TraceError(f"no such file or directory: {path}")
    return find_runs(path, io.list_tree(path))


@dataclass
class Loader:
    """Summarizes runs, caching per-file summaries in memory (and optionally on disk)."""

    cache_dir: str | None = None
    max_trace_bytes: int | None = DEFAULT_MAX_TRACE_BYTES
    memory: LRUCache[WorkerSummary] = field(default_factory=lambda: LRUCache(max_entries=1024))

    def __post_init__(self) -> None:
        self.disk = DiskCache(self.cache_dir, namespace=f"summary-{__version__}") if self.cache_dir else None

    def summarize_file(self, trace: TraceFile) -> WorkerSummary:
        key = cache_key(trace.path, trace.size, trace.mtime)
        cached = self.memory.get(key)
        if cached is not None:
            return cached
        if self.disk is not None:
            raw = self.disk.get(key)
            if raw is not None:
                try:
                    summary = msgspec.msgpack.decode(raw, type=WorkerSummary)
                    self.memory.put(key, summary)
                    return summary
                except msgspec.DecodeError:
                    pass
        events = load_events(trace.path, max_bytes=self.max_trace_bytes)
        summary = summarize(events, file=trace.name, worker=trace.worker, span=trace.span)
        self.memory.put(key, summary)
        if self.disk is not None:
            self.disk.put(key, msgspec.msgpack.encode(summary))
        return summary

    def summarize_run(self, run: Run, *, worker: str | None = None) -> RunSummary:
        workers: list[WorkerSummary] = []
        errors: list[FileError] = []
        for trace in run.files:
            if worker is not None and trace.worker != worker:
                continue
            try:
                workers.append(self.summarize_file(trace))
            except TraceError as exc:
                errors.append(FileError(file=trace.name, error=str(exc)))
            except MemoryError:
                errors.append(FileError(file=trace.name, error="out of memory while reading this trace"))
        return RunSummary(run=run.name, metadata=self.metadata(run), workers=workers, errors=errors)

    @staticmethod
    def metadata(run: Run) -> dict[str, object] | None:
        if run.metadata_path is None:
            return None
        try:
            value = json.loads(io.read_small(run.metadata_path))
        except (TraceError, ValueError):
            return None
        return value if isinstance(value, dict) else None
