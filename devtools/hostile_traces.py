"""Hostile traces for the tests and benchmarks (issue 48): a serving engine's iteration annotations by
the ten thousand, and argument lists of millions of entries in a small gzip.

Each writer returns what the tests and ``bench/hostile_analysis.py`` need to know of the file."""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["CORE", "KV_WRITE", "long_list_event", "serving_events", "write_long_lists", "write_serving"]

CORE = "vllm::unified_attention_with_output"
KV_WRITE = "_C_cache_ops::reshape_and_cache_flash"
_H, _HKV, _D = 8, 2, 64  # query heads, KV heads, head size
#: One detailed iteration (``ops.SERVING_BATCH_DETAILED_PATTERN``): 2 prefills, 3 decodes, 10 tokens.
ITERATION = "execute_10_context_2(sq7sk9sqsq25sqsk31)_generation_3(sq3sk60sqsq3sqsk60)"


def _x(cat: str, name: str, ts: float, dur: float, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": args}


def serving_events(iterations: int, *, cores: int = 1) -> Iterator[dict[str, Any]]:
    """A vLLM step of ``iterations`` engine iterations, each an annotation holding ``cores`` layers'
    KV write and attention core (the issue's trace: as many annotations as cores, at ``cores=1``)."""
    per = 100 * cores
    yield _x("user_annotation", "ProfilerStep#1", 0, per * iterations + 100)
    for k in range(iterations):
        t = 10 + per * k
        yield _x("user_annotation", ITERATION, t, per - 20)
        for c in range(cores):
            u = t + 100 * c
            yield _x("cpu_op", KV_WRITE, u + 5, 5, **{
                "Input Dims": [[10, _HKV, _D], [10, _HKV, _D], [64, 16, _HKV, _D], [64, 16, _HKV, _D], [10]],
                "Input type": ["c10::BFloat16"] * 4 + ["long int"]})
            yield _x("cpu_op", CORE, u + 20, 40, **{
                "Input Dims": [[10, _H, _D], [10, _HKV, _D], [10, _HKV, _D], [10, _H, _D]],
                "Input type": ["c10::BFloat16"] * 4})


def write_serving(path: Path, iterations: int, *, cores: int = 1) -> int:
    """``serving_events`` as a Kineto trace at ``path``; its size in bytes."""
    text = json.dumps({"schemaVersion": 1, "traceEvents": list(serving_events(iterations, cores=cores))})
    path.write_text(text)
    return len(text)


def long_list_event(arg: str, entries: int, *, seed: int = 0, ts: float = 1.0) -> tuple[bytes, bytes, bytes]:
    """An ``aten::mm`` event whose ``arg`` (``Input Dims`` or ``Concrete Inputs``) lists ``entries``
    values, as (head, repeated item, tail) bytes: the list is ``head + item * (entries - 1) + tail``.
    ``seed`` makes the list's last entry, and so the list, distinct."""
    item = b"[1], " if arg == "Input Dims" else b'"", '
    last = f"[{seed}]" if arg == "Input Dims" else f'"{seed}"'
    head = (f'{{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": {ts}, "dur": 1, '
            f'"args": {{"{arg}": [').encode()
    return head, item, f'{last}]}}}}'.encode()


def write_long_lists(path: Path, *, arg: str = "Input Dims", entries: int = 10**7, lists: int = 1) -> int:
    """A gzip trace of ``lists`` ``aten::mm`` events, each with a distinct ``entries``-long ``arg``
    list (10^7 entries: about 50 MB as written, 100 KB of gzip), then one ordinary ``aten::mm``;
    written in chunks, never held whole. Returns the uncompressed size in bytes."""
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)
    size = 0
    with path.open("wb") as f:
        def put(b: bytes) -> None:
            nonlocal size
            size += len(b)
            f.write(comp.compress(b))
        put(b'{"schemaVersion": 1, "traceEvents": [\n  ')
        for k in range(lists):
            head, item, tail = long_list_event(arg, entries, seed=k, ts=float(k + 1))
            put(head)
            block = item * 65536
            left = entries - 1
            while left:
                n = min(left, 65536)
                put(block if n == 65536 else item * n)
                left -= n
            put(tail + b",\n  ")
        put(json.dumps({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": lists + 1.0,
                        "dur": 1, "args": {"Input Dims": [[4, 8], [8, 4]], "Input type": ["float", "float"]}}).encode())
        put(b"\n]}\n")
        f.write(comp.flush())
    return size
