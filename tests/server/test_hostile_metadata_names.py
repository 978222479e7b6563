"""Issue 48 (part B): run metadata, names and the summary cache, written by anyone.

Each case here failed before its fix: metadata nested 500 levels deep (the CLI's JSON raised
RecursionError and printed nothing) and 5,000 deep (ignored whole); ``/metadata`` parsing its file
again on every request; a file name with the byte 0xFF and one with the text ``\\xff`` shown as
one worker; a hard-linked metadata file served whatever its other name holds. The summary cache's
case (a directory at one entry's path) is in ``tests/engine/test_summary_cache_trust.py``.
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from pathlib import Path
from urllib.parse import quote

import pytest
from helpers import HAND_TRACES
from webtools import BASE, get, get_json, plugin_client

import tb_attn
from tb_attn_plugin.cli.main import main
from tb_attn_plugin.engine import metadata as metadata_module
from tb_attn_plugin.engine.metadata import MAX_DEPTH

TRACE = HAND_TRACES / "flops.json"


def _nested(depth: int) -> str:
    """Metadata whose ``config`` opens ``depth`` - 1 arrays: ``depth`` levels with the object."""
    return '{"model": "m", "config": ' + "[" * (depth - 1) + "]" * (depth - 1) + "}"


def _depth(value: object) -> int:
    """How many levels of objects and arrays ``value`` nests (walked without recursion)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            stack.extend((v, level + 1) for v in (item.values() if isinstance(item, dict) else item))
    return deepest


@pytest.fixture
def logdir(tmp_path: Path) -> Path:
    run = tmp_path / "logs" / "r"
    run.mkdir(parents=True)
    shutil.copy(TRACE, run / "w.1.pt.trace.json")
    return tmp_path / "logs"


@pytest.mark.parametrize("depth", [500, 5000])
def test_deep_metadata_is_cut_where_it_is_read_for_every_door(logdir: Path, depth: int,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    (logdir / "r" / "tb_attn_run.json").write_text(_nested(depth))
    note = f"nested {depth} levels deep: values below level {MAX_DEPTH} are cut to null"

    assert main(["summarize", str(logdir), "--format", "json", "--no-progress"]) == 0
    out, err = capsys.readouterr()
    (meta,) = [r["metadata"] for r in json.loads(out)["runs"]]
    assert meta["model"] == "m" and _depth(meta) == MAX_DEPTH
    assert err.count("\n") == 1 and note in err and err.startswith("tb-attn: warning: ")

    assert main(["summarize", str(logdir), "--no-progress"]) == 0  # the table
    table, err = capsys.readouterr()
    assert "run r" in table and note in err

    client = plugin_client(logdir)
    body = get_json(client, f"{BASE}/metadata?run=r")
    assert _depth(body["metadata"]) == MAX_DEPTH and body["note"].endswith(note)
    summary = get_json(client, f"{BASE}/summary?run=r")
    assert summary["workers"] and _depth(summary["metadata"]) == MAX_DEPTH
    (entry,) = get_json(client, f"{BASE}/runs")["runs"]
    assert entry["info"]["model"] == "m"

    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        loaded = tb_attn.load(str(logdir), progress=False)
    assert [str(w.message) for w in said if note in str(w.message)]
    assert loaded.to_json() == out  # byte for byte the CLI's, from the one encoder


def test_metadata_at_the_bound_is_kept_whole(logdir: Path) -> None:
    (logdir / "r" / "tb_attn_run.json").write_text(_nested(MAX_DEPTH))
    body = get_json(plugin_client(logdir), f"{BASE}/metadata?run=r")
    assert body["metadata"] == json.loads(_nested(MAX_DEPTH)) and body["note"] is None


def test_metadata_is_parsed_once_per_file_version(logdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    meta = logdir / "r" / "tb_attn_run.json"
    meta.write_text(json.dumps({"model": "m", "rows": [{"k": i, "v": "x" * 8} for i in range(20_000)]}))
    parses: list[int] = []
    real = metadata_module.parse_metadata
    monkeypatch.setattr(metadata_module, "parse_metadata", lambda raw: parses.append(len(raw)) or real(raw))
    client = plugin_client(logdir, scan_ttl_s=0.0, relist_min_s=0.0)  # every request lists
    first = get(client, f"{BASE}/metadata?run=r").data
    before = len(parses)
    assert all(get(client, f"{BASE}/metadata?run=r").data == first for _ in range(5))
    assert len(parses) == before  # served from the cache, not parsed again
    meta.write_text(json.dumps({"model": "n"}))  # a new version: read again
    os.utime(meta, (1e9, 1e9))
    assert json.loads(get(client, f"{BASE}/metadata?run=r").data)["metadata"] == {"model": "n"}


def test_hard_linked_metadata_is_refused_and_the_run_loads(logdir: Path, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    secret = tmp_path / "outside.json"
    secret.write_text('{"secret": "do not serve"}')
    os.link(secret, logdir / "r" / "tb_attn_run.json")
    client = plugin_client(logdir)
    body = get_json(client, f"{BASE}/metadata?run=r")
    assert body["metadata"] is None and "2 hard links" in body["note"]
    (entry,) = get_json(client, f"{BASE}/runs")["runs"]
    assert entry["info"] is None
    summary = get_json(client, f"{BASE}/summary?run=r")
    assert summary["metadata"] is None and summary["workers"]
    assert "do not serve" not in json.dumps(summary)

    assert main(["summarize", str(logdir), "--format", "json", "--no-progress"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["runs"][0]["metadata"] is None and "do not serve" not in out
    assert err.count("\n") == 1 and "2 hard links" in err


def test_a_hard_linked_trace_is_summarized_but_not_sent_whole(logdir: Path, tmp_path: Path) -> None:
    """A trace's content is served as it is only by ``/trace``: that download is refused; its
    summary (figures, clipped names) is read as any trace's."""
    trace = logdir / "r" / "w.1.pt.trace.json"
    os.link(trace, tmp_path / "elsewhere.json")
    client = plugin_client(logdir)
    assert get_json(client, f"{BASE}/summary?run=r")["workers"]
    response = get(client, f"{BASE}/trace?run=r&file={quote(trace.name)}")
    assert response.status_code == 404 and b"hard links" in response.data


def test_a_byte_and_its_escaped_text_are_two_names_every_route_resolves(tmp_path: Path) -> None:
    """The byte 0xFF and the four characters ``\\xff``, in a worker's file name and in a run's
    directory: both listed, under two names, and each route picks the one asked for."""
    logdir = tmp_path / "logs"
    raw = os.fsencode(logdir)
    for run in (b"/team/r\xff", b"/team/r\\xff"):
        os.makedirs(raw + run)
        shutil.copy(TRACE, os.fsdecode(raw + run + b"/w.1.pt.trace.json"))
    both = raw + b"/team/both"
    os.makedirs(both)
    shutil.copy(HAND_TRACES / "memory.json", os.fsdecode(both + b"/r\xff.1.pt.trace.json"))
    shutil.copy(TRACE, os.fsdecode(both + b"/r\\xff.1.pt.trace.json"))
    client = plugin_client(logdir)
    runs = {r["run"]: r for r in get_json(client, f"{BASE}/runs")["runs"]}
    assert set(runs) == {"team/both", "team/r\\xff", "team/r\\\\xff"}
    assert [w["worker"] for w in runs["team/both"]["workers"]] == ["r\\\\xff", "r\\xff"]
    for name in ("team/r\\xff", "team/r\\\\xff"):
        assert get_json(client, f"{BASE}/summary?run={quote(name)}")["run"] == name
    files = {}
    for worker in ("r\\xff", "r\\\\xff"):
        summary = get_json(client, f"{BASE}/summary?run=team/both&worker={quote(worker)}")
        (one,) = summary["workers"]
        files[worker] = one["file"]
        for view in ("memory", "timeline"):
            response = get(client, f"{BASE}/{view}?run=team/both&worker={quote(worker)}")
            assert response.status_code == 200, (view, worker, response.data[:200])
        download = get(client, f"{BASE}/trace?run=team/both&file={quote(one['file'])}")
        source = HAND_TRACES / ("memory.json" if worker == "r\\xff" else "flops.json")
        assert download.status_code == 200 and download.data == source.read_bytes()
    assert files == {"r\\xff": "r\\xff.1.pt.trace.json", "r\\\\xff": "r\\\\xff.1.pt.trace.json"}
    memory = [get_json(client, f"{BASE}/memory?run=team/both&worker={quote(w)}") for w in files]
    assert memory[0] != memory[1]


def test_the_cli_names_both_runs_apart(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    raw = os.fsencode(tmp_path)
    for run in (b"/r\xff", b"/r\\xff"):
        os.makedirs(raw + run)
        shutil.copy(TRACE, os.fsdecode(raw + run + b"/w.1.pt.trace.json"))
    assert main(["summarize", str(tmp_path), "--format", "json", "--no-progress"]) == 0
    assert [r["run"] for r in json.loads(capsys.readouterr().out)["runs"]] == ["r\\\\xff", "r\\xff"]
    assert main(["summarize", str(tmp_path), "--run", "r\\\\xff", "--format", "json", "--no-progress"]) == 0
    assert [r["run"] for r in json.loads(capsys.readouterr().out)["runs"]] == ["r\\\\xff"]
