"""Runs, workers and spans from a file listing (pure: the listing comes from ``trace.io``).

A run is a directory that holds ``*.pt.trace.json[.gz]`` files, named by its path relative to
the logdir, as torch-tb-profiler names runs (``.`` for the logdir itself). File names are
``{worker}.{span}.pt.trace.json[.gz]`` (the span is a time stamp, as
``tensorboard_trace_handler`` writes it) or ``{worker}.pt.trace.json[.gz]``. Hidden files,
including the runner's temporary files, are never traces.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable
from dataclasses import dataclass

from tb_attn_plugin.trace.io import FileInfo

__all__ = ["METADATA_FILE", "TRACE_NAME_RE", "Run", "TraceFile", "find_runs", "parse_trace_name"]

TRACE_NAME_RE = re.compile(r"^(?P<worker>.+?)(?:\.(?P<span>\d+))?\.pt\.trace\.json(?P<gz>\.gz)?$")
METADATA_FILE = "tb_attn_run.json"  # written by the runner (runner/metadata.py)


@dataclass(frozen=True, slots=True)
class TraceFile:
    path: str
    name: str
    worker: str
    span: str | None
    size: int
    mtime: float


@dataclass(frozen=True, slots=True)
class Run:
    name: str  # relative to the logdir, "/"-separated; "." for the logdir itself
    path: str
    files: tuple[TraceFile, ...]  # sorted by worker, then span
    metadata_path: str | None
    metadata_mtime: float | None = None  # from the listing, so that it needs no stat

    @property
    def workers(self) -> list[str]:
        return sorted({f.worker for f in self.files})


def parse_trace_name(name: str) -> tuple[str, str | None] | None:
    """(worker, span) of a trace file name, or None if it is not a trace file."""
    if name.startswith("."):
        return None
    m = TRACE_NAME_RE.match(name)
    if m is None:
        return None
    return m.group("worker"), m.group("span")


def _split(path: str) -> tuple[str, str]:
    path = path.replace("\\", "/")
    head, _, tail = path.rpartition("/")
    return head, tail


def find_runs(root: str, files: Iterable[FileInfo]) -> list[Run]:
    """Group a recursive listing of ``root`` into runs, sorted by name."""
    root_norm = root.replace("\\", "/").rstrip("/")
    by_dir: dict[str, list[TraceFile]] = {}
    metadata: dict[str, FileInfo] = {}
    for info in files:
        directory, name = _split(info.path)
        parsed = parse_trace_name(name)
        if parsed is not None:
            by_dir.setdefault(directory, []).append(
                TraceFile(info.path, name, parsed[0], parsed[1], info.size, info.mtime)
            )
        elif name == METADATA_FILE:
            metadata[directory] = info
    runs = []
    for directory, traces in by_dir.items():
        rel = directory[len(root_norm):].strip("/") if directory.startswith(root_norm) else directory
        name = posixpath.normpath(rel) if rel else "."
        traces.sort(key=lambda t: (t.worker, int(t.span) if t.span else -1, t.name))
        meta = metadata.get(directory)
        runs.append(Run(name=name, path=directory, files=tuple(traces),
                        metadata_path=meta.path if meta else None, metadata_mtime=meta.mtime if meta else None))
    return sorted(runs, key=lambda r: r.name)
