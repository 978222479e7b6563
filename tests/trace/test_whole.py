"""Documents read whole (``trace/whole.py``): minified objects and bare arrays decoded at once, JSON
objects read with a clear error, and where a document ends before junk after it. ``json_end`` is
checked against end offsets counted by hand, ``load_object`` and ``whole`` against the message
each kind of bad input must give; ``test_decode.py`` runs the real traces and junk through the stream.
"""

from __future__ import annotations

import json
import math
from typing import Any

import msgspec
import pytest

from tb_attn_plugin.trace.columns import Builder, add_batch
from tb_attn_plugin.trace.events import TraceError
from tb_attn_plugin.trace.whole import JUNK, TRUNCATED, finish, json_end, load_object, top_decoder, whole


def _x(name: str, ts: float, dur: float = 1.0) -> dict[str, Any]:
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur}


def _doc(*events: dict[str, Any], **keys: Any) -> bytes:
    return json.dumps({"traceEvents": list(events), **keys}, separators=(",", ":")).encode()


# -- where a document ends -------------------------------------------------------------------
@pytest.mark.parametrize(("text", "end"), [
    (b'{"a": 1}', 8),  # whole: its length
    (b"[1]   ", 6),  # whole, trailing whitespace included
    (b'{"a": 1} junk', 8),
    (b"[1, 2]\n\n   xyz", 6),  # the whitespace before the junk is not the document's
    (b'{"a": 1}{"b": 2}', 8),  # a second document right after the first
    (b"[1]\x00\x00", 3),  # zeros left by a crash
    (b'["]"] x', 5),  # a bracket inside a string is no end
    (b'{"a": NaN} x', 10),  # NaN, which msgspec refuses, is read as a number of 3 characters
    (b"[-Infinity] tail", 11),
    (b'{"a": NaN} NaN junk', 10),  # NaN in the junk too
    (b"[1] NaN", 3),
])
def test_json_end_is_where_the_first_value_ends(text: bytes, end: int) -> None:
    assert json_end(text) == end


@pytest.mark.parametrize("text", [b'{"a": [1, 2', b'{"a": x}', b"[NaN", b'{"a": "cut', b"[" * 100_000])
def test_json_end_of_a_value_cut_short_invalid_or_too_deep_is_none(text: bytes) -> None:
    assert json_end(text) is None


# -- JSON objects ----------------------------------------------------------------------------
def test_load_object_reads_an_object_and_integers_of_any_length() -> None:
    assert load_object(b'{"a": [1, "x"], "b": null}', "header") == {"a": [1, "x"], "b": None}
    assert load_object(b'{"a": ' + b"9" * 5000 + b"}", "header") == {"a": math.inf}


@pytest.mark.parametrize("text", [b'{"a": ', b'{"a": "unterminated', b'{"a": [1, 2', b"{  "])
def test_load_object_of_text_that_ends_early_is_truncated(text: bytes) -> None:
    with pytest.raises(TraceError) as raised:
        load_object(text, "header")
    assert str(raised.value) == TRUNCATED


@pytest.mark.parametrize(("text", "message"), [
    (b"[1]", "the trace trailer is not a JSON object"),
    (b'{"a": 1 "b": 2}', "invalid JSON in the trace trailer: Expecting ',' delimiter"),
    (b'{"a": 1}  x', "invalid JSON in the trace trailer: Extra data"),
    (b'{"a": "\xff"}', "invalid JSON in the trace trailer: 'utf-8' codec can't decode byte 0xff"),
    (b'{"a": ' + b"[" * 100_000, "invalid JSON in the trace trailer: nested too deeply to read"),
])
def test_load_object_names_what_it_read_in_its_error(text: bytes, message: str) -> None:
    with pytest.raises(TraceError) as raised:
        load_object(text, "trailer")
    assert str(raised.value).startswith(message)


def test_the_top_decoder_keeps_each_value_as_its_raw_text() -> None:
    raw = top_decoder.decode(b'{"traceEvents": [1, 2], "schemaVersion": 1, "x": {"y": [null]}}')
    assert {k: bytes(v) for k, v in raw.items()} == {"traceEvents": b"[1, 2]", "schemaVersion": b"1",
                                                     "x": b'{"y": [null]}'}
    with pytest.raises(msgspec.ValidationError):
        top_decoder.decode(b"[1]")


# -- whole documents ---------------------------------------------------------------------------
def test_a_minified_document_gives_its_events_and_keys() -> None:
    e = whole(_doc(_x("a", 10, 5), _x("b", 12, 1), schemaVersion=1, traceName="t", deviceProperties=[{"id": 0}]))
    assert e.names == ("a", "b") and e.ts.tolist() == [0.0, 2.0] and e.dur.tolist() == [5.0, 1.0]
    assert e.meta.schema_version == 1 and e.meta.extra == {"schemaVersion": 1, "traceName": "t"}
    assert e.meta.device_properties == ({"id": 0},) and e.diagnostics == {}


def test_a_bare_array_gives_its_events_and_no_metadata() -> None:
    e = whole(json.dumps([_x("a", 1), _x("b", 2)]).encode())
    assert e.names == ("a", "b") and e.meta.extra == {} and e.meta.schema_version is None


def test_a_header_only_json_loads_reads_takes_the_lenient_path() -> None:
    # NaN in the keys: msgspec refuses the document, json.loads reads it, and the events with it.
    e = whole(b'{"x": NaN, "big": ' + b"9" * 5000 + b', "traceEvents": [' + json.dumps(_x("a", 1)).encode() + b"]}")
    assert e.names == ("a",) and math.isnan(e.meta.extra["x"]) and e.meta.extra["big"] == math.inf


def test_of_two_event_lists_the_last_is_read() -> None:
    one, two = json.dumps([_x("a", 1)]), json.dumps([_x("b", 1), _x("c", 2)])
    e = whole(f'{{"traceEvents": {one}, "traceEvents": {two}}}'.encode())
    assert e.names == ("b", "c")  # as json.loads and msgspec read duplicate keys


def test_junk_after_a_whole_document_is_ignored_and_counted() -> None:
    doc = _doc(_x("a", 1))
    e = whole(doc + b"\n\nINFO: profiling done \n")
    # Stripped of the trailing whitespace, the junk is "\n\nINFO: profiling done": 2 + 20 bytes.
    assert e.names == ("a",) and e.diagnostics == {JUNK: 2 + len("INFO: profiling done")} == {JUNK: 22}
    assert whole(b"  " + doc + b"  ").diagnostics == {}  # whitespace around a document is no junk


def test_a_document_that_ends_early_with_junk_after_is_still_refused() -> None:
    with pytest.raises(TraceError, match="invalid JSON in the trace document"):
        whole(b'{"traceEvents": [' + json.dumps(_x("a", 1)).encode() + b"] junk")


@pytest.mark.parametrize(("text", "message"), [
    (b"", "empty file"),
    (b" \n\t", "empty file"),
    (b"hello", "not JSON: a trace is a JSON object with traceEvents"),
    (b'"traceEvents"', "not JSON"),
    (b'{"a": 1}', "not a trace: the JSON object has no traceEvents"),
    (b'{"traceEvents": null}', "no traceEvents"),
    (b'{"traceEvents": 5}', "traceEvents is not a list"),
    (b'{"traceEvents": []}', "the trace has no events"),
    (b'{"traceEvents": [{"ph": "M", "name": "process_name"}]}', "the trace has no events"),
    (b"[]", "the trace has no events"),
    (b'{"traceEvents": [', TRUNCATED),
    (b'{"x": ' + b"[" * 100_000 + b', "traceEvents": []}', "nested too deeply"),
])
def test_a_document_that_is_no_trace_is_refused_with_a_message(text: bytes, message: str) -> None:
    with pytest.raises(TraceError, match=message.replace("(", r"\(").replace(")", r"\)").replace("?", r"\?")):
        whole(text)


def test_memory_events_alone_are_a_trace() -> None:
    e = whole(_doc({"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 4, "args": {"Bytes": 64}}))
    assert len(e) == 0 and e.mem_bytes.tolist() == [64]


def test_finish_refuses_a_builder_without_events_and_counts_junk() -> None:
    with pytest.raises(TraceError, match="the trace has no events"):
        finish(Builder(), {})
    b = Builder()
    add_batch(b, json.dumps([_x("a", 1)]).encode(), scan=False)
    e = finish(b, {"traceName": "t"}, junk=7)
    assert e.diagnostics == {JUNK: 7} and e.meta.extra == {"traceName": "t"}


# -- a large document in pieces (issue 48: one msgspec call held the GIL 1.9 s for 600 MB) --------
def _same(a: Any, b: Any) -> None:
    import dataclasses

    import numpy as np

    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and np.array_equal(x, y), f.name
        else:
            assert x == y, f.name


def _args(i: int) -> dict[str, Any]:
    return {**_x('op},{"traceEvents":[' + str(i), i, 2.0), "args": {"list": [{"a": i}, {"b": "},{"}],
                                                                  "Input Dims": [[2, i % 7 + 1]]}}


@pytest.mark.parametrize("document", [
    _doc(*(_x(f"aten::op{i}", i) for i in range(300)), deviceProperties=[{"name": "x"}], schemaVersion=1),
    _doc(*(_args(i) for i in range(200)), note="a },{ \"traceEvents\":[ in a string"),
    json.dumps({"schemaVersion": 1, "pre": {"traceEvents": [1]}, "traceEvents": [_args(i) for i in range(150)],
                "post": [{"a": 1}, {"b": 2}]}, separators=(", ", ": ")).encode(),
    json.dumps([_x(f"op{i}", i) for i in range(300)]).encode(),  # a bare array
    _doc(),  # no events: refused alike
    _doc(*(_x("op", i) for i in range(100))) + b"\n# a log line after the trace",
    _doc(*(_x("op", i) for i in range(100))).replace(b'"dur":1.0', b'"dur":NaN'),
    _doc(*(_x("op", i) for i in range(100))) + b',"traceEvents":[]}',  # a key twice: decoded whole
], ids=["plain", "cuts-in-strings", "spaced-nested", "bare-array", "empty", "junk", "nan", "twice"])
def test_a_large_document_in_pieces_decodes_as_in_one_call(document: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    from tb_attn_plugin.trace import whole as whole_module

    def decoded() -> Any:
        try:
            return whole(document)
        except TraceError as exc:
            return str(exc)

    at_once = decoded()
    monkeypatch.setattr(whole_module, "PIECES_FROM_BYTES", 0)
    for piece in (1, 300, 2000):
        monkeypatch.setattr(whole_module, "_PIECE_BYTES", piece)
        got = decoded()
        if isinstance(at_once, str):
            assert got == at_once
        else:
            _same(got, at_once)


def test_the_pieces_are_cut_between_events_and_each_is_small(monkeypatch: pytest.MonkeyPatch) -> None:
    from tb_attn_plugin.trace import whole as whole_module

    pieces: list[int] = []

    def spy(builder: Builder, text: Any, **kwargs: Any) -> None:
        pieces.append(len(text))
        add_batch(builder, text, **kwargs)

    monkeypatch.setattr(whole_module, "add_batch", spy)
    monkeypatch.setattr(whole_module, "PIECES_FROM_BYTES", 0)
    monkeypatch.setattr(whole_module, "_PIECE_BYTES", 2000)
    document = _doc(*(_args(i) for i in range(200)), note="x")
    events = whole(document)
    assert len(events.name) == 200
    assert len(pieces) > 10 and max(pieces) < 2000 + 4 * 400  # a cut tried up to 4 events on
