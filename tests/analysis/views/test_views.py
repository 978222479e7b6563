"""The tab's views (``analysis.views``): same answers as the straightforward code, in linear time, and
their arguments checked.

``_old_depths`` and ``_old_memory_curve`` are the first implementations, kept as oracles: they are
easy to read and quadratic (issue 23). The new code must agree with them exactly.
"""

from __future__ import annotations

import json
import random
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest
from helpers import HAND_TRACES, SHARED_TRACES, profile_run
from tracetools import trace_files

from tb_attn_plugin.analysis.attribution.analyze import Analysis, analyze
from tb_attn_plugin.analysis.views import views
from tb_attn_plugin.analysis.views.drilldown import drilldown
from tb_attn_plugin.engine.loader import load_events
from tb_attn_plugin.trace.decode import decode_bytes
from tb_attn_plugin.trace.kineto import Kind
from tb_attn_plugin.vocab.scopes import PHASES

HERE = Path(__file__).parent
HAND_WRITTEN = sorted(HAND_TRACES.glob("*.json"))
SHARED = sorted(SHARED_TRACES.glob("*/*.json.gz"))


def _plain(value: Any) -> Any:
    """A view's Struct as the plain lists and dicts the oracles build (NaN and big ints kept)."""
    return json.loads(json.dumps(msgspec.to_builtins(value)))


def _memory_curve(analysis: Analysis, **kwargs: Any) -> Any:
    return _plain(views.memory_curve(analysis, **kwargs))


def _timeline(analysis: Analysis, **kwargs: Any) -> Any:
    return _plain(views.timeline(analysis, **kwargs))


def _drilldown(analysis: Analysis, **kwargs: Any) -> Any:
    return _plain(drilldown(analysis, **kwargs))


# -- oracles: the views as first written ------------------------------------------------------------

def _old_depths(parent: np.ndarray, idx: np.ndarray) -> list[int]:
    chosen = set(idx.tolist())
    depth_of: dict[int, int] = {}
    out = []
    for i in idx.tolist():
        p = int(parent[i])
        while p >= 0 and p not in chosen:
            p = int(parent[p])
        d = depth_of.get(p, -1) + 1 if p >= 0 else 0
        depth_of[i] = d
        out.append(d)
    return out


def _old_memory_curve(analysis: Analysis, *, step: int | None, max_points: int = 4000) -> dict[str, Any]:
    ev, a = analysis.events, analysis.attr
    step, start, end = views.step_window(analysis, step)
    types = ev.mem_device_type[ev.mem_device_type > 0]
    device_type = int(np.bincount(types).argmax()) if types.size else 0
    on_device = ev.mem_device_type == device_type
    order = np.argsort(ev.mem_ts[on_device], kind="stable")
    t = ev.mem_ts[on_device][order]
    nbytes = ev.mem_bytes[on_device][order]
    total = ev.mem_total[on_device][order]
    if total.size and (total < 0).any():
        total = np.cumsum(nbytes)
    window = (t >= start) & (t <= end)
    points = views._downsample(t[window], total[window], max_points)
    scopes_idx = np.flatnonzero(a.is_scope & ~a.backward & (ev.ts >= start) & (ev.ts <= end) & (a.head < 0))
    scopes = [{"layer": int(a.layer[i]), "phase": PHASES[a.phase[i]] if a.phase[i] >= 0 else None,
               "start_us": float(ev.ts[i]), "end_us": float(ev.ts[i] + ev.dur[i])} for i in scopes_idx.tolist()]
    peaks = []
    for layer in sorted(set(a.layer[scopes_idx].tolist())):
        blocks = [i for i in scopes_idx.tolist() if a.layer[i] == layer and a.phase[i] < 0]
        best = 0
        for i in blocks:
            inside = (t >= ev.ts[i]) & (t <= ev.ts[i] + ev.dur[i])
            if inside.any():
                before = total[t < ev.ts[i]]
                base = int(before[-1]) if before.size else int(total[inside][0] - nbytes[inside][0])
                best = max(best, int(total[inside].max()) - base)
        peaks.append({"layer": int(layer), "peak_bytes": best})
    return {"step": step, "device": "cpu" if device_type == 0 else "cuda", "start_us": start, "end_us": end,
            "points": points, "scopes": scopes, "peaks": peaks}


# -- synthetic traces -----------------------------------------------------------------------------

def _x(name: str, ts: float, dur: float, cat: str = "cpu_op", tid: int = 1) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur}


def _mem(ts: float, nbytes: int, total: int | None, tid: int = 1, device: int = 0) -> dict[str, Any]:
    args: dict[str, Any] = {"Bytes": nbytes, "Addr": 1, "Device Type": device, "Device Id": -1 if device == 0 else 0}
    if total is not None:
        args["Total Allocated"] = total
        args["Total Reserved"] = 1 << 30
    return {"ph": "i", "s": "t", "name": "[memory]", "pid": 1, "tid": tid, "ts": ts, "args": args}


def _trace(events: list[dict[str, Any]]) -> Analysis:
    return analyze(decode_bytes(json.dumps({"schemaVersion": 1, "profile_memory": 1, "traceEvents": events}).encode()))


def deep_chain(depth: int, ops: int) -> Analysis:
    """One block scope around ``depth`` nested "Trace" spans (left out of the timeline), with ``ops``
    ops side by side in the innermost span: the shape of issue 23's 2.8 MB trace."""
    span = 4 * (depth + 2 * ops)
    events = [_x("tbattn.v1/L0", 0, span + 10, cat="user_annotation")]
    events += [_x(f"span {k}", 1 + k, span - 2 * k, cat="Trace") for k in range(depth)]
    events += [_x("aten::add", 2 + depth + 2 * j, 1) for j in range(ops)]
    return _trace(events)


def many_blocks(layers: int, calls: int, memory: int) -> Analysis:
    """``layers × calls`` block scopes, each with a softmax scope inside, and ``memory`` memory
    events spread over them."""
    blocks = layers * calls
    events = []
    for b in range(blocks):
        events.append(_x(f"tbattn.v1/L{b % layers}", 100.0 * b, 90, cat="user_annotation"))
        events.append(_x(f"tbattn.v1/L{b % layers}/softmax", 100.0 * b + 1, 80, cat="user_annotation"))
    for k in range(memory):
        b = k * blocks // memory
        events.append(_mem(100.0 * b + 2 + k % 50, 64 if k % 2 == 0 else -64, 1000 + 64 * (k % 2 == 0) + k % 7))
    return _trace(events)


def random_trace(seed: int) -> Analysis:
    """Random nests of scopes, steps, ops and left-out spans on two threads, with memory events
    (some on scope boundaries, some on a second device, some traces without totals)."""
    rng = random.Random(seed)
    events: list[dict[str, Any]] = []
    edges: list[float] = []
    with_totals = seed % 3 != 0

    def fill(t0: int, t1: int, depth: int, tid: int) -> None:
        t = t0
        while t1 - t > 4 and len(events) < 600:
            dur = rng.randint(2, max(2, min(t1 - t, 400) - 1))
            choice = rng.random()
            if choice < 0.25:
                layer = rng.randrange(4)
                name = f"tbattn.v1/L{layer}" + (f"/{rng.choice(PHASES)}" if rng.random() < 0.5 else "")
                events.append(_x(name, t, dur, "user_annotation", tid))
            elif choice < 0.45:
                events.append(_x(f"span {len(events)}", t, dur, "Trace", tid))
            else:
                events.append(_x(rng.choice(["aten::mm", "aten::add", "aten::softmax"]), t, dur, "cpu_op", tid))
            edges.extend((t, t + dur))
            if depth < 12 and dur > 6 and rng.random() < 0.8:
                fill(t + 1, t + dur - 1, depth + 1, tid)
            t += dur + rng.randint(0, 3)

    for tid in (1, 2):
        t = 0
        for step in range(3):
            events.append(_x(f"ProfilerStep#{step + 7}", t, 1000, "user_annotation", tid))
            fill(t + 1, t + 999, 1, tid)
            t += 1010
    total = 0
    for _ in range(400):
        ts = rng.choice(edges) if rng.random() < 0.3 else rng.uniform(0, 3030)
        nbytes = rng.choice([256, 1024, -256, -1024, 4096])
        total += nbytes
        events.append(_mem(ts, nbytes, total if with_totals else None, rng.choice((1, 2)),
                           1 if rng.random() < 0.1 else 0))
    return _trace(events)


@pytest.fixture(scope="module")
def runner_traces(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    logdir = tmp_path_factory.mktemp("views")
    profile_run(logdir, "naive", impl="naive")
    profile_run(logdir, "sdpa-per-head", impl="sdpa", per_head=True)
    return [p for run in ("naive", "sdpa-per-head") for p in trace_files(logdir / run)]


def _analyses(runner_traces: list[Path]) -> Iterator[tuple[str, Analysis]]:
    for path in [*HAND_WRITTEN, *SHARED, *runner_traces]:
        yield path.name, analyze(load_events(str(path)))
    for seed in range(8):
        yield f"random {seed}", random_trace(seed)
    yield "deep chain", deep_chain(300, 200)
    yield "many blocks", many_blocks(30, 4, 700)


# -- the same answers ---------------------------------------------------------------------------------

def test_depths_and_memory_equal_the_first_implementation(runner_traces: list[Path]) -> None:
    checked = 0
    for name, analysis in _analyses(runner_traces):
        ev, parent = analysis.events, analysis.attr.parent
        # what makes the old walk and pointer jumping agree: a parent comes before its children
        assert (parent < np.arange(len(ev))).all(), name
        rng = np.random.default_rng(len(name))
        shown = np.flatnonzero(ev.kind != Kind.OTHER)
        for idx in (shown, np.flatnonzero(rng.random(len(ev)) < 0.3), np.arange(len(ev)), shown[:0]):
            assert views._depths(parent, idx) == _old_depths(parent, idx), name
        for step in [None, *views.steps_of(analysis)]:
            curve = _memory_curve(analysis, step=step)
            del curve["backward"], curve["peak"]  # newer than the oracle: tested on their own below
            assert curve == _plain(_old_memory_curve(analysis, step=step)), (name, step)
            line = _timeline(analysis, step=step, limit=50)
            assert line["events"]["depth"] == _old_depths(parent, _timeline_idx(analysis, line)), name
        checked += 1
    assert checked == len(HAND_WRITTEN) + len(SHARED) + len(runner_traces) + 10


def _timeline_idx(analysis: Analysis, line: dict[str, Any]) -> np.ndarray:
    """The events a (truncated) timeline shows, found again from its answer."""
    ev = analysis.events
    stop = ev.ts + ev.dur
    idx = np.flatnonzero((stop >= line["start_us"]) & (ev.ts <= line["end_us"]) & (ev.kind != Kind.OTHER))
    if idx.size > 50:
        idx = np.sort(idx[np.argsort(-ev.dur[idx], kind="stable")[:50]])
    assert np.round(ev.ts[idx], 3).tolist() == line["events"]["start_us"]
    return idx


def test_memory_peaks_of_nested_and_overlapping_blocks() -> None:
    # Two L0 blocks, the second inside the first, and an L1 block overlapping both; memory
    # events on the edges (inclusive) and one before everything.
    analysis = _trace([
        _x("tbattn.v1/L0", 10, 50, "user_annotation"),
        _x("tbattn.v1/L0", 20, 10, "user_annotation"),
        _x("tbattn.v1/L1", 25, 45, "user_annotation", tid=2),
        _x("tbattn.v1/L2", 80, 5, "user_annotation"),  # no memory event inside: peak 0
        _mem(5, 100, 100), _mem(10, 50, 150), _mem(20, 300, 450), _mem(30, -300, 150),
        _mem(60, 500, 650), _mem(70, -600, 50),
    ])
    curve = _memory_curve(analysis, step=None)
    peaks = {p["layer"]: p["peak_bytes"] for p in curve["peaks"]}
    assert peaks == {0: 650 - 100, 1: 650 - 450, 2: 0}
    del curve["backward"], curve["peak"]
    assert curve == _plain(_old_memory_curve(analysis, step=None))


def test_range_max_of_every_slice() -> None:
    rng = np.random.default_rng(3)
    for size in (1, 2, 3, 7, 8, 9, 100):
        values = rng.integers(-(2**62), 2**62, size)
        lo = np.array([i for i in range(size) for _ in range(i, size)])
        hi = np.array([j for i in range(size) for j in range(i + 1, size + 1)])
        expected = [int(values[a:b].max()) for a, b in zip(lo, hi, strict=True)]
        assert views._range_max(values, lo, hi).tolist() == expected


# -- in linear time -----------------------------------------------------------------------------------

@contextmanager
def _within(seconds: int) -> Iterator[None]:
    """A bound on the work, far above the linear code's time: the quadratic code runs past it."""
    def stop(signum: int, frame: object) -> None:
        raise TimeoutError(f"still running after {seconds} s: superlinear?")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_timeline_of_a_30k_deep_nest_of_left_out_spans() -> None:
    # 30k nested spans around 30k ops: the walk up from every op took 262 s on this machine
    # (900M steps); pointer jumping takes 0.03 s.
    analysis = deep_chain(30_000, 30_000)
    with _within(20):
        line = _timeline(analysis, step=None)
    ops = [d for d, k in zip(line["events"]["depth"], line["events"]["kind"], strict=True) if k == "cpu_op"]
    assert ops == [1] * 30_000  # inside the block scope, whatever lies between


def test_memory_of_60k_blocks_and_20k_memory_events() -> None:
    # 4000 layers × 15 calls (the summary takes up to 4096 layers), 120k scopes, 20k memory events:
    # the per-layer scan of every scope and the per-block masks took 72 s; now 0.1 s.
    analysis = many_blocks(4000, 15, 20_000)
    with _within(20):
        curve = _memory_curve(analysis, step=None)
    assert len(curve["peaks"]) == 4000 and len(curve["scopes"]) == 120_000
    peaks = [p["peak_bytes"] for p in curve["peaks"]]
    assert all(0 <= p <= 64 + 6 for p in peaks) and sum(p > 0 for p in peaks) > 1000


# -- arguments ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def stepped() -> Analysis:
    return analyze(load_events(str(HAND_TRACES / "steps.json")))


@pytest.mark.parametrize("step", [-1, -(2**62), 10**6, 2**62, 10**30])
def test_steps_that_are_not_there(stepped: Analysis, step: int) -> None:
    unstepped = analyze(load_events(str(HAND_TRACES / "memory.json")))
    for analysis in (stepped, unstepped):
        with pytest.raises(views.ViewError, match=r"(?i)step"):
            _memory_curve(analysis, step=step)
        with pytest.raises(views.ViewError, match=r"(?i)step"):
            _timeline(analysis, step=step)


@pytest.mark.parametrize(("start", "end"), [(-1e308, 1e308), (0.0, 1e308), (-1e308, 0.0), (1e-300, 2e-300),
                                            (5.5, 5.5)])
def test_any_finite_window(stepped: Analysis, start: float, end: float) -> None:
    for step in (None, views.steps_of(stepped)[0]):
        line = _timeline(stepped, step=step, start_us=start, end_us=end)
        json.dumps(line, allow_nan=False)
    with pytest.raises(views.ViewError, match="before"):
        _timeline(stepped, step=None, start_us=6.0, end_us=5.0)


def test_enormous_times_give_finite_answers() -> None:
    # the decoder keeps times up to 1e20 µs (three thousand years)
    analysis = _trace([
        _x("ProfilerStep#1", 0, 1e20, "user_annotation"),
        _x("tbattn.v1/L0", 1, 9e19, "user_annotation"),
        _x("aten::mm", 2, 8e19), _x("aten::mm", 9e19, 1e19),
        _x("tbattn.v1/L1", -1e20, 1e20, "user_annotation", tid=2), _x("aten::add", -1e20, 1e20, tid=2),
        _mem(3, 2**40, 2**40), _mem(8e19, 2**52, 2**52 + 2**40), _mem(9.9e19, -(2**52), 2**40),
    ])
    for answer in (_timeline(analysis, step=None), _timeline(analysis, step=1),
                   _memory_curve(analysis, step=None), _memory_curve(analysis, step=1),
                   _drilldown(analysis, layer=0, phase=None, backward=False)):
        json.dumps(answer, allow_nan=False)
    curve = _memory_curve(analysis, step=1)
    assert curve["peak"]["allocated_bytes"] == 2**52 + 2**40
    del curve["backward"], curve["peak"]
    assert curve == _plain(_old_memory_curve(analysis, step=1))
    assert {p["layer"]: p["peak_bytes"] for p in curve["peaks"]} == {0: 2**52 + 2**40}
