"""tb-attn summarize: formats, selection and errors."""

from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tb_attn_plugin.cli import main
from tb_attn_plugin.report import CSV_FIELDS
from tb_attn_plugin.scopes import PHASES


def test_table_is_readable(builtin_logdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["summarize", str(builtin_logdir), "--run", "naive"]) == 0
    out = capsys.readouterr().out
    assert "run naive" in out and "backend naive" in out and "attention" in out
    for phase in ("qkv_proj", "qk_matmul", "mask", "softmax", "av_matmul", "out_proj", "= naive", "total"):
        assert phase in out
    assert "SxS MiB" in out


def test_json_has_the_documented_fields(builtin_logdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["summarize", str(builtin_logdir / "sdpa"), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "tb-attn.summary/1"
    (run,) = doc["runs"]
    (worker,) = run["workers"]
    layer = worker["layers"][0]
    for key in ("layer", "backend", "inferred", "phases", "heads"):
        assert key in layer
    assert layer["backend"] == "cpu-flash" and layer["inferred"] is False
    for phase in layer["phases"]:
        for key in ("calls", "cpu_us", "device_us", "flops", "alloc_bytes", "peak_bytes"):
            assert key in phase
        assert phase["phase"] in (*PHASES, "other")
    assert all("head" in h and "derived" in h for h in layer["heads"])


def test_csv_loads_as_rows(builtin_logdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["summarize", str(builtin_logdir), "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert tuple(rows[0]) == CSV_FIELDS
    runs = {r["run"] for r in rows}
    assert {"naive", "sdpa", "sdpa-math"} <= runs
    assert all(float(r["cpu_us"]) >= 0 for r in rows)


def test_a_broken_trace_exits_1_and_the_rest_is_still_printed(
    tmp_path: Path, builtin_logdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copytree(builtin_logdir / "naive", tmp_path / "good")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "w.1.pt.trace.json").write_text("not json")
    assert main(["summarize", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    assert "run good" in captured.out and "backend naive" in captured.out
    assert "bad/w.1.pt.trace.json" in captured.err and "not JSON" in captured.err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["summarize", "{tmp}/missing"], "No such file or directory"),
        (["summarize", "{tmp}"], "no traces"),
        (["summarize", "{logdir}", "--run", "nope"], "no run named 'nope'"),
        (["summarize", "{logdir}", "--worker", "nope"], "no worker named 'nope'"),
        (["summarize", "{logdir}", "--format", "xml"], "invalid choice"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_usage_errors_exit_2_with_one_line(
    tmp_path: Path, builtin_logdir: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    argv = [a.format(tmp=tmp_path, logdir=builtin_logdir) for a in args]
    with pytest.raises(SystemExit) as exc:
        raise SystemExit(main(argv))
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


def test_console_script(builtin_logdir: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "tb_attn_plugin.cli", "summarize", str(builtin_logdir / "naive"),
                           "--format", "json"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["runs"][0]["workers"][0]["backend"] == "naive"
