"""Run metadata: the small JSON file that makes a run directory self-describing.

Each run directory gets ``tb_attn_run.json`` (documented in ``docs/runner.md``), written
atomically at the start of the run with status ``running`` and rewritten when it ends with
``ok``, ``failed``, ``unsupported`` or ``interrupted``.
"""

from __future__ import annotations

import getpass
import json
import os
import platform
import shlex
import socket
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

from runner.traces import atomic_write_bytes
from tb_attn_plugin.vocab.names import METADATA_FILE
from tb_attn_plugin.vocab.scopes import GRAMMAR_VERSION

__all__ = ["METADATA_FILE", "METADATA_SCHEMA", "environment", "now_iso", "read_metadata", "write_metadata"]

METADATA_SCHEMA = "tb-attn.run/1"


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _git_commit(cwd: Path) -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=5, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    commit = out.stdout.strip()
    return commit if out.returncode == 0 and commit else None


def _user() -> str | None:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry in some containers
        return os.environ.get("USER")


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment(device: str) -> dict[str, Any]:
    """Facts about where the run happens: device, versions, host, user, commit, command."""
    dev = torch.device(device)
    if dev.type == "cuda" and torch.cuda.is_available():
        device_name = torch.cuda.get_device_name(dev)
    else:
        device_name = _cpu_name()
    return {
        "device": str(dev),
        "device_name": device_name,
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "python_version": platform.python_version(),
        "host": socket.gethostname(),
        "user": _user(),
        "git_commit": _git_commit(Path.cwd()),
        "command": shlex.join(getattr(sys, "orig_argv", sys.argv)),
        "scope_grammar": GRAMMAR_VERSION,
    }


def write_metadata(run_dir: Path, meta: dict[str, Any]) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    body = {"schema": METADATA_SCHEMA, **meta}
    atomic_write_bytes(run_dir / METADATA_FILE, json.dumps(body, indent=2, sort_keys=True).encode() + b"\n")


def read_metadata(run_dir: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((run_dir / METADATA_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
