"""Documents read whole: the layouts other than Kineto's (minified JSON, a bare event array) decoded
at once, JSON objects read with a clear error, and where a document ends before junk after it.

A large document's event array is decoded in pieces of about 4 MiB, cut between two events
(``}, {`` where a piece then reads as a JSON array: a cut inside a string or a nested value never
does), so that no one call holds the GIL for long: decoded in one call, 600 MB of minified trace
held it, and every route of the server, for 1.9 s on 2 cores (``bench/stalls.py --minified-mb``).
Where the pieces do not make the document, it is decoded in one call as before.
"""

from __future__ import annotations

import json
import re
from typing import Any

import msgspec

from tb_attn_plugin.trace.coerce import loads
from tb_attn_plugin.trace.columns import Builder, add_batch, add_loaded
from tb_attn_plugin.trace.events import Events, TraceError

__all__ = ["JUNK", "PIECES_FROM_BYTES", "TRUNCATED", "finish", "json_end", "load_object", "top_decoder", "whole"]

#: The top level of a document as raw slices (the events are decoded from theirs).
top_decoder = msgspec.json.Decoder(dict[str, msgspec.Raw])
TRUNCATED = "truncated trace: the JSON ends early (is it still being written?)"
#: The diagnostic that counts the bytes after the end of a trace's JSON (a log line appended to the
#: file, zeros left by a crash), which are ignored; counted as held (filler squeezed, strings clipped).
JUNK = "bytes after the end of the trace's JSON (ignored)"
_TRAILING = re.compile(r"trailing characters \(byte (\d+)\)")  # msgspec's message: where JSON ended
#: A document this large is decoded in pieces of ``_PIECE_BYTES`` (one msgspec call over 64 MiB
#: holds the GIL about 0.2 s on a loaded 2-core machine).
PIECES_FROM_BYTES = 64 << 20
_PIECE_BYTES = 4 << 20
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_BETWEEN = re.compile(rb"\}\s*,\s*\{")  # between two events, or somewhere else (checked)
_TRIES = 4  # cuts tried per piece (each costs a check of the piece): then the document is decoded whole


def load_object(text: bytes, what: str) -> dict[str, Any]:
    """``text`` as a JSON object, else TraceError (``TRUNCATED`` where the text ends too early)."""
    try:
        value = loads(text)
    except json.JSONDecodeError as exc:
        # A cut inside a string reports where the string starts, not where the text ends.
        if exc.pos >= len(text.rstrip()) or exc.msg.startswith("Unterminated string"):
            raise TraceError(TRUNCATED) from None
        raise TraceError(f"invalid JSON in the trace {what}: {exc}") from None
    except RecursionError as exc:
        raise TraceError(f"invalid JSON in the trace {what}: nested too deeply to read ({exc})") from None
    except ValueError as exc:
        raise TraceError(f"invalid JSON in the trace {what}: {exc}") from None
    if not isinstance(value, dict):
        raise TraceError(f"the trace {what} is not a JSON object")
    return value


def whole(document: bytes) -> Events:
    """Any layout: decode the whole document (memory ~ a few times its size). The stream's
    callers pass what ``_document`` held: filler squeezed out, and at most ``max_bytes``. A
    document that does not decode but is whole before some junk is decoded without the junk."""
    stripped = document.strip()
    if not stripped:
        raise TraceError("empty file")
    if stripped[:1] not in (b"[", b"{"):
        raise TraceError("not JSON: a trace is a JSON object with traceEvents")
    try:
        return _whole_value(stripped)
    except TraceError as exc:
        failure = exc
    end = json_end(stripped)
    if end is None or end >= len(stripped):
        raise failure
    return _whole_value(stripped[:end], junk=len(stripped) - end)


def _whole_value(stripped: bytes, *, junk: int = 0) -> Events:
    """A whole document that starts with ``[`` or ``{``, ``junk`` bytes of junk after it left out."""
    builder = Builder()
    if len(stripped) >= PIECES_FROM_BYTES:
        top = _in_pieces(builder, stripped)
        if top is not None:
            return finish(builder, top, junk)
        builder = Builder()
    if stripped[:1] == b"[":
        add_batch(builder, stripped)
        return finish(builder, {}, junk)
    try:
        # Fast path: top-level values as raw slices, the events through the typed decoder.
        raw = top_decoder.decode(stripped)
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
                return finish(builder, top, junk)
    top = load_object(stripped, "document")
    events = top.pop("traceEvents", None)
    if events is None:
        raise TraceError("not a trace: the JSON object has no traceEvents")
    builder = Builder()
    add_loaded(builder, events)
    return finish(builder, top, junk)


def _in_pieces(builder: Builder, text: bytes) -> dict[str, Any] | None:
    """The events of a whole document (an object with ``traceEvents``, or a bare array) added to
    ``builder`` piece by piece, and its other top-level values; None where the pieces do not make
    the document (``builder`` then holds what was added: the caller starts afresh)."""
    if text[:1] == b"[":
        start, head = 1, b""
    else:
        m = _EVENTS_KEY.search(text)
        if m is None:
            return None
        start, head = m.end(), text[1:m.start()].strip().rstrip(b",").strip()
    end = _pieces(builder, text, start)
    if end is None:
        return None
    tail = text[end:].strip()
    if text[:1] == b"[":
        return {} if not tail else None
    if not tail.endswith(b"}"):
        return None
    rest = tail[:-1].strip()
    if rest and not rest.startswith(b","):
        return None
    rest = rest[1:].strip()
    try:  # the keys around the events; invalid unless the events' key was found at the top level
        top = loads(b"{" + b",".join(part for part in (head, rest) if part) + b"}")
    except (ValueError, RecursionError):
        return None
    return top if isinstance(top, dict) and "traceEvents" not in top else None


def _pieces(builder: Builder, text: bytes, start: int) -> int | None:
    """Adds the events of the array whose first element is at ``text[start:]`` (after its ``[``)
    in pieces, each cut between two events; where the array ends (after its ``]``), or None."""
    pos = start
    while True:
        cut = _BETWEEN.search(text, pos + _PIECE_BYTES)
        for _ in range(_TRIES):
            if cut is None:
                break
            piece = b"[" + text[pos:cut.start() + 1] + b"]"
            if json_end(piece) == len(piece):
                break
            cut = _BETWEEN.search(text, cut.end())  # inside a string or a nested value: further on
        else:
            return None  # no cut found between events: decoded in one call
        if cut is None:  # the last piece: up to the array's end
            last = b"[" + text[pos:]
            end = json_end(last)
            if end is None or end == len(last):
                return None
            add_batch(builder, last[:end])
            return pos + end - 1
        add_batch(builder, piece)
        pos = cut.end() - 1


def finish(builder: Builder, top: dict[str, Any], junk: int = 0) -> Events:
    if not builder.x["name"] and not builder.m["ts"]:
        raise TraceError("the trace has no events")
    if junk:
        builder.count(JUNK, junk)
    return builder.finish(top)


def json_end(text: bytes) -> int | None:
    """Where the JSON value that ``text`` starts with (``[`` or ``{``) ends, if it ends before
    ``text`` does; else ``len(text)`` if it is whole, None if not (cut short, invalid, or nested
    deeper than msgspec reads). msgspec finds the end at C speed; ``NaN`` and ``Infinity``, which
    ``json.loads`` takes and msgspec does not, are read as numbers of the same length."""
    try:
        msgspec.json.decode(text, type=msgspec.Raw)
        return len(text)
    except msgspec.DecodeError as exc:
        message = str(exc)
    except RecursionError:
        return None
    if "invalid character" in message and (b"NaN" in text or b"Infinity" in text):
        lenient = text.replace(b"-Infinity", b"-11111111").replace(b"Infinity", b"11111111").replace(b"NaN", b"111")
        return json_end(lenient) if lenient != text else None
    m = _TRAILING.search(message)
    if m is None:
        return None
    for stop in (int(m.group(1)) - 1, int(m.group(1))):  # msgspec counts the byte it stopped at
        end = len(text[:stop].rstrip())
        try:
            with memoryview(text) as view, view[:end] as value:
                msgspec.json.decode(value, type=msgspec.Raw)
            return end
        except (msgspec.DecodeError, RecursionError):
            continue
    return None
