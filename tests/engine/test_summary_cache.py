"""The summary cache: keys from the file version and the engine, damaged entries recomputed,
atomic writes, a size bound evicting the least recently used, and never inside the logdir."""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path

import msgspec
import pytest

from tb_attn_plugin.engine.loader import Loader, resolve_runs
from tb_attn_plugin.engine.summary_cache import SummaryCache, check_outside, engine_version
from tb_attn_plugin.trace.discover import TraceFile


@pytest.fixture
def run_copy(tmp_path: Path, builtin_logdir: Path) -> Path:
    shutil.copytree(builtin_logdir / "naive", tmp_path / "logdir" / "naive")
    return tmp_path / "logdir" / "naive"


def _trace(run: Path) -> TraceFile:
    (r,) = resolve_runs(str(run))
    (trace,) = r.files
    return trace


def test_a_second_loader_reads_the_cache_and_parses_nothing(run_copy: Path, tmp_path: Path,
                                                           decodes: list[str]) -> None:
    cache = tmp_path / "cache"
    trace = _trace(run_copy)
    first = Loader(cache_dir=str(cache)).summarize_file(trace)
    assert len(decodes) == 1
    second = Loader(cache_dir=str(cache)).summarize_file(trace)  # as another process would
    assert len(decodes) == 1 and second == first
    assert len(list(cache.rglob("*.tba"))) == 1
    assert not list(cache.rglob(".tmp-*"))  # written whole, renamed into place


def test_keys_change_with_the_file_and_the_engine(tmp_path: Path) -> None:
    cache = SummaryCache(str(tmp_path))
    trace = TraceFile("s3://b/r/w.1.pt.trace.json", "w.1.pt.trace.json", "w", "1", 100, 1.5, etag="abc")
    key = cache.key(trace)
    assert key == SummaryCache(str(tmp_path)).key(trace)  # stable across instances (and processes)
    for change in ({"size": 101}, {"mtime": 1.6}, {"etag": "abd"}, {"path": "s3://b/r/x.1.pt.trace.json"}):
        assert cache.key(dataclasses.replace(trace, **change)) != key  # type: ignore[arg-type]
    other_engine = SummaryCache(str(tmp_path), namespace=engine_version() + "-next")
    assert other_engine.key(trace) != key
    assert engine_version().startswith("tb-attn.summary/1-")


def test_the_engine_version_follows_the_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A summary cached by other engine code is not served: the version digests the sources."""
    from tb_attn_plugin.engine import summary_cache

    package = tmp_path / "pkg"
    (package / "analysis").mkdir(parents=True)
    (package / "analysis" / "flops.py").write_text("A = 1\n")
    monkeypatch.setattr(summary_cache, "_PACKAGE", package)
    summary_cache.engine_version.cache_clear()
    try:
        before = summary_cache.engine_version()
        (package / "analysis" / "flops.py").write_text("A = 2\n")
        summary_cache.engine_version.cache_clear()
        assert summary_cache.engine_version() != before
    finally:
        summary_cache.engine_version.cache_clear()


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty", "foreign", "valid digest, bad summary"])
def test_a_damaged_entry_is_recomputed_and_rewritten(run_copy: Path, tmp_path: Path, decodes: list[str],
                                                     damage: str) -> None:
    cache_dir = tmp_path / "cache"
    trace = _trace(run_copy)
    good = Loader(cache_dir=str(cache_dir)).summarize_file(trace)
    (entry,) = cache_dir.rglob("*.tba")
    raw = entry.read_bytes()
    if damage == "truncate":
        entry.write_bytes(raw[: len(raw) // 2])
    elif damage == "flip":
        entry.write_bytes(raw[:-10] + bytes([raw[-10] ^ 1]) + raw[-9:])
    elif damage == "empty":
        entry.write_bytes(b"")
    elif damage == "foreign":
        entry.write_bytes(b'{"not": "ours"}')
    else:
        import hashlib

        payload = msgspec.msgpack.encode({"schema": "something else"})
        header = raw[: raw.index(b"\n") + 1]
        entry.write_bytes(header + hashlib.sha256(payload).digest() + payload)
    loader = Loader(cache_dir=str(cache_dir))
    again = loader.summarize_file(trace)
    assert again == good and len(decodes) == 2  # recomputed
    assert loader.disk is not None and loader.disk.corrupt == 1
    assert entry.read_bytes() == raw  # and written again, whole
    assert Loader(cache_dir=str(cache_dir)).summarize_file(trace) == good and len(decodes) == 2


def test_an_unwritable_cache_is_said_once_and_costs_nothing_else(run_copy: Path, tmp_path: Path,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache directory should be")
    loader = Loader(cache_dir=str(blocker / "cache"))
    (r,) = resolve_runs(str(run_copy))
    summary = loader.summarize_run(r)
    assert summary.errors == [] and len(summary.workers) == 1
    assert loader.cache_error is not None and "cannot write the summary cache at" in loader.cache_error
    assert sum("cannot write the summary cache" in m for m in caplog.messages) == 1
    assert blocker.read_text().startswith("a file")  # untouched


def test_the_size_bound_evicts_the_least_recently_used(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    payload = b"x" * 10_000
    cache = SummaryCache(str(root), max_bytes=45_000)
    traces = [TraceFile(f"/t/w{i}.1.pt.trace.json", f"w{i}.1.pt.trace.json", f"w{i}", "1", 1, 1.0) for i in range(6)]
    for i, trace in enumerate(traces[:4]):
        cache.put(trace, payload)
        path = Path(cache._path(cache.key(trace)))
        os.utime(path, (1000 + i, 1000 + i))  # written in order, a second apart
    assert cache.get(traces[0]) == payload  # read: now the most recently used
    cache.put(traces[4], payload)  # 5 entries > 45 kB: trimmed to 90% of the bound, oldest first
    held = sorted(p.stat().st_size for p in root.rglob("*.tba"))
    assert sum(held) <= 45_000 * 9 // 10
    assert cache.get(traces[0]) == payload and cache.get(traces[4]) == payload
    assert cache.get(traces[1]) is None  # the least recently used went: 4 entries fit in 90% of the bound
    assert cache.get(traces[2]) == payload and cache.get(traces[3]) == payload
    (root / "notes.txt").write_text("not ours")
    cache.trim()
    assert (root / "notes.txt").exists()  # only entries are ever deleted


def test_the_cache_is_never_inside_the_logdir(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="inside the log directory"):
        check_outside(str(tmp_path / "logdir" / "cache"), str(tmp_path / "logdir"))
    with pytest.raises(ValueError, match="inside the log directory"):
        check_outside("s3://team/runs/cache", "s3://team/runs")
    check_outside(str(tmp_path / "cache"), str(tmp_path / "logdir"))
    check_outside("s3://team/tb-attn-cache", "s3://team/runs")
    check_outside("s3://team/runs-cache", "s3://team/runs")  # a sibling prefix, not inside


def test_each_entry_is_read_once_per_miss(tmp_path: Path, builtin_logdir: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch finds the misses; the parses that follow do not ask the cache again."""
    from tb_attn_plugin.engine import summary_cache
    from tb_attn_plugin.engine.pipeline import summarize_runs

    for run in ("naive", "sdpa"):
        shutil.copytree(builtin_logdir / run, tmp_path / "logdir" / run)
    asked: list[str] = []
    real = summary_cache._read_entry

    def counting(root: int, key: str, **kwargs: bool) -> bytes | None:
        asked.append(key)
        return real(root, key, **kwargs)

    monkeypatch.setattr(summary_cache, "_read_entry", counting)
    (tmp_path / "cache").mkdir()  # else nothing is read: there is no cache yet
    runs = resolve_runs(str(tmp_path / "logdir"))
    summarize_runs(Loader(cache_dir=str(tmp_path / "cache")), runs)
    assert len(asked) == 2 == len(set(asked))
    asked.clear()
    summarize_runs(Loader(cache_dir=str(tmp_path / "cache")), runs)
    assert len(asked) == 2  # the second time: both found, in the one batch
