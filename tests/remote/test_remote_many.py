"""Many ranks in a bucket: a Dask cluster summarizes them into a shared S3 cache, and the tab
then reads that cache instead of parsing (zero parses); a damaged entry is recomputed, a worker
killed mid-job loses nothing, and a cache that cannot be written costs only speed."""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from manyruns import write_ranked_run
from remotetools import BUCKET, LocalS3, client_of
from webtools import BASE, get_json

from tb_attn_plugin.cli import report
from tb_attn_plugin.cli.main import main
from tb_attn_plugin.engine.fanout import Fanout
from tb_attn_plugin.engine.loader import Loader, resolve_runs
from tb_attn_plugin.engine.pipeline import summarize_runs

distributed = pytest.importorskip("distributed")

RANKS = 32
JOB = f"s3://{BUCKET}/jobs/ranked"  # the logdir: one run ("." ) of 32 ranks
CACHE = f"s3://{BUCKET}/tb-attn-cache"


@pytest.fixture(scope="module")
def ranked(s3: LocalS3, builtin_logdir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """32 ranks of a runner trace, uploaded under ``jobs/ranked/``; the local copy returned."""
    local = tmp_path_factory.mktemp("ranked32")
    write_ranked_run(local, builtin_logdir / "naive", RANKS)
    s3.upload(BUCKET, "jobs/ranked", local)
    return local


@pytest.fixture(scope="module")
def cluster(s3: LocalS3) -> Iterator[Any]:
    """Two worker processes on loopback; they inherit the environment that points s3fs at moto."""
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                       dashboard_address="127.0.0.1:0", silence_logs=logging.ERROR)
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def no_cache(s3: LocalS3) -> Iterator[None]:
    s3.delete(BUCKET, "tb-attn-cache/")
    yield
    s3.delete(BUCKET, "tb-attn-cache/")


def _serial(local: Path) -> str:
    return report.summary_json(summarize_runs(Loader(), resolve_runs(str(local))))


def test_a_dask_cluster_fills_the_shared_cache_and_the_tab_parses_nothing(
        s3: LocalS3, ranked: Path, cluster: Any, no_cache: None, capsys: pytest.CaptureFixture[str],
        decodes: list[str]) -> None:
    logdir_before = s3.listing(BUCKET, "jobs/")
    code = main(["summarize", JOB, "--format", "json", "--executor", cluster.scheduler_address.replace("tcp", "dask"),
                 "--cache-dir", CACHE])
    out, err = capsys.readouterr()
    assert code == 0 and err == ""
    assert out.replace(JOB, "LOGDIR") == _serial(ranked).replace(str(ranked), "LOGDIR")
    assert len(s3.listing(BUCKET, "tb-attn-cache/")) == RANKS  # the workers wrote every entry
    assert s3.listing(BUCKET, "jobs/") == logdir_before  # the logdir is never written

    decodes.clear()  # the CLI's own (none: the workers parsed)
    client, _ = client_of(JOB, cache_dir=CACHE)
    summary = get_json(client, f"{BASE}/summary?run=.")
    ranks = get_json(client, f"{BASE}/ranks?run=.")
    assert decodes == []  # read from the cache: zero parses
    assert len(summary["workers"]) == RANKS and summary["errors"] == []
    assert sorted(r["rank"] for r in ranks["ranks"]) == list(range(RANKS))
    assert json.loads(out)["runs"][0]["workers"] == summary["workers"]

    # A damaged entry (here cut short) is a miss: that one trace is parsed again and rewritten.
    key, (etag, size) = sorted(s3.listing(BUCKET, "tb-attn-cache/").items())[0]
    s3.client.put_object(Bucket=BUCKET, Key=key, Body=s3.get(BUCKET, key)[: size // 2])
    fresh, _ = client_of(JOB, cache_dir=CACHE)
    assert get_json(fresh, f"{BASE}/summary?run=.") == summary
    assert len(decodes) == 1
    assert s3.listing(BUCKET, "tb-attn-cache/")[key] == (etag, size)  # written whole again


def test_a_worker_killed_mid_job_loses_nothing(s3: LocalS3, ranked: Path, cluster: Any, no_cache: None) -> None:
    client = distributed.Client(cluster.scheduler_address, set_as_default=False)
    try:
        pids = list(client.run(os.getpid).values())
        started = threading.Event()

        def kill_one() -> None:  # once the scheduler holds tasks, one worker dies (SIGKILL)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                if client.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.tasks)):
                    break
                time.sleep(0.005)
            os.kill(pids[0], signal.SIGKILL)
            started.set()

        killer = threading.Thread(target=kill_one)
        killer.start()
        warnings: list[str] = []
        loader = Loader()
        fanout = Fanout(loader, executor=client.get_executor(pure=False, retries=2), progress=False,
                        warn=warnings.append)
        got = summarize_runs(loader, resolve_runs(JOB), schedule=fanout, warn=warnings.append)
        killer.join()
        assert started.is_set()
    finally:
        client.close()
    assert report.summary_json(got).replace(JOB, "LOGDIR") == _serial(ranked).replace(str(ranked), "LOGDIR")
    assert all("summarizing them here" in w for w in warnings)  # retried by Dask, or here: nothing lost


def test_an_unwritable_cache_url_is_one_warning(s3: LocalS3, ranked: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["summarize", JOB, "--format", "json", "--jobs", "1", "--cache-dir", "s3://no-such-bucket/cache"])
    out, err = capsys.readouterr()
    assert code == 0
    assert err.startswith("tb-attn: warning: cannot write the summary cache at s3://no-such-bucket/cache: ")
    assert err.endswith("; summaries are not cached\n") and err.count("\n") == 1
    assert out.replace(JOB, "LOGDIR") == _serial(ranked).replace(str(ranked), "LOGDIR")


def test_forged_entries_in_the_bucket_are_refused_and_rewritten(
        s3: LocalS3, ranked: Path, no_cache: None, capsys: pytest.CaptureFixture[str], decodes: list[str]) -> None:
    """A writer of the bucket forges two entries under valid digests: one over the byte bound (not
    downloaded past it: one ranged GET), one past the head-row bound. The tab parses those two
    traces, serves what the serial path prints, and writes both entries again."""
    import hashlib

    import msgspec

    from tb_attn_plugin.analysis.common.bounds import MAX_HEAD_ROWS, MAX_SUMMARY_BYTES
    from tb_attn_plugin.types.schema import WorkerSummary

    assert main(["summarize", JOB, "--format", "json", "--jobs", "1", "--cache-dir", CACHE]) == 0
    capsys.readouterr()
    (big, big_meta), (rows, rows_meta) = sorted(s3.listing(BUCKET, "tb-attn-cache/").items())[:2]
    head = len(b"tb-attn-summary/1\n") + 32
    summary = msgspec.msgpack.decode(s3.get(BUCKET, rows)[head:], type=WorkerSummary)
    rows_layer = msgspec.structs.replace(summary.layers[0], heads=[summary.layers[0].heads[0]] * (MAX_HEAD_ROWS + 1))
    summary = msgspec.structs.replace(summary, layers=[rows_layer, *summary.layers[1:]])
    large = msgspec.msgpack.decode(s3.get(BUCKET, big)[head:], type=WorkerSummary)
    large = msgspec.structs.replace(large, notes=["n" * (MAX_SUMMARY_BYTES // 3)] * 4)  # a summary in all else
    for key, payload in ((big, msgspec.msgpack.encode(large)), (rows, msgspec.msgpack.encode(summary))):
        body = s3.get(BUCKET, key)[:head - 32] + hashlib.sha256(payload).digest() + payload
        s3.client.put_object(Bucket=BUCKET, Key=key, Body=body)
    decodes.clear()
    client, _ = client_of(JOB, cache_dir=CACHE)
    served = get_json(client, f"{BASE}/summary?run=.")
    assert len(decodes) == 2
    assert json.loads(_serial(ranked))["runs"][0]["workers"] == served["workers"]
    listing = s3.listing(BUCKET, "tb-attn-cache/")
    assert (listing[big], listing[rows]) == (big_meta, rows_meta)  # written whole again
