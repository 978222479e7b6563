"""Writing trace files: ``tensorboard_trace_handler``'s layout, written atomically and fast.

Files are named as ``torch.profiler.tensorboard_trace_handler`` names them,
``{worker}.{time_ns}.pt.trace.json[.gz]``, so TensorBoard, torch-tb-profiler and our plugin
read them unchanged. Two things differ:

- A trace is first exported to a hidden temporary name that matches no reader's pattern
  (``.{worker}.{time_ns}.pt.trace.json.tmp``), flushed to disk and then renamed, so no reader
  ever sees a partial file. A failed or interrupted write removes its temporary file.
- Gzip runs at a low compression level after the export, with large buffers. The handler's own
  gzip (``use_gzip=True``) runs zlib's level 9 through the profiler's export path; see
  ``bench/README.md`` for the measured difference.
"""

from __future__ import annotations

import os
import re
import socket
import time
import zlib
from collections.abc import Callable
from pathlib import Path

from torch.profiler import profile

__all__ = ["TMP_SUFFIX", "TRACE_FILE_RE", "atomic_write_bytes", "default_worker_name", "gzip_file", "trace_handler"]

#: A finished trace file; group 1 is the worker, group 2 the span's time stamp.
TRACE_FILE_RE = re.compile(r"^(.+)\.(\d+)\.pt\.trace\.json(?:\.gz)?$")
TMP_SUFFIX = ".tmp"
_CHUNK = 4 << 20


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
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def trace_handler(
    run_dir: str | os.PathLike[str],
    worker_name: str,
    *,
    use_gzip: bool = False,
    gzip_level: int = 1,
    on_written: Callable[[Path], None] | None = None,
) -> Callable[[profile], None]:
    """An ``on_trace_ready`` callback that writes one trace file per profiler cycle."""
    directory = Path(run_dir)

    def handler(prof: profile) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        stem = f"{worker_name}.{time.time_ns()}.pt.trace.json"
        final = directory / (stem + (".gz" if use_gzip else ""))
        tmp_json = directory / f".{stem}{TMP_SUFFIX}"
        tmp_gz = directory / f".{stem}.gz{TMP_SUFFIX}"
        try:
            prof.export_chrome_trace(str(tmp_json))
            if use_gzip:
                gzip_file(tmp_json, tmp_gz, level=gzip_level)
                tmp_json.unlink()
                os.replace(tmp_gz, final)
            else:
                with open(tmp_json, "rb+") as f:
                    os.fsync(f.fileno())
                os.replace(tmp_json, final)
            _fsync_dir(directory)
        except BaseException:
            tmp_json.unlink(missing_ok=True)
            tmp_gz.unlink(missing_ok=True)
            raise
        if on_written is not None:
            on_written(final)

    return handler
