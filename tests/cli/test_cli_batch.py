"""The CLI's shared many-file options and helpers (``cli/batch.py``): the flags and their parsers, the
command's one ``workspace`` (the runs a path names, their ranks), the one-line errors, and summaries run
in-process on tiny hand-written traces whose attention time per step is known. test_batch_flags.py checks
the same flags through every command."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tb_attn_plugin.cli import batch
from tb_attn_plugin.types.results import RankView
from tb_attn_plugin.types.schema import RunSummary


@pytest.fixture(autouse=True)
def _no_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DASK_SCHEDULER_ADDRESS", raising=False)


def _x(cat: str, name: str, ts: float, dur: float) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": 1, "args": {}}


def _write(run: Path, worker: str, blocks: Sequence[float]) -> None:
    """One worker's trace: a 1 ms profiler step per entry of ``blocks``, each holding layer 0's block
    of that many µs: its attention time per step is ``blocks``."""
    events = []
    for n, block in enumerate(blocks, start=1):
        t0 = n * 1000.0
        events += [_x("user_annotation", f"ProfilerStep#{n}", t0, 1000),
                   _x("user_annotation", "tbattn.v1/L0", t0 + 10, block),
                   _x("user_annotation", "tbattn.v1/L0/softmax", t0 + 11, block - 2)]
    run.mkdir(parents=True, exist_ok=True)
    (run / f"{worker}.1.pt.trace.json").write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))


@pytest.fixture
def logdir(tmp_path: Path) -> Path:
    """Run ``a``: ranks 0 and 1 at 100 and 300 µs of attention per step; run ``b``: one worker at 50 µs."""
    root = tmp_path / "logdir"
    _write(root / "a", "host_rank0", [100.0, 100.0])
    _write(root / "a", "host_rank1", [300.0, 300.0])
    _write(root / "b", "w", [50.0])
    return root


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="t")
    batch.add_flags(parser)
    return parser


def _args(*argv: str) -> argparse.Namespace:
    return _parser().parse_args(list(argv))


# -- messages -----------------------------------------------------------------------------------------


def test_fail_prints_one_escaped_error_line_and_returns_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert batch.fail("no run named 'x\x1b[2J\ny'") == 2
    out, err = capsys.readouterr()
    assert out == "" and err == "tb-attn: error: no run named 'x\\x1b[2J\\x0ay'\n"


def test_stderr_prefixes_the_program_name(capsys: pytest.CaptureFixture[str]) -> None:
    batch.stderr("warning: w\u202e")
    assert capsys.readouterr().err == f"{batch.PROG}: warning: w\\u202e\n"


# -- flags ---------------------------------------------------------------------------------------------


def test_the_flags_default_to_this_machine_with_no_cache() -> None:
    args = _args()
    assert (args.jobs, args.executor, args.ranks, args.cache_dir, args.cache_max_mb, args.no_progress) == (
        None, None, None, None, None, False)


def test_the_flags_parse_their_values() -> None:
    args = _args("--jobs", "3", "--executor", "dask://h:1", "--ranks", "7, 0-2,3", "--cache-dir", "/c",
                 "--cache-max-mb", "64", "--no-progress")
    assert (args.jobs, args.executor, args.cache_dir, args.cache_max_mb, args.no_progress) == (
        3, "dask://h:1", "/c", 64, True)
    assert args.ranks.spec == "0-3,7"  # sorted and merged: 0-2 and 3 are one range


@pytest.mark.parametrize("text", ["1", "16", " 2 "])
def test_whole_takes_a_positive_integer(text: str) -> None:
    assert batch.whole("MiB")(text) == int(text)


@pytest.mark.parametrize("text", ["0", "-1", "1.5", "lots", ""])
def test_whole_refuses_anything_else_naming_the_unit(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as exc:
        batch.whole("processes")(text)
    assert str(exc.value) == f"must be a whole number of processes, at least 1, got {text!r}"


@pytest.mark.parametrize(("value", "message"), [
    ("7-3", "argument --ranks: bad rank range '7-3'"),
    ("x", "argument --ranks: bad rank selection 'x'"),
    (",", "argument --ranks: empty rank selection"),
])
def test_a_bad_rank_selection_is_a_usage_error(value: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        _args("--ranks", value)
    assert exc.value.code == 2 and message in capsys.readouterr().err


# -- the command's workspace ---------------------------------------------------------------------------


def test_the_workspace_names_every_run_or_the_one_asked_for(logdir: Path) -> None:
    space = batch.workspace(_args(), str(logdir))
    assert [(r.name, r.workers) for r in space.runs()] == [("a", ["host_rank0", "host_rank1"]), ("b", ["w"])]
    assert [r.name for r in space.runs(run="b/")] == ["b"]
    assert [r.name for r in space.runs(run=["b", "a"])] == ["b", "a"]  # --runs B,A: in that order
    assert [r.name for r in space.runs(worker="w")] == ["b"]


@pytest.mark.parametrize(("where", "run", "message"), [
    ("missing", None, "cannot read {path}: No such file or directory"),
    ("empty", None, "no torch.profiler traces (*.pt.trace.json[.gz], or *.json[.gz] written by torch.profiler) "
                    "under {path}"),
    ("logdir", "nope", "no run named 'nope' under {path} (its runs: a, b)"),
])
def test_the_workspace_says_why_there_are_no_runs(logdir: Path, tmp_path: Path, where: str, run: str | None,
                                                  message: str) -> None:
    path = {"missing": tmp_path / "missing", "empty": tmp_path / "empty", "logdir": logdir}[where]
    if where == "empty":
        path.mkdir()
    with pytest.raises((OSError, ValueError)) as exc:
        batch.workspace(_args(), str(path)).runs(run=run)
    assert str(exc.value).startswith(message.format(path=path))


def test_the_runs_keep_only_the_ranks_asked_for(logdir: Path) -> None:
    every = batch.workspace(_args(), str(logdir)).runs()
    assert batch.workspace(_args("--ranks", "1"), str(logdir)).runs(ranks=False) == every
    # rank 1: run a keeps host_rank1; run b's one worker is rank 0 by position, so b is dropped
    (a,) = batch.workspace(_args("--ranks", "1"), str(logdir)).runs()
    assert (a.name, a.workers, [f.name for f in a.files]) == ("a", ["host_rank1"], ["host_rank1.1.pt.trace.json"])


def test_runs_with_no_trace_of_the_ranks_left_is_an_error(logdir: Path) -> None:
    with pytest.raises(ValueError, match=r"^no trace of ranks 5-6 under .*logdir$"):
        batch.workspace(_args("--ranks", "5-6"), str(logdir)).runs()


def _view() -> RankView:
    return RankView(run="a", clock="cpu", metric="attention_best", metric_label="", means_label="", heads_label="",
                    median_label="", margin=0.2, min_gap_us=0.0, ranks=[], columns=[], all_ranks=[], stragglers=[],
                    heads=[], head_count=0, heads_sharded=False, heads_complete=True, warnings=[], errors=[])


def test_sampled_records_the_rank_count_and_the_selection() -> None:
    view = batch.sampled(_view(), 512, _args("--ranks", "8,0-7"))
    assert (view.ranks_total, view.ranks_selected) == (512, "0-8")
    every = batch.sampled(_view(), 2, _args())
    assert (every.ranks_total, every.ranks_selected) == (2, None)


# -- summaries -----------------------------------------------------------------------------------------


def _summaries(logdir: Path, *flags: str, run: str | None = None, worker: str | None = None,
               **kwargs: Any) -> list[RunSummary]:
    space = batch.workspace(_args(*flags), str(logdir), **kwargs)
    return space.summaries(space.runs(run=run, worker=worker), worker=worker)


def test_summaries_reads_every_run_in_order(logdir: Path) -> None:
    a, b = _summaries(logdir, "--jobs", "1")
    assert (a.run, [w.worker for w in a.workers], b.run, [w.worker for w in b.workers]) == (
        "a", ["host_rank0", "host_rank1"], "b", ["w"])
    # each worker's mean attention time per step: the block written in each of its steps
    assert [w.attention_cpu_us for w in a.workers] == [100.0, 300.0] and b.workers[0].attention_cpu_us == 50.0
    assert a.errors == [] and b.errors == []


def test_summaries_of_one_worker(logdir: Path) -> None:
    (a,) = _summaries(logdir, run="a", worker="host_rank1")
    assert [w.worker for w in a.workers] == ["host_rank1"]


def test_loader_options_reach_the_loader(logdir: Path) -> None:
    """A trace over ``max_trace_bytes`` is that file's error, not the run's end."""
    (b,) = _summaries(logdir, run="b", max_trace_bytes=10)
    assert b.workers == [] and [e.file for e in b.errors] == ["w.1.pt.trace.json"]


def test_the_users_peaks_replace_every_rooflines(logdir: Path) -> None:
    (b,) = _summaries(logdir, run="b", peaks=(2.5e12, 100e9))
    (roofline,) = [w.roofline for w in b.workers]
    assert roofline is not None and roofline.source == "given by --peak-flops and --peak-bw"
    assert roofline.peak_flops["fp32"] == 2.5e12 and roofline.peak_bytes_per_s == 100e9


def test_a_bad_executor_is_refused_before_anything_is_read(logdir: Path, decodes: list[str]) -> None:
    with pytest.raises(batch.Usage, match=r"^unknown executor 'ray://h:1'"):
        batch.workspace(_args("--executor", "ray://h:1"), str(logdir))
    assert decodes == []


def test_a_cache_inside_the_path_is_refused(logdir: Path) -> None:
    inside = logdir / "a" / "cache"
    with pytest.raises(batch.Usage, match="is inside the log directory"):
        batch.workspace(_args("--cache-dir", str(inside)), str(logdir / "a"))
    assert not inside.exists()


def test_a_cache_bound_needs_a_cache(logdir: Path) -> None:
    with pytest.raises(batch.Usage, match=r"^--cache-max-mb bounds --cache-dir: give both$"):
        batch.workspace(_args("--cache-max-mb", "5"), str(logdir))


def test_a_cache_directory_is_filled_then_read(logdir: Path, tmp_path: Path, decodes: list[str]) -> None:
    cache = tmp_path / "cache"
    first = _summaries(logdir, "--cache-dir", str(cache), "--cache-max-mb", "1")
    assert len(decodes) == 3 and len(list(cache.rglob("*.tba"))) == 3  # one summary per trace
    again = _summaries(logdir, "--cache-dir", str(cache))
    assert again == first and len(decodes) == 3  # nothing parsed the second time
