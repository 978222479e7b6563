"""Faults while traces are read: a file deleted or truncated while it loads, and traces cut at
many byte offsets, through the loader and through the tab's routes.

What must hold: each fault ends in a clear, one-line error (in a summary's ``errors``, or a 4xx
answer; never a 500, never a traceback); nothing partial is ever summarized as a complete
trace; and a storage failure (``ReadError``) is not remembered as the file's fault, so the file
loads once it is back.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import profile_run
from tensorboard.backend import application
from tensorboard.plugins import base_plugin
from webtools import BASE, get
from werkzeug.test import Client

from tb_attn_plugin.engine.loader import Loader, load_events, resolve_runs
from tb_attn_plugin.server.plugin import AttentionPlugin
from tb_attn_plugin.server.service import Service
from tb_attn_plugin.trace import io
from tb_attn_plugin.trace.discover import TraceFile
from tb_attn_plugin.trace.events import ReadError, TraceError

NAME = "w.1700000000000000000.pt.trace.json"
HOUR_AGO = time.time() - 3600  # older than the window in which a truncated file reads as "still written"


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A trace written by our runner (built-in transformer, naive attention), as bytes."""
    result = profile_run(tmp_path_factory.mktemp("source"), "naive", impl="naive")
    assert result.status == "ok"
    (path,) = result.traces
    return path.read_bytes()


def cut_offsets(data: bytes) -> dict[str, int]:
    """30 places to cut a Kineto trace: inside strings, numbers, keys and the trailer, at and
    around event boundaries, and evenly spread through the file."""
    n = len(data)
    mid = n // 2
    ts = data.index(b'"ts": ', mid) + len(b'"ts": ')
    name = data.index(b'"name": "', mid) + len(b'"name": "')
    end_of_event = data.index(b"\n  },", mid) + len(b"\n  }")
    events_end = data.rindex(b"]")
    trace_name = data.rindex(b'"traceName"')
    offsets = {
        "first byte": 1,
        "inside the first key": 4,
        "after the header": data.index(b'"traceEvents": [') + len(b'"traceEvents": ['),
        "inside a number": ts + 3,
        "after a number": data.index(b",", ts),
        "inside a string": name + 4,
        "after a string": data.index(b'"', name) + 1,
        "inside an args key": data.index(b'"Input Dims"', mid) + 5,
        "inside an array": data.index(b"[[", mid) + 3 if b"[[" in data[mid:] else mid + 7,
        "before an event's brace": end_of_event - 1,
        "after an event's brace": end_of_event,
        "after an event's comma": end_of_event + 1,
        "before the next event": end_of_event + 4,
        "before the closing bracket": events_end,
        "after the closing bracket": events_end + 1,
        "after the comma before traceName": events_end + 2,
        "inside traceName": trace_name + 5,
        "inside the trace name's path": trace_name + len(b'"traceName": "') + 3,
        "before the closing brace": n - 1,
        "before the closing brace and its space": n - 2,
    }
    for i in range(1, 11):
        offsets[f"{i}/11 of the file"] = n * i // 11
    assert len(offsets) == 30 and all(0 < o < n for o in offsets.values()), offsets
    return offsets


def _trace_file(path: Path) -> TraceFile:
    (run,) = resolve_runs(str(path))
    (trace_file,) = run.files
    return trace_file


def _assert_one_clear_line(message: str) -> None:
    assert message and "\n" not in message and "Traceback" not in message, message


def test_a_cut_trace_is_never_decoded_as_complete(tmp_path: Path, trace: bytes) -> None:
    for what, offset in cut_offsets(trace).items():
        path = tmp_path / f"{offset}.{NAME}"
        path.write_bytes(trace[:offset])
        with pytest.raises(TraceError) as caught:
            Loader().summarize_file(_trace_file(path))
        _assert_one_clear_line(str(caught.value))
        with pytest.raises(TraceError):
            load_events(str(path), parallel=False)
        assert what  # (the name says where, in a failure's traceback)


def test_a_cut_gzip_trace_is_never_decoded_as_complete(tmp_path: Path, trace: bytes) -> None:
    packed = gzip.compress(trace, compresslevel=1)
    n = len(packed)
    for offset in (1, 2, 9, 10, 11, 100, n // 3, n // 2, n - 9, n - 8, n - 4, n - 1):
        path = tmp_path / f"{offset}.{NAME}.gz"
        path.write_bytes(packed[:offset])
        with pytest.raises(TraceError) as caught:
            Loader().summarize_file(_trace_file(path))
        _assert_one_clear_line(str(caught.value))


def _client(logdir: Path, **options: Any) -> tuple[Client, Service]:
    plugin = AttentionPlugin(base_plugin.TBContext(logdir=str(logdir)))
    service = Service(str(logdir), scan_ttl_s=0, **options)
    plugin._service = service
    return Client(application.TensorBoardWSGI([plugin])), service


def _json(response: Any) -> Any:
    return json.loads(response.get_data())


def _summary_error(client: Client, run: str) -> str:
    """The one error of the run's summary, which must hold no worker."""
    response = get(client, f"{BASE}/summary?run={run}")
    assert response.status_code == 200, (response.status_code, response.get_data(as_text=True)[:500])
    body = _json(response)
    assert body["workers"] == [], f"{run}: a part of a trace was summarized"
    (error,) = body["errors"]
    _assert_one_clear_line(error["error"])
    return str(error["error"])


def test_cut_traces_through_the_routes(tmp_path: Path, trace: bytes) -> None:
    offsets = cut_offsets(trace)
    good = tmp_path / "good"
    good.mkdir()
    (good / NAME).write_bytes(trace)
    for i, offset in enumerate(offsets.values()):
        run = tmp_path / "cut" / f"{i:02d}"
        run.mkdir(parents=True)
        (run / NAME).write_bytes(trace[:offset])
        os.utime(run / NAME, (HOUR_AGO, HOUR_AGO))
    client, _ = _client(tmp_path, wait_s=0.2)
    names = [f"cut/{i:02d}" for i in range(len(offsets))]
    for name in names:
        _summary_error(client, name)
    statuses = {r["run"]: r for r in _json(client.get(f"{BASE}/runs"))["runs"]}
    for name in names:
        assert statuses[name]["status"] == "error", statuses[name]
        _assert_one_clear_line(statuses[name]["error"])
    for name in names[::5]:
        for route in (f"drilldown?run={name}&layer=0", f"memory?run={name}", f"timeline?run={name}",
                      f"compare?runs=good,{name}", f"scaling?runs=good,{name}"):
            response = get(client, f"{BASE}/{route}")
            text = response.get_data(as_text=True)
            assert response.status_code < 500 and "Traceback" not in text, (route, response.status_code, text[:500])
            if response.status_code >= 400:
                assert NAME in text or name in text, (route, text[:300])
            elif route.startswith("compare"):
                assert name in [e["run"] for e in _json(response)["errors"]], text[-500:]
    assert _json(get(client, f"{BASE}/summary?run=good"))["errors"] == []


def _restore(path: Path, data: bytes, *, times: tuple[float, float] | None = None) -> None:
    tmp = path.with_name("." + path.name)
    tmp.write_bytes(data)
    if times is not None:
        os.utime(tmp, times)
    os.replace(tmp, path)


def test_deleted_after_listing_is_a_read_error_and_loads_when_back(tmp_path: Path, trace: bytes) -> None:
    """The run is listed, its trace is deleted before the tab reads it, then put back."""
    (tmp_path / "r").mkdir()
    path = tmp_path / "r" / NAME
    path.write_bytes(trace)
    stat = path.stat()
    client, service = _client(tmp_path, wait_s=0.5)
    service.registry.scan_ttl_s = 3600  # the listing made now is the one the reads below use
    assert [r["run"] for r in _json(client.get(f"{BASE}/runs?refresh=1"))["runs"]] == ["r"]
    path.unlink()
    error = _summary_error(client, "r")
    assert "cannot read" in error and "No such file" in error, error
    response = get(client, f"{BASE}/memory?run=r")
    assert response.status_code == 404 and "No such file" in response.get_data(as_text=True)
    # Back as it was (same size and time, as a restore from a backup would): read again once the
    # storage error's short memory has passed.
    service.engine._files.read_retry_s = 0.2
    _restore(path, trace, times=(stat.st_atime, stat.st_mtime))
    time.sleep(0.3)
    body = _json(get(client, f"{BASE}/summary?run=r"))
    assert body["errors"] == [] and len(body["workers"]) == 1


def _ranged_reader(after_first: Callable[[str], None]) -> Callable[..., Iterator[bytes]]:
    """``io.read_chunks`` as an object store reads: each chunk is its own request (a new open),
    and ``after_first`` runs once the first chunk is out."""

    def read_chunks(path: str, *, chunk_bytes: int = io.CHUNK_BYTES, max_bytes: int | None = None) -> Iterator[bytes]:
        offset = 0
        while True:
            try:
                with open(path, "rb") as f:
                    f.seek(offset)
                    chunk = f.read(64 << 10)
            except OSError as exc:
                raise ReadError(f"cannot read {path}: {exc.strerror}") from None
            if not chunk:
                return
            yield chunk
            if offset == 0:
                after_first(path)
            offset += len(chunk)

    return read_chunks


def test_deleted_while_it_loads_is_a_read_error_not_the_files_fault(
        tmp_path: Path, trace: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "r").mkdir()
    path = tmp_path / "r" / NAME
    path.write_bytes(trace)
    stat = path.stat()
    monkeypatch.setattr(io, "read_chunks", _ranged_reader(lambda p: os.unlink(p)))
    client, service = _client(tmp_path, wait_s=0.5)
    service.registry.scan_ttl_s = 3600
    client.get(f"{BASE}/runs?refresh=1")
    error = _summary_error(client, "r")
    assert "cannot read" in error and "truncated" not in error, error  # the storage failed, not the trace
    monkeypatch.undo()
    service.engine._files.read_retry_s = 0.2
    _restore(path, trace, times=(stat.st_atime, stat.st_mtime))
    time.sleep(0.3)
    body = _json(get(client, f"{BASE}/summary?run=r"))
    assert body["errors"] == [] and len(body["workers"]) == 1


@pytest.mark.parametrize("packed", [False, True], ids=["plain", "gzip"])
def test_truncated_while_it_loads_is_an_error_never_a_partial_summary(
        tmp_path: Path, trace: bytes, monkeypatch: pytest.MonkeyPatch, packed: bool) -> None:
    """The file shrinks to half its size while the (real) reader is in the middle of it."""
    data = gzip.compress(trace, compresslevel=1) if packed else trace
    name = NAME + (".gz" if packed else "")
    (tmp_path / "r").mkdir()
    path = tmp_path / "r" / name
    path.write_bytes(data)
    real = io.read_chunks
    shrunk: list[int] = []

    def read_chunks(p: str, *, chunk_bytes: int = io.CHUNK_BYTES, max_bytes: int | None = None) -> Iterator[bytes]:
        for i, chunk in enumerate(real(p, chunk_bytes=16 << 10, max_bytes=max_bytes)):
            yield chunk
            if i == 0:
                os.truncate(p, len(data) // 2)
                shrunk.append(os.path.getsize(p))

    monkeypatch.setattr(io, "read_chunks", read_chunks)
    client, service = _client(tmp_path, wait_s=0.5)
    service.registry.scan_ttl_s = 3600
    client.get(f"{BASE}/runs?refresh=1")
    error = _summary_error(client, "r")
    assert shrunk == [len(data) // 2]
    assert "truncated" in error, error
    for route in ("memory?run=r", "timeline?run=r", "drilldown?run=r&layer=0"):
        response = get(client, f"{BASE}/{route}")
        assert response.status_code == 404 and "truncated" in response.get_data(as_text=True), route
    # The writer puts the whole trace back (a new version): it is read whole.
    monkeypatch.undo()
    _restore(path, data)
    service.registry.scan_ttl_s = 0
    body = _json(get(client, f"{BASE}/summary?run=r"))
    assert body["errors"] == [] and len(body["workers"]) == 1
    assert body["workers"][0]["layers"]


# The several-process decoder (the CLI, large local traces) with a file that shrinks between the
# child's read of the second half and the parent's read of the first: the parent's read ends early
# at an event boundary. Runs in its own process: it forks.
_SHRINK_DURING_TWO_PROCESS_DECODE = """
import os, sys, time
from tb_attn_plugin.trace import io, parallel
from tb_attn_plugin.trace.events import TraceError

path, marker = sys.argv[1], sys.argv[1] + ".child-done"
data = open(path, "rb").read()
real, parent = io.read_range, os.getpid()

def read_range(p, start, end, **kwargs):
    if os.getpid() != parent:  # the child: its whole half, then tell the parent
        got = b"".join(real(p, start, end, **kwargs))
        open(marker, "w").close()
        yield got
        return
    if start == 0:  # the parent's half: the file shrinks to an event boundary first
        deadline = time.monotonic() + 30
        while not os.path.exists(marker) and time.monotonic() < deadline:
            time.sleep(0.01)
        os.truncate(p, data.rindex(b"\\n  {", 0, end // 2))
    yield from real(p, start, end, **kwargs)

io.read_range = read_range
try:
    events = parallel.decode_in_parts(path, len(data), 2)
except TraceError as exc:
    print("error:", exc)
else:
    print("fallback" if events is None else f"decoded {len(events.name)} events")
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_file_that_shrinks_during_a_decode_in_parts_is_not_decoded(tmp_path: Path, trace: bytes) -> None:
    path = tmp_path / NAME
    path.write_bytes(trace)
    proc = subprocess.run([sys.executable, "-c", _SHRINK_DURING_TWO_PROCESS_DECODE, str(path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    outcome = proc.stdout.strip()
    # An error, or a fallback to one process (which then reads the shrunk file and reports it).
    assert outcome.startswith(("error:", "fallback")), outcome


def test_the_source_trace_is_whole(tmp_path: Path, trace: bytes) -> None:
    """The control: the uncut trace decodes, in one process and through the loader."""
    path = tmp_path / NAME
    path.write_bytes(trace)
    assert len(load_events(str(path), parallel=False).name) > 100
    assert Loader().summarize_file(_trace_file(path)).layers
    shutil.rmtree(tmp_path)
