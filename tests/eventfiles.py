"""TensorBoard event files for tests, framed by TensorBoard's own writer (not ours: an independent
check of the reader in ``engine/head_events.py`` and ``trace/tfrecord.py``)."""

from __future__ import annotations

import io
from collections.abc import Iterable

from tensorboard.compat.proto import event_pb2
from tensorboard.summary.writer.record_writer import RecordWriter

Values = Iterable[tuple[str, float]]


def event(step: int, values: Values) -> bytes:
    """One ``Event`` at ``step`` holding a scalar per (tag, value), serialized."""
    e = event_pb2.Event(step=step, wall_time=1.0)
    for tag, v in values:
        e.summary.value.add(tag=tag, simple_value=v)
    return e.SerializeToString()


def records(*datas: bytes) -> bytes:
    """``datas`` as TFRecord records: length, its masked CRC-32C, data, its masked CRC-32C."""
    out = io.BytesIO()
    writer = RecordWriter(out)
    for data in datas:
        writer.write(data)
    return out.getvalue()
