"""tb-attn-run: bad input, sweeps, metadata, overwriting and Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tracetools import load_trace, trace_files

import runner.session
from runner.cli import main
from runner.metadata import METADATA_FILE

FAST = ["--layers", "1", "--heads", "2", "--d-model", "16", "--seq", "8", "--batch", "1", "--vocab", "32",
        "--wait", "0", "--warmup", "1", "--active", "1", "--no-progress"]


def _meta(run_dir: Path) -> dict[str, object]:
    return json.loads((run_dir / METADATA_FILE).read_text())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--impl", "flashy"], "unknown implementation 'flashy'"),
        (["--model", "hf:t5"], "unknown model 'hf:t5'"),
        (["--frobnicate"], "unrecognized arguments: --frobnicate"),
        (["--heads", "3", "--d-model", "16"], "heads (3) must divide d_model (16)"),
        (["--heads", "4", "--kv-heads", "3", "--d-model", "16"], "kv_heads (3) must divide heads (4)"),
        (["--seq", "0"], "seq must be a positive integer, got 0"),
        (["--seq", "-5"], "seq must be a positive integer, got -5"),
        (["--seq", "abc"], "not a list of int"),
        (["--dtype", "float8"], "unknown dtype 'float8'"),
        (["--model", "hf:bert", "--hf-config", "no_such_key=1"], "unknown BertConfig key(s) in --hf-config: no_such"),
        (["--model", "hf:bert", "--per-head"], "--per-head needs the builtin model"),
        # MLA has one latent for every head, BART no grouped-query heads; neither generates here.
        (["--model", "hf:deepseek-v3", "--kv-heads", "1"], "kv_heads (grouped-query attention) is supported by"),
        (["--model", "hf:bart", "--mode", "generate", "--prompt-len", "4"], "--mode generate runs builtin, hf:gpt2"),
        (["--model", "hf:bart", "--hf-config", "no_such_key=1"], "unknown BartConfig key(s) in --hf-config"),
        (["--active", "0"], "active must be a positive integer"),
        (["--repeats", "0"], "--repeats must be in 1..20, got 0"),
        (["--append", "--overwrite"], "--append adds to runs and --overwrite replaces them: give one"),
        (["--per-head", "--no-scopes"], "--per-head measures each head in its own scope: it needs scopes"),
    ],
)
def test_bad_input_one_line_exit_2_nothing_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    logdir = tmp_path / "runs"
    with pytest.raises(SystemExit) as exit_info:
        raise SystemExit(main(["--logdir", str(logdir), *args]))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("tb-attn-run: error: ") and message in err, err
    assert not logdir.exists()


@pytest.mark.parametrize("logdir", ["/proc/tb-attn-runs", "{tmp}/a-file/runs"])
def test_unwritable_logdir(tmp_path: Path, capsys: pytest.CaptureFixture[str], logdir: str) -> None:
    (tmp_path / "a-file").write_text("not a directory")
    assert main(["--logdir", logdir.format(tmp=tmp_path), *FAST]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "logdir" in err


def test_bad_input_from_the_console_script(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "runner", "--logdir", str(tmp_path / "r"), "--impl", "nope"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]


def test_sweep_grid_names_metadata_and_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["--logdir", str(tmp_path), *FAST, "--impl", "naive,sdpa-efficient", "--seq", "8,16",
               "--dtype", "float32,bfloat16"])
    assert rc == 0  # unsupported is not a failure
    runs = sorted(str(p.parent.relative_to(tmp_path)) for p in tmp_path.rglob(METADATA_FILE))
    assert runs == sorted(f"builtin/{impl}/seq{s}{d}" for impl in ("naive", "sdpa-efficient")
                          for s in (8, 16) for d in ("", "-bfloat16"))
    meta = _meta(tmp_path / "builtin/naive/seq16-bfloat16")
    assert meta["status"] == "ok" and meta["impl"] == "naive" and meta["dtype"] == "bfloat16"
    for key in ("config", "device", "device_name", "torch_version", "cuda_version", "host", "user",
                "git_commit", "started_at", "finished_at", "command", "traces", "scope_grammar"):
        assert key in meta, key
    assert meta["config"]["seq"] == 16 and meta["config"]["layers"] == 1
    assert meta["traces"] == [p.name for p in trace_files(tmp_path / "builtin/naive/seq16-bfloat16")]
    assert _meta(tmp_path / "builtin/sdpa-efficient/seq8")["status"] == "unsupported"
    out = capsys.readouterr().out
    assert "builtin/sdpa-efficient/seq8" in out and "unsupported" in out


def test_failed_configuration_is_recorded_and_sweep_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = runner.session.build_workload

    def fake(spec, cfg, **kw):  # type: ignore[no-untyped-def]
        if cfg.seq == 16:
            raise RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory")
        return real(spec, cfg, **kw)

    monkeypatch.setattr(runner.session, "build_workload", fake)
    rc = main(["--logdir", str(tmp_path), *FAST, "--seq", "8,16,24"])
    assert rc == 1
    failed = _meta(tmp_path / "builtin/naive/seq16")
    assert failed["status"] == "failed" and str(failed["error"]).startswith("out of memory")
    assert _meta(tmp_path / "builtin/naive/seq24")["status"] == "ok"


def test_existing_run_is_kept_unless_overwrite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--logdir", str(tmp_path), *FAST]) == 0
    run_dir = tmp_path / "builtin/naive/seq8"
    first = trace_files(run_dir)
    assert main(["--logdir", str(tmp_path), *FAST]) == 2
    assert "already has traces" in capsys.readouterr().err
    assert trace_files(run_dir) == first
    assert main(["--logdir", str(tmp_path), *FAST, "--overwrite"]) == 0
    second = trace_files(run_dir)
    assert len(second) == 1 and second != first
    assert main(["--logdir", str(tmp_path), *FAST, "--name", "again"]) == 0
    assert trace_files(tmp_path / "again/builtin/naive/seq8")


def test_repeat_writes_one_span_per_cycle_and_gzip(tmp_path: Path) -> None:
    assert main(["--logdir", str(tmp_path), *FAST, "--repeat", "2", "--gzip"]) == 0
    files = trace_files(tmp_path / "builtin/naive/seq8")
    assert len(files) == 2 and all(f.name.endswith(".pt.trace.json.gz") for f in files)
    assert all(load_trace(f)["traceEvents"] for f in files)


def test_interrupt_in_process_keeps_completed_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = runner.session.build_workload

    def interrupt_second(spec, cfg, **kw):  # type: ignore[no-untyped-def]
        if cfg.seq == 16:
            raise KeyboardInterrupt
        return real(spec, cfg, **kw)

    monkeypatch.setattr(runner.session, "build_workload", interrupt_second)
    assert main(["--logdir", str(tmp_path), *FAST, "--seq", "8,16,24"]) == 130
    assert _meta(tmp_path / "builtin/naive/seq8")["status"] == "ok"
    assert _meta(tmp_path / "builtin/naive/seq16")["status"] == "interrupted"
    assert not (tmp_path / "builtin/naive/seq24").exists()


def test_ctrl_c_on_a_real_sweep(tmp_path: Path) -> None:
    """SIGINT at a random point of a real sweep: completed runs stay whole, no partial files."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    args = [sys.executable, "-m", "runner", "--logdir", str(tmp_path), "--layers", "2", "--d-model", "64",
            "--seq", ",".join(str(64 + 16 * i) for i in range(20)), "--active", "3", "--no-progress"]
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    first = tmp_path / "builtin/naive/seq64" / METADATA_FILE
    while time.monotonic() < deadline and proc.poll() is None:
        if first.exists() and _meta(first.parent)["status"] == "ok":
            break
        time.sleep(0.05)
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "interrupted:" in err
    statuses = {str(p.parent.relative_to(tmp_path)): _meta(p.parent)["status"] for p in tmp_path.rglob(METADATA_FILE)}
    assert statuses["builtin/naive/seq64"] == "ok"
    assert set(statuses.values()) <= {"ok", "interrupted"}
    assert list(statuses.values()).count("interrupted") <= 1
    assert not [p for p in tmp_path.rglob("*") if p.name.startswith(".")]
    for run in statuses:
        for f in trace_files(tmp_path / run):
            assert load_trace(f)["traceEvents"]  # every trace file left behind is complete JSON


@pytest.mark.parametrize("model", ["builtin", "hf:gpt2"])
def test_no_scopes_writes_a_trace_as_any_script_would(tmp_path: Path, model: str) -> None:
    """No tb-attn scope in the trace (instrument() is not applied either); the analysis finds the
    attention itself and says it inferred it."""
    from tb_attn_plugin.engine.loader import Loader, resolve_runs
    from tb_attn_plugin.vocab.scopes import is_scope_name

    extra = ["--hf-config", "n_layer=1", "--hf-config", "n_embd=16", "--hf-config", "n_head=2"] if model != "builtin" \
        else []
    assert main(["--logdir", str(tmp_path), *FAST, "--model", model, "--impl", "naive", *extra, "--no-scopes"]) == 0
    run_dir = next(p.parent for p in tmp_path.rglob(METADATA_FILE))
    assert run_dir.parent.name == "naive-unscoped"
    assert _meta(run_dir)["config"]["scopes"] is False  # type: ignore[index]
    (trace,) = trace_files(run_dir)
    names = {e.get("name", "") for e in load_trace(trace)["traceEvents"]}
    assert not any(is_scope_name(n) for n in names)
    (run,) = resolve_runs(str(tmp_path))
    (worker,) = Loader().summarize_run(run).workers
    assert worker.inferred and len(worker.layers) == 1



def test_default_schedule_profiles_five_active_steps() -> None:
    """Five active steps by default (docs/runner.md, "Steps"): a spread over two steps is one
    difference, which cannot tell a slow step from a slow run."""
    from runner.cli import build_parser
    from runner.config import ProfileConfig

    args = build_parser().parse_args(["--logdir", "x"])
    assert (args.wait, args.warmup, args.active, args.repeat) == (1, 1, 5, 1)
    assert ProfileConfig().active == 5 and ProfileConfig().steps == 7


def test_the_demo_plans_one_per_head_run_beside_its_derived_twin(tmp_path: Path) -> None:
    """``--demo`` (nothing profiled here): the sweep README lists, with one per-head run whose
    heads the Heads view shows measured, with their statistics, configured as the plain naive run it
    sits beside."""
    from runner.cli import DEMO_ARGS, build_parser, plan_sweep

    parser = build_parser()
    specs = {s.name: s for a in DEMO_ARGS for s in plan_sweep(parser.parse_args([*a, "--logdir", str(tmp_path)]))}
    builtin = [f"builtin/{impl}/seq{seq}" for impl in ("naive", "naive-inplace", "sdpa-math", "sdpa")
               for seq in (256, 512)]
    assert sorted(specs) == sorted([*builtin, "builtin/naive-per-head/seq256", "hf-gpt2/naive/seq256",
                                    "hf-gpt2/sdpa/seq256", "builtin/flex-sliding128/seq512",
                                    "builtin/naive-sliding128/seq512", "builtin/naive-compiled/seq256",
                                    *(f"strategies/builtin/{impl}/seq{seq}" for seq in (256, 512)
                                      for impl in ("naive", "sdpa", "linear-elu", "performer", "int8-qk")),
                                    *(f"generation/builtin/sdpa/gen-p{p}-n32-{cache}" for p in (128, 512, 2048)
                                      for cache in ("static", "dynamic"))])
    assert {s.cfg.mode for s in specs.values() if s.name.startswith("strategies/")} == {"inference"}
    per_head = [s for s in specs.values() if s.cfg.per_head]
    assert [s.name for s in per_head] == ["builtin/naive-per-head/seq256"]
    twin = specs["builtin/naive/seq256"].cfg
    # ...and it records its heads' attention statistics (the Heads view's statistics, the scatter)
    assert per_head[0].cfg == type(twin)(**{**vars(twin), "per_head": True, "attn_stats": 2})


def test_repeats_are_profiled_in_turns_as_one_runs_parts(tmp_path: Path) -> None:
    """``--repeats 2`` over two implementations: naive, sdpa, naive, sdpa; each run one directory with
    a trace per repeat, and its metadata listing each repeat's window, in order. ``--append`` adds one
    more to a run that exists."""
    assert main(["--logdir", str(tmp_path), "--impl", "naive,sdpa", "--repeats", "2", *FAST]) == 0
    metas = {impl: _meta(tmp_path / "builtin" / impl / "seq8") for impl in ("naive", "sdpa")}
    starts = sorted((r["started_ns"], impl) for impl, m in metas.items() for r in m["repeats"])  # type: ignore[union-attr]
    assert [impl for _, impl in starts] == ["naive", "sdpa", "naive", "sdpa"]
    for impl, m in metas.items():
        assert m["status"] == "ok" and len(m["traces"]) == 2  # type: ignore[arg-type]
        assert [r["status"] for r in m["repeats"]] == ["ok", "ok"]  # type: ignore[union-attr]
        assert all(r["started_ns"] < r["finished_ns"] for r in m["repeats"])  # type: ignore[union-attr]
        spans = sorted(int(p.name.split(".")[1]) for p in trace_files(tmp_path / "builtin" / impl / "seq8"))
        windows = [(r["started_ns"], r["finished_ns"]) for r in m["repeats"]]  # type: ignore[union-attr]
        assert all(lo <= span <= hi for span, (lo, hi) in zip(spans, windows, strict=True))
    assert main(["--logdir", str(tmp_path), "--impl", "sdpa", "--append", *FAST]) == 0
    again = _meta(tmp_path / "builtin" / "sdpa" / "seq8")
    assert len(again["repeats"]) == 3 and len(again["traces"]) == 3  # type: ignore[arg-type]
    assert again["started_at"] == metas["sdpa"]["started_at"]
