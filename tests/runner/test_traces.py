"""Trace files: tensorboard_trace_handler's names, atomic writes and fast gzip."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import torch
from torch.profiler import ProfilerActivity, profile
from torch_tb_profiler.consts import WORKER_PATTERN

from runner.traces import TRACE_FILE_RE, default_worker_name, trace_handler


def _finished_profile() -> profile:
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        torch.randn(8, 8) @ torch.randn(8, 8)
    return prof


@pytest.mark.parametrize("use_gzip", [False, True])
def test_names_match_the_handler_and_content_is_a_trace(tmp_path: Path, use_gzip: bool) -> None:
    prof = _finished_profile()
    written: list[Path] = []
    trace_handler(tmp_path, "host_rank0", use_gzip=use_gzip, on_written=written.append)(prof)
    (path,) = tmp_path.iterdir()
    assert written == [path]
    m = TRACE_FILE_RE.match(path.name)
    assert m and m.group(1) == "host_rank0"
    assert WORKER_PATTERN.match(path.name).group(1) == "host_rank0"  # torch-tb-profiler agrees
    assert path.name.endswith(".pt.trace.json.gz" if use_gzip else ".pt.trace.json")
    raw = gzip.decompress(path.read_bytes()) if use_gzip else path.read_bytes()
    events = json.loads(raw)["traceEvents"]
    assert any(e.get("name") == "aten::matmul" and "Input Dims" in e.get("args", {}) for e in events)


class _FailingProfile:
    """Writes half a trace, then fails, as a full disk or a Ctrl-C would."""

    def __init__(self, exc: BaseException, seen: list[list[str]]) -> None:
        self.exc, self.seen = exc, seen

    def export_chrome_trace(self, path: str) -> None:
        Path(path).write_text('{"traceEvents": [')
        self.seen.append(sorted(p.name for p in Path(path).parent.iterdir()))
        raise self.exc


@pytest.mark.parametrize("exc", [OSError(28, "No space left on device"), KeyboardInterrupt()])
def test_failed_write_leaves_nothing_and_partial_file_is_never_visible(tmp_path: Path, exc: BaseException) -> None:
    seen: list[list[str]] = []
    handler = trace_handler(tmp_path, "w", use_gzip=True)
    with pytest.raises(type(exc)):
        handler(_FailingProfile(exc, seen))  # type: ignore[arg-type]
    (during,) = seen
    assert during and not any(TRACE_FILE_RE.match(n) or WORKER_PATTERN.match(n) for n in during)
    assert all(n.startswith(".") for n in during)
    assert list(tmp_path.iterdir()) == []


def test_worker_names_have_no_dots() -> None:
    assert "." not in default_worker_name()
    assert default_worker_name(3).endswith("_rank3")
