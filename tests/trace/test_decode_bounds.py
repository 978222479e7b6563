"""Filler squeezed out while decoding: JSON meaning kept, strings untouched, each byte read once.

``test_hostile_json.py`` bounds the memory of whole files in subprocesses; these tests check, on
small random documents, that what ``Filler`` does to a buffer changes nothing a reader sees.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator
from typing import Any

import pytest

from tb_attn_plugin.trace import filler as filler_module
from tb_attn_plugin.trace.decode import decode, decode_bytes
from tb_attn_plugin.trace.filler import _FILLER_RUN, Filler

_WS = " \n\t\r"


def _ws(r: random.Random) -> str:
    """Whitespace between two tokens: none, a little, or a run long enough to be squeezed."""
    kind = r.random()
    if kind < 0.4:
        return ""
    if kind < 0.7:
        return r.choice([" ", "\n  ", "\n    ", "\n"])
    run = "".join(r.choice(_WS) if r.random() < 0.2 else " " for _ in range(r.randrange(1, 3 * _FILLER_RUN)))
    return run + r.choice(["", "\n  ", "\n ", "\n   ", "\n\t "])


def _name(r: random.Random) -> str:
    """An op name; some hold runs of spaces long enough to look like filler, and quotes and
    backslashes that a string scanner must not take for a string's end."""
    parts = [r.choice(["aten::mm", 'a "quoted" b', "back\\slash\\", "\\", '\\"', "ü", "x"])
             for _ in range(r.randrange(1, 4))]
    if r.random() < 0.3:
        parts.insert(r.randrange(len(parts) + 1), " " * r.randrange(1, 3 * _FILLER_RUN))
    return "".join(parts)


def _document(r: random.Random, events: int, *, kineto: bool = True) -> str:
    """A trace in Kineto's layout (events on lines of their own, two spaces in) or another one
    (decoded whole), with whitespace of every size wherever JSON allows it."""
    def obj(pairs: list[tuple[str, Any]]) -> str:
        return "{" + _ws(r) + ("," + _ws(r)).join(
            json.dumps(k) + _ws(r) + ":" + _ws(r) + json.dumps(v) + _ws(r) for k, v in pairs) + "}"

    body = ("," + _ws(r) + ("\n  " if kineto else "")).join(
        obj([("ph", "X"), ("cat", "cpu_op"), ("name", _name(r)), ("pid", 1), ("tid", 1), ("ts", i), ("dur", 1)])
        for i in range(events))
    return ("{" + _ws(r) + '"schemaVersion"' + _ws(r) + ":" + _ws(r) + "1," + _ws(r) + '"traceEvents": ['
            + ("\n  " if kineto else _ws(r)) + body + _ws(r) + "]" + _ws(r) + "," + _ws(r) + '"traceName"'
            + _ws(r) + ":" + _ws(r)
            + json.dumps("a  " + " " * r.randrange(2 * _FILLER_RUN)) + _ws(r) + "}" + _ws(r))


def _chunks(data: bytes, r: random.Random) -> Iterator[bytes]:
    pos = 0
    while pos < len(data):
        n = r.choice([1, 7, 100, 1000, 5000])
        yield data[pos: pos + n]
        pos += n


def _squeezed(data: bytes, r: random.Random) -> bytes:
    buf, filler = bytearray(), Filler()
    for chunk in _chunks(data, r):
        buf += chunk
        filler.squeeze(buf)
    return bytes(buf)


@pytest.mark.parametrize("seed", range(40))
def test_squeezing_keeps_the_json_and_the_event_starts(seed: int) -> None:
    r = random.Random(seed)
    data = _document(r, 30).encode()
    squeezed = _squeezed(data, r)
    assert json.loads(squeezed) == json.loads(data)
    assert squeezed.count(b"\n  {") == data.count(b"\n  {")
    # What is left of each run outside strings is shorter than those always squeezed.
    without_strings = re.sub(rb'"(?:[^"\\]|\\.)*"', b'""', squeezed)
    assert not re.search(rb"[ \t\r\n]{%d}" % _FILLER_RUN, without_strings)


@pytest.mark.parametrize("kineto", [True, False], ids=["kineto", "other layout"])
@pytest.mark.parametrize("seed", range(30))
def test_decoding_with_filler_equals_decoding_without(seed: int, kineto: bool) -> None:
    """Small batches and chunks, so that filler and long names pass through every path."""
    r = random.Random(seed)
    data = _document(r, 30, kineto=kineto).encode()
    want = decode_bytes(json.dumps(json.loads(data), separators=(",", ":")).encode())  # no filler, decoded whole
    got = decode(_chunks(data, r), batch_bytes=r.choice([64, 512, 4096]))
    assert got.names == want.names
    assert got.name.tolist() == want.name.tolist() and got.ts.tolist() == want.ts.tolist()
    assert got.meta.extra == want.meta.extra


class _Counting:
    """A compiled pattern whose ``match`` adds up the bytes it consumes, and fails past ``limit``
    (at once, rather than after the minutes a quadratic scan would take)."""

    def __init__(self, pattern: re.Pattern[bytes], limit: int) -> None:
        self.pattern, self.limit, self.consumed = pattern, limit, 0

    def match(self, buf: Any, pos: int, endpos: int) -> re.Match[bytes] | None:
        m = self.pattern.match(buf, pos, endpos)
        if m is not None:
            self.consumed += m.end() - pos
            assert self.consumed <= self.limit, "bytes scanned again"
        return m


def test_strings_are_read_once_however_many_runs_they_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    """A name of 20,000 runs of spaces (which look like filler until read as a string): its
    bytes are scanned once in all, not once per run (which would be quadratic)."""
    name = ("x" + " " * (2 * _FILLER_RUN)) * 20_000
    event = '  {"ph": "X", "cat": "cpu_op", "name": %s, "pid": 1, "tid": 1, "ts": 1, "dur": 1}'
    data = ('{\n  "traceEvents": [\n' + event % json.dumps(name) + ",\n" + event % '"b"' + "\n  ]\n}\n").encode()
    for k in ("_OUTSIDE", "_INSIDE"):
        monkeypatch.setattr(filler_module, k, _Counting(getattr(filler_module, k), len(data)))
    events = decode((data[i: i + (1 << 20)] for i in range(0, len(data), 1 << 20)), batch_bytes=1 << 20)
    assert sorted(events.names, key=len) == ["b", name]
    assert filler_module._INSIDE.consumed > 0  # the runs were seen, and found to be in a string
