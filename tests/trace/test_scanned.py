"""The compiled scanner (``trace/_scan.c`` through ``trace/scanned.py``) against the pure path it
accelerates: for any batch the scanner takes, the builder's columns, names, tracks, shapes and
diagnostics are exactly those of msgspec's typed decoding; for any batch it does not take, the
pure path decodes it. Checked on every trace we have, on generated events of every odd type and
spelling (hypothesis), and on real batches with bytes flipped, cut and duplicated.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import SHARED_TRACES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devtools.corpus import TRACES as CORPUS_TRACES
from tb_attn_plugin.trace import decode as decode_module
from tb_attn_plugin.trace import io, scanned
from tb_attn_plugin.trace.coerce import MAX_ARG_BYTES, MAX_NAME_CHARS, clip, cut_arg_label
from tb_attn_plugin.trace.columns import Builder, add_batch
from tb_attn_plugin.trace.decode import decode
from tb_attn_plugin.trace.events import Events, TraceError

pytestmark = pytest.mark.skipif(scanned._scan is None, reason="the scanner is not built (pure path only)")

HERE = Path(__file__).resolve().parent
TRACES = sorted(SHARED_TRACES.glob("*/*.json.gz")) + sorted(CORPUS_TRACES.glob("*/**/*.pt.trace.json*")) + sorted(
    (HERE.parent / "traces").glob("*.json"))


def _state(b: Builder) -> dict[str, Any]:
    return {"x": {k: v.tobytes() for k, v in b.x.items()}, "m": {k: v.tobytes() for k, v in b.m.items()},
            "names": list(b.names), "tracks": list(b.tracks), "shapes": list(b.shapes), "diag": dict(b.diag),
            "diag_order": list(b.diag), "device": sorted(b.device_tracks), "shape_keys": list(b.shape_ids)}


def _both(text: bytes, builder_setup: list[bytes] = ()) -> tuple[Any, Any]:
    """The builder after adding ``text`` through the scanner and through the pure path (or the
    error each raised), after the same earlier batches."""
    out = []
    for scan in (True, False):
        b = Builder()
        try:
            for earlier in builder_setup:
                add_batch(b, earlier, scan=False)
            add_batch(b, text, scan=scan)
            out.append(_state(b))
        except TraceError as exc:
            out.append(("error", str(exc)))
    return out[0], out[1]


def _events_equal(a: Events, b: Events) -> None:
    for name in ("name", "kind", "track", "ts", "dur", "ext", "corr", "seq", "shape", "graph", "mem_ts", "mem_track",
                 "mem_bytes", "mem_total", "mem_device_type", "mem_device_id"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and np.array_equal(x, y, equal_nan=True), name
    assert (a.names, a.tracks, a.shapes, a.meta, a.diagnostics) == (b.names, b.tracks, b.shapes, b.meta, b.diagnostics)
    assert list(a.diagnostics) == list(b.diagnostics)


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name[:48])
def test_every_trace_decodes_to_the_same_events_through_the_scanner(path: Path, monkeypatch: pytest.MonkeyPatch
                                                                     ) -> None:
    taken = []
    real = scanned._scan.scan

    def counting(text: Any) -> Any:
        got = real(text)
        taken.append(got is not None)
        return got

    monkeypatch.setattr(scanned._scan, "scan", counting)
    fast = decode(io.read_chunks(str(path)), batch_bytes=256 << 10)  # small batches: several threads at once
    monkeypatch.setenv("TB_ATTN_PURE_DECODE", "1")
    pure = decode(io.read_chunks(str(path)), batch_bytes=256 << 10)
    _events_equal(fast, pure)
    if path.name not in _ODD_ON_PURPOSE:
        assert taken and all(taken), "every batch of a well-formed trace goes through the scanner"


#: Hand-written traces of values the scanner leaves to the pure path (NaN, strings for numbers).
_ODD_ON_PURPOSE = {"odd_values.json"}


def test_off_switch_and_missing_module_take_the_pure_path(monkeypatch: pytest.MonkeyPatch) -> None:
    text = b'[{"ph": "X", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1.5, "dur": 2}]'
    assert scanned.available()
    monkeypatch.setenv("TB_ATTN_PURE_DECODE", "1")
    assert not scanned.available() and scanned.scan(text) is None
    monkeypatch.delenv("TB_ATTN_PURE_DECODE")
    monkeypatch.setattr(scanned, "_scan", None)
    assert not scanned.available()
    b = Builder()
    add_batch(b, text)
    assert b.names == ["aten::mm"] and list(b.x["ts"]) == [1.5]


@pytest.mark.parametrize(("text", "taken"), [
    (b'[{"ph": "X", "name": "aten::mm", "pid": "Spans", "tid": 7, "ts": 1, "dur": 2}]', True),
    (b'[{"ph": "X", "name": "caf\xc3\xa9", "ts": 1e3, "dur": 2.5E-1, "args": null}]', True),
    (b'[{"ph": "X", "name": "a\\"b", "ts": 1, "dur": 2}]', False),  # an escape in a name: pure path
    (b'[{"ph": "X", "name": "a", "args": {"x": "\\ud800"}, "ts": 1}]', False),  # a lone surrogate
    (b'[{"ph": "X", "name": "a", "args": {"x": "\\n\\u00e9"}, "ts": 1}]', True),  # escapes in skipped values
    (b'[{"ph": "X", "name": "\xff", "ts": 1}]', False),  # invalid UTF-8
    (b'[{"ph": "X", "name": "a", "ts": 1, "ts": 2}]', False),  # a field twice
    (b'[{"ph": "X", "name": "a", "ts": 12345678901234567890}]', False),  # an int beyond int64
    (b'[{"ph": "X", "name": "a", "ts": 9007199254740993}]', False),  # an int a float cannot hold
    (b'[{"ph": "X", "name": "a", "ts": 1e400}]', False),  # a float out of range
    (b'[{"ph": "X", "name": "a", "pid": 1.0, "ts": 1}]', False),  # a float where an int belongs
    (b'[{"ph": "X", "name": "a", "pid": true, "ts": 1}]', False),
    (b'[{"ph": "X", "name": "a", "ts": 1, "args": {"Bytes": null, "correlation": 5}}]', True),
    (b'[{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "args": {"correlation": 5, "graph id": 3}}]', True),
    (b'[{"ph": "X", "name": "a", "ts": 1, "args": {"graph id": 3, "graph id": 4}}]', False),  # a field twice
    (b'[' + b'[' * 70 + b']' * 70 + b']', False),  # nested deeper than the scanner goes
    (b'[{"ph": "X", "name": "a", "ts": 01}]', False),
    (b'[{"ph": "X", "name": "a", "ts": 1,}]', False),
    (b'[{"ph": "X", "name": "a", "ts": 1}] x', False),
    (b'[{"ph": "X", "name": "a", "ts": 1}', False),
    (b'[]', True),
])
def test_what_the_scanner_takes_and_what_it_leaves(text: bytes, taken: bool) -> None:
    assert (scanned._scan.scan(text) is not None) == taken
    fast, pure = _both(text)
    assert fast == pure


def test_the_scanner_clips_names_as_the_builder_interns_them() -> None:
    """Names over ``MAX_NAME_CHARS`` characters keep their first ``MAX_NAME_CHARS - 1`` and "…",
    counted in characters (code points) whatever their bytes; names equal once clipped are one
    name, also where one was written with its "…"; the scanner's limit is the builder's."""
    assert scanned._scan.MAX_NAME_CHARS == MAX_NAME_CHARS
    n = MAX_NAME_CHARS
    names = ["a" * (n + 1), "a" * (n - 1) + "…", "a" * (n - 1) + "b" * 50, "é" * n, "é" * (n + 1), "😀" * (n + 1),
             "€" * (n - 1) + "😀", "x" * 3 * n, "a" * n, "nn.Module: " + "m" * n]
    events = [{"ph": "X", "cat": "python_function" if i == len(names) - 1 else "cpu_op", "name": name, "pid": 1,
               "tid": 1, "ts": i, "dur": 1} for i, name in enumerate(names * 2)]
    text = json.dumps(events, ensure_ascii=False).encode()
    got = scanned._scan.scan(text)
    assert got is not None
    assert {n.decode() for n in got[2]} == {clip(n) for n in names}  # the scanner's own names (once each)
    fast, pure = _both(text)
    assert fast == pure
    assert fast["names"] == [
        "a" * (n - 1) + "…", "é" * n, "é" * (n - 1) + "…", "😀" * (n - 1) + "…", "€" * (n - 1) + "😀",
        "x" * (n - 1) + "…", "a" * n, "nn.Module: " + "m" * (n - 12) + "…"]
    assert np.frombuffer(fast["x"]["name"], np.int32).tolist() == [0, 0, 0, 1, 2, 3, 4, 5, 6, 7] * 2


def test_argument_lists_over_the_bound_are_read_as_absent_on_both_paths() -> None:
    """An argument list written in more than ``MAX_ARG_BYTES`` is absent, at exactly the same length on both paths,
    counted by argument and op in the same order; the scanner's bound is the builder's."""
    assert scanned._scan.MAX_ARG_BYTES == MAX_ARG_BYTES

    def listing(n: int, item: str) -> str:  # a JSON list of exactly n bytes, ", " between items
        k = (n - 2 + 2) // (len(item) + 2)
        body = ", ".join([item] * k)
        return "[" + body + " " * (n - 2 - len(body)) + "]"

    at, over = listing(MAX_ARG_BYTES, "[1]"), listing(MAX_ARG_BYTES + 1, "[1]")
    assert (len(at), len(over)) == (MAX_ARG_BYTES, MAX_ARG_BYTES + 1)
    concrete = listing(MAX_ARG_BYTES + 1, '""')
    rows = [("aten::mm", {"Input Dims": at, "Input type": '["float"]'}),
            ("aten::mm", {"Input Dims": over, "Input type": '["float"]'}),
            ("aten::bmm", {"Input Dims": "[[2, 3]]", "Concrete Inputs": concrete}),
            ("aten::mm", {"Input type": over}),  # no Input Dims: no shapes, the cut still counted
            ("aten::relu_", {"Input Dims": over}),  # an op whose shapes are not read: not counted
            ("aten::mm", {"Input Dims": over, "Input type": '["float"]'})]
    events = []
    for i, (name, args) in enumerate(rows):
        fields = ", ".join(f'"{k}": {v}' for k, v in args.items())
        events.append(f'{{"ph": "X", "cat": "cpu_op", "name": "{name}", "pid": 1, "tid": 1, "ts": {i}, "dur": 1, '
                      f'"args": {{{fields}}}}}')
    text = ("[" + ",\n".join(events) + "]").encode()
    assert scanned._scan.scan(text) is not None
    fast, pure = _both(text)
    assert fast == pure
    shape = np.frombuffer(fast["x"]["shape"], np.int32).tolist()
    assert shape[1] == shape[3] == shape[4] == shape[5] == -1 and shape[0] >= 0 and shape[2] >= 0
    assert fast["diag"] == {cut_arg_label(0, "aten::mm"): 2, cut_arg_label(1, "aten::mm"): 1,
                            cut_arg_label(2, "aten::bmm"): 1}


_SPELLINGS = ["External id", "external id", "correlation", "Sequence number", "Bytes", "Total Allocated",
              "Device Type", "Device Id", "Input Dims", "Input type", "Concrete Inputs", "Record function id"]
_ODD = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**64), 2**64), st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8), st.lists(st.integers(-3, 2**40), max_size=3),
    st.sampled_from([[[2, 3], [3]], ["float", "Scalar"], ["", "1"], {"a": [1, {"b": None}]}]))
_ARGS = st.dictionaries(st.sampled_from(_SPELLINGS), _ODD, max_size=6)
_EVENT = st.fixed_dictionaries(
    {},
    optional={
        "ph": st.one_of(st.sampled_from(["X", "X", "X", "i", "M", "f", ""]), _ODD),
        "name": st.one_of(st.sampled_from(["aten::mm", "[memory]", "nn.Module: Linear_0", "py", "é\u2603",
                                           "tb_attn/L0/attn", "ProfilerStep#3"]), _ODD),
        "cat": st.one_of(st.sampled_from(["cpu_op", "kernel", "python_function", "Trace", "odd", "", None]), _ODD),
        "pid": st.one_of(st.integers(-5, 5), st.sampled_from(["Spans", "7", "stream 7"]), _ODD),
        "tid": st.one_of(st.integers(-5, 5), st.sampled_from(["PyTorch Profiler", "7"]), _ODD),
        "ts": st.one_of(st.floats(-1e21, 1e21), st.integers(-(2**60), 2**60), _ODD),
        "dur": st.one_of(st.floats(-10, 1e21), _ODD),
        "args": st.one_of(_ARGS, _ODD),
        "id": _ODD,
    })


#: Names about ``MAX_NAME_CHARS`` characters long, of characters of 1 to 4 bytes in UTF-8, some
#: ending in the ellipsis a clipped name ends in.
_LONG_NAME = st.builds(lambda c, n, tail: c * n + tail, st.sampled_from(["a", "é", "€", "😀", "a€"]),
                       st.integers(MAX_NAME_CHARS - 4, MAX_NAME_CHARS + 2) | st.sampled_from([1000, 3000]),
                       st.sampled_from(["", "…", "x", "b…"]))
_INT64 = st.one_of(st.integers(-(2**63) + 1, 2**63 - 1), st.integers(-3, 300), st.none())
#: Events of the declared types, with edge values: batches the scanner takes.
_TYPED_EVENT = st.fixed_dictionaries(
    {"ph": st.sampled_from(["X", "X", "X", "i", "M"]),
     "name": st.one_of(st.sampled_from(["aten::mm", "[memory]", "nn.Module: Linear_0", "py", "ProfilerStep#1"]),
                       st.text(st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters='"\\'),
                               max_size=6), _LONG_NAME),
     "ts": st.one_of(st.floats(-1e21, 1e21, allow_nan=False), st.integers(-(2**53), 2**53),
                     st.decimals(-10**15, 10**15, places=3, allow_nan=False, allow_infinity=False).map(float))},
    optional={
        "cat": st.sampled_from(["cpu_op", "kernel", "gpu_memcpy", "python_function", "Trace", "odd", "", None]),
        "pid": st.one_of(st.integers(-(2**63), 2**63 - 1), st.sampled_from(["Spans", "7"])),
        "tid": st.one_of(st.integers(0, 9), st.sampled_from(["PyTorch Profiler", "stream 7"])),
        "dur": st.one_of(st.floats(-10, 1e21, allow_nan=False), st.integers(-5, 2**53)),
        "args": st.one_of(st.none(), st.fixed_dictionaries({}, optional={
            "External id": _INT64, "external id": _INT64, "correlation": _INT64, "Sequence number": _INT64,
            "Bytes": _INT64, "Total Allocated": _INT64, "Device Type": _INT64, "Device Id": _INT64,
            "Input Dims": st.lists(st.lists(st.integers(0, 2**40), max_size=3), max_size=3),
            "Input type": st.lists(st.sampled_from(["float", "c10::Half", "Scalar", ""]), max_size=3),
            "Concrete Inputs": st.lists(st.sampled_from(["", "1", "False"]), max_size=3),
            "Input Strides": st.lists(st.lists(st.integers(0, 99), max_size=3), max_size=3)})),
    })


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=st.lists(st.one_of(_TYPED_EVENT, _TYPED_EVENT, _TYPED_EVENT, _EVENT), max_size=12),
       earlier=st.booleans(), indent=st.booleans())
def test_generated_events_give_what_the_pure_path_gives(events: list[dict[str, Any]], earlier: bool,
                                                        indent: bool) -> None:
    text = json.dumps(events, indent=2 if indent else None, ensure_ascii=False).encode("utf-8", "surrogatepass")
    setup = [b'[{"ph": "X", "name": "py", "cat": "cpu_op", "pid": 7, "tid": 7, "ts": 0, "dur": 1}]'] if earlier else []
    fast, pure = _both(text, setup)
    assert fast == pure
    got = scanned._scan.scan(text)
    if got is not None:  # the scanner clips names itself (the builder would hide it if it did not)
        assert all(clip(name) == name for name in (n.decode() for n in got[2]))


def _batch() -> bytes:
    """A real batch: the first 60 events of a runner trace, as the decoder cuts them."""
    path = next(p for p in TRACES if "hf-gpt2-eager-train" in str(p))
    data = b"".join(io.read_chunks(str(path)))
    start = data.index(b"\n  {")
    ends = [i for i in range(start, len(data)) if data.startswith(b"\n  {", i)][:61]
    return b"[" + data[start: ends[-1]].rstrip().rstrip(b",") + b"]"


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_mutated_real_batches_give_what_the_pure_path_gives(data: st.DataObject) -> None:
    text = bytearray(_BATCH)
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(text) - 1))
        how = data.draw(st.sampled_from(["flip", "cut", "dup", "byte"]))
        if how == "flip":
            text[at] ^= 1 << data.draw(st.integers(0, 7))
        elif how == "cut":
            del text[at: at + data.draw(st.integers(1, 40))]
        elif how == "dup":
            text[at:at] = text[at: at + data.draw(st.integers(1, 40))]
        else:
            text[at] = data.draw(st.sampled_from(b'"\\{}[],:0-.eE \x00\xc3\xff'))
    fast, pure = _both(bytes(text))
    assert fast == pure


_BATCH = _batch()


def test_batches_scan_in_threads_at_once_without_the_gil() -> None:
    """Four threads scanning the same batch at once get the same result as one."""
    text = _BATCH
    want = scanned._scan.scan(text)
    got: list[Any] = []

    def run() -> None:
        for _ in range(20):
            got.append(scanned._scan.scan(text))

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 80 and all(g == want for g in got)


def test_the_pipeline_appends_in_file_order_and_falls_back_in_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches the scanner leaves (an escaped name) go to the pure path in their turn, so names
    are interned in file order however the threads finish."""
    events = [{"ph": "X", "name": n, "pid": 1, "tid": 1, "ts": float(i), "dur": 1.0}
              for i, n in enumerate(["a", 'q"uote', "b", "c", 'd"', "e"] * 200)]
    text = json.dumps({"traceEvents": events}, indent=2).encode()
    fast = decode([text], batch_bytes=4096)
    monkeypatch.setenv("TB_ATTN_PURE_DECODE", "1")
    pure = decode([text], batch_bytes=4096)
    _events_equal(fast, pure)
    assert fast.names[:3] == ("a", 'q"uote', "b")
    assert decode_module.scanned_available() is False
