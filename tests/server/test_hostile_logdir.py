"""A shared logdir written by anyone: files, names and requests that must not take the tab down.

Each case here failed before its fix (issue 23): a FIFO swapped in for a trace or for run
metadata, undecodable file names, a trace whose analysis raises, unknown run names asked for
in a loop, expensive views, a file that grew, a future mtime, a backslash in a name.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from tracetools import trace_files
from webtools import BASE, get, get_json, plugin_client

from tb_attn_plugin.analysis.attribution import analyze as analyze_module
from tb_attn_plugin.analysis.views import views
from tb_attn_plugin.engine import loader as loader_module
from tb_attn_plugin.server.service import Service
from tb_attn_plugin.trace import io


@pytest.fixture
def logdir(tmp_path: Path, builtin_logdir: Path) -> Path:
    for run in ("naive", "sdpa"):
        shutil.copytree(builtin_logdir / run, tmp_path / "exp" / run)
    return tmp_path


def _trace(logdir: Path, run: str) -> Path:
    (path,) = trace_files(logdir / run)
    return path


def _fifo_for(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def test_a_fifo_swapped_in_for_a_trace_fails_at_once_and_blocks_nobody(logdir: Path) -> None:
    client = plugin_client(logdir, wait_s=5)
    assert {r["run"] for r in get_json(client, f"{BASE}/runs")["runs"]} == {"exp/naive", "exp/sdpa"}
    path = _trace(logdir, "exp/naive")
    stamp = path.stat()
    _fifo_for(path)
    os.utime(path, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))  # the listing's version still
    started = time.monotonic()
    body = get_json(client, f"{BASE}/summary?run=exp/naive")
    assert time.monotonic() - started < 5  # answered, not "loading" (both parse threads stuck)
    assert body["workers"] == [] and "not a regular file (a FIFO)" in body["errors"][0]["error"]
    # Both parse threads are free: the other run is parsed, and the FIFO again is refused at once.
    assert get_json(client, f"{BASE}/summary?run=exp/sdpa")["workers"]
    assert get(client, f"{BASE}/memory?run=exp/naive").status_code == 404
    assert get(client, f"{BASE}/trace?run=exp/naive&file={quote(path.name)}").status_code == 404


def test_a_fifo_as_run_metadata_does_not_block_the_runs_list(logdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = io.list_tree
    meta = logdir / "exp" / "sdpa" / "tb_attn_run.json"

    def swap_after_listing(root: str, **kwargs: Any) -> Any:
        listed = real(root, **kwargs)
        _fifo_for(meta)  # between the listing and the metadata read
        return listed

    monkeypatch.setattr(io, "list_tree", swap_after_listing)
    result: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: result.update(get_json(plugin_client(logdir), f"{BASE}/runs")),
                              daemon=True)
    thread.start()
    thread.join(20)
    assert not thread.is_alive(), "/runs blocked on a FIFO"
    runs = {r["run"]: r for r in result["runs"]}
    assert runs["exp/sdpa"]["info"] is None and runs["exp/naive"]["info"] is not None


def test_devices_and_fifos_are_refused_by_trace_io(tmp_path: Path) -> None:
    fifo = tmp_path / "w.pt.trace.json"
    os.mkfifo(fifo)
    with pytest.raises(io.TraceError, match="not a regular file \\(a FIFO\\)"):
        next(io.read_chunks(str(fifo)))
    with pytest.raises(io.TraceError, match="a character device"):
        next(io.read_chunks("/dev/zero"))
    assert not io.is_plain_local_file(str(fifo))


def test_undecodable_names_are_listed_escaped_and_summarized(logdir: Path) -> None:
    raw_dir = os.fsencode(logdir) + b"/team/r\xff\xfeun"
    os.makedirs(raw_dir)
    source = _trace(logdir, "exp/naive")
    shutil.copy(source, os.fsdecode(raw_dir + b"/host\xe9." + source.name.split(".", 1)[1].encode()))
    client = plugin_client(logdir)
    runs = {r["run"]: r for r in get_json(client, f"{BASE}/runs")["runs"]}
    name = "team/r\\xff\\xfeun"
    assert name in runs, sorted(runs)
    (worker,) = runs[name]["workers"]
    assert worker["worker"] == "host\\xe9"
    body = get_json(client, f"{BASE}/summary?run={quote(name)}")
    assert body["errors"] == [] and body["workers"][0]["layers"]
    assert body["workers"][0]["file"].startswith("host\\xe9.")
    file = quote(body["workers"][0]["file"])
    response = get(client, f"{BASE}/trace?run={quote(name)}&file={file}")
    assert response.status_code == 200 and response.data == source.read_bytes()
    assert get(client, f"{BASE}/timeline?run={quote(name)}").status_code == 200


def test_a_backslash_is_part_of_a_posix_name(logdir: Path) -> None:
    shutil.copytree(logdir / "exp" / "naive", logdir / "exp" / "a\\b")
    runs = {r["run"] for r in get_json(plugin_client(logdir), f"{BASE}/runs")["runs"]}
    assert "exp/a\\b" in runs and "exp/a" not in runs


def test_an_analysis_that_raises_is_a_remembered_file_error(logdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: Counter[str] = Counter()
    real = analyze_module.analyze

    def analyze(events: Any) -> Any:
        calls["analyze"] += 1
        if any("naive" in n for n in events.names) or calls["analyze"] == 1:
            raise OverflowError("Python int too large to convert to C long")
        return real(events)

    monkeypatch.setattr(loader_module, "analyze", analyze)  # the name the loader calls
    client = plugin_client(logdir)
    for _ in range(3):
        body = get_json(client, f"{BASE}/summary?run=exp/naive")
        assert body["workers"] == [] and "internal error" in body["errors"][0]["error"]
        assert "OverflowError" in body["errors"][0]["error"]
    assert calls["analyze"] == 1  # remembered for the file's version, not parsed per request
    compare = get_json(client, f"{BASE}/compare?runs=exp/naive,exp/sdpa")
    assert [e["run"] for e in compare["errors"]] == ["exp/naive"]
    assert [r["run"] for r in compare["runs"]] == ["exp/sdpa"]


def test_a_parse_has_a_time_limit(logdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = io.read_chunks

    def slow(path: str, **kwargs: Any) -> Any:
        for chunk in real(path, chunk_bytes=64 << 10, max_bytes=kwargs.get("max_bytes")):
            time.sleep(0.05)
            yield chunk

    monkeypatch.setattr(io, "read_chunks", slow)
    service = Service(str(logdir), wait_s=30, parse_timeout_s=0.2)
    summary = service.summary("exp/naive", None, None)
    assert summary.workers == [] and "longer than the limit of 0.2 s" in summary.errors[0].error


def test_unknown_names_re_list_at_most_once_per_interval(logdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    listings = Counter[str]()
    real = io.list_tree

    def counting(root: str, **kwargs: Any) -> Any:
        listings["list"] += 1
        return real(root, **kwargs)

    monkeypatch.setattr(io, "list_tree", counting)
    client = plugin_client(logdir, relist_min_s=30)
    get_json(client, f"{BASE}/runs")
    for k in range(40):
        assert get(client, f"{BASE}/summary?run=nope{k}").status_code == 404
        assert get_json(client, f"{BASE}/runs?refresh=1")["runs"]
    assert listings["list"] == 1
    # A run created since the listing is found once the interval has passed.
    shutil.copytree(logdir / "exp" / "naive", logdir / "exp" / "new")
    client = plugin_client(logdir, relist_min_s=0)
    get_json(client, f"{BASE}/runs")
    assert get_json(client, f"{BASE}/summary?run=exp/new")["workers"]


def test_views_run_as_cached_jobs(logdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: Counter[str] = Counter()
    gate = threading.Event()
    real = views.timeline

    def timeline(analysis: Any, **kwargs: Any) -> Any:
        calls["timeline"] += 1
        gate.wait(30)
        return real(analysis, **kwargs)

    monkeypatch.setattr(views, "timeline", timeline)
    client = plugin_client(logdir, wait_s=0.05)
    get_json(client, f"{BASE}/summary?run=exp/naive")  # parsed: the view's own job is what waits
    waiting = [client.get(f"{BASE}/timeline?run=exp/naive") for _ in range(3)]
    assert [r.status_code for r in waiting] == [202, 202, 202]
    assert get_json(client, f"{BASE}/runs")["runs"]  # the request threads are free meanwhile
    gate.set()
    first = get_json(client, f"{BASE}/timeline?run=exp/naive")
    again = get_json(client, f"{BASE}/timeline?run=exp/naive")
    assert first == again and first["events"]["name"]
    assert calls["timeline"] == 1
    assert get(client, f"{BASE}/timeline?run=exp/naive&step=999").status_code == 404


def test_bad_view_arguments(logdir: Path) -> None:
    client = plugin_client(logdir)
    get_json(client, f"{BASE}/summary?run=exp/naive")
    assert get(client, f"{BASE}/drilldown?run=exp/naive&layer=-1").status_code == 400
    assert get(client, f"{BASE}/drilldown?run=exp/naive&layer=0").status_code == 200


def test_a_trace_that_grew_is_sent_whole(logdir: Path) -> None:
    client = plugin_client(logdir)
    get_json(client, f"{BASE}/runs")
    path = _trace(logdir, "exp/naive")
    with path.open("ab") as f:
        f.write(b" " * 1000)
    response = get(client, f"{BASE}/trace?run=exp/naive&file={quote(path.name)}")
    assert response.status_code == 200
    assert response.data == path.read_bytes()
    assert int(response.headers["Content-Length"]) == path.stat().st_size


def test_a_truncated_trace_with_a_future_mtime_is_an_error_not_loading(logdir: Path) -> None:
    partial = logdir / "exp" / "partial"
    partial.mkdir()
    path = partial / "w.1.pt.trace.json"
    path.write_text('{\n  "traceEvents": [\n  {\n    "ph": "X"')
    future = time.time() + 10 * 86400
    os.utime(path, (future, future))
    client = plugin_client(logdir)
    get_json(client, f"{BASE}/summary?run=exp/partial")
    runs = {r["run"]: r for r in get_json(client, f"{BASE}/runs")["runs"]}
    assert runs["exp/partial"]["status"] == "error"


def test_a_whole_trace_followed_by_junk_is_read_not_loading(logdir: Path) -> None:
    """Zeros and a log line after a whole trace (issue 34) made it "truncated", which the tab shows
    as a trace still being written ("loading", for a minute): it is read, the junk is a note."""
    path = _trace(logdir, "exp/naive")
    with path.open("ab") as f:
        f.write(b"\x00" * 100 + b"\nINFO: profiling done\n")
    client = plugin_client(logdir)
    body = get_json(client, f"{BASE}/summary?run=exp/naive")
    assert body["errors"] == [] and body["workers"]
    notes = {k: n for w in body["workers"] for k, n in w["diagnostics"].items() if "after the end" in k}
    assert list(notes.values()) == [len(b"\x00" * 100 + b"\nINFO: profiling done")]
    runs = {r["run"]: r for r in get_json(client, f"{BASE}/runs")["runs"]}
    assert runs["exp/naive"]["status"] == "ready"
