"""``tb_attn.load``: every kind of source, the selections, the executors, and clear errors."""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import io
import logging
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import SHARED_TRACES, accelerate_run

import tb_attn
from tb_attn_plugin.cli.main import main
from tb_attn_plugin.engine.ranksel import parse_ranks

H100 = SHARED_TRACES / "gpu" / "tracelens_h100_bert-small_sdpa-flash.json.gz"


def _cli_json(*argv: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["summarize", *argv, "--format", "json", "--jobs", "1"]) == 0
    return out.getvalue()


def _runs(logdir: Path) -> int:
    """The run directories holding traces (the runner skips implementations that this machine lacks)."""
    return len({p.parent for p in logdir.rglob("*.pt.trace.json*")})


@pytest.mark.parametrize("where", ["file", "run", "logdir"])
def test_a_file_a_run_and_a_logdir_give_the_clis_json(builtin_logdir: Path, where: str) -> None:
    path = {"file": next((builtin_logdir / "sdpa").glob("*.pt.trace.json*")), "run": builtin_logdir / "sdpa",
            "logdir": builtin_logdir}[where]
    r = tb_attn.load(path, jobs=1)  # a Path as well as a str
    assert r.to_json() == _cli_json(str(path))
    assert len(r.runs) == (_runs(builtin_logdir) if where == "logdir" else 1)
    assert all(run.workers for run in r.runs)


def test_a_public_gpu_trace(tmp_path: Path) -> None:
    r = tb_attn.load(str(H100))
    ((w,),) = [run.workers for run in r.runs]
    assert w.device == "cuda" and len(w.layers) == 4
    assert r.to_json() == _cli_json(str(H100))


def test_run_and_worker_select(builtin_logdir: Path) -> None:
    r = tb_attn.load(builtin_logdir, run="naive/", jobs=1)
    assert [s.run for s in r.runs] == ["naive"]
    worker = r.runs[0].workers[0].worker
    only = tb_attn.load(builtin_logdir, worker=worker, jobs=1)
    assert len(only.runs) == _runs(builtin_logdir)  # the runner names every worker host_pid
    with pytest.raises(ValueError, match=r"no run named 'nope' under .*its runs: naive"):
        tb_attn.load(builtin_logdir, run="nope")
    with pytest.raises(ValueError, match="no worker named 'nope'"):
        tb_attn.load(builtin_logdir, worker="nope")


def test_ranks_select_traces(torchrun_logdir: Path) -> None:
    everything = tb_attn.load(torchrun_logdir, jobs=1)
    assert [len(run.workers) for run in everything.runs] == [2, 2]
    for ranks in ("0", parse_ranks("0")):
        r = tb_attn.load(torchrun_logdir, ranks=ranks, jobs=1)
        assert [[w.rank for w in run.workers] for run in r.runs] == [[0], [0]]
        assert len(r.ranks()) == 0  # one rank left in each run: no ranks view
    assert len(tb_attn.load(torchrun_logdir, ranks="0-7", jobs=1).ranks()) == 4
    with pytest.raises(ValueError, match="no trace of ranks 5 under"):
        tb_attn.load(torchrun_logdir, ranks="5")
    with pytest.raises(ValueError, match="bad rank selection"):
        tb_attn.load(torchrun_logdir, ranks="one")
    with pytest.raises(TypeError, match="ranks takes"):
        tb_attn.load(torchrun_logdir, ranks=[0])  # type: ignore[arg-type]


def test_executors_and_jobs_give_the_serial_json(builtin_logdir: Path, tmp_path: Path) -> None:
    logdir = tmp_path / "logdir"
    for run in ("naive", "sdpa", "naive-per-head"):
        shutil.copytree(builtin_logdir / run, logdir / run)
    serial = tb_attn.load(logdir, jobs=1).to_json()
    assert tb_attn.load(logdir, jobs=2).to_json() == serial
    with cf.ThreadPoolExecutor(2) as pool:
        assert tb_attn.load(logdir, executor=pool).to_json() == serial

    class Client:
        """A ``distributed.Client`` as ``load`` sees one: it asks it for an executor."""

        def __init__(self, pool: cf.Executor) -> None:
            self.pool, self.asked = pool, dict[str, Any]()

        def get_executor(self, **kwargs: Any) -> cf.Executor:
            self.asked = kwargs
            return self.pool

    with cf.ThreadPoolExecutor(2) as pool:
        client = Client(pool)
        assert tb_attn.load(logdir, executor=client).to_json() == serial
        assert client.asked == {"pure": False, "retries": 2}
    assert tb_attn.load(logdir, executor="local", jobs=1).to_json() == serial


def test_a_summary_cache(builtin_logdir: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = tb_attn.load(builtin_logdir / "sdpa", cache_dir=str(cache), jobs=1).to_json()
    assert any(cache.rglob("*"))
    assert tb_attn.load(builtin_logdir / "sdpa", cache_dir=str(cache), jobs=1).to_json() == first
    with pytest.raises(ValueError, match="inside the log directory"):
        tb_attn.load(builtin_logdir / "sdpa", cache_dir=str(builtin_logdir / "sdpa" / "cache"))


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"jobs": 0}, ValueError, "jobs must be"),
    ({"jobs": True}, ValueError, "jobs must be"),
    ({"executor": "spark://x"}, ValueError, "unknown executor"),
    ({"executor": 42}, TypeError, "executor takes"),
])
def test_bad_arguments(builtin_logdir: Path, kwargs: dict[str, Any], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        tb_attn.load(builtin_logdir / "sdpa", **kwargs)


def test_traces_named_as_accelerate_names_them_load_as_one_run_of_four_ranks(tmp_path: Path,
                                                                          builtin_logdir: Path) -> None:
    (trace,) = (builtin_logdir / "naive").glob("*.pt.trace.json")
    accelerate_run(tmp_path / "run", trace)
    r = tb_attn.load(tmp_path, progress=False)
    frame = r.workers()
    assert list(frame["run"]) == ["run"] * 4 and list(frame["worker"]) == [f"profile_{i}" for i in range(4)]
    assert r.errors().empty
    assert list(tb_attn.load(tmp_path, ranks="1,3", progress=False).workers()["worker"]) == ["profile_1", "profile_3"]


def test_bad_sources(tmp_path: Path) -> None:
    missing = f"cannot read {tmp_path}/missing: No such file or directory"
    with pytest.raises(FileNotFoundError, match=re.escape(missing)):
        tb_attn.load(tmp_path / "missing")
    with pytest.raises(ValueError, match=re.escape(f"no torch.profiler traces (*.pt.trace.json[.gz], or *.json[.gz] "
                                                   f"written by torch.profiler) under {tmp_path}")):
        tb_attn.load(tmp_path)
    with pytest.raises(TypeError, match="takes a path"):
        tb_attn.load(42)
    (tmp_path / "x.json").write_text("not json")
    with pytest.warns(tb_attn.TbAttnWarning, match="x.json could not be read"):
        r = tb_attn.load(tmp_path / "x.json")
    assert r.runs[0].workers == [] and r.errors()["file"].tolist() == ["x.json"]


def test_a_broken_trace_is_a_warning_and_the_others_are_read(builtin_logdir: Path, tmp_path: Path) -> None:
    shutil.copytree(builtin_logdir / "naive", tmp_path / "good")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "w.1.pt.trace.json").write_text("not json")
    with pytest.warns(tb_attn.TbAttnWarning, match=r"run bad: w.1.pt.trace.json could not be read: .*not JSON"):
        r = tb_attn.load(tmp_path, jobs=1)
    assert [(e["run"], e["file"]) for e in r.errors().to_dict("records")] == [("bad", "w.1.pt.trace.json")]
    assert len(r.layers()) == 2 and set(r.phases()["run"]) == {"good"}


def test_a_live_profile_is_exported_summarized_and_deleted() -> None:
    torch = pytest.importorskip("torch")
    from runner import instrument

    torch.manual_seed(0)
    model = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(d_model=32, nhead=4, batch_first=True),
                                        num_layers=2, enable_nested_tensor=False)
    x = torch.randn(2, 16, 32)
    with instrument(model), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                                   record_shapes=True, profile_memory=True) as prof:
        for _ in range(2):
            model(x).sum().backward()
            prof.step()
    exported: list[str] = []
    real = prof.export_chrome_trace

    def export(path: str) -> None:
        exported.append(path)
        real(path)

    prof.export_chrome_trace = export
    r = tb_attn.load(prof)
    (path,) = exported
    assert not os.path.exists(path) and not os.path.exists(os.path.dirname(path))
    ((w,),) = [run.workers for run in r.runs]
    assert w.worker == "profile" and len(w.layers) == 2 and w.step_count >= 1
    assert set(r.phases()["phase"]) >= {"qkv_proj", "out_proj"}
    assert "a torch.profiler profile" in repr(r)


def test_a_profile_that_cannot_export() -> None:
    class Running:
        def export_chrome_trace(self, path: str) -> None:
            raise RuntimeError("the profiler is still running")

    with pytest.raises(ValueError, match=r"cannot export the profile's trace .*still running.*after it stopped"):
        tb_attn.load(Running())


def test_pandas_is_imported_for_frames_only() -> None:
    code = ("import sys, tb_attn_plugin.server.plugin, tb_attn_plugin.cli.main; "
            "assert 'pandas' not in sys.modules and 'tb_attn' not in sys.modules; "
            "import tb_attn; r = tb_attn.load(sys.argv[1]); assert 'pandas' not in sys.modules; "
            "r.phases(); assert 'pandas' in sys.modules")
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-c", code, str(H100)], capture_output=True, text=True, timeout=60,
                          cwd=root, env={**os.environ, "PYTHONPATH": str(root)})
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_without_pandas_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pandas", None)  # import pandas raises ImportError
    r = tb_attn.Summaries([])
    with pytest.raises(ImportError, match=r"pip install 'tb-attn\[notebook\]'"):
        r.phases()
    assert "0 runs" in repr(r)  # the rest works without pandas


def test_a_dask_client_and_a_dask_url(builtin_logdir: Path, tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    logdir = tmp_path / "logdir"
    for run in ("naive", "sdpa"):
        shutil.copytree(builtin_logdir / run, logdir / run)
    serial = tb_attn.load(logdir, jobs=1).to_json()
    # Workers in this process's threads: they read the same file system.
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False, protocol="tcp://",
                                  host="127.0.0.1", dashboard_address=":0", silence_logs=logging.ERROR) as cluster, \
            distributed.Client(cluster, set_as_default=False) as client:
        assert tb_attn.load(logdir, executor=client).to_json() == serial
        url = cluster.scheduler_address.replace("tcp://", "dask://")
        assert tb_attn.load(logdir, executor=url).to_json() == serial
