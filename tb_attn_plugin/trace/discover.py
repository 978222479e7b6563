"""Runs, workers and spans from a file listing (pure: the listing comes from ``trace.io``).

A run is a directory that holds trace files, named by its path relative to the logdir, as
torch-tb-profiler names runs (``.`` for the logdir itself). Which files are traces, and their
workers and spans, is the trace-file grammar of ``tb_attn_plugin.vocab.names``, which the runner
writes by: ``*.pt.trace.json[.gz]`` files are traces by their names; other ``*.json[.gz]`` files
are candidates (``candidates``), traces only where their content says so, which the caller has
found out (``trace.sniff``) and passes in as the set ``traces``.

Any byte sequence is a valid POSIX file name, and Python lists the bytes that are not UTF-8 as
lone surrogates (``surrogateescape``), which no JSON encoder takes. So runs, files and workers
carry two spellings: ``path`` as listed, to open the file, and a display name (``name``,
``worker``) in which each such byte is written ``\\xNN``. Routes and the CLI take the display
name back. A backslash is an ordinary character in a POSIX name; only on Windows does it
separate directories.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from tb_attn_plugin.trace.io import FileInfo
from tb_attn_plugin.vocab.names import METADATA_FILE, display_name, parse_candidate_name, parse_trace_name

__all__ = ["EVENT_FILE_MARK", "MAX_EVENT_FILES", "Run", "TraceFile", "candidates", "find_runs"]


@dataclass(frozen=True, slots=True)
class TraceFile:
    path: str  # as listed: what opens the file
    name: str  # for display (``display_name``)
    worker: str
    span: str | None
    size: int
    mtime: float
    etag: str = ""  # an object store's version tag, where the listing gives one (summary cache keys)


#: TensorBoard event files have this in their names (``events.out.tfevents.<time>.<host>...``).
EVENT_FILE_MARK = "tfevents"
#: Event files read per run: a run's statistics are in a few; a directory of thousands is not ours.
MAX_EVENT_FILES = 64


@dataclass(frozen=True, slots=True)
class Run:
    name: str  # relative to the logdir, "/"-separated; "." for the logdir itself
    path: str
    files: tuple[TraceFile, ...]  # sorted by worker, then span
    #: The run's metadata file (``tb_attn_run.json``) as listed: its version needs no stat.
    metadata_file: FileInfo | None = None
    #: TensorBoard event files in the run's directory (``*tfevents*``): where per-head attention
    #: statistics are (``head_events``), next to whatever else other tools wrote there.
    event_files: tuple[FileInfo, ...] = ()

    @property
    def metadata_path(self) -> str | None:
        return None if self.metadata_file is None else self.metadata_file.path

    @property
    def workers(self) -> list[str]:
        return sorted({f.worker for f in self.files})


def _slashes(path: str) -> str:
    return path.replace("\\", "/") if os.sep == "\\" and "://" not in path else path


def _split(path: str) -> tuple[str, str]:
    head, _, tail = _slashes(path).rpartition("/")
    return head, tail


def candidates(files: Iterable[FileInfo]) -> list[FileInfo]:
    """The files of a listing that are traces only if their content says so
    (``names.parse_candidate_name``: ``*.json[.gz]``, not a trace name, not the metadata file)."""
    return [info for info in files if parse_candidate_name(_split(info.path)[1]) is not None]


def find_runs(root: str, files: Iterable[FileInfo], *, traces: Collection[str] = frozenset()) -> list[Run]:
    """Group a recursive listing of ``root`` into runs, sorted by name. ``traces``: the paths of the
    candidates (``candidates``) whose content shows a trace; the other candidates are not traces."""
    root_norm = _slashes(root).rstrip("/")
    by_dir: dict[str, list[TraceFile]] = {}
    metadata: dict[str, FileInfo] = {}
    events: dict[str, list[FileInfo]] = {}
    for info in files:
        directory, name = _split(info.path)
        parsed = parse_trace_name(name)
        if parsed is None and info.path in traces:
            parsed = parse_candidate_name(name)
        if parsed is not None:
            by_dir.setdefault(directory, []).append(
                TraceFile(info.path, display_name(name), display_name(parsed[0]), parsed[1], info.size, info.mtime,
                          info.etag)
            )
        elif name == METADATA_FILE:
            metadata[directory] = info
        elif EVENT_FILE_MARK in name:
            events.setdefault(directory, []).append(info)
    runs = []
    for directory, found in by_dir.items():
        rel = directory[len(root_norm):].strip("/") if directory.startswith(root_norm) else directory
        name = display_name(posixpath.normpath(rel)) if rel else "."
        found.sort(key=lambda t: (t.worker, int(t.span) if t.span else -1, t.name))
        runs.append(Run(name=name, path=directory, files=tuple(found),
                        metadata_file=metadata.get(directory),
                        event_files=tuple(sorted(events.get(directory, ()), key=lambda f: f.path))[:MAX_EVENT_FILES]))
    return sorted(runs, key=lambda r: r.name)
