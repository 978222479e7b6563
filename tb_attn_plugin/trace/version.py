"""A file's version: the one key of everything kept per file (parsed summaries and analyses, views,
failures, the ``*.json`` verdicts, event files' statistics, metadata bodies, summary cache keys).

A file that changes gets a new version, so nothing kept for the old one is served for it. The
version is what the listing says (no stat of its own): path, size, modification time, and an object
store's version tag where the listing gives one ("" locally).
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["Version", "Versioned", "file_version"]

#: (path, size, mtime, etag)
Version = tuple[str, int, float, str]


class Versioned(Protocol):
    """A listed file: ``io.FileInfo``, ``discover.TraceFile``."""

    @property
    def path(self) -> str: ...
    @property
    def size(self) -> int: ...
    @property
    def mtime(self) -> float: ...
    @property
    def etag(self) -> str: ...


def file_version(file: Versioned) -> Version:
    return (file.path, file.size, file.mtime, file.etag)
