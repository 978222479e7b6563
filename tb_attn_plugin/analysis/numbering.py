"""Layer numbers for the attention blocks that inference finds (``analysis.infer``).

A layer is what runs again each time the model runs. A block's identity says which:

- a block found by its ``*Attention`` module is that module instance (``CLIPAttention_3``), in
  every call of it;
- a block found by its ops (an SDPA call, matmul -> softmax -> matmul, a compiled frame) is its
  ordinal among the op-found blocks of the outermost call that encloses it, an ``nn.Module`` or a
  compiled region, named by that call's instance (``SD3Transformer2DModel_0``) or frame
  (``Torch-Compiled Region: 0``, whatever its recompile): the k-th attention of a diffusion
  transformer is its k-th block in each of its calls, one per denoising step, as the k-th of a
  language model is in each of a generation's forward passes;
- a block found by its ops that no module or compiled region encloses (a trace without module
  events) is its ordinal within its step on its thread (within the trace, when it has no
  ``ProfilerStep``).

Layers are numbered in the order the identities first appear, in file order (thread, then time):
module blocks and op-found blocks interleave as they ran, and a model's text encoders, its
transformer and its decoder take their layer numbers one after the other.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from tb_attn_plugin.analysis.nesting import nearest_marked_ancestor
from tb_attn_plugin.trace.events import Events
from tb_attn_plugin.trace.kineto import MODULE_PREFIX, Kind
from tb_attn_plugin.vocab.ops import COMPILED_REGION_PREFIX

__all__ = ["Found", "number_blocks"]


class Found(NamedTuple):
    """A block found, before it has a layer number."""

    anchor: int  # the module event, or the core's first op: what encloses it names the block
    first: int  # the block's first and last event
    last: int
    module: str  # the ``*Attention`` module instance; "" for a block found by its ops
    core_only: bool  # no projection found around the core (``extent.Extent.core_only``)


def number_blocks(events: Events, parent: np.ndarray, step: np.ndarray, blocks: list[Found]) -> list[int]:
    """Each block's layer (module docstring), in the order of ``blocks``."""
    if not blocks:
        return []
    names = events.names
    region = np.array([n.startswith(COMPILED_REGION_PREFIX) for n in names], np.bool_)
    calls = (events.kind == Kind.MODULE) | (region[events.name] & (events.kind == Kind.CPU_OP))
    near = nearest_marked_ancestor(parent, calls)
    ordinals: dict[tuple[int, ...], int] = {}
    layer_of: dict[tuple[str, str | int], int] = {}
    out = [0] * len(blocks)
    for j in sorted(range(len(blocks)), key=lambda j: blocks[j].anchor):
        b = blocks[j]
        key: tuple[str, str | int]
        if b.module:
            key = (b.module, "")
        else:
            outer = int(near[b.anchor])
            while outer >= 0 and near[outer] >= 0:
                outer = int(near[outer])
            where = (outer,) if outer >= 0 else (-1, int(step[b.anchor]), int(events.track[b.anchor]))
            k = ordinals.get(where, 0)
            ordinals[where] = k + 1
            key = (_call_name(names[events.name[outer]]) if outer >= 0 else "", k)
        out[j] = layer_of.setdefault(key, len(layer_of))
    return out


def _call_name(name: str) -> str:
    """A call's identity: the module instance, or the compiled frame without its recompile."""
    if name.startswith(MODULE_PREFIX):
        return name
    return name.split("/", 1)[0]
