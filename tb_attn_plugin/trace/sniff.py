"""Which candidate files are torch.profiler traces, judged by their heads and remembered per file
version.

The trace-file grammar (``vocab.names``) makes a ``*.pt.trace.json[.gz]`` file a trace by its
name, and any other ``*.json[.gz]`` a candidate (``discover.candidates``): Accelerate's
``profile_0.json``, an ``export_chrome_trace("trace.json.gz")``, but also a model's
``config.json``. A candidate is a trace when its first ``HEAD_BYTES`` (decompressed) show a Chrome
trace written by torch.profiler (``kineto.is_kineto_head``); reading them is ``io.read_heads``'
job, which never blocks on a FIFO, follows no link and stops a gzip bomb at the head. A candidate
that cannot be read, or is not a trace, is passed over without a word (a DEBUG log line).

``Verdicts`` remembers each verdict by the file's version (path, size, mtime, etag), so a logdir of
10,000 JSON files that are not traces costs their heads once, then a dictionary look-up per file
and listing. A verdict of a storage failure (``ReadError``) is not kept: the next listing tries
again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable

from tb_attn_plugin.trace import io
from tb_attn_plugin.trace.discover import candidates
from tb_attn_plugin.trace.events import ReadError
from tb_attn_plugin.trace.io import FileInfo
from tb_attn_plugin.trace.kineto import is_kineto_head
from tb_attn_plugin.trace.version import Version, file_version

__all__ = ["HEAD_BYTES", "MAX_VERDICTS", "Verdicts"]

#: How much of a candidate is read (decompressed; as much at most as stored) to tell a trace.
HEAD_BYTES = 64 << 10
#: Verdicts remembered beyond the last listing's candidates (those of ``is_trace`` alone).
MAX_VERDICTS = 1 << 16

_log = logging.getLogger(__name__)

class Verdicts:
    """Whether each candidate file is a trace, by its head, remembered per file version. Thread-safe;
    no lock is held while a head is read. Bounded: a listing's verdicts (``traces``) replace those of
    files it no longer lists, and the verdicts of ``is_trace`` alone past ``max_verdicts`` (or the
    last listing's candidates, if more) forget the oldest."""

    def __init__(self, *, max_verdicts: int = MAX_VERDICTS) -> None:
        self.max_verdicts = max_verdicts
        self._known: dict[Version, bool] = {}
        self._listed = 0  # candidates in the last listing
        self._lock = threading.Lock()

    def traces(self, files: Iterable[FileInfo]) -> frozenset[str]:
        """The paths of the candidates among ``files`` (a whole listing) that are traces. The heads
        not judged before (new files, new versions) are read in one batch; verdicts of files
        ``files`` lacks are forgotten."""
        listed = {file_version(f): f for f in candidates(files)}
        with self._lock:
            known = {v: self._known[v] for v in listed if v in self._known}
        judged = self._judge([f for v, f in listed.items() if v not in known])
        with self._lock:
            self._known = {v: verdict for v, verdict in self._known.items() if v in listed}
            self._known.update(judged)
            self._listed = len(listed)
        known.update(judged)
        return frozenset(path for (path, *_), verdict in known.items() if verdict)

    def is_trace(self, info: FileInfo) -> bool:
        """Whether one candidate is a trace (``io.has_trace_file``'s question), its head read unless
        its version was judged before."""
        key = file_version(info)
        with self._lock:
            known = self._known.get(key)
        if known is not None:
            return known
        judged = self._judge([info])
        with self._lock:
            self._known.update(judged)
            while len(self._known) > max(self.max_verdicts, self._listed):
                del self._known[next(iter(self._known))]  # the oldest
        return judged.get(key, False)

    def __len__(self) -> int:
        with self._lock:
            return len(self._known)

    @staticmethod
    def _judge(files: list[FileInfo]) -> dict[Version, bool]:
        """The verdicts of ``files``, their heads read in one batch (no lock held); none for a file
        the storage failed to give (it is tried again)."""
        if not files:
            return {}
        heads = io.read_heads([f.path for f in files], limit=HEAD_BYTES)
        judged: dict[Version, bool] = {}
        for f in files:
            head = heads.get(f.path)
            if isinstance(head, bytes):
                judged[file_version(f)] = is_kineto_head(head)
                continue
            _log.debug("not read as a trace: %s", head)
            if not isinstance(head, ReadError):
                judged[file_version(f)] = False  # not a regular file, corrupt gzip: so until it changes
        return judged
