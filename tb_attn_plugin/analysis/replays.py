"""Attention inside CUDA/HIP graph replays: the kernels a replay ran, placed in layers.

A serving engine that replays a whole forward pass as one graph (vLLM's full graphs for decode
batches, SGLang's CUDA graphs) leaves no op of it in the trace: one ``cudaGraphLaunch`` (or
``hipGraphLaunch``) per replay, and the kernels it ran, each with the launch's correlation id. The
ops that launched them were recorded when the graph was captured, not now. Without ops, nothing
finds attention by its ops or modules; but each kernel's name still says what it is.

``place_replay_kernels`` reads each replay's kernels in device order. A run of consecutive
attention kernels (``backend.is_attention_kernel``: a split-KV kernel and its combine are one
run) is one layer's core: the k-th run of a replay is layer k, as the k-th attention block of a
forward pass is. Just before a run, the KV-cache write and RoPE kernels (``ops.REPLAY_KV_WRITE_KERNELS``,
``REPLAY_ROPE_KERNELS``) are that layer's ``kv_cache`` and ``rope``; the core is ``sdpa``. GEMMs
are not taken: nothing in a kernel's name tells the qkv projection from the MLP's, so these layers
are core only. Only kernels no scope placed are read, so a replay's attention never takes time
from a layer found by its ops.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from tb_attn_plugin.analysis.attribute import Attribution
from tb_attn_plugin.analysis.backend import is_attention_kernel
from tb_attn_plugin.trace.events import Events
from tb_attn_plugin.trace.kineto import DEVICE_KINDS, Kind
from tb_attn_plugin.vocab.ops import GRAPH_LAUNCH, REPLAY_KV_WRITE_KERNELS, REPLAY_ROPE_KERNELS
from tb_attn_plugin.vocab.scopes import MAX_LAYERS, PHASES, Phase

__all__ = ["Replays", "place_replay_kernels"]

_SDPA, _KV, _ROPE = PHASES.index(Phase.SDPA), PHASES.index(Phase.KV_CACHE), PHASES.index(Phase.ROPE)
#: Kernels looked at before a core for its KV write and RoPE.
_MAX_BEFORE = 4


class Replays(NamedTuple):
    """The layers found in graph replays, and how many replays ran attention."""

    layers: frozenset[int]
    replays: int


def place_replay_kernels(events: Events, attr: Attribution) -> Replays:
    """Give the attention kernels of graph replays, and the KV writes and RoPE before them, their
    layer and phase (in place, on ``attr``); the layers found (module docstring)."""
    names = events.names
    launch_ids = events.name_ids(GRAPH_LAUNCH)
    if not launch_ids.size:
        return Replays(frozenset(), 0)
    launches = np.flatnonzero((events.kind == Kind.RUNTIME) & np.isin(events.name, launch_ids) & (events.corr >= 0))
    if not launches.size:
        return Replays(frozenset(), 0)
    device = np.isin(events.kind, DEVICE_KINDS) & np.isin(events.corr, events.corr[launches]) & (attr.layer < 0)
    rows = np.flatnonzero(device)
    if not rows.size:
        return Replays(frozenset(), 0)
    core = np.array([is_attention_kernel(n) for n in names], np.bool_)
    kv = np.array([any(k in n for k in REPLAY_KV_WRITE_KERNELS) for n in names], np.bool_)
    rope = np.array([any(k in n for k in REPLAY_ROPE_KERNELS) for n in names], np.bool_)
    order = rows[np.lexsort((events.ts[rows], events.corr[rows]))]
    found: set[int] = set()
    replays = 0
    for replay in np.split(order, np.flatnonzero(np.diff(events.corr[order])) + 1):
        layer = -1
        previous = False
        for k, i in enumerate(replay.tolist()):
            is_core = bool(core[events.name[i]])
            if is_core and not previous:
                layer += 1
                if layer >= MAX_LAYERS:
                    break
                for j in reversed(replay[max(0, k - _MAX_BEFORE):k].tolist()):
                    nid = events.name[j]
                    if not (kv[nid] or rope[nid]) or attr.layer[j] >= 0:
                        break
                    attr.layer[j], attr.phase[j] = layer, _KV if kv[nid] else _ROPE
            if is_core and layer < MAX_LAYERS:
                attr.layer[i], attr.phase[i] = layer, _SDPA
                found.add(layer)
            previous = is_core
        replays += layer >= 0
    return Replays(frozenset(found), replays)
