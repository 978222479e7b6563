"""The many-file flags (``cli_batch``) on every command that reads runs: gate, heads and strategies
take them as summarize, compare and ranks do, with the same effect and the same errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers import profile_run
from manyruns import write_ranked_run

from tb_attn_plugin.cli.main import main
from tb_attn_plugin.engine import loader as loader_module

RANKS = 2
RUNS = ("naive", "sdpa")
BATCH_FLAGS = ("--jobs", "--executor", "--ranks", "--cache-dir", "--cache-max-mb", "--no-progress")
COMMANDS = ("gate", "heads", "strategies")


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two runs (naive, sdpa; inference, with per-head statistics) of ``RANKS`` ranks each: the
    runner's one trace copied per rank (``write_ranked_run``), its event file beside them."""
    source = tmp_path_factory.mktemp("batch-source")
    root = tmp_path_factory.mktemp("batch")
    for impl in RUNS:
        result = profile_run(source, impl, impl=impl, attn_stats=2, mode="inference")
        assert result.status == "ok", result.error
        write_ranked_run(root / impl, source / impl, RANKS)
        for events in (source / impl).glob("*tfevents*"):
            shutil.copy2(events, root / impl / events.name)
    return root


def _argv(command: str, logdir: Path) -> list[str]:
    """The command on ``logdir``, as JSON; gate on two runs that differ, with tolerances that pass."""
    if command == "gate":
        return ["gate", str(logdir), "--baseline", "naive", "--candidate", "sdpa", "--format", "json",
                "--max-time-regression", "100000%", "--max-memory-regression", "100000%"]
    return [command, str(logdir), "--format", "json"]


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("command", COMMANDS)
def test_help_lists_the_batch_flags(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert all(flag in out for flag in BATCH_FLAGS), out


@pytest.mark.parametrize("command", COMMANDS)
def test_jobs_2_prints_what_jobs_1_prints(logdir: Path, command: str, capsys: pytest.CaptureFixture[str]) -> None:
    serial = _cli(capsys, *_argv(command, logdir), "--jobs", "1", "--no-progress")
    assert serial[0] == 0 and serial[2] == "", serial[2]
    assert _cli(capsys, *_argv(command, logdir), "--jobs", "2", "--no-progress") == serial


@pytest.mark.parametrize("command", COMMANDS)
def test_a_cache_dir_is_written_then_serves_the_next_invocation(
        logdir: Path, tmp_path: Path, command: str, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    first = _cli(capsys, *_argv(command, logdir), "--cache-dir", str(cache))
    assert first[0] == 0 and first[2] == "", first[2]
    assert len(list(cache.rglob("*.tba"))) == len(RUNS) * RANKS

    def no_parse(path: str, **kwargs: object) -> None:
        raise AssertionError(f"parsed {path}")

    monkeypatch.setattr(loader_module, "load_events", no_parse)
    assert _cli(capsys, *_argv(command, logdir), "--cache-dir", str(cache), "--cache-max-mb", "64") == first


@pytest.mark.parametrize("command", COMMANDS)
def test_ranks_limits_the_traces_read(logdir: Path, command: str, capsys: pytest.CaptureFixture[str],
                                      decodes: list[str]) -> None:
    code, out, err = _cli(capsys, *_argv(command, logdir), "--ranks", "0", "--jobs", "1")
    assert code == 0 and err == "", err
    assert sorted(Path(p).parent.name for p in decodes) == sorted(RUNS)
    assert all(Path(p).name.startswith("host_rank0.") for p in decodes)
    if command == "heads":
        body = json.loads(out)
        assert [[w["worker"] for w in run["workers"]] for run in body] == [["host_rank0"]] * len(RUNS)
    code, out, err = _cli(capsys, *_argv(command, logdir), "--ranks", "5")
    side = "baseline: " if command == "gate" else ""
    assert (code, out, err) == (2, "", f"tb-attn: error: {side}no trace of ranks 5 under {logdir}\n")


@pytest.mark.parametrize(("flags", "message"), [
    (["--jobs", "0"], "argument --jobs: must be a whole number of processes, at least 1, got '0'"),
    (["--ranks", "7-3"], "argument --ranks: bad rank range '7-3'"),
    (["--cache-max-mb", "0"], "argument --cache-max-mb: must be a whole number of MiB, at least 1, got '0'"),
    (["--executor", "ray://head:10001"], "error: unknown executor 'ray://head:10001'"),
    (["--cache-max-mb", "5"], "error: --cache-max-mb bounds --cache-dir: give both"),
    (["--cache-dir", "{logdir}/cache"], "is inside the log directory"),
])
@pytest.mark.parametrize("command", ["summarize", "compare", "ranks", *COMMANDS])
def test_a_bad_flag_is_the_same_line_and_exit_2_from_every_command(
        logdir: Path, command: str, flags: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    flags = [f.format(logdir=logdir) for f in flags]
    code, out, err = _bad(capsys, [*_argv(command, logdir), *flags])
    assert code == 2 and out == "" and message in err and err.count("\n") == 1
    # argparse names the subcommand; the rest of the line is summarize's, word for word
    assert err.replace(f"tb-attn {command}:", "tb-attn summarize:") == \
        _bad(capsys, ["summarize", str(logdir), *flags])[2]
    assert not (logdir / "cache").exists()


def _bad(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own errors
        code = int(str(exc.code))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_gate_checks_the_cache_dir_against_both_runs_without_a_logdir(
        logdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Without LOGDIR, --baseline and --candidate are paths: a cache inside either is refused."""
    inside = logdir / "sdpa" / "cache"
    argv = ["gate", "--baseline", str(logdir / "naive"), "--candidate", str(logdir / "sdpa"), "--cache-dir",
            str(inside)]
    code, out, err = _cli(capsys, *argv)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err == f"tb-attn: error: the cache directory {inside} is inside the log directory {logdir / 'sdpa'}, " \
                  "which tb-attn never writes: put the cache elsewhere\n"
    assert not inside.exists()
