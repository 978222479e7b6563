"""tb-attn summarize: formats, selection and errors."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import HAND_TRACES, SHARED_TRACES, accelerate_run

from tb_attn_plugin.cli.main import main
from tb_attn_plugin.cli.report import CSV_FIELDS
from tb_attn_plugin.types.encoding import printable
from tb_attn_plugin.vocab.scopes import PHASES


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


def test_every_trace_named_as_accelerate_names_them_is_summarized(
    tmp_path: Path, builtin_logdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before, ``summarize`` of Accelerate's profile_<i>.json said "no traces", and in a logdir
    where 3 of 4 traces were named so, it summarized the fourth, said nothing and exited 0."""
    (trace,) = (builtin_logdir / "naive").glob("*.pt.trace.json")
    accelerate_run(tmp_path / "run", trace)
    (tmp_path / "run" / "profile_3.json").unlink()
    shutil.copyfile(trace, tmp_path / "run" / "profile_3.1.pt.trace.json")  # one of the four named as a trace
    assert main(["summarize", str(tmp_path), "--format", "json", "--no-progress"]) == 0
    captured = capsys.readouterr()
    (run,) = json.loads(captured.out)["runs"]
    assert captured.err == "" and run["errors"] == []
    assert [(w["worker"], w["rank"]) for w in run["workers"]] == [(f"profile_{i}", i) for i in range(4)]
    # A trace found by its head that cannot be read whole: its one error line, exit code 1.
    (tmp_path / "run" / "profile_0.json").write_bytes(trace.read_bytes()[:20_000])
    assert main(["summarize", str(tmp_path), "--no-progress"]) == 1
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and "run/profile_0.json: truncated trace" in captured.err
    assert "worker profile_1" in captured.out and "worker profile_0 " not in captured.out


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
        (["summarize", "{tmp}"], "no torch.profiler traces"),
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


# -- hostile names, bad input ------------------------------------------------------------------

TRACES = HAND_TRACES
HOSTILE_RUN = "\x1b]0;pwned\x07"
# What a terminal would act on: C0 (tab and newline too, inside a line), DEL, C1, the bidi
# overrides and isolates, and lone surrogates (which also fail to encode).
_UNSAFE = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _assert_printable(text: str) -> None:
    found = _UNSAFE.findall(text)
    assert not found, f"raw control characters in the output: {found!r}"


@pytest.fixture
def hostile_logdir(tmp_path: Path) -> Path:
    """A run whose name sets the terminal title, with workers named to clear the screen and to
    reverse the text, metadata fields to match, and a run directory whose name is not UTF-8."""
    logdir = tmp_path / "logdir"
    run = logdir / HOSTILE_RUN
    run.mkdir(parents=True)
    shutil.copy(TRACES / "steps.json", run / "w\x1b[2J.1.pt.trace.json")
    shutil.copy(TRACES / "findings_cpu_mixed.json", run / "\u202eevil.1.pt.trace.json")
    (run / "tb_attn_run.json").write_text(json.dumps(
        {"model": "m\x1b[2J", "impl": "\u202eimpl", "dtype": "f\x9b32", "user": "u\x07", "config": {"seq": 16}}))
    bad = os.fsencode(logdir) + b"/bad\xffname"
    os.mkdir(bad)
    for worker in (b"w0", b"w1"):
        shutil.copy(TRACES / "steps.json", bad + b"/" + worker + b".1.pt.trace.json")
    return logdir


def test_printable_escapes_what_a_terminal_acts_on() -> None:
    assert printable("plain é 中 \\x1b") == "plain é 中 \\x1b"
    assert printable("\x1b]0;pwned\x07") == r"\x1b]0;pwned\x07"
    assert printable("a\tb\nc\rd\x00\x7f\x9b") == r"a\x09b\x0ac\x0dd\x00\x7f\x9b"
    assert printable("\u202eevil\u2066x\u2069") == r"\u202eevil\u2066x\u2069"
    assert printable(os.fsdecode(b"bad\xffname")) == r"bad\xffname"  # an undecodable byte
    assert printable("\ud800") == r"\ud800"  # any other lone surrogate
    for c in map(chr, range(0x110000)):
        assert not _UNSAFE.search(printable(c))
    assert printable(printable("\x1b\udcff")) == printable("\x1b\udcff")


@pytest.mark.parametrize("fmt", ["table", "csv"])
def test_summarize_escapes_hostile_names(hostile_logdir: Path, capsys: pytest.CaptureFixture[str], fmt: str) -> None:
    assert main(["summarize", str(hostile_logdir), "--format", fmt]) == 0
    out = capsys.readouterr().out
    _assert_printable(out.replace("\n", ""))
    for shown in (r"\x1b]0;pwned\x07", r"w\x1b[2J", r"\u202eevil", r"bad\xffname"):
        assert shown in out
    if fmt == "csv":
        assert {r["run"] for r in csv.DictReader(io.StringIO(out))} == {r"\x1b]0;pwned\x07", r"bad\xffname"}


@pytest.mark.parametrize("command", [["summarize"], ["compare"], ["ranks", "--run", HOSTILE_RUN]])
def test_json_output_is_ascii_and_keeps_the_names(
    hostile_logdir: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    assert main([command[0], str(hostile_logdir), *command[1:], "--format", "json"]) == 0
    out = capsys.readouterr().out
    assert out.isascii()
    assert HOSTILE_RUN in _strings(json.loads(out))


def _strings(doc: object) -> set[str]:
    if isinstance(doc, dict):
        return set().union(*map(_strings, doc.values()))
    if isinstance(doc, list):
        return set().union(*map(_strings, doc))
    return {doc} if isinstance(doc, str) else set()


def test_compare_and_ranks_tables_escape_hostile_names(hostile_logdir: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", str(hostile_logdir)]) == 0
    out = capsys.readouterr().out
    _assert_printable(out.replace("\n", ""))
    for shown in (r"\x1b]0;pwned\x07", r"\u202eimpl", r"f\x9b32", r"bad\xffname"):
        assert shown in out
    assert main(["ranks", str(hostile_logdir)]) == 0
    out = capsys.readouterr().out
    _assert_printable(out.replace("\n", ""))
    for shown in (r"\x1b]0;pwned\x07", r"w\x1b[2J", r"\u202eevil", r"bad\xffname"):
        assert shown in out


def test_errors_on_stderr_are_escaped(hostile_logdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = hostile_logdir / HOSTILE_RUN
    (run / "x\x1b[2J\u202e.2.pt.trace.json").write_text("not json")
    assert main(["summarize", str(hostile_logdir)]) == 1
    err = capsys.readouterr().err
    _assert_printable(err.replace("\n", ""))
    assert r"\x1b]0;pwned\x07/x\x1b[2J\u202e.2.pt.trace.json: not JSON" in err and err.count("\n") == 1
    assert main(["summarize", str(hostile_logdir), "--run", "\x1b[2Jnope\udcff"]) == 2
    err = capsys.readouterr().err
    _assert_printable(err.replace("\n", ""))
    assert err.count("\n") == 1


def test_names_that_are_not_utf8_print_under_a_strict_encoding(hostile_logdir: Path) -> None:
    """Undecodable bytes reach stdout as surrogates: without escaping, a UTF-8 terminal (strict
    errors) gets a UnicodeEncodeError."""
    bad = os.fsdecode(os.fsencode(hostile_logdir) + b"/bad\xffname")
    env = {**os.environ, "PYTHONIOENCODING": "utf-8:strict"}
    for args in (["summarize", bad], ["gate", "--baseline", bad, "--candidate", bad],
                 ["gate", "--baseline", bad, "--candidate", bad, "--format", "json"],
                 ["summarize", os.path.join(bad, "w0.1.pt.trace.json")]):
        proc = subprocess.run([sys.executable, "-m", "tb_attn_plugin.cli", *args], capture_output=True, text=True,
                              errors="replace", timeout=120, env=env)
        assert proc.returncode == 0, proc.stderr
        assert "Traceback" not in proc.stderr
        _assert_printable(proc.stdout.replace("\n", ""))


@pytest.mark.parametrize("value", ["0", "-1", "lots"])
def test_max_trace_mb_must_be_at_least_1(tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["summarize", str(tmp_path), "--max-trace-mb", value])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--max-trace-mb" in err and "at least 1" in err


# (exit code, a phrase on stderr or stdout[, error lines if not 1]) for each subcommand on each
# kind of bad input.
_BAD_INPUT: dict[str, dict[str, tuple[int, str] | tuple[int, str, int]]] = {
    "missing": {"summarize": (2, "No such file"), "compare": (2, "No such file"), "ranks": (2, "No such file"),
                "gate": (2, "No such file"), "heads": (2, "No such file"), "strategies": (2, "No such file")},
    "empty": {"summarize": (2, "no torch.profiler traces"), "compare": (2, "no torch.profiler traces"),
              "ranks": (2, "no torch.profiler traces"), "gate": (2, "no torch.profiler traces"),
              "heads": (2, "no torch.profiler traces"), "strategies": (2, "no torch.profiler traces")},
    # gate reads the FIFO as baseline and as candidate: two errors, each on its line.
    "fifo": {"summarize": (1, "not a regular file"), "compare": (1, "not a regular file"),
             "ranks": (2, "two or more workers"), "gate": (2, "not a regular file", 2),
             "heads": (1, "not a regular file"), "strategies": (1, "not a regular file")},
    # A run directory named on the command line is the run "."; gate names it by its path.
    "bad-name": {"summarize": (0, "worker w1"), "compare": (0, "baseline: ."), "ranks": (0, "2 ranks"),
                 "gate": (0, r"bad\xffname"), "heads": (0, "no attention statistics"),
                 "strategies": (0, "the error column")},
}


@pytest.mark.parametrize("case", list(_BAD_INPUT))
@pytest.mark.parametrize("command", ["summarize", "compare", "ranks", "gate", "heads", "strategies"])
def test_bad_input_gives_an_exit_code_and_one_line_per_error(
    tmp_path: Path, hostile_logdir: Path, capsys: pytest.CaptureFixture[str], command: str, case: str
) -> None:
    if case == "missing":
        path = str(tmp_path / "missing")
    elif case == "empty":
        path = str(tmp_path / "empty")
        os.mkdir(path)
    elif case == "fifo":
        path = str(tmp_path / "w.1.pt.trace.json")
        os.mkfifo(path)  # opening it must fail at once, not wait for a writer
    else:
        path = os.fsdecode(os.fsencode(hostile_logdir) + b"/bad\xffname")
    argv = ["gate", "--baseline", path, "--candidate", path] if command == "gate" else [command, path]
    code, phrase, *errors = _BAD_INPUT[case][command]
    assert main(argv) == code
    captured = capsys.readouterr()
    assert phrase in captured.out + captured.err
    _assert_printable((captured.out + captured.err).replace("\n", ""))
    lines = captured.err.splitlines()
    assert len(lines) == (errors[0] if errors else int(code != 0))
    assert all(line.startswith("tb-attn: ") for line in lines)


def test_a_link_named_on_the_command_line_is_followed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The no-links rule is for links inside a logdir; a link the user names is the file they mean."""
    link = tmp_path / "latest.pt.trace.json"
    link.symlink_to(TRACES / "steps.json")
    assert main(["summarize", str(link), "--format", "json"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["runs"][0]["workers"][0]["file"] == "latest.pt.trace.json"


def test_a_device_is_refused_before_a_byte_is_read(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["summarize", "/dev/zero"]) == 1  # used to read 4 GiB before refusing
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a regular file (a character device)" in err


def test_summarize_prints_the_roofline(builtin_logdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["summarize", str(builtin_logdir), "--run", "naive-inference"]) == 0
    out = capsys.readouterr().out
    assert "roofline (CPU self time, forward; an upper bound, not a prediction): peaks" in out
    assert "the runner's probes of this machine" in out and "ridge" in out
    header = next(line for line in out.splitlines() if "FLOP/B" in line and "% roof" in line)
    assert header.split() == ["layer", "phase", "bytes", "FLOP/B", "FLOP/s", "B/s", "ceiling", "%", "roof", "bound"]


def test_peak_flags_replace_the_peaks(builtin_logdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["summarize", str(builtin_logdir), "--run", "naive-inference", "--format", "json",
                 "--peak-flops", "2.5T", "--peak-bw", "100 GB/s"]) == 0
    (worker,) = json.loads(capsys.readouterr().out)["runs"][0]["workers"]
    rl = worker["roofline"]
    assert rl["source"] == "given by --peak-flops and --peak-bw"
    assert rl["peak_flops"]["fp32"] == 2.5e12 and rl["peak_bytes_per_s"] == 100e9
    qkv = worker["layers"][0]["phases"][0]
    assert qkv["phase"] == "qkv_proj" and qkv["roof"]["ceiling"] == pytest.approx(
        min(2.5e12, qkv["flops"] / qkv["bytes"] * 100e9))
    assert main(["compare", str(builtin_logdir), "--runs", "naive,sdpa", "--format", "json", "--peak-bw", "1T"]) == 0
    runs = json.loads(capsys.readouterr().out)["compare"]["runs"]
    assert all(r["roofline"]["peak_bytes_per_s"] == 1e12 for r in runs)
    assert all(r["phases"]["qkv_proj"]["roof"]["verdict"] for r in runs)


@pytest.mark.parametrize("value", ["0", "-1T", "fast", "1e400", "nan"])
def test_bad_peaks_exit_2_with_one_line(builtin_logdir: Path, capsys: pytest.CaptureFixture[str], value: str) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["summarize", str(builtin_logdir), f"--peak-flops={value}"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--peak-flops: must be a positive rate" in err


def test_csv_and_compare_carry_the_roofline(builtin_logdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["summarize", str(builtin_logdir), "--run", "sdpa", "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    sdpa = next(r for r in rows if r["phase"] == "sdpa")
    assert float(sdpa["bytes"]) > 0 and float(sdpa["intensity"]) > 0 and sdpa["verdict"].endswith("-bound")
    assert main(["compare", str(builtin_logdir), "--runs", "naive,sdpa"]) == 0
    out = capsys.readouterr().out
    assert "FLOP/B" in out and "% roof" in out and "bound" in out


def _header(out: str) -> str:
    """The line under ``run ...`` that names the device."""
    return next(line for line in out.splitlines() if line.startswith("  device "))


@pytest.mark.parametrize(("trace", "device", "memory"), [
    ("gpu/tracelens_mi300x_bert-small_sdpa-flash.json.gz", "ROCm · AMD Instinct MI300X VF", True),
    ("gpu/tracelens_h100_bert-small_sdpa-flash.json.gz", "CUDA · NVIDIA H100 80GB HBM3", True),
    # No memory events, and ROCm only by its hipLaunchKernel calls.
    ("other/hta_amd_trace_mi250_minitoy_train_ROCm6_2_kineto.json.gz", "ROCm · AMD Radeon Graphics", False),
])
def test_the_header_names_the_gpu_and_memory_not_recorded(trace: str, device: str, memory: bool,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    path = SHARED_TRACES / trace
    if not path.exists():
        pytest.skip(f"{path} is not here")
    assert main(["summarize", str(path)]) == 0
    header = _header(capsys.readouterr().out)
    assert header.startswith(f"  device {device}, backend ")
    assert ("memory not recorded (profile_memory=False)" in header) is not memory


def test_the_header_of_a_cpu_trace_says_cpu(builtin_logdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["summarize", str(builtin_logdir), "--run", "naive"]) == 0
    header = _header(capsys.readouterr().out)
    assert header.startswith("  device cpu, backend naive") and "memory not recorded" not in header
