"""The plugin's routes through TensorBoard's WSGI app, with werkzeug's test client."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from importlib.metadata import entry_points
from pathlib import Path

import pytest
from helpers import accelerate_run
from tensorboard.plugins import base_plugin
from tracetools import trace_files
from webtools import BASE, get, get_json, plugin_client
from werkzeug.test import Client

from tb_attn_plugin.server.plugin import STATIC_DIR, AttentionPlugin


@pytest.fixture
def logdir(tmp_path: Path, builtin_logdir: Path) -> Path:
    for run in ("naive", "sdpa", "naive-per-head"):
        shutil.copytree(builtin_logdir / run, tmp_path / "exp" / run)
    return tmp_path


def _client(logdir: Path, path_prefix: str = "") -> Client:
    return plugin_client(logdir, path_prefix=path_prefix)


_get = get_json


def test_entry_point_and_frontend_metadata() -> None:
    names = {ep.name: ep.value for ep in entry_points(group="tensorboard_plugins")}
    assert names.get("tb_attn") == "tb_attn_plugin.server.plugin:AttentionLoader"
    meta = AttentionPlugin(base_plugin.TBContext(logdir="x")).frontend_metadata()
    assert meta.tab_name == "Attention" and meta.es_module_path == "/index.js"


def test_importing_the_plugin_is_light() -> None:
    code = ("import sys, tb_attn_plugin.server.plugin; print(sorted(m for m in ('msgspec', "
            "'tb_attn_plugin.server.service', 'tb_attn_plugin.analysis.summary') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"


def test_runs_listing(logdir: Path) -> None:
    body = _get(_client(logdir), f"{BASE}/runs")
    assert body["schema"] == "tb-attn.runs/2"
    runs = {r["run"]: r for r in body["runs"]}
    assert set(runs) == {"exp/naive", "exp/sdpa", "exp/naive-per-head"}
    naive = runs["exp/naive"]
    assert naive["group"] == "exp" and naive["status"] == "unloaded"
    assert naive["info"]["impl"] == "naive" and naive["info"]["status"] == "ok" and naive["info"]["seq"] == 16
    (worker,) = naive["workers"]
    assert len(worker["spans"]) == 1 and worker["spans"][0]["file"].endswith(".pt.trace.json")


def test_summary_then_status_ready(logdir: Path) -> None:
    client = _client(logdir)
    body = _get(client, f"{BASE}/summary?run=exp/naive")
    assert body["schema"] == "tb-attn.summary/1" and body["workers"][0]["backend"] == "naive"
    assert [layer["layer"] for layer in body["workers"][0]["layers"]] == [0, 1]
    runs = {r["run"]: r for r in _get(client, f"{BASE}/runs")["runs"]}
    assert runs["exp/naive"]["status"] == "ready"


def test_drilldown_memory_timeline_and_download(logdir: Path) -> None:
    client = _client(logdir)
    q = "run=exp/naive"
    drill = _get(client, f"{BASE}/drilldown?{q}&layer=1&phase=softmax")
    assert drill["ops"][0]["name"] == "aten::softmax" and drill["ops"][0]["calls"] == 1.0
    assert drill["download"].startswith("./trace?")
    back = _get(client, f"{BASE}/drilldown?{q}&layer=1&phase=softmax&backward=1")
    assert any(op["name"] == "SoftmaxBackward0" for op in back["ops"])
    memory = _get(client, f"{BASE}/memory?{q}")
    assert memory["points"] and memory["peaks"] and {p["layer"] for p in memory["peaks"]} == {0, 1}
    assert all(memory["start_us"] <= s["start_us"] <= memory["end_us"] for s in memory["scopes"])
    assert [b["layers"] for b in memory["backward"]] == [[1], [0]]  # training: backward, last layer first
    assert memory["peak"]["allocated_bytes"] == max(y for _, y in memory["points"])
    timeline = _get(client, f"{BASE}/timeline?{q}")
    ev = timeline["events"]
    assert len(ev["start_us"]) == len(ev["name"]) == len(ev["layer"]) > 10
    softmax = timeline["names"].index("aten::softmax")
    assert {ev["phase"][i] for i, n in enumerate(ev["name"]) if n == softmax} == {timeline["phases"].index("softmax")}
    short = _get(client, f"{BASE}/timeline?{q}&limit=5")
    assert short["truncated"] and len(short["events"]["name"]) == 5
    file = drill["trace_file"]
    response = get(client, f"{BASE}/trace?run=exp/naive&file={file}")
    assert response.status_code == 200 and "attachment" in response.headers["Content-Disposition"]
    assert json.loads(response.get_data())["traceEvents"]


@pytest.mark.parametrize(
    ("url", "status"),
    [
        ("/summary", 400),
        ("/summary?run=nope", 404),
        ("/summary?run=exp/naive&worker=nope", 404),
        ("/drilldown?run=exp/naive", 400),
        ("/drilldown?run=exp/naive&layer=x", 400),
        ("/drilldown?run=exp/naive&layer=9", 404),
        ("/drilldown?run=exp/naive&layer=0&phase=bogus", 404),
        ("/memory?run=exp/naive&step=999", 404),
        ("/memory?run=exp/naive&step=two", 400),
        ("/timeline?run=exp/naive&limit=0", 400),
        ("/timeline?run=exp/naive&start_us=nan", 400),
        ("/trace?run=exp/naive", 400),
    ],
)
def test_bad_arguments_are_4xx_with_a_message(logdir: Path, url: str, status: int) -> None:
    response = get(_client(logdir), BASE + url)
    assert response.status_code == status
    assert response.get_data(as_text=True).strip()


def test_a_link_inside_static_is_not_served(logdir: Path, tmp_path: Path) -> None:
    """The rest of the hostile static paths are in test_security.py; this one needs a link in
    the package's own static directory."""
    link = Path(STATIC_DIR) / "link-out"
    target = tmp_path / "secret.txt"
    target.write_text("secret")
    link.symlink_to(target)
    try:
        response = _client(logdir).get(f"{BASE}/static/link-out")
        assert response.status_code == 404, response.get_data(as_text=True)[:200]
        assert "secret" not in response.get_data(as_text=True)
    finally:
        link.unlink()


def test_index_js_is_served_as_a_module(logdir: Path) -> None:
    if not (Path(STATIC_DIR) / "index.js").exists():
        pytest.fail("tb_attn_plugin/static/index.js is missing: run the frontend build")
    response = _client(logdir).get(f"{BASE}/index.js")
    assert response.status_code == 200 and response.mimetype == "text/javascript"
    assert b"render" in response.get_data()


def test_path_prefix(logdir: Path) -> None:
    body = _get(_client(logdir, path_prefix="/tb"), f"/tb{BASE}/runs")
    assert len(body["runs"]) == 3


def test_new_runs_appear_deleted_runs_disappear_and_broken_ones_explain(logdir: Path, builtin_logdir: Path) -> None:
    client = plugin_client(logdir, relist_min_s=0)  # reloads faster than a person clicks
    assert len(_get(client, f"{BASE}/runs")["runs"]) == 3
    shutil.copytree(builtin_logdir / "sdpa-math", logdir / "exp" / "sdpa-math")
    shutil.rmtree(logdir / "exp" / "sdpa")
    names = {r["run"] for r in _get(client, f"{BASE}/runs?refresh=1")["runs"]}
    assert names == {"exp/naive", "exp/naive-per-head", "exp/sdpa-math"}
    # A trace still being written (incomplete, just modified) shows as loading, not as an error.
    partial = logdir / "exp" / "partial"
    partial.mkdir()
    (partial / "w.1.pt.trace.json").write_text('{\n  "traceEvents": [\n  {\n    "ph": "X"')
    body = _get(client, f"{BASE}/summary?run=exp/partial")
    assert body["workers"] == [] and "truncated" in body["errors"][0]["error"]
    runs = {r["run"]: r for r in _get(client, f"{BASE}/runs?refresh=1")["runs"]}
    assert runs["exp/partial"]["status"] == "loading"
    old = time.time() - 3600
    os.utime(partial / "w.1.pt.trace.json", (old, old))
    _get(client, f"{BASE}/runs?refresh=1")
    _get(client, f"{BASE}/summary?run=exp/partial")
    runs = {r["run"]: r for r in _get(client, f"{BASE}/runs?refresh=1")["runs"]}
    assert runs["exp/partial"]["status"] == "error" and "truncated" in runs["exp/partial"]["error"]


def test_a_rate_limited_refresh_says_when_to_ask_again(logdir: Path, builtin_logdir: Path) -> None:
    """A reload within the forced-listing interval is answered by the last listing; the answer
    says so (``retry_after_s``), and asking again then shows the run written just before."""
    client = plugin_client(logdir, relist_min_s=0.5)
    assert _get(client, f"{BASE}/runs")["retry_after_s"] is None
    shutil.copytree(builtin_logdir / "sdpa-math", logdir / "exp" / "new")
    early = _get(client, f"{BASE}/runs?refresh=1")
    assert "exp/new" not in {r["run"] for r in early["runs"]}
    assert 0 < early["retry_after_s"] <= 0.5
    time.sleep(early["retry_after_s"])
    later = _get(client, f"{BASE}/runs?refresh=1")
    assert later["retry_after_s"] is None and "exp/new" in {r["run"] for r in later["runs"]}
    assert _get(client, f"{BASE}/runs")["retry_after_s"] is None  # only a refresh asks for a new listing


def test_empty_logdir(tmp_path: Path) -> None:
    body = _get(_client(tmp_path / "missing"), f"{BASE}/runs")
    assert body["runs"] == []


def test_several_spans_need_a_choice(logdir: Path) -> None:
    run = logdir / "exp" / "naive"
    (path,) = trace_files(run)
    shutil.copy(path, run / path.name.replace(".pt.trace", "1.pt.trace"))
    client = _client(logdir)
    assert get(client, f"{BASE}/memory?run=exp/naive").status_code == 400
    runs = {r["run"]: r for r in _get(client, f"{BASE}/runs?refresh=1")["runs"]}
    spans = [s["span"] for s in runs["exp/naive"]["workers"][0]["spans"]]
    worker = runs["exp/naive"]["workers"][0]["worker"]
    assert _get(client, f"{BASE}/memory?run=exp/naive&worker={worker}&span={spans[1]}")["points"]


def test_active_only_with_traces(tmp_path: Path, logdir: Path) -> None:
    empty = tmp_path / "empty"
    (empty / "sub").mkdir(parents=True)
    assert not AttentionPlugin(base_plugin.TBContext(logdir=str(empty))).is_active()
    assert AttentionPlugin(base_plugin.TBContext(logdir=str(logdir))).is_active()
    assert not AttentionPlugin(base_plugin.TBContext(logdir="")).is_active()


def test_traces_named_as_accelerate_names_them_are_a_run_of_four_ranks(tmp_path: Path, builtin_logdir: Path) -> None:
    (trace,) = trace_files(builtin_logdir / "naive")
    accelerate_run(tmp_path / "accel", trace)
    (tmp_path / "accel" / "config.json").write_text(json.dumps({"model_type": "gpt2"}))  # no trace
    assert AttentionPlugin(base_plugin.TBContext(logdir=str(tmp_path))).is_active()
    client = _client(tmp_path)
    (run,) = _get(client, f"{BASE}/runs")["runs"]
    assert run["run"] == "accel" and [w["worker"] for w in run["workers"]] == [f"profile_{i}" for i in range(4)]
    assert [w["spans"][0]["file"] for w in run["workers"]] == [f"profile_{i}.json" for i in range(4)]
    summary = _get(client, f"{BASE}/summary?run=accel")
    assert summary["errors"] == [] and [(w["worker"], w["rank"]) for w in summary["workers"]] == [
        (f"profile_{i}", i) for i in range(4)]
    ranks = _get(client, f"{BASE}/ranks?run=accel")
    assert [(r["rank"], r["worker"]) for r in ranks["ranks"]] == [(i, f"profile_{i}") for i in range(4)]
