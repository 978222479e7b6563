"""Per-head attention statistics from TensorBoard event files: ``parse_event_file`` keeps our tags'
values at the newest step, ``merge_event_stats`` joins several files, ``with_head_stats`` puts
them into a new run summary and ``HeadStatsReader`` caches each file's parse by version. The
tests frame small event files with TensorBoard's own writer and check the tables, steps, notes
and summaries against values written in them (hostile files are ``test_head_events_bounds``')."""

from __future__ import annotations

import copy
import logging
import struct
from pathlib import Path

import msgspec
import pytest
from eventfiles import Values, event, records
from tensorboard.compat.proto import event_pb2

from tb_attn_plugin.engine import head_events
from tb_attn_plugin.engine.head_events import (
    BAD_CRC,
    FILE_TOO_LARGE,
    HEADS_DROPPED,
    INTERNAL,
    MAX_EVENT_FILE_BYTES,
    OUT_OF_RANGE,
    UNREADABLE,
    EventStats,
    HeadStatsReader,
    dropped_note,
    merge_event_stats,
    parse_event_file,
    parse_head_stats,
    with_head_stats,
)
from tb_attn_plugin.trace import io
from tb_attn_plugin.trace.io import FileInfo
from tb_attn_plugin.types.schema import RunSummary, WorkerSummary


def _tag(stat: str, layer: int, head: int) -> str:
    return f"attn_stats.{stat}/L{layer}.H{head}"


def _f32(x: float) -> float:
    """``x`` rounded to the nearest float32, as the event file stores it."""
    return float(struct.unpack("<f", struct.pack("<f", x))[0])


HEADER = event_pb2.Event(wall_time=1.0, file_version="brain.Event:2").SerializeToString()


# -- one file ----------------------------------------------------------------------------------

def test_a_small_file_gives_the_values_of_its_newest_step() -> None:
    data = records(
        HEADER,  # every event file starts with one: not a summary
        event(1, [(_tag("entropy", 0, 0), 0.5), ("loss", 2.5)]),
        event(3, [(_tag("entropy", 1, 2), 0.125)]),
        event(3, [(_tag("distance", 1, 2), 40.0), (_tag("window_64", 1, 3), 0.75)]),
        event(2, [(_tag("entropy", 5, 5), 0.5)]),  # older than 3: superseded, not counted as dropped
    )
    got = parse_event_file(data)
    assert got.step == 3
    assert got.table == {1: {2: {"entropy": 0.125, "distance": 40.0}, 3: {"window_64": 0.75}}}
    assert got.values == 3 and dict(got.dropped) == {}


def test_a_newer_step_starts_afresh() -> None:
    data = records(event(1, [(_tag("entropy", 0, 0), 0.5), (_tag("sink_4", 0, 0), 0.25)]),
                    event(2, [(_tag("entropy", 0, 0), 0.75)]))
    got = parse_event_file(data)
    assert (got.step, got.table) == (2, {0: {0: {"entropy": 0.75}}})  # sink_4 was at step 1 only


def test_values_keep_only_the_precision_of_float32() -> None:
    got = parse_event_file(records(event(0, [(_tag("sink_1", 0, 0), 1 / 3)])))
    # The float32 nearest 1/3 is 0.3333333432674408; its shortest decimal as a float32 is 0.33333334.
    assert _f32(1 / 3) == 0.3333333432674408
    assert got.table[0][0]["sink_1"] == 0.33333334


def test_other_tags_tensor_values_and_other_records_are_ignored() -> None:
    tensor = event_pb2.Event(step=4)
    tensor.summary.value.add(tag=_tag("entropy", 0, 7)).tensor.float_val.append(0.5)  # not a simple value
    data = records(
        event(4, [("attn_stats.entropy", 0.5), ("attn_stats.made_up/L0.H0", 0.5),
                   ("x/" + _tag("entropy", 0, 8), 0.5)]),
        tensor.SerializeToString(),
        b"attn_stats.entropy/L0.H9 is not a protobuf \xff\xff\xff",
        event(4, [(_tag("entropy", 0, 0), 0.5)]),
    )
    got = parse_event_file(data)
    assert (got.step, got.table, dict(got.dropped)) == (4, {0: {0: {"entropy": 0.5}}}, {})


def test_empty_and_unrelated_bytes_hold_no_statistics() -> None:
    for data in (b"", b"\x00" * 3, records(HEADER), b"not an event file at all"):
        got = parse_event_file(data)
        assert (got.table, got.step, dict(got.dropped), got.values) == ({}, None, {}, 0)


def test_a_file_still_being_written_keeps_its_complete_records() -> None:
    whole = records(event(1, [(_tag("entropy", 0, 0), 0.5)]))
    partial = records(event(1, [(_tag("entropy", 0, 1), 0.25)]))
    got = parse_event_file(whole + partial[:len(partial) // 2])
    assert (got.step, got.table, dict(got.dropped)) == (1, {0: {0: {"entropy": 0.5}}}, {})


def test_a_value_out_of_range_is_counted_not_kept() -> None:
    got = parse_event_file(records(event(0, [(_tag("entropy", 0, 0), 0.5), (_tag("top_32", 0, 1), 2.0)])))
    assert got.table == {0: {0: {"entropy": 0.5}}} and dict(got.dropped) == {OUT_OF_RANGE: 1}


# -- several files -----------------------------------------------------------------------------

def test_merging_nothing_gives_no_statistics() -> None:
    assert merge_event_stats([]) == EventStats({}, None, {})


def test_the_newest_file_wins_and_every_files_dropped_counts_are_summed() -> None:
    old = EventStats({0: {0: {"entropy": 0.5}}}, 5, {OUT_OF_RANGE: 2})
    new = EventStats({1: {1: {"entropy": 0.25}}}, 9, {OUT_OF_RANGE: 1, BAD_CRC: 3})
    empty = EventStats({}, None, {BAD_CRC: 1})  # a file with no statistics still says what it dropped
    merged = merge_event_stats([old, new, empty])
    assert merged.step == 9 and merged.table == {1: {1: {"entropy": 0.25}}}
    assert dict(merged.dropped) == {OUT_OF_RANGE: 2 + 1, BAD_CRC: 3 + 1}


def test_files_at_the_same_step_are_joined_head_by_head() -> None:
    a = EventStats({0: {0: {"entropy": 0.5}, 1: {"entropy": 0.75}}}, 4, {})
    b = EventStats({0: {0: {"sink_4": 0.25}}, 2: {0: {"distance": 12.0}}}, 4, {})
    before = copy.deepcopy((a.table, b.table))
    merged = merge_event_stats([a, b])
    assert merged.step == 4
    assert merged.table == {0: {0: {"entropy": 0.5, "sink_4": 0.25}, 1: {"entropy": 0.75}}, 2: {0: {"distance": 12.0}}}
    assert merged.values == 4 and dict(merged.dropped) == {}
    assert (a.table, b.table) == before  # the files' own tables are left as they were


def test_only_files_with_statistics_make_a_step() -> None:
    merged = merge_event_stats([EventStats({}, None, {}), EventStats({}, None, {UNREADABLE: 1})])
    assert (merged.table, merged.step, dict(merged.dropped)) == ({}, None, {UNREADABLE: 1})


def test_merging_keeps_the_head_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(head_events, "MAX_HEAD_ROWS", 3)
    a = EventStats({0: {0: {"entropy": 0.5}, 1: {"entropy": 0.5}}}, 1, {})
    b = EventStats({1: {0: {"entropy": 0.5, "sink_1": 0.5}, 1: {"entropy": 0.5}}}, 1, {})
    merged = merge_event_stats([a, b])
    # Three rows fit: L0.H0, L0.H1, L1.H0; L1.H1's one value is dropped.
    assert merged.table == {0: {0: {"entropy": 0.5}, 1: {"entropy": 0.5}}, 1: {0: {"entropy": 0.5, "sink_1": 0.5}}}
    assert dict(merged.dropped) == {HEADS_DROPPED: 1}


def test_parse_head_stats_merges_the_files_bytes() -> None:
    one = records(event(2, [(_tag("entropy", 0, 0), 0.5)]))
    two = records(event(2, [(_tag("entropy", 0, 1), 0.25)]), event(1, [(_tag("entropy", 3, 3), 0.5)]))
    assert parse_head_stats([one, two]) == ({0: {0: {"entropy": 0.5}, 1: {"entropy": 0.25}}}, 2)
    assert parse_head_stats([]) == ({}, None)


# -- the note ----------------------------------------------------------------------------------

def test_the_note_is_empty_when_everything_was_read() -> None:
    assert dropped_note({}) == ""


def test_the_note_lists_the_largest_counts_first_then_by_label() -> None:
    note = dropped_note({"b things": 2, "a things": 2, "c things": 1500})
    assert note == "Not read from the event files: c things (1,500); a things (2); b things (2)."


# -- the run summary ---------------------------------------------------------------------------

def _worker() -> WorkerSummary:
    return WorkerSummary(file="w.1.pt.trace.json", worker="w", span="1", device="cpu", inferred=False,
                         backend="naive", steps=[1], step_count=1, step_cpu_us=100.0, step_device_us=0.0,
                         attention_cpu_us=50.0, attention_device_us=0.0, attention_share_cpu=0.5,
                         attention_share_device=None, layers=[], per_step=[], diagnostics={}, notes=[])


def _summary() -> RunSummary:
    return RunSummary(run="r", metadata={"config": {"seq": 128}}, workers=[_worker()], errors=[])


def _file(name: str, stats: EventStats) -> tuple[FileInfo, EventStats]:
    return FileInfo(f"/logs/r/{name}", 100, 1.0), stats


def test_without_statistics_the_summary_is_returned_as_it_is() -> None:
    summary = _summary()
    assert with_head_stats(summary, [], None) is summary
    assert with_head_stats(summary, [_file("events.out.tfevents.1", EventStats({}, None, {BAD_CRC: 2}))],
                           None) is summary


def test_statistics_make_a_new_summary_and_leave_the_given_one_unchanged() -> None:
    summary = _summary()
    before = msgspec.msgpack.encode(summary)
    stats = EventStats({0: {0: {"entropy": 0.5, "window_64": 0.995, "sink_4": 0.75},
                            1: {"entropy": 0.25, "window_64": 0.5, "sink_4": 0.125}}}, 7, {})
    files = [_file("events.out.tfevents.1", stats), _file("events.out.tfevents.2", EventStats({}, None, {}))]
    got = with_head_stats(summary, files, {"attn_stats": {"weights": "checkpoint"}})
    assert got is not summary and msgspec.msgpack.encode(summary) == before
    assert summary.attn_stats is None and summary.workers[0].findings == []
    a = got.attn_stats
    assert a is not None and (a.step, a.weights, a.window, a.note) == (7, "checkpoint", 64, "")
    assert a.files == ["events.out.tfevents.1"]  # the file without statistics is not listed
    assert a.stats == ["entropy", "sink_4", "window_64"]
    # Head 0 keeps 0.995 >= 0.99 of its mass within 64 tokens and 0.75 >= 0.5 on the first 4: local, a sink.
    assert [(h.layer, h.head, h.local, h.sink) for h in a.heads] == [(0, 0, True, True), (0, 1, False, False)]
    assert a.heads[0].values == {"entropy": 0.5, "window_64": 0.995, "sink_4": 0.75}
    # The worker gets the local-heads finding for its one local head; the rest of the summary is the same.
    (finding,) = got.workers[0].findings
    assert finding.id == "local-heads" and finding.evidence.details["heads"] == 1
    assert (got.run, got.metadata, got.errors) == (summary.run, summary.metadata, summary.errors)


def test_the_weights_come_from_the_metadata_given() -> None:
    stats = [_file("events.out.tfevents.1", EventStats({0: {0: {"entropy": 0.5}}}, 1, {}))]

    def weights(metadata: dict[str, object] | None) -> str:
        got = with_head_stats(_summary(), stats, metadata).attn_stats
        assert got is not None
        return got.weights

    assert weights(None) == "unknown"
    assert weights({}) == "unknown"
    assert weights({"attn_stats": "random"}) == "unknown"  # not a mapping
    assert weights({"attn_stats": {}}) == "unknown"
    assert weights({"attn_stats": {"weights": "random"}}) == "random"
    assert weights({"attn_stats": {"weights": 5}}) == "5"


def test_what_was_dropped_is_added_to_the_statistics_note() -> None:
    stats = EventStats({0: {0: {"entropy": 0.5}}}, 1, {OUT_OF_RANGE: 2})
    other = EventStats({}, None, {BAD_CRC: 1})
    got = with_head_stats(_summary(), [_file("a.tfevents", stats), _file("b.tfevents", other)], None).attn_stats
    assert got is not None
    assert got.note == "Not read from the event files: values out of range (2); records whose checksum is wrong (1)."
    random = with_head_stats(_summary(), [_file("a.tfevents", stats)], {"attn_stats": {"weights": "random"}})
    assert random.attn_stats is not None
    assert random.attn_stats.note.startswith("Random weights: ")
    assert random.attn_stats.note.endswith(". Not read from the event files: values out of range (2).")


# -- the cached reader -------------------------------------------------------------------------

@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths ``HeadStatsReader`` reads, in order."""
    seen: list[str] = []
    real = io.read_small

    def counting(path: str, **kwargs: int) -> bytes:
        seen.append(path)
        return real(path, **kwargs)

    monkeypatch.setattr(io, "read_small", counting)
    return seen


def _write(path: Path, step: int, values: Values) -> FileInfo:
    path.write_bytes(records(event(step, values)))
    return FileInfo(str(path), path.stat().st_size, path.stat().st_mtime)


def test_the_reader_reads_a_version_once(tmp_path: Path, reads: list[str]) -> None:
    info = _write(tmp_path / "events.out.tfevents.1", 3, [(_tag("entropy", 0, 0), 0.5)])
    reader = HeadStatsReader()
    assert reader.cached(info) is None and reads == []
    got = reader.read(info)
    assert (got.step, got.table) == (3, {0: {0: {"entropy": 0.5}}})
    assert reader.read(info) is got and reader.cached(info) is got
    assert reads == [info.path]
    newer = FileInfo(info.path, info.size, info.mtime + 1)  # another version: read again
    assert reader.cached(newer) is None and reader.read(newer).step == 3 and reads == [info.path] * 2


def test_a_file_over_the_size_bound_is_not_read(reads: list[str]) -> None:
    info = FileInfo("/nowhere/events.out.tfevents.1", MAX_EVENT_FILE_BYTES + 1, 1.0)
    got = HeadStatsReader().read(info)
    assert (got.table, got.step, dict(got.dropped)) == ({}, None, {FILE_TOO_LARGE: 1}) and reads == []


def test_a_file_that_cannot_be_read_holds_nothing_and_is_remembered(tmp_path: Path, reads: list[str]) -> None:
    info = FileInfo(str(tmp_path / "gone.tfevents"), 10, 1.0)
    reader = HeadStatsReader()
    got = reader.read(info)
    assert (got.table, got.step, dict(got.dropped)) == ({}, None, {UNREADABLE: 1})
    assert reader.read(info) is got and reads == [info.path]  # the same version is not tried again


def test_a_failing_parse_is_logged_and_counted_as_internal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    info = _write(tmp_path / "events.out.tfevents.1", 1, [(_tag("entropy", 0, 0), 0.5)])

    def broken(data: bytes, **kwargs: object) -> EventStats:
        raise RuntimeError("a bug")

    monkeypatch.setattr(head_events, "parse_event_file", broken)
    with caplog.at_level(logging.ERROR, logger=head_events.__name__):
        got = HeadStatsReader().read(info)
    assert dict(got.dropped) == {INTERNAL: 1} and got.step is None
    assert "reading the statistics of" in caplog.text and "RuntimeError: a bug" in caplog.text


def test_the_reader_forgets_the_least_recently_read_past_its_bound(tmp_path: Path, reads: list[str]) -> None:
    a = _write(tmp_path / "a.tfevents", 1, [(_tag("entropy", 0, 0), 0.5)])
    b = _write(tmp_path / "b.tfevents", 1, [(_tag("entropy", 0, 1), 0.5)])
    reader = HeadStatsReader(max_files=1)
    reader.read(a)
    reader.read(b)
    assert reader.cached(a) is None and reader.cached(b) is not None
    # By bytes: each parse counts 256 + 100 per value, so 355 bytes hold no parse of one value.
    small = HeadStatsReader(max_bytes=355)
    assert small.read(a).values == 1 and small.cached(a) is None
    fits = HeadStatsReader(max_bytes=356)
    assert fits.read(a) is fits.cached(a) and reads.count(a.path) == 3
