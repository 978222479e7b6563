"""Traces hostile in shape: decoding stays within bounds of time and memory, whatever the input.

Each hostile file is decoded by ``load_events`` in a subprocess with a time limit, which reports
its peak RSS. The outcome must be the expected one: the events, or ``TraceError`` with a clear
message; never ``RecursionError``, ``MemoryError``, a crash or a hang. Files are written once,
under the module's temporary directory, and deleted after their test.

Run with ``-s`` to see each case's time and peak memory.
"""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import pytest

from devtools.hostile_traces import write_long_lists
from tb_attn_plugin.engine.limits import DEFAULT_MAX_TRACE_BYTES
from tb_attn_plugin.engine.loader import Loader
from tb_attn_plugin.trace import decode as decode_module
from tb_attn_plugin.trace.decode import decode_bytes
from tb_attn_plugin.trace.discover import TraceFile
from tb_attn_plugin.trace.events import TraceError

MiB = 1 << 20
TIMEOUT_S = 30.0
DEEP = 100_000

_HEAD = b'{\n  "schemaVersion": 1,\n  "traceEvents": [\n'
_TAIL = b'\n  ],\n  "traceName": "hostile"\n}\n'
_TINY = b'{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":1,"dur":1}'


def _event(name: bytes = b'"aten::mm"', ts: bytes = b"1", dur: bytes = b"1", args: bytes = b'{"External id": 1}',
           pid: bytes = b"1") -> bytes:
    return (b'  {"ph": "X", "cat": "cpu_op", "name": ' + name + b', "pid": ' + pid + b', "tid": 1, "ts": ' + ts
            + b', "dur": ' + dur + b', "args": ' + args + b"}")


def _kineto(*events: bytes, head: bytes = _HEAD, tail: bytes = _TAIL) -> Iterator[bytes]:
    """Kineto's layout: each event on a line of its own, two spaces in."""
    yield head
    for i, event in enumerate(events):
        yield event if i == 0 else b",\n" + event
    yield tail


def _nest(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def _million(layout: str) -> Iterator[bytes]:
    n = 1_000_000
    if layout == "kineto":
        yield _HEAD
        yield b",\n".join([b"  " + _TINY] * n)
        yield _TAIL
    else:
        yield b'{"traceEvents":[' + b",".join([_TINY] * n) + b"]}"


def _gz(*parts: bytes | tuple[bytes, int]) -> Iterator[bytes]:
    """A gzip file of ``parts`` in order, ``(block, n)`` standing for ``block * n``. Each part is
    a gzip member of its own (a reader must take concatenated members), so a repeated block is
    compressed once: gigabytes of filler cost milliseconds to write, and a few MB on disk."""
    for part in parts:
        block, n = part if isinstance(part, tuple) else (part, 1)
        member = gzip.compress(block, 9)
        for _ in range(n):
            yield member


_SPACES = b" " * MiB
_MIXED = b" \n\t\r\n  " * (MiB // 8)  # whitespace of every kind, lines of two spaces included
_MIN = b'{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":1,"ts":1,"dur":1}'


def _filler_cases(n: int) -> list[Case]:
    """``n`` MiB of whitespace wherever JSON allows it: each must cost O(chunk) memory."""
    size = f"{n} MiB"
    two = {"events": 2}
    return [
        Case(f"{size} of spaces between events (gzip)", lambda: _gz(_HEAD + _event() + b",\n", (_SPACES, n),
                                                                    _event() + _TAIL), "ok", two, max_peak_mib=120),
        Case(f"{size} of mixed whitespace between events (gzip)", lambda: _gz(
            _HEAD + _event() + b",", (_MIXED, n), b"\n" + _event() + _TAIL), "ok", two, max_peak_mib=120),
        Case(f"{size} of spaces inside an event (gzip)", lambda: _gz(
            _HEAD + _event() + b',\n  {"ph": "X",', (_SPACES, n), b'"name": "b", "ts": 2, "dur": 1}' + _TAIL),
             "ok", two, max_peak_mib=120),
        Case(f"{size} of whitespace in the header (gzip)", lambda: _gz(
            b'{\n  "schemaVersion": 1,', (_MIXED, n), b'"traceEvents": [\n' + _event() + _TAIL), "ok",
             {"events": 1}, max_peak_mib=120),
        Case(f"{size} of whitespace after the header (gzip)", lambda: _gz(
            _HEAD, (_SPACES, n), b"\n" + _event() + _TAIL), "ok", {"events": 1}, max_peak_mib=120),
        Case(f"{size} of whitespace before the closing bracket (gzip)", lambda: _gz(
            _HEAD + _event() + b",\n" + _event(), (_SPACES, n), _TAIL), "ok", two, max_peak_mib=120),
        Case(f"{size} of whitespace in the trailer (gzip)", lambda: _gz(
            _HEAD + _event() + b"\n  ],", (_MIXED, n), b'"traceName": "x"', (_SPACES, n), b"}", (_MIXED, n)),
             "ok", {"events": 1}, max_peak_mib=120),
        Case(f"{size} of spaces in one line, minified (gzip)", lambda: _gz(
            b'{"traceEvents":[' + _MIN + b",", (_SPACES, n), _MIN + b"]}"), "ok", two, max_peak_mib=120),
        Case(f"{size} of whitespace only (gzip)", lambda: _gz((_MIXED, n)), "empty file", max_peak_mib=120),
        # Spaces inside a string are content, not filler: kept, up to the string's limit.
        Case(f"{n // 8} MiB of spaces in an op name (gzip)", lambda: _gz(
            _HEAD + _event() + b',\n  {"ph": "X", "name": "\\" \\\\', (_SPACES, n // 8),
            b'x", "ts": 2, "dur": 1}' + _TAIL), "ok", {"events": 2, "longest_name": 2000}, max_peak_mib=120),
    ]


_LETTERS = b"a" * MiB
_ESCAPES = rb'\"\\\u00e9\ud83d\ude00\n' * (MiB // 24)  # escapes of every length, 24 bytes
_UTF8 = "é€😀".encode() * (MiB // 9)  # characters of 2, 3 and 4 bytes
_NEXT = b',\n  {"ph": "X", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 2, "dur": 1, '


def _string_cases(n: int) -> list[Case]:
    """A string of ``n`` MiB wherever a trace holds strings: each costs memory in proportion to a
    chunk, not to the string (an op name of 1 GiB took 3.1 GB), and names are clipped."""
    size, two = f"{n} MiB", {"events": 2, "longest_name": 2000}
    return [
        Case(f"{size} op name (gzip)", lambda: _gz(_HEAD + _event() + _NEXT + b'"name": "', (_LETTERS, n),
                                                   b'"}' + _TAIL), "ok", two, max_peak_mib=120),
        Case(f"{size} op name of escapes (gzip)", lambda: _gz(_HEAD + _event() + _NEXT + b'"name": "', (_ESCAPES, n),
                                                              b'"}' + _TAIL), "ok", two, max_peak_mib=120),
        Case(f"{size} op name of UTF-8 (gzip)", lambda: _gz(_HEAD + _event() + _NEXT + b'"name": "', (_UTF8, n),
                                                            b'"}' + _TAIL), "ok", two, max_peak_mib=120),
        Case(f"{size} category (gzip)", lambda: _gz(_HEAD + _event() + _NEXT.replace(b'"cat": "cpu_op", ', b"")
                                                     + b'"name": "b", "cat": "', (_LETTERS, n), b'"}' + _TAIL),
             "ok", {"events": 2}, max_peak_mib=120),
        Case(f"{size} pid (gzip)", lambda: _gz(_HEAD + _event() + _NEXT.replace(b'"pid": 1, ', b"")
                                                + b'"name": "b", "pid": "', (_LETTERS, n), b'"}' + _TAIL),
             "ok", {"events": 2}, max_peak_mib=120),
        Case(f"{size} skipped argument (gzip)", lambda: _gz(_HEAD + _event() + _NEXT + b'"name": "b", "args": {"x": "',
                                                            (_LETTERS, n), b'"}}' + _TAIL),
             "ok", {"events": 2}, max_peak_mib=120),
        Case(f"{size} in the header (gzip)", lambda: _gz(b'{\n  "deviceProperties": [{"name": "', (_UTF8, n),
                                                         b'"}],\n  "traceEvents": [\n' + _event() + _TAIL),
             "ok", {"events": 1}, max_peak_mib=120),
        Case(f"{size} in the trailer (gzip)", lambda: _gz(_HEAD + _event() + b'\n  ],\n  "traceName": "', (_LETTERS, n),
                                                          b'"\n}\n'), "ok", {"events": 1}, max_peak_mib=120),
        Case(f"{size} op name, minified (gzip)", lambda: _gz(b'{"traceEvents":[' + _MIN + b',{"ph":"X","name":"',
                                                             (_LETTERS, n), b'","ts":2,"dur":1}]}'),
             "ok", two, max_peak_mib=120),
        Case(f"{size} argument, bare array (gzip)", lambda: _gz(b"[" + _MIN + b',{"ph":"X","name":"b","args":{"x":"',
                                                                (_ESCAPES, n), b'"},"ts":2,"dur":1}]'),
             "ok", {"events": 2}, max_peak_mib=120),
    ]


def _long_list(arg: str, entries: int, lists: int = 1) -> Iterator[bytes]:
    """A gzip trace of ``lists`` ``aten::mm`` events whose ``arg`` lists ``entries`` values each (distinct), then an
    ordinary one (``devtools.hostile_traces``)."""
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "t.json.gz"
        write_long_lists(path, arg=arg, entries=entries, lists=lists)
        yield path.read_bytes()


def _list_cases() -> list[Case]:
    """Argument lists of 10^7 entries in a small gzip (73 KB of it: 50 MB as written): each read as absent and
    counted, in memory of a few times the events held at once (the scanner's batches in flight, each of one
    50 MB event here), not of the lists' entries (it took 1.5 GB, and 3.6 GB for 32 such lists)."""
    dims = {"events": 2, "dims": [[[4, 8], [8, 4]]], "diag:'Input Dims' of aten::mm": 1}
    return [
        Case("Input Dims of 10M entries (gzip)", lambda: _long_list("Input Dims", 10**7), "ok", dims,
             max_peak_mib=300),
        Case("Concrete Inputs of 10M entries (gzip)", lambda: _long_list("Concrete Inputs", 10**7), "ok",
             {"events": 2, "dims": [[[4, 8], [8, 4]]], "diag:'Concrete Inputs' of aten::mm": 1},
             max_peak_mib=300),
        Case("4 distinct Input Dims of 10M entries (gzip)", lambda: _long_list("Input Dims", 10**7, 4), "ok",
             {**dims, "events": 5, "diag:'Input Dims' of aten::mm": 4}, max_peak_mib=450),
    ]


def _junk_cases(n: int) -> list[Case]:
    """A whole trace, then ``n`` MiB of junk: read, the junk counted (not "truncated", which the
    tab shows as a trace still being written), in memory that does not grow with the junk."""
    junk = {"events": 2, "diag:bytes after the end": n * MiB + 1}  # the document's last line break too
    return [
        Case(f"{n} MiB of zeros after the trace (gzip)", lambda: _gz(b"".join(_kineto(_event(), _event())),
                                                                     (bytes(MiB), n)), "ok", junk, max_peak_mib=120),
        Case(f"{n} MiB of log lines after the trace (gzip)", lambda: _gz(
            b"".join(_kineto(_event(), _event())), (b"INFO: done\n" * (MiB // 11) + b"\n" * (MiB % 11), n)),
             "ok", junk, max_peak_mib=120),
        Case("a trace twice (kineto)", lambda: iter([b"".join(_kineto(*[_event()] * 40_000)) * 2]), "ok",
             {"events": 40_000, "diag:bytes after the end": len(b"".join(_kineto(*[_event()] * 40_000))) + 1}),
    ]


def _gzip_bomb() -> Iterator[bytes]:
    """1 GiB of whitespace between two events, compressed to about a megabyte."""
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    yield z.compress(_HEAD + _event() + b",\n")
    block = b" " * (16 * MiB)
    for _ in range(64):
        yield z.compress(block)
    yield z.compress(_event() + _TAIL)
    yield z.flush()


@dataclass(frozen=True)
class Case:
    name: str
    build: Callable[[], Iterator[bytes]]
    #: "ok", or a regular expression the TraceError's message must match
    expect: str
    #: for "ok": facts the child reports that must hold (see CHILD)
    facts: dict[str, Any] = field(default_factory=dict)
    max_bytes: int = 1 << 30
    #: a bound on the peak RSS whatever the file's size (filler must cost nothing)
    max_peak_mib: float | None = None


CASES = [
    # -- deep nesting: inside an event, as the document, in the keys before and after the events
    Case("deep args (kineto)", lambda: _kineto(_event(), _event(args=b'{"x": ' + _nest(DEEP) + b"}")),
         "nested too deeply"),
    Case("deep Input Dims (kineto)", lambda: _kineto(_event(), _event(args=b'{"Input Dims": ' + _nest(DEEP) + b"}")),
         "nested too deeply"),
    Case("deep op name (kineto)", lambda: _kineto(_event(), _event(name=_nest(DEEP))), "nested too deeply"),
    Case("deep document array", lambda: iter([_nest(DEEP)]), "nested too deeply"),
    Case("deep document object", lambda: iter([b'{"a": ' * DEEP + b"1" + b"}" * DEEP]), "nested too deeply"),
    Case("deep header key", lambda: _kineto(_event(), head=b'{\n  "x": ' + _nest(DEEP) + b',\n  "traceEvents": [\n'),
         "nested too deeply"),
    Case("deep trailer key", lambda: _kineto(_event(), tail=b'\n  ],\n  "x": ' + _nest(DEEP) + b"\n}\n"),
         "nested too deeply"),
    Case("deep args (minified)",
         lambda: iter([b'{"traceEvents":[{"ph":"X","name":"a","ts":1,"dur":1,"args":{"x":' + _nest(DEEP) + b"}}]}"]),
         "nested too deeply"),
    # -- size: many events, long lists and strings, whitespace
    Case("1M tiny events (kineto)", lambda: _million("kineto"), "ok", {"events": 1_000_000}),
    Case("1M tiny events (minified)", lambda: _million("minified"), "ok", {"events": 1_000_000}),
    # An argument list over MAX_ARG_BYTES is read as absent, counted (issue 48: 1.5 GB for one of 10^7 entries).
    Case("Input Dims of 5M entries",
         lambda: _kineto(_event(args=b'{"Input Dims": [[' + b",".join([b"1"] * 5_000_000) + b'], [1, 1]]}')),
         "ok", {"events": 1, "dims": [], "diag:'Input Dims' of aten::mm": 1}),
    *_list_cases(),
    Case("64 MiB op name", lambda: _kineto(_event(name=b'"' + b"a" * (64 * MiB) + b'"'), _event()), "ok",
         {"events": 2, "longest_name": 2000}),
    Case("50 MiB of whitespace", lambda: iter([b" \n\t" * (50 * MiB // 3)]), "empty file"),
    Case("50 MiB of whitespace between events",
         lambda: _kineto(_event(), b" " * (50 * MiB) + b"\n" + _event()), "ok", {"events": 2}),
    Case("50 MiB of whitespace in the header",
         lambda: _kineto(_event(), head=b"{" + b" " * (50 * MiB) + b'"traceEvents": [\n'), "ok", {"events": 1}),
    *_filler_cases(128),
    *_string_cases(128),
    *_junk_cases(64),
    Case("gzip bomb: 1 GiB of whitespace in 1 MiB", _gzip_bomb, r"larger than the limit of 64 MiB",
         max_bytes=64 * MiB),
    Case("over max_bytes (plain)", lambda: _million("kineto"), r"larger than the limit of 16 MiB", max_bytes=16 * MiB),
    # -- numbers
    Case("1e400", lambda: _kineto(_event(), _event(ts=b"1e400"), _event(dur=b"-1e400"), _event(dur=b"1e400")), "ok",
         {"events": 2, "diag:unusable times": 2, "diag:negative durations": 1}),
    Case("2**200 everywhere", lambda: _kineto(
        _event(ts=b"%d" % 2**200), _event(args=b'{"External id": %d}' % 2**200), _event(pid=b"%d" % 2**200),
        _event(args=b'{"Input Dims": [[%d, 2], [2, 2]], "Input type": ["float", "float"]}' % 2**200),
        b'  {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 2, "args": {"Bytes": %d}}' % 2**200),
        "ok", {"events": 3, "diag:unusable times": 1, "ext": [-1, -1, 1], "dims": [[[], [2, 2]]], "memory_events": 0}),
    Case("5000-digit integers",
         lambda: _kineto(_event(), _event(ts=b"9" * 5000), _event(args=b'{"External id": ' + b"9" * 5000 + b"}")),
         "ok", {"events": 2, "diag:unusable times": 1}),
    Case("2**200 in the header", lambda: _kineto(
        _event(), head=b'{\n  "baseTimeNanoseconds": %d, "schemaVersion": %d,\n  "traceEvents": [\n' % ((2**200,) * 2)),
        "ok", {"events": 1}),
    Case("NaN and Infinity", lambda: _kineto(_event(), _event(ts=b"NaN"), _event(dur=b"Infinity"),
                                             _event(ts=b"-Infinity")), "ok", {"events": 1, "diag:unusable times": 3}),
    # -- keys, encodings, types
    Case("duplicate keys", lambda: _kineto(
        _event(), b'  {"ph": "X", "ph": "X", "name": "a", "name": "b", "ts": 1, "ts": 2, "dur": 1, "dur": 3}',
        head=b'{\n  "traceEvents": {"a": 1}, "traceEvents": 5,\n  "traceEvents": [\n'), "ok", {"events": 2}),
    Case("invalid UTF-8 in an op name", lambda: _kineto(_event(), _event(name=b'"\xff\xfe\xc3"')), "utf-8"),
    Case("invalid UTF-8 in the header", lambda: _kineto(_event(), head=b'{\n  "x": "\xff",\n  "traceEvents": [\n'),
         "utf-8"),
    # msgspec does not validate what it skips: an argument nobody reads may hold anything.
    Case("invalid UTF-8 in a skipped field", lambda: _kineto(_event(), _event(args=b'{"x": "\xff\xfe"}')), "ok",
         {"events": 2}),
    Case("traceEvents is an object (minified)", lambda: iter([b'{"traceEvents": {"a": [1, 2]}}']),
         "traceEvents is not a list"),
    Case("traceEvents is an object (kineto)", lambda: iter([b'{\n  "traceEvents": {\n  "a": 1\n  }\n}\n']),
         "traceEvents is not a list"),
]

#: Peak RSS of this process in KiB, and of its children (load_events may decode a large trace in
#: two processes). Not ru_maxrss of RUSAGE_SELF: Linux carries it over from the parent through
#: fork and exec, so a child would report pytest's own peak; VmHWM is this process's alone.
PEAK = r"""
import resource
def peak_kib():
    with open("/proc/self/status") as status:
        hwm = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    return max(hwm, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""

#: Decodes one file and reports the outcome, facts about the events and the peak RSS.
CHILD = PEAK + r"""
import json, sys
from tb_attn_plugin.engine.reading import load_events
from tb_attn_plugin.trace.events import TraceError
out = {}
try:
    ev = load_events(sys.argv[1], max_bytes=int(sys.argv[2]))
except TraceError as exc:
    out = {"outcome": "TraceError", "message": str(exc)}
else:
    out = {"outcome": "ok", "events": len(ev), "memory_events": int(ev.mem_ts.size),
           "longest_name": max(map(len, ev.names)), "ext": sorted(ev.ext.tolist()),
           "dims": [list(s.dims) for s in ev.shapes], "diagnostics": ev.diagnostics}
out["peak_rss_kib"] = peak_kib()
print("RESULT " + json.dumps(out))
"""


@pytest.fixture(scope="module")
def case_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hostile")


def _decode_in_child(path: Path, max_bytes: int, timeout_s: float = TIMEOUT_S) -> tuple[dict[str, Any], float]:
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", CHILD, str(path), str(max_bytes)], capture_output=True, text=True,
                          timeout=timeout_s)
    wall = time.monotonic() - start
    assert proc.returncode == 0, f"the decoder died (status {proc.returncode}): {proc.stderr[-2000:]}"
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[len("RESULT "):]), wall


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hostile_trace_is_decoded_or_refused_within_bounds(case: Case, case_dir: Path) -> None:
    chunks = case.build()
    first = next(chunks, b"")
    suffix = ".pt.trace.json.gz" if first.startswith(b"\x1f\x8b") else ".pt.trace.json"
    path = case_dir / (re.sub(r"\W+", "_", case.name) + suffix)
    with path.open("wb") as f:
        f.write(first)
        for chunk in chunks:
            f.write(chunk)
    size = path.stat().st_size
    try:
        result, wall = _decode_in_child(path, case.max_bytes)
    finally:
        path.unlink()
    peak_mib = result["peak_rss_kib"] / 1024
    print(f"\n{case.name}: {result['outcome']} in {wall:.2f} s, peak RSS {peak_mib:.0f} MiB, file {size / MiB:.1f} MiB"
          + (f": {result['message'][:120]}" if "message" in result else ""))
    # Memory: a few times the file (the minified layout is decoded whole), never unbounded; or the case's own bound.
    if case.max_peak_mib is None:
        assert peak_mib < 8 * size / MiB + 300, f"peak RSS {peak_mib:.0f} MiB for a {size / MiB:.0f} MiB file"
    else:
        assert peak_mib < case.max_peak_mib, f"peak RSS {peak_mib:.0f} MiB: the filler was held"
    if case.expect != "ok":
        assert result["outcome"] == "TraceError", result
        assert re.search(case.expect, result["message"]), result["message"]
        return
    assert result["outcome"] == "ok", result
    for key, want in case.facts.items():
        if key.startswith("diag:"):
            got = sum(v for k, v in result["diagnostics"].items() if key[5:] in k)
        else:
            got = result[key]
        assert got == want, (key, got, result["diagnostics"])


def test_gigabytes_of_filler_decode_in_bounded_memory(case_dir: Path) -> None:
    """The gzip bomb of issue 23 at full size, under the default limit: 2 GiB of whitespace
    between two events (2 MB compressed) decodes in memory that does not grow with the filler
    (it took 6.3 GB), in a time linear in it (decompressing and skipping 2 GiB)."""
    path = case_dir / "bomb.pt.trace.json.gz"
    with path.open("wb") as f:
        for chunk in _gz(_HEAD + _event() + b",\n", (_SPACES, 2048), _event() + _TAIL):
            f.write(chunk)
    try:
        result, wall = _decode_in_child(path, DEFAULT_MAX_TRACE_BYTES, timeout_s=150)
    finally:
        path.unlink()
    peak_mib = result["peak_rss_kib"] / 1024
    print(f"\n2 GiB bomb: {result['outcome']} in {wall:.2f} s, peak RSS {peak_mib:.0f} MiB")
    assert result["outcome"] == "ok" and result["events"] == 2, result
    assert peak_mib < 400


def test_the_peak_memory_measure() -> None:
    """The figures above: a child's own peak, not inflated by the parent's."""
    if not Path("/proc/self/status").exists():
        pytest.skip("VmHWM is Linux's")
    ballast = bytearray(300 << 20)
    ballast[::4096] = b"x" * len(ballast[::4096])  # this process's peak is now above 300 MiB

    def child_peak_mib(allocate_mib: int) -> float:
        code = PEAK + f"b = bytearray({allocate_mib} << 20); b[::4096] = b'x' * len(b[::4096]); print(peak_kib())"
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             timeout=TIMEOUT_S)
        return int(out.stdout) / 1024

    assert child_peak_mib(0) < 100 < 200 < child_peak_mib(200) < 300
    del ballast


# -- nesting just below Python's recursion limit -------------------------------------------
_DEPTHS = range(900, 1001, 3)


def _near_limit_documents(depth: int) -> dict[str, bytes]:
    nest = _nest(depth)
    nan = _event(ts=b"NaN")  # sends the batch down the lenient path
    return {
        "dims": b"".join(_kineto(_event(args=b'{"Input Dims": ' + nest + b"}"))),
        "dims, lenient": b"".join(_kineto(_event(args=b'{"Input Dims": ' + nest + b"}"), nan)),
        "types, lenient": b"".join(_kineto(_event(args=b'{"Input type": ' + nest + b"}"), nan)),
        "name, lenient": b"".join(_kineto(_event(name=nest), nan)),
        "unknown arg": b"".join(_kineto(_event(args=b'{"x": ' + nest + b"}"))),
        "header": b"".join(_kineto(_event(), head=b'{\n  "x": ' + nest + b',\n  "traceEvents": [\n')),
        "trailer": b"".join(_kineto(_event(), tail=b'\n  ],\n  "x": ' + nest + b"\n}\n")),
        "minified": b'{"traceEvents":[{"ph":"X","name":"aten::mm","ts":1,"dur":1,"args":{"Input Dims":'
                    + nest + b"}}]}",
    }


def _decode_near_limit() -> list[str]:
    problems = []
    for depth in _DEPTHS:
        for label, data in _near_limit_documents(depth).items():
            try:
                events = decode_bytes(data)
            except TraceError as exc:
                if "nested too deeply" not in str(exc):
                    problems.append(f"{label} at depth {depth}: unclear message {exc}")
                continue
            except BaseException as exc:  # any other exception is the failure reported
                problems.append(f"{label} at depth {depth}: {type(exc).__name__}: {exc}")
                continue
            if not all(d == [] for s in events.shapes for d in s.dims):
                problems.append(f"{label} at depth {depth}: nested Input Dims kept {events.shapes}")
    return problems


@pytest.mark.parametrize("where", ["this thread", "a worker thread"])
def test_nesting_near_the_recursion_limit_is_decoded_or_refused(where: str) -> None:
    """Around depth 990 some parsers in the pipeline manage and others (deeper in the stack) do
    not: every depth must still decode or raise TraceError, on the request thread and on the
    plugin's parse threads alike."""
    if where == "this thread":
        problems = _decode_near_limit()
    else:
        found: list[list[str]] = []
        worker = threading.Thread(target=lambda: found.append(_decode_near_limit()))
        worker.start()
        worker.join(TIMEOUT_S)
        assert found, "the worker thread died or hung"
        problems = found[0]
    assert problems == []


# -- the size limit ------------------------------------------------------------------------
def test_oversize_trace_is_refused_unread_naming_the_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The plugin's and the CLI's path (``Loader``): over the limit as stored, nothing is parsed."""
    path = tmp_path / "big.pt.trace.json"
    path.write_bytes(b"".join(_kineto(*[b"  " + _TINY] * 300_000)))  # about 20 MiB
    batches: list[int] = []
    add_batch = decode_module.add_batch

    def counting(builder: Any, text: Any) -> None:
        batches.append(len(text))
        add_batch(builder, text)

    monkeypatch.setattr(decode_module, "add_batch", counting)
    st = path.stat()
    trace = TraceFile(path=str(path), name=path.name, worker="big", span=None, size=st.st_size, mtime=st.st_mtime)
    with pytest.raises(TraceError, match=r"over the limit of 16 MiB") as raised:
        Loader(max_trace_bytes=16 * MiB).analyze_file(trace)
    assert batches == [] and "big.pt.trace.json" in str(raised.value)
    # Within the limit, the same file decodes (so the spy above counts real work).
    assert len(Loader(max_trace_bytes=64 * MiB).analyze_file(trace).events) == 300_000
    assert batches


def test_gzip_over_the_limit_is_refused_naming_the_limit(tmp_path: Path) -> None:
    """Compressed, the size is only known by decompressing: it is streamed and refused at the limit."""
    path = tmp_path / "bomb.pt.trace.json.gz"
    path.write_bytes(gzip.compress(b"".join(_kineto(_event(), b" " * (40 * MiB) + b"\n" + _event())), 1))
    st = path.stat()
    trace = TraceFile(path=str(path), name=path.name, worker="bomb", span=None, size=st.st_size, mtime=st.st_mtime)
    with pytest.raises(TraceError, match=r"larger than the limit of 8 MiB uncompressed"):
        Loader(max_trace_bytes=8 * MiB).analyze_file(trace)


@pytest.mark.parametrize(("layers", "steps", "refused"), [(4000, 1, None), (2, 5000, "5000 profiled steps")])
def test_too_many_layers_or_steps_are_refused(layers: int, steps: int, refused: str | None) -> None:
    """The summary's cost grows with layers (and steps) times events: past 4096 steps, a trace
    is refused in milliseconds instead of being analyzed for minutes (layers past 4096 are not
    scopes: tests/analysis/common/test_bounds.py)."""
    from tb_attn_plugin.analysis.summary import summarize

    events: list[dict[str, Any]] = []
    t = 0
    for s in range(steps):
        start = t
        for k in range(layers):
            events.append({"ph": "X", "cat": "user_annotation", "name": f"tbattn.v1/L{k}", "ts": t + 1, "dur": 5,
                           "pid": 1, "tid": 1})
            events.append({"ph": "X", "cat": "cpu_op", "name": "aten::softmax", "ts": t + 2, "dur": 2, "pid": 1,
                           "tid": 1})
            t += 10
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}", "ts": start, "dur": t - start,
                       "pid": 1, "tid": 1})
        t += 10
    decoded = decode_bytes(json.dumps({"traceEvents": events}).encode())
    if refused is None:
        assert len(summarize(decoded).layers) == layers
    else:
        with pytest.raises(TraceError, match=refused):
            summarize(decoded)


# -- any string survives the JSON encoder ----------------------------------------------------
#: Lone surrogates (``\ud800``, ``\udfff``) are valid JSON escapes that Python's json module
#: decodes into strings that no UTF-8 encoder takes: each string a summary can carry has one.
_LONE = (b'{\n  "schemaVersion": 1, "x\\ud800": "y\\udfff",\n'
         b'  "deviceProperties": [{"id": 0, "name": "GPU \\ud800", "k\\udfff": ["\\udfff"]}],\n'
         b'  "distributedInfo": {"backend": "nccl \\udfff", "rank": 0, "world_size": 1},\n'
         b'  "traceEvents": [\n'
         b'  {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main \\ud800"}},\n'
         b'  {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "pid": 1, "tid": 1, "ts": 0,'
         b' "dur": 100},\n'
         b'  {"ph": "X", "cat": "user_annotation", "name": "tbattn.v1/L0/softmax attn\\udfff", "pid": 1, "tid": 1,'
         b' "ts": 10, "dur": 50},\n'
         b'  {"ph": "X", "cat": "cpu_op", "name": "aten::softmax\\ud800", "pid": 1, "tid": 1, "ts": 11, "dur": 20,'
         b' "args": {"External id": 1}},\n'
         b'  {"ph": "X", "cat": "cpu_op", "name": "aten::softmax\\ufffd", "pid": 1, "tid": 1, "ts": 31, "dur": 2},\n'
         b'  {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 40, "dur": 5,'
         b' "args": {"Input Dims": [[2, 2], [2, 2]], "Input type": ["float\\ud800", "float"],'
         b' "Concrete Inputs": ["\\udfff", ""]}},\n'
         b'  {"ph": "X", "cat": "cpu_op\\udfff", "name": "\\ud83d\\ude00", "pid": "p\\ud800", "tid": "t\\udfff",'
         b' "ts": 60, "dur": 1}\n'
         b'  ],\n  "traceName": "\\udfff"\n}\n')


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(k)
            yield from _strings(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _strings(v)


@pytest.mark.parametrize("layout", ["kineto", "minified"])
def test_lone_surrogates_are_replaced_where_they_are_decoded(layout: str) -> None:
    data = _LONE if layout == "kineto" else json.dumps(json.loads(_LONE), separators=(",", ":")).encode()
    ev = decode_bytes(data)
    meta = ev.meta
    carried = [ev.names, [(t.pid, t.tid) for t in ev.tracks], [(s.types, s.concrete) for s in ev.shapes],
               meta.device_properties, meta.distributed_info, meta.extra, ev.diagnostics]
    for value in carried:
        msgspec.json.encode(value)  # raised UnicodeEncodeError on a lone surrogate
    assert not [s for s in _strings(carried) if re.search("[\ud800-\udfff]", s)]
    assert {"aten::softmax\ufffd", "tbattn.v1/L0/softmax attn\ufffd", "\U0001f600"} <= set(ev.names)
    assert len(set(ev.names)) == len(ev.names), "a replaced name is the same name as one written with U+FFFD"
    assert ("p\ufffd", "t\ufffd") in [(t.pid, t.tid) for t in ev.tracks]
    assert ("float\ufffd", "float") in [s.types for s in ev.shapes]
    assert meta.device_properties[0]["name"] == "GPU \ufffd" and meta.device_properties[0]["k\ufffd"] == ["\ufffd"]
    assert meta.distributed_info == {"backend": "nccl \ufffd", "rank": 0, "world_size": 1}
    assert meta.extra["x\ufffd"] == "y\ufffd" and meta.extra["traceName"] == "\ufffd"


def test_a_summary_of_lone_surrogates_encodes(tmp_path: Path) -> None:
    """What the HTTP routes encode (msgspec.json.encode raised, a 500)."""
    path = tmp_path / "lone.pt.trace.json"
    path.write_bytes(_LONE)
    st = path.stat()
    trace = TraceFile(path=str(path), name=path.name, worker="lone", span=None, size=st.st_size, mtime=st.st_mtime)
    summary = Loader().summarize_file(trace)
    encoded = msgspec.json.encode(summary)
    assert b"\\ud8" not in encoded.lower() and "\ufffd".encode() in encoded


def test_lone_surrogates_decoded_in_parts_merge_into_one_name() -> None:
    """The several-process path: names replaced in each part are the same name once merged."""
    cut = _LONE.index(b'\n  {"ph": "X", "cat": "cpu_op", "name": "aten::softmax\\ufffd"')
    first = decode_module.decode_first_part([_LONE[:cut]])
    assert first is not None
    merged = decode_module.merge_parts(*first, [decode_module.decode_last_part([_LONE[cut:]])])
    whole = decode_bytes(_LONE)
    assert merged.names == whole.names and len(set(merged.names)) == len(merged.names)
    assert merged.name.tolist() == whole.name.tolist()
