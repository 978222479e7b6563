"""``scalar_event.scalar`` reads what protobuf reads, or nothing: events built by TensorBoard's
protobuf with any step, time, tag and value, and any bytes at all (Hypothesis)."""

from __future__ import annotations

import math
import struct

from hypothesis import given, settings
from hypothesis import strategies as st
from tensorboard.compat.proto import event_pb2

from tb_attn_plugin.trace.scalar_event import scalar


def _event(step: int, wall_time: float, values: list[tuple[str, float]]) -> bytes:
    e = event_pb2.Event(step=step, wall_time=wall_time)
    for tag, v in values:
        e.summary.value.add(tag=tag, simple_value=v)
    return e.SerializeToString()


def _same(got: tuple[int, str, float] | None, data: bytes) -> None:
    """``got`` is None, or what protobuf reads from ``data`` (one simple value)."""
    if got is None:
        return
    event = event_pb2.Event.FromString(data)
    (value,) = event.summary.value
    assert value.HasField("simple_value")
    assert (got[0], got[1]) == (event.step, value.tag)
    assert struct.pack("<f", got[2]) == struct.pack("<f", value.simple_value) or (
        math.isnan(got[2]) and math.isnan(value.simple_value))


def test_the_runners_layout_is_read() -> None:
    data = _event(7, 1.5, [("attn_stats.entropy/L3.H12", 0.25)])
    assert scalar(data) == (7, "attn_stats.entropy/L3.H12", 0.25)
    assert scalar(_event(0, 0.0, [("attn_stats.sink_1/L0.H0", 1.0)])) == (0, "attn_stats.sink_1/L0.H0", 1.0)
    assert scalar(_event(-5, 2.0, [("t", 0.5)])) == (-5, "t", 0.5)
    assert scalar(_event(1, 1.0, [("a", 1.0), ("b", 2.0)])) is None  # two values: protobuf's
    assert scalar(b"") is None


@settings(max_examples=400, deadline=None)
@given(st.integers(-(1 << 63), (1 << 63) - 1), st.floats(allow_nan=False), st.text(max_size=140),
       st.floats(width=32))
def test_any_scalar_event_is_read_as_protobuf_reads_it(step: int, wall_time: float, tag: str, value: float) -> None:
    data = _event(step, wall_time, [(tag, value)])
    got = scalar(data)
    _same(got, data)
    if tag.isascii() and tag.isprintable() and 0 < len(tag) < 118:  # an empty tag is not written
        assert got is not None


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=80))
def test_any_bytes_are_read_as_protobuf_reads_them_or_not_at_all(data: bytes) -> None:
    _same(scalar(data), data)


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=1, max_size=12), st.integers(0, 30))
def test_a_scalar_with_bytes_changed_is_read_as_protobuf_reads_it_or_not_at_all(noise: bytes, at: int) -> None:
    data = bytearray(_event(3, 1.0, [("attn_stats.entropy/L1.H2", 0.5)]))
    data[at:at + len(noise)] = noise
    _same(scalar(bytes(data)), bytes(data))
