"""Under torchrun (gloo on CPU), each rank writes its own trace into the same run."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from tracetools import load_trace, trace_files

from runner.metadata import METADATA_FILE


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_torchrun_two_ranks_one_trace_each(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
           "--master_port", str(_free_port()), "-m", "runner", "--logdir", str(tmp_path), "--impl", "naive,sdpa",
           "--layers", "1", "--d-model", "16", "--heads", "2", "--seq", "8", "--no-progress"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    for impl in ("naive", "sdpa"):
        run_dir = tmp_path / "builtin" / impl / "seq8"
        files = trace_files(run_dir)
        workers = sorted(f.name.split(".")[0] for f in files)
        assert [w.rsplit("_", 1)[1] for w in workers] == ["rank0", "rank1"]
        ranks = sorted(load_trace(f)["distributedInfo"]["rank"] for f in files)
        assert ranks == [0, 1]
        meta = json.loads((run_dir / METADATA_FILE).read_text())
        assert meta["world_size"] == 2 and meta["status"] == "ok"
        assert meta["traces"] == [f.name for f in files]
