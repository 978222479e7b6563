"""The S3 server stops: mid-response, or between listing and reading. The tab and the CLI say so
clearly (no traceback, no HTTP 500), do not remember it as the trace's fault, load the same run
once the server is back, and never write to the bucket (``s3_watched`` checks ETags and requests)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from remotetools import URL, LocalS3, client_of
from webtools import BASE, get, get_json

CUT_AFTER_BYTES = 256 << 10  # each trace is about 2 MB: the server dies a tenth of the way in


def _trace_name(local_runs: Path, run: str) -> str:
    (trace,) = (local_runs / run).glob("*.pt.trace.json*")
    return trace.name


def _cli(*args: str, timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tb_attn_plugin.cli", *args], capture_output=True, text=True,
                          timeout=timeout_s, env=os.environ.copy())


def test_server_stopped_mid_read_then_back(s3_watched: LocalS3, local_runs: Path) -> None:
    client, service = client_of(URL)
    service.engine._files.read_retry_s = 0.0  # retry at once when the server is back (default: after 10 s)
    local, _ = client_of(str(local_runs))
    assert len(get_json(client, f"{BASE}/runs")["runs"]) == 3

    s3_watched.proxy.stop_after(CUT_AFTER_BYTES)
    started = time.monotonic()
    summary = get_json(client, f"{BASE}/summary?run=exp/naive")
    assert s3_watched.proxy.tripped.is_set() and not s3_watched.proxy.running
    assert time.monotonic() - started < 10
    assert summary["workers"] == []
    (error,) = [e["error"] for e in summary["errors"]]
    name = _trace_name(local_runs, "exp/naive")
    assert error.startswith(f"reading {URL}/exp/naive/{name} failed: ") or \
        error.startswith(f"cannot read {URL}/exp/naive/{name}: "), error
    assert "Traceback" not in error
    drill = get(client, f"{BASE}/drilldown?run=exp/naive&layer=1")
    assert drill.status_code == 404 and "cannot read" in drill.get_data(as_text=True)
    status = {r["run"]: r for r in get_json(client, f"{BASE}/runs")["runs"]}["exp/naive"]["status"]
    assert status in ("unloaded", "error")

    s3_watched.proxy.start()  # the same server (and bucket) on the same port
    again = get_json(client, f"{BASE}/summary?run=exp/naive")
    assert again["errors"] == []
    assert again == get_json(local, f"{BASE}/summary?run=exp/naive")
    assert get_json(client, f"{BASE}/drilldown?run=exp/naive&layer=1")["trace_file"] == name


def test_server_down_between_listing_and_reading(s3_watched: LocalS3, local_runs: Path) -> None:
    client, service = client_of(URL)
    service.engine._files.read_retry_s = 0.0
    body = get_json(client, f"{BASE}/runs")
    assert {r["run"] for r in body["runs"]} == {"exp/naive", "exp/sdpa", "exp/sdpa-math"}

    s3_watched.proxy.stop()
    summary = get_json(client, f"{BASE}/summary?run=exp/sdpa-math")
    (error,) = [e["error"] for e in summary["errors"]]
    assert error.startswith(f"cannot read {URL}/exp/sdpa-math/") and "Could not connect" in error, error
    compare = get(client, f"{BASE}/compare?runs=exp/naive,exp/sdpa")
    assert compare.status_code < 500
    assert get(client, f"{BASE}/runs?refresh=1").status_code == 200

    s3_watched.proxy.start()
    again = get_json(client, f"{BASE}/summary?run=exp/sdpa-math")
    assert again["errors"] == [] and len(again["workers"]) == 1
    assert {r["run"] for r in get_json(client, f"{BASE}/runs?refresh=1")["runs"]} == \
        {"exp/naive", "exp/sdpa", "exp/sdpa-math"}


def test_trace_download_with_the_server_down_is_not_a_500(s3_watched: LocalS3, local_runs: Path) -> None:
    client, _ = client_of(URL)
    get_json(client, f"{BASE}/runs")
    s3_watched.proxy.stop()
    name = _trace_name(local_runs, "exp/naive")
    try:
        response = client.get(f"{BASE}/trace?run=exp/naive&file={name}")
    except Exception as exc:  # the test client re-raises what the app did not handle
        pytest.fail(f"unhandled: {exc!r}")
    assert response.status_code in (404, 503), response.status_code


def test_runs_survive_a_failed_listing(s3_watched: LocalS3) -> None:
    client, service = client_of(URL)
    assert len(get_json(client, f"{BASE}/runs")["runs"]) == 3
    s3_watched.proxy.stop()
    body = get_json(client, f"{BASE}/runs?refresh=1")
    assert len(body["runs"]) == 3  # the last listing, not "no runs": nothing was deleted
    assert service.has_traces()  # nor does the tab turn inactive


def test_cli_server_stopped_mid_read_then_back(s3_watched: LocalS3, local_runs: Path) -> None:
    s3_watched.proxy.stop_after(CUT_AFTER_BYTES)
    failed = _cli("summarize", URL, "--run", "exp/naive", "--format", "json")
    assert s3_watched.proxy.tripped.is_set()
    assert failed.returncode == 1
    (line,) = failed.stderr.splitlines()
    name = _trace_name(local_runs, "exp/naive")
    assert line.startswith(f"tb-attn: exp/naive/{name}: ") and f"{URL}/exp/naive/{name}" in line, line
    assert json.loads(failed.stdout)["runs"][0]["workers"] == []

    s3_watched.proxy.start()
    ok = _cli("summarize", URL, "--run", "exp/naive", "--format", "json")
    assert ok.returncode == 0 and ok.stderr == ""
    local = _cli("summarize", str(local_runs), "--run", "exp/naive", "--format", "json")
    assert json.loads(ok.stdout) == json.loads(local.stdout)


def test_cli_with_the_server_down_is_one_line(s3_watched: LocalS3) -> None:
    s3_watched.proxy.stop()
    started = time.monotonic()
    proc = _cli("summarize", URL)
    assert time.monotonic() - started < 30
    assert proc.returncode == 2 and proc.stdout == ""  # as docs/remote.md says
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"tb-attn: error: cannot list {URL}: Could not connect to the endpoint URL"), line
