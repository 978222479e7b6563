"""The runs list's figures, parsed ahead of clicks: only for parsed runs, bounded by the cache,
never in a loop, and never in the way of what a user opens (a slowed parse, no timings)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from tensorboard.plugins import base_plugin
from webtools import BASE, get_json, plugin_client

from tb_attn_plugin.analysis.cross_run.figures import NO_ATTENTION
from tb_attn_plugin.server import plugin as plugin_module
from tb_attn_plugin.server.jobs import Jobs
from tb_attn_plugin.server.plugin import AttentionLoader
from tb_attn_plugin.server.prefetch import SUMMARY_GUESS_BYTES, budget
from tb_attn_plugin.server.responses import RunEntry
from tb_attn_plugin.server.service import POLL_RUNS_MS, Service

#: Newest first: the order parsing ahead takes them in (their traces' modification times).
RUNS = ("naive", "sdpa", "sdpa-math", "naive-per-head")


@pytest.fixture
def logdir(tmp_path: Path, builtin_logdir: Path) -> Path:
    now = time.time() - 3600
    for i, run in enumerate(RUNS):
        shutil.copytree(builtin_logdir / run, tmp_path / run)
        for trace in (tmp_path / run).glob("*.pt.trace.json*"):
            os.utime(trace, (now - 60 * i, now - 60 * i))
    return tmp_path


def _drain(service: Service) -> None:
    deadline = time.monotonic() + 120
    while service.jobs.background_pending():
        assert time.monotonic() < deadline, "the parses ahead never finished"
        time.sleep(0.02)


def _entries(service: Service) -> dict[str, RunEntry]:
    return {r.run: r for r in service.runs_response(refresh=False).runs}


def test_figures_only_for_parsed_runs_and_as_the_summary_says(logdir: Path) -> None:
    service = Service(str(logdir), wait_s=60, prefetch_files=0)
    listed = service.runs_response(refresh=False)
    assert all(r.figures is None and r.figures_error is None and not r.parsing for r in listed.runs)
    assert listed.poll_after_ms is None and service.jobs.background_pending() == 0  # nothing parsed ahead
    (w,) = service.summary("naive", None, None).workers
    entries = _entries(service)
    assert all(entries[run].figures is None for run in RUNS if run != "naive")
    f = entries["naive"].figures
    assert f is not None and entries["naive"].status == "ready"
    # By hand from the run's summary: a CPU trace, so the CPU clock.
    assert w.device == "cpu" and f.clock == "cpu"
    assert f.attention_us == w.attention_cpu_us
    assert f.attention_share == w.attention_share_cpu == pytest.approx(w.attention_cpu_us / w.step_cpu_us)
    assert f.peak_bytes == max(layer.peak_bytes for layer in w.layers)
    per_step = [s.attention_cpu_us for s in w.per_step]
    assert len(per_step) == w.step_count == f.steps == 2
    assert (f.attention_min_us, f.attention_max_us) == (min(per_step), max(per_step))
    # The mean of the steps is the run's attention time (the spread brackets it).
    assert sum(per_step) / len(per_step) == pytest.approx(f.attention_us)
    assert (f.backend, f.worker, f.workers, f.unreadable) == (w.backend, w.worker, 1, 0)


def test_listing_parses_the_newest_runs_ahead_within_the_budget_once(logdir: Path, gated: tuple[
        threading.Event, Counter[str]]) -> None:
    gate, calls = gated
    gate.set()
    service = Service(str(logdir), prefetch_files=2)
    first = service.runs_response(refresh=False)
    # Queued before the listing is built: those runs say their figures are coming.
    assert [r.run for r in first.runs if r.parsing] == sorted(RUNS[:2]) and first.poll_after_ms == POLL_RUNS_MS
    _drain(service)
    entries = _entries(service)
    assert {run for run, r in entries.items() if r.figures is not None} == set(RUNS[:2])
    assert all(entries[run].status == "unloaded" and entries[run].figures is None for run in RUNS[2:])
    assert not any(r.parsing for r in entries.values())
    assert service.runs_response(refresh=False).poll_after_ms is None
    # The cache let both summaries go: listing does not parse them again (no evict-and-parse
    # loop), and does not move on to the older runs either.
    service.engine._files.memory = type(service.engine._files.memory)(max_entries=1 << 16, max_bytes=64 << 20)
    assert service.prefetch(service.runs()) == 0
    assert all(r.figures is None and not r.parsing for r in _entries(service).values())
    assert dict(calls) == {"naive": 1, "sdpa": 1}
    # A user who opens a run still gets it parsed.
    assert service.summary("sdpa-math", None, None).workers


def test_the_budget_is_what_the_summary_cache_holds(logdir: Path) -> None:
    # Summaries get an eighth of the cache: room for four summaries of the guessed size, three
    # of them for parsing ahead (the rest for runs users open).
    service = Service(str(logdir), cache_bytes=8 * 4 * SUMMARY_GUESS_BYTES, prefetch_files=None)
    cache = service.engine._files.memory
    assert cache.max_bytes == 4 * SUMMARY_GUESS_BYTES and budget(service.engine, None) == 3
    assert budget(service.engine, 1) == 1 and budget(service.engine, 0) == 0
    assert service.prefetch(service.runs()) == 3
    _drain(service)
    assert len(cache) == 3  # nothing parsed ahead was evicted
    # Then the mean size of the summaries held: three quarters of the cache's bytes over it.
    mean = cache.nbytes / 3
    assert budget(service.engine, None) == int(cache.max_bytes // mean) * 3 // 4 > 3  # these summaries are small
    assert Service(str(logdir)).prefetch(service.runs()) == 0  # off unless asked for (the plugin asks)


def test_an_interactive_request_is_not_queued_behind_the_background(
        logdir: Path, gated: tuple[threading.Event, Counter[str]]) -> None:
    gate, calls = gated
    client = plugin_client(logdir, wait_s=60, prefetch_files=None)  # as many as the cache holds: all four
    runs = {r["run"]: r for r in get_json(client, f"{BASE}/runs")["runs"]}
    assert all(runs[run]["parsing"] for run in RUNS)  # all four queued; "naive" first, held at the gate
    # "sdpa-math" waits in the background queue behind "naive": asked for, it is parsed at once
    # in the users' lane, while the background thread is still held.
    body = get_json(client, f"{BASE}/summary?run=sdpa-math")
    assert body["workers"][0]["backend"] == "sdpa-math" and not gate.is_set()
    runs = {r["run"]: r for r in get_json(client, f"{BASE}/runs")["runs"]}
    assert runs["sdpa-math"]["figures"]["backend"] == "sdpa-math" and runs["naive"]["parsing"]
    gate.set()
    deadline = time.monotonic() + 120
    while any(r["parsing"] for r in runs.values()):
        assert time.monotonic() < deadline
        time.sleep(0.05)
        runs = {r["run"]: r for r in get_json(client, f"{BASE}/runs")["runs"]}
    assert all(runs[run]["figures"] is not None for run in RUNS)
    assert dict(calls) == dict.fromkeys(RUNS, 1)  # taken over, not parsed twice


def test_jobs_lanes() -> None:
    """A background job still queued moves to the users' lane when a user asks for its key."""
    jobs = Jobs(1)
    gate = threading.Event()
    ran: list[str] = []

    def job(name: str) -> str:
        if name == "held":
            assert gate.wait(60)
        ran.append(name)
        return name

    held = jobs.submit("held", lambda: job("held"), background=True)
    queued = jobs.submit("queued", lambda: job("queued"), background=True)
    assert jobs.background("queued") and jobs.background_pending() == 2
    assert jobs.submit("queued", lambda: job("again")) is queued  # the same job, now wanted
    assert queued.result(timeout=60) == "queued" and not held.done()
    assert jobs.background_pending() == 1 and not jobs.background("queued")
    gate.set()
    assert held.result(timeout=60) == "held"
    time.sleep(0.05)  # the background thread takes the stale queue entry and skips it
    assert ran == ["queued", "held"] and not jobs.running("queued")


def test_a_failed_or_empty_run_has_no_figures_and_says_why(logdir: Path) -> None:
    broken = logdir / "broken"
    broken.mkdir()
    (broken / "w.1.pt.trace.json").write_text("this is not a trace")
    bare = logdir / "bare"
    bare.mkdir()
    (bare / "w.1.pt.trace.json").write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 10, "dur": 20},
    ]}))
    old = time.time() - 7200
    for f in (broken / "w.1.pt.trace.json", bare / "w.1.pt.trace.json"):
        os.utime(f, (old, old))
    client = plugin_client(logdir, prefetch_files=10)
    deadline = time.monotonic() + 120
    while True:
        body = get_json(client, f"{BASE}/runs")
        runs = {r["run"]: r for r in body["runs"]}
        if body["poll_after_ms"] is None:
            break
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert runs["broken"]["status"] == "error" and runs["broken"]["figures"] is None
    assert runs["broken"]["figures_error"] == runs["broken"]["error"] and runs["broken"]["error"]
    assert runs["bare"]["status"] == "ready" and runs["bare"]["figures"] is None
    assert runs["bare"]["figures_error"] == NO_ATTENTION
    assert set(runs["naive"]["figures"]) >= {"clock", "attention_us", "attention_share", "peak_bytes", "backend",
                                              "steps", "attention_min_us", "attention_max_us"}


def test_prefetch_flag() -> None:
    parser = argparse.ArgumentParser()
    loader = AttentionLoader()
    loader.define_flags(parser)
    assert parser.parse_args([]).tb_attn_prefetch_files is None
    loader.fix_flags(parser.parse_args(["--tb_attn_prefetch_files", "0"]))
    with pytest.raises(base_plugin.FlagsError, match="--tb_attn_prefetch_files must be at least 0"):
        loader.fix_flags(parser.parse_args(["--tb_attn_prefetch_files", "-1"]))
    plugin = loader.load(base_plugin.TBContext(logdir="/nonexistent",
                                               flags=parser.parse_args(["--tb_attn_prefetch_files", "7"])))
    assert plugin.service.prefetch_files == 7


def test_the_plugin_parses_ahead_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the flag, as many as the cache holds (tests turn it off: ``tests/conftest.py``)."""
    monkeypatch.undo()
    parser = argparse.ArgumentParser()
    AttentionLoader().define_flags(parser)
    plugin = AttentionLoader().load(base_plugin.TBContext(logdir="/nonexistent", flags=parser.parse_args([])))
    assert plugin_module.DEFAULT_PREFETCH_FILES is None and plugin.service.prefetch_files is None
