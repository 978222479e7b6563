"""Bounding what a growing buffer of JSON holds while a stream arrives: whitespace filler squeezed
out and overlong strings clipped, so that however much whitespace a stream holds, between or
inside events, and however long a string is, they cost memory in proportion to a chunk, not to
themselves (a 2 MB gzip of 2 GiB of spaces took 6.3 GB before; a 1 MB gzip holding an op name of
1 GiB, 3.1 GB). Whitespace inside strings is content and is kept, and a squeezed run keeps its
line break and the bytes after it, so ``\\n  {`` still marks exactly the event starts it marked.
A string whose content (as written, escapes included) is longer than ``STRING_BYTES`` keeps its
first ``STRING_BYTES`` at most, cut where no escape sequence, UTF-8 sequence or surrogate pair is
split, and stays a valid JSON string: no decoder ever sees the rest of it.
"""

from __future__ import annotations

import re

__all__ = ["STRING_BYTES", "Filler", "run_end"]

#: The longest string content (bytes between the quotes, as written) a buffer keeps. It is longer
#: than any name the decoder keeps can take (``coerce.MAX_NAME_CHARS`` characters of at most 12
#: bytes each, ``\\ud83d\\ude00``), so clipping a string here never changes a name.
STRING_BYTES = 64 << 10
# Strings are found by sampling: a sample of _SAMPLE bytes every _STRIDE bytes, in which a string's
# content can be only if every quote in it is escaped (quotes no more than backslashes, and one
# backslash just before). A string longer than _STRIDE + _SAMPLE <= STRING_BYTES holds a whole
# sample; real JSON (stacks of a few KiB, kernel names) has none outside such strings.
_STRIDE = 56 << 10
_SAMPLE = 4 << 10

_SAMPLE_STEP = 64
_FILLER_RUN = 512 + _SAMPLE_STEP  # whitespace runs this long are always squeezed, shorter ones may be
_WS_ZERO = bytes(0 if b in b" \t\r\n" else 1 for b in range(256))  # a table for bytes.translate
_WS_SAMPLES = bytes(512 // _SAMPLE_STEP + 1)  # whitespace at that many samples in a row: a candidate
_WS_PREFIX = re.compile(rb"[ \t\r\n]*")
# From outside a string: everything up to the opening quote of a string that does not end
# before the end position (or to the end position).
_OUTSIDE = re.compile(rb'[^"]*+(?:"(?:[^"\\]++|\\.)*+"[^"]*+)*+', re.DOTALL)
_INSIDE = re.compile(rb'(?:[^"\\]++|\\.)*+', re.DOTALL)  # from inside a string: up to its closing quote
_HIGH_SURROGATE = re.compile(rb"\\u[dD][89abAB][0-9a-fA-F]{2}")


class Filler:
    """Squeezes whitespace out of a buffer that grows by chunks and starts outside any string
    (at a document's start, or an event start), so that filler between or inside events costs
    no memory and is copied at most once; and clips its overlong strings first (``_Clipper``).

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

    __slots__ = ("clipper", "done", "inside", "pos")

    def __init__(self) -> None:
        self.done = 0  # runs before this are squeezed (or are content)
        self.pos = 0  # strings are read up to here, where a string is open if ``inside``
        self.inside = False
        self.clipper = _Clipper()

    def dropped(self, n: int) -> None:
        """The buffer lost its first ``n`` bytes, cut at an event start (outside any string)."""
        self.done = max(self.done - n, 0)
        self.pos, self.inside = 0, False
        self.clipper.dropped(n)

    def squeeze(self, buf: bytearray) -> None:
        """Clip the strings of ``buf`` that are too long, then squeeze out its filler."""
        for a, b in self.clipper.clip(buf):  # only string content went: positions in it move to its cut
            self.done, self.pos = _after_cut(self.done, a, b), _after_cut(self.pos, a, b)
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
            self.clipper.squeezed(runs)
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
        self.pos, self.inside, _ = _read_strings(buf, self.pos, self.inside, target)
        return self.pos == target and not self.inside


class _Clipper:
    """Cuts each string of a growing buffer whose content is longer than ``STRING_BYTES`` to at
    most that, as the bytes arrive: the part past the cut is deleted from the buffer chunk by
    chunk, up to the string's closing quote, which is kept.

    Strings are read exactly (``_OUTSIDE`` and ``_INSIDE``, as ``Filler`` reads them, but with a
    state of their own) only from the last known point up to a sample that may lie in a string's
    content; the samples cost two counts in C of 1/14 of the bytes, so JSON without long strings
    is nearly never read in Python at all. A string a sample finds still open at the buffer's end
    is read on with each chunk (only the new bytes) until it ends or is clipped.
    """

    __slots__ = ("cut", "dropping", "inside", "opened", "pos", "sample")

    def __init__(self) -> None:
        self.pos = 0  # strings are read (and clipped) up to here, where one is open if ``inside``
        self.inside = False
        self.opened = 0  # where the content of the string open at ``pos`` starts
        self.dropping = False  # that string is clipped: its content from ``cut`` to its end goes
        self.cut = 0
        self.sample = 0  # the next sample starts here; one every _STRIDE bytes at most after ``pos``

    def dropped(self, n: int) -> None:
        """The buffer lost its first ``n`` bytes, cut at an event start (outside any string)."""
        self.pos, self.inside, self.dropping = 0, False, False
        self.sample = max(self.sample - n, 0)

    def squeezed(self, runs: list[tuple[int, int, bytes]]) -> None:
        """Whitespace runs ``(start, end, replacement)`` outside strings were replaced."""
        self.pos, self.opened, self.cut, self.sample = (
            _after_runs(x, runs) for x in (self.pos, self.opened, self.cut, self.sample))

    def clip(self, buf: bytearray) -> list[tuple[int, int]]:
        """Clip the strings of ``buf`` read so far; return the ranges deleted, in order, each as
        the buffer was when it was deleted."""
        cuts: list[tuple[int, int]] = []
        if self.inside:  # also under the limit: it may pass it before the next sample, or end before it
            self._string(buf, cuts)
        self.sample = max(self.sample, self.pos)
        while self.sample + _SAMPLE <= len(buf):
            p = self.sample
            if buf.count(b'"', p, p + _SAMPLE) <= buf.count(b"\\", p, p + _SAMPLE) + 1:  # it may be in a string
                self._read(buf, p)
                if self.inside:
                    self._string(buf, cuts)  # what it deletes moves ``sample`` back, never past ``pos``
            self.sample = max(self.sample + _STRIDE, self.pos)
        return cuts

    def _read(self, buf: bytearray, target: int) -> None:
        """Read strings on from ``pos`` to ``target``. The strings passed are short: a long one
        would have held an earlier sample."""
        self.pos, self.inside, opened = _read_strings(buf, self.pos, self.inside, target)
        if opened is not None:
            self.opened = opened

    def _string(self, buf: bytearray, cuts: list[tuple[int, int]]) -> None:
        """Read the string open at ``pos`` on to its end or the buffer's, and clip it."""
        end = len(buf)
        q = _string_end(buf, self.pos, end)
        closed = q < end and buf[q] == 0x22
        if not self.dropping and q - self.opened > STRING_BYTES:
            self.cut = _boundary(buf, self.opened, self.opened + STRING_BYTES)
            self.dropping = True
        if self.dropping:
            # Open at the buffer's end: a UTF-8 sequence that may be incomplete there is kept, to
            # go with the rest of it (a backslash there, not read yet, stays too).
            keep = q if closed else _char_start(buf, self.cut, q)
            if keep > self.cut:
                del buf[self.cut: keep]
                cuts.append((self.cut, keep))
                self.sample = _after_cut(self.sample, self.cut, keep)
                q -= keep - self.cut
        if closed:
            self.pos, self.inside, self.dropping = q + 1, False, False
        else:
            self.pos = q


def _string_end(buf: bytearray, pos: int, end: int) -> int:
    """Where ``_INSIDE`` stops from ``pos`` (in a string, not inside an escape): at the string's
    closing quote, else at ``end`` or at a backslash just before it. The next quote is found with
    ``find`` at the speed of memchr, several times the regular expression's, which reads only the
    strings whose quotes are escaped."""
    q = buf.find(b'"', pos, end)
    if q >= 0:
        return q if _backslashes(buf, pos, q) % 2 == 0 else _stop(_INSIDE, buf, pos, end)
    return end - 1 if _backslashes(buf, pos, end) % 2 else end


def _backslashes(buf: bytearray, low: int, q: int) -> int:
    """How many backslashes end ``buf[low:q]``."""
    if q <= low or buf[q - 1] != 0x5C:
        return 0
    with memoryview(buf) as view, view[low:q] as part:
        return len(part) - len(bytes(part).rstrip(b"\\"))


def _boundary(buf: bytearray, s: int, c: int) -> int:
    """The last position at or before ``c``, in string content that starts at ``s``, where the
    content can be cut: not inside an escape sequence, a UTF-8 sequence or a surrogate pair."""
    k = buf.rfind(b"\\", max(s, c - 5), c)  # an escape that ``c`` splits starts at most 5 bytes before it
    if k >= 0 and _starts_escape(buf, s, k) and k + (6 if buf[k + 1] == 0x75 else 2) > c:
        c = k
    if c - 6 >= s and _HIGH_SURROGATE.fullmatch(buf, c - 6, c) and _starts_escape(buf, s, c - 6):
        c -= 6  # the first half of a pair (or a lone one: it would only become U+FFFD)
    while c > s and 0x80 <= buf[c] < 0xC0:  # a UTF-8 continuation byte: back to its sequence's start
        c -= 1
    return c


def _starts_escape(buf: bytearray, s: int, k: int) -> bool:
    """Whether the backslash at ``k`` starts an escape sequence (``s`` starts the string's content):
    it does when the run of backslashes it ends is of odd length."""
    return _backslashes(buf, s, k + 1) % 2 == 1


def _char_start(buf: bytearray, low: int, q: int) -> int:
    """Where the UTF-8 sequence that ends at ``q`` starts, if a lead byte is among the three bytes
    before ``q`` (not before ``low``); else ``q``."""
    for k in range(q - 1, max(q - 4, low - 1), -1):
        if buf[k] < 0x80:
            break
        if buf[k] >= 0xC0:
            return k
    return q


def _after_cut(x: int, a: int, b: int) -> int:
    """Where position ``x`` is once ``buf[a:b]`` is deleted (a position in it: ``a``)."""
    return x if x <= a else a if x <= b else x - (b - a)


def _after_runs(x: int, runs: list[tuple[int, int, bytes]]) -> int:
    """Where position ``x`` is once each run ``(start, end, replacement)`` is replaced (a position
    inside a run: its start)."""
    shift = 0
    for a, b, r in runs:
        if x < b:
            return a - shift if x > a else x - shift
        shift += b - a - len(r)
    return x - shift


def _read_strings(buf: bytearray, pos: int, inside: bool, target: int) -> tuple[int, bool, int | None]:
    """Read JSON strings on from ``pos`` (in one if ``inside``) towards ``target``: where the
    reading stopped, whether a string is open there, and where the content of the last string
    opened on the way starts (None: none was)."""
    opened = None
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
            opened = pos + 1
        pos += 1
    return pos, inside, opened


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
