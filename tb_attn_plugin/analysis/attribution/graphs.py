"""CUDA/HIP graphs in a trace: where kernels were captured rather than run, or ran in a replay.

Serving engines (vLLM, SGLang) and diffusion pipelines capture their forward passes into graphs and
replay them. A trace recorded while a graph was captured shows the launches made between
``*StreamBeginCapture`` and ``*StreamEndCapture`` (``kernels.GRAPH_CAPTURE_BEGIN``, ``GRAPH_CAPTURE_END``) on
their thread, but not their kernels: those were recorded into the graph, not run. A trace of replays
shows one ``*GraphLaunch`` (``kernels.GRAPH_LAUNCH``) per replay, whose kernels ``analysis.replays`` gives
back to the layers that launched them while the graph was captured. ``graph_use`` says which layers
were captured, which phases the trace holds no kernels of (captured, and no replay in the trace ran
them), and whether attention's device share can be given: it is withheld only where kernels it needs
are missing, that is where a capture's kernels never ran in the trace (its step's device time lacks
them) or where a replay ran attention kernels that no layer holds. Replays that ran no attention
(vLLM's piecewise graphs, attention running between them) withhold nothing. The summary shows a
withheld share as unavailable, never as 0%.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from tb_attn_plugin.analysis.attribution.attribute import Attribution
from tb_attn_plugin.analysis.attribution.replays import (
    attention_kernels,
    capture_of,
    captures,
    graph_replays,
    match_captures,
)
from tb_attn_plugin.analysis.common.wording import count, layer_list, series
from tb_attn_plugin.trace.events import Events
from tb_attn_plugin.trace.kineto import Kind
from tb_attn_plugin.vocab.kernels import GRAPH_CAPTURE_BEGIN, GRAPH_CAPTURE_END, GRAPH_LAUNCH
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
    captured_phases: frozenset[tuple[int, str]] = frozenset()  # (layer, phase) captured, and never replayed here
    #: Attention kernels the trace lacks (captured, never replayed here) or holds on no layer (a replay's
    #: kernels placed nowhere): attention's device time is partial (``WorkerSummary.device_partial``).
    attention_partial: bool = False


def graph_use(events: Events, attr: Attribution) -> GraphUse:
    """The graph captures and replays of a trace, and the attention layers they hide (module
    docstring)."""
    names = events.names
    runtime = events.kind == Kind.RUNTIME
    begin = runtime & np.isin(events.name, events.name_ids(GRAPH_CAPTURE_BEGIN))
    end = runtime & np.isin(events.name, events.name_ids(GRAPH_CAPTURE_END))
    launch = runtime & np.isin(events.name, events.name_ids(GRAPH_LAUNCH))
    n_captures = int(begin.sum())
    n_replays = int(launch.sum())
    if not n_captures and not n_replays:
        return GraphUse((), (), True)
    inside = capture_of(events)[1] >= 0
    attention = (attr.layer >= 0) & ~attr.backward
    launched = runtime & attention & ~begin & ~end & ~launch
    replays = graph_replays(events)
    rows = np.concatenate([r.rows for r in replays]) if replays else np.zeros(0, np.int64)
    # The (layer, phase) pairs whose kernels some replay ran: their capture's kernels did run.
    replayed_pairs = set(zip(attr.layer[rows].tolist(), attr.phase[rows].tolist(), strict=True))
    captured_pairs = set(zip(attr.layer[launched & inside].tolist(), attr.phase[launched & inside].tolist(),
                             strict=True))
    hidden = captured_pairs - replayed_pairs
    captured = sorted({layer for layer, _ in captured_pairs})
    hidden_layers = sorted({layer for layer, _ in hidden})
    caps = captures(events)
    matched = {m.capture for m in match_captures(events, attr, replays, caps)} if caps else set()
    unrun = sum(1 for k in range(len(caps)) if k not in matched)
    core = attention_kernels(events)
    unplaced = int((core[events.name[rows]] & (attr.layer[rows] < 0)).sum())
    known = not hidden and not unrun and not unplaced
    layers = sorted({int(x) for x in attr.layer[attention].tolist()})
    notes = []
    if n_captures:
        what = names[int(events.name[np.flatnonzero(begin)[0]])]
        if hidden_layers:
            notes.append(_captured_note(events, attr, launched, inside, hidden_layers, hidden, what,
                                        spanning=bool((attention & (begin | end)).any())))
        eager = [layer for layer in layers if layer not in captured]
        head = (f"This trace was recorded while {count(n_captures, 'CUDA/HIP graph was', 'CUDA/HIP graphs were')} "
                f"captured ({what}): kernels launched inside a capture did not run")
        if unrun:
            head += (", so the step's device time covers only the kernels run outside the captures, and attention's "
                     "share of it is not given")
            why = " (a piecewise graph leaves attention out of its pieces)"
        else:
            head += "; the replays in this trace ran them all"
            why = ""
        notes.append(head + (f"; {layer_list(eager)} ran outside the captures{why}, and their device figures are the "
                             "kernels that ran" if eager else ""))
    if n_replays:
        what = names[int(events.name[np.flatnonzero(launch)[0]])]
        replayed = sorted({int(x) for x in attr.layer[rows].tolist() if x >= 0})
        notes.append(_replay_note(attr, n_replays, what, replayed, set(captured), unplaced))
    phases = frozenset((int(layer), PHASES[int(code)]) for layer, code in hidden if code >= 0)
    return GraphUse(tuple(notes), tuple(captured), known, phases, attention_partial=bool(phases) or unplaced > 0)


def _captured_note(events: Events, attr: Attribution, launched: np.ndarray, inside: np.ndarray,
                   captured: list[int], hidden: set[tuple[int, int]], what: str, *, spanning: bool) -> str:
    """What the captures hid of ``captured`` layers: the phases whose launches were captured and whose
    kernels no replay in the trace ran (``hidden``: (layer, phase code) pairs), those that ran (a
    piecewise graph runs attention between its pieces), and, where a block spans pieces
    (``spanning``), the capture's own work inside it."""
    sel = launched & np.isin(attr.layer, captured)
    gone = [PHASES[c] for c in sorted({code for layer, code in hidden if code >= 0 and layer in captured})]
    ran = [p for p in _phase_names(attr, sel & ~inside) if p not in gone]
    where = f"the kernels launched from {series(gone)}" if gone else "the kernels they launched"
    out = (f"{layer_list(captured).capitalize()} ran while a CUDA/HIP graph was captured ({what}): {where} were "
           "recorded into the graph, not run, so the trace holds no device time for them and their device figures "
           "are unavailable")
    if ran:
        out += f"; {series(ran)} ran outside the captures, and their device figures are the kernels that ran"
    if spanning:
        out += ("; their blocks span graph pieces, so their CPU time holds the capture's own work between the "
                "pieces (ending one capture, beginning the next), under \"other\"")
    return f"{out}; {GRAPHS_OFF}"


def _replay_note(attr: Attribution, replays: int, what: str, replayed: list[int], captured: set[int],
                 unplaced: int) -> str:
    """What the replays ran of attention: kernels given back to the layers that launched them at a
    capture in the trace, layers found from their kernels alone, kernels added to layers found by their
    ops, attention kernels no layer holds, or no attention at all."""
    head = f"{count(replays, 'CUDA/HIP graph replay', 'CUDA/HIP graph replays')} ({what})"
    if not replayed and not unplaced:
        return (f"{head}: they ran no attention kernel (a piecewise graph leaves attention out of its pieces): the "
                "kernels a replay runs belong to its launch, not to the ops that captured them, and count in the "
                "step's device time only, so attention's device figures and its share of the device step stand; "
                f"{GRAPHS_OFF}")
    scoped = {int(x) for x in attr.layer[attr.is_scope & (attr.layer >= 0)].tolist()}
    from_capture = [layer for layer in replayed if layer in captured]
    alone = [layer for layer in replayed if layer not in scoped]
    also = [layer for layer in replayed if layer in scoped and layer not in captured]
    rule = ("each run of attention kernels in a replay is a layer's core (the k-th run layer k), with the KV-cache "
            "write, RoPE and quantization kernels just before it")
    parts = []
    if from_capture:
        parts.append(f"{layer_list(from_capture)} ran in the replays as the trace captured them: each replayed kernel "
                     "is the layer's and phase's that launched it at the capture (the capture's k-th launch, the "
                     "replay's k-th kernel), so their device figures are those kernels'")
    if alone:
        after = (" (numbered after the layers found by their ops, whose own kernels are another model's)"
                 if scoped else "")
        parts.append(f"no op of the replayed forward is in the trace, so {layer_list(alone)} were found from the "
                     f"kernels the replays ran{after}: {rule}. Their device figures are those kernels'; the "
                     "projections' GEMMs ran in the replays too but no name tells them from the MLP's, so these "
                     "layers are the attention core only, and they have no CPU time")
    if also:
        parts.append(f"{layer_list(also)} also ran in the replays ({rule}): those kernels add to their device "
                     "figures")
    if unplaced:
        parts.append(f"{count(unplaced, 'attention kernel', 'attention kernels')} the replays ran are no layer's, so "
                     "attention's share of the device step time is not given")
    return f"{head}: " + "; ".join(parts) + f"; {GRAPHS_OFF}"


def _phase_names(attr: Attribution, sel: np.ndarray) -> list[str]:
    """The phases of the events ``sel``, in the order of ``scopes.PHASES``."""
    codes = sorted({int(c) for c in attr.phase[sel].tolist() if c >= 0})
    return [PHASES[c] for c in codes]
