"""The runner when its writes fail: a file-size limit (EFBIG) or a full disk (ENOSPC).

Each case runs ``python -m runner``'s ``main`` in a subprocess with one fault injected by a
small wrapper (``_WRAPPER``): a real ``RLIMIT_FSIZE`` (Python ignores SIGXFSZ, so writes fail
with EFBIG), or the file the writer is about to open replaced by a symlink to ``/dev/full``, on
which every write fails with ENOSPC as on a full disk. Kineto, which writes the trace in C++,
meets the same faults as our Python code does. Every case expects: exit code 1, one line
``tb-attn-run: error: cannot write <file>: <reason>`` on stderr and no traceback, no partial or
temporary file anywhere in the logdir, the failed run's metadata saying ``failed`` with the
error, and runs written before (by an earlier sweep, or earlier in the same sweep) unchanged.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from runner.metadata import METADATA_FILE
from runner.traces import TRACE_FILE_RE, WriteError

pytestmark = pytest.mark.skipif(not os.path.exists("/dev/full") or sys.platform != "linux", reason="needs Linux")

ROOT = Path(__file__).resolve().parents[2]
TINY_ARGS = ["--layers", "2", "--heads", "4", "--d-model", "32", "--batch", "2", "--vocab", "64",
             "--wait", "0", "--warmup", "1", "--active", "1", "--seq", "16", "--no-progress"]
LIMIT_BYTES = 64 << 10  # a trace of the tiny model is about 1 MB; its metadata about 1.3 KB

# Runs the CLI with the fault named by TB_ATTN_FAULT injected just where the runner would meet it.
_WRAPPER = """
import os, resource, sys
import torch.profiler
import runner.sweep, runner.traces
from runner.cli import main

fault = os.environ["TB_ATTN_FAULT"]
limit = int(os.environ.get("TB_ATTN_LIMIT", "0"))

def before_run(number, action):
    original, seen = runner.sweep.run_one, []
    def run_one(spec, logdir, *args, **kwargs):
        seen.append(spec)
        if len(seen) == number:
            action(logdir / spec.name)
        return original(spec, logdir, *args, **kwargs)
    runner.sweep.run_one = run_one

def limit_file_size(run_dir):
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

def full_metadata_disk(run_dir):
    run_dir.mkdir(parents=True, exist_ok=True)
    os.symlink("/dev/full", run_dir / f".tb_attn_run.json.{os.getpid()}.tmp")

if fault == "fsize-at-run-2":
    before_run(2, limit_file_size)
elif fault == "metadata-enospc":
    before_run(1, full_metadata_disk)
elif fault == "export-enospc":
    export = torch.profiler.profile.export_chrome_trace
    def full_export(self, path, *args, **kwargs):
        os.symlink("/dev/full", path + ".tmp")  # Kineto writes <path>.tmp, then renames it
        return export(self, path, *args, **kwargs)
    torch.profiler.profile.export_chrome_trace = full_export
elif fault == "gzip-enospc":
    gzip_file = runner.traces.gzip_file
    def full_gzip(src, dst, **kwargs):
        os.symlink("/dev/full", dst)
        return gzip_file(src, dst, **kwargs)
    runner.traces.gzip_file = full_gzip
elif fault != "none":
    raise SystemExit(f"unknown fault {fault}")
sys.exit(main(sys.argv[1:]))
"""


def _run(logdir: Path, fault: str, *args: str, fsize_limit: int | None = None,
         limit: int = LIMIT_BYTES) -> subprocess.CompletedProcess[str]:
    def limit_file_size() -> None:  # in the child, before exec
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize_limit or 0, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    env = {**os.environ, "TB_ATTN_FAULT": fault, "TB_ATTN_LIMIT": str(limit), "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(
        [sys.executable, "-c", _WRAPPER, "--logdir", str(logdir), *TINY_ARGS, *args],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=180,
        preexec_fn=limit_file_size if fsize_limit is not None else None,
    )


def _digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _leftovers(logdir: Path) -> list[str]:
    """Hidden or temporary files, anywhere (a partial trace would be one or the other)."""
    return [str(p) for p in logdir.rglob("*") if p.name.startswith(".") or p.name.endswith(".tmp")]


def _errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "error:" in line and "Failed to write" not in line]


def _assert_failed_cleanly(proc: subprocess.CompletedProcess[str], logdir: Path, run_dir: Path,
                           file_re: str, reason: str) -> None:
    assert proc.returncode == 1, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    (line,) = _errors(proc.stderr)
    assert re.fullmatch(rf"tb-attn-run: error: cannot write {re.escape(str(run_dir))}/{file_re}: {reason}", line), line
    assert _leftovers(logdir) == []
    assert not [p for p in run_dir.iterdir() if TRACE_FILE_RE.match(p.name)]
    meta = json.loads((run_dir / METADATA_FILE).read_text())
    assert meta["status"] == "failed"
    assert meta["error"] == line.removeprefix("tb-attn-run: error: ")
    assert meta["traces"] == []


def _assert_complete_run(run_dir: Path) -> None:
    meta = json.loads((run_dir / METADATA_FILE).read_text())
    assert meta["status"] == "ok", meta
    traces = sorted(p.name for p in run_dir.iterdir() if TRACE_FILE_RE.match(p.name))
    assert traces == meta["traces"] and len(traces) == 1
    assert json.loads((run_dir / traces[0]).read_bytes())["traceEvents"]


@pytest.fixture(scope="module")
def earlier(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A logdir holding two finished runs, written by an earlier sweep like the ones below."""
    logdir = tmp_path_factory.mktemp("earlier")
    proc = _run(logdir, "none", "--impl", "sdpa,naive", "--name", "before")
    assert proc.returncode == 0, proc.stderr[-2000:]
    return logdir


def _logdir_with_earlier_run(earlier: Path, tmp_path: Path) -> tuple[Path, dict[str, str]]:
    logdir = tmp_path / "logdir"
    shutil.copytree(earlier, logdir)
    return logdir, _digest(logdir)


@pytest.mark.parametrize("below_end", [None, 1000], ids=["64KiB", "1000B-below-the-end"])
def test_file_size_limit_in_the_middle_of_a_sweep(earlier: Path, tmp_path: Path, below_end: int | None) -> None:
    """The limit is set after the sweep's first run. 64 KiB stops Kineto in the middle of the trace,
    which it notices. About 1000 bytes below the end stops it in the part it writes last and
    never checks (it used to rename that truncated trace into place, and the run said ok)."""
    logdir, before = _logdir_with_earlier_run(earlier, tmp_path)
    limit = LIMIT_BYTES
    if below_end is not None:
        (reference,) = (earlier / "before/builtin/naive/seq16").glob("*.pt.trace.json")
        limit = reference.stat().st_size - below_end
    proc = _run(logdir, "fsize-at-run-2", "--impl", "sdpa,naive", limit=limit)
    _assert_failed_cleanly(proc, logdir, logdir / "builtin/naive/seq16", r"[^/]+\.\d+\.pt\.trace\.json",
                           "File too large")
    _assert_complete_run(logdir / "builtin/sdpa/seq16")  # the sweep's first run, written before the limit
    after = _digest(logdir)
    assert {k: after[k] for k in before} == before


def test_file_size_limit_from_the_start_with_gzip(earlier: Path, tmp_path: Path) -> None:
    logdir, before = _logdir_with_earlier_run(earlier, tmp_path)
    proc = _run(logdir, "none", "--impl", "naive", "--gzip", fsize_limit=LIMIT_BYTES)
    _assert_failed_cleanly(proc, logdir, logdir / "builtin/naive/seq16", r"[^/]+\.\d+\.pt\.trace\.json\.gz",
                           "File too large")
    assert _digest(logdir).items() >= before.items()


@pytest.mark.parametrize(("fault", "gzip", "file_re"), [
    ("export-enospc", False, r"[^/]+\.\d+\.pt\.trace\.json"),
    ("gzip-enospc", True, r"[^/]+\.\d+\.pt\.trace\.json\.gz"),
    ("metadata-enospc", False, re.escape(METADATA_FILE)),
])
def test_full_disk(earlier: Path, tmp_path: Path, fault: str, gzip: bool, file_re: str) -> None:
    logdir, before = _logdir_with_earlier_run(earlier, tmp_path)
    proc = _run(logdir, fault, "--impl", "naive", *(["--gzip"] if gzip else []))
    _assert_failed_cleanly(proc, logdir, logdir / "builtin/naive/seq16", file_re, "No space left on device")
    assert _digest(logdir).items() >= before.items()


def test_metadata_that_cannot_be_finished_is_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    """The disk fills during the run: the trace and then the final metadata fail. The metadata
    written at the start would say "running" for ever, so it goes."""
    from helpers import profile_run

    import runner.metadata
    import runner.traces

    write = runner.metadata.atomic_write_bytes
    calls: list[Path] = []

    def fill_after_first(path: Path, data: bytes) -> None:
        calls.append(path)
        if len(calls) > 1:
            raise WriteError(path, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
        write(path, data)

    def full_export(self: object, path: str) -> None:
        os.symlink("/dev/full", path + ".tmp")
        export(self, path)

    export = runner.traces.profile.export_chrome_trace
    monkeypatch.setattr(runner.metadata, "atomic_write_bytes", fill_after_first)
    monkeypatch.setattr(runner.traces.profile, "export_chrome_trace", full_export)
    result = profile_run(tmp_path, "full")
    assert result.status == "failed" and result.traces == []
    assert re.fullmatch(r"cannot write \S+\.pt\.trace\.json: No space left on device; "
                        rf"cannot write \S+/{METADATA_FILE}: No space left on device, so it was removed",
                        result.error or "")
    assert list((tmp_path / "full").iterdir()) == []
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == [f"error: {result.error}"]


class _KinetoLike:
    """Exports as Kineto does when a write fails: no exception, and either a truncated trace
    renamed into place (a failure at the final flush) or its own ``.tmp`` file left behind."""

    def __init__(self, renamed: bool) -> None:
        self.renamed = renamed

    def export_chrome_trace(self, path: str) -> None:
        target = path if self.renamed else path + ".tmp"
        Path(target).write_text('{"traceEvents": [\n  {"ph": "X", "name": "aten::mm", "ts": 1, "dur": 2}\n  ],"traceN')


@pytest.mark.parametrize("renamed", [True, False], ids=["truncated-and-renamed", "left-in-tmp"])
@pytest.mark.parametrize("use_gzip", [False, True])
def test_an_export_that_fails_silently_is_caught(tmp_path: Path, renamed: bool, use_gzip: bool) -> None:
    from runner.traces import trace_handler

    handler = trace_handler(tmp_path, "w", use_gzip=use_gzip)
    with pytest.raises(WriteError) as caught:
        handler(_KinetoLike(renamed))  # type: ignore[arg-type]
    assert re.fullmatch(r"cannot write \S+/w\.\d+\.pt\.trace\.json(\.gz)?: the profiler could not write the trace "
                        r"\(its log above may say why\)", str(caught.value)), str(caught.value)
    assert caught.value.errno == errno.EIO
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_stops_the_sweep(earlier: Path, tmp_path: Path) -> None:
    """Every later run would profile only to fail the same way: the sweep stops after the first."""
    logdir, before = _logdir_with_earlier_run(earlier, tmp_path)
    proc = _run(logdir, "export-enospc", "--impl", "naive,sdpa,sdpa-math")
    _assert_failed_cleanly(proc, logdir, logdir / "builtin/naive/seq16", r"[^/]+\.\d+\.pt\.trace\.json",
                           "No space left on device")
    assert f"tb-attn-run: stopping the sweep: {logdir} cannot be written; the other 2 run(s) were not started" \
        in proc.stderr.splitlines()
    assert not (logdir / "builtin/sdpa").exists() and not (logdir / "builtin/sdpa-math").exists()
    assert _digest(logdir).items() >= before.items()
