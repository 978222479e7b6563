"""Serving traces hostile in size or in their numbers (issue 48).

A vLLM trace of N iteration annotations and N attention cores cost N² (each core scanned every annotation for
its own, three times a summary): 4.4 s at 4k, 68 s at 24k. The lookup is now one sort and binary searches; these
tests check that it answers what the scan answered, on annotations nested, overlapping, tied and on other
threads (``bench/hostile_analysis.py`` measures the times).

And a serving trace's numbers are believed only in range: counts of ASCII digits (``\\d`` took any script's),
and the KV write's and the core's shapes only where they describe real tensors (``flops.plausible``): a KV cache
of -4096 B per token, 0 B from an int64 product wrapped, and 6.5e33 FLOPs were figures.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devtools.hostile_traces import CORE, ITERATION, serving_events
from tb_attn_plugin.analysis.attribution.analyze import analyze
from tb_attn_plugin.analysis.attribution.batch import BAD_BATCH, Batch, _annotations, _enclosing, parse
from tb_attn_plugin.analysis.ops.flops import IMPLAUSIBLE
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
    pairs = 22 + 60  # the iteration's (tests/analysis/attribution/test_batch.py works them out)
    assert (analysis.attr.flops[cores] == 4 * 8 * 64 * pairs).all()
    summary = summarize_trace(analysis, file="t.pt.trace.json", worker="w", span=None, metadata=None)
    assert summary.serving is not None and summary.serving.iterations == n


# -- numbers a serving trace claims ---------------------------------------------------------------------------

KV = "_C_cache_ops::reshape_and_cache_flash"


def _op(name: str, ts: float, dims: list[list[int]], types: list[str]) -> dict[str, Any]:
    return {**_x("cpu_op", name, ts, 5), "args": {"Input Dims": dims, "Input type": types}}


def _iteration(annotation: str = ITERATION, *, k: list[int] | None = None, q: list[int] | None = None,
               ) -> list[dict[str, Any]]:
    """One step of one iteration: a KV write (k and v of 10 tokens into a bf16 cache) and a core (q of 10 tokens)."""
    k = k or [10, 2, 64]
    return [_x("user_annotation", "ProfilerStep#1", 0, 1000), _x("user_annotation", annotation, 10, 500),
            _op(KV, 20, [k, k, [64, 16, 2, 64], [64, 16, 2, 64], [10]], ["c10::BFloat16"] * 4 + ["long int"]),
            _op(CORE, 40, [q or [10, 8, 64], [10, 2, 64], [10, 2, 64], [10, 8, 64]], ["c10::BFloat16"] * 4)]


def _summary(rows: list[dict[str, Any]]) -> Any:
    return summarize_trace(analyze(_events(rows)), file="t.pt.trace.json", worker="w", span=None, metadata=None)


@pytest.mark.parametrize("digit", ["٣", "３", "𝟑", "³"])
def test_counts_in_other_scripts_digits_are_no_batch(digit: str) -> None:
    """``\\d`` took Arabic-Indic, full-width and mathematical digits, which ``int()`` reads: up to 10^15 requests."""
    name = f"execute_context_{digit * 15}(1)_generation_0(0)"
    assert parse(name) is None
    s = _summary(_iteration(name))
    assert s.serving is None
    assert s.diagnostics.get(BAD_BATCH) == (None if digit == "³" else 1)  # "³" is no decimal digit even to re


def test_a_count_of_sixteen_ascii_digits_is_no_batch_with_a_diagnostic() -> None:
    s = _summary(_iteration(f"execute_context_1({10**15})_generation_0(0)"))
    assert s.serving is None and s.diagnostics.get(BAD_BATCH) == 1


def test_the_issues_iteration_is_read() -> None:
    s = _summary(_iteration())
    assert s.serving is not None and s.serving.kv_bytes_per_token == (2 * 64 + 2 * 64) * 2
    assert BAD_BATCH not in s.diagnostics and IMPLAUSIBLE not in s.diagnostics


@pytest.mark.parametrize("k", [
    [10, -2, 64],  # a negative size: -512 B of KV cache per token
    [10, 2**32, 2**32],  # k and v of 2^64 elements per token: int64 products wrapped to 0 B
])
def test_a_kv_write_of_no_real_tensor_gives_no_kv_figure(k: list[int]) -> None:
    s = _summary(_iteration(k=k))
    assert s.serving is not None and s.serving.kv_bytes_per_token is None and s.serving.decode_kv_bytes is None
    assert s.diagnostics.get(IMPLAUSIBLE) == 1


def test_a_core_whose_q_is_past_the_tensor_bound_gets_no_flops() -> None:
    """A q of 10 x 2^40 x 2^20 bf16 (past 1 PiB) made 6.5e33 FLOPs of one core."""
    analysis = analyze(_events(_iteration(q=[10, 2**40, 2**20])))
    core = int(np.flatnonzero(analysis.events.name == analysis.events.names.index(CORE))[0])
    assert analysis.attr.flops[core] == 0
    assert analysis.diagnostics.get(IMPLAUSIBLE) == 1


def test_a_serving_trace_of_4096_layers_summarizes_within_its_documented_size() -> None:
    """``docs/limits.md``: a serving trace of 4096 layers of three phases each makes a 9.9 MB summary (limits.md
    promised 4.3 MB, the head rows' share alone); the layers stop at the bound."""
    ev = decode_bytes(json.dumps({"traceEvents": list(serving_events(1, cores=4097))}).encode())
    summary = summarize_trace(analyze(ev), file="t.pt.trace.json", worker="w", span=None, metadata=None)
    assert len(summary.layers) == 4096
    assert len(msgspec.json.encode(summary)) < 10_500_000
