"""Attribution: which layer, head, phase and step every event and memory event belongs to.

Rules (``docs/analysis.md`` has the long form):

- CPU events nest by time on their thread (events are sorted by track, start, longest first;
  ``_sweep`` finds every parent at once). An event inherits the layer, head and phase
  of its innermost enclosing scope, and the step of its enclosing ``ProfilerStep#N`` (or, where
  an annotation crosses a step's end so that none encloses it, of the step it starts in).
- Backward work runs outside the forward scopes. An ``autograd::engine::evaluate_function``
  event takes the layer and phase of the forward op that created its autograd node, the last op
  to start with its sequence number (``analysis.autograd``), and everything nested in it
  follows; also its step, where its thread has no ProfilerStep (the autograd engine's device
  thread on CUDA).
- Device events (kernels, memcpy, memset) take the attribution of the runtime call that
  launched them (``correlation``), or of the op with the same ``External id``.
- A memory event belongs to the innermost event on its thread that contains its time.
- FLOPs count at the outermost op of a nest that has a formula (``analysis.flops``).

Numbers the trace claims are checked here, once per distinct name or shape, and what is out of
bounds is ignored and counted in ``Attribution.diagnostics``: a scope with a layer or head out
of range (``scopes.MAX_LAYERS``, ``scopes.MAX_HEADS``) is no scope (its events belong to the
enclosing scope), a ``ProfilerStep#N`` with N over ``MAX_STEP_NUMBER`` is no step, and an op
whose shapes claim a tensor over ``flops.MAX_TENSOR_BYTES`` has no shapes for any analysis
(``Attribution.shape_ok``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from tb_attn_plugin.analysis.attribution.autograd import attribute_backward
from tb_attn_plugin.analysis.attribution.batch import BAD_BATCH, bad_batches, batch_flops
from tb_attn_plugin.analysis.attribution.nesting import EPS_US, nearest_marked_ancestor, or_self, parents, subtree_sizes
from tb_attn_plugin.analysis.ops.flops import IMPLAUSIBLE, UNCOUNTED, is_integer_op, op_flops, plausible
from tb_attn_plugin.trace.events import Events
from tb_attn_plugin.trace.kineto import BACKWARD_PREFIX, DEVICE_KINDS, STEP_PREFIX, Kind
from tb_attn_plugin.vocab.libraries import ATTENTION_CORE_OPS, LIBRARY_QUANT_KERNELS
from tb_attn_plugin.vocab.scopes import PHASES, Phase, Scope, is_scope_name, read_scope

__all__ = ["MAX_STEP_NUMBER", "PHASE_CODE", "STEP_OUT_OF_RANGE", "Attribution", "attribute", "launchers"]

PHASE_CODE = {p: i for i, p in enumerate(PHASES)}
#: ``ProfilerStep#N`` numbers are stored in int32 columns: a larger N is not a step.
MAX_STEP_NUMBER = 2**31 - 1
STEP_OUT_OF_RANGE = f"ProfilerStep numbers over {MAX_STEP_NUMBER} (not steps)"

I32 = npt.NDArray[np.int32]
F64 = npt.NDArray[np.float64]
B = npt.NDArray[np.bool_]


@dataclass(frozen=True, eq=False)
class Attribution:
    """Per-event attribution, aligned with the rows of ``Events`` (and its memory table)."""

    parent: I32
    layer: I32  # -1: not attention
    head: I32  # -1: no head scope
    phase: I32  # index into scopes.PHASES, -1: in a block but no phase ("other")
    step: I32  # ProfilerStep number, -1: outside any step
    backward: B  # backward work (inside an autograd engine function or launched from one)
    is_scope: B  # the event is one of our scopes (or a synthetic one)
    flops: F64  # counted FLOPs (outermost formula op of a nest), 0 elsewhere
    mem_layer: I32
    mem_head: I32
    mem_phase: I32
    mem_step: I32
    mem_backward: B
    mem_event: I32  # the innermost event containing each memory event, -1 if none
    modules: dict[int, str]  # layer -> module path, where scopes name one
    shape_ok: B = field(default_factory=lambda: np.zeros(0, np.bool_))  # per shape id: plausible sizes
    diagnostics: dict[str, int] = field(default_factory=dict)  # numbers out of bounds, ignored
    iops: F64 = field(default_factory=lambda: np.zeros(0))  # integer ops (int8 GEMMs), like flops; empty: none

    def shape(self, events: Events, i: int) -> int:
        """Event ``i``'s shape id, or -1 where it has none or none believable."""
        sid = int(events.shape[i])
        return sid if sid >= 0 and self.shape_ok[sid] else -1


def attribute(events: Events) -> Attribution:
    names = events.names
    # Per-name lookups, computed once per distinct name.
    sc_layer = np.full(len(names), -1, np.int32)
    sc_head = np.full(len(names), -1, np.int32)
    sc_phase = np.full(len(names), -1, np.int32)
    scope_name = np.zeros(len(names), np.bool_)
    step_no = np.full(len(names), -1, np.int32)
    is_bwd_name = np.zeros(len(names), np.bool_)
    bad_name: dict[int, str] = {}  # name id -> the diagnostics label of its number out of range
    modules: dict[int, str] = {}
    for nid, name in enumerate(names):
        if is_scope_name(name):
            scope = read_scope(name)
            if isinstance(scope, Scope):
                scope_name[nid] = True
                sc_layer[nid] = scope.layer
                sc_head[nid] = -1 if scope.measured_head is None else scope.measured_head
                sc_phase[nid] = -1 if scope.phase is None else PHASE_CODE[scope.phase]
                if scope.module:
                    modules.setdefault(scope.layer, scope.module)
            elif scope is not None:
                bad_name[nid] = scope
        elif name.startswith(STEP_PREFIX):
            number = _step_number(name[len(STEP_PREFIX):])
            if number is None:
                bad_name[nid] = STEP_OUT_OF_RANGE
            else:
                step_no[nid] = number
        elif name.startswith(BACKWARD_PREFIX):
            is_bwd_name[nid] = True

    kind = events.kind
    annotation = kind == Kind.ANNOTATION
    # Before torch 1.10 record_function ranges were written as operators (cat "Operator").
    is_scope = scope_name[events.name] & (annotation | (kind == Kind.OTHER) | (kind == Kind.CPU_OP))
    is_step = (step_no[events.name] >= 0) & ((kind == Kind.ANNOTATION) | (kind == Kind.CPU_OP))
    on_device = np.isin(kind, DEVICE_KINDS)
    diagnostics: dict[str, int] = {}
    if bad_name:
        counts = np.bincount(events.name, minlength=len(names))
        for nid, label in bad_name.items():
            if counts[nid]:
                diagnostics[label] = diagnostics.get(label, 0) + int(counts[nid])

    shape_ok = np.array([plausible(s) for s in events.shapes], np.bool_)
    implausible = int((~shape_ok[events.shape[events.shape >= 0]]).sum())
    if implausible:
        diagnostics[IMPLAUSIBLE] = implausible
    flops_raw = _raw_flops(events, shape_ok)
    batch_flops(events, flops_raw)  # serving cores: their work from the engine's batch annotations
    bad_batch = bad_batches(events)
    if bad_batch:
        diagnostics[BAD_BATCH] = bad_batch
    library = events.name_ids(ATTENTION_CORE_OPS)
    uncounted = int((np.isin(events.name, library) & (flops_raw == 0)).sum()) if library.size else 0
    if uncounted:  # an attention library's varlen or paged call: its lengths are tensor values
        diagnostics[UNCOUNTED] = uncounted
    parent, layer, head, phase, step, backward, flops, subtree_end = _sweep(
        events, is_scope, is_step, on_device, sc_layer, sc_head, sc_phase, step_no, is_bwd_name, flops_raw
    )
    steps = np.flatnonzero(is_step & ~is_scope & ~on_device)
    if steps.size:
        _steps_by_time(events, steps, np.flatnonzero((step < 0) & ~on_device), step_no, step)
    iops = _split_integer_ops(events, flops)
    attribute_backward(events, subtree_end, layer, head, phase, step, backward, is_bwd_name)
    _attribute_device(events, on_device, layer, head, phase, step, backward)
    mem = _attribute_memory(events, parent, layer, head, phase, step, backward)
    return Attribution(parent=parent, layer=layer, head=head, phase=phase, step=step, backward=backward,
                       is_scope=is_scope, flops=flops, mem_layer=mem[0], mem_head=mem[1], mem_phase=mem[2],
                       mem_step=mem[3], mem_backward=mem[4], mem_event=mem[5],
                       modules=modules, shape_ok=shape_ok, diagnostics=diagnostics, iops=iops)


def _split_integer_ops(events: Events, counted: F64) -> F64:
    """The integer ops' counts moved out of ``counted`` (in place) into an array of their own;
    an empty one where the trace has none (most traces)."""
    ids = [i for i, name in enumerate(events.names) if is_integer_op(name)]
    if not ids:
        return np.zeros(0)
    integer = np.isin(events.name, ids)
    iops = np.where(integer, counted, 0.0)
    counted[integer] = 0.0
    return iops


_STEP_DIGITS = len(str(MAX_STEP_NUMBER))
_QUANTIZE = PHASES.index(Phase.QUANTIZE)


def _step_number(text: str) -> int | None:
    """N of ``ProfilerStep#N``: -1 where it is no number (not a step), None where it is out of
    range (checked on its length first: ``int()`` refuses thousands of digits)."""
    digits = text.strip()
    if not digits.isascii() or not digits.isdigit():
        return -1
    if len(digits) > _STEP_DIGITS or int(digits) > MAX_STEP_NUMBER:
        return None
    return int(digits)


def _raw_flops(events: Events, shape_ok: B) -> F64:
    """Each op's FLOPs from its name and shapes, computed once per distinct (name, shapes)."""
    out = np.zeros(len(events), np.float64)
    with_shape = np.flatnonzero(events.shape >= 0)
    with_shape = with_shape[shape_ok[events.shape[with_shape]]]
    if with_shape.size == 0:
        return out
    nid = events.name[with_shape].astype(np.int64)
    sid = events.shape[with_shape].astype(np.int64)
    pairs, which = np.unique(nid * len(events.shapes) + sid, return_inverse=True)
    names, shapes = events.names, events.shapes
    per_pair = np.array([op_flops(names[int(p) // len(shapes)], shapes[int(p) % len(shapes)]) for p in pairs],
                        np.float64)
    out[with_shape] = per_pair[which]
    return out


def _sweep(
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
    """The nesting of host events, and what each inherits from its ancestors, in numpy.

    It computes what a sweep with a stack of open events computes over the events in (track,
    start, longest first) order, where an event closes every open event that it ends after
    (by more than ``EPS_US``): an event's parent is the top of that stack. That stack, before an
    event closes anything, is the chain previous event, its parent, its parent's parent...; so
    the parent is the first event on that chain that the event does not end after. All events
    walk their chains at once by pointer jumping (``_parents``), and inherited values come from
    the nearest marked ancestor, found the same way (``_nearest_marked``). Each takes a number
    of rounds logarithmic in the chains' lengths, where the pure-Python sweep it replaced took
    0.44 s per 170k events (``tests/analysis/test_sweep.py`` checks the two agree).
    """
    n = len(events)
    parent = np.full(n, -1, np.int32)
    layer = np.full(n, -1, np.int32)
    head = np.full(n, -1, np.int32)
    phase = np.full(n, -1, np.int32)
    step = np.full(n, -1, np.int32)
    backward = np.zeros(n, np.bool_)
    counted = np.zeros(n, np.float64)
    subtree_end = np.arange(1, n + 1, dtype=np.int32)  # one past the last event nested in each event
    # int32 positions throughout (n < 2**31): on a 1.3M-event trace each int64 array of them
    # would cost 10 MB more at the analysis's peak.
    host = np.flatnonzero(~on_device).astype(np.int32)
    if host.size == 0:
        return parent, layer, head, phase, step, backward, counted, subtree_end
    track = events.track[host]
    par = parents(track, (events.ts + events.dur)[host])
    nid = events.name[host]
    scope = is_scope[host]
    step_mark = is_step[host] & ~scope  # a scope's name is never a step's: the marks never meet
    bwd_mark = is_bwd_name[nid] & ~scope & ~step_mark
    fl = flops_raw[host]
    # Layer, head and phase: the innermost scope's, the event's own if it is one.
    at = or_self(nearest_marked_ancestor(par, scope), scope)
    has = at >= 0
    src = nid[at[has]]
    rows = host[has]
    layer[rows], head[rows], phase[rows] = sc_layer[src], sc_head[src], sc_phase[src]
    at = or_self(nearest_marked_ancestor(par, step_mark), step_mark)
    has = at >= 0
    step[host[has]] = step_no[nid[at[has]]]
    backward[host] = (or_self(nearest_marked_ancestor(par, bwd_mark), bwd_mark) >= 0)
    # FLOPs count at the outermost op of a nest that has a formula.
    with_flops = fl > 0.0
    outermost = with_flops & (nearest_marked_ancestor(par, with_flops) < 0)
    counted[host[outermost]] = fl[outermost]
    parent[host] = np.where(par >= 0, host[np.maximum(par, 0)], -1)
    # An event's descendants follow it (in host order): its subtree ends at the next host event
    # after them, or at the end of the trace.
    size = subtree_sizes(par)
    after = np.arange(host.size, dtype=np.int32) + size
    subtree_end[host] = np.where(after < host.size, host[np.minimum(after, host.size - 1)], n)
    return parent, layer, head, phase, step, backward, counted, subtree_end


def _steps_by_time(events: Events, steps: npt.NDArray[Any], rest: npt.NDArray[Any], step_no: I32, step: I32) -> None:
    """The step of each host event in ``rest`` (no ``ProfilerStep`` encloses it) whose start lies
    in a step on its thread (``steps``: the step events, in file order): an annotation that
    crosses a step's end (Lightning's ``[pl][profile]run_training_batch`` runs from one profiler
    step into the next) holds events of both, which belong to the step they start in."""
    for tr in np.unique(events.track[steps]).tolist():
        mine = steps[events.track[steps] == tr]
        lo, hi = (int(x) for x in np.searchsorted(events.track, [tr, tr + 1]))
        cand = rest[(rest >= lo) & (rest < hi)]
        if not cand.size:
            continue
        k = np.searchsorted(events.ts[mine], events.ts[cand], side="right") - 1
        at = mine[np.maximum(k, 0)]
        inside = (k >= 0) & (events.ts[cand] < events.ts[at] + events.dur[at] - EPS_US)
        step[cand[inside]] = step_no[events.name[at[inside]]]


def launchers(events: Events, device: npt.NDArray[Any]) -> I32:
    """The host event that launched each of the ``device`` events (indices into ``events``): the
    runtime call with the same ``correlation``, else the CPU op with the same ``External id``
    (-1: neither is in the trace). The drill-down hangs kernels under their op by it."""
    out = np.full(device.size, -1, np.int32)
    if device.size == 0:
        return out
    host = np.flatnonzero(~np.isin(events.kind, DEVICE_KINDS))
    by_corr: dict[int, int] = {}
    runtime = host[(events.kind[host] == Kind.RUNTIME) & (events.corr[host] >= 0)]
    for i, c in zip(runtime.tolist(), events.corr[runtime].tolist(), strict=True):
        by_corr.setdefault(c, i)
    by_ext: dict[int, int] = {}
    ops = host[(events.kind[host] == Kind.CPU_OP) & (events.ext[host] >= 0)]
    for i, x in zip(ops.tolist(), events.ext[ops].tolist(), strict=True):
        by_ext.setdefault(x, i)
    for k, (c, x) in enumerate(zip(events.corr[device].tolist(), events.ext[device].tolist(), strict=True)):
        src = by_corr.get(c) if c >= 0 else None
        if src is None and x >= 0:
            src = by_ext.get(x)
        if src is not None:
            out[k] = src
    return out


def _attribute_device(
    events: Events, on_device: B, layer: I32, head: I32, phase: I32, step: I32, backward: B
) -> None:
    device = np.flatnonzero(on_device)
    src = launchers(events, device)
    found = src >= 0
    dst, src = device[found], src[found]
    layer[dst], head[dst], phase[dst], step[dst], backward[dst] = layer[src], head[src], phase[src], step[src], \
        backward[src]
    # A library's quantization kernels launched with no op of their own (SageAttention's pybind and
    # Triton calls) quantize, wherever in the block they were launched from.
    quant = np.array([any(k in n for k in LIBRARY_QUANT_KERNELS) for n in events.names] or [False], np.bool_)
    hit = device[quant[events.name[device]] & (layer[device] >= 0) & (phase[device] < 0)]
    phase[hit] = _QUANTIZE


def _attribute_memory(
    events: Events, parent: I32, layer: I32, head: I32, phase: I32, step: I32, backward: B
) -> tuple[I32, I32, I32, I32, B, I32]:
    m = len(events.mem_ts)
    out_layer = np.full(m, -1, np.int32)
    out_head = np.full(m, -1, np.int32)
    out_phase = np.full(m, -1, np.int32)
    out_step = np.full(m, -1, np.int32)
    out_bwd = np.zeros(m, np.bool_)
    out_event = np.full(m, -1, np.int32)
    if m == 0 or len(events) == 0:
        return out_layer, out_head, out_phase, out_step, out_bwd, out_event
    end = events.ts + events.dur
    for tr in np.unique(events.mem_track).tolist():
        lo = int(np.searchsorted(events.track, tr, side="left"))
        hi = int(np.searchsorted(events.track, tr, side="right"))
        if lo == hi:
            continue
        mine = np.flatnonzero(events.mem_track == tr)
        times = events.mem_ts[mine]
        cand = lo + np.searchsorted(events.ts[lo:hi], times, side="right") - 1
        # Most memory events fall inside the latest-starting event; walk up where they do not.
        cand = np.where(cand >= lo, cand, -1)
        # Walk up the parents, all memory events at once, until the event contains the time.
        todo = np.flatnonzero((cand >= 0) & (end[np.maximum(cand, 0)] + EPS_US < times))
        while todo.size:
            up = parent[cand[todo]]
            up = np.where(up >= lo, up, -1)
            cand[todo] = up
            todo = todo[(up >= 0) & (end[np.maximum(up, 0)] + EPS_US < times[todo])]
        ok = cand >= 0
        src = cand[ok]
        dst = mine[ok]
        out_layer[dst], out_head[dst], out_phase[dst] = layer[src], head[src], phase[src]
        out_step[dst], out_bwd[dst], out_event[dst] = step[src], backward[src], src
    return out_layer, out_head, out_phase, out_step, out_bwd, out_event
