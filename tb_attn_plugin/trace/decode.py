"""Framing: how trace bytes are cut into batches, and the document around them read. Kineto
pretty-prints traces with every event starting on a line ``  {`` (two spaces), and JSON strings
cannot hold raw newlines, so ``\\n  {`` marks event starts and nothing else. We cut the byte
stream there into batches of a few MB, each appended to compact columns as it comes (by the
compiled scanner in worker threads, ``scanned``, else by ``columns``), so memory stays near the
size of the columns, not of the document; the keys before and after the events are read as the
header and trailer. Other layouts (minified JSON, a bare event array) fall back to decoding the
whole document at once (``whole``). Input that is not a trace raises ``TraceError`` with a clear
message, never anything else, hostile input included (nesting deeper than Python's recursion
limit, integers of thousands of digits, invalid UTF-8); whitespace costs no memory however much
of it there is, nor a string however long it is (``filler``); and bytes after the end of a whole
document are ignored and counted in the diagnostics (``whole.JUNK``), not taken for a document
still being written.
"""

# Not split (over 400 lines): framing and its parts for parallel decoding share the cut rules; a
# second module would hold half a contract.

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from functools import partial
from typing import Any

import msgspec

from tb_attn_plugin.trace.coerce import loads, nested_too_deeply
from tb_attn_plugin.trace.columns import Builder, add_batch
from tb_attn_plugin.trace.events import Events, TraceError
from tb_attn_plugin.trace.filler import Filler, run_end
from tb_attn_plugin.trace.scanned import Pipeline
from tb_attn_plugin.trace.scanned import available as scanned_available
from tb_attn_plugin.trace.whole import JUNK, TRUNCATED, finish, json_end, load_object, top_decoder, whole

__all__ = ["decode", "decode_bytes"]

_HEADER_RE = re.compile(rb'"traceEvents"\s*:\s*\[')
_EVENT_START = b"\n  {"
_HEADER_LIMIT = 64 << 20  # a header larger than this is not Kineto's layout
#: Events are decoded a batch of about this many bytes at a time (measured on a 103 MB trace:
#: 2 MB 0.21 s, 4 MB 0.195 s, 8 MB 0.22 s, 16 MB 0.28 s with the scanner's threads on 2 cores).
BATCH_BYTES = 4 << 20


def decode(chunks: Iterable[bytes], *, batch_bytes: int = BATCH_BYTES) -> Events:
    """Decode a trace from a stream of byte chunks (already decompressed)."""
    opened = _open(chunks, batch_bytes)
    if isinstance(opened, Events):
        return opened
    builder, header, rest = opened
    return finish(builder, {**header, **(rest.counted(builder) if isinstance(rest, _Ended)
                                         else _closing(builder, rest))})


class _Ended(Exception):
    """The document ended inside a batch (junk with event starts in it follows: a second trace,
    say): the keys it closed with, and how many bytes followed it."""

    def __init__(self, trailer: dict[str, Any], junk: int) -> None:
        super().__init__("the trace's JSON ended inside a batch")
        self.trailer, self.junk = trailer, junk

    def counted(self, builder: Builder) -> dict[str, Any]:
        builder.count(JUNK, self.junk)
        return self.trailer


def _open(chunks: Iterable[bytes], batch_bytes: int, *, at_once: bool = True
          ) -> tuple[Builder, dict[str, Any], bytearray | _Ended] | Events:
    """Read the header and decode every whole batch; return what is left at the end of the
    stream (or, for a layout other than Kineto's, the whole document decoded; without
    ``at_once``, ``_OtherLayout`` raised instead)."""
    it: Iterator[bytes] = iter(chunks)
    head = _header(it, at_once=at_once)
    if isinstance(head, Events):
        return head
    header, rest = head
    builder = Builder()
    return builder, header, _batches(builder, it, rest, batch_bytes)


def _header(it: Iterator[bytes], *, at_once: bool = True) -> tuple[dict[str, Any], bytearray] | Events:
    """The document's keys before the events and the bytes after ``"traceEvents": [``; or, for
    a layout other than Kineto's, the whole document decoded at once (``_other_layout``)."""
    buf = bytearray()
    filler = Filler()
    match = None
    for chunk in it:
        buf += chunk
        match = _HEADER_RE.search(buf, 0, min(len(buf), _HEADER_LIMIT))
        if match is not None:
            break
        filler.squeeze(buf)  # whitespace is not held, nor counted against the header's limit
        if len(buf) > _HEADER_LIMIT:
            break
    if match is None:
        return _other_layout(buf, it, at_once)
    header_text = bytes(buf[: match.start()]).rstrip().rstrip(b",").strip()
    if not header_text.startswith(b"{"):
        return _other_layout(buf, it, at_once)
    rest = bytearray(buf[match.end():])
    filler = Filler()
    seen = bool(rest.strip())
    while not seen:  # whitespace only so far: look at each new chunk once, not at all of it again
        following = next(it, None)
        if following is None:
            raise TraceError(TRUNCATED)
        rest += following
        filler.squeeze(rest)
        seen = bool(following.strip())
    start = len(rest) - len(rest.lstrip())
    if not rest.startswith(b"]", start) and not (rest.startswith(b"{", start) and rest.endswith(b"\n  ", 0, start)):
        # Not Kineto's layout (events not each on a line at two spaces): decode it whole.
        del buf[match.end():]
        buf += rest
        del rest
        return _other_layout(buf, it, at_once)
    header = load_object(header_text + b"}", "header") if header_text != b"{" else {}
    return header, rest


class _OtherLayout(Exception):
    """A part of a file (``decode_first_part``) is not in Kineto's layout."""


def _other_layout(buf: bytearray, it: Iterator[bytes], at_once: bool) -> Events:
    """The whole document decoded at once, ``buf`` its start. Not ``at_once`` (a part of a file,
    which decoded whole is a document cut off): ``_OtherLayout`` raised, nothing decoded."""
    if not at_once:
        raise _OtherLayout
    return whole(_document(buf, it))


def _document(buf: bytearray, it: Iterator[bytes]) -> bytes:
    """The whole document, for a layout decoded at once: ``buf`` (its start) and the rest of the
    stream, stripped. Filler is squeezed out as it arrives, so what is held is the document's
    content, whose size the reader's ``max_bytes`` bounds (a minified trace of real events has
    to be held whole: nothing in it marks where an event starts)."""
    filler = Filler()
    filler.squeeze(buf)
    for chunk in it:
        buf += chunk
        filler.squeeze(buf)
    del buf[: run_end(buf, 0, len(buf))]
    if buf:
        del buf[_last_non_space(buf, len(buf)) + 1:]
    document = bytes(buf)
    buf.clear()
    return document


def _batches(builder: Builder, it: Iterator[bytes], rest: bytearray, batch_bytes: int) -> bytearray | _Ended:
    """Decode whole batches of events as the stream comes; return what is left at its end, or,
    where the document ended inside a batch, how (the rest of the stream read and counted)."""
    searched = 0  # rest[:searched] holds no event start but the one at 0, if any
    filler = Filler()
    pipeline = Pipeline(builder.append, partial(_unscanned, builder)) if scanned_available() else None
    batched = 0  # rest[:batched] is being added as a batch
    check_at = 2 * batch_bytes  # held this long without an event start: whether the document ended is checked
    try:
        for chunk in it:
            rest += chunk
            if len(rest) < batch_bytes:
                continue
            low = max(searched - len(_EVENT_START) + 1, 0)  # a start ending before ``searched`` was seen
            cut = rest.rfind(_EVENT_START, low) if rest.find(b"\n", low) >= 0 else -1  # memchr skips filler fast
            if cut <= 0:
                # One event larger than a batch, or whitespace, or junk after the end: read on,
                # holding the event only (junk is found at twice a batch, then at each doubling).
                filler.squeeze(rest)
                searched = len(rest)
                if len(rest) >= check_at:
                    check_at = 2 * len(rest)
                    _end_in(builder, rest, pipeline)
                continue
            batched = cut
            if pipeline is None:
                _add_batch_in_place(builder, rest, cut)
            else:
                pipeline.submit(_batch_text(rest, cut))
            del rest[:cut]
            batched = 0
            filler.dropped(cut)
            searched = 0
        if pipeline is not None:
            pipeline.finish()
    except _Ended as ended:
        # Junk: the rest of that batch, the batches after it (their bytes are in flight, or in
        # ``rest`` still), and the rest of the stream, which is read to count it.
        in_flight = sum(len(text) for text, _ in pipeline.pending) if pipeline is not None else 0
        ended.junk += in_flight + len(rest) - batched + sum(map(len, it))
        return ended
    return rest


def _end_in(builder: Builder, rest: bytearray, pipeline: Pipeline | None) -> None:
    """Raise ``_Ended`` if the document ends in ``rest`` (the bytes after the last batch), the
    events and keys before its end read and ``rest`` emptied; else nothing."""
    end = json_end(_OPENING + rest)
    if end is None or end >= len(_OPENING) + len(rest):
        return
    if pipeline is not None:
        pipeline.finish()  # the batches before it first
    junk = len(_OPENING) + len(rest) - end
    trailer = _tail(builder, bytes(rest[: end - len(_OPENING)]))
    rest.clear()
    raise _Ended(trailer, junk)


def _unscanned(builder: Builder, text: bytes) -> None:
    _add_or_end(builder, text, scan=False)


def _add_or_end(builder: Builder, text: bytes | memoryview, *, scan: bool = True) -> None:
    """``add_batch``; where the batch does not decode because the document ends inside it, its
    last events and the document's trailing keys are read, and ``_Ended`` raised."""
    mark = builder.mark()
    try:
        add_batch(builder, text, scan=scan)
    except TraceError:
        builder.rollback(mark)
        document = _OPENING[:-1] + bytes(text)  # the batch is an array: "[" and the events
        end = json_end(document)
        if end is None or end >= len(document):
            raise
        raise _Ended(_tail(builder, document[len(_OPENING): end]), len(document) - end) from None


def _closing(builder: Builder, rest: bytearray) -> dict[str, Any]:
    """The last events, the closing ``]`` and the document's trailing keys (``rest`` is used up);
    junk after the document's end is counted (``JUNK``) and ignored.

    ``rest`` is at most a batch and a chunk, or one event larger than those, with filler squeezed
    out and strings clipped by ``_batches``: the copies ``_tail`` makes of it (and its fallbacks)
    are bounded so."""
    del rest[_last_non_space(rest, len(rest)) + 1:]
    tail = bytes(rest)
    rest.clear()
    mark = builder.mark()
    try:
        if tail.endswith(b"}"):
            return _tail(builder, tail)
        failure = TraceError(TRUNCATED)
    except TraceError as exc:
        builder.rollback(mark)
        failure = exc
    end = json_end(_OPENING + tail)
    if end is None or end >= len(_OPENING) + len(tail):
        raise failure
    trailer = _tail(builder, tail[: end - len(_OPENING)])
    builder.count(JUNK, len(_OPENING) + len(tail) - end)
    return trailer


# -- parts at once ----------------------------------------------------------------------------
# A large local trace can be decoded in several processes (``trace.parallel``): the caller cuts
# the file at event starts, decodes the first part itself (``decode_first_part``) and the others
# elsewhere (``decode_middle_part``, ``decode_last_part``: plain data that pickles), then merges
# them in file order (``merge_parts``). The result equals ``decode`` of the whole file.


def decode_first_part(chunks: Iterable[bytes], *, batch_bytes: int = BATCH_BYTES
                      ) -> tuple[Builder, dict[str, Any]] | None:
    """Decode from the start of the file to the first cut (an event start). None: not Kineto's
    layout, or the document ends before the cut."""
    try:
        opened = _open(chunks, batch_bytes, at_once=False)
    except _OtherLayout:
        return None  # a bare array written with indent has event starts too: one process reads it
    assert not isinstance(opened, Events)  # only a layout decoded at once gives events here
    builder, header, rest = opened
    try:
        if isinstance(rest, _Ended):
            raise rest
        if rest.strip():
            _add_or_end(builder, _as_array(memoryview(rest)))
    except _Ended:
        return None  # the document ends in this part: one process reads it
    return builder, header


def decode_middle_part(chunks: Iterable[bytes], *, batch_bytes: int = BATCH_BYTES) -> dict[str, Any]:
    """Decode the events between two cuts; the result pickles."""
    builder = Builder()
    rest = _batches(builder, iter(chunks), bytearray(), batch_bytes)
    if isinstance(rest, _Ended):
        raise TraceError("the trace's JSON ends before the file does")  # one process reads it
    if rest.strip():
        add_batch(builder, _as_array(memoryview(rest)))
    return {"builder": builder.export(), "trailer": None}


def decode_last_part(chunks: Iterable[bytes], *, batch_bytes: int = BATCH_BYTES) -> dict[str, Any]:
    """Decode from the last cut to the end of the file, the document's trailing keys included;
    the result pickles."""
    builder = Builder()
    rest = _batches(builder, iter(chunks), bytearray(), batch_bytes)
    trailer = rest.counted(builder) if isinstance(rest, _Ended) else _closing(builder, rest)
    return {"builder": builder.export(), "trailer": trailer}


def merge_parts(first: Builder, header: dict[str, Any], others: list[dict[str, Any]]) -> Events:
    """The whole trace from its first part and the others, in file order (the last one ends it)."""
    if not others or others[-1]["trailer"] is None:
        raise ValueError("the last part must end the file")
    for part in others:
        first.merge(part["builder"])
    return finish(first, {**header, **others[-1]["trailer"]})


_SPACE = frozenset(b" \t\r\n")


def _add_batch_in_place(builder: Builder, rest: bytearray, cut: int) -> None:
    """Decode ``rest[:cut]`` (whitespace, events separated by commas, a trailing comma) as an
    array without copying it: the leading whitespace byte becomes ``[`` and the trailing comma
    ``]``. Both bytes are cut off by the caller right after."""
    last = _last_non_space(rest, cut)
    if rest[0] not in _SPACE or rest[last] != ord(","):
        with memoryview(rest) as view:
            _add_or_end(builder, _as_array(view[:cut]))
        return
    rest[0] = ord("[")
    rest[last] = ord("]")
    with memoryview(rest) as view, view[: last + 1] as body:
        _add_or_end(builder, body)


def _batch_text(rest: bytearray, cut: int) -> bytes:
    """``rest[:cut]`` as a JSON array, copied once (it goes to another thread)."""
    last = _last_non_space(rest, cut)
    with memoryview(rest) as view:
        if rest[0] not in _SPACE or rest[last] != ord(","):
            return _as_array(view[:cut])
        rest[0] = ord("[")
        rest[last] = ord("]")
        return bytes(view[: last + 1])


def _last_non_space(buf: bytearray, end: int, *, window: int = 1 << 16) -> int:
    """The position of the last byte before ``end`` that is not whitespace (0 if none), found a
    window at a time in C: there may be megabytes of whitespace."""
    while end > 0:
        start = max(end - window, 0)
        with memoryview(buf) as view, view[start:end] as part:
            kept = len(bytes(part).rstrip(b" \t\r\n"))
        if kept:
            return start + kept - 1
        end = start
    return 0


_TRAILER_RE = re.compile(rb"\]\s*(?:,(?P<keys>.*))?\}$", re.DOTALL)


def _tail(builder: Builder, tail: bytes) -> dict[str, Any]:
    """Decode the last events and return the document's keys after the events array.

    Usually the tail completes a document that opens with ``{"traceEvents": [``, which one
    decoder call splits into the events and the keys after them, however those keys nest.
    Otherwise (values that only the lenient decoder takes, say) the array's closing bracket is
    the last ``]`` after which only the document's remaining keys follow; a ``]`` inside those
    keys (a path in traceName, say) fails to decode as the end of the events and the search
    moves left.
    """
    trailer = _tail_as_document(builder, tail)
    if trailer is not None:
        return trailer
    pos = len(tail)
    error: TraceError | None = None
    for _ in range(16):
        pos = tail.rfind(b"]", 0, pos)
        if pos < 0:
            break
        m = _TRAILER_RE.match(tail, pos)
        if m is None:
            continue
        keys = (m.group("keys") or b"").strip()
        try:
            trailer = load_object(b"{" + keys + b"}", "trailer") if keys else {}
        except TraceError:
            continue
        body = tail[:pos].strip()
        try:
            if body:
                add_batch(builder, _as_array(memoryview(body)))
        except TraceError as exc:
            error = error or exc  # the events before the outermost candidate are broken
            continue
        return trailer
    raise error or TraceError(TRUNCATED)


_OPENING = b'{"traceEvents":['  # what the tail of a trace in Kineto's layout completes


def _tail_as_document(builder: Builder, tail: bytes) -> dict[str, Any] | None:
    try:
        raw = top_decoder.decode(_OPENING + tail)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    except RecursionError as exc:
        raise nested_too_deeply(exc) from None
    events = raw.pop("traceEvents")  # a duplicate key in the trailer wins, as in any JSON reader
    try:
        trailer = {k: loads(bytes(v)) for k, v in raw.items()}
    except ValueError:
        return None
    except RecursionError as exc:
        raise nested_too_deeply(exc) from None
    with memoryview(events) as text:
        if text[:1] != b"[":
            return None
        add_batch(builder, text)
    return trailer


def _as_array(body: memoryview) -> bytes:
    text = bytes(body).strip()
    if text.endswith(b","):
        text = text[:-1]
    return b"[" + text + b"]"


def decode_bytes(data: bytes) -> Events:
    """Decode a whole trace held in memory (tests, small files)."""
    return decode([data])
