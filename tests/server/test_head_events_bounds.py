"""Per-head statistics event files are untrusted like traces (issue 34, item 4).

Each defect here failed before its fix: an event file read inside ``/summary`` and ``/runs`` (a
60 MB file of empty records held both for 10 s), values per record past the head-row bound (one
record of 327,680 tags gave a 21.6 MB summary), layer and head numbers past ``scopes``' bounds,
records with wrong checksums read as good, values and steps out of range shown as they are.
Valid files come from TensorBoard's own writer (``EventFileWriter``, ``RecordWriter``); hostile
framing is written by hand. Then Hypothesis builds hostile files (framing, lengths, checksums,
tags, values) and checks that parsing never raises and stays within the bounds.
"""

from __future__ import annotations

import contextlib
import json
import math
import shutil
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from eventfiles import Values, event, records
from helpers import HAND_TRACES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tensorboard.compat.proto import event_pb2
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c as tensorboard_crc
from tensorboard.summary.writer.event_file_writer import EventFileWriter
from webtools import BASE, plugin_client

from tb_attn_plugin.engine import head_events
from tb_attn_plugin.engine.head_events import (
    BAD_CRC,
    BAD_LENGTH,
    BAD_NUMBER,
    BAD_STEP,
    HEADS_DROPPED,
    OUT_OF_RANGE,
    RECORD_TOO_LARGE,
    STATS_DROPPED,
    TIMED_OUT,
    EventStats,
    merge_event_stats,
    parse_event_file,
    parse_head_stats,
)
from tb_attn_plugin.engine.loader import Loader, resolve_runs
from tb_attn_plugin.trace import io
from tb_attn_plugin.trace.tfrecord import masked_crc32c, masked_crc32c_many
from tb_attn_plugin.types.encoding import to_json
from tb_attn_plugin.types.schema import RunSummary
from tb_attn_plugin.vocab.scopes import MAX_HEADS, MAX_LAYERS


def write_events(directory: Path, step: int, values: Values) -> Path:
    """An event file in ``directory`` by TensorBoard's writer, one value per event as the runner writes."""
    before = set(directory.iterdir())
    writer = EventFileWriter(str(directory))
    for name, v in values:
        writer.add_event(event_pb2.Event.FromString(event(step, [(name, v)])))
    writer.close()
    (path,) = set(directory.iterdir()) - before
    return path


def tag(stat: str, layer: int, head: int) -> str:
    return f"attn_stats.{stat}/L{layer}.H{head}"


def rows(stats: EventStats) -> int:
    return sum(len(heads) for heads in stats.table.values())


# -- checksums --------------------------------------------------------------------------------

def test_checksums_agree_with_tensorboards() -> None:
    """Every length around the 64-byte pieces and their power-of-two joins, many records at once."""
    blob = bytes(range(256)) * 400
    lengths = [0, 1, 3, 4, 5, 63, 64, 65, 127, 128, 129, 1000, 4095, 4096, 4097, 70000]
    starts = [7 * i for i in range(len(lengths))]
    want = [tensorboard_crc(blob[s:s + n]) for s, n in zip(starts, lengths, strict=True)]
    assert masked_crc32c_many(blob, starts, lengths).tolist() == want
    assert [masked_crc32c(blob[s:s + n]) for s, n in zip(starts, lengths, strict=True)] == want
    assert masked_crc32c_many(b"", [], []).tolist() == []


# -- defect 1: read in the background, cheap per byte, bounded in time ---------------------

@pytest.fixture
def stats_logdir(tmp_path: Path) -> Path:
    run = tmp_path / "r"
    run.mkdir()
    shutil.copy(HAND_TRACES / "steps.json", run / "w0.1.pt.trace.json")
    write_events(run, 2, [(tag("entropy", 0, 0), 0.5), (tag("window_64", 0, 0), 0.25)])
    return tmp_path


def _in_thread(fn: Any, timeout_s: float) -> Any:
    """``fn()``'s result if it returns within ``timeout_s``; else None (it goes on in the background)."""
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    thread.start()
    thread.join(timeout_s)
    return out[0] if out else None


def test_an_event_file_is_read_in_a_shared_job_and_holds_up_no_request(stats_logdir: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: ``/summary`` read the event file on the request thread, and ``/runs`` read it again
    for its figures; while reading took 10 s, both waited 10 s."""
    gate = threading.Event()
    reads: list[str] = []
    real = io.read_small

    def slow(path: str, **kwargs: Any) -> bytes:
        if "tfevents" in path:
            reads.append(path)
            assert gate.wait(60), "the test never opened the gate"
        return real(path, **kwargs)

    monkeypatch.setattr(io, "read_small", slow)
    client = plugin_client(stats_logdir, wait_s=0.2)
    try:
        assert client.get(f"{BASE}/runs").status_code == 200
        first = _in_thread(lambda: client.get(f"{BASE}/summary?run=r"), 10)
        assert first is not None, "/summary waited for the event file"
        assert first.status_code == 202 and json.loads(first.get_data())["status"] == "loading"
        second = _in_thread(lambda: client.get(f"{BASE}/summary?run=r"), 10)  # joins the same job
        assert second is not None and second.status_code == 202
        listed = _in_thread(lambda: client.get(f"{BASE}/runs"), 10)
        assert listed is not None, "/runs waited for the event file"
        (entry,) = json.loads(listed.get_data())["runs"]
        assert entry["status"] == "ready"  # the trace is parsed; its figures need no statistics
    finally:
        gate.set()
    deadline = time.monotonic() + 30
    while (response := client.get(f"{BASE}/summary?run=r")).status_code == 202:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    stats = json.loads(response.get_data())["attn_stats"]
    assert stats["step"] == 2 and stats["heads"][0]["values"] == {"entropy": 0.5, "window_64": 0.25}
    assert len(reads) == 1  # one read for the file's version, whoever asked


def test_the_cli_reads_event_files_itself(stats_logdir: Path) -> None:
    (run,) = resolve_runs(str(stats_logdir))
    summary = Loader().summarize_run(run)
    assert summary.attn_stats is not None and summary.attn_stats.heads[0].values == {"entropy": 0.5, "window_64": 0.25}
    assert Loader().summarize_run(run, head_stats=None).attn_stats is None


def test_filler_costs_no_parse_per_record() -> None:
    """32 MiB of empty records, then a value: before, each record was a protobuf parse (1.6 s)."""
    empty = records(b"")
    data = empty * ((32 << 20) // len(empty)) + records(event(4, [(tag("entropy", 1, 2), 0.75)]))
    started = time.monotonic()
    got = parse_event_file(data)
    assert time.monotonic() - started < 0.5
    assert (got.table, got.step, dict(got.dropped)) == ({1: {2: {"entropy": 0.75}}}, 4, {})
    # a file with no tag of ours is one search, walked not at all
    assert parse_event_file(empty * 100_000 + b"\x00" * 100).step is None


def test_copies_of_a_record_are_read_once_and_mixed_filler_is_walked() -> None:
    value = records(event(1, [(tag("sink_4", 0, 1), 0.5)]))
    mixed = b"".join(records(bytes([i])) for i in range(256)) * 40 + value * 3000 + records(b"x") * 5000
    got = parse_event_file(mixed + records(event(1, [(tag("sink_1", 0, 1), 0.125)])))
    assert got.table == {0: {1: {"sink_4": 0.5, "sink_1": 0.125}}} and not got.dropped


def test_the_time_limit_ends_the_parse_with_what_it_read() -> None:
    filler = b"".join(records(bytes([i])) for i in range(256)) * 64  # distinct neighbours: walked one by one
    got = parse_event_file(records(event(1, [(tag("entropy", 0, 0), 0.5)])) + filler + records(
        event(1, [(tag("entropy", 0, 1), 0.5)])), timeout_s=0.0)
    assert got.table == {0: {0: {"entropy": 0.5}}} and got.dropped == {TIMED_OUT: 1}


# -- defect 2: bounds per value --------------------------------------------------------------

def test_one_record_of_many_heads_keeps_the_head_row_bound() -> None:
    """Before: the bound was checked per record, so one record of 20,000 heads kept them all."""
    many = [(tag("entropy", layer, head), 0.5) for layer in range(5) for head in range(4000)]
    got = parse_event_file(records(event(3, many)))
    assert rows(got) == 16384 and got.values == 16384
    assert got.dropped == {HEADS_DROPPED: 20000 - 16384}
    assert sorted(got.table) == [0, 1, 2, 3, 4] and len(got.table[4]) == 16384 - 4 * 4000


def test_statistics_names_are_bounded_per_run() -> None:
    names = [f"window_{w}" for w in range(1, 21)]  # 20 names: 16 kept
    got = parse_event_file(records(event(0, [(tag(n, 0, h), 0.5) for h in range(3) for n in names])))
    assert {frozenset(row) for row in got.table[0].values()} == {frozenset(names[:16])}
    assert got.dropped == {STATS_DROPPED: 3 * 4}


def test_merging_files_keeps_the_bounds() -> None:
    """Two files of 10,000 heads each at the same step: 16,384 rows, the rest counted."""
    def file(layer: int) -> EventStats:
        return parse_event_file(records(event(5, [(tag("entropy", layer, h), 0.5) for h in range(2500)]
                                              + [(tag("entropy", layer + 1, h), 0.5) for h in range(2500)]
                                              + [(tag("entropy", layer + 2, h), 0.5) for h in range(2500)]
                                              + [(tag("entropy", layer + 3, h), 0.5) for h in range(2500)])))

    merged = merge_event_stats([file(0), file(10)])
    assert merged.step == 5 and rows(merged) == 16384 and merged.dropped == {HEADS_DROPPED: 20000 - 16384}


def test_the_summary_of_a_hostile_file_is_bounded(tmp_path: Path) -> None:
    """The attacker's file, smaller (20,480 tags in one record; 327,680 made a 21.6 MB summary)."""
    run = tmp_path / "r"
    run.mkdir()
    shutil.copy(HAND_TRACES / "steps.json", run / "w0.1.pt.trace.json")
    many = [(tag("entropy", layer, head), 0.5) for layer in range(4096) for head in range(5)]
    (run / "events.out.tfevents.1.host").write_bytes(records(event(1, many)))
    (found,) = resolve_runs(str(tmp_path))
    summary = Loader().summarize_run(found)
    assert summary.attn_stats is not None and len(summary.attn_stats.heads) == 16384
    assert summary.attn_stats.note == "Not read from the event files: values of heads past 16384 (4,096)."
    assert len(to_json(summary)) < 2 << 20


# -- defect 3: numbers in tags ---------------------------------------------------------------

def test_layer_head_and_token_numbers_are_bounded() -> None:
    """Before: ``L9999.H9999`` was a head, past ``scopes.MAX_LAYERS`` / ``MAX_HEADS``."""
    top_l, top_h = MAX_LAYERS - 1, MAX_HEADS - 1
    got = parse_event_file(records(event(0, [
        (tag("entropy", top_l, top_h), 0.5),
        (tag("entropy", 9999, 9999), 0.5), (tag("entropy", MAX_LAYERS, 0), 0.5),
        (tag("entropy", 0, MAX_HEADS), 0.5), (tag("window_2147483647", 0, 0), 0.5),
        (tag("window_2147483648", 0, 0), 0.5), (tag("sink_9999999999", 0, 0), 0.5),
        ("attn_stats.entropy/L01.H0", 0.5), ("attn_stats.window_0/L0.H0", 0.5),
        ("attn_stats.top_12345678901/L0.H0", 0.5),
        (tag("made_up", 0, 0), 0.5),
    ])))
    assert got.table == {top_l: {top_h: {"entropy": 0.5}}, 0: {0: {"window_2147483647": 0.5}}}
    assert got.dropped == {BAD_NUMBER: 5}  # the others are not our tags at all


# -- defect 4: checksums ---------------------------------------------------------------------

def test_a_record_whose_checksum_is_wrong_is_skipped() -> None:
    """Before: a record whose data was changed after its checksum (0.5 became 0.75) was read."""
    good = records(event(1, [(tag("entropy", 0, 0), 0.5)]))
    changed = bytearray(records(event(1, [(tag("entropy", 0, 1), 0.5)])))
    at = bytes(changed).index(struct.pack("<f", 0.5))
    changed[at:at + 4] = struct.pack("<f", 0.75)
    got = parse_event_file(good + bytes(changed))
    assert got.table == {0: {0: {"entropy": 0.5}}} and got.dropped == {BAD_CRC: 1}


def test_a_length_whose_checksum_is_wrong_ends_the_file() -> None:
    first = records(event(1, [(tag("entropy", 0, 0), 0.5)]))
    second = bytearray(records(event(1, [(tag("entropy", 0, 1), 0.5)])))
    second[8] ^= 0xFF  # the length's checksum
    third = records(event(1, [(tag("entropy", 0, 2), 0.5)]))
    got = parse_event_file(first + bytes(second) + third)
    assert got.table == {0: {0: {"entropy": 0.5}}} and got.dropped == {BAD_LENGTH: 1}


def test_a_record_past_its_size_bound_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(head_events, "MAX_RECORD_BYTES", 200)
    big = records(event(1, [(tag("entropy", 0, h), 0.5) for h in range(20)]))
    got = parse_event_file(records(event(1, [(tag("entropy", 1, 0), 0.5)])) + big)
    assert got.table == {1: {0: {"entropy": 0.5}}} and got.dropped == {RECORD_TOO_LARGE: 1}


# -- defect 5: values and steps in range -----------------------------------------------------

def test_values_and_steps_out_of_range_are_dropped_and_counted(tmp_path: Path) -> None:
    """Before: an entropy of 3.4e38 and a step of 2^63 - 1 were shown as they were."""
    path = write_events(tmp_path, 7, [
        (tag("entropy", 0, 0), 0.5), (tag("sink_4", 0, 0), 1.0005), (tag("distance", 0, 0), 123.25),
        (tag("entropy", 0, 1), 3.4e38), (tag("sink_1", 0, 1), 1.5), (tag("top_32", 0, 1), -0.25),
        (tag("window_64", 0, 1), math.nan), (tag("distance", 0, 1), -1.0), (tag("distance", 0, 2), 3e9),
    ])
    data = path.read_bytes() + records(event((1 << 63) - 1, [(tag("entropy", 0, 3), 0.5)]),
                                       event(-1, [(tag("entropy", 0, 4), 0.5)]))
    got = parse_event_file(data)
    assert got.step == 7
    assert got.table == {0: {0: {"entropy": 0.5, "sink_4": 1.0, "distance": 123.25}}}
    assert got.dropped == {OUT_OF_RANGE: 6, BAD_STEP: 2}
    table, step = parse_head_stats([data])
    assert (table, step) == (got.table, got.step)


def test_values_keep_the_digits_of_their_float32() -> None:
    got = parse_event_file(records(event(0, [(tag("entropy", 0, 0), 0.3)])))
    assert got.table[0][0]["entropy"] == 0.3  # not 0.30000001192092896
    assert json.dumps(got.table[0][0]) == '{"entropy": 0.3}'


def test_the_note_says_what_was_not_read(tmp_path: Path) -> None:
    run = tmp_path / "r"
    run.mkdir()
    shutil.copy(HAND_TRACES / "steps.json", run / "w0.1.pt.trace.json")
    write_events(run, 1, [(tag("entropy", 0, 0), 0.5), (tag("entropy", 0, 1), 7.0)])
    (found,) = resolve_runs(str(tmp_path))
    stats = Loader().summarize_run(found).attn_stats
    assert stats is not None and len(stats.heads) == 1
    assert stats.note == "Not read from the event files: values out of range (1)."


# -- hostile files, generated ----------------------------------------------------------------

FUZZ = settings(max_examples=150, deadline=None, database=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
SMALL_ROWS, SMALL_STATS = 6, 3  # the bounds, lowered so that small examples reach them

huge = st.one_of(st.integers(0, 8), st.sampled_from([MAX_LAYERS - 1, MAX_LAYERS, 9999, 2**31, 2**63 - 1, 10**12]))
stat = st.one_of(st.sampled_from(["entropy", "distance", "made_up", ""]),
                 st.builds("{}_{}".format, st.sampled_from(["sink", "window", "top"]), huge))
any_tag = st.one_of(st.builds("attn_stats.{}/L{}.H{}".format, stat, huge, huge),
                    st.builds("attn_stats.{}/L{}.H{}".format, stat, st.text(max_size=4), st.text(max_size=4)),
                    st.text(max_size=30))
value = st.one_of(st.floats(width=32), st.floats(0, 1, width=32), st.sampled_from([3.4e38, -0.0, 1.0005, 2e9]))
step = st.one_of(st.integers(0, 3), st.sampled_from([2**31 - 1, 2**31, 2**63 - 1, -1, -(2**63)]))
an_event = st.builds(event, step, st.lists(st.tuples(any_tag, value), max_size=12))


@st.composite
def hostile_file(draw: st.DrawFn) -> bytes:
    """Records of ours and not, some damaged (a checksum, a length, a cut), between garbage."""
    out = bytearray()
    for _ in range(draw(st.integers(0, 8))):
        kind = draw(st.sampled_from(["event", "event", "empty", "garbage", "bad-data-crc", "bad-length-crc",
                                     "lying-length", "copies"]))
        rec = bytearray(records(draw(an_event)))
        if kind == "empty":
            rec = bytearray(records(b""))
        elif kind == "garbage":
            rec = bytearray(draw(st.binary(max_size=40)))
        elif kind == "bad-data-crc":
            rec[-1] ^= 1
        elif kind == "bad-length-crc":
            rec[9] ^= 1
        elif kind == "lying-length":
            rec[0:8] = struct.pack("<Q", draw(st.sampled_from([0, 1, len(rec), 2**40, 2**64 - 1])))
        elif kind == "copies":
            rec = rec * draw(st.integers(2, 200))
        out += rec
    if out and draw(st.booleans()):
        del out[draw(st.integers(0, len(out) - 1)):]
    return bytes(out)


def _check(stats: EventStats, rows_bound: int, stats_bound: int) -> None:
    assert rows(stats) <= rows_bound
    names = {name for heads in stats.table.values() for row in heads.values() for name in row}
    assert len(names) <= stats_bound
    assert stats.step is None or 0 <= stats.step <= 2**31 - 1
    assert (stats.step is None) == (not stats.table)
    for layer, heads in stats.table.items():
        assert 0 <= layer < MAX_LAYERS
        for head, row in heads.items():
            assert 0 <= head < MAX_HEADS and row
            for name, v in row.items():
                assert math.isfinite(v) and 0 <= v and (v <= 1 or name == "distance") and v < 2**31
    assert all(n > 0 for n in stats.dropped.values())


@contextlib.contextmanager
def small_bounds() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(head_events, "MAX_HEAD_ROWS", SMALL_ROWS)
        mp.setattr(head_events, "MAX_STATS", SMALL_STATS)
        yield


@FUZZ
@given(st.lists(hostile_file(), min_size=1, max_size=3))
def test_hostile_files_parse_within_the_bounds(files: list[bytes]) -> None:
    with small_bounds():
        parsed = [parse_event_file(data) for data in files]
        for got in parsed:
            _check(got, SMALL_ROWS, SMALL_STATS)
        _check(merge_event_stats(parsed), SMALL_ROWS, SMALL_STATS)


@FUZZ
@given(hostile_file())
def test_hostile_files_give_a_bounded_summary(data: bytes) -> None:
    """Through the loader's summary: never raises, bounded, and the note counts what was dropped."""
    from tb_attn_plugin.engine.head_events import with_head_stats
    from tb_attn_plugin.trace.io import FileInfo

    with small_bounds():
        got = parse_event_file(data)
        summary = RunSummary(run="r", metadata=None, workers=[], errors=[])
        summary = with_head_stats(summary, [(FileInfo("/x/events.out.tfevents.1", len(data), 0.0), got)], None)
    stats = summary.attn_stats
    assert (stats is None) == (got.step is None)
    if stats is not None:
        assert len(stats.heads) <= SMALL_ROWS and len(stats.stats) <= SMALL_STATS
        assert len(to_json(summary)) < 4096
        assert ("Not read from the event files" in stats.note) == bool(got.dropped)
