"""Which ``*.json[.gz]`` files are torch.profiler traces, by their heads: the decision
(``kineto.is_kineto_head``) on Kineto's headers and events of every generation and on other
people's JSON, every real trace we hold renamed as Accelerate and ``export_chrome_trace`` name
them, and ``sniff.Verdicts``, which reads each file version's head once.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path

import pytest
from helpers import HAND_TRACES, SHARED_TRACES

from tb_attn_plugin.trace import io
from tb_attn_plugin.trace.discover import candidates, find_runs
from tb_attn_plugin.trace.events import ReadError, TraceError
from tb_attn_plugin.trace.io import FileInfo
from tb_attn_plugin.trace.kineto import is_kineto_head
from tb_attn_plugin.trace.sniff import HEAD_BYTES, Verdicts

REAL_TRACES = sorted(SHARED_TRACES.glob("*/*.json.gz")) + sorted(
    (SHARED_TRACES.parent / "production-traces").glob("*.json.gz"))

CPU_OP = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 1}


def _json(obj: object) -> bytes:
    return json.dumps(obj, indent=1).encode()


# -- the decision -------------------------------------------------------------------------------

@pytest.mark.parametrize("head", [
    _json({"schemaVersion": 1, "deviceProperties": [], "traceEvents": [CPU_OP]}),
    _json({"schemaVersion": 1, "computeProperties": []}),  # cut before the events: the header says it
    _json({"schemaVersion": 1, "distributedInfo": {"rank": 0}}),
    b'{"schemaVersion":1,"record_shapes":1,"traceEvents":[{"ph":"X","cat":"cpu_op"}]}',  # minified
    b"\xef\xbb\xbf \r\n\t" + _json({"schemaVersion": 1, "with_flops": 1}),  # a BOM and whitespace first
    # No schemaVersion near the start (TraceLens writes its metadata first), events of Kineto's categories.
    _json({"metadata": {"notes": "x" * 30_000}, "traceEvents": [CPU_OP]}),
    _json({"traceEvents": [{"ph": "X", "cat": "Operator", "name": "aten::mm"}]}),  # 2021's capitals
    _json({"traceEvents": [{"ph": "X", "cat": "Kernel", "name": "k"}]}),
    _json({"traceEvents": [{"ph": "s", "cat": "ac2g", "id": 1}]}),
    _json({"traceEvents": [{"ph": "f", "cat": "fwdbwd", "id": 1}]}),
    _json({"traceEvents": [{"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)"}]}),
    _json({"traceEvents": [{"ph": "X", "name": "ProfilerStep#3"}]}),  # no category, Kineto's names
    _json({"traceEvents": [{"ph": "i", "name": "[memory]", "args": {"Bytes": 4}}]}),
    _json([{"ph": "M", "name": "process_name"}, CPU_OP]),  # a bare array of events, as old exporters write
])
def test_a_kineto_head_is_a_trace(head: bytes) -> None:
    assert is_kineto_head(head)


@pytest.mark.parametrize("head", [
    b"",
    b"   \n",
    b"\x1f\x8b\x08\x00",  # gzip that was not decompressed
    b"[1, 2, 3, 4]",
    b"not json at all",
    _json({"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "model_type": "llama"}),  # config.json
    _json({"best_metric": None, "global_step": 500, "log_history": [{"loss": 2.1, "step": 10}]}),  # trainer_state
    _json({"version": "1.0", "truncation": None, "model": {"type": "BPE", "vocab": {"a": 0}}}),  # tokenizer.json
    _json({"schema": "tb-attn.run/1", "run": "x", "status": "ok", "config": {"seq": 16}}),  # tb_attn_run.json
    _json({"schemaVersion": 2, "name": "another schema"}),  # a schemaVersion, no Kineto key
    # Other tools' Chrome traces: DevTools, Perfetto's JSON, JAX (events without categories).
    _json({"traceEvents": [{"cat": "devtools.timeline", "name": "RunTask", "ph": "X"},
                           {"cat": "disabled-by-default-devtools.timeline", "name": "Layout", "ph": "X"},
                           {"cat": "v8", "name": "V8.Execute", "ph": "X"}], "metadata": {"source": "DevTools"}}),
    _json({"displayTimeUnit": "ns", "traceEvents": [{"ph": "M", "name": "process_name", "pid": 1},
                                                    {"ph": "X", "name": "jit_train_step", "pid": 1, "ts": 0}]}),
    _json({"traceEvents": []}),
    _json({"notes": 'a string that mentions "cat": "cpu_op"', "traceEvents": [{"name": "x"}]}),  # escaped
    _json({"cat": "cpu_op", "traceEvents": [{"name": "x"}]}),  # a category before the events is no event's
])
def test_other_json_is_not_a_trace(head: bytes) -> None:
    assert not is_kineto_head(head)


@pytest.mark.parametrize("path", sorted(HAND_TRACES.glob("*.json")), ids=lambda p: p.name)
def test_every_hand_written_trace_is_a_trace(path: Path) -> None:
    assert is_kineto_head(path.read_bytes()[:HEAD_BYTES])


def test_the_runners_trace_is_a_trace_from_its_first_bytes(builtin_logdir: Path) -> None:
    (trace,) = (builtin_logdir / "naive").glob("*.pt.trace.json")
    head = trace.read_bytes()[:HEAD_BYTES]
    assert is_kineto_head(head) and is_kineto_head(head[:200])  # the header alone says it


def test_real_traces_are_present() -> None:
    assert len(REAL_TRACES) == 14, "../shared/traces/ (10) and ../shared/production-traces/ (4)"


@pytest.mark.parametrize("path", REAL_TRACES, ids=lambda p: p.name[:40])
def test_every_real_trace_is_a_trace_named_as_accelerate_or_export_chrome_trace_name_it(
        path: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    shutil.copyfile(path, run / "x.json.gz")
    with gzip.open(path) as f:  # uncompressed too: the head and a little more (a truncated copy)
        (run / "profile_0.json").write_bytes(f.read(2 * HEAD_BYTES))
    files = io.list_tree(str(tmp_path))
    assert Verdicts().traces(files) == {str(run / "x.json.gz"), str(run / "profile_0.json")}


# -- Verdicts ------------------------------------------------------------------------------------

@pytest.fixture
def head_reads(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Each batch of heads read (``io.read_heads``), as base names."""
    batches: list[list[str]] = []
    real = io.read_heads

    def counting(paths: list[str], *, limit: int) -> dict[str, bytes | TraceError]:
        assert limit == HEAD_BYTES
        batches.append(sorted(os.path.basename(p) for p in paths))
        return real(paths, limit=limit)

    monkeypatch.setattr(io, "read_heads", counting)
    return batches


def _write(root: Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)


TRACE = _json({"schemaVersion": 1, "deviceProperties": [], "traceEvents": [CPU_OP]})


def test_each_version_of_a_candidate_is_read_once(tmp_path: Path, head_reads: list[list[str]]) -> None:
    _write(tmp_path, {"profile_0.json": TRACE, "config.json": b"{}", "w.1.pt.trace.json": b"{}",
                      "tb_attn_run.json": TRACE, "notes.txt": TRACE})
    verdicts = Verdicts()
    first = verdicts.traces(io.list_tree(str(tmp_path)))
    assert first == {str(tmp_path / "profile_0.json")}
    # Only candidates are read: not a trace by its name, the metadata file or a .txt, and all in one batch.
    assert head_reads == [["config.json", "profile_0.json"]]
    assert verdicts.traces(io.list_tree(str(tmp_path))) == first and len(head_reads) == 1  # remembered
    (tmp_path / "config.json").write_bytes(TRACE + b" ")  # a new version: read again, alone
    assert verdicts.traces(io.list_tree(str(tmp_path))) == {str(tmp_path / "profile_0.json"),
                                                            str(tmp_path / "config.json")}
    assert head_reads[1:] == [["config.json"]]
    assert verdicts.is_trace(io.stat(str(tmp_path / "config.json"))) and len(head_reads) == 2  # the walk's question


def test_a_listing_forgets_the_verdicts_of_files_it_no_longer_lists(tmp_path: Path) -> None:
    _write(tmp_path, {"a.json": TRACE, "b.json": b"{}"})
    verdicts = Verdicts()
    verdicts.traces(io.list_tree(str(tmp_path)))
    assert len(verdicts) == 2
    (tmp_path / "a.json").unlink()
    assert verdicts.traces(io.list_tree(str(tmp_path))) == frozenset() and len(verdicts) == 1


def test_the_walks_verdicts_are_bounded(tmp_path: Path) -> None:
    _write(tmp_path, {f"c{i}.json": b"{}" for i in range(5)})
    verdicts = Verdicts(max_verdicts=2)
    for info in io.list_tree(str(tmp_path)):
        assert not verdicts.is_trace(info)
    assert len(verdicts) == 2  # the oldest forgotten
    verdicts.traces(io.list_tree(str(tmp_path)))
    assert len(verdicts) == 5  # a listing keeps every listed file's verdict, whatever the bound


def test_a_candidate_the_storage_fails_to_give_is_passed_over_and_tried_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    _write(tmp_path, {"profile_0.json": TRACE})
    files = io.list_tree(str(tmp_path))
    real = io.read_heads
    monkeypatch.setattr(io, "read_heads", lambda paths, *, limit: {p: ReadError(f"cannot read {p}: boom")
                                                                    for p in paths})
    verdicts = Verdicts()
    with caplog.at_level("DEBUG", logger="tb_attn_plugin.trace.sniff"):
        assert verdicts.traces(files) == frozenset()
    assert len(verdicts) == 0 and "boom" in caplog.text  # a DEBUG line, no verdict kept
    assert all(r.levelname == "DEBUG" for r in caplog.records)
    monkeypatch.setattr(io, "read_heads", real)
    assert verdicts.traces(files) == {str(tmp_path / "profile_0.json")}


def test_a_fifo_a_link_and_a_bomb_named_json_are_passed_over_without_blocking(tmp_path: Path) -> None:
    logdir = tmp_path / "logdir"
    outside = tmp_path / "outside.json"
    outside.write_bytes(TRACE)
    _write(logdir, {"b.json.gz": gzip.compress(b" " * (16 << 20))})
    os.mkfifo(logdir / "f.json")
    (logdir / "l.json").symlink_to(outside)
    files = io.list_tree(str(logdir))
    assert [os.path.basename(f.path) for f in candidates(files)] == ["b.json.gz"]  # the listing skips the others
    # Swapped in after the listing, a FIFO or a link is still never read: refused at open, at once.
    listed = [*files, FileInfo(str(logdir / "f.json"), 0, 1.0), FileInfo(str(logdir / "l.json"), 1, 1.0)]
    assert Verdicts().traces(listed) == frozenset()
    assert find_runs(str(logdir), files, traces=Verdicts().traces(files)) == []
