"""A real ``tensorboard --logdir`` on a free loopback port, for the browser tests, the load test
and the benchmarks.

``TensorBoard(logdir)`` starts the server in its own process group, with its output in a
temporary file (nobody reads a pipe while the tests run, and a full one would block the
server), and returns once ``/data/plugins_listing`` answers. ``stop()`` terminates the whole
group (torch-tb-profiler and the data server start processes of their own), waits, kills what
is left after a timeout and reaps the server, so no process or zombie outlives it. A server
that exits or does not start raises ``TensorBoardError`` with the end of its output.

The tests put the repository root on ``sys.path`` (``tests/browser/conftest.py``,
``tests/server/test_load.py``); a benchmark does the same with two lines.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO

__all__ = ["TensorBoard", "TensorBoardError", "free_port"]

ROOT = Path(__file__).resolve().parent.parent

# TensorBoard with its built-in plugins and the named entry-point plugins only (argv[1], comma
# separated); the rest of argv are TensorBoard's flags.
_ONLY = (
    "import sys\n"
    "from importlib.metadata import entry_points\n"
    "from tensorboard import default, program\n"
    "names = set(sys.argv[1].split(','))\n"
    "found = [ep for ep in entry_points(group='tensorboard_plugins') if ep.name in names]\n"
    "missing = names - {ep.name for ep in found}\n"
    "if missing:\n"
    "    sys.exit(f'no tensorboard_plugins entry point named {sorted(missing)}')\n"
    "tb = program.TensorBoard(plugins=default.get_static_plugins() + [ep.load() for ep in found])\n"
    "tb.configure(argv=['tensorboard'] + sys.argv[2:])\n"
    "sys.exit(tb.main())\n"
)


class TensorBoardError(RuntimeError):
    """The server exited, or did not answer in time; the message ends with its output."""


def _group_members(pgid: int) -> set[int]:
    """The processes in a process group, zombies included (Linux; empty elsewhere)."""
    members = set()
    for entry in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = entry.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        if len(fields) > 2 and fields[2] == str(pgid):
            members.add(int(entry.parent.name))
    return members


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (another process may take it before it is used)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class TensorBoard:
    """``tensorboard --logdir LOGDIR`` on 127.0.0.1, started and ready.

    ``only``: entry-point plugin names (``tb_attn``, ``torch_profiler``) to load beside
    TensorBoard's built-in plugins; None loads every installed plugin, as a user's TensorBoard
    does. ``args``: more TensorBoard flags. ``env``: variables added to this process's.
    """

    def __init__(self, logdir: str | os.PathLike[str], *, path_prefix: str = "", only: Sequence[str] | None = None,
                 args: Sequence[str] = (), env: Mapping[str, str] | None = None, start_timeout_s: float = 120.0,
                 attempts: int = 3) -> None:
        self.logdir = os.fspath(logdir)
        self.path_prefix = path_prefix.rstrip("/")
        self.plugins: list[str] = []
        self._log: IO[str] = tempfile.TemporaryFile(mode="w+", prefix="tensorboard-")
        self.proc: subprocess.Popen[str] | None = None
        for attempt in range(attempts):
            self.port = free_port()
            self.url = f"http://127.0.0.1:{self.port}{self.path_prefix}/"
            flags = ["--logdir", self.logdir, "--host", "127.0.0.1", "--port", str(self.port), *args]
            if self.path_prefix:
                flags += ["--path_prefix", self.path_prefix]
            command = [sys.executable, "-c", _ONLY, ",".join(only), *flags] if only is not None else \
                [sys.executable, "-m", "tensorboard.main", *flags]
            self._log.seek(0)
            self._log.truncate()
            self.proc = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                                         env={**os.environ, **(env or {})}, start_new_session=True)
            try:
                self._wait_ready(start_timeout_s)
                return
            except TensorBoardError as exc:
                output = self.output()
                self.stop()
                port_taken = "already in use" in output or "Errno 98" in output
                if not port_taken or attempt == attempts - 1:
                    raise TensorBoardError(f"{exc}:\n{output}") from None

    def _wait_ready(self, timeout_s: float) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._exited():
                raise TensorBoardError("tensorboard exited")
            try:
                with urllib.request.urlopen(self.url + "data/plugins_listing", timeout=2) as response:
                    if response.status == 200:
                        self.plugins = sorted(json.load(response))
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise TensorBoardError(f"tensorboard did not answer within {timeout_s:.0f} s")

    def _exited(self, timeout_s: float = 0.0) -> bool:
        """Whether the server has exited (within ``timeout_s``), without reaping it: until it is
        reaped its pid, which is also its process group's id, cannot be given to another process,
        so signalling the group reaches our processes only."""
        assert self.proc is not None
        if self.proc.returncode is not None:
            return True
        deadline = time.monotonic() + timeout_s
        while True:
            if os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def output(self, limit: int = 5000) -> str:
        """The last ``limit`` characters the server printed (stdout and stderr)."""
        if self._log.closed:
            return ""
        self._log.flush()
        self._log.seek(0)
        return self._log.read()[-limit:]

    def stop(self, timeout_s: float = 20.0) -> None:
        """Terminate the server's process group; kill it after ``timeout_s``. Idempotent."""
        proc = self.proc
        if proc is None or proc.returncode is not None:
            return
        os.killpg(proc.pid, signal.SIGTERM)
        if not self._exited(timeout_s):
            os.killpg(proc.pid, signal.SIGKILL)
            self._exited(60.0)
        # What the server started (torch-tb-profiler's workers, the data server) may outlive it:
        # killed, then given a moment to be reaped (they are orphans now, reaped by init).
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while _group_members(proc.pid) - {proc.pid} and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.wait()

    def close(self) -> None:
        self.stop()
        self._log.close()

    def __enter__(self) -> TensorBoard:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
