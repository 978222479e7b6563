"""Filler squeezed and long strings clipped as a stream arrives (``trace/filler.py``). ``Filler`` is
fed small hand-built buffers, whole and in chunks, and what each run of whitespace becomes, where
each long string is cut (whole characters and escapes, byte counts worked by hand) and how much the
buffer holds are checked; ``test_decode_bounds.py`` checks random documents through the decoder.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

import pytest

from tb_attn_plugin.trace.filler import _FILLER_RUN, _SAMPLE, _STRIDE, STRING_BYTES, Filler, run_end


def _squeezed(chunks: Iterable[bytes]) -> tuple[bytes, int]:
    """The buffer after each chunk is appended and squeezed, and the most it held after a squeeze."""
    buf, filler, held = bytearray(), Filler(), 0
    for chunk in chunks:
        buf += chunk
        filler.squeeze(buf)
        held = max(held, len(buf))
    return bytes(buf), held


def _chunked(data: bytes, size: int) -> list[bytes]:
    return [data[i:i + size] for i in range(0, len(data), size)]


def test_the_limits_fit_together() -> None:
    # A string longer than a stride and a sample holds a whole sample; 64 KiB is more than a name
    # of 2000 characters can take as written (12 bytes each at most, "\ud83d\ude00": 24,000 bytes).
    assert STRING_BYTES == 65536 and _STRIDE + _SAMPLE <= STRING_BYTES and 2000 * 12 < STRING_BYTES
    assert _FILLER_RUN == 576  # 512 of whitespace at samples 64 apart, and one step to find its start


# -- whitespace ---------------------------------------------------------------------------------
def test_a_run_before_an_event_start_keeps_its_line_break_and_two_spaces() -> None:
    out, _ = _squeezed([b'{"a": 1,' + b" " * 1000 + b'\n  {"b": 2}'])
    assert out == b'{"a": 1,\n  {"b": 2}'


def test_a_run_without_a_line_break_becomes_three_spaces_across_chunks() -> None:
    out, _ = _squeezed([b"[1," + b" " * 2000, b" " * 2000, b"2]"])
    assert out == b"[1,   2]"  # a trailing run is squeezed again with what follows it


def test_a_run_that_ends_far_from_its_line_break_marks_no_event_start() -> None:
    # "\n" + 1000 spaces + "{" is no "\n  {": its replacement, "\n   ", keeps it so.
    out, _ = _squeezed([b"[1,\n" + b" " * 1000 + b'{"a":1}]'])
    assert out == b'[1,\n   {"a":1}]' and out.count(b"\n  {") == 0


def test_mixed_whitespace_is_squeezed_to_its_last_line() -> None:
    out, _ = _squeezed([b"[1," + b" " * 600 + b"\n\t\r\n" + b" " * 600 + b"2]"])
    assert out == b"[1,\n   2]"  # the last line break is 600 bytes before the end: three spaces after it


@pytest.mark.parametrize("string", [b'"' + b" " * 2000 + b'"', b'"a\\"' + b" " * 2000 + b'"',
                                    b'"\\\\' + b" " * 700 + b"\\n" + b" " * 700 + b'"'])
def test_whitespace_inside_a_string_is_content_and_kept(string: bytes) -> None:
    doc = b"[" + string + b", 1]"
    assert _squeezed([doc])[0] == doc
    assert _squeezed(_chunked(doc, 100))[0] == doc


def test_event_starts_survive_any_cut_between_chunks() -> None:
    doc = b'[\n  {"a": 1},' + b" " * 3000 + b'\n  {"b": 2}]'
    for k in range(len(doc) - 20, len(doc)):
        out, _ = _squeezed([doc[:k], doc[k:]])
        assert out.count(b"\n  {") == 2 and json.loads(out) == [{"a": 1}, {"b": 2}], k


def test_filler_costs_the_memory_of_a_chunk() -> None:
    chunk = 64 << 10
    out, held = _squeezed([b"[1," + b" " * chunk] + [b" " * chunk] * 30 + [b"2]"])
    # 2 MiB of spaces: after each squeeze the buffer holds "[1," and the run's three spaces, never a chunk.
    assert out == b"[1,   2]" and held == len(out) == 8


def test_after_a_drop_the_buffer_is_read_again_from_its_new_start() -> None:
    """``dropped``: the decoder cut a batch off at an event start; a string open in the rest is
    still known as one (its spaces kept), and filler after it is still squeezed."""
    buf = bytearray(b'[\n  {"a": 1},' + b" " * 1000 + b'\n  {"b": "' + b" " * 1000)
    filler = Filler()
    filler.squeeze(buf)
    assert bytes(buf[:23]) == b'[\n  {"a": 1},\n  {"b": "'
    cut = buf.rfind(b"\n  {")
    del buf[:cut]
    filler.dropped(cut)
    buf += b" " * 1000 + b'"},' + b" " * 1000 + b'\n  {"c": 3}]'
    filler.squeeze(buf)
    # The string's 2000 spaces are kept; the 1000 after it become the event start's "\n  ".
    assert bytes(buf) == b'\n  {"b": "' + b" " * 2000 + b'"},\n  {"c": 3}]'


@pytest.mark.parametrize(("text", "start", "end", "want"), [
    (b"ab   \n\t x", 2, 9, 8),
    (b" " * 10_000 + b"x", 0, 10_001, 10_000),  # past several doubling blocks
    (b"   ", 0, 3, 3),  # whitespace to the end
    (b"    x", 0, 2, 2),  # stops at ``end``
    (b"x  ", 0, 3, 0),  # no whitespace at ``p``
])
def test_run_end_is_where_the_whitespace_stops(text: bytes, start: int, end: int, want: int) -> None:
    assert run_end(bytearray(text), start, end) == want


# -- long strings -----------------------------------------------------------------------------
def _name(doc: bytes) -> bytes:
    m = re.search(rb'"name": "((?:[^"\\]|\\.)*)"', doc)
    assert m is not None
    return m.group(1)


@pytest.mark.parametrize(("content", "kept"), [
    (b"a" * STRING_BYTES, STRING_BYTES),  # at the limit: untouched
    (b"a" * (STRING_BYTES + 1000), STRING_BYTES),
    ("é".encode() * 40_000, STRING_BYTES),  # 2 bytes each: 65536 is a character boundary
    ("€".encode() * 30_000, STRING_BYTES - 1),  # 3 bytes each: 65536 = 3 * 21845 + 1, back to 65535
    (b"a" + b"\\n" * 40_000, STRING_BYTES - 1),  # an escape starts at 65535: it is not split
    (b"a" * 4 + b"\\ud83d\\ude00" * 6000, STRING_BYTES),  # 4 + 12 * 5461 = 65536: whole pairs
    (b"a" * 10 + b"\\ud83d\\ude00" * 6000, STRING_BYTES - 6),  # 10 + 12 * 5460 + 6: the high half goes
])
def test_a_long_string_keeps_its_first_bytes_cut_between_characters(content: bytes, kept: int) -> None:
    doc = b'[{"name": "' + content + b'", "ts": 1}]'
    out, _ = _squeezed([doc])
    name = _name(out)
    assert len(name) == kept and content.startswith(name)
    value = json.loads(out)[0]
    assert value["ts"] == 1 and json.loads(b'"' + content + b'"').startswith(value["name"])


def test_a_string_of_a_megabyte_in_small_chunks_is_cut_as_it_arrives() -> None:
    doc = b'[{"name": "' + b"a" * (1 << 20) + b'", "ts": 1}]'
    out, held = _squeezed(_chunked(doc, 4096))
    assert len(_name(out)) == STRING_BYTES and json.loads(out)[0]["ts"] == 1
    # Strings are looked at a sample every stride: what is held unclipped is at most the limit,
    # a stride, a sample and a chunk (64 + 56 + 4 + 4 KiB), never the megabyte.
    assert held <= STRING_BYTES + _STRIDE + _SAMPLE + 4096 + len(b'[{"name": "')


def test_a_string_just_over_the_limit_is_cut_when_it_arrives_in_chunks() -> None:
    """The module's promise: a string longer than ``STRING_BYTES`` keeps at most that. Read in
    4 KiB chunks, a string of 66,536 bytes holds the sample at 57,344, which is checked when the
    buffer reaches 61,440: the string is still open and under the limit there. The next sample is
    at 114,688, past its end, so it is kept whole; read in one chunk it is cut to 65,536."""
    doc = b'[{"name": "' + b"a" * (STRING_BYTES + 1000) + b'", "ts": 1}]'
    assert len(_name(_squeezed([doc])[0])) == STRING_BYTES
    assert len(_name(_squeezed(_chunked(doc, 4096))[0])) == STRING_BYTES
