"""``tb-attn`` on ``s3://`` URLs gives what it gives on a local copy of the same runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from remotetools import URL, LocalS3

from tb_attn_plugin.cli.main import main


def _json_of(capsys: pytest.CaptureFixture[str], *argv: str) -> object:
    assert main(list(argv)) == 0
    out, err = capsys.readouterr()
    assert err == ""
    return json.loads(out)


def test_summarize_and_compare_equal_the_local_copy(s3: LocalS3, local_runs: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    remote = _json_of(capsys, "summarize", URL, "--format", "json")
    local = _json_of(capsys, "summarize", str(local_runs), "--format", "json")
    assert isinstance(remote, dict) and isinstance(local, dict)
    assert [r["run"] for r in remote["runs"]] == ["exp/naive", "exp/sdpa", "exp/sdpa-math"]
    assert all(r["errors"] == [] and len(r["workers"]) == 1 for r in remote["runs"])
    assert json.dumps(remote).replace(URL, "LOGDIR") == json.dumps(local).replace(str(local_runs), "LOGDIR")

    (trace,) = (local_runs / "exp" / "naive").glob("*.pt.trace.json")  # one file, named by its URL
    one = _json_of(capsys, "summarize", f"{URL}/exp/naive/{trace.name}", "--format", "json")
    assert one == _json_of(capsys, "summarize", str(trace), "--format", "json")

    remote_compare = _json_of(capsys, "compare", URL, "--format", "json")
    assert remote_compare == _json_of(capsys, "compare", str(local_runs), "--format", "json")


def test_summarize_with_the_endpoint_in_fsspec_config(s3: LocalS3, local_runs: Path) -> None:
    """The other documented way: fsspec's own configuration (here the ``FSSPEC_S3`` variable),
    which also carries s3fs options such as timeouts; nothing in AWS_ENDPOINT_URL."""
    env = {k: v for k, v in os.environ.items() if k != "AWS_ENDPOINT_URL"}
    env["FSSPEC_S3"] = json.dumps({"endpoint_url": s3.endpoint,
                                   "config_kwargs": {"connect_timeout": 2, "read_timeout": 10}})
    remote = _summarize_json(f"{URL}/exp/sdpa-math", env)  # a run directory, its trace gzipped
    assert remote == _summarize_json(str(local_runs / "exp" / "sdpa-math"), env)


def _summarize_json(path: str, env: dict[str, str]) -> object:
    proc = subprocess.run([sys.executable, "-m", "tb_attn_plugin.cli", "summarize", path, "--format", "json"],
                          capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    return json.loads(proc.stdout)

