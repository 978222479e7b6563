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
from collections.abc import Iterable

__all__ = ["EVENT_FILE_MARK", "MAX_VALUES", "HeadStatsTable", "parse_head_stats"]

#: TensorBoard's event files are named ``events.out.tfevents.<time>.<host>...``.
EVENT_FILE_MARK = "tfevents"
MAX_VALUES = 1 << 20
_TAG = re.compile(r"^attn_stats\.(?P<stat>[a-z_0-9]{1,40})/L(?P<layer>\d{1,4})\.H(?P<head>\d{1,4})$")

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
