"""Backward work: the forward op whose autograd node each ``autograd::engine::evaluate_function``
event runs.

Autograd numbers each node it creates from a per-thread counter (``at::sequence_number``), and
creating the node advances the counter. Every op dispatched through autograd records the
counter's value as it starts (the trace's ``Sequence number``), so the ops that create no node
share the number of the next node: a no-op conversion (``aten::to`` to the dtype a tensor has),
a view of a tensor that needs no gradient, a composite op (``aten::scaled_dot_product_attention``,
``aten::matmul``, ``aten::linear``) around the op that creates it, a mask or a noise tensor built
from tensors without gradients. The node is created inside the last op to start with its number:
every op that starts after the creation has the next number. So a backward function belongs to
that op (``ScaledDotProductFlashAttentionForCpuBackward0`` to
``aten::_scaled_dot_product_flash_attention_for_cpu``, not to the no-op ``aten::to`` before the
SDPA call; ``MulBackward0`` to the ``mul`` of a dropout, not to its ``empty_like`` and
``bernoulli_``; ``TBackward0`` to ``aten::t``, not to a dropout before the block), and takes its
layer, head and phase: an op outside the blocks owns its backward work, even where a no-op of a
block shares its number.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from tb_attn_plugin.trace.events import Events

__all__ = ["attribute_backward", "node_owners"]

I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]
B = npt.NDArray[np.bool_]


def node_owners(seq: npt.NDArray[np.int64], forward_ops: I64) -> tuple[I64, I64]:
    """The sequence numbers of ``forward_ops`` (event indices, in event order), each once and
    sorted, and for each the op that created its node: the last of them to start with it (the
    last in event order, where events are sorted by thread and start, an op before the ops
    nested in it)."""
    numbers, last = np.unique(seq[forward_ops][::-1], return_index=True)
    return numbers, forward_ops[forward_ops.size - 1 - last]


def attribute_backward(
    events: Events, subtree_end: I32, layer: I32, head: I32, phase: I32, step: I32, backward: B, is_bwd_name: B
) -> None:
    """Backward work takes its forward op's layer, head and phase (in place), and its step where its
    own thread has none: on CUDA the autograd engine runs backward on a device thread of its own,
    outside the ProfilerStep annotations of the thread that ran the step."""
    seq = events.seq
    forward_ops = np.flatnonzero((seq >= 0) & ~backward)
    if forward_ops.size == 0:
        return
    numbers, owner = node_owners(seq, forward_ops)
    engine = np.flatnonzero(is_bwd_name[events.name] & (seq >= 0) & (layer < 0))
    at = np.minimum(np.searchsorted(numbers, seq[engine]), numbers.size - 1)
    found = numbers[at] == seq[engine]
    engine, fwd = engine[found], owner[at[found]]
    inside = layer[fwd] >= 0  # backward work of ops outside the blocks is not attention's
    engine, fwd = engine[inside], fwd[inside]
    if engine.size == 0:
        return
    end = subtree_end[engine]
    if (engine[1:] >= end[:-1]).all():
        # Disjoint subtrees (no engine function nested in another's): every one is still
        # unattributed when its turn comes, so all are assigned at once.
        size = end - engine
        rows = np.repeat(engine - np.cumsum(size) + size, size) + np.arange(size.sum())
        src = np.repeat(fwd, size)
        layer[rows], head[rows], phase[rows] = layer[src], head[src], phase[src]
        step[rows] = np.where(step[rows] >= 0, step[rows], step[src])
        backward[rows] = True
        return
    for i, f, j in zip(engine.tolist(), fwd.tolist(), end.tolist(), strict=True):
        if layer[i] >= 0:  # inside the subtree of one assigned before it
            continue
        layer[i:j] = layer[f]
        head[i:j] = head[f]
        phase[i:j] = phase[f]
        step[i:j] = np.where(step[i:j] >= 0, step[i:j], step[f])
        backward[i:j] = True
