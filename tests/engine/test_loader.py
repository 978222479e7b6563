"""Discovery, reading (local, gzip, fsspec), per-file errors and caching."""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path

import fsspec
import pytest
from helpers import SHARED_TRACES, accelerate_run
from tracetools import trace_files

from tb_attn_plugin.engine.loader import Loader, resolve_runs
from tb_attn_plugin.trace.discover import find_runs
from tb_attn_plugin.trace.events import TraceError
from tb_attn_plugin.trace.io import FileInfo, list_tree, read_chunks
from tb_attn_plugin.vocab.names import parse_trace_name

GOOD_GZ = SHARED_TRACES / "gpu" / "tracelens_h100_bert-small_sdpa-flash.json.gz"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("host_123.1700000000000.pt.trace.json", ("host_123", "1700000000000")),
        ("host_rank1.1700000000000.pt.trace.json.gz", ("host_rank1", "1700000000000")),
        ("worker0.pt.trace.json", ("worker0", None)),
        ("a.b.c.12.pt.trace.json", ("a.b.c", "12")),
        (".host.1.pt.trace.json.tmp", None),
        (".hidden.1.pt.trace.json", None),
        ("tb_attn_run.json", None),
        ("trace.json", None),
    ],
)
def test_trace_names(name: str, expected: tuple[str, str | None] | None) -> None:
    assert parse_trace_name(name) == expected


def test_runs_are_directories_named_relative_to_the_logdir() -> None:
    files = [
        FileInfo("/logs/a/b/w.1.pt.trace.json", 10, 1.0),
        FileInfo("/logs/a/b/w.2.pt.trace.json", 10, 1.0),
        FileInfo("/logs/a/b/tb_attn_run.json", 1, 1.0),
        FileInfo("/logs/c/x.pt.trace.json.gz", 10, 1.0),
        FileInfo("/logs/top.5.pt.trace.json", 10, 1.0),
        FileInfo("/logs/d/notes.txt", 10, 1.0),
    ]
    runs = find_runs("/logs", files)
    assert [r.name for r in runs] == [".", "a/b", "c"]
    ab = runs[1]
    assert [(f.worker, f.span) for f in ab.files] == [("w", "1"), ("w", "2")]
    assert ab.metadata_path == "/logs/a/b/tb_attn_run.json"


def test_resolve_logdir_run_and_file(builtin_logdir: Path) -> None:
    runs = resolve_runs(str(builtin_logdir))
    names = [r.name for r in runs]
    assert "naive" in names and "sdpa-efficient" not in names  # no traces: unsupported on CPU
    (one,) = resolve_runs(str(builtin_logdir / "naive"))
    assert one.name == "." and len(one.files) == 1
    (path,) = trace_files(builtin_logdir / "naive")
    (single,) = resolve_runs(str(path))
    assert single.name == path.name and single.files[0].path == str(path)
    with pytest.raises(TraceError, match="No such file or directory"):
        resolve_runs(str(builtin_logdir / "missing"))


def test_traces_named_otherwise_are_found_by_their_content(tmp_path: Path, builtin_logdir: Path) -> None:
    (trace,) = trace_files(builtin_logdir / "naive")
    accelerate_run(tmp_path / "accel", trace)  # Accelerate's profile_<process index>.json
    (tmp_path / "export").mkdir()  # prof.export_chrome_trace("trace.json.gz")
    (tmp_path / "export" / "trace.json.gz").write_bytes(gzip.compress(trace.read_bytes(), compresslevel=1))
    (tmp_path / "hf").mkdir()  # an output_dir: JSON, but no trace
    (tmp_path / "hf" / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 64}))
    (tmp_path / "hf" / "trainer_state.json").write_text(json.dumps({"global_step": 5, "log_history": []}))
    accel, export = resolve_runs(str(tmp_path))
    assert (accel.name, accel.workers, export.name, export.workers) == (
        "accel", [f"profile_{i}" for i in range(4)], "export", ["trace"])
    summary = Loader().summarize_run(accel)
    assert summary.errors == [] and [(w.worker, w.rank) for w in summary.workers] == [
        (f"profile_{i}", i) for i in range(4)]
    assert all(w.backend == "naive" for w in summary.workers)
    (one,) = resolve_runs(str(tmp_path / "accel" / "profile_2.json"))  # one file: its worker as the grammar reads it
    assert [(f.worker, f.span) for f in one.files] == [("profile_2", None)]
    (tmp_path / "accel" / "rank3.1700000000.json.gz").write_bytes(b"")
    (named,) = resolve_runs(str(tmp_path / "accel" / "rank3.1700000000.json.gz"))
    assert [(f.worker, f.span) for f in named.files] == [("rank3", "1700000000")]
    # A single file keeps the dots in its worker's name (the sd3.5 production trace was "sd3").
    for name, worker in (("xdit_sd3.5_mi300.json.gz", "xdit_sd3.5_mi300"), ("sd3.5_run.txt", "sd3.5_run"),
                         ("v1.2.trace.log.gz", "v1.2.trace"), ("trace", "trace")):
        (tmp_path / name).write_bytes(b"")
        (single,) = resolve_runs(str(tmp_path / name))
        assert [f.worker for f in single.files] == [worker], name


def test_a_logdir_of_json_that_is_no_trace_lists_no_run_at_once(tmp_path: Path) -> None:
    """Event files, metadata, a model's JSON, another tool's Chrome trace, a FIFO, a link out of the
    logdir and a gzip bomb, all named *.json: none is a trace, none blocks, the bomb costs its head."""
    import threading
    import time

    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps({"schemaVersion": 1, "deviceProperties": [], "traceEvents": []}))
    logdir = tmp_path / "logdir" / "run"
    logdir.mkdir(parents=True)
    (logdir / "events.out.tfevents.1.host").write_bytes(b"\x00" * 64)
    (logdir / "tb_attn_run.json").write_text(json.dumps({"schema": "tb-attn.run/1", "status": "ok"}))
    (logdir / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_layer": 2}))
    (logdir / "trainer_state.json").write_text(json.dumps({"global_step": 5, "log_history": [{"loss": 1.0}]}))
    (logdir / "devtools.json").write_text(json.dumps(
        {"traceEvents": [{"cat": "devtools.timeline", "name": "RunTask", "ph": "X", "ts": 0, "dur": 1}]}))
    os.mkfifo(logdir / "f.json")
    (logdir / "l.json").symlink_to(outside)
    (logdir / "b.json.gz").write_bytes(gzip.compress(b" " * (16 << 20), compresslevel=1))
    got: list[object] = []
    started = time.monotonic()
    threading.Thread(target=lambda: got.append(resolve_runs(str(tmp_path / "logdir"))), daemon=True).start()
    while not got and time.monotonic() - started < 20:
        time.sleep(0.01)
    assert got == [[]], "listing blocked"
    assert time.monotonic() - started < 5


def test_multi_member_gzip(tmp_path: Path) -> None:
    raw = gzip.decompress(GOOD_GZ.read_bytes())
    half = len(raw) // 2
    path = tmp_path / "w.pt.trace.json.gz"
    path.write_bytes(gzip.compress(raw[:half]) + gzip.compress(raw[half:]))
    assert b"".join(read_chunks(str(path), chunk_bytes=4096)) == raw


def test_a_bad_file_is_a_per_file_error_and_others_still_load(tmp_path: Path, builtin_logdir: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(builtin_logdir / "naive", run)
    (run / "broken.1.pt.trace.json").write_bytes(b'{"traceEvents": [')
    (summary_run,) = resolve_runs(str(run))
    summary = Loader().summarize_run(summary_run)
    assert len(summary.workers) == 1 and summary.workers[0].layers
    assert [e.file for e in summary.errors] == ["broken.1.pt.trace.json"]
    assert "truncated" in summary.errors[0].error
    assert summary.metadata is not None and summary.metadata["impl"] == "naive"


def test_cache_is_keyed_by_path_size_and_mtime(tmp_path: Path, builtin_logdir: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(builtin_logdir / "naive", run)
    loader = Loader()
    (r,) = resolve_runs(str(run))
    first = loader.summarize_run(r).workers[0]
    assert loader.summarize_run(r).workers[0] is first  # served from memory
    (path,) = trace_files(run)
    shutil.copy(builtin_logdir / "sdpa" / trace_files(builtin_logdir / "sdpa")[0].name, path)
    os.utime(path, (1, 1))
    (r2,) = resolve_runs(str(run))
    second = loader.summarize_run(r2).workers[0]
    assert second is not first and second.backend == "cpu-flash"


def test_disk_cache_outside_the_logdir(tmp_path: Path, builtin_logdir: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(builtin_logdir / "naive", run)
    before = sorted(p.name for p in run.iterdir())
    cache = tmp_path / "cache"
    (r,) = resolve_runs(str(run))
    a = Loader(cache_dir=str(cache)).summarize_run(r).workers[0]
    assert any(cache.rglob("*.tba"))
    b = Loader(cache_dir=str(cache)).summarize_run(r).workers[0]  # a new process would see the same
    assert a == b
    assert sorted(p.name for p in run.iterdir()) == before  # nothing written into the logdir


def test_fsspec_memory_filesystem(builtin_logdir: Path) -> None:
    fs = fsspec.filesystem("memory")
    (path,) = trace_files(builtin_logdir / "naive")
    fs.pipe("/team/runs/exp1/naive/" + path.name, path.read_bytes())
    fs.pipe("/team/runs/exp1/naive/tb_attn_run.json", (builtin_logdir / "naive" / "tb_attn_run.json").read_bytes())
    listing = list_tree("memory://team/runs")
    assert all(f.path.startswith("memory://team/runs/") for f in listing)
    (run,) = resolve_runs("memory://team/runs")
    assert run.name == "exp1/naive"
    summary = Loader().summarize_run(run)
    assert summary.workers[0].backend == "naive" and summary.metadata is not None


def test_user_peaks_are_applied_to_what_is_handed_out_never_to_the_cached_summary() -> None:
    """Peaks are the reader's (``--peak-flops``): the loader hands out copies under them, and its
    caches keep the summary as the trace has it, so a loader without peaks reading the same
    summary (a shared cache) gets the trace's own."""
    (run,) = resolve_runs(str(GOOD_GZ))
    plain = Loader().summarize_run(run)
    loader = Loader(peaks=(1e12, 1e9))  # 1 TFLOP/s, 1 GB/s
    peaked = loader.summarize_run(run)
    (cached,) = (loader.cached_summary(t) for t in run.files)
    assert cached is not None and cached.roofline is not None and peaked.workers[0].roofline is not None
    assert cached.roofline == plain.workers[0].roofline  # the trace's own peaks, untouched
    assert peaked.workers[0].roofline.peak_bytes_per_s == 1e9
    assert set(peaked.workers[0].roofline.peak_flops.values()) == {1e12}
    assert cached is not peaked.workers[0]
    assert loader.summarize_run(run) == peaked  # handed out again: the same figures, not applied twice
