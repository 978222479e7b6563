"""Browser tests: a real ``tensorboard --logdir`` on a free loopback port, and headless Chromium.

Chromium is Debian's (/usr/bin/chromium, installed by ``make test``); no browser is ever
downloaded. Screenshots go to ``test-artifacts/`` at the repository root.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
HOSTILE_RUN = '<img src=x onerror="window.__xss=1">'


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def browser_logdir(tmp_path_factory: pytest.TempPathFactory, builtin_logdir: Path) -> Path:
    logdir = tmp_path_factory.mktemp("browser-logdir")
    for run in ("naive", "sdpa", "sdpa-math", "naive-per-head"):
        shutil.copytree(builtin_logdir / run, logdir / "demo" / run)
    broken = logdir / "broken" / "not-a-trace"
    broken.mkdir(parents=True)
    (broken / "w.1.pt.trace.json").write_text("this is not a trace")
    old = time.time() - 3600
    os.utime(broken / "w.1.pt.trace.json", (old, old))
    return logdir


class TensorBoard:
    def __init__(self, logdir: Path, path_prefix: str = "") -> None:
        self.logdir = logdir
        self.port = _free_port()
        self.path_prefix = path_prefix
        self.url = f"http://127.0.0.1:{self.port}{path_prefix}/"
        tensorboard = Path(sys.executable).with_name("tensorboard")
        args = [str(tensorboard), "--logdir", str(logdir), "--host", "127.0.0.1", "--port", str(self.port)]
        if path_prefix:
            args += ["--path_prefix", path_prefix]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tensorboard exited: {self.proc.stdout.read() if self.proc.stdout else ''}")
            try:
                with urllib.request.urlopen(self.url + "data/plugins_listing", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.3)
        self.stop()
        raise RuntimeError("tensorboard did not start within 90 s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()


@pytest.fixture(scope="session")
def tensorboard(browser_logdir: Path) -> Iterator[TensorBoard]:
    tb = TensorBoard(browser_logdir)
    yield tb
    tb.stop()


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: `make test` installs Debian's chromium (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                              args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        yield b
        b.close()


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS
