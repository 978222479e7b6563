"""A logdir of 1,000 runs through the WSGI app: listing, incremental discovery, runs in progress.

Speed is measured by ``bench/many_runs.py``, not asserted here.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from manyruns import many_run, write_many_runs
from webtools import BASE, get_json, plugin_client

from tb_attn_plugin.trace import io

N = 1000


@pytest.fixture(scope="module")
def many_logdir(tmp_path_factory: pytest.TempPathFactory, builtin_logdir: Path) -> Path:
    logdir = tmp_path_factory.mktemp("many-runs")
    write_many_runs(logdir, builtin_logdir / "naive", range(N))
    return logdir


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The paths of every small-file (metadata) read, through ``io.read_small`` or ``io.read_many``."""
    seen: list[str] = []
    read_small, read_many = io.read_small, io.read_many

    def counting_small(path: str, **kw: Any) -> bytes:
        seen.append(path)
        return read_small(path, **kw)

    def counting_many(paths: list[str], **kw: Any) -> dict[str, bytes | Exception]:
        seen.extend(paths)
        return read_many(paths, **kw)  # type: ignore[return-value]

    monkeypatch.setattr(io, "read_small", counting_small)
    monkeypatch.setattr(io, "read_many", counting_many)
    yield seen


def _runs(client: Any, refresh: bool = False) -> dict[str, dict[str, Any]]:
    body = get_json(client, f"{BASE}/runs" + ("?refresh=1" if refresh else ""))
    assert body["schema"] == "tb-attn.runs/2"
    names = [r["run"] for r in body["runs"]]
    assert len(names) == len(set(names)), "a run is listed twice"
    return {r["run"]: r for r in body["runs"]}


def _meta_path(logdir: Path, run: str) -> str:
    return str(logdir / run / "tb_attn_run.json")


#: Runs parsed ahead for the list's figures in these tests: the bound at work on a large logdir.
PREFETCH = 12


def test_thousand_runs_listed_with_their_metadata(many_logdir: Path) -> None:
    runs = _runs(plugin_client(many_logdir, prefetch_files=PREFETCH))
    assert len(runs) == N
    # The traces are hard links of one file, so equally new: the first runs by name are parsed
    # ahead, and no more than the bound.
    ahead = set(sorted(runs)[:PREFETCH])
    for i in range(N):
        want = many_run(i)
        got = runs[want.name]
        assert got["group"] == want.name.rsplit("/", 1)[0]
        meta = got["info"]
        assert (meta["user"], meta["model"], meta["impl"], meta["seq"], meta["status"]) == \
            (want.user, want.model, want.impl, want.seq, want.status), want
        assert len(got["workers"]) == 1 and len(got["workers"][0]["spans"]) == 1
        # In progress: the runner's metadata says so. Otherwise queued to be parsed ahead (or
        # parsed already, while the listing was built), or not parsed at all.
        if want.name in ahead:
            assert got["parsing"] or got["figures"] is not None, got
            assert got["status"] in (("running",) if want.status == "running" else ("loading", "ready")), got
        else:
            assert not got["parsing"] and got["figures"] is None
            assert got["status"] == ("running" if want.status == "running" else "unloaded"), (want, got["status"])
        assert got["error"] is None


def test_a_thousand_runs_list_in_under_a_kilobyte_each(many_logdir: Path) -> None:
    """The runs list carries a few fields of each run's metadata (``RunInfo``), not the file: about
    600 bytes a run (the runner's file is about 3 KB), however many runs there are."""
    response = plugin_client(many_logdir, prefetch_files=0).get(f"{BASE}/runs")
    assert response.status_code == 200
    body = response.get_data()
    assert len(json.loads(body)["runs"]) == N
    assert len(body) < 1000 * N, len(body)


def test_discovery_is_incremental(tmp_path: Path, many_logdir: Path, reads: list[str]) -> None:
    logdir = tmp_path / "logdir"
    shutil.copytree(many_logdir, logdir, copy_function=os.link)
    client = plugin_client(logdir, scan_ttl_s=3600.0, relist_min_s=0)
    before = _runs(client)
    assert len(before) == N
    # The check below means something only if metadata reads are seen at all.
    assert {_meta_path(logdir, n) for n in before} <= set(reads), "metadata was read some other way"

    reads.clear()
    assert _runs(client).keys() == before.keys()  # within the scan TTL: nothing is re-listed or read
    assert reads == []

    added = [many_run(i).name for i in (N, N + 1, N + 2)]
    write_many_runs(logdir, many_logdir / many_run(0).name, [N, N + 1, N + 2])
    deleted = [many_run(5).name, many_run(6).name]
    for name in deleted:
        shutil.rmtree(logdir / name)
    reads.clear()
    after = _runs(client, refresh=True)
    assert after.keys() == (before.keys() - set(deleted)) | set(added)
    assert {after[n]["info"]["user"] for n in added} == {many_run(i).user for i in (N, N + 1, N + 2)}
    # Only the new runs' metadata was read; the 998 old runs' was not.
    assert set(reads) == {_meta_path(logdir, n) for n in added}, sorted(set(reads))[:10]

    reads.clear()
    assert _runs(client, refresh=True).keys() == after.keys()
    assert reads == [], "an unchanged logdir was re-read"


def test_run_in_progress_then_finished(tmp_path: Path, many_logdir: Path, reads: list[str]) -> None:
    logdir = tmp_path / "logdir"
    running = many_run(96)
    assert running.status == "running"
    write_many_runs(logdir, many_logdir / many_run(0).name, [0, 96])
    client = plugin_client(logdir, scan_ttl_s=3600.0, relist_min_s=0)
    runs = _runs(client)
    assert runs[running.name]["status"] == "running"
    assert runs[running.name]["info"]["status"] == "running"
    assert runs[many_run(0).name]["status"] == "unloaded"

    # The runner rewrites its metadata when the run ends: a new mtime, so it is read again.
    path = logdir / running.name / "tb_attn_run.json"
    meta = json.loads(path.read_text())
    meta["status"] = "ok"
    path.write_text(json.dumps(meta))
    later = path.stat().st_mtime + 5
    os.utime(path, (later, later))
    reads.clear()
    runs = _runs(client, refresh=True)
    assert runs[running.name]["info"]["status"] == "ok"
    assert runs[running.name]["status"] == "unloaded"
    assert set(reads) == {str(path)}
