"""Writers and readers at once: runners writing into the logdir while the tab reads it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from devtools.tbserver import TensorBoard
from tb_attn_plugin.server.service import Loading, Service
from tb_attn_plugin.types.schema import RunSummary

TINY_ARGS = ["--layers", "2", "--heads", "4", "--d-model", "32", "--batch", "2", "--vocab", "64",
             "--warmup", "1", "--active", "2", "--no-progress"]


def _poll(service: Service, seen: dict[str, set[str]], summaries: list[RunSummary]) -> None:
    for run in service.runs_response(refresh=True).runs:
        seen.setdefault(run.run, set()).add(run.status)
        try:
            summaries.append(service.summary(run.run, None, None))
        except Loading:
            pass


def test_runners_write_while_the_tab_reads(tmp_path: Path) -> None:
    """Two sweeps write at once (one gzipped) while a reader lists and summarizes every run it
    sees: no partial trace is ever summarized, runs in progress show as running, and at the
    end every run is complete and readable."""
    writers = [
        subprocess.Popen([sys.executable, "-m", "runner", "--logdir", str(tmp_path), "--name", name,
                          "--impl", "naive,sdpa,sdpa-math", "--seq", "16,32", *extra, *TINY_ARGS],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for name, extra in (("alice", []), ("bob", ["--gzip"]))
    ]
    service = Service(str(tmp_path), scan_ttl_s=0, wait_s=0.02)
    seen: dict[str, set[str]] = {}
    summaries: list[RunSummary] = []
    deadline = time.monotonic() + 240
    while any(w.poll() is None for w in writers):
        assert time.monotonic() < deadline, "the runners did not finish"
        _poll(service, seen, summaries)
    for w in writers:
        _, stderr = w.communicate()
        assert w.returncode == 0, stderr
    service.wait_s = 60
    _poll(service, seen, summaries)

    assert len(seen) == 12, sorted(seen)
    assert all(not s.errors for s in summaries), [s.errors for s in summaries if s.errors]
    assert any("running" in statuses for statuses in seen.values()), seen
    final = {r.run: r for r in service.runs_response(refresh=True).runs}
    assert {r.status for r in final.values()} == {"ready"}
    assert all(r.info is not None and r.info.status == "ok" for r in final.values())
    for name in final:
        (worker,) = service.summary(name, None, None).workers
        assert len(worker.layers) == 2
    leftovers = [p for p in tmp_path.rglob(".*") if p.is_file()]
    assert not leftovers, leftovers


def test_a_trace_written_in_place_is_never_read_as_complete(tmp_path: Path, builtin_logdir: Path) -> None:
    """Writers other than our runner (the stock trace handler) write in place: a reader that
    catches the file half-written reports it as still loading, never summarizes a part of it,
    and reads it whole once it is."""
    (source,) = (builtin_logdir / "naive").glob("*.pt.trace.json")
    data = source.read_bytes()
    run = tmp_path / "foreign"
    run.mkdir()
    target = run / source.name
    service = Service(str(tmp_path), scan_ttl_s=0, wait_s=60)
    with target.open("wb") as out:
        for cut in (0, 1, len(data) // 7, len(data) // 2, len(data) - 2):
            out.seek(0)
            out.truncate()
            out.write(data[:cut])
            out.flush()
            os.utime(target)
            summary = service.summary("foreign", None, None)
            assert not summary.workers
            assert "truncated" in summary.errors[0].error or summary.errors[0].error == "empty file"
            (listed,) = service.runs_response(refresh=True).runs
            assert listed.status == "loading"
        out.seek(0)
        out.write(data)
    os.utime(target, (time.time() + 1, time.time() + 1))
    summary = service.summary("foreign", None, None)
    assert not summary.errors and summary.workers[0].backend == "naive"
    assert json.loads(target.read_bytes()) == json.loads(data)


def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


def _get_final(url: str) -> dict[str, object]:
    deadline = time.monotonic() + 120
    while True:
        with urllib.request.urlopen(url, timeout=60) as response:
            body = json.loads(response.read())
            if response.status != 202:
                return body
        assert time.monotonic() < deadline, f"{url} still loading"
        time.sleep(0.1)


def test_two_tensorboards_read_one_logdir(tmp_path: Path, builtin_logdir: Path) -> None:
    """Two TensorBoard servers on one directory answer alike, at the same time, and leave it as
    it was (the plugin keeps its state in memory, never in the logdir)."""
    for run in ("naive", "sdpa"):
        shutil.copytree(builtin_logdir / run, tmp_path / run)
    before = _snapshot(tmp_path)
    with TensorBoard(tmp_path, only=["tb_attn"]) as one, TensorBoard(tmp_path, only=["tb_attn"]) as two:
        base = "data/plugin/tb_attn"
        urls = [f"{base}/summary?run=naive", f"{base}/summary?run=sdpa", f"{base}/ranks?run=naive",
                f"{base}/memory?run=sdpa"]
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda u: _get_final(u[0].url + u[1]),
                                    [(server, url) for url in urls for server in (one, two)]))
        for a, b in zip(answers[::2], answers[1::2], strict=True):
            assert a == b
        listings = [_get_final(server.url + f"{base}/runs") for server in (one, two)]
        assert [[r["status"] for r in listing["runs"]] for listing in listings] == [["ready", "ready"]] * 2
    assert _snapshot(tmp_path) == before


def test_first_requests_on_many_threads_share_one_service(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """TensorBoard's first requests arrive together (the plugin listing's is_active and the tab's
    routes): they must build one service, not one each, and none may see it half built (the
    constructor is slowed down, as a first import on a loaded machine is)."""
    from tensorboard.plugins import base_plugin

    from tb_attn_plugin.server import service as service_module
    from tb_attn_plugin.server.plugin import AttentionPlugin

    class Slow(Service):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            time.sleep(0.2)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(service_module, "Service", Slow)

    plugin = AttentionPlugin(base_plugin.TBContext(logdir=str(tmp_path)))
    start = threading.Barrier(16)
    got: list[object] = []

    def first() -> None:
        start.wait()
        got.append(plugin.service)

    threads = [threading.Thread(target=first) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 16 and len({id(s) for s in got}) == 1
