"""A real ``tensorboard --logdir s3://...`` process serves the Attention tab from the local S3 server.

The endpoint is given the tool-specific way here (the other tests use ``AWS_ENDPOINT_URL``):
``S3_ENDPOINT`` for TensorBoard's own S3 reader and ``FSSPEC_S3_ENDPOINT_URL`` for our tab.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from remotetools import URL, LocalS3

_LISTENING = re.compile(r"TensorBoard \S+ at http://127\.0\.0\.1:(\d+)/")
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class _TensorBoard:
    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.port: int | None = None
        self.output: list[str] = []
        self.ready = threading.Event()
        self._reader = threading.Thread(target=self._read, name="tensorboard-output", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.output.append(line)
            match = _LISTENING.search(line)
            if match is not None:
                self.port = int(match.group(1))
                self.ready.set()
        self.ready.set()  # exited

    def get(self, path: str, *, timeout_s: float = 60.0) -> Any:
        """The JSON at ``path``, polled while it answers 202 (still parsing)."""
        deadline = time.monotonic() + timeout_s
        while True:
            with _NO_PROXY.open(f"http://127.0.0.1:{self.port}{path}", timeout=30) as response:
                body = response.read()
                if response.status != 202:
                    assert response.status == 200, (path, response.status, body[:300])
                    return json.loads(body)
            assert time.monotonic() < deadline, f"{path} still loading after {timeout_s} s"
            time.sleep(0.1)

    def stop(self) -> int:
        children = _children(self.proc.pid)
        self.proc.send_signal(signal.SIGINT)  # what Ctrl+C sends: TensorBoard shuts down cleanly
        try:
            code = self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            for pid in [*_children(self.proc.pid), *children]:  # a child stuck after a fork holds the pipe open
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            self.proc.kill()
            self.proc.wait()
            raise
        finally:
            self._reader.join(timeout=5)
        deadline = time.monotonic() + 10
        while any(_alive(pid) for pid in children) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [pid for pid in children if _alive(pid)], "a child of TensorBoard outlived it"
        return code


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                out.append(int(entry.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.fixture
def tensorboard(s3: LocalS3, tmp_path: Path) -> Iterator[_TensorBoard]:
    env = {k: v for k, v in os.environ.items() if k != "AWS_ENDPOINT_URL"}
    env.update(S3_ENDPOINT=s3.endpoint, FSSPEC_S3_ENDPOINT_URL=s3.endpoint, HOME=str(tmp_path))
    # torch-tb-profiler (installed beside us) parses the same runs at start-up in worker
    # processes; forked rather than spawned, they start and stop in well under a second.
    env["TORCH_PROFILER_START_METHOD"] = "fork"
    command = [sys.executable, "-m", "tensorboard.main", "--logdir", URL, "--host", "127.0.0.1", "--port", "0"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            cwd=tmp_path)
    board = _TensorBoard(proc)
    try:
        board.ready.wait(timeout=90)
        assert board.port is not None, "".join(board.output)[-3000:]
        yield board
    finally:
        if proc.poll() is None:
            board.stop()
        assert proc.stdout is not None
        proc.stdout.close()
        assert proc.poll() is not None  # reaped: no zombie left behind


def test_tensorboard_serves_the_tab_from_s3(tensorboard: _TensorBoard, local_runs: Path) -> None:
    listing = tensorboard.get("/data/plugins_listing")
    assert listing["tb_attn"]["enabled"] is True, listing.get("tb_attn")
    runs = tensorboard.get("/data/plugin/tb_attn/runs")
    assert runs["logdir"] == URL
    assert {r["run"]: r["info"]["impl"] for r in runs["runs"]} == \
        {"exp/naive": "naive", "exp/sdpa": "sdpa", "exp/sdpa-math": "sdpa-math"}
    summary = tensorboard.get("/data/plugin/tb_attn/summary?run=exp/sdpa")
    assert summary["errors"] == [] and summary["workers"][0]["backend"] == "cpu-flash"

    code = tensorboard.stop()
    text = "".join(tensorboard.output)
    assert code in (0, -signal.SIGINT), text[-3000:]
    # torch-tb-profiler, installed beside us, reads the same runs in worker processes and may
    # print tracebacks when stopped mid-parse; none may come from our code.
    assert "tb_attn_plugin/" not in text, text[-3000:]
