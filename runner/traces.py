"""Writing trace files: ``tensorboard_trace_handler``'s layout, written atomically and fast.

Files are named as ``torch.profiler.tensorboard_trace_handler`` names them,
``{worker}.{time_ns}.pt.trace.json[.gz]`` (the grammar is ``tb_attn_plugin.vocab.names``, which the
plugin reads by), so TensorBoard, torch-tb-profiler and our plugin read them unchanged. Two
things differ:

- A trace is first exported to a hidden temporary name that matches no reader's pattern
  (``.{worker}.{time_ns}.pt.trace.json.tmp``), flushed to disk and then renamed, so no reader
  ever sees a partial file. A failed or interrupted write removes its temporary file.
- Gzip runs at a low compression level after the export, with large buffers. The handler's own
  gzip (``use_gzip=True``) runs zlib's level 9 through the profiler's export path; see
  ``bench/README.md`` for the measured difference.

A write that fails (a full disk, a file-size limit, a permission) raises ``WriteError``, which
names the file and the operating system's reason, after removing every temporary file. The
profiler's exporter (Kineto, C++) does not raise when its writes fail: it logs "Failed to write
to log file!", keeps its own ``.tmp`` file and, when the failure happens at its final flush,
renames a truncated trace into place. So the export is checked (the file must end with the
trailer Kineto writes last), and when it failed, the cause is found by writing where Kineto
stopped (the same disk, the same file-size limit).
"""

from __future__ import annotations

import errno
import os
import re
import socket
import time
import zlib
from collections.abc import Callable
from pathlib import Path

from torch.profiler import profile

from tb_attn_plugin.vocab.names import GZIP_SUFFIX, TRACE_NAME_RE, trace_file_name

__all__ = [
    "TMP_SUFFIX", "TRACE_FILE_RE", "WriteError", "atomic_write_bytes", "default_worker_name", "gzip_file",
    "trace_handler",
]

#: A finished trace file as the plugin reads it (``tb_attn_plugin.vocab.names``): group 1 is the worker,
#: group 2 the span's time stamp. Its name here is the one the runner's modules import.
TRACE_FILE_RE = TRACE_NAME_RE
TMP_SUFFIX = ".tmp"
_CHUNK = 4 << 20
# The last thing both of torch's exporters write: ``"traceName": "<path>"`` and the closing brace.
_TRAILER_RE = re.compile(rb'"traceName"\s*:\s*"[^\n]*"\s*}\s*$')  # Kineto does not escape the path
_TRAILER_WINDOW = 8 << 10  # bytes read from the end; the trailer holds a path (at most 4 KiB)
_PROBE_BYTES = 1 << 20


class WriteError(OSError):
    """A file could not be written. ``str()`` is one line for the user: the file and the reason."""

    def __init__(self, path: str | os.PathLike[str], cause: OSError) -> None:
        code = cause.errno if cause.errno is not None else errno.EIO
        super().__init__(code, cause.strerror or str(cause) or os.strerror(code), os.fspath(path))

    def __str__(self) -> str:
        return f"cannot write {self.filename}: {self.strerror}"


def _write_error(path: Path, exc: OSError) -> WriteError:
    return exc if isinstance(exc, WriteError) else WriteError(path, exc)


def default_worker_name(rank: int | None = None) -> str:
    """``host_pid`` as the handler does, or ``host_rankN`` under torch.distributed.

    Dots would make the worker ambiguous in file names, so they become dashes.
    """
    host = socket.gethostname().replace(".", "-") or "host"
    return f"{host}_rank{rank}" if rank is not None else f"{host}_{os.getpid()}"


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def gzip_file(src: Path, dst: Path, *, level: int = 1) -> None:
    """Compress ``src`` into a gzip file at ``dst``, streaming in large chunks."""
    compressor = zlib.compressobj(level, zlib.DEFLATED, 31)  # wbits 31: gzip header and trailer
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        while chunk := fin.read(_CHUNK):
            fout.write(compressor.compress(chunk))
        fout.write(compressor.flush())
        fout.flush()
        os.fsync(fout.fileno())


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a hidden temporary file and a rename."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}{TMP_SUFFIX}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        _unlink_quietly(tmp)
        raise _write_error(path, exc) from None
    except BaseException:
        _unlink_quietly(tmp)
        raise


def _unlink_quietly(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass


def _is_complete_export(path: Path) -> bool:
    """Whether the exporter finished ``path``: it ends with the trailer written last."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - _TRAILER_WINDOW))
            tail = f.read()
    except OSError:
        return False
    return _TRAILER_RE.search(tail) is not None


def _why_export_failed(partial: Path) -> OSError:
    """The operating system's reason why the exporter could not write ``partial``.

    Kineto reports none, so this writes where it stopped: a full disk, a file-size limit or a
    permission fails here the same way. The caller removes ``partial``.
    """
    try:
        with open(partial, "ab") as f:
            f.write(bytes(_PROBE_BYTES))
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:
        return exc
    return OSError(errno.EIO, "the profiler could not write the trace (its log above may say why)")


def _export(prof: profile, tmp_json: Path) -> None:
    """``prof.export_chrome_trace`` into ``tmp_json``; raises OSError if it is not complete."""
    kineto_tmp = tmp_json.with_name(tmp_json.name + ".tmp")  # Kineto writes here, then renames
    try:
        prof.export_chrome_trace(str(tmp_json))
        if not _is_complete_export(tmp_json):
            raise _why_export_failed(tmp_json if tmp_json.exists() else kineto_tmp)
    finally:
        _unlink_quietly(kineto_tmp)


def trace_handler(
    run_dir: str | os.PathLike[str],
    worker_name: str,
    *,
    use_gzip: bool = False,
    gzip_level: int = 1,
    on_written: Callable[[Path], None] | None = None,
) -> Callable[[profile], None]:
    """An ``on_trace_ready`` callback that writes one trace file per profiler cycle.

    Raises ValueError at once for a worker name the plugin could not read back (one starting
    with a dot). Raises ``WriteError`` (naming the trace file) when the trace cannot be
    written; nothing of it is left on disk then.
    """
    directory = Path(run_dir)
    trace_file_name(worker_name, 0)  # a worker the plugin could not read back fails here, before profiling

    def handler(prof: profile) -> None:
        stem = trace_file_name(worker_name, time.time_ns())
        final = directory / (stem + (GZIP_SUFFIX if use_gzip else ""))
        tmp_json = directory / f".{stem}{TMP_SUFFIX}"
        tmp_gz = directory / f".{stem}{GZIP_SUFFIX}{TMP_SUFFIX}"
        try:
            directory.mkdir(parents=True, exist_ok=True)
            _export(prof, tmp_json)
            if use_gzip:
                gzip_file(tmp_json, tmp_gz, level=gzip_level)
                tmp_json.unlink()
                os.replace(tmp_gz, final)
            else:
                with open(tmp_json, "rb+") as f:
                    os.fsync(f.fileno())
                os.replace(tmp_json, final)
            _fsync_dir(directory)
        except BaseException as exc:
            _unlink_quietly(tmp_json)
            _unlink_quietly(tmp_gz)
            if isinstance(exc, OSError):
                raise _write_error(final, exc) from None
            raise
        if on_written is not None:
            on_written(final)

    return handler
