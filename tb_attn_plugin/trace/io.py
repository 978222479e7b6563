"""All file access: local paths and fsspec URLs (s3://, gs://, abfs://, memory://, file://...).

This is the only module that opens, lists or stats files. It reads and never writes. Gzip is
recognised by its magic bytes, not the file name, and decompressed as a stream, so memory
stays bounded whatever the file size.

Only regular files are read: a FIFO, a device or a socket, even one swapped in for a listed
file, is refused at open without blocking (see ``_open_local``).

Files are read whole as a stream (``read_chunks``), or only their head (``read_heads``: at most
so many bytes, stored and decompressed alike), which decides whether a ``*.json`` file is a trace.

A failed request to the storage (a missing object, a refused or dropped connection, a timeout,
missing credentials) raises ``ReadError`` whatever the storage library raised, so callers never
see a botocore or aiohttp exception and never blame the file's content for it.

One piece, though long: its guarantees (regular files, no links, bounded gzip) hold as nothing else opens files.
"""

from __future__ import annotations

import os
import stat as stat_module
import sys
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from tb_attn_plugin.trace.events import LinkedFileError, ReadError, TraceError
from tb_attn_plugin.vocab.names import parse_candidate_name, parse_trace_name

_inflate: Any = zlib
try:  # ISA-L's inflate, same streams as zlib's: 2.0x as fast on a gzipped 103 MB trace, 1.7-5x on
    # the public ones (bench/README.md, "Decompression"); zlib where isal has no wheel.
    from isal import isal_zlib as _inflate
except ImportError:  # pragma: no cover - isal is installed wherever it has a wheel
    pass
#: What a corrupt stream raises, from either library.
_INFLATE_ERRORS: tuple[type[BaseException], ...] = (zlib.error, _inflate.error)

__all__ = [
    "CHUNK_BYTES", "FileChunks", "FileInfo", "filesystem", "find_after", "has_trace_file", "inside", "is_dir",
    "is_plain_local_file", "is_url", "join", "list_tree", "raw_chunks", "read_chunks", "read_heads", "read_many",
    "read_range", "read_small", "stat",
]

CHUNK_BYTES = 4 << 20
_GZIP_MAGIC = b"\x1f\x8b"


@dataclass(frozen=True, slots=True)
class FileInfo:
    path: str  # local path or URL
    size: int
    mtime: float
    etag: str = ""  # an object store's version tag (S3's ETag), where the listing gives one


def is_url(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def _strip_file_scheme(path: str) -> str:
    return path[len("file://"):] if path.startswith("file://") else path


def join(base: str, *parts: str) -> str:
    if is_url(base):
        return "/".join([base.rstrip("/"), *(p.strip("/") for p in parts)])
    return os.path.join(_strip_file_scheme(base), *parts)


def _fs(url: str) -> tuple[Any, str]:
    try:
        import fsspec
    except ImportError as exc:  # pragma: no cover - fsspec is a declared dependency
        raise TraceError(f"reading {url} needs fsspec: {exc}") from None
    try:
        try:
            # fsspec's listings cache never expires by default: a long-running server would not
            # see an overwritten object, and its reads would fail on the stale size and ETag. The
            # service lists at most every few seconds and keeps what it needs itself.
            fs, path = fsspec.core.url_to_fs(url, use_listings_cache=False)
        except TypeError:  # pragma: no cover - a filesystem that takes no such option
            fs, path = fsspec.core.url_to_fs(url)
    except (ImportError, ValueError) as exc:
        raise TraceError(f"cannot open {url}: {exc}") from None
    except _storage_errors() as exc:
        raise ReadError(f"cannot open {url}: {_describe(exc)}") from None
    except Exception as exc:  # a filesystem library that fails to start (an old or broken install)
        raise TraceError(f"cannot open {url}: {type(exc).__name__}: {exc} (is the fsspec filesystem package for "
                         "this URL installed and up to date?)") from None
    return fs, path


# What storage libraries raise for a failed request, besides OSError. Looked up in sys.modules
# only: a library that raised is loaded, and importing the others would cost time for nothing.
_STORAGE_ERROR_TYPES = (
    ("botocore.exceptions", "BotoCoreError"),  # s3fs: connection refused, timeouts, no credentials
    ("aiohttp", "ClientError"),  # s3fs, gcsfs, adlfs, http: a connection dropped mid-response
    ("fsspec.exceptions", "FSTimeoutError"),
    ("gcsfs.retry", "HttpError"),
    ("google.auth.exceptions", "GoogleAuthError"),
    ("azure.core.exceptions", "AzureError"),
)


def _storage_errors() -> tuple[type[BaseException], ...]:
    found: list[type[BaseException]] = [OSError]
    for module_name, name in _STORAGE_ERROR_TYPES:
        error = getattr(sys.modules.get(module_name), name, None)
        if isinstance(error, type) and issubclass(error, BaseException):
            found.append(error)
    return tuple(found)


def _describe(exc: BaseException) -> str:
    text = str(exc)
    if isinstance(exc, FileNotFoundError) and " " not in text:
        return "no such file"  # fsspec's message is only the path
    return text or type(exc).__name__


def _mtime(info: dict[str, Any]) -> float:
    for key in ("mtime", "LastModified", "last_modified", "updated", "created"):
        value = info.get(key)
        if value is None:
            continue
        if isinstance(value, (int, float)):
            return float(value)
        timestamp = getattr(value, "timestamp", None)
        if callable(timestamp):
            return float(timestamp())
        try:
            from datetime import datetime

            return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
        except ValueError:
            continue
    return 0.0


def _etag(info: dict[str, Any]) -> str:
    """The object's version tag (S3 ``ETag``, GCS ``md5Hash``/``generation``, Azure ``etag``), or "";
    clipped: it goes into cache keys, never into paths."""
    for key in ("ETag", "etag", "md5Hash", "generation"):
        value = info.get(key)
        if value is not None and value != "":
            return str(value).strip('"')[:128]
    return ""


def filesystem(url: str) -> tuple[Any, str]:
    """The fsspec filesystem of ``url`` and the path in it (for the summary cache's writes)."""
    return _fs(url)


def is_dir(path: str) -> bool:
    """Whether ``path`` is a directory (a prefix that holds objects, on object stores). Raises
    ReadError when the storage cannot answer, rather than calling the logdir empty."""
    if is_url(path):
        fs, p = _fs(path)
        try:
            return bool(fs.isdir(p))
        except FileNotFoundError:
            return False
        except _storage_errors() as exc:
            raise ReadError(f"cannot list {path}: {_describe(exc)}") from None
    return os.path.isdir(_strip_file_scheme(path))


def has_trace_file(root: str, *, is_trace: Callable[[FileInfo], bool]) -> bool:
    """Whether a local tree holds a trace: a regular file named as one (``names.parse_trace_name``),
    else a candidate (``names.parse_candidate_name``) that ``is_trace`` accepts by its content
    (``sniff.Verdicts.is_trace``, which remembers its verdicts). Walks the tree once and stops at the
    first file named as a trace; only a tree without one asks ``is_trace``, candidate by candidate,
    until one says yes."""
    candidates: list[FileInfo] = []
    for dirpath, dirnames, filenames in os.walk(_strip_file_scheme(root)):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        for name in filenames:
            named = parse_trace_name(name) is not None
            if not named and parse_candidate_name(name) is None:
                continue
            path = os.path.join(dirpath, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if not stat_module.S_ISREG(st.st_mode):
                continue  # a link (or a FIFO) named like a trace is not one (the listing skips it)
            if named:
                return True
            candidates.append(FileInfo(path, st.st_size, st.st_mtime))
    return any(is_trace(info) for info in candidates)


def stat(path: str) -> FileInfo:
    """Size and modification time; raises TraceError if the file is missing."""
    if is_url(path):
        fs, p = _fs(path)
        try:
            info = fs.info(p)
        except _storage_errors() as exc:
            raise ReadError(f"cannot read {path}: {_describe(exc)}") from None
        return FileInfo(path, int(info.get("size") or 0), _mtime(info), _etag(info))
    local = _strip_file_scheme(path)
    try:
        st = os.stat(local)
    except OSError as exc:
        raise ReadError(f"cannot read {path}: {exc.strerror or exc}") from None
    return FileInfo(path, st.st_size, st.st_mtime)


def list_tree(root: str, *, follow_symlinks: bool = False) -> list[FileInfo]:
    """Every file under ``root`` (recursively) with size and mtime. Hidden names are skipped.

    Local symlinks are not followed by default, so a link cannot lead a reader outside the
    tree it was pointed at.
    """
    if is_url(root):
        fs, p = _fs(root)
        try:
            found = fs.find(p, detail=True)  # a prefix that holds nothing lists as empty
        except FileNotFoundError:
            return []
        except _storage_errors() as exc:
            raise ReadError(f"cannot list {root}: {_describe(exc)}") from None
        out = []
        base = p.rstrip("/") + "/"
        for name, info in sorted(found.items()):
            # Keys ending in "/" are the folder markers some tools write, not files.
            if not name.startswith(base) or name.endswith("/") or info.get("type") == "directory":
                continue
            rel = name[len(base):]
            if any(part.startswith(".") for part in rel.split("/")):
                continue
            out.append(FileInfo(f"{root.rstrip('/')}/{rel}", int(info.get("size") or 0), _mtime(info), _etag(info)))
        return out
    local = _strip_file_scheme(root)
    out = []
    for dirpath, dirnames, filenames in os.walk(local, followlinks=follow_symlinks):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if name.startswith("."):
                continue
            full = os.path.join(dirpath, name)
            try:
                st = os.stat(full) if follow_symlinks else os.lstat(full)
            except OSError:
                continue  # deleted while listing
            if stat_module.S_ISREG(st.st_mode):
                out.append(FileInfo(full, st.st_size, st.st_mtime))
    return out


_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)


def _open_local(path: str, *, single_link: bool = False) -> Any:
    """A local regular file for reading. Raises OSError, or TraceError for anything that is not
    a regular file (``single_link``: LinkedFileError for one with several hard links, whose other
    names may lie anywhere: a file whose content is served as it is).

    Never through a symbolic link: the listing skips links, and one swapped in since must not lead
    outside the tree (a link that a user names on the command line is resolved before it gets
    here: ``loader.resolve_runs``). ``O_NONBLOCK`` makes opening a FIFO return at once instead
    of waiting for a writer, and the ``fstat`` of the opened descriptor (not a stat by path,
    which a swap could outrun) refuses FIFOs, devices (``/dev/zero`` never ends) and sockets
    before a byte is read. For a regular file the flag changes nothing.
    """
    fd = os.open(_strip_file_scheme(path), _OPEN_FLAGS | getattr(os, "O_NOFOLLOW", 0))
    try:
        st = os.fstat(fd)
        if not stat_module.S_ISREG(st.st_mode):
            raise TraceError(f"cannot read {path}: not a regular file ({_file_kind(st.st_mode)})")
        if single_link and st.st_nlink > 1:
            raise LinkedFileError(f"cannot read {path}: it has {st.st_nlink} hard links, and another name may lie "
                                  "outside the log directory")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _file_kind(mode: int) -> str:
    for test, kind in ((stat_module.S_ISFIFO, "a FIFO"), (stat_module.S_ISCHR, "a character device"),
                       (stat_module.S_ISBLK, "a block device"), (stat_module.S_ISSOCK, "a socket"),
                       (stat_module.S_ISDIR, "a directory")):
        if test(mode):
            return kind
    return "not a plain file"


def inside(root: str, path: str) -> bool:
    """Whether a local ``path`` really lies under ``root``, links resolved (a run directory
    swapped for a link since the listing does not). URLs have no links: always True."""
    if is_url(root) or is_url(path):
        return True
    real_root = os.path.realpath(_strip_file_scheme(root))
    real = os.path.realpath(_strip_file_scheme(path))
    return os.path.commonpath([real_root, real]) == real_root


def _open(path: str, *, single_link: bool = False) -> Any:
    if is_url(path):
        fs, p = _fs(path)
        try:
            return fs.open(p, "rb")
        except _storage_errors() as exc:
            raise ReadError(f"cannot read {path}: {_describe(exc)}") from None
    try:
        return _open_local(path, single_link=single_link)
    except OSError as exc:
        raise ReadError(f"cannot read {path}: {exc.strerror or exc}") from None


class FileChunks:
    """An open file's bytes in chunks, which closes the file when done, on error, or when
    ``close()`` is called (as WSGI servers do with a response they stop sending)."""

    def __init__(self, f: Any, path: str, chunk_bytes: int) -> None:
        self._f, self._path, self._chunk_bytes = f, path, chunk_bytes

    def __iter__(self) -> FileChunks:
        return self

    def __next__(self) -> bytes:
        if self._f.closed:
            raise StopIteration
        try:
            chunk = self._f.read(self._chunk_bytes)
        except _storage_errors() as exc:
            self.close()
            raise ReadError(f"reading {self._path} failed: {_describe(exc)}") from None
        if not chunk:
            self.close()
            raise StopIteration
        return bytes(chunk)

    def stored_size(self) -> int | None:
        """The open file's size as stored (no request: fsspec files know it from opening)."""
        try:
            size = os.fstat(self._f.fileno()).st_size if hasattr(self._f, "fileno") and not is_url(self._path) \
                else getattr(self._f, "size", None)
        except (OSError, ValueError):
            return None
        return size if isinstance(size, int) else None

    def close(self) -> None:
        try:
            self._f.close()
        except _storage_errors():
            pass  # nothing was written: there is nothing to lose


def _raw_chunks(path: str, chunk_bytes: int, *, single_link: bool = False) -> FileChunks:
    return FileChunks(_open(path, single_link=single_link), path, chunk_bytes)


def is_plain_local_file(path: str) -> bool:
    """A local file that is not gzip (so it can be read in byte ranges)."""
    if is_url(path):
        return False
    try:
        with _open_local(path) as f:
            return bool(f.read(2) != _GZIP_MAGIC)
    except (OSError, TraceError):
        return False


def read_range(path: str, start: int, end: int, *, chunk_bytes: int = CHUNK_BYTES) -> Iterator[bytes]:
    """Bytes [start, end) of a local file, in chunks. A file that ends before ``end`` (it shrank
    since it was measured) raises ReadError rather than passing for a shorter whole."""
    try:
        f = _open_local(path)
    except OSError as exc:
        raise ReadError(f"cannot read {path}: {exc.strerror or exc}") from None
    with f:
        f.seek(start)
        left = end - start
        while left > 0:
            chunk = f.read(min(chunk_bytes, left))
            if not chunk:
                raise ReadError(f"{path} changed while it was read: it ends {left} bytes early")
            left -= len(chunk)
            yield chunk


def find_after(path: str, offset: int, needle: bytes, *, window: int = 8 << 20) -> int | None:
    """The position of the first ``needle`` at or after ``offset`` within ``window`` bytes."""
    data = b"".join(read_range(path, offset, min(offset + window, stat(path).size)))
    pos = data.find(needle)
    return None if pos < 0 else offset + pos


def raw_chunks(path: str, *, chunk_bytes: int = CHUNK_BYTES) -> FileChunks:
    """The file's bytes as stored (no decompression), in chunks; for downloads, so a local file
    with several hard links is refused (LinkedFileError). The file is opened before this returns,
    so a missing file or an unreachable store raises ReadError here, before a response has
    started; the iterator has ``close()``."""
    return _raw_chunks(path, chunk_bytes, single_link=True)


def read_chunks(path: str, *, chunk_bytes: int = CHUNK_BYTES, max_bytes: int | None = None,
                single_link: bool = False) -> Iterator[bytes]:
    """The file's bytes, decompressed if gzip, in chunks. ``max_bytes`` caps the decompressed size;
    ``single_link``: a local file with several hard links is refused (``_open_local``)."""
    raw = _raw_chunks(path, chunk_bytes, single_link=single_link)
    try:
        yield from _decompressed(raw, path, chunk_bytes, max_bytes)
    finally:
        raw.close()  # also when the reader stops early or an error stops it


def _decompressed(raw: FileChunks, path: str, chunk_bytes: int, max_bytes: int | None) -> Iterator[bytes]:
    stored = raw.stored_size()
    if max_bytes is not None and stored is not None and stored > max_bytes:
        # Over the limit as stored is over it uncompressed too: refused before a byte is decoded.
        raise TraceError(f"{path} is larger than the limit of {max_bytes >> 20} MiB uncompressed")
    first = next(raw, b"")
    total = 0

    def capped(chunk: bytes) -> bytes:
        nonlocal total
        total += len(chunk)
        if max_bytes is not None and total > max_bytes:
            raise TraceError(f"{path} is larger than the limit of {max_bytes >> 20} MiB uncompressed")
        return chunk

    if not first.startswith(_GZIP_MAGIC):
        if first:
            yield capped(first)
        for chunk in raw:
            yield capped(chunk)
        return
    decomp = _inflate.decompressobj(wbits=31)
    pending = first
    while True:
        while pending:
            try:
                out = decomp.decompress(pending, chunk_bytes)
            except _INFLATE_ERRORS as exc:
                raise TraceError(f"corrupt gzip in {path}: {exc}") from None
            if out:
                yield capped(out)
            pending = decomp.unconsumed_tail
            if decomp.eof:
                # After the end of a member, the rest of the input is in unused_data (and, when
                # the output limit was hit, also in unconsumed_tail: take it once).
                pending = decomp.unused_data
                if pending.strip(b"\x00"):
                    decomp = _inflate.decompressobj(wbits=31)  # another gzip member follows
                else:
                    pending = b""
        following = next(raw, None)
        if following is None:
            break
        pending = following
    if not decomp.eof:
        raise TraceError(f"truncated gzip: {path} ends before its compressed stream does (still being written?)")


def read_small(path: str, *, limit: int = 1 << 20, single_link: bool = False) -> bytes:
    """A small file (run metadata, an event file) in one piece; raises TraceError past ``limit``
    bytes (``single_link``: LinkedFileError for a local file with several hard links)."""
    data = b""
    for chunk in read_chunks(path, chunk_bytes=limit, max_bytes=limit, single_link=single_link):
        data += chunk
    return data


def read_heads(paths: list[str], *, limit: int) -> dict[str, bytes | TraceError]:
    """The first ``limit`` bytes of each file, decompressed if gzip (by its magic bytes), by path;
    or the error that stopped it (ReadError: the storage; TraceError: not a regular file, corrupt
    gzip). At most ``limit`` bytes of a file are read as stored and at most ``limit`` decompressed,
    so a gzip bomb costs what a small file does. Local files are opened as every file here is
    (``_open_local``: a FIFO is refused without blocking, a link is never followed); on object
    stores the requests go out together, one ranged GET each (``_fetch_small``)."""
    out: dict[str, bytes | TraceError] = {}
    remote = [p for p in paths if is_url(p)]
    for path in paths:
        if is_url(path):
            continue
        try:
            with _open_local(path) as f:
                raw = f.read(limit)
            out[path] = _head(raw, path, limit)
        except OSError as exc:
            out[path] = ReadError(f"cannot read {path}: {exc.strerror or exc}")
        except TraceError as exc:
            out[path] = exc
    if remote:
        for path, value in zip(remote, _fetch_small(remote, limit), strict=True):
            if isinstance(value, bytes):
                try:
                    out[path] = _head(value[:limit], path, limit)
                except TraceError as exc:
                    out[path] = exc
            elif isinstance(value, TraceError):
                out[path] = value
            else:
                out[path] = ReadError(f"cannot read {path}: {_describe(value)}")
    return out


def _head(raw: bytes, path: str, limit: int) -> bytes:
    """The first ``limit`` bytes ``raw`` holds, decompressed if gzip (as far as ``raw`` goes)."""
    if not raw.startswith(_GZIP_MAGIC):
        return raw
    out = bytearray()
    decomp = _inflate.decompressobj(wbits=31)
    pending = raw
    while pending and len(out) < limit:
        try:
            out += decomp.decompress(pending, limit - len(out))
        except _INFLATE_ERRORS as exc:
            raise TraceError(f"corrupt gzip in {path}: {exc}") from None
        if not decomp.eof:
            pending = decomp.unconsumed_tail  # empty: the head ends inside this member
        elif decomp.unused_data.startswith(_GZIP_MAGIC):
            pending = decomp.unused_data  # another gzip member follows
            decomp = _inflate.decompressobj(wbits=31)
        else:
            break
    return bytes(out)


def read_many(paths: list[str], *, limit: int = 1 << 20, single_link: bool = False) -> dict[str, bytes | TraceError]:
    """Small files (run metadata) by path, each its bytes or the error that stopped it
    (``single_link`` as ``read_small``'s).

    On object stores the requests go out together (fsspec's batched ``cat_ranges``), so listing
    a thousand runs costs about one round trip, not a thousand. Each is one ranged GET of at most
    ``limit`` + 1 bytes: no HEAD first (``cat`` asks for the size before each GET on S3), and
    an oversized file is not downloaded whole.
    """
    out: dict[str, bytes | TraceError] = {}
    remote = [p for p in paths if is_url(p)]
    for path in paths:
        if not is_url(path):
            try:
                out[path] = read_small(path, limit=limit, single_link=single_link)
            except TraceError as exc:
                out[path] = exc
    if remote:
        for path, value in zip(remote, _fetch_small(remote, limit + 1), strict=True):
            if isinstance(value, bytes) and len(value) <= limit:
                out[path] = value
            elif isinstance(value, bytes):
                out[path] = TraceError(f"{path} is larger than {limit >> 10} KiB")
            elif isinstance(value, TraceError):
                out[path] = value
            else:
                out[path] = ReadError(f"cannot read {path}: {_describe(value)}")
    return out


def _fetch_small(urls: list[str], nbytes: int) -> list[bytes | BaseException]:
    """The first ``nbytes`` of each object, one ranged GET each, sent together; or what stopped it."""
    try:
        fs, _ = _fs(urls[0])
        keys = [fs._strip_protocol(u) for u in urls]
    except TraceError as exc:
        return [exc for _ in urls]
    try:
        got: list[bytes | BaseException] = list(fs.cat_ranges(keys, 0, nbytes, on_error="return"))
    except Exception as exc:  # whatever stopped the batch is reported per file
        return [exc for _ in urls]
    # An empty object has no byte 0: a ranged GET of it fails (HTTP 416). Read those whole.
    empty = [i for i, value in enumerate(got) if _is_unsatisfiable_range(value)]
    if empty:
        try:
            whole = fs.cat([keys[i] for i in empty], on_error="return")
        except Exception as exc:  # as above
            whole = {keys[i]: exc for i in empty}
        for i in empty:
            got[i] = whole.get(keys[i], got[i])  # a list of paths gives a dict
    return got


def _is_unsatisfiable_range(value: object) -> bool:
    if not isinstance(value, OSError) or isinstance(value, FileNotFoundError):
        return False
    cause = getattr(value.__cause__, "response", None)
    code = cause.get("Error", {}).get("Code") if isinstance(cause, dict) else None
    return code == "InvalidRange" or "range is not satisfiable" in str(value).lower()
