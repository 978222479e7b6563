"""The summary cache: encoded per-file summaries in a local directory or under an fsspec URL.

One entry per trace file version, shared by every process that points at the same place: a
batch job on a cluster (``tb-attn summarize --cache-dir s3://team/tb-attn-cache/ --executor
dask://...``) fills it, and TensorBoard started with ``--tb_attn_cache_dir`` on the same URL
reads the summaries instead of parsing the traces.

- **Keys**: the trace's path, size, modification time and, where the store gives one, its
  ETag, with the engine's version (``engine_version``: the summary schema, the package version
  and a digest of the engine's own source). A trace that changes, or an engine that changes,
  gets new keys: a stale summary is never served, and old entries are left to the size bound
  (local) or the bucket's lifecycle rules (remote).
- **Entries**: a header, the SHA-256 of the payload, and the payload (a msgpack
  ``WorkerSummary``). An entry that is truncated, altered, or not ours fails the digest or the
  decoding, and reads as a miss: the summary is recomputed and the entry written again.
- **Atomic writes**: locally a temporary file renamed over the entry; on object stores one PUT
  of the whole entry, which readers see whole or not at all. A torn entry on any other
  filesystem fails its digest.
- **Bound**: a local cache may be bounded (``max_bytes``, ``--cache-max-mb``): reading an entry
  touches its modification time, and when the entries written take the directory past the
  bound, the least recently used are deleted down to 90% of it.

The cache is never written inside a log directory (``check_outside``): the logdir stays read-only.
"""

from __future__ import annotations

import functools
import hashlib
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

import msgspec

from tb_attn_plugin.schema import WorkerSummary
from tb_attn_plugin.trace import io
from tb_attn_plugin.trace.discover import TraceFile

__all__ = ["CacheWriteError", "SummaryCache", "check_outside", "engine_version"]

_MAGIC = b"tb-attn-summary/1\n"
_DIGEST = 32
_MAX_ENTRY_BYTES = 256 << 20  # far above any summary (a 12-layer model's is about 100 KiB)
_PACKAGE = Path(__file__).resolve().parent


class CacheWriteError(OSError):
    """The cache cannot be written there; the message says where and why."""


@functools.lru_cache(maxsize=1)
def engine_version() -> str:
    """The summary schema, the package version and a digest of the engine's source (every module
    of the package and the scanner's C source): a summary cached by other code is never served."""
    from tb_attn_plugin import __version__
    from tb_attn_plugin.schema import SUMMARY_SCHEMA

    digest = hashlib.sha256()
    sources = sorted(p for p in _PACKAGE.rglob("*") if p.suffix in (".py", ".c") and "static" not in p.parts)
    for path in sources:
        digest.update(str(path.relative_to(_PACKAGE)).encode())
        try:
            digest.update(path.read_bytes())
        except OSError:
            digest.update(b"?")
    return f"{SUMMARY_SCHEMA}-{__version__}-{digest.hexdigest()[:16]}"


def check_outside(cache: str, logdir: str) -> None:
    """Raises ValueError where the cache lies in ``logdir`` (which is never written)."""
    if io.is_url(cache) != io.is_url(logdir):
        return
    if io.is_url(cache):
        inner, outer = cache.rstrip("/") + "/", logdir.rstrip("/") + "/"
    else:
        strip = len("file://")
        inner = os.path.realpath(cache[strip:] if cache.startswith("file://") else cache) + os.sep
        outer = os.path.realpath(logdir[strip:] if logdir.startswith("file://") else logdir) + os.sep
    if inner.startswith(outer):
        raise ValueError(f"the cache directory {cache} is inside the log directory {logdir}, which tb-attn never "
                         "writes: put the cache elsewhere")


class SummaryCache:
    """Summaries by file version under ``root`` (a local directory or an fsspec URL)."""

    def __init__(self, root: str, *, max_bytes: int | None = None, namespace: str | None = None) -> None:
        self.root = root.rstrip("/") or root
        self.remote = io.is_url(root)
        self.max_bytes = None if self.remote else max_bytes
        self.namespace = namespace if namespace is not None else engine_version()
        self.corrupt = 0  # entries found damaged (and recomputed)
        self._written = 0  # bytes written since the last trim's scan
        self._held: int | None = None  # bytes in the directory at the last scan

    # -- keys and paths ---------------------------------------------------------------------
    def key(self, trace: TraceFile) -> str:
        text = repr((self.namespace, trace.path, trace.size, trace.mtime, trace.etag))
        return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()

    def _path(self, key: str) -> str:
        if self.remote:
            return f"{self.root}/{key[:2]}/{key}.tba"
        local = self.root[len("file://"):] if self.root.startswith("file://") else self.root
        return os.path.join(local, key[:2], f"{key}.tba")

    # -- reading ----------------------------------------------------------------------------
    def get(self, trace: TraceFile) -> bytes | None:
        """The payload of the trace's entry; None where there is none or it is damaged."""
        return self.get_many([trace]).get(trace)

    def get_many(self, traces: Iterable[TraceFile]) -> dict[TraceFile, bytes]:
        """The payloads found, by trace: on object stores in one batch of requests."""
        paths = {self._path(self.key(t)): t for t in traces}
        if not paths:
            return {}
        found: dict[TraceFile, bytes] = {}
        for path, raw in io.read_many(list(paths), limit=_MAX_ENTRY_BYTES).items():
            if not isinstance(raw, bytes):
                continue  # missing or unreadable: a miss
            payload = self._verified(raw)
            if payload is None:
                self.corrupt += 1
                continue
            found[paths[path]] = payload
            if self.max_bytes is not None:
                _touch(path)
        return found

    @staticmethod
    def _verified(raw: bytes) -> bytes | None:
        head = len(_MAGIC) + _DIGEST
        if len(raw) < head or not raw.startswith(_MAGIC):
            return None
        payload = raw[head:]
        return payload if hashlib.sha256(payload).digest() == raw[len(_MAGIC):head] else None

    def decode(self, payload: bytes) -> WorkerSummary | None:
        """The WorkerSummary in a payload, or None (counted as corrupt) if it does not decode."""
        try:
            return msgspec.msgpack.decode(payload, type=WorkerSummary)
        except (msgspec.DecodeError, msgspec.ValidationError):
            self.corrupt += 1
            return None

    # -- writing ----------------------------------------------------------------------------
    def put(self, trace: TraceFile, payload: bytes) -> None:
        """Writes the trace's entry, atomically. Raises CacheWriteError."""
        path = self._path(self.key(trace))
        entry = _MAGIC + hashlib.sha256(payload).digest() + payload
        try:
            if self.remote:
                fs, p = io.filesystem(path)
                fs.pipe_file(p, entry)  # one PUT: whole or absent
            else:
                _write_local(path, entry)
        except Exception as exc:  # OSError, the stores' own errors, a read-only filesystem
            reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
            raise CacheWriteError(f"cannot write the summary cache at {self.root}: {reason}") from None
        if self.max_bytes is not None:
            self._written += len(entry)
            if self._held is None or self._held + self._written > self.max_bytes:
                self.trim()

    def trim(self) -> int:
        """Deletes the least recently used entries of a bounded local cache down to 90% of its
        bound (once over it); returns the bytes it holds after."""
        if self.remote or self.max_bytes is None:
            return 0
        local = self.root[len("file://"):] if self.root.startswith("file://") else self.root
        entries: list[tuple[float, int, str]] = []
        for dirpath, _dirs, files in os.walk(local):
            for name in files:
                if not name.endswith(".tba"):
                    continue  # temporary files and anything else are not ours to delete
                full = os.path.join(dirpath, name)
                try:
                    st = os.stat(full)
                except OSError:
                    continue
                entries.append((st.st_mtime, st.st_size, full))
        held = sum(size for _, size, _ in entries)
        if held > self.max_bytes:
            goal = self.max_bytes * 9 // 10
            for _, size, full in sorted(entries):
                if held <= goal:
                    break
                try:
                    os.unlink(full)
                    held -= size
                except OSError:
                    continue
        self._held, self._written = held, 0
        return held


def _write_local(path: str, entry: bytes) -> None:
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(entry)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _touch(path: str) -> None:
    try:
        os.utime(path)
    except OSError:
        pass  # deleted meanwhile, or read-only: recency is a hint
