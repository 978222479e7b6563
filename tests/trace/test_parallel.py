"""Decoding one local trace in several processes (``trace/parallel.py``): when to fork, how many
parts, where the file is cut, and the parts merged into what one process decodes. One short case
forks for real; the others run the pool's work in this process (``_InProcess``), so that a
worker's failure and each layout can be checked without starting processes.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tb_attn_plugin.trace import parallel
from tb_attn_plugin.trace.decode import decode_bytes
from tb_attn_plugin.trace.events import Events, TraceError
from tb_attn_plugin.trace.parallel import PARALLEL_MIN_BYTES, decode_in_parts, may_fork, part_count
from tb_attn_plugin.trace.whole import JUNK

MiB = 1 << 20
TraceBytes = Callable[[str], bytes]


class _InProcess:
    """A stand-in for ``ProcessPoolExecutor``: each task runs at once, here (``fail`` raises instead)."""

    fail: BaseException | None = None

    def __init__(self, max_workers: int, mp_context: Any = None) -> None:
        self.max_workers = max_workers

    def __enter__(self) -> _InProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        future: Future[Any] = Future()
        try:
            if _InProcess.fail is not None:
                raise _InProcess.fail
            future.set_result(fn(*args))
        except BaseException as exc:  # handed to the caller through the future, as a pool does
            future.set_exception(exc)
        return future


@pytest.fixture
def in_process(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[_InProcess]]:
    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", _InProcess)
    monkeypatch.setenv("TB_ATTN_PURE_DECODE", "1")  # the path this module is for
    _InProcess.fail = None
    yield _InProcess
    _InProcess.fail = None


def _same(a: Events, b: Events) -> None:
    assert (a.names, a.tracks, a.shapes, a.meta, a.diagnostics) == (b.names, b.tracks, b.shapes, b.meta, b.diagnostics)
    for col in ("name", "kind", "track", "ts", "dur", "ext", "corr", "seq", "shape", "graph", "mem_ts", "mem_bytes"):
        assert np.array_equal(getattr(a, col), getattr(b, col)), col


def _event_starts(data: bytes) -> list[int]:
    return [i for i in range(len(data)) if data.startswith(b"\n  {", i)]


def _write(tmp_path: Path, data: bytes) -> str:
    path = tmp_path / "w.1.pt.trace.json"
    path.write_bytes(data)
    return str(path)


# -- when and into how many parts -------------------------------------------------------------
def test_may_fork_needs_two_cores_and_no_other_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    monkeypatch.setattr(threading, "active_count", lambda: 1)
    assert may_fork() is True
    monkeypatch.setattr(threading, "active_count", lambda: 2)  # TensorBoard's server runs threads
    assert may_fork() is False
    monkeypatch.setattr(threading, "active_count", lambda: 1)
    for cores in (1, None):  # os.cpu_count() may not know: one core is assumed
        monkeypatch.setattr(os, "cpu_count", lambda cores=cores: cores)
        assert may_fork() is False


def test_part_count_takes_the_cores_this_process_may_run_on(monkeypatch: pytest.MonkeyPatch) -> None:
    if not hasattr(os, "sched_getaffinity"):
        pytest.skip("no CPU affinity here")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2})
    assert part_count(100 * MiB) == 3  # min(3 cores, 8, 100 // 16 = 6)
    assert part_count(40 * MiB) == 2  # min(3, 8, 40 // 16 = 2)


@pytest.mark.parametrize(("size", "cpus", "max_processes", "want"), [
    (PARALLEL_MIN_BYTES, 16, 8, 2),  # 32 MiB: two parts of 16 MiB
    (47 * MiB, 16, 8, 2),  # 47 // 16 = 2
    (48 * MiB, 16, 8, 3),
    (1 << 30, 16, 3, 3),  # the cap given
    (1 << 30, 0, 8, 1),  # no core known: this process alone
    (0, 16, 8, 1),
])
def test_part_count_is_the_least_of_cores_cap_and_16_mib_parts(size: int, cpus: int, max_processes: int,
                                                               want: int) -> None:
    assert part_count(size, cpus=cpus, max_processes=max_processes) == want


# -- where the file is cut ----------------------------------------------------------------------
def test_cuts_are_the_first_event_starts_after_each_share(tmp_path: Path, trace_bytes: TraceBytes) -> None:
    data = trace_bytes("nesting")
    path, size, starts = _write(tmp_path, data), len(data), _event_starts(data)
    cuts = parallel._cuts(path, size, 2)
    # Two parts: the first a little smaller, 0.94 / 2 = 47 % of the file, then the next event start.
    assert cuts == [0, min(s for s in starts if s >= int(0.47 * size)), size]
    three = parallel._cuts(path, size, 3)
    first = size * 0.94 / 3  # 31.3 %; the other two share the rest: 34.3 % each
    targets = [int(first), int(first + (size - first) / 2)]
    assert three == [0, *(min(s for s in starts if s >= t) for t in targets), size]


def test_more_parts_than_event_starts_give_one_part_per_start(tmp_path: Path) -> None:
    data = b'{\n  "traceEvents": [\n  {"a": 1},\n  {"b": 2}\n  ]\n}\n'
    starts = _event_starts(data)
    cuts = parallel._cuts(_write(tmp_path, data), len(data), 8)
    assert cuts[0] == 0 and cuts[-1] == len(data) and set(cuts[1:-1]) <= set(starts)
    assert cuts == sorted(set(cuts))  # no empty part


# -- decoding in parts ----------------------------------------------------------------------
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_trace_decoded_in_two_processes_equals_one(tmp_path: Path, trace_bytes: TraceBytes,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # The pure path: the child decodes its part without the scanner's threads.
    monkeypatch.setenv("TB_ATTN_PURE_DECODE", "1")
    data = trace_bytes("nesting")
    events = decode_in_parts(_write(tmp_path, data), len(data), 2)
    assert events is not None
    _same(events, decode_bytes(data))


@pytest.mark.parametrize(("name", "parts"), [("nesting", 3), ("memory", 4), ("backward", 2), ("odd_values", 3)])
def test_parts_merged_in_order_equal_the_whole(tmp_path: Path, trace_bytes: TraceBytes, in_process: type[_InProcess],
                                               name: str, parts: int) -> None:
    data = trace_bytes(name)
    events = decode_in_parts(_write(tmp_path, data), len(data), parts)
    assert events is not None
    whole = decode_bytes(data)
    if name == "odd_values":  # the lenient path counts the events of each batch it decodes again
        events = _without_lenient(events)
        whole = _without_lenient(whole)
    _same(events, whole)


def _without_lenient(events: Events) -> Events:
    events.diagnostics.pop("events decoded leniently", None)
    return events


def test_a_minified_trace_has_no_event_starts_and_is_left_to_one_process(
        tmp_path: Path, trace_bytes: TraceBytes, in_process: type[_InProcess]) -> None:
    data = json.dumps(json.loads(trace_bytes("nesting")), separators=(",", ":")).encode()
    assert _event_starts(data) == []
    assert decode_in_parts(_write(tmp_path, data), len(data), 4) is None


@pytest.mark.parametrize("failure", [BrokenProcessPool("a worker died"), OSError("gone"),
                                     TraceError("the trace's JSON ends before the file does")])
def test_a_failed_worker_leaves_the_file_to_one_process(tmp_path: Path, trace_bytes: TraceBytes,
                                                        in_process: type[_InProcess], failure: BaseException) -> None:
    in_process.fail = failure
    data = trace_bytes("nesting")
    assert decode_in_parts(_write(tmp_path, data), len(data), 2) is None


def test_a_trace_written_twice_is_read_to_its_end_or_left_to_one_process(
        tmp_path: Path, trace_bytes: TraceBytes, in_process: type[_InProcess]) -> None:
    """In two parts the first copy ends in the last one, which reads its trailer and counts the
    second copy as junk, as one process does. In three (cuts at 31 % and 66 % of the file) it
    ends in the middle part, which cannot know the trailer and refuses: one process reads it."""
    data = trace_bytes("nesting").rstrip()
    path = _write(tmp_path, data + data)
    events = decode_in_parts(path, 2 * len(data), 2)
    assert events is not None and events.diagnostics[JUNK] == len(data)
    _same(events, decode_bytes(data + data))
    assert decode_in_parts(path, 2 * len(data), 3) is None


def test_an_error_in_the_first_part_is_raised(tmp_path: Path, in_process: type[_InProcess]) -> None:
    event = '  {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": %d, "dur": 1}'
    data = ('{\n  "schemaVersion": 1 "x": 2,\n  "traceEvents": [\n'
            + ",\n".join(event % i for i in range(20)) + "\n  ]\n}\n").encode()
    with pytest.raises(TraceError, match="invalid JSON in the trace header"):
        decode_in_parts(_write(tmp_path, data), len(data), 2)


def test_a_bare_array_with_event_starts_is_left_to_one_process(tmp_path: Path, in_process: type[_InProcess]) -> None:
    """``json.dumps(events, indent=2)`` starts every event on a line "  {": the file is cut there,
    but it is not Kineto's layout. The contract: None, and one process decodes it (it is a valid
    trace of 20 events; ``load_events`` on the CLI's pure path raised this error for it)."""
    events = [{"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": i, "dur": 1} for i in range(20)]
    data = json.dumps(events, indent=2).encode()
    assert len(_event_starts(data)) == 20 and len(decode_bytes(data)) == 20
    got = decode_in_parts(_write(tmp_path, data), len(data), 2)
    assert got is None or len(got) == 20
