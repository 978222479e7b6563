"""scripts/capture_gpu_traces.py works on CPU, so it is ready for a GPU machine."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_capture_script_smoke_on_cpu(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "capture_gpu_traces.py"), "--device", "cpu",
                           "--quick", "--out", str(tmp_path)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    capture = json.loads((tmp_path / "capture.json").read_text())
    runs = capture["runs"]
    assert runs["naive/seq64-causal-fwd"]["status"] == "ok" and runs["naive/seq64-causal-train"]["status"] == "ok"
    assert runs["sdpa-efficient/seq64-causal-fwd"]["status"] == "unsupported"
    assert all(t.endswith(".pt.trace.json.gz") for r in runs.values() for t in r["traces"])
    assert capture["over_2mb"] == []
    assert "torch" in (tmp_path / "README.md").read_text()


def test_capture_script_refuses_cuda_without_a_gpu(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():  # pragma: no cover - GPU machines
        return
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "capture_gpu_traces.py"), "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 2 and "no CUDA device" in proc.stderr
