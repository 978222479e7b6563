"""Attention statistics per head from TensorBoard event files (``runner --attn-stats`` or
``runner.instrument(model, attn_stats=True)`` write them with TensorBoard's own writer): the
scalars tagged ``attn_stats.<stat>/L<layer>.H<head>``, the newest step of each.

An event file is a TFRecord stream: each record is an 8-byte little-endian length, a 4-byte
CRC of it, the data (an ``Event`` protobuf) and a 4-byte CRC of the data. Pure: it parses bytes the
caller read (local or fsspec), skips every record that is not ours (other tools' event files are
read and ignored, never changed), and stops at a truncated record (a file still being written).
Bounded: at most ``MAX_VALUES`` statistics are kept, numbers only in range.
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Iterable, Mapping
from typing import Any

from tb_attn_plugin.schema import AttnStats, RunSummary
from tb_attn_plugin.trace.events import TraceError
from tb_attn_plugin.trace.io import FileInfo

__all__ = ["MAX_EVENT_FILE_BYTES", "MAX_VALUES", "HeadStatsReader", "HeadStatsTable", "attach_head_stats",
           "parse_head_stats", "relocal"]

#: Values kept per run: 16384 heads (``bounds.MAX_HEAD_ROWS``) of 16 statistics.
MAX_VALUES = 1 << 18
#: Our statistics only (runner/attn_stats.py): a file cannot grow the summary with names of its own.
_TAG = re.compile(r"^attn_stats\.(?P<stat>entropy|distance|sink_\d{1,5}|window_\d{1,6}|top_\d{1,5})"
                  r"/L(?P<layer>\d{1,4})\.H(?P<head>\d{1,4})$")

#: layer -> head -> statistic -> value, at the newest step recorded.
HeadStatsTable = dict[int, dict[int, dict[str, float]]]


def parse_head_stats(files: Iterable[bytes]) -> tuple[HeadStatsTable, int | None]:
    """The statistics of the event files' bytes, each at its newest step, and that step (None:
    no statistic found)."""
    from tensorboard.compat.proto import event_pb2

    newest: dict[tuple[int, int, str], tuple[int, float]] = {}
    for data in files:
        pos = 0
        while pos + 12 <= len(data) and len(newest) < MAX_VALUES:
            (length,) = struct.unpack_from("<Q", data, pos)
            start, end = pos + 12, pos + 12 + length
            if end + 4 > len(data):
                break  # truncated: a file still being written
            pos = end + 4
            try:
                event = event_pb2.Event.FromString(data[start:end])
            except Exception:  # a record that is not an Event (DecodeError and kin): not ours
                continue
            if not event.HasField("summary"):
                continue
            for value in event.summary.value:
                m = _TAG.match(value.tag)
                if m is None or not value.HasField("simple_value") or not math.isfinite(value.simple_value):
                    continue
                key = (int(m["layer"]), int(m["head"]), m["stat"])
                if key not in newest or event.step >= newest[key][0]:
                    newest[key] = (int(event.step), float(value.simple_value))
    if not newest:
        return {}, None
    step = max(s for s, _ in newest.values())
    table: HeadStatsTable = {}
    for (layer, head, stat), (s, v) in newest.items():
        if s == step:
            table.setdefault(layer, {}).setdefault(head, {})[stat] = v
    return table, step


#: An event file larger than this is not read for statistics (a training run's own log can be
#: hundreds of MB; the runner's statistics file is a few KB).
MAX_EVENT_FILE_BYTES = 64 << 20


class HeadStatsReader:
    """Reads a run's event files for per-head statistics, caching each file's parse by its
    version (path, size, mtime) in a small LRU."""

    def __init__(self, max_files: int = 1024) -> None:
        from tb_attn_plugin.cache import LRUCache

        self._parsed: LRUCache[tuple[HeadStatsTable, int | None]] = LRUCache(max_entries=max_files)

    def table(self, files: Iterable[FileInfo]) -> tuple[HeadStatsTable, int | None, list[str]]:
        """The statistics of the newest step across the files, that step, and the files that held some."""
        from tb_attn_plugin.trace import io

        merged: HeadStatsTable = {}
        best: int | None = None
        used: list[str] = []
        for info in files:
            if info.size > MAX_EVENT_FILE_BYTES:
                continue
            key = (info.path, info.size, info.mtime)
            got = self._parsed.get(key)
            if got is None:
                try:
                    got = parse_head_stats([io.read_small(info.path, limit=MAX_EVENT_FILE_BYTES)])
                except (TraceError, OSError):
                    got = ({}, None)
                self._parsed.put(key, got)
            table, step = got
            if step is None:
                continue
            used.append(info.path.rsplit("/", 1)[-1])
            if best is None or step > best:
                merged, best = {layer: dict(heads) for layer, heads in table.items()}, step
            elif step == best:
                for layer, heads in table.items():
                    merged.setdefault(layer, {}).update(heads)
        return merged, best, used


def attach_head_stats(summary: RunSummary, reader: HeadStatsReader, files: Iterable[FileInfo],
                      metadata: Mapping[str, Any] | None) -> None:
    """The run summary's ``attn_stats`` and each worker's ``local-heads`` finding (on copies of the
    workers' summaries: those are cached per file and shared)."""

    from tb_attn_plugin.analysis.heads import attn_stats

    table, step, used = reader.table(files)
    if step is None:
        return
    info = metadata.get("attn_stats") if metadata else None
    weights = str(info.get("weights", "unknown")) if isinstance(info, Mapping) else "unknown"
    stats = attn_stats(table, step, weights=weights, files=used)
    if stats is None:
        return
    relocal(summary, stats)


def relocal(summary: RunSummary, stats: AttnStats) -> None:
    """The run's ``attn_stats`` set to ``stats`` and each worker's ``local-heads`` finding redone."""
    import msgspec

    from tb_attn_plugin.analysis.findings import SEVERITIES
    from tb_attn_plugin.analysis.heads import local_heads

    summary.attn_stats = stats
    metadata = summary.metadata
    config = metadata.get("config") if metadata else None
    seq = config.get("seq") if isinstance(config, Mapping) else None
    causal = config.get("causal", True) if isinstance(config, Mapping) else True
    workers = []
    for w in summary.workers:
        found = local_heads(w, stats, seq=seq if type(seq) is int and seq > 0 else None, causal=bool(causal))
        kept = [f for f in w.findings if f.id != "local-heads"]
        if found is not None or len(kept) != len(w.findings):
            findings = sorted(kept + ([found] if found is not None else []),
                              key=lambda f: (SEVERITIES.index(f.severity), f.id, f.evidence.layers))
            w = msgspec.structs.replace(w, findings=findings)
        workers.append(w)
    summary.workers = workers
