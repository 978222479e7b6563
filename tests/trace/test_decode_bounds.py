"""Filler squeezed out and long strings clipped while decoding: JSON meaning kept, strings
untouched up to the limit and cut only past it, each byte read once.

``test_hostile_json.py`` bounds the memory of whole files in subprocesses; these tests check, on
small random documents, that what ``Filler`` does to a buffer changes nothing a reader sees but
the strings past ``STRING_BYTES``, and that no name changes for it.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator
from typing import Any

import pytest

from tb_attn_plugin.trace import filler as filler_module
from tb_attn_plugin.trace.coerce import clip
from tb_attn_plugin.trace.decode import decode, decode_bytes
from tb_attn_plugin.trace.filler import _FILLER_RUN, STRING_BYTES, Filler

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
    bytes are scanned once in all, not once per run (which would be quadratic). It is kept clipped."""
    name = ("x" + " " * (2 * _FILLER_RUN)) * 20_000
    event = '  {"ph": "X", "cat": "cpu_op", "name": %s, "pid": 1, "tid": 1, "ts": 1, "dur": 1}'
    data = ('{\n  "traceEvents": [\n' + event % json.dumps(name) + ",\n" + event % '"b"' + "\n  ]\n}\n").encode()
    for k in ("_OUTSIDE", "_INSIDE"):
        monkeypatch.setattr(filler_module, k, _Counting(getattr(filler_module, k), len(data)))
    events = decode((data[i: i + (1 << 20)] for i in range(0, len(data), 1 << 20)), batch_bytes=1 << 20)
    assert sorted(events.names, key=len) == ["b", clip(name)]
    assert filler_module._INSIDE.consumed > 0  # the runs were seen, and found to be in a string


# -- long strings ------------------------------------------------------------------------------
#: Pieces of string content as JSON writes them: escapes of every length, UTF-8 of 2 to 4 bytes,
#: a surrogate pair, and spaces (content, never filler).
_PIECES = ["a", "é", "€", "😀", '\\"', "\\\\", "\\n", "\\/", "\\u00e9", "\\ud83d\\ude00", " "]
_STRING = re.compile(rb'"((?:[^"\\]|\\.)*)"', re.DOTALL)


def _content(r: random.Random, limit: int) -> str:
    """String content (JSON-escaped) of about a random length around ``limit``."""
    size = r.choice([r.randrange(limit // 2), limit - r.randrange(16), limit + r.randrange(16), r.randrange(6 * limit)])
    parts: list[str] = []
    n = 0
    while n < size:
        piece = r.choice(_PIECES) if r.random() < 0.7 else r.choice(_PIECES) * r.randrange(1, 3 * _FILLER_RUN)
        parts.append(piece)
        n += len(piece.encode())
    return "".join(parts)


def _long_strings_document(r: random.Random, limit: int, events: int) -> bytes:
    """A trace in Kineto's layout whose strings, keys aside, are long, with filler between tokens."""
    def text() -> str:
        return '"' + _content(r, limit) + '"'

    body = (",\n  ").join(
        "{" + _ws(r) + '"ph": "X", "name":' + _ws(r) + text() + ', "args": {"k": ' + text() + _ws(r) + "}}"
        for _ in range(events))
    return ('{"schemaVersion": 1, "x": ' + text() + "," + _ws(r) + '"traceEvents": [\n  ' + body + _ws(r) + "]"
            + _ws(r) + ', "traceName": ' + text() + "}").encode()


@pytest.mark.parametrize("seed", range(40))
def test_long_strings_are_cut_at_the_limit_and_stay_valid_json(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """With a limit of 48 bytes: each string of at most 48 bytes is kept, each longer one keeps a
    prefix of 34 to 48 bytes (as written) that decodes to a prefix of the string, whatever the
    chunks, escapes, multi-byte characters and pairs at the cut."""
    monkeypatch.setattr(filler_module, "STRING_BYTES", 48)
    monkeypatch.setattr(filler_module, "_STRIDE", 32)  # _STRIDE + _SAMPLE <= STRING_BYTES
    monkeypatch.setattr(filler_module, "_SAMPLE", 8)
    r = random.Random(seed)
    data = _long_strings_document(r, 48, 20)
    squeezed = _squeezed(data, r)
    json.loads(squeezed)  # valid JSON, valid UTF-8
    assert squeezed.count(b"\n  {") == data.count(b"\n  {")
    before, after = _STRING.findall(data), _STRING.findall(squeezed)
    assert len(before) == len(after)
    clipped = 0
    for raw, kept in zip(before, after, strict=True):
        if len(raw) <= 48:
            assert kept == raw
            continue
        clipped += 1
        assert 48 - 14 <= len(kept) <= 48 and raw.startswith(kept)
        whole, part = json.loads(b'"' + raw + b'"'), json.loads(b'"' + kept + b'"')
        assert whole.startswith(part)
    assert clipped


@pytest.mark.parametrize("pure", [False, True], ids=["scanner", "pure"])
@pytest.mark.parametrize("seed", range(6))
def test_clipping_while_reading_changes_no_name(seed: int, pure: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Names of about ``STRING_BYTES`` and more, read in small chunks and batches (each event
    larger than a batch, so each is clipped as it arrives), are the names decoding the whole
    document at once gives: cut to ``MAX_NAME_CHARS`` characters either way."""
    if pure:
        monkeypatch.setenv("TB_ATTN_PURE_DECODE", "1")
    r = random.Random(seed)
    prefix = _content(r, 9000)  # names sharing it share their clipped form
    names = ['"' + (prefix if r.random() < 0.5 else "") + _content(r, STRING_BYTES) + '"' for _ in range(8)]
    events = [f'{{"ph": "X", "cat": "cpu_op", "name": {n}, "pid": 1, "tid": 1, "ts": {i}, "dur": 1}}'
              for i, n in enumerate(names)]
    data = ('{\n  "traceEvents": [\n  ' + ",\n  ".join(events) + '\n  ],\n  "traceName": ' + names[0]
            + "\n}\n").encode()
    whole = decode_bytes(data)
    read = decode(_chunks(data, r), batch_bytes=4096)
    assert read.names == whole.names and read.name.tolist() == whole.name.tolist()
    assert max(map(len, whole.names)) == 2000 and whole.meta.extra.keys() == read.meta.extra.keys()


_HEAD = b'{\n  "schemaVersion": 1,\n  "traceEvents": [\n'
_EVENT = b'  {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1, "dur": 1}'


def _placed(where: str, string: Iterator[bytes]) -> Iterator[bytes]:
    """A trace with one long string (``string``, its content in pieces) at ``where``."""
    minified = where.startswith("minified")
    pieces = {
        "op name": (_HEAD + _EVENT + b',\n  {"ph": "X", "name": "', b'", "ts": 2, "dur": 1}\n  ]\n}\n'),
        "skipped argument": (_HEAD + _EVENT + b',\n  {"ph": "X", "name": "b", "args": {"x": "', b'"}, "ts": 2}\n  ]}'),
        "header": (b'{\n  "deviceProperties": [{"name": "', b'"}],\n  "traceEvents": [\n' + _EVENT + b"\n  ]\n}\n"),
        "trailer": (_HEAD + _EVENT + b'\n  ],\n  "traceName": "', b'"\n}\n'),
        "minified op name": (b'{"traceEvents":[{"ph":"X","name":"aten::mm","ts":1,"dur":1},{"ph":"X","name":"',
                             b'","ts":2,"dur":1}]}'),
        "minified array": (b'[{"ph":"X","name":"aten::mm","ts":1,"dur":1},{"ph":"X","name":"a","args":{"x":"',
                           b'"},"ts":2,"dur":1}]'),
    }
    head, tail = pieces[where]
    yield head
    yield from string
    yield tail
    assert minified or head.startswith(b"{\n")


@pytest.mark.parametrize("where", ["op name", "skipped argument", "header", "trailer", "minified op name",
                                   "minified array"])
def test_a_long_string_is_never_held_whole(where: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """32 MiB of a string in 1 MiB chunks, wherever it is: the buffer the framing holds stays
    under a batch, a chunk and ``STRING_BYTES`` (measured after each squeeze), and the string's
    first characters are read."""
    held: list[int] = []
    squeeze = Filler.squeeze

    def measured(self: Filler, buf: bytearray) -> None:
        squeeze(self, buf)
        held.append(len(buf))

    monkeypatch.setattr(Filler, "squeeze", measured)
    block = ("é€😀" * (1 << 18))[: (1 << 20) // 9 * 3].encode()  # whole characters: 1 MiB or a little less
    events = decode(_placed(where, iter([block] * 32)), batch_bytes=1 << 20)
    assert held and max(held) < (2 << 20) + STRING_BYTES, max(held)
    if where.endswith("op name"):
        assert max(map(len, events.names)) == 2000
        assert max(events.names, key=len).startswith("é€😀é€😀") and max(events.names, key=len).endswith("…")
    if where == "header":
        assert len(events.meta.device_properties[0]["name"]) == 2000
    if where == "trailer":
        assert "traceName" not in events.meta.extra  # kept only when short (meta.extra): read and dropped
