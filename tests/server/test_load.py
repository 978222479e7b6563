"""Load: 20 concurrent clients against a real TensorBoard's Attention routes for a bounded time.

The harness is ``bench/load.py``'s (``devtools.loadgen``), shortened to about 8 s: every client
GETs /runs, /summary, /drilldown, /memory, /timeline and /compare for runs picked at random
(the runner's traces, one run per attention implementation), polling 202 answers as the tab
does. No request may fail, and every route must have answered 200.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from devtools.loadgen import run_load, tb_attn_requests
from devtools.tbserver import TensorBoard

CLIENTS = 20
DURATION_S = 8.0
ROUTES = {"runs", "summary", "drilldown", "memory", "timeline", "compare"}


@pytest.fixture
def logdir(tmp_path: Path, builtin_logdir: Path) -> Path:
    runs = sorted({p.parent for p in builtin_logdir.rglob("*.pt.trace.json")})
    assert len(runs) >= 8, runs
    for run in runs:
        shutil.copytree(run, tmp_path / "load" / run.name)
    return tmp_path


def test_twenty_clients_get_no_error(logdir: Path) -> None:
    with TensorBoard(logdir, only=["tb_attn"]) as tb:
        requests = tb_attn_requests(tb.url)
        assert set(requests) == ROUTES and len(requests["summary"]) >= 8
        result = run_load(tb.url, requests, clients=CLIENTS, duration_s=DURATION_S)
        report = result.report()
        assert result.errors == [], (report["statuses"], result.errors[:5], tb.output(2000))
    assert result.ok_routes == ROUTES, report["statuses"]
    assert report["requests"] >= CLIENTS * len(ROUTES), report["requests"]
    assert set(report["statuses"]) <= {"200", "202"}, report["statuses"]
