"""Layer numbers for the attention blocks that inference finds (``analysis.infer``).

A layer is what runs again each time the model runs. A block's identity says which:

- a block found by its attention module's call (``analysis.module_calls``) is that module
  instance (``CLIPAttention_3``), or the module path its label names
  (``model.layers.3.self_attn``), in every call of it;
- a block found by its ops (an SDPA call, matmul -> softmax -> matmul, a compiled frame) is its
  ordinal among the op-found blocks of the outermost call that encloses it, a module's (an
  ``nn.Module`` event or a module label) or a compiled region, named by that call's instance
  (``SD3Transformer2DModel_0``), label or frame (``Torch-Compiled Region: 0``, whatever its
  recompile): the k-th attention of a diffusion
  transformer is its k-th block in each of its calls, one per denoising step, as the k-th of a
  language model is in each of a generation's forward passes;
- a block found by its ops that no module or compiled region encloses (a trace without module
  events) is its ordinal within its forward pass: within its step on its thread (within the trace,
  when it has no ``ProfilerStep``), and there within the stretch between two backward passes. A
  training step that accumulates gradients runs a forward and a backward per micro-batch, and a
  trace without a schedule (``accelerator.profile()``'s, ``export_chrome_trace``'s) has one forward
  after another with no step between them: the backward pass between two forwards says the model
  began again.

Layers are numbered in the order the identities first appear, in file order (thread, then time):
module blocks and op-found blocks interleave as they ran, and a model's text encoders, its
transformer and its decoder take their layer numbers one after the other.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from tb_attn_plugin.analysis.module_calls import module_calls
from tb_attn_plugin.analysis.nesting import nearest_marked_ancestor
from tb_attn_plugin.trace.events import Events
from tb_attn_plugin.trace.kineto import Kind
from tb_attn_plugin.vocab.ops import COMPILED_REGION_PREFIX

__all__ = ["Found", "number_blocks"]


class Found(NamedTuple):
    """A block found, before it has a layer number."""

    anchor: int  # the module event, or the core's first op: what encloses it names the block
    first: int  # the block's first and last event
    last: int
    module: str  # the attention module's instance or path; "" for a block found by its ops
    core_only: bool  # no projection found around the core (``extent.Extent.core_only``)


def number_blocks(events: Events, parent: np.ndarray, step: np.ndarray, blocks: list[Found], *,
                  backward: np.ndarray | None = None) -> list[int]:
    """Each block's layer (module docstring), in the order of ``blocks``; ``backward``: each event's
    flag of backward work (``attribute``), whose ops part forward passes."""
    if not blocks:
        return []
    # The backward ops' start times: a block's forward pass is how many began before it.
    backward_ts = np.sort(events.ts[backward & (events.kind == Kind.CPU_OP)]) if backward is not None \
        else np.zeros(0, events.ts.dtype)
    names = events.names
    region = np.array([n.startswith(COMPILED_REGION_PREFIX) for n in names], np.bool_)
    calls = module_calls(events) | (region[events.name] & (events.kind == Kind.CPU_OP))
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
            passes = int(np.searchsorted(backward_ts, events.ts[b.anchor]))
            where = (outer,) if outer >= 0 else (-1, int(step[b.anchor]), int(events.track[b.anchor]), passes)
            k = ordinals.get(where, 0)
            ordinals[where] = k + 1
            call = names[events.name[outer]] if outer >= 0 else ""
            key = (call.split("/", 1)[0] if outer >= 0 and region[events.name[outer]] else call, k)
        out[j] = layer_of.setdefault(key, len(layer_of))
    return out

