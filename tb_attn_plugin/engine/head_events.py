"""Attention statistics per head from TensorBoard event files (``runner --attn-stats`` or
``runner.instrument(model, attn_stats=True)`` write them with TensorBoard's own writer): the
scalars tagged ``attn_stats.<stat>/L<layer>.H<head>``, at the newest step recorded.

An event file is a TFRecord stream: each record is an 8-byte little-endian length, a masked
CRC-32C of it, the data (an ``Event`` protobuf) and a masked CRC-32C of the data
(``tfrecord``). ``parse_event_file`` is pure: it parses bytes the caller read (local or fsspec),
skips every record that is not ours (other tools' event files are read and ignored, never
changed), and stops at a truncated record (a file still being written) or at a length whose
checksum is wrong (the framing after it cannot be trusted). A record whose data checksum is wrong
is skipped.

Cheap per byte (``tfrecord.find_records``): records are walked only up to the last place where
one of our tags appears (one regular-expression search in C finds it), a run of identical records
(filler) is stepped over in one comparison, and only records that hold a tag of ours are checked
(their checksums computed together in numpy) and parsed. So a training run's 60 MB log with no
statistics costs one search and 60 MB of empty records 0.05 s. A record of ours costs about 10 µs
(its checksum, its protobuf, its tag), so what is parsed is bounded per run, all its files
together (``read_run``, the one home of these bounds): ``MAX_RUN_RECORDS`` records holding our
tags (every value one step can keep, one a record, as the runner writes them) and
``MAX_RUN_EVENT_BYTES`` of files, read newest first; past either, a file is read in part or not at
all, and the note says so. ``timeout_s`` bounds a run's reading as a whole. In the tab, a run's
event files are read in one background job (``service``).

Bounded per value, not per record: at most ``MAX_HEAD_ROWS`` (16,384) heads and ``MAX_STATS``
(16) statistics' names; layer and head numbers below ``scopes.MAX_LAYERS`` / ``MAX_HEADS``; a
statistic's token count (``sink_N``, ``window_N``, ``top_N``) and a distance below
``scopes.MAX_CONTEXT``; masses and the (normalized) entropy in [0, 1]; steps in 0..2^31 - 1.
What is not read is counted by reason (``EventStats.dropped``) and said in the statistics' note.
"""

# Not split (over 400 lines): parsing one file, the run's bounds and the merge into its heads apply
# one set of limits and count what they drop in one place.

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np

from tb_attn_plugin.analysis.common.bounds import MAX_HEAD_ROWS, tally
from tb_attn_plugin.analysis.measures.heads import attn_stats, with_attn_stats
from tb_attn_plugin.engine.cache import LRUCache
from tb_attn_plugin.trace import io, tfrecord
from tb_attn_plugin.trace.events import TraceError
from tb_attn_plugin.trace.io import FileInfo
from tb_attn_plugin.trace.scalar_event import scalar
from tb_attn_plugin.trace.version import file_version
from tb_attn_plugin.types.schema import RunSummary
from tb_attn_plugin.vocab.scopes import MAX_CONTEXT, MAX_HEADS, MAX_LAYERS

__all__ = ["BAD_CRC", "BAD_LENGTH", "BAD_NUMBER", "BAD_STEP", "FILE_TOO_LARGE", "HEADS_DROPPED", "INTERNAL",
           "MAX_EVENT_FILE_BYTES", "MAX_RECORD_BYTES", "MAX_RUN_EVENT_BYTES", "MAX_RUN_RECORDS", "MAX_STATS",
           "MAX_STEP", "MAX_VALUES", "OUT_OF_RANGE", "RECORD_TOO_LARGE", "RUN_BYTES", "RUN_FULL", "RUN_RECORDS",
           "STATS_DROPPED", "TIMED_OUT", "UNREADABLE", "EventStats", "HeadStatsReader", "HeadStatsTable",
           "dropped_note", "merge_event_stats", "parse_event_file", "parse_head_stats", "with_head_stats"]

_log = logging.getLogger(__name__)

#: An event file larger than this is not read for statistics (a training run's own log can be
#: hundreds of MB; the runner's statistics file is about 70 bytes a value, 18 MB at most).
MAX_EVENT_FILE_BYTES = 64 << 20
#: A record of ours larger than this is skipped (the runner writes one value per record, about 70 bytes).
MAX_RECORD_BYTES = 16 << 20
#: Statistics' names per run: the runner writes at most 10 (entropy, sink_1, sink_4, five windows,
#: top_32, distance); 16 leave room for other windows, sinks or top-k.
MAX_STATS = 16
#: Values kept per file or run: 16384 heads (``bounds.MAX_HEAD_ROWS``) of 16 statistics.
MAX_VALUES = MAX_HEAD_ROWS * MAX_STATS
#: Records holding our tags parsed per run, all its files together: every value one step can keep
#: (``MAX_VALUES``), one a record as the runner writes them (it writes one step per file).
MAX_RUN_RECORDS = MAX_VALUES
#: Event files read per run, by their stored sizes, newest first: two files at the per-file bound
#: (the runner's largest file is about 18 MB).
MAX_RUN_EVENT_BYTES = 2 * MAX_EVENT_FILE_BYTES
#: Steps as ``ProfilerStep#N`` bounds them (docs/limits.md).
MAX_STEP = (1 << 31) - 1
#: float32 sums of probabilities can land a little above 1: a share up to 1 + this is read as 1.
_SHARE_SLACK = 1e-3

#: Our statistics only (runner/attn_stats.py): a file cannot grow the summary with names of its own.
_TAG = re.compile(r"attn_stats\.(?P<stat>entropy|distance|(?:sink|window|top)_(?P<n>[1-9]\d{0,9}))"
                  r"/L(?P<layer>0|[1-9]\d{0,9})\.H(?P<head>0|[1-9]\d{0,9})")
#: Where a record may hold one of our values (searched in the raw bytes, in C).
_MARK = re.compile(rb"attn_stats\.(?:entropy|distance|sink_|window_|top_)")

#: Why values (or records, or files) were not read: the note's words.
OUT_OF_RANGE = "values out of range"
BAD_NUMBER = "values whose layer, head or token count is out of range"
BAD_STEP = f"values at a step out of 0..{MAX_STEP}"
HEADS_DROPPED = f"values of heads past {MAX_HEAD_ROWS}"
STATS_DROPPED = f"values of statistics past {MAX_STATS} names"
BAD_CRC = "records whose checksum is wrong"
BAD_LENGTH = "event files cut short at a length whose checksum is wrong"
RECORD_TOO_LARGE = f"records over {MAX_RECORD_BYTES >> 20} MiB"
FILE_TOO_LARGE = f"event files over {MAX_EVENT_FILE_BYTES >> 20} MiB"
TIMED_OUT = "event files read only in part (the time limit)"
RUN_RECORDS = f"event files read only in part (the run's limit of {MAX_RUN_RECORDS:,} records of statistics)"
RUN_FULL = f"event files not read (the run's limit of {MAX_RUN_RECORDS:,} records of statistics was reached)"
RUN_BYTES = f"event files not read (the run's limit of {MAX_RUN_EVENT_BYTES >> 20} MiB of event files)"
UNREADABLE = "event files that could not be read"
INTERNAL = "event files whose reading failed (an internal error, logged)"

#: layer -> head -> statistic -> value, at the newest step recorded.
HeadStatsTable = dict[int, dict[int, dict[str, float]]]


@dataclass(frozen=True, slots=True)
class EventStats:
    """What one event file (or a run's files together) holds: ``table`` at ``step`` (None: no
    statistic found), and what was not read, counted by reason (the labels above)."""

    table: HeadStatsTable
    step: int | None
    dropped: Mapping[str, int] = field(default_factory=dict)
    #: Records holding our tags that were parsed (what the run's ``MAX_RUN_RECORDS`` counts).
    records: int = 0

    @property
    def values(self) -> int:
        return sum(len(row) for heads in self.table.values() for row in heads.values())


class _Newest:
    """The values at the newest step seen so far, within the bounds: values at an older step are
    superseded (not counted), a newer step starts afresh, and values past the bounds at this step
    are counted in ``over``."""

    def __init__(self) -> None:
        self.step: int | None = None
        self.table: HeadStatsTable = {}
        self.rows = 0
        self.names: set[str] = set()
        self.over: dict[str, int] = {}

    def at(self, step: int) -> bool:
        """Whether values at ``step`` are kept (starting afresh at a newer step)."""
        if self.step is None or step > self.step:
            self.step, self.table, self.rows, self.names, self.over = step, {}, 0, set(), {}
            return True
        return step == self.step

    def put_one(self, layer: int, head: int, stat: str, value: float) -> None:
        heads = self.table.get(layer)
        row = heads.get(head) if heads is not None else None
        if row is None and self.rows >= MAX_HEAD_ROWS:
            tally(self.over, HEADS_DROPPED)
            return
        if stat not in self.names:
            if len(self.names) >= MAX_STATS:
                tally(self.over, STATS_DROPPED)
                return
            self.names.add(stat)
        if row is None:
            row = self.table.setdefault(layer, {})[head] = {}
            self.rows += 1
        row[stat] = value

    def put(self, layer: int, head: int, values: Mapping[str, float]) -> None:
        heads = self.table.get(layer)
        row = heads.get(head) if heads is not None else None
        if row is None and self.rows >= MAX_HEAD_ROWS:
            tally(self.over, HEADS_DROPPED, len(values))
            return
        if self.names.issuperset(values):
            kept: Mapping[str, float] = values
        else:
            kept = {}
            for stat, value in values.items():
                if stat in self.names or len(self.names) < MAX_STATS:
                    self.names.add(stat)
                    kept[stat] = value
                else:
                    tally(self.over, STATS_DROPPED)
            if not kept:
                return
        if row is None:
            row = self.table.setdefault(layer, {}).setdefault(head, {})
            self.rows += 1
        row.update(kept)

    def result(self, dropped: dict[str, int]) -> EventStats:
        """The table, each value written with the digits its float32 holds and no more (the
        shortest decimal that reads back as the same float32: 0.3, not 0.30000001192092896)."""
        for heads in self.table.values():
            for row in heads.values():
                for stat, value in row.items():
                    row[stat] = float(str(np.float32(value)))
        for label, n in self.over.items():
            tally(dropped, label, n)
        return EventStats(self.table, self.step, dropped)


def _value(m: re.Match[str], value: float) -> tuple[int, int, float] | str:
    """A value's layer, head and value as kept, or why it is not kept."""
    layer, head, n = int(m["layer"]), int(m["head"]), m["n"]
    if layer >= MAX_LAYERS or head >= MAX_HEADS or (n is not None and int(n) >= MAX_CONTEXT):
        return BAD_NUMBER
    if not math.isfinite(value) or value < 0:
        return OUT_OF_RANGE
    if m["stat"] == "distance":  # tokens
        return (layer, head, value) if value < MAX_CONTEXT else OUT_OF_RANGE
    # masses, shares and the entropy (over its maximum, log of the keys): shares of 1
    return (layer, head, min(value, 1.0)) if value <= 1.0 + _SHARE_SLACK else OUT_OF_RANGE


def parse_event_file(data: bytes, *, timeout_s: float | None = None, deadline: float | None = None,
                     max_records: int = MAX_RUN_RECORDS) -> EventStats:
    """The statistics of one event file's bytes, at the newest step it records, and what was not
    read. Never raises on any input; ``timeout_s`` or ``deadline`` (``time.monotonic``) bounds the
    time and ``max_records`` the records of ours parsed (what was read by then is kept)."""
    from tensorboard.compat.proto import event_pb2

    if timeout_s is not None:
        deadline = min(deadline or math.inf, time.monotonic() + timeout_s)
    dropped: dict[str, int] = {}
    found = tfrecord.find_records(data, _MARK, max_bytes=MAX_RECORD_BYTES, deadline=deadline,
                                  max_records=max_records)
    for label, n in ((BAD_LENGTH, found.cut), (RECORD_TOO_LARGE, found.too_large), (TIMED_OUT, found.timed_out),
                     (RUN_RECORDS, found.capped)):
        if n:
            dropped[label] = int(n)
    newest = _Newest()
    parse = event_pb2.Event.FromString
    for i, (start, length, good) in enumerate(tfrecord.checked(data, found)):
        if not good:
            tally(dropped, BAD_CRC)
            continue
        record = data[start:start + length]
        one = scalar(record)  # the writers' layout, without protobuf: most records
        if one is not None:
            _add_one(newest, one[0], one[1], one[2], dropped)
        else:
            try:
                event = parse(record)
            except Exception:  # a record that is not an Event (DecodeError and kin): not ours
                continue
            if event.HasField("summary"):
                for value in event.summary.value:
                    if value.HasField("simple_value"):
                        _add_one(newest, event.step, value.tag, value.simple_value, dropped)
        if deadline is not None and i & 0xFFF == 0xFFF and time.monotonic() > deadline:
            dropped[TIMED_OUT] = 1  # one file
            break
    stats = newest.result(dropped)
    return EventStats(stats.table, stats.step, stats.dropped, records=len(found.starts))


def _add_one(newest: _Newest, step: int, tag: str, value: float, dropped: dict[str, int]) -> None:
    """One scalar value at ``step``, if it is one of ours."""
    m = _TAG.fullmatch(tag)
    if m is None:
        return
    got = _value(m, value)
    if isinstance(got, str):
        tally(dropped, got)
    elif not 0 <= step <= MAX_STEP:
        tally(dropped, BAD_STEP)
    elif newest.at(step):
        newest.put_one(got[0], got[1], m["stat"], got[2])


def merge_event_stats(files: Iterable[EventStats]) -> EventStats:
    """Several files' statistics as one: the newest step's, within the same bounds; what any file
    did not read is summed."""
    held = list(files)
    dropped: dict[str, int] = {}
    for f in held:
        for label, n in f.dropped.items():
            tally(dropped, label, n)
    steps = [f.step for f in held if f.step is not None]
    if not steps:
        return EventStats({}, None, dropped)
    best = max(steps)
    newest = [f for f in held if f.step == best]
    if len(newest) == 1:
        return EventStats(newest[0].table, best, dropped)  # bounded already
    merged = _Newest()
    merged.at(best)
    for f in newest:
        for layer, heads in f.table.items():
            for head, row in heads.items():
                merged.put(layer, head, row)
    return merged.result(dropped)


def parse_head_stats(files: Iterable[bytes]) -> tuple[HeadStatsTable, int | None]:
    """The statistics of the event files' bytes, at their newest step, and that step (None: no
    statistic found)."""
    merged = merge_event_stats(parse_event_file(data) for data in files)
    return merged.table, merged.step


def dropped_note(dropped: Mapping[str, int]) -> str:
    """What was not read, in words ("" when all was)."""
    if not dropped:
        return ""
    parts = [f"{label} ({n:,})" for label, n in sorted(dropped.items(), key=lambda kv: (-kv[1], kv[0]))]
    return "Not read from the event files: " + "; ".join(parts) + "."


class HeadStatsReader:
    """Reads event files for per-head statistics, caching each file's parse by its version
    (``trace.version``) and the records it was allowed, in an LRU bounded by entries and by the values held."""

    def __init__(self, max_files: int = 1024, max_bytes: int = 128 << 20) -> None:

        # about 100 bytes a value in nested dicts
        self._parsed: LRUCache[EventStats] = LRUCache(max_entries=max_files, max_bytes=max_bytes,
                                                      sizeof=lambda s: 256 + 100 * s.values)

    @staticmethod
    def _key(info: FileInfo, max_records: int) -> tuple[object, int]:
        return (file_version(info), max_records)

    def cached(self, info: FileInfo, *, max_records: int = MAX_RUN_RECORDS) -> EventStats | None:
        """The file's statistics if it was read (no I/O)."""
        return self._parsed.get(self._key(info, max_records))

    def read(self, info: FileInfo, *, timeout_s: float | None = None, deadline: float | None = None,
             max_records: int = MAX_RUN_RECORDS) -> EventStats:
        """The file's statistics, read and parsed unless cached. Never raises: a file that cannot
        be read holds none (and says so); a bug is logged and remembered like a failure."""
        key = self._key(info, max_records)
        got = self._parsed.get(key)
        if got is not None:
            return got
        if info.size > MAX_EVENT_FILE_BYTES:
            got = EventStats({}, None, {FILE_TOO_LARGE: 1})
        else:

            try:
                got = parse_event_file(io.read_small(info.path, limit=MAX_EVENT_FILE_BYTES), timeout_s=timeout_s,
                                       deadline=deadline, max_records=max_records)
            except (TraceError, OSError):
                got = EventStats({}, None, {UNREADABLE: 1})
            except Exception:
                _log.exception("reading the statistics of %s failed", info.path)
                got = EventStats({}, None, {INTERNAL: 1})
        self._parsed.put(key, got)
        return got

    def cached_run(self, files: Sequence[FileInfo]) -> dict[FileInfo, EventStats] | None:
        """A run's statistics as ``read_run`` gives them, if every file it reads is cached (no I/O)."""
        return _within_run_bounds(files, lambda info, records: self.cached(info, max_records=records))

    def read_run(self, files: Sequence[FileInfo], *, timeout_s: float | None = None) -> dict[FileInfo, EventStats]:
        """The statistics of a run's event files, read newest first within the run's bounds
        (``MAX_RUN_EVENT_BYTES`` of files, ``MAX_RUN_RECORDS`` records of ours) and ``timeout_s``
        for them all: a file past a bound holds none, and says why. Never raises."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s

        def read(info: FileInfo, records: int) -> EventStats:
            if deadline is not None and time.monotonic() > deadline and self.cached(info, max_records=records) is None:
                got = EventStats({}, None, {TIMED_OUT: 1})
                self._parsed.put(self._key(info, records), got)  # remembered, like a file read in part
                return got
            return self.read(info, deadline=deadline, max_records=records)

        got = _within_run_bounds(files, read)
        assert got is not None
        return got


def _within_run_bounds(files: Sequence[FileInfo],
                       read: Callable[[FileInfo, int], EventStats | None]) -> dict[FileInfo, EventStats] | None:
    """Each of a run's event files' statistics from ``read(file, records allowed)``, newest first,
    within the run's bounds; None as soon as ``read`` gives None."""
    out: dict[FileInfo, EventStats] = {}
    size_left, records_left = MAX_RUN_EVENT_BYTES, MAX_RUN_RECORDS
    for info in sorted(files, key=lambda f: (-f.mtime, f.path)):
        if info.size > MAX_EVENT_FILE_BYTES:
            out[info] = EventStats({}, None, {FILE_TOO_LARGE: 1})
            continue
        if info.size > size_left:
            out[info] = EventStats({}, None, {RUN_BYTES: 1})
            continue
        if records_left <= 0:
            out[info] = EventStats({}, None, {RUN_FULL: 1})
            continue
        got = read(info, records_left)
        if got is None:
            return None
        out[info] = got
        size_left -= info.size
        records_left -= got.records
    return out


def with_head_stats(summary: RunSummary, files: Sequence[tuple[FileInfo, EventStats]],
                    metadata: Mapping[str, Any] | None) -> RunSummary:
    """The run summary with its ``attn_stats`` from its event files' statistics and each worker's
    ``local-heads`` finding (``analysis.heads.with_attn_stats``); without statistics, the summary
    itself."""
    merged = merge_event_stats(stats for _, stats in files)
    if merged.step is None:
        return summary
    used = [info.path.rsplit("/", 1)[-1] for info, stats in files if stats.step is not None]
    info = metadata.get("attn_stats") if metadata else None
    weights = str(info.get("weights", "unknown")) if isinstance(info, Mapping) else "unknown"
    stats = attn_stats(merged.table, merged.step, weights=weights, files=used)
    if stats is None:
        return summary
    note = dropped_note(merged.dropped)
    if note:
        stats = msgspec.structs.replace(stats, note=f"{stats.note} {note}".strip())
    return with_attn_stats(summary, stats)
