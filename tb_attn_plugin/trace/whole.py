"""Documents read whole: the layouts other than Kineto's (minified JSON, a bare event array) decoded
at once, JSON objects read with a clear error, and where a document ends before junk after it.
"""

from __future__ import annotations

import json
import re
from typing import Any

import msgspec

from tb_attn_plugin.trace.coerce import loads
from tb_attn_plugin.trace.columns import Builder, add_batch, add_loaded
from tb_attn_plugin.trace.events import Events, TraceError

__all__ = ["JUNK", "TRUNCATED", "finish", "json_end", "load_object", "top_decoder", "whole"]

#: The top level of a document as raw slices (the events are decoded from theirs).
top_decoder = msgspec.json.Decoder(dict[str, msgspec.Raw])
TRUNCATED = "truncated trace: the JSON ends early (is it still being written?)"
#: The diagnostic that counts the bytes after the end of a trace's JSON (a log line appended to the
#: file, zeros left by a crash), which are ignored; counted as held (filler squeezed, strings clipped).
JUNK = "bytes after the end of the trace's JSON (ignored)"
_TRAILING = re.compile(r"trailing characters \(byte (\d+)\)")  # msgspec's message: where JSON ended


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
