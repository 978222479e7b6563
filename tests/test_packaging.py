"""What each install gives: the base install (`pip install tb-attn`, no extras) in a fresh venv
without torch reads traces, serves the tab and says which extra the runner needs; the runner
keeps Kineto's console log quiet unless the user asks for it.

The fresh venv is built once for the module from a copy of the package's sources (pip builds
in the source tree, and other work goes on in this one), through the machine's pip
configuration: about a minute, most of it installing tensorboard.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from helpers import SHARED_TRACES

from devtools.tbserver import free_port

ROOT = Path(__file__).resolve().parent.parent
TRACE = SHARED_TRACES / "gpu" / "tracelens_h100_bert-small_sdpa-flash.json.gz"
#: What the base install must neither install nor import: the [runner] and [profiler-tab] extras.
HEAVY = ("torch", "transformers", "tqdm", "torch_tb_profiler")
#: Nor these: the [notebook] and [dask] extras.
OPTIONAL = ("pandas", "dask", "distributed")
_SOURCES = ("setup.py", "pyproject.toml", "README.md", "runner", "tb_attn", "tb_attn_plugin")

# Imports the tab's plugin and the CLI, summarizes a trace, then reports which heavy modules
# were imported and where the package came from (stdout: one JSON line; stderr: the summary).
_SUMMARIZE_AND_REPORT = f"""
import contextlib, json, sys
import tb_attn_plugin.server.plugin, tb_attn_plugin.cli.main
with contextlib.redirect_stdout(sys.stderr):
    rc = tb_attn_plugin.cli.main.main(["summarize", sys.argv[1], "--format", "json"])
print(json.dumps({{"rc": rc, "imported": [m for m in {HEAVY!r} if m in sys.modules],
                  "package": tb_attn_plugin.__file__}}))
"""


def _run(cmd: list[str], cwd: Path, timeout: float = 120, env: dict[str, str] | None = None,
         ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


@pytest.fixture(scope="module")
def base_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv holding `pip install <package>` and nothing else."""
    root = tmp_path_factory.mktemp("base-install")
    src = root / "src"
    for name in _SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.so"))
        else:
            src.mkdir(exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    (root / "src-path").write_text(str(src))
    venv = root / "venv"
    made = _run([sys.executable, "-m", "venv", str(venv)], cwd=root)
    assert made.returncode == 0, made.stderr[-3000:]
    pip = _run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", str(src)], cwd=root, timeout=900)
    assert pip.returncode == 0, pip.stderr[-3000:]
    return venv


def test_base_install_has_none_of_the_extras(base_venv: Path) -> None:
    probe = _run([str(base_venv / "bin" / "python"), "-c",
                  "import importlib.util, json, sys; "
                  "print(json.dumps([m for m in sys.argv[1:] if importlib.util.find_spec(m) is not None]))", *HEAVY,
                  *OPTIONAL],
                 cwd=base_venv)
    assert probe.returncode == 0, probe.stderr
    assert json.loads(probe.stdout) == []


def test_summarize_a_shared_trace_without_torch(base_venv: Path) -> None:
    cli = _run([str(base_venv / "bin" / "tb-attn"), "summarize", str(TRACE), "--format", "json"], cwd=base_venv)
    assert cli.returncode == 0, cli.stderr
    workers = [w for run in json.loads(cli.stdout)["runs"] for w in run["workers"]]
    assert [w["backend"] for w in workers] == ["flash"]


_API_PROBE = """
import json, sys, tb_attn
r = tb_attn.load(sys.argv[1])
try:
    r.phases()
    frames = "no error"
except ImportError as exc:
    frames = str(exc)
print(json.dumps({"workers": len(r.runs[0].workers), "frames": frames, "pandas": "pandas" in sys.modules}))
"""


def test_the_api_loads_without_pandas_and_names_the_extra(base_venv: Path) -> None:
    probe = _run([str(base_venv / "bin" / "python"), "-c", _API_PROBE, str(TRACE)], cwd=base_venv)
    assert probe.returncode == 0, probe.stderr[-3000:]
    assert json.loads(probe.stdout) == {"workers": 1, "pandas": False,
                                        "frames": "tb_attn's DataFrames need pandas: pip install 'tb-attn[notebook]'"}


_SCANNER_PROBE = ("import json; from tb_attn_plugin.trace import scanned; "
                  "print(json.dumps([scanned.available(), getattr(scanned._scan, '__file__', None)]))")


def test_the_install_compiles_the_scanner(base_venv: Path) -> None:
    """pip builds the Kineto event scanner (trace/_scan.c) into the installed package."""
    probe = _run([str(base_venv / "bin" / "python"), "-c", _SCANNER_PROBE], cwd=base_venv)
    assert probe.returncode == 0, probe.stderr
    available, where = json.loads(probe.stdout)
    assert available and Path(where).is_relative_to(base_venv)


def test_without_a_compiler_the_install_takes_the_pure_path(base_venv: Path, tmp_path: Path) -> None:
    """The scanner is an optional extension: where it cannot be compiled, pip installs the rest
    and summaries come from the pure path, the same ones."""
    src = tmp_path / "src"  # a clean copy: the base install's own build/ holds a compiled scanner
    shutil.copytree(Path((base_venv.parent / "src-path").read_text()), src,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "*.so"))
    target = tmp_path / "site"
    pip = _run([str(base_venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-deps",
                "--target", str(target), str(src)], cwd=tmp_path, timeout=600, env={"CC": "false"})
    assert pip.returncode == 0, pip.stderr[-3000:]
    assert not list(target.rglob("_scan*.so"))
    env = {"PYTHONPATH": str(target)}
    probe = _run([str(base_venv / "bin" / "python"), "-c", _SCANNER_PROBE], cwd=tmp_path, env=env)
    assert probe.returncode == 0, probe.stderr
    assert json.loads(probe.stdout) == [False, None]
    cli = [str(base_venv / "bin" / "python"), "-m", "tb_attn_plugin.cli", "summarize", str(TRACE), "--format", "json"]
    pure = _run(cli, cwd=tmp_path, env=env)
    fast = _run(cli, cwd=tmp_path)
    assert pure.returncode == 0 and fast.returncode == 0, pure.stderr + fast.stderr
    assert pure.stdout == fast.stdout


@pytest.mark.parametrize("where", ["base venv", "test venv"])
def test_plugin_and_summary_never_import_torch(base_venv: Path, where: str) -> None:
    """In the base venv an import of torch would fail; in this one, where torch is installed, it
    would succeed unnoticed, so both are checked."""
    python = base_venv / "bin" / "python" if where == "base venv" else Path(sys.executable)
    # Not from the repository root: `-c` puts the working directory first on sys.path.
    proc = _run([str(python), "-c", _SUMMARIZE_AND_REPORT, str(TRACE)], cwd=base_venv)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert report["rc"] == 0 and report["imported"] == []
    if where == "base venv":
        assert Path(report["package"]).is_relative_to(base_venv)


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_tensorboard_lists_the_attention_tab(base_venv: Path, tmp_path: Path) -> None:
    run = tmp_path / "logdir" / "bert"
    run.mkdir(parents=True)
    shutil.copy(TRACE, run / "worker0.1700000000000.pt.trace.json.gz")
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    with open(tmp_path / "tensorboard.log", "w+") as log:
        server = subprocess.Popen([str(base_venv / "bin" / "tensorboard"), "--logdir", str(run.parent), "--host",
                                   "127.0.0.1", "--port", str(port)], cwd=tmp_path, stdout=log,
                                  stderr=subprocess.STDOUT, start_new_session=True)
        try:
            listing: dict[str, dict[str, object]] = {}
            deadline = time.monotonic() + 120
            while "tb_attn" not in listing and server.poll() is None and time.monotonic() < deadline:
                with contextlib.suppress(OSError):  # not listening yet
                    status, body = _get(url + "data/plugins_listing")
                    listing = json.loads(body) if status == 200 else {}
                time.sleep(0.3)
            log.seek(0)
            assert "tb_attn" in listing, log.read()[-3000:]
            assert listing["tb_attn"]["enabled"] is True and listing["tb_attn"]["tab_name"] == "Attention"
            status, _ = _get(url + "data/plugin/tb_attn/index.js")
            assert status == 200  # the built tab is shipped in the package
            status, body = _get(url + "data/plugin/tb_attn/runs")
            assert status == 200 and "bert" in body.decode()
        finally:
            # The whole group: TensorBoard may have started its data server.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()


@pytest.mark.parametrize("command", [["tb-attn-run"], ["python", "-m", "runner"]])
def test_runner_without_torch_names_the_extra(base_venv: Path, tmp_path: Path, command: list[str]) -> None:
    exe = [str(base_venv / "bin" / command[0]), *command[1:]]
    proc = _run([*exe, "--logdir", str(tmp_path / "runs")], cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "pip install 'tb-attn[runner]'" in proc.stderr, proc.stderr
    assert proc.stderr.startswith("tb-attn-run: error: ") and "torch" in proc.stderr
    assert not (tmp_path / "runs").exists()


def test_runner_api_without_torch_names_the_extra(base_venv: Path) -> None:
    proc = _run([str(base_venv / "bin" / "python"), "-c", "from runner import instrument"], cwd=base_venv)
    assert proc.returncode == 1 and "pip install 'tb-attn[runner]'" in proc.stderr.strip().splitlines()[-1]


def test_integrations_without_torch_name_their_extras(base_venv: Path) -> None:
    """``import tb_attn.integrations`` imports no training framework; each name, used without its
    packages, says which extra installs them, in one line."""
    python = str(base_venv / "bin" / "python")
    quiet = _run([python, "-c", "import sys, tb_attn.integrations; print(sorted(m for m in sys.modules if m in "
                               f"{(*HEAVY, 'pytorch_lightning', 'accelerate')!r}))"], cwd=base_venv)
    assert quiet.returncode == 0 and quiet.stdout.strip() == "[]", quiet.stderr
    for name, extra in (("AttentionProfilerCallback", "transformers"), ("AttentionProfiler", "lightning"),
                        ("profile_kwargs", "accelerate")):
        proc = _run([python, "-c", f"from tb_attn.integrations import {name}"], cwd=base_venv)
        last = proc.stderr.strip().splitlines()[-1]
        assert proc.returncode == 1 and f"pip install 'tb-attn[{extra}]'" in last, proc.stderr


_KINETO_LINE = re.compile(r"^[A-Z]+:\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \d+:\d+ \w+\.cpp:\d+\]", re.M)
_RUN_TINY = ["-m", "runner", "--size", "tiny", "--impl", "naive", "--seq", "16", "--wait", "0", "--warmup", "1",
             "--active", "1", "--no-progress"]


def test_runs_print_no_kineto_log(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "KINETO_LOG_LEVEL"}
    proc = subprocess.run([sys.executable, *_RUN_TINY, "--logdir", str(tmp_path)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # Such as "USDT:<time> ... profiler_start" on every cycle, and "ERROR:<time> ...
    # gpuGetDeviceCount failed" without a GPU.
    assert not _KINETO_LINE.search(proc.stderr), proc.stderr[-3000:]


def test_a_kineto_log_level_the_user_set_is_kept(tmp_path: Path) -> None:
    proc = _run([sys.executable, *_RUN_TINY, "--logdir", str(tmp_path)], cwd=tmp_path,
                env={"KINETO_LOG_LEVEL": "1"}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "profiler_start" in proc.stderr and "profiler_stop" in proc.stderr
