"""Framing: how trace bytes are cut into batches, and the document around them read. Kineto
pretty-prints traces with every event starting on a line ``  {`` (two spaces), and JSON strings
cannot hold raw newlines, so ``\\n  {`` marks event starts and nothing else. We cut the byte
stream there into batches of a few MB, each appended to compact columns as it comes (by the
compiled scanner in worker threads, ``scanned``, else by ``columns``), so memory stays near the
size of the columns, not of the document; the keys before and after the events are read as the
header and trailer. Other layouts (minified JSON,
a bare event array) fall back to decoding the whole document at once. Input that is not a trace
raises ``TraceError`` with a clear message, never anything else, hostile input included
(nesting deeper than Python's recursion limit, integers of thousands of digits, invalid UTF-8),
and whitespace costs no memory however much of it there is (``filler``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from typing import Any

import msgspec

from tb_attn_plugin.trace.coerce import loads, nested_too_deeply
from tb_attn_plugin.trace.columns import Builder, add_batch, add_loaded
from tb_attn_plugin.trace.events import Events, TraceError
from tb_attn_plugin.trace.filler import Filler, run_end
from tb_attn_plugin.trace.scanned import Pipeline
from tb_attn_plugin.trace.scanned import available as scanned_available

__all__ = ["decode", "decode_bytes"]

_HEADER_RE = re.compile(rb'"traceEvents"\s*:\s*\[')
_EVENT_START = b"\n  {"
_HEADER_LIMIT = 64 << 20  # a header larger than this is not Kineto's layout
#: Events are decoded a batch of about this many bytes at a time (measured on a 103 MB trace:
#: 2 MB 0.21 s, 4 MB 0.195 s, 8 MB 0.22 s, 16 MB 0.28 s with the scanner's threads on 2 cores).
BATCH_BYTES = 4 << 20
_top_decoder = msgspec.json.Decoder(dict[str, msgspec.Raw])


# -- document layouts ---------------------------------------------------------------------
_TRUNCATED = "truncated trace: the JSON ends early (is it still being written?)"


def _load_object(text: bytes, what: str) -> dict[str, Any]:
    try:
        value = loads(text)
    except json.JSONDecodeError as exc:
        # A cut inside a string reports where the string starts, not where the text ends.
        if exc.pos >= len(text.rstrip()) or exc.msg.startswith("Unterminated string"):
            raise TraceError(_TRUNCATED) from None
        raise TraceError(f"invalid JSON in the trace {what}: {exc}") from None
    except RecursionError as exc:
        raise TraceError(f"invalid JSON in the trace {what}: nested too deeply to read ({exc})") from None
    except ValueError as exc:
        raise TraceError(f"invalid JSON in the trace {what}: {exc}") from None
    if not isinstance(value, dict):
        raise TraceError(f"the trace {what} is not a JSON object")
    return value


def _whole(document: bytes) -> Events:
    """Any layout: decode the whole document (memory ~ a few times its size). The stream's
    callers pass what ``_document`` held: filler squeezed out, and at most ``max_bytes``."""
    stripped = document.strip()
    if not stripped:
        raise TraceError("empty file")
    builder = Builder()
    if stripped[:1] == b"[":
        add_batch(builder, stripped)
        return _finish(builder, {})
    if stripped[:1] != b"{":
        raise TraceError("not JSON: a trace is a JSON object with traceEvents")
    try:
        # Fast path: top-level values as raw slices, the events through the typed decoder.
        raw = _top_decoder.decode(stripped)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        raw = None
    if raw is not None and "traceEvents" in raw:
        events_raw = raw.pop("traceEvents")
        try:
            top = {k: loads(bytes(v)) for k, v in raw.items()}
        except (ValueError, RecursionError):
            top = None
        with memoryview(events_raw) as text:
            if top is not None and text[:1] == b"[":
                add_batch(builder, text)
                return _finish(builder, top)
    top = _load_object(stripped, "document")
    events = top.pop("traceEvents", None)
    if events is None:
        raise TraceError("not a trace: the JSON object has no traceEvents")
    builder = Builder()
    add_loaded(builder, events)
    return _finish(builder, top)


def _finish(builder: Builder, top: dict[str, Any]) -> Events:
    if not builder.x["name"] and not builder.m["ts"]:
        raise TraceError("the trace has no events")
    return builder.finish(top)


def decode(chunks: Iterable[bytes], *, batch_bytes: int = BATCH_BYTES) -> Events:
    """Decode a trace from a stream of byte chunks (already decompressed)."""
    opened = _open(chunks, batch_bytes)
    if isinstance(opened, Events):
        return opened
    builder, header, rest = opened
    return _finish(builder, {**header, **_closing(builder, rest)})


def _open(chunks: Iterable[bytes], batch_bytes: int) -> tuple[Builder, dict[str, Any], bytearray] | Events:
    """Read the header and decode every whole batch; return what is left at the end of the
    stream (or, for a layout other than Kineto's, the whole document decoded)."""
    it: Iterator[bytes] = iter(chunks)
    head = _header(it)
    if isinstance(head, Events):
        return head
    header, rest = head
    builder = Builder()
    return builder, header, _batches(builder, it, rest, batch_bytes)


def _header(it: Iterator[bytes]) -> tuple[dict[str, Any], bytearray] | Events:
    """The document's keys before the events and the bytes after ``"traceEvents": [``; or, for
    a layout other than Kineto's, the whole document decoded at once."""
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
        return _whole(_document(buf, it))
    header_text = bytes(buf[: match.start()]).rstrip().rstrip(b",").strip()
    if not header_text.startswith(b"{"):
        return _whole(_document(buf, it))
    rest = bytearray(buf[match.end():])
    filler = Filler()
    seen = bool(rest.strip())
    while not seen:  # whitespace only so far: look at each new chunk once, not at all of it again
        following = next(it, None)
        if following is None:
            raise TraceError(_TRUNCATED)
        rest += following
        filler.squeeze(rest)
        seen = bool(following.strip())
    start = len(rest) - len(rest.lstrip())
    if not rest.startswith(b"]", start) and not (rest.startswith(b"{", start) and rest.endswith(b"\n  ", 0, start)):
        # Not Kineto's layout (events not each on a line at two spaces): decode it whole.
        del buf[match.end():]
        buf += rest
        del rest
        return _whole(_document(buf, it))
    header = _load_object(header_text + b"}", "header") if header_text != b"{" else {}
    return header, rest


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


def _batches(builder: Builder, it: Iterator[bytes], rest: bytearray, batch_bytes: int) -> bytearray:
    """Decode whole batches of events as the stream comes; return what is left at its end."""
    searched = 0  # rest[:searched] holds no event start but the one at 0, if any
    filler = Filler()
    pipeline = Pipeline(builder, _unscanned) if scanned_available() else None
    for chunk in it:
        rest += chunk
        if len(rest) < batch_bytes:
            continue
        low = max(searched - len(_EVENT_START) + 1, 0)  # a start ending before ``searched`` was seen
        cut = rest.rfind(_EVENT_START, low) if rest.find(b"\n", low) >= 0 else -1  # memchr skips filler fast
        if cut <= 0:
            # One event larger than a batch, or whitespace: read on, holding the event only.
            filler.squeeze(rest)
            searched = len(rest)
            continue
        if pipeline is None:
            _add_batch_in_place(builder, rest, cut)
        else:
            pipeline.submit(_batch_text(rest, cut))
        del rest[:cut]
        filler.dropped(cut)
        searched = 0
    if pipeline is not None:
        pipeline.finish()
    return rest


def _unscanned(builder: Builder, text: bytes) -> None:
    add_batch(builder, text, scan=False)


def _closing(builder: Builder, rest: bytearray) -> dict[str, Any]:
    """The last events, the closing ``]`` and the document's trailing keys (``rest`` is used up).

    ``rest`` is at most a batch and a chunk, or one event larger than those, with filler squeezed
    out by ``_batches``: the copies ``_tail`` makes of it (and its fallbacks) are bounded so."""
    end = _last_non_space(rest, len(rest)) + 1
    if rest[end - 1: end] != b"}":
        raise TraceError(_TRUNCATED)
    del rest[end:]
    tail = bytes(rest)
    rest.clear()
    return _tail(builder, tail)


# -- parts at once ----------------------------------------------------------------------------
# A large local trace can be decoded in several processes (``trace.parallel``): the caller cuts
# the file at event starts, decodes the first part itself (``decode_first_part``) and the others
# elsewhere (``decode_middle_part``, ``decode_last_part``: plain data that pickles), then merges
# them in file order (``merge_parts``). The result equals ``decode`` of the whole file.


def decode_first_part(chunks: Iterable[bytes], *, batch_bytes: int = BATCH_BYTES
                      ) -> tuple[Builder, dict[str, Any]] | None:
    """Decode from the start of the file to the first cut (an event start). None: not Kineto's
    layout."""
    opened = _open(chunks, batch_bytes)
    if isinstance(opened, Events):
        return None
    builder, header, rest = opened
    if rest.strip():
        add_batch(builder, _as_array(memoryview(rest)))
    return builder, header


def decode_middle_part(chunks: Iterable[bytes], *, batch_bytes: int = BATCH_BYTES) -> dict[str, Any]:
    """Decode the events between two cuts; the result pickles."""
    builder = Builder()
    rest = _batches(builder, iter(chunks), bytearray(), batch_bytes)
    if rest.strip():
        add_batch(builder, _as_array(memoryview(rest)))
    return {"builder": builder.export(), "trailer": None}


def decode_last_part(chunks: Iterable[bytes], *, batch_bytes: int = BATCH_BYTES) -> dict[str, Any]:
    """Decode from the last cut to the end of the file, the document's trailing keys included;
    the result pickles."""
    builder = Builder()
    rest = _batches(builder, iter(chunks), bytearray(), batch_bytes)
    trailer = _closing(builder, rest)
    return {"builder": builder.export(), "trailer": trailer}


def merge_parts(first: Builder, header: dict[str, Any], others: list[dict[str, Any]]) -> Events:
    """The whole trace from its first part and the others, in file order (the last one ends it)."""
    if not others or others[-1]["trailer"] is None:
        raise ValueError("the last part must end the file")
    for part in others:
        first.merge(part["builder"])
    return _finish(first, {**header, **others[-1]["trailer"]})


_SPACE = frozenset(b" \t\r\n")


def _add_batch_in_place(builder: Builder, rest: bytearray, cut: int) -> None:
    """Decode ``rest[:cut]`` (whitespace, events separated by commas, a trailing comma) as an
    array without copying it: the leading whitespace byte becomes ``[`` and the trailing comma
    ``]``. Both bytes are cut off by the caller right after."""
    last = _last_non_space(rest, cut)
    if rest[0] not in _SPACE or rest[last] != ord(","):
        with memoryview(rest) as view:
            add_batch(builder, _as_array(view[:cut]))
        return
    rest[0] = ord("[")
    rest[last] = ord("]")
    with memoryview(rest) as view, view[: last + 1] as body:
        add_batch(builder, body)


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
            trailer = _load_object(b"{" + keys + b"}", "trailer") if keys else {}
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
    raise error or TraceError(_TRUNCATED)


def _tail_as_document(builder: Builder, tail: bytes) -> dict[str, Any] | None:
    try:
        raw = _top_decoder.decode(b'{"traceEvents":[' + tail)
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
