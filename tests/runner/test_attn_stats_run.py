"""--attn-stats end to end: the runner writes the statistics as an event file in the run, the
engine reads them back into the run summary, ``tb-attn heads`` prints them; --checkpoint loads a
saved Hugging Face model and refuses a missing or incompatible one; other tools' event files
and broken ones are left alone."""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import pytest
from helpers import TINY, profile_run

from runner.cli import main as runner_main
from tb_attn_plugin.cli.main import main as tb_attn_main
from tb_attn_plugin.engine.loader import Loader, resolve_runs
from tb_attn_plugin.types.schema import RunSummary


@pytest.fixture(scope="module")
def stats_logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    logdir = tmp_path_factory.mktemp("attn-stats")
    for impl in ("naive", "sdpa"):
        result = profile_run(logdir, impl, impl=impl, attn_stats=2, mode="inference")
        assert result.status == "ok", result.error
    return logdir


def _summary(logdir: Path, run: str) -> RunSummary:
    (found,) = [r for r in resolve_runs(str(logdir)) if r.name == run]
    return Loader().summarize_run(found)


def test_the_run_holds_an_event_file_and_says_what_it_measured(stats_logdir: Path) -> None:
    meta = json.loads((stats_logdir / "naive" / "tb_attn_run.json").read_text())
    info = meta["attn_stats"]
    assert info["batches"] == 2 and info["weights"] == "random" and info["layers"] == TINY.layers
    assert (stats_logdir / "naive" / info["event_file"]).is_file()
    assert "tfevents" in info["event_file"] and info["stats"][0] == "entropy"
    s = _summary(stats_logdir, "naive")
    assert s.attn_stats is not None and s.attn_stats.weights == "random" and "Random weights" in s.attn_stats.note
    assert len(s.attn_stats.heads) == TINY.layers * TINY.heads
    assert {h.layer for h in s.attn_stats.heads} == set(range(TINY.layers))
    # seq 16: every window (64 and up) is longer than the sequence, so none is recorded and no head
    # is judged local; the other statistics are there.
    assert s.attn_stats.window is None and not any(h.local for h in s.attn_stats.heads)
    assert s.attn_stats.stats == ["entropy", "sink_1", "sink_4", "top_32", "distance"]


def test_statistics_do_not_depend_on_the_implementation(stats_logdir: Path) -> None:
    """Measured on the exact SDPA copy of the same weights: naive and sdpa runs agree."""
    a, b = _summary(stats_logdir, "naive").attn_stats, _summary(stats_logdir, "sdpa").attn_stats
    assert a is not None and b is not None
    for x, y in zip(a.heads, b.heads, strict=True):
        assert (x.layer, x.head) == (y.layer, y.head)
        assert x.values == pytest.approx(y.values, rel=1e-5)


def test_tb_attn_heads_prints_cost_and_statistics(stats_logdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert tb_attn_main(["heads", str(stats_logdir), "--run", "naive"]) == 0
    out = capsys.readouterr().out
    assert "attention statistics at step 0 (random weights)" in out and "Random weights" in out
    assert "entropy" in out and "sink_4" in out and "distance" in out
    assert tb_attn_main(["heads", str(stats_logdir), "--run", "sdpa", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "tb-attn.heads/1" and doc["run"] == "sdpa"
    (worker,) = doc["workers"]
    assert len(worker["heads"]) == TINY.layers * TINY.heads and worker["clock"] == "cpu"
    assert all(0 <= h["values"]["entropy"] <= 1 and h["time_us"] > 0 for h in worker["heads"])
    assert tb_attn_main(["heads", str(stats_logdir), "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert len(rows) == 2 * TINY.layers * TINY.heads and {r["run"] for r in rows} == {"naive", "sdpa"}
    assert tb_attn_main(["heads", str(stats_logdir), "--threshold", "1.5"]) == 2
    assert "--threshold must be a share" in capsys.readouterr().err


def _copy_run(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_built_statistics_make_a_local_heads_finding(stats_logdir: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """A run whose event file says layer 0 head 1 keeps 99.5% within 64 tokens and head 2 is a
    sink: the finding names them, the sink's first tokens, and the command that measures it."""
    from runner.attn_stats import write_events

    run = _copy_run(stats_logdir / "naive", tmp_path / "logdir" / "built")
    for f in run.glob("*tfevents*"):
        f.unlink()
    meta = json.loads((run / "tb_attn_run.json").read_text())
    meta["attn_stats"] = {"weights": "checkpoint"}
    meta["config"]["seq"] = 512  # the length the statistics speak of
    (run / "tb_attn_run.json").write_text(json.dumps(meta))
    heads = TINY.heads
    window = [0.2] * heads
    window[1] = window[2] = 0.995
    sink = [0.05] * heads
    sink[2] = 0.8
    write_events(str(run), {0: {"window_64": window, "sink_4": sink, "entropy": [0.5] * heads}}, step=3)
    s = _summary(tmp_path / "logdir", "built")
    assert s.attn_stats is not None and s.attn_stats.window == 64 and s.attn_stats.weights == "checkpoint"
    assert [(h.head, h.local, h.sink) for h in s.attn_stats.heads if h.local or h.sink] == [(1, True, False),
                                                                                            (2, True, True)]
    (f,) = [f for w in s.workers for f in w.findings if f.id == "local-heads"]
    assert "layer 0 heads 1, 2" in f.explanation and "within 64 tokens" in f.explanation
    assert "StreamingLLM" in f.explanation and "--mask sliding:64" in f.suggestion and "first 4 tokens" in f.suggestion
    assert f.evidence.details["heads"] == 2 and f.evidence.details["sinks"] == 1
    # no head keeps 99.9%: no finding; --window asks for one not recorded: exit 2
    assert tb_attn_main(["heads", str(tmp_path / "logdir"), "--threshold", "0.999", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["workers"][0]["findings"] == []
    assert tb_attn_main(["heads", str(tmp_path / "logdir"), "--window", "128"]) == 2
    assert "no window of 128 recorded" in capsys.readouterr().err


def test_foreign_and_broken_event_files_are_left_alone(stats_logdir: Path, tmp_path: Path) -> None:
    run = _copy_run(stats_logdir / "sdpa", tmp_path / "logdir" / "other")
    for f in run.glob("*tfevents*"):
        f.unlink()
    junk = run / "events.out.tfevents.123.host.broken"
    junk.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00" + b"\xff" * 40)
    from torch.utils.tensorboard import SummaryWriter

    w = SummaryWriter(log_dir=str(run))
    w.add_scalar("loss", 2.0, 1)
    w.close()
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    s = _summary(tmp_path / "logdir", "other")
    assert s.attn_stats is None and not s.errors and s.workers
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before


@pytest.fixture(scope="module")
def gpt2_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    transformers = pytest.importorskip("transformers")
    path = tmp_path_factory.mktemp("gpt2-ckpt")
    cfg = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=4, vocab_size=64, n_positions=256)
    transformers.GPT2LMHeadModel(cfg).save_pretrained(str(path))
    return path


def test_checkpoint_runs_with_its_own_sizes(gpt2_checkpoint: Path, tmp_path: Path) -> None:
    assert runner_main(["--logdir", str(tmp_path), "--model", "hf:gpt2", "--impl", "sdpa", "--seq", "64",
                        "--mode", "inference", "--wait", "0", "--warmup", "1", "--active", "1", "--attn-stats", "1",
                        "--checkpoint", str(gpt2_checkpoint), "--no-progress"]) == 0
    (meta_path,) = tmp_path.glob("*/*/*/tb_attn_run.json")
    meta = json.loads(meta_path.read_text())
    assert (meta["config"]["d_model"], meta["config"]["heads"], meta["config"]["vocab"]) == (32, 4, 64)
    assert meta["attn_stats"]["weights"] == "checkpoint" and meta["config"]["checkpoint"] == str(gpt2_checkpoint)


@pytest.mark.parametrize(("model", "where", "message"), [
    ("hf:gpt2", "missing", "no such directory"),
    ("hf:llama", "ckpt", "holds a gpt2 model, not hf:llama"),
    ("builtin", "ckpt", "--checkpoint loads a Hugging Face model"),
    ("hf:gpt2", "empty", "no config.json"),
])
def test_a_bad_checkpoint_is_one_line_and_exit_2(gpt2_checkpoint: Path, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str], model: str, where: str,
                                                 message: str) -> None:
    (tmp_path / "empty").mkdir()
    path = {"missing": tmp_path / "nope", "ckpt": gpt2_checkpoint, "empty": tmp_path / "empty"}[where]
    logdir = tmp_path / "runs"
    assert runner_main(["--logdir", str(logdir), "--model", model, "--checkpoint", str(path), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
    assert not logdir.exists()
