"""``attribute._sweep`` (numpy, pointer jumping) against the pure-Python sweep with a stack that it
replaced, kept here as the reference: every output equal on every hand-written trace, every
public trace, our runner's traces, and random nestings built to stress the tolerance rules.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from helpers import HAND_TRACES, SHARED_TRACES
from hypothesis import given, settings
from hypothesis import strategies as st
from tracetools import trace_files

from tb_attn_plugin.analysis.attribution import attribute as attribute_module
from tb_attn_plugin.analysis.attribution.nesting import EPS_US
from tb_attn_plugin.engine.loader import load_events
from tb_attn_plugin.trace.decode import decode_bytes
from tb_attn_plugin.trace.events import Events

I32 = npt.NDArray[np.int32]
F64 = npt.NDArray[np.float64]
B = npt.NDArray[np.bool_]

_BLOCK = 1 << 16  # events per block of the sweep: bounds the Python objects alive at once


def reference_sweep(
    events: Events,
    is_scope: B,
    is_step: B,
    on_device: B,
    sc_layer: I32,
    sc_head: I32,
    sc_phase: I32,
    step_no: I32,
    is_bwd_name: npt.NDArray[np.bool_],
    flops_raw: F64,
) -> tuple[I32, I32, I32, I32, I32, B, F64, I32]:
    """The sweep with a stack of open events that ``attribute._sweep`` replaced, as it was."""
    n = len(events)
    parent = np.full(n, -1, np.int32)
    layer = np.full(n, -1, np.int32)
    head = np.full(n, -1, np.int32)
    phase = np.full(n, -1, np.int32)
    step = np.full(n, -1, np.int32)
    backward = np.zeros(n, np.bool_)
    counted = np.zeros(n, np.float64)
    subtree_end = np.arange(1, n + 1, dtype=np.int32)  # one past the last event nested in each event
    scope_l, scope_h, scope_p = sc_layer.tolist(), sc_head.tolist(), sc_phase.tolist()
    steps = step_no.tolist()
    bwd_names = is_bwd_name.tolist()
    # stack entries: (end, index, layer, head, phase, step, backward, a FLOP-counting op is open)
    stack: list[tuple[float, int, int, int, int, int, bool, bool]] = []
    cur_track = -1
    for lo in range(0, n, _BLOCK):
        hi = min(n, lo + _BLOCK)
        ends = (events.ts[lo:hi] + events.dur[lo:hi]).tolist()
        tracks = events.track[lo:hi].tolist()
        nids = events.name[lo:hi].tolist()
        scope_flags = is_scope[lo:hi].tolist()
        step_flags = is_step[lo:hi].tolist()
        device_flags = on_device[lo:hi].tolist()
        fl = flops_raw[lo:hi].tolist()
        o_parent = [-1] * (hi - lo)
        o_layer = [-1] * (hi - lo)
        o_head = [-1] * (hi - lo)
        o_phase = [-1] * (hi - lo)
        o_step = [-1] * (hi - lo)
        o_bwd = [False] * (hi - lo)
        o_counted = [0.0] * (hi - lo)
        for k in range(hi - lo):
            if device_flags[k]:
                continue
            tr = tracks[k]
            if tr != cur_track:
                for entry in stack:
                    subtree_end[entry[1]] = lo + k
                stack.clear()
                cur_track = tr
            e = ends[k]
            while stack and e > stack[-1][0] + EPS_US:
                subtree_end[stack.pop()[1]] = lo + k
            if stack:
                _, p, lay, hd, ph, st, bw, above = stack[-1]
                o_parent[k] = p
            else:
                lay = hd = ph = st = -1
                bw = above = False
            name_id = nids[k]
            if scope_flags[k]:
                lay, hd, ph = scope_l[name_id], scope_h[name_id], scope_p[name_id]
            elif step_flags[k]:
                st = steps[name_id]
            elif bwd_names[name_id]:
                bw = True
            o_layer[k], o_head[k], o_phase[k], o_step[k], o_bwd[k] = lay, hd, ph, st, bw
            f = fl[k]
            if f > 0.0 and not above:
                o_counted[k] = f
            stack.append((e, lo + k, lay, hd, ph, st, bw, above or f > 0.0))
        parent[lo:hi] = o_parent
        layer[lo:hi] = o_layer
        head[lo:hi] = o_head
        phase[lo:hi] = o_phase
        step[lo:hi] = o_step
        backward[lo:hi] = o_bwd
        counted[lo:hi] = o_counted
    for entry in stack:
        subtree_end[entry[1]] = n
    return parent, layer, head, phase, step, backward, counted, subtree_end


def _inputs(events: Events) -> tuple[Any, ...]:
    """The sweep's inputs as ``attribute()`` builds them."""
    captured: list[tuple[Any, ...]] = []
    real = attribute_module._sweep

    def spy(*args: Any) -> Any:
        captured.append(args)
        return real(*args)

    attribute_module._sweep = spy  # type: ignore[assignment]
    try:
        attribute_module.attribute(events)
    finally:
        attribute_module._sweep = real  # type: ignore[assignment]
    (args,) = captured
    return args


def _assert_same(events: Events) -> None:
    args = _inputs(events)
    new, old = attribute_module._sweep(*args), reference_sweep(*args)
    names = ("parent", "layer", "head", "phase", "step", "backward", "counted", "subtree_end")
    for name, a, b in zip(names, new, old, strict=True):
        assert a.dtype == b.dtype and np.array_equal(a, b), name


HAND = sorted(HAND_TRACES.glob("*.json"))
PUBLIC = sorted(SHARED_TRACES.glob("*/*.json.gz"))


@pytest.mark.parametrize("path", HAND, ids=lambda p: p.stem)
def test_hand_written_traces(path: Path) -> None:
    _assert_same(decode_bytes(path.read_bytes()))


@pytest.mark.parametrize("path", PUBLIC, ids=lambda p: p.name[:40])
def test_public_traces(path: Path) -> None:
    _assert_same(load_events(str(path)))


def test_runner_traces(builtin_logdir: Path) -> None:
    runs = sorted(p for p in builtin_logdir.iterdir() if p.is_dir())
    assert len(runs) >= 10
    for run in runs:
        for path in trace_files(run):
            _assert_same(load_events(str(path)))


# Random nestings: intervals on a few tracks, with ends that often fall within EPS_US of each
# other (the sweep's tolerance is not transitive), zero durations, equal starts, device events
# between host ones, scopes, steps, backward markers and FLOPs anywhere.
_NAMES = ["tbattn.v1/L0/qk_matmul", "tbattn.v1/L1/H2/softmax", "tbattn.v1/L3", "ProfilerStep#7",
          "ProfilerStep#8", "autograd::engine::evaluate_function: MmBackward0", "aten::mm", "aten::bmm",
          "aten::add", "aten::softmax"]
_event = st.tuples(
    st.integers(0, 2),  # track
    st.integers(0, 40),  # start, in steps of EPS_US / 2 or of 1 µs
    st.integers(0, 40),  # duration
    st.sampled_from(["cpu_op", "user_annotation", "kernel"]),
    st.integers(0, len(_NAMES) - 1),
    st.booleans(),  # fine time grid (around EPS_US) or coarse
)


def _trace(rows: list[tuple[int, int, int, str, int, bool]]) -> bytes:
    import json

    events = []
    for track, start, dur, cat, name, fine in rows:
        unit = EPS_US / 2 if fine else 1.0
        args: dict[str, Any] = {"External id": len(events)}
        if _NAMES[name] in ("aten::mm", "aten::bmm"):
            args["Input Dims"] = [[2, 4, 8], [2, 8, 4]] if _NAMES[name] == "aten::bmm" else [[4, 8], [8, 4]]
            args["Input type"] = ["float", "float"]
        events.append({"ph": "X", "cat": cat, "name": _NAMES[name], "pid": 1 if cat != "kernel" else 0,
                       "tid": track, "ts": 1000.0 + start * unit, "dur": dur * unit, "args": args})
    return json.dumps({"traceEvents": events}).encode()


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(st.lists(_event, min_size=1, max_size=60))
def test_random_nestings(rows: list[tuple[int, int, int, str, int, bool]]) -> None:
    _assert_same(decode_bytes(_trace(rows)))
