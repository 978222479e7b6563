"""One scalar ``Event`` of a TensorBoard event file read from its bytes without protobuf, where it
has the layout TensorBoard's writers give it (``SummaryWriter.add_scalar``): ``wall_time``
(field 1, fixed64), ``step`` (field 2, varint; absent at 0), and a ``summary`` (field 5) of one
``value`` (field 1) holding a ``tag`` (field 1) and a ``simple_value`` (field 2, fixed32). Every
length is checked, so a record this reads is one protobuf reads the same way; any other record
(another layout, more values, a tensor) is None, for protobuf to read. A protobuf object costs
several microseconds a record; this about one (``bench/event_flood.py``).
"""

from __future__ import annotations

import re
import struct

__all__ = ["scalar"]

_LAYOUT = re.compile(rb"(?:\x09[\s\S]{8})?(?:\x10([\x80-\xff]{0,9}[\x00-\x7f]))?"
                     rb"\x2a([\x00-\x7f])\x0a([\x00-\x7f])\x0a([\x00-\x7f])([\x20-\x7e]*)\x15([\s\S]{4})")
_FLOAT = struct.Struct("<f")


def scalar(data: bytes) -> tuple[int, str, float] | None:
    """The (step, tag, simple_value) of one serialized ``Event`` in the writers' layout, else None."""
    m = _LAYOUT.fullmatch(data)
    if m is None:
        return None
    varint, summary, value, tag_len, tag, number = m.groups()
    n = len(tag)
    if tag_len[0] != n or value[0] != n + 7 or summary[0] != n + 9:
        return None
    step = 0
    if varint is not None:
        for i, b in enumerate(varint):
            step |= (b & 0x7F) << (7 * i)
        step &= (1 << 64) - 1  # a varint's bits past 64 are dropped, as protobuf drops them
        if step >= 1 << 63:  # an int64 written as its two's complement
            step -= 1 << 64
    return step, tag.decode("ascii"), _FLOAT.unpack(number)[0]
