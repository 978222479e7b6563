"""Serving traces hostile in size or in their numbers (issue 48).

A vLLM trace of N iteration annotations and N attention cores cost N² (each core scanned every annotation for
its own, three times a summary): 4.4 s at 4k, 68 s at 24k. The lookup is now one sort and binary searches; these
tests check that it answers what the scan answered, on annotations nested, overlapping, tied and on other
threads (``bench/hostile_analysis.py`` measures the times).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devtools.hostile_traces import CORE, serving_events
from tb_attn_plugin.analysis.analyze import analyze
from tb_attn_plugin.analysis.batch import Batch, _annotations, _enclosing
from tb_attn_plugin.analysis.summary import summarize_trace
from tb_attn_plugin.trace.decode import decode_bytes
from tb_attn_plugin.trace.events import Events
from tb_attn_plugin.trace.kineto import Kind

A = "execute_context_{n}(1)_generation_0(0)"  # annotation n: n prefill requests, so each is told apart


def _events(rows: list[dict[str, Any]]) -> Events:
    return decode_bytes(json.dumps({"traceEvents": rows}).encode())


def _x(cat: str, name: str, ts: float, dur: float, tid: int = 1) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": {}}


def _scan(events: Events, found: list[tuple[int, Batch]], i: int) -> Batch | None:
    """The lookup as it was: the first annotation, in event order, on op ``i``'s thread whose span holds it."""
    t, start, stop = events.track[i], events.ts[i], events.ts[i] + events.dur[i]
    for a, batch in found:
        if events.track[a] == t and events.ts[a] <= start and stop <= events.ts[a] + events.dur[a]:
            return batch
    return None


def _same_as_the_scan(rows: list[dict[str, Any]]) -> list[int | None]:
    """Each op's annotation (its request count) by the sweep, checked equal to the scan's."""
    ev = _events(rows)
    found = _annotations(ev)
    ops = np.flatnonzero(ev.kind == Kind.CPU_OP)
    got = _enclosing(ev, found, ops)
    assert got == [_scan(ev, found, int(i)) for i in ops]
    return [None if b is None else b.prefill_requests for b in got]


def test_nested_annotations_give_the_outermost() -> None:
    rows = [_x("user_annotation", A.format(n=1), 0, 100), _x("user_annotation", A.format(n=2), 10, 50),
            _x("cpu_op", "op", 20, 5), _x("cpu_op", "op", 70, 5)]
    assert _same_as_the_scan(rows) == [1, 1]


def test_overlapping_annotations_give_the_first_that_holds_the_op() -> None:
    # 1 spans [0, 50], 2 spans [30, 100]. In event order (by start): [20, 40] is in 1 only, [40, 45] in both (1
    # starts first), [45, 60] crosses 1's end (in 2), [60, 65] in 2 only.
    rows = [_x("user_annotation", A.format(n=1), 0, 50), _x("user_annotation", A.format(n=2), 30, 70),
            _x("cpu_op", "op", 40, 5), _x("cpu_op", "op", 60, 5), _x("cpu_op", "op", 45, 15),
            _x("cpu_op", "op", 20, 20)]
    assert _same_as_the_scan(rows) == [1, 1, 2, 2]


def test_ops_outside_every_annotation_or_on_another_thread_get_none() -> None:
    rows = [_x("user_annotation", A.format(n=1), 10, 10), _x("cpu_op", "op", 0, 5), _x("cpu_op", "op", 15, 10),
            _x("cpu_op", "op", 30, 1), _x("cpu_op", "op", 12, 2, tid=2)]
    assert _same_as_the_scan(rows) == [None, None, None, None]


def test_ties_of_start_and_end() -> None:
    # Two annotations starting together (the longer first in event order), an op starting and ending with them.
    rows = [_x("user_annotation", A.format(n=1), 0, 10), _x("user_annotation", A.format(n=2), 0, 20),
            _x("cpu_op", "op", 0, 10), _x("cpu_op", "op", 0, 20), _x("cpu_op", "op", 10, 10),
            _x("cpu_op", "op", 20, 0), _x("cpu_op", "op", 0, 21)]
    # In event order (by start, the longer first): [0, 21] in neither, then [0, 20], [0, 10], [10, 20], [20, 20].
    assert _same_as_the_scan(rows) == [None, 2, 2, 2, 2]


_ROW = st.builds(lambda ann, n, ts, dur, tid: _x("user_annotation" if ann else "cpu_op",
                                                 A.format(n=n) if ann else "op", ts, dur, tid),
                 st.booleans(), st.integers(1, 9), st.integers(0, 30), st.integers(0, 30), st.integers(1, 2))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.lists(_ROW, min_size=1, max_size=20))
def test_any_annotations_give_what_the_scan_gave(rows: list[dict[str, Any]]) -> None:
    _same_as_the_scan(rows)


def test_the_issues_trace_gives_every_core_its_iterations_work() -> None:
    """N annotations, N cores (``devtools.hostile_traces``): each core inside its own iteration gets the
    detailed annotation's pairs, and the summary reads the batches."""
    n = 300
    ev = decode_bytes(json.dumps({"traceEvents": list(serving_events(n))}).encode())
    analysis = analyze(ev)
    cores = np.flatnonzero(analysis.events.name == analysis.events.names.index(CORE))
    assert cores.size == n
    pairs = 22 + 60  # the iteration's (tests/analysis/test_batch.py works them out)
    assert (analysis.attr.flops[cores] == 4 * 8 * 64 * pairs).all()
    summary = summarize_trace(analysis, file="t.pt.trace.json", worker="w", span=None, metadata=None)
    assert summary.serving is not None and summary.serving.iterations == n
