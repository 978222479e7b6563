"""The summary cache is trusted only as far as it is bounded (issue 34, items 6 and 8).

Whoever can write the cache can write any entry under a valid digest. Such an entry is served
only within every bound a fresh summary keeps (``analysis.bounds``); past one it is refused as a
damaged entry is, recomputed and written again. No link under the cache's root is followed,
entries take the umask's modes (a cache shared by a group is read by all of it), and a cache
that cannot be written is said once per process.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from helpers import HAND_TRACES

from tb_attn_plugin.analysis.common import bounds
from tb_attn_plugin.engine.loader import Loader, resolve_runs
from tb_attn_plugin.engine.summary_cache import SummaryCache
from tb_attn_plugin.trace.discover import TraceFile
from tb_attn_plugin.types.schema import CollectiveStats, Spread, WorkerSummary

BASE = "findings_cpu_mixed.json"  # 2 layers, 8 head rows, 5 findings
MAGIC = b"tb-attn-summary/1\n"


@pytest.fixture
def run_copy(tmp_path: Path) -> Path:
    run = tmp_path / "logdir" / "mixed"
    run.mkdir(parents=True)
    shutil.copy(HAND_TRACES / BASE, run / "host_1.1.pt.trace.json")
    return run


def _trace(run: Path) -> TraceFile:
    (r,) = resolve_runs(str(run))
    return r.files[0]


def _forge(path: Path, payload: bytes) -> None:
    """What a writer of the cache can do: any payload, under its own valid digest."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(MAGIC + hashlib.sha256(payload).digest() + payload)


def _over(n: int) -> int:
    return n + 1


# Each forgery changes a summary's plain form (``msgspec.to_builtins``), as a writer of the cache
# would change its bytes.
Form = dict[str, Any]


def _heads(s: Form) -> None:
    layer = s["layers"][0]
    layer["heads"] = [layer["heads"][0]] * _over(bounds.MAX_HEAD_ROWS)


def _name(s: Form) -> None:
    s["layers"][0]["phases"][0]["kernel_names"] = ["k" * _over(bounds.MAX_NAME_CHARS)]


def _phase_names(s: Form) -> None:
    s["layers"][0]["phases"][0]["ops"] = [f"aten::op{i}" for i in range(_over(bounds.MAX_PHASE_NAMES))]


def _diagnostics(s: Form) -> None:
    s["diagnostics"] = {f"kind {i}": 1 for i in range(_over(bounds.MAX_DIAGNOSTICS))}


def _label(s: Form) -> None:
    s["diagnostics"] = {"d" * _over(bounds.MAX_LABEL_CHARS): 1}


def _collectives(s: Form) -> None:
    s["collectives"] = [msgspec.to_builtins(CollectiveStats(name=f"c{i}", calls=1.0, cpu_us=1.0, device_us=0.0))
                        for i in range(_over(bounds.MAX_COLLECTIVE_KINDS))]


def _steps(s: Form) -> None:
    s["steps"] = list(range(_over(bounds.MAX_STEPS)))


def _layers(s: Form) -> None:
    bare = {**s["layers"][0], "phases": [], "heads": [], "backend_evidence": []}
    s["layers"] = [bare] * _over(bounds.MAX_LAYERS)


def _findings(s: Form) -> None:
    s["findings"] = [s["findings"][0]] * _over(bounds.MAX_ITEMS)


def _evidence(s: Form) -> None:
    s["findings"][0]["evidence"]["kernels"] = [f"kernel{i}" for i in range(_over(bounds.MAX_EVIDENCE_NAMES))]


def _text(s: Form) -> None:
    s["headline"] = "h" * _over(bounds.MAX_TEXT_CHARS)


def _spread(s: Form) -> None:
    s["layers"][0]["spread"] = {"not a figure": msgspec.to_builtins(
        Spread(median=1.0, lo=1.0, hi=1.0, kind="range", steps=2, noisy=False))}


def _bytes(s: Form) -> None:
    """Over the byte bound, a few large notes: refused before it is decoded."""
    s["notes"] = ["n" * (3 << 20)] * 3


FORGERIES: dict[str, Callable[[Form], None]] = {
    "9 MB": _bytes, "head rows": _heads, "a long kernel name": _name, "names in a phase": _phase_names,
    "kinds of diagnostics": _diagnostics, "a long diagnostics label": _label, "kinds of collectives": _collectives,
    "steps": _steps, "layers": _layers, "findings": _findings, "evidence names": _evidence,
    "a long headline": _text, "unknown spread figures": _spread,
}


@pytest.mark.parametrize("forgery", list(FORGERIES))
def test_a_forged_entry_past_a_bound_is_refused_recomputed_and_rewritten(run_copy: Path, tmp_path: Path,
                                                                       decodes: list[str], forgery: str) -> None:
    cache_dir = tmp_path / "cache"
    trace = _trace(run_copy)
    good = Loader(cache_dir=str(cache_dir)).summarize_file(trace)
    (entry,) = cache_dir.rglob("*.tba")
    written = entry.read_bytes()
    forged = msgspec.to_builtins(good)
    FORGERIES[forgery](forged)
    assert bounds.out_of_bounds(msgspec.convert(forged, WorkerSummary)) is not None or forgery == "9 MB"
    _forge(entry, msgspec.msgpack.encode(forged))
    loader = Loader(cache_dir=str(cache_dir))
    again = loader.summarize_file(trace)
    assert again == good and len(decodes) == 2  # a miss: recomputed
    assert loader.disk is not None and loader.disk.corrupt == 1
    assert entry.read_bytes() == written  # and written again, whole
    assert Loader(cache_dir=str(cache_dir)).summarize_file(trace) == good and len(decodes) == 2


def test_a_summary_at_the_head_row_bound_fits_the_byte_bound(run_copy: Path) -> None:
    """The byte bound refuses no summary a trace can give: 16,384 measured head rows, each with
    its spreads and figures at full precision, in the cached encoding."""
    summary = Loader().summarize_file(_trace(run_copy))
    spread = Spread(median=123.456789, lo=100.123, hi=150.5678, kind="iqr", steps=10, noisy=False)
    head = msgspec.structs.replace(summary.layers[0].heads[0], head=4095, derived=False, cpu_us=12.3456789,
                                   device_us=45.6789123, flops=1.23456789e12, alloc_bytes=1.2345e9,
                                   sxs_bytes=1.2345e9, spread={"cpu_us": spread, "device_us": spread})
    summary = msgspec.structs.replace(summary, layers=[msgspec.structs.replace(summary.layers[0],
                                                                               heads=[head] * bounds.MAX_HEAD_ROWS)])
    assert bounds.out_of_bounds(summary) is None
    assert len(msgspec.msgpack.encode(summary)) < bounds.MAX_SUMMARY_BYTES * 0.55  # 4.3 MB


def test_an_entry_over_the_byte_bound_is_never_read(run_copy: Path, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Refused from its size as stored: not one byte of it is read, let alone decoded."""
    cache = SummaryCache(str(tmp_path / "cache"))
    trace = _trace(run_copy)
    path = Path(cache._path(cache.key(trace)))
    _forge(path, b"\x00" * (bounds.MAX_SUMMARY_BYTES + 1))
    reads: list[int] = []
    real = os.fdopen

    def counting(fd: int, *args: object, **kwargs: object) -> object:
        f = real(fd, *args, **kwargs)  # type: ignore[call-overload]
        read = f.read

        def read_counted(n: int = -1) -> bytes:
            data: bytes = read(n)
            reads.append(len(data))
            return data

        f.read = read_counted
        return f

    monkeypatch.setattr(os, "fdopen", counting)
    assert cache.get(trace) is None and cache.corrupt == 1
    assert reads == []
    assert SummaryCache(str(tmp_path / "cache")).decode(b"\x00" * (bounds.MAX_SUMMARY_BYTES + 1)) is None


def test_a_summary_no_reader_would_take_is_not_written(tmp_path: Path, run_copy: Path) -> None:
    cache = SummaryCache(str(tmp_path / "cache"))
    cache.put(_trace(run_copy), b"x" * (bounds.MAX_SUMMARY_BYTES + 1))
    assert not list((tmp_path / "cache").rglob("*.tba"))


def test_a_linked_shard_is_never_written_through(run_copy: Path, tmp_path: Path,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    """A writer of the cache links a shard directory into the logdir: nothing is written there."""
    cache_dir = tmp_path / "cache"
    trace = _trace(run_copy)
    key = SummaryCache(str(cache_dir)).key(trace)
    cache_dir.mkdir()
    (cache_dir / key[:2]).symlink_to(run_copy, target_is_directory=True)
    before = sorted(os.listdir(run_copy))
    loader = Loader(cache_dir=str(cache_dir))
    summary = loader.summarize_file(trace)
    assert summary.layers  # served all the same
    assert sorted(os.listdir(run_copy)) == before
    assert loader.cache_error is not None and "never followed" in loader.cache_error
    assert sum("cannot write the summary cache" in m for m in caplog.messages) == 1


def test_a_linked_shard_or_entry_is_never_read_through(run_copy: Path, tmp_path: Path, decodes: list[str]) -> None:
    cache_dir, elsewhere = tmp_path / "cache", tmp_path / "elsewhere"
    trace = _trace(run_copy)
    good = Loader(cache_dir=str(elsewhere)).summarize_file(trace)
    forged = msgspec.structs.replace(good, headline="forged")
    key = SummaryCache(str(cache_dir)).key(trace)
    _forge(elsewhere / key[:2] / f"{key}.tba", msgspec.msgpack.encode(forged))
    cache_dir.mkdir()
    (cache_dir / key[:2]).symlink_to(elsewhere / key[:2], target_is_directory=True)
    loader = Loader(cache_dir=str(cache_dir))
    assert loader.from_summary_cache([trace]) == {}
    assert loader.disk is not None and loader.disk.corrupt == 1
    (cache_dir / key[:2]).unlink()
    (cache_dir / key[:2]).mkdir()
    (cache_dir / key[:2] / f"{key}.tba").symlink_to(elsewhere / key[:2] / f"{key}.tba")
    assert Loader(cache_dir=str(cache_dir)).from_summary_cache([trace]) == {}


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_an_entry_that_is_not_a_file_is_a_miss_at_once(tmp_path: Path, kind: str) -> None:
    cache = SummaryCache(str(tmp_path / "cache"))
    trace = TraceFile("/t/w.1.pt.trace.json", "w.1.pt.trace.json", "w", "1", 1, 1.0)
    path = Path(cache._path(cache.key(trace)))
    path.parent.mkdir(parents=True)
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()
    assert cache.get(trace) is None  # a FIFO with no writer would block a plain open


def test_a_root_that_is_a_link_is_the_user_s_choice(run_copy: Path, tmp_path: Path, decodes: list[str]) -> None:
    real, link = tmp_path / "real-cache", tmp_path / "cache"
    real.mkdir()
    link.symlink_to(real, target_is_directory=True)
    trace = _trace(run_copy)
    first = Loader(cache_dir=str(link)).summarize_file(trace)
    assert len(list(real.rglob("*.tba"))) == 1
    assert Loader(cache_dir=str(link)).summarize_file(trace) == first and len(decodes) == 1


def test_the_size_bound_deletes_nothing_through_a_link(tmp_path: Path) -> None:
    root, elsewhere = tmp_path / "cache", tmp_path / "elsewhere"
    elsewhere.mkdir()
    theirs = elsewhere / ("0" * 64 + ".tba")
    theirs.write_bytes(b"y" * 50_000)
    root.mkdir()
    (root / "zz").symlink_to(elsewhere, target_is_directory=True)
    cache = SummaryCache(str(root), max_bytes=20_000)
    for i in range(4):
        cache.put(TraceFile(f"/t/w{i}.1.pt.trace.json", f"w{i}.1.pt.trace.json", f"w{i}", "1", 1, 1.0), b"x" * 6_000)
    assert cache.trim() <= 20_000
    assert theirs.exists()


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077], ids=["022", "002", "077"])
def test_entries_take_the_modes_the_umask_leaves(tmp_path: Path, umask: int) -> None:
    """0600 entries (``mkstemp``'s) would miss for every user of a shared cache but their writer."""
    root = tmp_path / "cache"
    trace = TraceFile("/t/w.1.pt.trace.json", "w.1.pt.trace.json", "w", "1", 1, 1.0)
    old = os.umask(umask)
    try:
        cache = SummaryCache(str(root))
        cache.put(trace, b"payload")
    finally:
        os.umask(old)
    entry = Path(cache._path(cache.key(trace)))
    assert stat.S_IMODE(entry.stat().st_mode) == 0o666 & ~umask
    assert stat.S_IMODE(entry.parent.stat().st_mode) == 0o777 & ~umask
    assert stat.S_IMODE(root.stat().st_mode) == 0o777 & ~umask
    assert cache.get(trace) == b"payload"


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_an_unwritable_cache_is_one_line_from_the_cli(run_copy: Path, tmp_path: Path, jobs: str) -> None:
    """Once, in the CLI's own words: not the log's line as well, nor one per pool worker."""
    shutil.copy(run_copy / "host_1.1.pt.trace.json", run_copy / "host_2.1.pt.trace.json")
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache directory should be")
    proc = subprocess.run([sys.executable, "-m", "tb_attn_plugin.cli", "summarize", str(run_copy), "--format", "json",
                           "--jobs", jobs, "--no-progress", "--cache-dir", str(blocker / "cache")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"tb-attn: warning: cannot write the summary cache at {blocker / 'cache'}: ")
    assert lines[0].endswith("; summaries are not cached")


def test_a_directory_at_one_entrys_name_skips_that_entry_alone(run_copy: Path, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 48: a directory standing at one entry's name turned off every write of the process."""
    from tb_attn_plugin.cli.main import main

    shutil.copy(run_copy / "host_1.1.pt.trace.json", run_copy / "host_2.1.pt.trace.json")
    cache_dir = tmp_path / "cache"
    first, second = resolve_runs(str(run_copy))[0].files
    cache = SummaryCache(str(cache_dir))
    taken = Path(cache._path(cache.key(first)))
    taken.mkdir(parents=True)
    (taken / "x").write_text("not an entry")  # a directory that is not empty: no rename replaces it
    args = ["summarize", str(run_copy), "--cache-dir", str(cache_dir), "--jobs", "1", "--no-progress",
            "--format", "json"]
    assert main(args) == 0
    _, err = capsys.readouterr()
    assert err.count("\n") == 1 and f"entry {taken.parent.name}/{taken.name}" in err and "not cached" in err
    assert Path(cache._path(cache.key(second))).is_file()  # the other entry was written
    assert main(args) == 0  # a new process would say it again; this one has said it
    assert capsys.readouterr().err == ""
    worker = Loader(cache_dir=str(cache_dir), warn=False)  # a pool's worker: the note goes to its caller
    worker.summarize_file(first)
    assert worker.cache_error is None and len(worker.cache_notes) == 1
