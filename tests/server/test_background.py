"""Parsing off the request thread, shared jobs, bounded caches, size limits and the tab's flags."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from tensorboard.plugins import base_plugin
from webtools import BASE, get_json, plugin_client

from tb_attn_plugin.engine import loader as loader_module
from tb_attn_plugin.server.plugin import AttentionLoader, AttentionPlugin
from tb_attn_plugin.server.service import Service
from tb_attn_plugin.trace import io
from tb_attn_plugin.trace.discover import TraceFile
from tb_attn_plugin.trace.events import ReadError


@pytest.fixture
def logdir(tmp_path: Path, builtin_logdir: Path) -> Path:
    for run in ("naive", "sdpa", "sdpa-math", "naive-per-head"):
        shutil.copytree(builtin_logdir / run, tmp_path / run)
    return tmp_path


def test_a_slow_parse_answers_loading_and_blocks_no_other_request(
        logdir: Path, gated: tuple[threading.Event, Counter[str]]) -> None:
    gate, calls = gated
    client = plugin_client(logdir, wait_s=0.2)
    started = time.monotonic()
    response = client.get(f"{BASE}/summary?run=naive")
    assert response.status_code == 202 and time.monotonic() - started < 5
    body = json.loads(response.get_data())
    assert body == {"status": "loading", "runs": ["naive"], "pending": 1, "files": 1, "retry_after_ms": 300}
    assert response.headers["Retry-After"] == "1"
    # Meanwhile the other worker parses another run, and the listing answers at once.
    assert get_json(client, f"{BASE}/summary?run=sdpa")["workers"][0]["backend"] == "cpu-flash"
    statuses = {r["run"]: r["status"] for r in get_json(client, f"{BASE}/runs")["runs"]}
    assert statuses["naive"] == "loading" and statuses["sdpa"] == "ready"
    # The views of the slow run wait for the same job, not a second parse.
    assert client.get(f"{BASE}/memory?run=naive").status_code == 202
    assert client.get(f"{BASE}/compare?runs=sdpa,naive").status_code == 202
    gate.set()
    assert get_json(client, f"{BASE}/summary?run=naive")["workers"][0]["backend"] == "naive"
    assert get_json(client, f"{BASE}/memory?run=naive")["points"]
    # The baseline is the first run by name, not the first listed.
    assert get_json(client, f"{BASE}/compare?runs=sdpa,naive")["baseline"] == "naive"
    assert calls["naive"] == 1 and calls["sdpa"] == 1


def test_many_clients_asking_for_one_run_share_one_parse(
        logdir: Path, gated: tuple[threading.Event, Counter[str]]) -> None:
    gate, calls = gated
    client = plugin_client(logdir, wait_s=0.05)
    with ThreadPoolExecutor(16) as pool:
        first = list(pool.map(lambda _: client.get(f"{BASE}/summary?run=naive").status_code, range(16)))
        assert set(first) == {202}
        gate.set()
        final = list(pool.map(lambda _: get_json(client, f"{BASE}/summary?run=naive")["run"], range(16)))
    assert final == ["naive"] * 16 and calls["naive"] == 1


def test_the_cache_stays_within_its_cap(logdir: Path) -> None:
    one = Service(str(logdir), cache_bytes=1 << 40)
    trace = one.run("naive").files[0]
    size = one.engine._files.analyze_file(trace).nbytes
    cap = int(size * 2.5)  # room for two analyses and a few summaries, not four
    service = Service(str(logdir), cache_bytes=cap, wait_s=30)
    for run in ("naive", "sdpa", "sdpa-math", "naive-per-head"):
        service.memory(run, None, None, step=None)
        assert service.engine._files.cache_nbytes <= cap
    assert len(service.engine._files.analyses) < 4
    # An evicted analysis is parsed again on demand, and the answer is the same.
    assert service.memory("naive", None, None, step=None) == one.memory("naive", None, None, step=None)


def test_a_trace_over_the_limit_is_refused_unread(logdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*args: object, **kwargs: object) -> None:
        raise AssertionError("a trace over the limit was read")

    monkeypatch.setattr(loader_module, "load_events", fail)
    client = plugin_client(logdir, max_trace_bytes=1 << 20)
    body = get_json(client, f"{BASE}/summary?run=naive")
    (error,) = body["errors"]
    assert "over the limit of 1 MiB" in error["error"] and "not read" in error["error"]
    runs = {r["run"]: r for r in get_json(client, f"{BASE}/runs")["runs"]}
    assert runs["naive"]["status"] == "error" and "over the limit" in runs["naive"]["error"]


def test_a_storage_failure_is_retried_not_remembered(logdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = io.read_chunks
    failures = [1]

    def flaky(path: str, **kwargs: object) -> object:
        if failures and ".pt.trace.json" in path:
            failures.pop()
            raise ReadError(f"cannot read {path}: Connection reset by peer")
        return real(path, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(io, "read_chunks", flaky)
    service = Service(str(logdir), wait_s=30)
    service.engine._files.read_retry_s = 0.0
    first = service.summary("naive", None, None)
    assert "Connection reset" in first.errors[0].error and not first.workers
    second = service.summary("naive", None, None)
    assert not second.errors and second.workers[0].backend == "naive"


def test_a_run_still_being_written_shows_as_running(logdir: Path) -> None:
    meta = logdir / "naive" / "tb_attn_run.json"
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "status": "running"}))
    runs = {r["run"]: r for r in get_json(plugin_client(logdir), f"{BASE}/runs")["runs"]}
    assert runs["naive"]["status"] == "running" and runs["sdpa"]["status"] == "unloaded"


def test_metadata_is_read_once_per_version(logdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reads: Counter[str] = Counter()
    real = io.read_many

    def counting(paths: list[str], **kwargs: object) -> object:
        reads.update(Path(p).parent.name for p in paths)
        return real(paths, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(io, "read_many", counting)
    client = plugin_client(logdir, relist_min_s=0)
    get_json(client, f"{BASE}/runs")
    get_json(client, f"{BASE}/runs?refresh=1")
    assert set(reads.values()) == {1} and len(reads) == 4
    meta = logdir / "sdpa" / "tb_attn_run.json"
    meta.write_text(meta.read_text().replace('"status": "ok"', '"status": "ok" '))
    later = time.time() + 5
    os.utime(meta, (later, later))
    get_json(client, f"{BASE}/runs?refresh=1")
    assert reads["sdpa"] == 2 and reads["naive"] == 1


def test_flags(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    loader = AttentionLoader()
    loader.define_flags(parser)
    flags = parser.parse_args(["--tb_attn_cache_mb", "64", "--tb_attn_max_trace_mb", "10",
                               "--tb_attn_parse_workers", "3"])
    loader.fix_flags(flags)
    plugin = loader.load(base_plugin.TBContext(logdir=str(tmp_path), flags=flags))
    assert isinstance(plugin, AttentionPlugin)
    service = plugin.service
    assert service.engine._files.cache_bytes == 64 << 20 and service.engine._files.max_trace_bytes == 10 << 20
    assert service.jobs.workers == 3
    with pytest.raises(base_plugin.FlagsError, match="--tb_attn_cache_mb must be at least 1"):
        loader.fix_flags(parser.parse_args(["--tb_attn_cache_mb", "0"]))


def test_files_named_in_the_registry_are_keyed_by_version(logdir: Path) -> None:
    """A rewritten trace (new size or mtime) is parsed again; the old summary is not served."""
    service = Service(str(logdir), wait_s=30, scan_ttl_s=0)
    before = service.summary("naive", None, None).workers[0]
    (trace,) = (logdir / "naive").glob("*.pt.trace.json")
    data = json.loads(trace.read_text())
    data["traceEvents"] = [e for e in data["traceEvents"] if e.get("name") != "aten::softmax"]
    trace.write_text(json.dumps(data))
    after = service.summary("naive", None, None).workers[0]
    assert after != before
    assert isinstance(service.run("naive").files[0], TraceFile)


def test_peak_flags_draw_every_roofline(logdir: Path) -> None:
    """--tb_attn_peak_flops/--tb_attn_peak_bw: the tab's rooflines under the user's peaks (a
    foreign CPU trace has none of its own); a bad rate stops TensorBoard with the flag named."""
    parser = argparse.ArgumentParser()
    loader = AttentionLoader()
    loader.define_flags(parser)
    flags = parser.parse_args(["--tb_attn_peak_flops", "2.5T", "--tb_attn_peak_bw", "100 GB/s"])
    loader.fix_flags(flags)
    plugin = loader.load(base_plugin.TBContext(logdir=str(logdir), flags=flags))
    assert isinstance(plugin, AttentionPlugin)
    plugin.service.wait_s = 30
    worker = plugin.service.summary("naive", None, None).workers[0]
    assert worker.roofline is not None and worker.roofline.source == "given by --peak-flops and --peak-bw"
    assert worker.roofline.peak_flops["fp32"] == 2.5e12 and worker.roofline.peak_bytes_per_s == 100e9
    for bad in ("0", "fast", "-1T"):
        with pytest.raises(base_plugin.FlagsError, match="--tb_attn_peak_bw must be a positive rate"):
            loader.fix_flags(parser.parse_args([f"--tb_attn_peak_bw={bad}"]))
