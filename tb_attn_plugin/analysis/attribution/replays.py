"""Kernels that CUDA/HIP graph replays ran, placed in the layers whose ops launched them.

A graph replay (one ``cudaGraphLaunch`` or ``hipGraphLaunch``, ``kernels.GRAPH_LAUNCH``) runs the kernels,
copies and sets recorded into the graph when it was captured, each with the launch's correlation id:
the ops that launched them ran at the capture, not now. A replayed kernel belongs to the layer that
launched it while the graph was captured, and never to a layer of another model:

- **The capture is in the trace.** A capture is what its thread ran from ``*StreamBeginCapture`` to
  ``*StreamEndCapture`` (``kernels.GRAPH_CAPTURE_BEGIN``, ``GRAPH_CAPTURE_END``). Each call in it that adds a
  node to the graph (``kernels.GRAPH_NODE_CALLS``: a kernel launch, an asynchronous copy or set) is one
  kernel, memcpy or memset of every replay, in the capture's order. A replay whose device work matches
  a capture's calls one for one (as many, each of the kind its call makes) is that capture's: its k-th
  kernel in device order takes the layer, phase and head of the k-th call. Replays of one graph carry
  its ``graph id`` (CUDA 12): graphs are numbered as they are created, so the highest ids are the last
  captures, matched from the last backwards; without ids, the replays of each size take the captures of
  that size in turn (vLLM replays its piecewise graphs in the order it captured them). Where no capture
  matches one for one, one with as many attention layers as the replay has runs of attention kernels
  (below) gives its layers in order.
- **It is not.** The kernels are read by name: a run of consecutive attention kernels
  (``backend.is_attention_kernel``: a split-KV kernel and its combine are one run) is one layer's core,
  and the KV-cache write, RoPE and quantization kernels just before it (``kernels.REPLAY_KV_WRITE_KERNELS``,
  ``REPLAY_ROPE_KERNELS``, ``LIBRARY_QUANT_KERNELS``) are its ``kv_cache``, ``rope`` and ``quantize``; the
  k-th run is the replayed model's k-th layer. They are layers found by their ops only where the model
  is the same: as many consecutive such layers, each with attention kernels of its own of the run's
  backend, or a serving engine's op that launched none of its own (vLLM's eager prefill beside its
  decode graphs). Otherwise they are layers of their own, numbered after every layer found, one
  numbering per sequence of backends (every replay of a graph, and the same model's graphs at other
  batch sizes, share it): a diffusion transformer replayed beside its pipeline's eager text encoders
  never lands on them, and each layer's backend is its own kernels'.

Without the capture, GEMMs are not taken: nothing in a kernel's name tells the qkv projection from the
MLP's, so such layers are core only. Only kernels nothing placed yet are taken.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from tb_attn_plugin.analysis.attribution.attribute import Attribution
from tb_attn_plugin.analysis.ops.backend import detect_backend, is_attention_kernel
from tb_attn_plugin.analysis.ops.opnames import is_serving_core
from tb_attn_plugin.trace.events import Events
from tb_attn_plugin.trace.kineto import Kind
from tb_attn_plugin.vocab.kernels import (
    GRAPH_CAPTURE_BEGIN,
    GRAPH_CAPTURE_END,
    GRAPH_LAUNCH,
    GRAPH_NODE_CALLS,
    REPLAY_KV_WRITE_KERNELS,
    REPLAY_ROPE_KERNELS,
)
from tb_attn_plugin.vocab.libraries import LIBRARY_QUANT_KERNELS
from tb_attn_plugin.vocab.scopes import MAX_LAYERS, PHASES, Phase

__all__ = ["Capture", "Replay", "Replays", "attention_kernels", "capture_of", "captures", "graph_replays",
           "match_captures", "place_replay_kernels"]

_SDPA, _KV, _ROPE = PHASES.index(Phase.SDPA), PHASES.index(Phase.KV_CACHE), PHASES.index(Phase.ROPE)
_QUANT = PHASES.index(Phase.QUANTIZE)
#: Kernels looked at before a core for its KV write, RoPE and quantization.
_MAX_BEFORE = 4
#: What a replay runs: the nodes of its graph.
_NODE_KINDS = (int(Kind.KERNEL), int(Kind.MEMCPY), int(Kind.MEMSET))


class Replays(NamedTuple):
    """The layers given replayed kernels, and how many replays gave some."""

    layers: frozenset[int]
    replays: int


class Replay(NamedTuple):
    """One graph launch: its runtime call, its kernels, copies and sets in device order, and the graph
    id they carry (-1: none recorded)."""

    launch: int
    rows: np.ndarray
    graph: int


class Capture(NamedTuple):
    """One capture: its begin call, and its calls that add a node with the device kind each makes."""

    begin: int
    nodes: np.ndarray
    kinds: np.ndarray


class Match(NamedTuple):
    """The capture a replay is matched to (-1: none), and whether one node for one kernel."""

    capture: int
    exact: bool


def graph_replays(events: Events) -> list[Replay]:
    """Every graph launch with device work in the trace, in launch time order."""
    launch_ids = events.name_ids(GRAPH_LAUNCH)
    if not launch_ids.size:
        return []
    launches = np.flatnonzero((events.kind == Kind.RUNTIME) & np.isin(events.name, launch_ids) & (events.corr >= 0))
    device = np.flatnonzero(np.isin(events.kind, _NODE_KINDS) & np.isin(events.corr, events.corr[launches]))
    if not device.size:
        return []
    order = device[np.lexsort((events.ts[device], events.corr[device]))]
    groups = np.split(order, np.flatnonzero(np.diff(events.corr[order])) + 1)
    by_corr = {int(events.corr[g[0]]): g for g in groups}
    out = []
    for i in launches[np.argsort(events.ts[launches], kind="stable")].tolist():
        rows = by_corr.pop(int(events.corr[i]), None)
        if rows is not None:
            ids, counts = np.unique(events.graph[rows][events.graph[rows] >= 0], return_counts=True)
            out.append(Replay(i, rows, int(ids[np.argmax(counts)]) if ids.size else -1))
    return out


def capture_of(events: Events) -> tuple[np.ndarray, np.ndarray]:
    """The begin calls of the trace's captures in time order, and per event the capture it starts in
    (-1: none): from a begin call to the next end call on its thread, or to the thread's end."""
    runtime = events.kind == Kind.RUNTIME
    begins = np.flatnonzero(runtime & np.isin(events.name, events.name_ids(GRAPH_CAPTURE_BEGIN)))
    begins = begins[np.argsort(events.ts[begins], kind="stable")]
    ends = np.flatnonzero(runtime & np.isin(events.name, events.name_ids(GRAPH_CAPTURE_END)))
    inside = np.full(len(events), -1, np.int32)
    ends_by_track = {t: np.sort(events.ts[ends[events.track[ends] == t]])
                     for t in np.unique(events.track[ends]).tolist()}
    for k, b in enumerate(begins.tolist()):
        t = int(events.track[b])
        lo, hi = (int(x) for x in np.searchsorted(events.track, [t, t + 1]))
        start = float(events.ts[b])
        after = ends_by_track.get(t, np.zeros(0))
        j = int(np.searchsorted(after, start, side="right"))
        stop = float(after[j]) if j < after.size else np.inf
        a, z = (int(x) for x in np.searchsorted(events.ts[lo:hi], [start, stop], side="left"))
        inside[lo + a:lo + z] = k
    return begins, inside


def captures(events: Events) -> list[Capture]:
    """The trace's captures in time order, each with its node calls in order."""
    begins, inside = capture_of(events)
    if not begins.size:
        return []
    node_ids = [i for i, n in enumerate(events.names) if any(c in n for c in GRAPH_NODE_CALLS)]
    nodes = np.flatnonzero((events.kind == Kind.RUNTIME) & np.isin(events.name, node_ids) & (inside >= 0))
    nodes = nodes[np.lexsort((events.ts[nodes], inside[nodes]))]
    kind_of = np.array([int(Kind.MEMCPY) if "Memcpy" in n else int(Kind.MEMSET) if "Memset" in n else int(Kind.KERNEL)
                        for n in events.names] or [0], np.int8)
    out = []
    for k, b in enumerate(begins.tolist()):
        mine = nodes[inside[nodes] == k]
        out.append(Capture(b, mine, kind_of[events.name[mine]]))
    return out


def attention_kernels(events: Events) -> np.ndarray:
    """Per name id: whether it is an attention kernel's (``backend.is_attention_kernel``)."""
    return np.array([is_attention_kernel(n) for n in events.names] or [False], np.bool_)


def _runs(core: np.ndarray) -> list[tuple[int, int]]:
    """The [start, end) positions of each run of True in ``core``."""
    if not core.size:
        return []
    edges = np.flatnonzero(np.diff(np.concatenate([[0], core.astype(np.int8), [0]])))
    return list(zip(edges[::2].tolist(), edges[1::2].tolist(), strict=True))


def _capture_layers(attr: Attribution, nodes: np.ndarray) -> list[int]:
    """The forward attention layers a capture's calls launched from, in the order they first did."""
    mine = nodes[(attr.layer[nodes] >= 0) & ~attr.backward[nodes]]
    return list(dict.fromkeys(int(x) for x in attr.layer[mine].tolist()))


def match_captures(events: Events, attr: Attribution, replays: list[Replay], caps: list[Capture]) -> list[Match]:
    """Each replay's capture (module docstring): one for one by graph id or in turn by size, else by
    its runs of attention kernels against a capture's attention layers; -1 where none."""
    out = [Match(-1, False)] * len(replays)
    if not caps:
        return out
    ts = events.ts
    # A replay fits a capture whose calls make, one for one, the kinds of device work it ran.
    cap_keys = [(c.nodes.size, c.kinds.tobytes()) for c in caps]
    keys = [(r.rows.size, events.kind[r.rows].astype(np.int8).tobytes()) for r in replays]
    first: dict[int, int] = {}
    for n, r in enumerate(replays):
        if r.graph >= 0:
            first.setdefault(r.graph, n)
    by_id: dict[int, int] = {}
    last = len(caps) - 1
    for g in sorted(first, reverse=True):  # the newest graphs are the last captures
        j = last
        while j >= 0 and cap_keys[j] != keys[first[g]]:
            j -= 1
        if j >= 0:
            by_id[g], last = j, j - 1
    turns: dict[object, int] = {}

    def in_turn(key: object, candidates: list[int]) -> int:
        """The next of ``candidates`` for the replays of ``key``, in turn."""
        turn = turns.get(key, 0)
        turns[key] = turn + 1
        return candidates[turn % len(candidates)]

    by_key: dict[tuple[int, bytes], list[int]] = {}
    for j, key in enumerate(cap_keys):
        by_key.setdefault(key, []).append(j)
    for n, r in enumerate(replays):
        if r.graph in by_id:
            out[n] = Match(by_id[r.graph], True)
        elif r.graph < 0:
            fit = [j for j in by_key.get(keys[n], []) if ts[caps[j].begin] < ts[r.launch]]
            if fit:
                out[n] = Match(in_turn(keys[n], fit), True)
    core = attention_kernels(events)
    layers = [_capture_layers(attr, c.nodes) for c in caps]
    taken = set(by_id.values())  # a graph's capture is no other graph's
    for n, r in enumerate(replays):
        runs = len(_runs(core[events.name[r.rows]]))
        if out[n].capture >= 0 or not runs:
            continue
        fit = [j for j, c in enumerate(caps) if ts[c.begin] < ts[r.launch] and len(layers[j]) == runs
               and (r.graph < 0 or j not in taken)]
        if fit:
            out[n] = Match(in_turn(runs, fit), False)
    return out


def place_replay_kernels(events: Events, attr: Attribution) -> Replays:
    """Give the kernels of graph replays their layer and phase (in place, on ``attr``; module
    docstring); the layers given some, and how many replays gave some."""
    replays = graph_replays(events)
    if not replays:
        return Replays(frozenset(), 0)
    caps = captures(events)
    names = events.names
    core = attention_kernels(events)
    before = np.array([_KV if any(k in n for k in REPLAY_KV_WRITE_KERNELS) else
                       _ROPE if any(k in n for k in REPLAY_ROPE_KERNELS) else
                       _QUANT if any(k in n for k in LIBRARY_QUANT_KERNELS) else -1 for n in names] or [-1], np.int32)
    quant = before == _QUANT
    found: set[int] = set()
    count = 0
    pending: list[Replay] = []
    for r, m in zip(replays, match_captures(events, attr, replays, caps), strict=True):
        if m.capture < 0:
            pending.append(r)
            continue
        if m.exact:
            placed = _from_calls(events, attr, r.rows, caps[m.capture].nodes, quant)
        else:
            layers = _capture_layers(attr, caps[m.capture].nodes)
            placed = set()
            for k, (a, b) in enumerate(_runs(core[events.name[r.rows]])):
                placed |= _place(events, attr, r.rows, a, b, layers[k], before)
        found |= placed
        count += bool(placed)
    if pending:
        numbering = _Numbering(events, attr, replays, core)
        for r in pending:
            free = r.rows[attr.layer[r.rows] < 0]
            runs = _runs(core[events.name[free]])
            base = numbering.base(tuple(detect_backend((), [names[events.name[i]] for i in free[a:b]])[0]
                                        for a, b in runs))
            placed = set()
            for k, (a, b) in enumerate(runs):
                if base + k >= MAX_LAYERS:
                    break
                placed |= _place(events, attr, free, a, b, base + k, before)
            found |= placed
            count += bool(placed)
    return Replays(frozenset(found), count)


def _from_calls(events: Events, attr: Attribution, rows: np.ndarray, nodes: np.ndarray, quant: np.ndarray
                ) -> set[int]:
    """Each replayed row not placed yet takes the layer, phase, head and pass of the capture's call at
    its position (a library's quantization kernel the ``quantize`` phase, as ``attribute`` gives it)."""
    keep = (attr.layer[rows] < 0) & (attr.layer[nodes] >= 0)
    dst, src = rows[keep], nodes[keep]
    attr.layer[dst], attr.phase[dst], attr.head[dst] = attr.layer[src], attr.phase[src], attr.head[src]
    attr.backward[dst] = attr.backward[src]
    attr.phase[dst[quant[events.name[dst]] & (attr.phase[dst] < 0)]] = _QUANT
    return {int(x) for x in np.unique(attr.layer[dst]).tolist()}


def _place(events: Events, attr: Attribution, seq: np.ndarray, a: int, b: int, layer: int, before: np.ndarray
           ) -> set[int]:
    """The run ``seq[a:b]`` of attention kernels as ``layer``'s core, with the KV write, RoPE and
    quantization kernels just before it."""
    run = seq[a:b]
    run = run[attr.layer[run] < 0]
    if not run.size:
        return set()
    attr.layer[run], attr.phase[run] = layer, _SDPA
    for j in reversed(seq[max(0, a - _MAX_BEFORE):a].tolist()):
        phase = int(before[events.name[j]])
        if phase < 0 or attr.layer[j] >= 0:
            break
        attr.layer[j], attr.phase[j] = layer, phase
    return {layer}


class _Numbering:
    """Where a replayed model's layers start (module docstring): at layers found by their ops that are
    the same model's, else after every layer found, one start per sequence of backends."""

    def __init__(self, events: Events, attr: Attribution, replays: list[Replay], core: np.ndarray) -> None:
        replayed = np.zeros(len(events), np.bool_)
        for r in replays:
            replayed[r.rows] = True
        own = (attr.layer >= 0) & ~replayed & ~attr.backward
        kernels = np.flatnonzero(own & (events.kind == Kind.KERNEL) & core[events.name])
        self.kernels: dict[int, list[str]] = {}
        for i in kernels.tolist():
            self.kernels.setdefault(int(attr.layer[i]), []).append(events.names[events.name[i]])
        served = np.array([is_serving_core(n) for n in events.names] or [False], np.bool_)
        self.served = {int(x) for x in attr.layer[own & (events.kind == Kind.CPU_OP) & served[events.name]].tolist()}
        self.layers = sorted({int(x) for x in attr.layer[own].tolist()})
        self.next = int(attr.layer.max()) + 1 if attr.layer.size and attr.layer.max() >= 0 else 0
        self.starts: dict[tuple[str, ...], int] = {}

    def base(self, backends: tuple[str, ...]) -> int:
        if backends not in self.starts:
            start = next((s for s in self.layers if all(self._same(s + k, b) for k, b in enumerate(backends))), None)
            if start is None:
                start, self.next = self.next, self.next + len(backends)
            self.starts[backends] = start
        return self.starts[backends]

    def _same(self, layer: int, backend: str) -> bool:
        """Whether ``layer`` found by its ops runs ``backend`` (its own attention kernels name it, or
        it is a serving engine's op that launched none)."""
        kernels = self.kernels.get(layer)
        if kernels:
            return detect_backend((), kernels)[0] == backend
        return layer in self.served
