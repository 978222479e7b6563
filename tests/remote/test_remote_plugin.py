"""The tab's routes on an ``s3://`` logdir (moto on loopback): the same answers as on a local copy,
listing and caching that spare the object store, and runs that come and go."""

from __future__ import annotations

from pathlib import Path

import pytest
from remotetools import BUCKET, URL, LocalS3, client_of
from webtools import BASE, get, get_json


def _trace_name(local_runs: Path, run: str) -> str:
    (trace,) = (local_runs / run).glob("*.pt.trace.json*")
    return trace.name


def test_runs_listing_reads_metadata_once_in_one_batch(s3_watched: LocalS3, local_runs: Path) -> None:
    client, _ = client_of(URL)
    body = get_json(client, f"{BASE}/runs")
    runs = {r["run"]: r for r in body["runs"]}
    assert set(runs) == {"exp/naive", "exp/sdpa", "exp/sdpa-math"}
    assert body["logdir"] == URL
    for name, run in runs.items():
        assert run["group"] == "exp" and run["status"] == "unloaded"
        assert run["info"]["impl"] == name.split("/")[1]
        ((span,),) = [w["spans"] for w in run["workers"]]
        assert span["file"] == _trace_name(local_runs, name)
        head = s3_watched.client.head_object(Bucket=BUCKET, Key=f"runs/{name}/{span['file']}")
        assert span["size"] == head["ContentLength"]
        assert span["mtime"] == head["LastModified"].timestamp()  # from the listing, no HEAD per file
    assert runs["exp/sdpa-math"]["workers"][0]["spans"][0]["file"].endswith(".pt.trace.json.gz")
    log = s3_watched.proxy
    assert log.count("GET", "tb_attn_run.json") == 3  # each run's metadata, once
    assert log.count("HEAD") == 0

    get_json(client, f"{BASE}/runs")  # within the listing's TTL: nothing is asked of the store
    requests = len(log.requests)
    assert get_json(client, f"{BASE}/runs") == body and len(log.requests) == requests
    refreshed = get_json(client, f"{BASE}/runs?refresh=1")  # listed again; metadata unchanged, not read
    assert refreshed == body
    assert log.count("GET", "list-type=2") >= 2 and log.count("GET", "tb_attn_run.json") == 3


def test_views_equal_the_local_copy_and_the_trace_is_read_once(s3_watched: LocalS3, local_runs: Path) -> None:
    remote, _ = client_of(URL)
    local, _ = client_of(str(local_runs))
    for run in ("exp/naive", "exp/sdpa", "exp/sdpa-math"):
        summary = get_json(remote, f"{BASE}/summary?run={run}")
        assert summary["errors"] == [] and summary["workers"]
        assert summary == get_json(local, f"{BASE}/summary?run={run}")
    for query in ("drilldown?run=exp/naive&layer=1&phase=softmax", "drilldown?run=exp/naive&layer=0&backward=1",
                  "memory?run=exp/naive", "timeline?run=exp/naive&limit=50", "drilldown?run=exp/sdpa-math&layer=1"):
        assert get_json(remote, f"{BASE}/{query}") == get_json(local, f"{BASE}/{query}"), query
    naive = f"runs/exp/naive/{_trace_name(local_runs, 'exp/naive')}"
    assert s3_watched.proxy.count("GET", naive) == 1  # parsed once; the views reuse the analysis
    get_json(remote, f"{BASE}/summary?run=exp/naive")
    get_json(remote, f"{BASE}/compare?runs=exp/naive,exp/sdpa")
    assert s3_watched.proxy.count("GET", naive) == 1


def test_trace_download_is_the_object(s3_watched: LocalS3, local_runs: Path) -> None:
    client, _ = client_of(URL)
    for run, mimetype in (("exp/naive", "application/json"), ("exp/sdpa-math", "application/gzip")):
        name = _trace_name(local_runs, run)
        response = get(client, f"{BASE}/trace?run={run}&file={name}")
        assert response.status_code == 200 and response.mimetype == mimetype
        assert response.get_data() == s3_watched.get(BUCKET, f"runs/{run}/{name}")
        assert response.headers["Content-Length"] == str((local_runs / run / name).stat().st_size)


def test_new_and_deleted_runs_after_refresh(s3: LocalS3, local_runs: Path) -> None:
    prefix = "scratch/refresh"
    s3.delete(BUCKET, prefix)
    s3.upload(BUCKET, f"{prefix}/exp/naive", local_runs / "exp" / "naive")
    client, _ = client_of(f"s3://{BUCKET}/{prefix}", scan_ttl_s=600.0)
    try:
        assert [r["run"] for r in get_json(client, f"{BASE}/runs")["runs"]] == ["exp/naive"]
        s3.upload(BUCKET, f"{prefix}/exp/sdpa", local_runs / "exp" / "sdpa")
        assert [r["run"] for r in get_json(client, f"{BASE}/runs")["runs"]] == ["exp/naive"]  # cached listing
        body = get_json(client, f"{BASE}/runs?refresh=1")
        assert [r["run"] for r in body["runs"]] == ["exp/naive", "exp/sdpa"]
        assert body["runs"][1]["info"]["impl"] == "sdpa"
        assert get_json(client, f"{BASE}/summary?run=exp/sdpa")["errors"] == []

        s3.delete(BUCKET, f"{prefix}/exp/naive")
        assert [r["run"] for r in get_json(client, f"{BASE}/runs?refresh=1")["runs"]] == ["exp/sdpa"]
        assert get(client, f"{BASE}/summary?run=exp/naive").status_code == 404
    finally:
        s3.delete(BUCKET, prefix)


def test_a_missing_prefix_is_an_empty_logdir(s3: LocalS3) -> None:
    client, service = client_of(f"s3://{BUCKET}/no/such/prefix")
    assert get_json(client, f"{BASE}/runs")["runs"] == []
    assert not service.has_traces()


def test_an_overwritten_trace_is_read_again(s3: LocalS3, local_runs: Path) -> None:
    """A run written again under the same key (same name, new content) is re-listed and
    re-read, not served from a stale listing: fsspec's listings cache would keep the old size
    and ETag for the life of the process."""
    prefix = "scratch/overwrite"
    s3.delete(BUCKET, prefix)
    name = _trace_name(local_runs, "exp/naive")
    key = f"{prefix}/exp/run/{name}"
    s3.client.put_object(Bucket=BUCKET, Key=key, Body=(local_runs / "exp" / "naive" / name).read_bytes())
    # The run's metadata too: the roofline is drawn under the peaks the runner measured (the same
    # for both runs: one process measured them once).
    s3.client.put_object(Bucket=BUCKET, Key=f"{prefix}/exp/run/tb_attn_run.json",
                         Body=(local_runs / "exp" / "naive" / "tb_attn_run.json").read_bytes())
    client, _ = client_of(f"s3://{BUCKET}/{prefix}")
    local, _ = client_of(str(local_runs))
    try:
        first = get_json(client, f"{BASE}/summary?run=exp/run")
        assert first["workers"] == get_json(local, f"{BASE}/summary?run=exp/naive")["workers"]
        sdpa = local_runs / "exp" / "sdpa" / _trace_name(local_runs, "exp/sdpa")
        s3.client.put_object(Bucket=BUCKET, Key=key, Body=sdpa.read_bytes())
        get_json(client, f"{BASE}/runs?refresh=1")
        again = get_json(client, f"{BASE}/summary?run=exp/run")
        assert again["errors"] == []
        (worker,) = again["workers"]
        (expected,) = get_json(local, f"{BASE}/summary?run=exp/sdpa")["workers"]
        assert worker["backend"] == "cpu-flash" and worker["layers"] == expected["layers"]
    finally:
        s3.delete(BUCKET, prefix)


def test_a_trace_named_as_accelerate_names_it_is_found_by_its_head(s3: LocalS3, local_runs: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """``profile_0.json`` is a trace by its content: its head is one ranged GET, in one batch with
    the other candidates', once per object version (the tab), and once per command (the CLI)."""
    import gzip
    import json

    from tb_attn_plugin.cli.main import main

    prefix = "scratch/accelerate"
    s3.delete(BUCKET, prefix)
    trace = (local_runs / "exp" / "naive" / _trace_name(local_runs, "exp/naive")).read_bytes()
    s3.client.put_object(Bucket=BUCKET, Key=f"{prefix}/run/profile_0.json", Body=trace)
    s3.client.put_object(Bucket=BUCKET, Key=f"{prefix}/run/profile_1.json.gz", Body=gzip.compress(trace))
    s3.client.put_object(Bucket=BUCKET, Key=f"{prefix}/run/config.json", Body=b'{"model_type": "gpt2"}')
    url = f"s3://{BUCKET}/{prefix}"
    client, service = client_of(url)
    try:
        s3.proxy.requests.clear()
        (run,) = get_json(client, f"{BASE}/runs")["runs"]
        assert run["run"] == "run" and [w["worker"] for w in run["workers"]] == ["profile_0", "profile_1"]
        assert [s3.proxy.count("GET", f"run/{n}") for n in ("profile_0.json", "profile_1.json.gz", "config.json")] \
            == [1, 1, 1]
        get_json(client, f"{BASE}/runs?refresh=1")  # listed again: no head read again
        assert s3.proxy.count("GET", "run/config.json") == 1 and service.has_traces()
        assert get_json(client, f"{BASE}/summary?run=run")["errors"] == []
        assert main(["summarize", url, "--format", "json", "--no-progress"]) == 0
        (summarized,) = json.loads(capsys.readouterr().out)["runs"]
        assert [w["worker"] for w in summarized["workers"]] == ["profile_0", "profile_1"]
    finally:
        s3.delete(BUCKET, prefix)
