"""Decoding trace bytes: Kineto's layout streamed in batches, other layouts whole, bad input refused.

Bad input must raise ``TraceError`` with a message for the user, never another exception;
odd values inside a good trace (NaN, numbers out of range, negative durations, unknown
categories) must load, with what was dropped or changed counted in ``Events.diagnostics``.
"""

from __future__ import annotations

import dataclasses
import gzip
import itertools
import json
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from tb_attn_plugin.trace import decode as decode_module
from tb_attn_plugin.trace.decode import decode, decode_bytes
from tb_attn_plugin.trace.events import Events, TraceError
from tb_attn_plugin.trace.kineto import Kind, kind_of
from tb_attn_plugin.trace.whole import JUNK

TraceBytes = Callable[[str], bytes]

#: Traces in Kineto's layout: each event starts on a line "  {". backward.json is in torch 2.13's
#: one-key-per-line variant, the others in the 2021-2024 variant.
KINETO_LAYOUT = ["nesting", "threads", "gpu", "gpu_legacy", "memory", "steps", "backward", "flops", "odd_values"]
OTHER_LAYOUT = ["threads_minified", "steps_bare_array"]


def chunked(data: bytes, size: int) -> Iterator[bytes]:
    return (data[i:i + size] for i in range(0, len(data), size))


def assert_same(a: Events, b: Events, *, diagnostics: bool = True) -> None:
    for f in dataclasses.fields(Events):
        if f.name == "diagnostics" and not diagnostics:
            continue
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and np.array_equal(x, y), f.name
        else:
            assert x == y, f.name


def minified(data: bytes) -> bytes:
    return json.dumps(json.loads(data), separators=(",", ":")).encode()


@pytest.fixture
def spy_whole(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts calls of the whole-document fallback."""
    calls: list[int] = []
    whole = decode_module.whole

    def spy(document: bytes) -> Events:
        calls.append(len(document))
        return whole(document)

    monkeypatch.setattr(decode_module, "whole", spy)
    return calls


# -- the two paths agree --------------------------------------------------------------------
@pytest.mark.parametrize("name", KINETO_LAYOUT)
@pytest.mark.parametrize("parts", [2, 3, 4])
def test_parts_merged_in_order_equal_the_whole(trace_bytes: TraceBytes, name: str, parts: int) -> None:
    """What ``trace.parallel`` does in several processes, here in one: cut at event starts,
    decode the first, middle and last parts on their own, merge."""
    data = trace_bytes(name)
    starts = [i for i in range(len(data)) if data.startswith(b"\n  {", i)]
    cuts = sorted({starts[len(starts) * k // parts] for k in range(1, parts)})
    bounds = [0, *cuts, len(data)]
    first = decode_module.decode_first_part([data[: bounds[1]]])
    assert first is not None
    others = [decode_module.decode_middle_part([data[a:b]]) for a, b in itertools.pairwise(bounds[1:-1])]
    others.append(decode_module.decode_last_part([data[bounds[-2]:]]))
    merged, whole = decode_module.merge_parts(*first, others), decode_bytes(data)
    assert_same(merged, whole, diagnostics=False)
    # The lenient path decodes a whole batch again, and which events share a batch with an odd
    # one depends on the cuts; every other count is the same.
    lenient = "events decoded leniently"
    assert {k: v for k, v in merged.diagnostics.items() if k != lenient} == \
        {k: v for k, v in whole.diagnostics.items() if k != lenient}
    assert (lenient in merged.diagnostics) == (lenient in whole.diagnostics)


@pytest.mark.parametrize("name", KINETO_LAYOUT)
def test_tiny_chunks_and_batches_equal_one_chunk(trace_bytes: TraceBytes, spy_whole: list[int], name: str) -> None:
    data = trace_bytes(name)
    one = decode([data])
    lenient = name == "odd_values"  # a batch that needs the lenient decoder is counted once per batch
    assert_same(one, decode(chunked(data, 7), batch_bytes=64), diagnostics=not lenient)
    assert_same(one, decode(chunked(data, 1), batch_bytes=1), diagnostics=not lenient)
    assert spy_whole == [], "Kineto's layout must be streamed, not decoded whole"


@pytest.mark.parametrize("name", KINETO_LAYOUT)
def test_streamed_equals_whole_document(trace_bytes: TraceBytes, spy_whole: list[int], name: str) -> None:
    data = trace_bytes(name)
    streamed = decode(chunked(data, 7), batch_bytes=64)
    assert spy_whole == []
    whole = decode_bytes(minified(data))
    assert len(spy_whole) == 1
    # The streamed path may note a leniently decoded batch more than once; everything else agrees.
    assert_same(streamed, whole, diagnostics=name != "odd_values")


@pytest.mark.parametrize(("name", "twin"), [("threads_minified", "threads"), ("steps_bare_array", "steps")])
def test_other_layouts_fall_back_to_whole_document(trace_bytes: TraceBytes, spy_whole: list[int], name: str,
                                                   twin: str) -> None:
    events = decode(chunked(trace_bytes(name), 7), batch_bytes=64)
    assert len(spy_whole) == 1
    kineto = decode_bytes(trace_bytes(twin))
    if name == "steps_bare_array":  # no document around the events: no metadata
        assert events.meta.schema_version is None and events.meta.extra == {}
        events = dataclasses.replace(events, meta=kineto.meta)
    assert_same(events, kineto)


@pytest.mark.parametrize("name", KINETO_LAYOUT + OTHER_LAYOUT)
def test_events_sorted_by_track_start_longest_first(trace_bytes: TraceBytes, name: str) -> None:
    e = decode_bytes(trace_bytes(name))
    order = np.lexsort((-e.dur, e.ts, e.track))
    assert np.array_equal(order, np.arange(len(e)))
    assert np.all(e.dur >= 0) and np.all(np.isfinite(e.ts)) and e.ts.min() >= 0


def test_metadata_from_header_and_trailer(trace_bytes: TraceBytes) -> None:
    meta = decode_bytes(trace_bytes("nesting")).meta
    assert (meta.schema_version, meta.base_time_ns) == (1, 1700000000000000000)
    assert (meta.record_shapes, meta.profile_memory, meta.with_flops) == (True, True, False)
    assert meta.extra["traceName"] == "nesting.json" and meta.extra["displayTimeUnit"] == "ms"
    assert meta.device_properties == () and meta.distributed_info is None
    legacy = decode_bytes(trace_bytes("gpu_legacy")).meta
    assert [p["name"] for p in legacy.device_properties] == ["Tesla V100-DGXS-32GB"]
    # Times are relative to the earliest event, memory events included.
    assert decode_bytes(trace_bytes("memory")).meta.t0_us == 5.0


def test_shapes_kept_only_for_ops_the_analysis_reads(trace_bytes: TraceBytes) -> None:
    e = decode_bytes(trace_bytes("flops"))
    kept = {e.names[n]: e.shapes[s] for n, s in zip(e.name.tolist(), e.shape.tolist(), strict=True) if s >= 0}
    assert "aten::t" not in kept
    assert kept["aten::linear"].dims == ([2, 16, 32], [96, 32], [96])
    flash = kept["aten::_scaled_dot_product_flash_attention_for_cpu"]
    assert flash.concrete[4] in ("True", "False") and flash.types[:3] == ("float", "float", "float")


# -- input that is not a readable trace -----------------------------------------------------
@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "empty file"),
        (b"  \n\t ", "empty file"),
        (b"hello world", "not JSON"),
        (b"<html><body>404 Not Found</body></html>", "not JSON"),
        (gzip.compress(b'{"traceEvents": []}'), "not JSON"),  # still compressed
        (b'\xff\xfe{"traceEvents": []}', "not JSON"),
        (b"42", "not JSON"),
        (b'{"a": 1}', "no traceEvents"),
        (b'{"traceEvents": null}', "no traceEvents"),
        (b'{"traceEvents": 5}', "not a list"),
        (b'{"traceEvents": []}', "no events"),
        (b"[]", "no events"),
        (b'{"traceEvents": [1, "x", null]}', "no events"),
        (b'{\n  "traceEvents": [\n  ]\n}', "no events"),
        (b'{\n  "traceEvents": [\n  {\n    "ph": "M", "name": "process_name", "pid": 1, "tid": 0,\n'
         b'    "args": {\n      "name": "python"\n    }\n  }\n  ]\n}', "no events"),
        (b'{"traceEvents": [', "truncated"),
        (b'{"traceEvents": [{"ph": "X", "name": "\xff", "ts": 1, "dur": 1}]}', "invalid JSON"),
        (b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 1}] trailing}', "invalid JSON"),
        (b'{"traceEvents": ' + b"[" * 20_000, "invalid JSON"),
        (b"[" * 20_000 + b"]" * 20_000, "invalid JSON"),
        (b'{\n  "traceEvents": [\n  {\n    "ph": "X", "name": "a", "ts": 1, "dur": 1, "args": '
         + b"[" * 20_000 + b"]" * 20_000 + b"\n  }\n  ]\n}", "invalid JSON"),
        (b'{\n  "schemaVersion": 1 "x": 2,\n  "traceEvents": [\n  {\n    "ph": "X", "name": "a", "ts": 1, '
         b'"dur": 1\n  }\n  ]\n}', "invalid JSON in the trace header"),
    ],
)
def test_not_a_trace(data: bytes, message: str) -> None:
    with pytest.raises(TraceError, match=message):
        decode_bytes(data)
    with pytest.raises(TraceError, match=message):
        decode(chunked(data, 7), batch_bytes=64)


#: What a finished trace may be followed by: a log line, zeros left by a crash, bytes that are not
#: UTF-8, brackets, the start of another document, the whole trace again.
_JUNK = [b" trailing", b"\x00" * 300, b"\nINFO: profiling done\n", b"\xff\xfe\x00", b"}", b"]}", b'{"traceEvents": [',
         b'\n"unterminated', b"AGAIN"]


@pytest.mark.parametrize("junk", _JUNK, ids=lambda j: repr(j[:12]))
@pytest.mark.parametrize("name", ["nesting", "odd_values", "threads_minified", "steps_bare_array"])
def test_junk_after_a_whole_trace_is_ignored_and_counted(trace_bytes: TraceBytes, name: str, junk: bytes) -> None:
    """A trace that ends, followed by anything: the trace as it is, and the bytes after its end
    counted in the diagnostics; not "truncated", which the tab shows as a trace still being
    written (odd_values has NaN, which the end is found past too)."""
    data = trace_bytes(name).rstrip()
    junk = data if junk == b"AGAIN" else junk  # in small batches: the end is inside one of them
    for got, want in ((decode_bytes(data + junk), decode_bytes(data)),
                      (decode(chunked(data + junk, 7), batch_bytes=64), decode(chunked(data, 7), batch_bytes=64))):
        assert got.diagnostics.pop(JUNK) == pytest.approx(len(junk.rstrip()), abs=1)
        assert_same(got, want)


@pytest.mark.parametrize("parts", [2, 3])
def test_parts_of_a_trace_written_twice_are_read_by_one_process(trace_bytes: TraceBytes, parts: int) -> None:
    """Cut in parts (``trace.parallel``), a file holding a trace twice: a part in which the first
    copy ends declines (None, or TraceError from a worker) so that one process reads the file; a
    last part that holds only junk after the end reads its trailer and counts the junk."""
    data = trace_bytes("nesting").rstrip()
    twice = data + data
    starts = [i for i in range(len(twice)) if twice.startswith(b"\n  {", i)]
    cuts = sorted({starts[len(starts) * k // parts] for k in range(1, parts)})
    bounds = [0, *cuts, len(twice)]
    ends_first = bounds[1] > len(data)
    first = decode_module.decode_first_part([twice[: bounds[1]]], batch_bytes=64)
    assert (first is None) == ends_first
    for a, b in itertools.pairwise(bounds[1:-1]):
        if a < len(data) < b:
            with pytest.raises(TraceError):
                decode_module.decode_middle_part([twice[a:b]], batch_bytes=64)
    assert decode(chunked(twice, 7), batch_bytes=64).diagnostics[JUNK] == pytest.approx(len(data), abs=1)


def test_a_trace_cut_short_after_junk_like_bytes_is_still_truncated() -> None:
    """Brackets that close inside a string are no end: a document cut inside its events is truncated."""
    data = b'{\n  "traceEvents": [\n  {"ph": "X", "name": "]}", "ts": 1, "dur": 1},\n  {"ph": "X", "name": "a'
    for got in (lambda: decode_bytes(data), lambda: decode(chunked(data, 5), batch_bytes=32)):
        with pytest.raises(TraceError, match="truncated"):
            got()


def test_truncated_mid_events(trace_bytes: TraceBytes) -> None:
    data = trace_bytes("nesting")
    cut = data.index(b'"name": "aten::bmm"')
    with pytest.raises(TraceError, match="truncated"):
        decode_bytes(data[:cut])
    with pytest.raises(TraceError, match="truncated"):
        decode_bytes(data.rstrip()[:-1])  # only the final brace missing
    with pytest.raises(TraceError, match="truncated"):
        decode(chunked(data[:cut], 7), batch_bytes=64)


@pytest.mark.parametrize(("name", "stride"), [("threads", 1), ("nesting", 7), ("backward", 7), ("threads_minified", 1),
                                              ("steps_bare_array", 3)])
def test_every_prefix_is_refused(trace_bytes: TraceBytes, name: str, stride: int) -> None:
    """A file cut anywhere (still being written, copy interrupted) gives TraceError and nothing else."""
    data = trace_bytes(name).rstrip()
    for n in range(0, len(data), stride):
        with pytest.raises(TraceError):
            decode_bytes(data[:n])
        if n % 11 == 0:
            with pytest.raises(TraceError):
                decode(chunked(data[:n], 7), batch_bytes=64)


# -- odd values inside a good trace --------------------------------------------------------
def _count(diagnostics: dict[str, int], word: str) -> int:
    return sum(v for k, v in diagnostics.items() if word in k)


@pytest.mark.parametrize("layout", ["kineto", "minified", "chunked"])
def test_odd_values_load_and_are_counted(trace_bytes: TraceBytes, layout: str) -> None:
    data = trace_bytes("odd_values")
    events = {"kineto": lambda: decode_bytes(data), "minified": lambda: decode_bytes(minified(data)),
              "chunked": lambda: decode(chunked(data, 7), batch_bytes=64)}[layout]()
    names = [events.names[n] for n in events.name.tolist()]
    assert sorted(names) == sorted(["aten::mm", "custom span", "another custom span", "PyTorch Profiler (0)",
                                    "huge external id", "negative dur"])
    d = events.diagnostics
    assert _count(d, "unusable times") == 3  # ts 1e400, ts NaN, dur NaN: dropped
    assert _count(d, "negative durations") == 1
    assert events.dur[names.index("negative dur")] == 0.0
    assert _count(d, "memory events") == 2  # ts NaN, Bytes beyond int64: dropped
    assert events.mem_bytes.tolist() == [1024]
    assert "category 'my_category'" in d and not any("Trace" in k for k in d)
    huge = names.index("huge external id")
    assert (events.ext[huge], events.seq[huge]) == (-1, -1)  # beyond int64: treated as absent
    assert events.ext[names.index("aten::mm")] == 1
    assert np.all(np.isfinite(events.ts)) and np.all(np.isfinite(events.mem_ts))
    assert events.kind[names.index("custom span")] == Kind.OTHER


def test_unknown_category_counts_its_events(trace_bytes: TraceBytes) -> None:
    assert decode_bytes(trace_bytes("odd_values")).diagnostics["category 'my_category'"] == 2


def _kineto(*events: str) -> bytes:
    body = ",\n".join("  {\n    " + e + "\n  }" for e in events)
    return ('{\n  "schemaVersion": 1,\n  "traceEvents": [\n' + body + "\n  ],\n  \"traceName\": \"t\"\n}\n").encode()


OP = '"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 10'


@pytest.mark.parametrize("args", ['"Bytes": 4, "Device Type": 200, "Device Id": 0',
                                  '"Bytes": 4, "Device Type": 1, "Device Id": 1099511627776'])
@pytest.mark.parametrize("layout", ["kineto", "minified"])
def test_memory_device_out_of_range(args: str, layout: str) -> None:
    data = _kineto(OP, '"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 5, "args": {' + args + "}")
    events = decode_bytes(data if layout == "kineto" else minified(data))
    assert len(events) == 1


@pytest.mark.parametrize("ts", ["1e400", "-1e400"])
def test_memory_event_with_infinite_time_is_dropped(ts: str) -> None:
    events = decode_bytes(_kineto(OP, '"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": ' + ts
                                  + ', "args": {"Bytes": 4}'))
    assert events.ts.tolist() == [0.0] and events.mem_ts.size == 0
    assert _count(events.diagnostics, "memory") == 1


def test_one_event_per_line_at_two_spaces() -> None:
    data = b'{\n  "traceEvents": [\n  {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 0, ' \
           b'"dur": 5},\n  {"ph": "X", "cat": "cpu_op", "name": "b", "pid": 1, "tid": 1, "ts": 1, "dur": 2}\n  ]\n}\n'
    json.loads(data)  # valid JSON
    assert len(decode_bytes(data)) == 2


# -- the schema adapter ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("category", "kind"),
    [("cpu_op", Kind.CPU_OP), ("Operator", Kind.CPU_OP), ("user_annotation", Kind.ANNOTATION),
     ("gpu_user_annotation", Kind.GPU_ANNOTATION), ("kernel", Kind.KERNEL), ("Kernel", Kind.KERNEL),
     ("cuda_runtime", Kind.RUNTIME), ("Runtime", Kind.RUNTIME), ("cuda_driver", Kind.RUNTIME),
     ("gpu_memcpy", Kind.MEMCPY), ("Memcpy", Kind.MEMCPY), ("gpu_memset", Kind.MEMSET), ("Memset", Kind.MEMSET),
     ("cuda_sync", Kind.SYNC), ("python_function", Kind.MODULE), ("Trace", Kind.OTHER), ("my_category", Kind.OTHER),
     ("", Kind.OTHER), (None, Kind.OTHER)],
)
def test_categories_of_every_schema_generation(category: str | None, kind: Kind) -> None:
    assert kind_of(category) == kind


def test_module_events_kept_other_python_functions_dropped() -> None:
    events = decode_bytes(_kineto(
        OP,
        '"ph": "X", "cat": "python_function", "name": "nn.Module: Attention_0", "pid": 1, "tid": 1, "ts": 1, "dur": 5',
        '"ph": "X", "cat": "python_function", "name": "model.py(42): forward", "pid": 1, "tid": 1, "ts": 2, "dur": 1',
    ))
    assert sorted(events.names) == ["aten::mm", "nn.Module: Attention_0"]
    assert events.diagnostics == {}


@pytest.mark.parametrize("layout", ["kineto", "minified"])
def test_a_pid_of_digits_that_is_no_number_is_text(layout: str) -> None:
    """A pid or tid of digits that ``int()`` refuses (a superscript two, 5000 digits) raised a
    ValueError out of the decoder; it is a thread's name, clipped like any other string."""
    pids = ["²", "9" * 5000, "25738"]
    events = [{"ph": "X", "name": "a", "pid": pid, "tid": 1, "ts": i, "dur": 1} for i, pid in enumerate(pids)]
    indent = 2 if layout == "kineto" else None
    ev = decode_bytes(json.dumps({"traceEvents": events}, indent=indent, ensure_ascii=False).encode())
    assert [t.pid for t in ev.tracks] == ["²", "9" * 1999 + "…", 25738]
