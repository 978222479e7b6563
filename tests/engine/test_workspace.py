"""The one engine behind the front doors (``engine/workspace.py``): bad input gets the same message
from the CLI (one line, exit code 2) and from ``tb_attn.load`` (the exception's text), and the
runs it names, picks and summarizes are the same ones."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import tb_attn
from tb_attn_plugin.cli.main import main as cli
from tb_attn_plugin.engine.ranksel import parse_ranks
from tb_attn_plugin.engine.workspace import NO_TRACES_HINT, Workspace

GPU = Path(__file__).resolve().parents[2] / ".." / "shared" / "traces" / "gpu"


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two runs of one trace each: ``a`` (worker host_rank0) and ``b`` (host_rank1)."""
    (trace,) = sorted(GPU.resolve().glob("tracelens_h100_bert-small_sdpa-flash.json.gz"))
    root = tmp_path_factory.mktemp("workspace")
    for name, worker in (("a", "host_rank0"), ("b", "host_rank1")):
        (root / name).mkdir()
        shutil.copy(trace, root / name / f"{worker}.1.pt.trace.json.gz")
    return root


def _cli_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert cli(["summarize", *argv, "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("tb-attn: ") and "\n" not in err
    return err.removeprefix("tb-attn: ").removeprefix("error: ")


def _api_error(path: str, **kw: object) -> tuple[type[BaseException], str]:
    with pytest.raises((OSError, ValueError)) as info:
        tb_attn.load(path, progress=False, **kw)  # type: ignore[arg-type]
    return info.type, str(info.value)


@pytest.mark.parametrize("case", ["missing", "empty", "unknown run", "no such ranks"])
def test_every_door_says_the_same(case: str, logdir: Path, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    path, cli_flags, api_kw = {
        "missing": (str(tmp_path / "missing"), [], {}),
        "empty": (str(empty), [], {}),
        "unknown run": (str(logdir), ["--run", "nope"], {"run": "nope"}),
        "no such ranks": (str(logdir), ["--ranks", "7"], {"ranks": "7"}),
    }[case]
    kind, api = _api_error(path, **api_kw)
    assert _cli_error(capsys, path, *cli_flags) == api
    expected = {
        "missing": (FileNotFoundError, f"cannot read {path}: No such file or directory"),
        "empty": (ValueError, f"no torch.profiler traces (*.pt.trace.json[.gz], or *.json[.gz] written by "
                              f"torch.profiler) under {path}; {NO_TRACES_HINT}"),
        "unknown run": (ValueError, f"no run named 'nope' under {path} (its runs: a, b)"),
        "no such ranks": (ValueError, f"no trace of ranks 7 under {path}"),
    }[case]
    assert (kind, api) == expected


def test_the_runs_it_picks_and_summarizes(logdir: Path) -> None:
    space = Workspace(str(logdir), ranks=parse_ranks("1"), progress=False)
    runs = space.runs()
    assert [(r.name, [f.worker for f in r.files]) for r in runs] == [("b", ["host_rank1"])]
    assert [r.name for r in Workspace(str(logdir)).runs(worker="host_rank0")] == ["a"]
    (summary,) = space.summaries(runs)
    assert summary.run == "b" and [w.worker for w in summary.workers] == ["host_rank1"]
    # The notebook API reads through the same engine: the same run, rank and figures.
    frame = tb_attn.load(str(logdir), ranks="1", progress=False).workers()
    assert list(frame["run"]) == ["b"] and list(frame["worker"]) == ["host_rank1"]
    assert list(frame["attention_cpu_us"]) == [summary.workers[0].attention_cpu_us]


def test_a_cache_bound_needs_the_cache_and_no_cache_lies_in_the_logdir(logdir: Path) -> None:
    with pytest.raises(ValueError, match="--cache-max-mb bounds --cache-dir: give both"):
        Workspace(str(logdir), cache_max_bytes=1 << 20)
    with pytest.raises(ValueError):
        Workspace(str(logdir), cache_dir=str(logdir / "a" / "cache"))
