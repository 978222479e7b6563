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

The same calls say which model each layer belongs to (``layer_models``), for the findings that
compare layers with each other: a pipeline's text encoders, its transformer and its VAE are
different models, whose layers may rightly differ. A layer's model is the outermost module or
compiled-region call that holds its block (``CLIPTextModel_0``, ``SD3Transformer2DModel_0``), and
the first part of its module path where the path goes on to a layer's index (``text_encoder`` of
``text_encoder.text_model.encoder.layers.0.self_attn``: the part of whatever was instrumented or
labelled that holds the layer). A model whose own top-level parts are stacks is read stack by
stack (T5's ``encoder`` and ``decoder``, under scopes). Where neither shows (no module events, no
path), the layers are one model.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from tb_attn_plugin.analysis.attribution.attribute import Attribution
from tb_attn_plugin.analysis.attribution.inference.module_calls import module_calls
from tb_attn_plugin.analysis.attribution.nesting import EPS_US, nearest_marked_ancestor
from tb_attn_plugin.trace.events import Events
from tb_attn_plugin.trace.kineto import MODULE_PREFIX, Kind
from tb_attn_plugin.vocab.aten import COMPILED_REGION_PREFIX

__all__ = ["Found", "layer_models", "number_blocks"]


class Found(NamedTuple):
    """A block found, before it has a layer number."""

    anchor: int  # the module event, or the core's first op: what encloses it names the block
    first: int  # the block's first and last event
    last: int
    module: str  # the attention module's instance or path; "" for a block found by its ops
    core_only: bool  # no projection found around the core (``extent.Extent.core_only``)
    missing: str = ""  # what it misses, in words, where ``core_only`` (``extent.Extent.missing``)


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
    region = _regions(events)
    near = nearest_marked_ancestor(parent, _calls(events, region))
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



def layer_models(events: Events, attr: Attribution) -> dict[int, str]:
    """Each layer's model (module docstring), named by its outermost call (the ``nn.Module``
    instance, the label, the compiled frame) and its path's first part, joined by " / "; "" where
    neither shows. Read at the layer's first forward block call."""
    blocks = np.flatnonzero(attr.is_scope & (attr.layer >= 0) & (attr.phase < 0) & (attr.head < 0) & ~attr.backward)
    first: dict[int, int] = {}
    for b in blocks.tolist():
        first.setdefault(int(attr.layer[b]), b)
    if not first:
        return {}
    names, region = events.names, _regions(events)
    near = nearest_marked_ancestor(attr.parent, _calls(events, region))
    out = {}
    for layer, b in first.items():
        outer = int(near[b])
        while outer >= 0 and near[outer] >= 0:
            outer = int(near[outer])
        call = ""
        # The block's own module call (an inferred block's scope spans it) holds no other layer.
        if outer >= 0 and (events.ts[outer] < events.ts[b] - EPS_US
                           or events.ts[outer] + events.dur[outer] > events.ts[b] + events.dur[b] + EPS_US):
            name = names[events.name[outer]]
            call = name.split("/", 1)[0] if region[events.name[outer]] else name.removeprefix(MODULE_PREFIX)
        parts = attr.modules.get(layer, "").split(".")
        top = parts[0] if len(parts) > 1 and any(p.isdigit() for p in parts[1:]) else ""
        out[layer] = " / ".join(x for x in (call, top) if x)
    return out


def _regions(events: Events) -> np.ndarray:
    """Per name: whether it is a compiled frame's call (``Torch-Compiled Region: F/N``)."""
    return np.array([n.startswith(COMPILED_REGION_PREFIX) for n in events.names] or [False], np.bool_)


def _calls(events: Events, region: np.ndarray) -> np.ndarray:
    """Per event: whether it is a module's call or a compiled region's."""
    return module_calls(events) | (region[events.name] & (events.kind == Kind.CPU_OP))
