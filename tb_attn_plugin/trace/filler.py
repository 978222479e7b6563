"""Squeezing whitespace filler out of a growing buffer, so that however much whitespace a stream
holds, between or inside events, it costs no memory and is copied at most once (a 2 MB gzip of
2 GiB of spaces took 6.3 GB before). Whitespace inside strings is content and is kept, and a
squeezed run keeps its line break and the bytes after it, so ``\\n  {`` still marks exactly the
event starts it marked.
"""

from __future__ import annotations

import re

__all__ = ["Filler", "run_end"]

_SAMPLE_STEP = 64
_FILLER_RUN = 512 + _SAMPLE_STEP  # whitespace runs this long are always squeezed, shorter ones may be
_WS_ZERO = bytes(0 if b in b" \t\r\n" else 1 for b in range(256))  # a table for bytes.translate
_WS_SAMPLES = bytes(512 // _SAMPLE_STEP + 1)  # whitespace at that many samples in a row: a candidate
_WS_PREFIX = re.compile(rb"[ \t\r\n]*")
# From outside a string: everything up to the opening quote of a string that does not end
# before the end position (or to the end position).
_OUTSIDE = re.compile(rb'[^"]*+(?:"(?:[^"\\]++|\\.)*+"[^"]*+)*+', re.DOTALL)
_INSIDE = re.compile(rb'(?:[^"\\]++|\\.)*+', re.DOTALL)  # from inside a string: up to its closing quote


class Filler:
    """Squeezes whitespace out of a buffer that grows by chunks and starts outside any string
    (at a document's start, or an event start), so that filler between or inside events costs
    no memory and is copied at most once.

    A run of whitespace is found by sampling every ``_SAMPLE_STEP``-th byte, so ordinary JSON
    (pretty-printed included) costs little more than one look at 1/64 of it in C, nearly never
    a Python step per candidate; a run is squeezed only when it lies outside
    strings (spaces inside a string are content), which is read with regular expressions from
    the last known point, only as far as the run (strings are scanned lazily, never twice). A
    squeezed run keeps its line break and the up to three bytes after it, so ``\\n  {`` marks
    event starts exactly where it did. Only ``decode._batches`` on an event larger than a batch
    (or on filler), a header not found in the first chunk and the layouts read whole call this: a
    Kineto trace's batches never pay for it.
    """

    __slots__ = ("done", "inside", "pos")

    def __init__(self) -> None:
        self.done = 0  # runs before this are squeezed (or are content)
        self.pos = 0  # strings are read up to here, where a string is open if ``inside``
        self.inside = False

    def dropped(self, n: int) -> None:
        """The buffer lost its first ``n`` bytes, cut at an event start (outside any string)."""
        self.done = max(self.done - n, 0)
        self.pos, self.inside = 0, False

    def squeeze(self, buf: bytearray) -> None:
        start, end, step = self.done, len(buf), _SAMPLE_STEP
        if end - start < _FILLER_RUN:
            return
        runs: list[tuple[int, int, bytes]] = []  # (start, end, what replaces it)
        floor = start  # no run begins before this one's end
        samples = buf[start:end:step].translate(_WS_ZERO)
        k = samples.find(_WS_SAMPLES)
        span = len(_WS_SAMPLES) * step - step
        while k >= 0:
            p = start + k * step
            b = _stop(_WS_PREFIX, buf, p, p + span)
            if b == p + span:  # whitespace throughout, not only at the samples (mostly, in pretty JSON)
                b = run_end(buf, b, end)
                a = _run_start(buf, max(floor, p - step), p)
                if self._outside(buf, a):
                    runs.append((a, b, _squeezed(buf, a, b)))
                    self.pos = b
                elif self.pos == a:  # spaces in a string: read past them (they hold no quote)
                    self.pos = b
                floor = b
            k = samples.find(_WS_SAMPLES, (b - start) // step + 1)
        if runs:
            buf[start:] = _without(buf, start, end, runs)
        shift = sum(b - a - len(r) for a, b, r in runs)
        before = sum(b - a - len(r) for a, b, r in runs if b <= self.pos)
        self.pos -= before
        if runs and runs[-1][1] == end:  # a trailing run: squeeze it again with what follows
            self.done = self.pos = runs[-1][0] - (shift - (end - runs[-1][0] - len(runs[-1][2])))
            self.inside = False
        else:
            self.done = max(floor - shift, len(buf) - _FILLER_RUN)

    def _outside(self, buf: bytearray, target: int) -> bool:
        """Whether ``buf[target]`` is outside any string, reading strings on from ``self.pos``."""
        pos, inside = self.pos, self.inside
        while pos < target:
            if inside:
                pos = _stop(_INSIDE, buf, pos, target)
                if pos == target or buf[pos] != 0x22:
                    break  # still in the string at the target, or at a backslash just before it
                inside = False
            else:
                pos = _stop(_OUTSIDE, buf, pos, target)
                if pos == target:
                    break
                inside = True  # at a string's opening quote: it goes on past the target
            pos += 1
        self.pos, self.inside = pos, inside
        return pos == target and not inside


def _stop(pattern: re.Pattern[bytes], buf: bytearray, pos: int, end: int) -> int:
    """Where ``pattern``, which also matches the empty string, stops matching from ``pos``."""
    m = pattern.match(buf, pos, end)
    return pos if m is None else m.end()


def _run_start(buf: bytearray, low: int, p: int) -> int:
    """Where the whitespace that ends at ``p`` begins, looking back no further than ``low``."""
    with memoryview(buf) as view, view[low:p] as part:
        return low + len(bytes(part).rstrip(b" \t\r\n"))


def run_end(buf: bytearray, p: int, end: int) -> int:
    """Where the whitespace from ``p`` ends. Blocks of doubling size are tested first, by
    deleting whitespace from a copy (three times as fast as the regular expression alone, which
    then finds the end within the first block that is not all whitespace)."""
    size = 4096
    with memoryview(buf) as view:
        while p + size <= end:
            with view[p: p + size] as part:
                if bytes(part).translate(None, b" \t\r\n"):
                    break
            p += size
            size = min(2 * size, 1 << 20)
    return _stop(_WS_PREFIX, buf, p, end)


def _squeezed(buf: bytearray, a: int, b: int) -> bytes:
    """What replaces the whitespace ``buf[a:b]``: its last line break and the bytes after it
    if they are three or fewer, else three spaces, so the line it ends still ends (or does not)
    in two spaces, however the next chunk goes on."""
    nl = buf.rfind(b"\n", a, b)
    if nl >= 0 and b - nl <= 4:
        return bytes(buf[nl:b])
    return b"\n   " if nl >= 0 else b"   "


def _without(buf: bytearray, start: int, end: int, runs: list[tuple[int, int, bytes]]) -> bytes:
    """``buf[start:end]`` with each run replaced, in one copy (the views die on return)."""
    with memoryview(buf) as view:
        pieces: list[bytes | memoryview] = []
        last = start
        for a, b, r in runs:
            pieces += (view[last:a], r)
            last = b
        pieces.append(view[last:end])
        return b"".join(pieces)
