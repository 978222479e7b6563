"""CUDA/HIP graphs in a trace: where kernels were captured rather than run, or ran in a replay.

Serving engines (vLLM, SGLang) capture their forward passes into graphs and replay them. A trace
recorded while a graph was captured shows the launches made between ``*StreamBeginCapture`` and
``*StreamEndCapture`` (``ops.GRAPH_CAPTURE_BEGIN``, ``GRAPH_CAPTURE_END``) on their thread, but not
their kernels: those were recorded into the graph, not run. A trace of replays shows one
``*GraphLaunch`` (``ops.GRAPH_LAUNCH``) per replay, and the kernels it ran belong to that launch,
not to the ops that captured them. Either way a layer's device time and the step's are not what
ran, so ``graph_use`` says which layers were captured, and whether attention's device share can be
given at all; the summary shows it as unavailable, never as 0%.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from tb_attn_plugin.analysis.attribute import Attribution
from tb_attn_plugin.analysis.wording import count, layer_list, series
from tb_attn_plugin.trace.events import Events
from tb_attn_plugin.trace.kineto import DEVICE_KINDS, Kind
from tb_attn_plugin.vocab.ops import GRAPH_CAPTURE_BEGIN, GRAPH_CAPTURE_END, GRAPH_LAUNCH
from tb_attn_plugin.vocab.scopes import PHASES

__all__ = ["GRAPHS_OFF", "GraphUse", "graph_use"]

#: How to see every kernel under the op that launched it.
GRAPHS_OFF = ("to see the kernels, profile with graphs off (vLLM: enforce_eager=True; SGLang: "
              "--disable-cuda-graph)")


class GraphUse(NamedTuple):
    """What the trace's graphs hide: the notes to show, the layers whose launches were captured,
    and whether attention's share of the device step time means anything."""

    notes: tuple[str, ...]
    captured: tuple[int, ...]
    device_share_known: bool
    captured_phases: frozenset[tuple[int, str]] = frozenset()  # (layer, phase) with a launch captured


def graph_use(events: Events, attr: Attribution) -> GraphUse:
    """The graph captures and replays of a trace, and the attention layers they hide (module
    docstring)."""
    names = events.names
    runtime = events.kind == Kind.RUNTIME
    begin = runtime & np.isin(events.name, events.name_ids(GRAPH_CAPTURE_BEGIN))
    end = runtime & np.isin(events.name, events.name_ids(GRAPH_CAPTURE_END))
    launch = runtime & np.isin(events.name, events.name_ids(GRAPH_LAUNCH))
    captures = int(begin.sum())
    replays = int(launch.sum())
    if not captures and not replays:
        return GraphUse((), (), True)
    inside = _in_captures(events, np.flatnonzero(begin), np.flatnonzero(end))
    attention = (attr.layer >= 0) & ~attr.backward
    launched = runtime & attention & ~begin & ~end & ~launch
    captured = sorted({int(x) for x in attr.layer[launched & inside].tolist()})
    layers = sorted({int(x) for x in attr.layer[attention].tolist()})
    notes = []
    if captures:
        what = names[int(events.name[np.flatnonzero(begin)[0]])]
        if captured:
            notes.append(_captured_note(events, attr, launched, inside, captured, what,
                                        spanning=bool((attention & (begin | end)).any())))
        eager = [layer for layer in layers if layer not in captured]
        notes.append(f"This trace was recorded while {count(captures, 'CUDA/HIP graph was', 'CUDA/HIP graphs were')} "
                     f"captured ({what}): kernels launched inside a capture did not run, so the step's device time "
                     "covers only the kernels run outside the captures, and attention's share of it is not given"
                     + (f"; {layer_list(eager)} ran outside the captures (a piecewise graph leaves attention out "
                        "of its pieces), and their device figures are the kernels that ran" if eager else ""))
    replayed: list[int] = []
    if replays:
        what = names[int(events.name[np.flatnonzero(launch)[0]])]
        device = np.isin(events.kind, DEVICE_KINDS) & np.isin(events.corr, events.corr[launch]) & (events.corr >= 0)
        replayed = sorted({int(x) for x in attr.layer[device & attention].tolist()})
        notes.append(_replay_note(attr, replays, what, replayed))
    hidden = launched & inside & (attr.phase >= 0)
    phases = frozenset((int(layer), PHASES[int(code)])
                       for layer, code in zip(attr.layer[hidden].tolist(), attr.phase[hidden].tolist(), strict=True))
    # Attention found in the replays is timed with the step's other kernels: its share stands.
    return GraphUse(tuple(notes), tuple(captured), bool(replayed) and not captures, phases)


def _captured_note(events: Events, attr: Attribution, launched: np.ndarray, inside: np.ndarray,
                   captured: list[int], what: str, *, spanning: bool) -> str:
    """What the captures hid of ``captured`` layers: the phases whose launches were captured, those
    that ran (a piecewise graph runs attention between its pieces), and, where a block spans pieces
    (``spanning``), the capture's own work inside it."""
    sel = launched & np.isin(attr.layer, captured)
    hidden = _phase_names(attr, sel & inside)
    ran = [p for p in _phase_names(attr, sel & ~inside) if p not in hidden]
    where = f"the kernels launched from {series(hidden)}" if hidden else "the kernels they launched"
    out = (f"{layer_list(captured).capitalize()} ran while a CUDA/HIP graph was captured ({what}): {where} were "
           "recorded into the graph, not run, so the trace holds no device time for them and their device figures "
           "are unavailable")
    if ran:
        out += f"; {series(ran)} ran outside the captures, and their device figures are the kernels that ran"
    if spanning:
        out += ("; their blocks span graph pieces, so their CPU time holds the capture's own work between the "
                "pieces (ending one capture, beginning the next), under \"other\"")
    return f"{out}; {GRAPHS_OFF}"


def _replay_note(attr: Attribution, replays: int, what: str, replayed: list[int]) -> str:
    """What the replays ran of attention: layers found from their kernels alone, kernels added to
    layers found by their ops, or nothing that can be told apart."""
    head = f"{count(replays, 'CUDA/HIP graph replay', 'CUDA/HIP graph replays')} ({what})"
    if not replayed:
        return (f"{head}: the kernels a replay runs belong to its launch, not to the ops that captured them, so "
                f"attention's device figures leave them out and its share of the device step time is not given; "
                f"{GRAPHS_OFF}")
    scoped = {int(x) for x in attr.layer[attr.is_scope & (attr.layer >= 0)].tolist()}
    alone = [layer for layer in replayed if layer not in scoped]
    also = [layer for layer in replayed if layer in scoped]
    rule = ("each run of attention kernels in a replay is a layer's core (the k-th run layer k), with the KV-cache "
            "write and RoPE kernels just before it")
    parts = []
    if alone:
        parts.append(f"no op of the replayed forward is in the trace, so {layer_list(alone)} were found from the "
                     f"kernels the replays ran: {rule}. Their device figures are those kernels'; the projections' "
                     "GEMMs ran in the replays too but no name tells them from the MLP's, so these layers are the "
                     "attention core only, and they have no CPU time")
    if also:
        parts.append(f"{layer_list(also)} also ran in the replays ({rule}): those kernels add to their device "
                     "figures")
    return f"{head}: " + "; ".join(parts) + f"; {GRAPHS_OFF}"


def _phase_names(attr: Attribution, sel: np.ndarray) -> list[str]:
    """The phases of the events ``sel``, in the order of ``scopes.PHASES``."""
    codes = sorted({int(c) for c in attr.phase[sel].tolist() if c >= 0})
    return [PHASES[c] for c in codes]


def _in_captures(events: Events, begins: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Per event: whether it starts inside a capture (a begin call to the next end call on its
    thread; to the end of the thread where no end follows)."""
    inside = np.zeros(len(events), np.bool_)
    ends_by_track: dict[int, np.ndarray] = {}
    for t in np.unique(events.track[ends]).tolist():
        ends_by_track[t] = np.sort(events.ts[ends[events.track[ends] == t]])
    for b in begins.tolist():
        t = int(events.track[b])
        lo, hi = (int(x) for x in np.searchsorted(events.track, [t, t + 1]))
        start = float(events.ts[b])
        after = ends_by_track.get(t, np.zeros(0))
        k = int(np.searchsorted(after, start, side="right"))
        stop = float(after[k]) if k < after.size else np.inf
        seg = events.ts[lo:hi]
        a, z = (int(x) for x in np.searchsorted(seg, [start, stop], side="left"))
        inside[lo + a:lo + z] = True
    return inside
