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
- **Trust**: the digest catches damage, not a forger who can write the cache. An entry read back
  must keep every bound a fresh summary keeps (``analysis.bounds``): one over
  ``MAX_SUMMARY_BYTES`` is refused unread, one that decodes to more rows or longer names than a
  summary has is refused after decoding (``out_of_bounds``); either is a miss, as a damaged one.
  Locally no link under the root is followed (``O_NOFOLLOW`` on every shard directory and entry,
  each opened relative to its directory's descriptor), so the cache writes nothing outside it.
- **Atomic writes**: locally a temporary file (``O_EXCL``) renamed over the entry, with the
  modes the umask leaves of 0666 (files) and 0777 (directories), so that a cache shared by a
  group is read by all of it; on object stores one PUT of the whole entry, which readers see
  whole or not at all. A torn entry on any other filesystem fails its digest.
- **Bound**: a local cache may be bounded (``max_bytes``, ``--cache-max-mb``): reading an entry
  touches its modification time, and when the entries written take the directory past the
  bound, the least recently used are deleted down to 90% of it.

The cache is never written inside a log directory (``check_outside``): the logdir stays read-only.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import logging
import os
import secrets
import stat as stat_module
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

import msgspec

from tb_attn_plugin import __version__
from tb_attn_plugin.analysis.common.bounds import MAX_SUMMARY_BYTES, out_of_bounds
from tb_attn_plugin.trace import io
from tb_attn_plugin.trace.discover import TraceFile
from tb_attn_plugin.trace.events import ReadError
from tb_attn_plugin.trace.version import file_version
from tb_attn_plugin.types.schema import SUMMARY_SCHEMA, WorkerSummary

__all__ = ["CacheEntryError", "CacheWriteError", "SummaryCache", "check_outside", "engine_version", "warn_once"]

_log = logging.getLogger(__name__)

_MAGIC = b"tb-attn-summary/1\n"
_DIGEST = 32
_MAX_ENTRY_BYTES = len(_MAGIC) + _DIGEST + MAX_SUMMARY_BYTES  # an entry over it is refused unread
_PACKAGE = Path(__file__).resolve().parent.parent
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIR = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _CLOEXEC
_NOT_FOLLOWED = (errno.ELOOP, errno.ENOTDIR)  # a link (or a file) met with O_NOFOLLOW (| O_DIRECTORY)
# What renaming over one entry's name meets where a directory stands there: that entry's fault alone.
_TAKEN = (errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR)


class CacheWriteError(OSError):
    """The cache cannot be written there; the message says where and why."""


class CacheEntryError(CacheWriteError):
    """One entry cannot be written (something that is not a file stands at its name); the others can."""


_warned: set[str] = set()
_warned_lock = threading.Lock()


def warn_once(root: str, message: str, say: Callable[[str], None]) -> None:
    """Says ``message`` (that the cache at ``root`` cannot be written) once per process and cache,
    however many threads, loaders and batches find it out."""
    with _warned_lock:
        if root in _warned:
            return
        _warned.add(root)
    say(message)


@functools.lru_cache(maxsize=1)
def engine_version() -> str:
    """The summary schema, the package version and a digest of the engine's source (every module
    of the package and the scanner's C source): a summary cached by other code is never served."""

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
        # A link as the root is the user's choice: resolved once, here; none under it is followed.
        self._local = "" if self.remote else os.path.realpath(
            self.root[len("file://"):] if self.root.startswith("file://") else self.root)
        self.max_bytes = None if self.remote else max_bytes
        self.namespace = namespace if namespace is not None else engine_version()
        self.corrupt = 0  # entries found damaged or out of bounds (and recomputed)
        self._written = 0  # bytes written since the last trim's scan
        self._held: int | None = None  # bytes in the directory at the last scan

    # -- keys and paths ---------------------------------------------------------------------
    def key(self, trace: TraceFile) -> str:
        text = repr((self.namespace, *file_version(trace)))
        return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()

    def _path(self, key: str) -> str:
        if self.remote:
            return f"{self.root}/{key[:2]}/{key}.tba"
        return os.path.join(self._local, key[:2], f"{key}.tba")

    # -- reading ----------------------------------------------------------------------------
    def get(self, trace: TraceFile) -> bytes | None:
        """The payload of the trace's entry; None where there is none or it is damaged."""
        return self.get_many([trace]).get(trace)

    def get_many(self, traces: Iterable[TraceFile]) -> dict[TraceFile, bytes]:
        """The payloads found, by trace: on object stores in one batch of requests. At most
        ``_MAX_ENTRY_BYTES`` of an entry are ever read: a larger one is refused, as a damaged one."""
        keys = {self.key(t): t for t in traces}
        if not keys:
            return {}
        found: dict[TraceFile, bytes] = {}
        raws = self._read_remote(list(keys)) if self.remote else self._read_local(list(keys))
        for key, raw in raws.items():
            payload = None if raw is None else self._verified(raw)
            if payload is None:
                self.corrupt += 1
                continue
            found[keys[key]] = payload
        return found

    def _read_remote(self, keys: list[str]) -> dict[str, bytes | None]:
        """Entries by key (None: refused, over the bound); a missing or unreadable one is left out."""
        paths = {self._path(key): key for key in keys}
        out: dict[str, bytes | None] = {}
        for path, raw in io.read_many(list(paths), limit=_MAX_ENTRY_BYTES).items():
            if isinstance(raw, bytes):
                out[paths[path]] = raw
            elif not isinstance(raw, ReadError):  # larger than the bound
                out[paths[path]] = None
        return out

    def _read_local(self, keys: list[str]) -> dict[str, bytes | None]:
        """As ``_read_remote``, from the directory: a link, or anything but a regular file, is refused."""
        out: dict[str, bytes | None] = {}
        try:
            root = os.open(self._local, _DIR)
        except OSError:
            return out  # no cache there yet
        try:
            for key in keys:
                try:
                    out[key] = _read_entry(root, key, touch=self.max_bytes is not None)
                except OSError:
                    continue  # missing or unreadable: a miss
        finally:
            os.close(root)
        return out

    @staticmethod
    def _verified(raw: bytes) -> bytes | None:
        head = len(_MAGIC) + _DIGEST
        if len(raw) < head or not raw.startswith(_MAGIC):
            return None
        payload = raw[head:]
        return payload if hashlib.sha256(payload).digest() == raw[len(_MAGIC):head] else None

    def decode(self, payload: bytes) -> WorkerSummary | None:
        """The WorkerSummary in a payload, or None (counted as corrupt) if it does not decode or
        breaks a bound that every fresh summary keeps (``bounds.out_of_bounds``): whoever can
        write the cache can write any payload under a valid digest."""
        if len(payload) > MAX_SUMMARY_BYTES:
            self.corrupt += 1
            return None
        try:
            summary = msgspec.msgpack.decode(payload, type=WorkerSummary)
        except (msgspec.DecodeError, msgspec.ValidationError):
            self.corrupt += 1
            return None
        why = out_of_bounds(summary)
        if why is not None:
            self.corrupt += 1
            _log.info("a summary cache entry under %s was refused (%s); it is recomputed", self.root, why)
            return None
        return summary

    # -- writing ----------------------------------------------------------------------------
    def put(self, trace: TraceFile, payload: bytes) -> None:
        """Writes the trace's entry, atomically; a payload over ``MAX_SUMMARY_BYTES``, which no
        reader would take, is not written. Raises CacheWriteError."""
        if len(payload) > MAX_SUMMARY_BYTES:
            _log.debug("a summary of %d bytes is over the summary cache's bound: not cached", len(payload))
            return
        key = self.key(trace)
        entry = _MAGIC + hashlib.sha256(payload).digest() + payload
        try:
            if self.remote:
                fs, p = io.filesystem(self._path(key))
                fs.pipe_file(p, entry)  # one PUT: whole or absent
            else:
                _write_local(self._local, key, entry)
        except _EntryTaken as exc:
            raise CacheEntryError(f"cannot write the summary cache entry {key[:2]}/{key}.tba at {self.root}: "
                                  f"{exc.strerror}; that summary is not cached") from None
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
        try:
            root = os.open(self._local, _DIR)
        except OSError:
            return 0
        try:
            entries = _local_entries(root)
            held = sum(size for _, size, _, _ in entries)
            if held > self.max_bytes:
                goal = self.max_bytes * 9 // 10
                for _, size, shard, name in sorted(entries):
                    if held <= goal:
                        break
                    try:
                        _unlink_entry(root, shard, name)
                        held -= size
                    except OSError:
                        continue
        finally:
            os.close(root)
        self._held, self._written = held, 0
        return held


# -- the local directory: every name under the root opened relative to its directory, never through a link


def _read_entry(root: int, key: str, *, touch: bool) -> bytes | None:
    """The entry's bytes; None where it is refused: a link, not a regular file, or over the bound.
    Raises OSError (FileNotFoundError: no entry). ``touch``: mark it used (for the size bound)."""
    try:
        shard = os.open(key[:2], _DIR | _NOFOLLOW, dir_fd=root)
    except OSError as exc:
        if exc.errno in _NOT_FOLLOWED:
            return None
        raise
    try:
        fd = os.open(f"{key}.tba", os.O_RDONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0) | _CLOEXEC, dir_fd=shard)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return None
        raise
    finally:
        os.close(shard)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)  # of what was opened: a FIFO or a device never blocks the read
        if not stat_module.S_ISREG(st.st_mode) or st.st_size > _MAX_ENTRY_BYTES:
            return None
        raw = f.read(_MAX_ENTRY_BYTES + 1)
        if len(raw) > _MAX_ENTRY_BYTES:
            return None  # grew since
        if touch:
            try:
                os.utime(fd)
            except OSError:
                pass  # another user's entry, or read-only: recency is a hint
        return raw


def _shard(root: int, name: str) -> int:
    """The shard directory's descriptor, made if missing (0777 less the umask). Raises OSError,
    also where a link or a file stands in its place."""
    try:
        os.mkdir(name, 0o777, dir_fd=root)
    except FileExistsError:
        pass
    try:
        return os.open(name, _DIR | _NOFOLLOW, dir_fd=root)
    except OSError as exc:
        if exc.errno in _NOT_FOLLOWED:
            raise OSError(exc.errno, f"{name} in it is a link or a file, not a directory, and is never followed") \
                from None
        raise


class _EntryTaken(OSError):
    """Something that is not an entry stands at an entry's name."""


def _write_local(root_path: str, key: str, entry: bytes) -> None:
    """Writes an entry whole: a new temporary file (``O_EXCL``: never an existing file or a link)
    renamed over the entry, in its shard."""
    os.makedirs(root_path, exist_ok=True)
    root = os.open(root_path, _DIR)
    try:
        shard = _shard(root, key[:2])
        try:
            tmp = f".tmp-{key[:16]}-{secrets.token_hex(8)}"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o666, dir_fd=shard)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(entry)
                try:
                    os.replace(tmp, f"{key}.tba", src_dir_fd=shard, dst_dir_fd=shard)
                except OSError as exc:
                    if exc.errno in _TAKEN:
                        raise _EntryTaken(exc.errno, "a directory or another file that is not an entry stands at "
                                                     "its name") from None
                    raise
            except BaseException:
                try:
                    os.unlink(tmp, dir_fd=shard)
                except OSError:
                    pass
                raise
        finally:
            os.close(shard)
    finally:
        os.close(root)


def _local_entries(root: int) -> list[tuple[float, int, str, str]]:
    """(mtime, size, shard, name) of every entry: regular ``*.tba`` files in the shard directories
    (temporary files and anything else are not ours to delete)."""
    entries: list[tuple[float, int, str, str]] = []
    with os.scandir(root) as shards:
        for d in shards:
            try:
                if not d.is_dir(follow_symlinks=False):
                    continue
                shard = os.open(d.name, _DIR | _NOFOLLOW, dir_fd=root)
            except OSError:
                continue
            try:
                with os.scandir(shard) as files:
                    for e in files:
                        if not e.name.endswith(".tba"):
                            continue
                        try:
                            st = e.stat(follow_symlinks=False)
                        except OSError:
                            continue
                        if stat_module.S_ISREG(st.st_mode):
                            entries.append((st.st_mtime, st.st_size, d.name, e.name))
            finally:
                os.close(shard)
    return entries


def _unlink_entry(root: int, shard_name: str, name: str) -> None:
    shard = os.open(shard_name, _DIR | _NOFOLLOW, dir_fd=root)
    try:
        os.unlink(name, dir_fd=shard)
    finally:
        os.close(shard)
