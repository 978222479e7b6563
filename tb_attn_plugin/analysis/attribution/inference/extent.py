"""The whole attention block around a core found by its ops, in a trace without scopes or modules.

``infer`` finds an unscoped block by its core: a top-level SDPA call, or q·kᵀ -> softmax ->
attn·v. A block scoped by ``instrument()`` (or an ``nn.Module: *Attention`` event) also holds what
leads to the core and what follows it: the q, k and v projections, the head split, rotary
embeddings, the KV cache, the head merge and the output projection. Without them, attention's
share of the step is a fraction of the truth (a Qwen3 trace: 1% against 19%).

``widen`` extends each core over its sibling ops (same parent, same thread) by the ops' roles, the
same vocabulary ``roles`` places them by:

- back from the core, over the ops that prepare q, k and v (layout, rotary arithmetic, the KV
  cache, K/V expansion, dtype conversions, copies, norms, a relative position bias) to the
  projections, then over the projections and what lies between them: every projection of the
  block's input (q, k and v project one hidden state), and, up to the norm over the model's width
  that opens the block (``_opens_block``: the width is the output projection's), every other
  projection of the core's query rows too: those of latents made in the block (MLA's ``q_b_proj``
  after ``q_a_proj`` and its norm, ``kv_b_proj`` after the cache) and of a second input
  (cross-attention's query, from the decoder's states, beside the keys and values from the
  encoder's). Past that norm a projection of another input is the previous sublayer's, and the
  walk stops there, or at any other op (a dropout, an activation). Only when a projection is found
  within ``_MAX_OPS``: without one there is no telling a block's preparation from the previous
  sublayer's tail, and the core stays alone;
- forward from the core, over the head merge (layout ops, copies) to the first projection after
  it, included, and over what a compiled graph's call or the start of a graph capture runs before
  its first op (vLLM's piecewise graphs: the output projection is the next piece's). Without
  one, nothing is added.

A core that finds a projection on neither side stays alone and says so (``Extent.core_only``):
its figures leave out the projections, the head split and the merge around it, and every
sentence that quotes them calls it the attention core. A core that finds its projections on one
side only is widened on that side and says so too, with the side it missed (``Extent.missing``):
its figures leave out what could not be placed.

A block never reaches into the previous block. What a model does after its output projection
inside its attention module (BERT's dropout, residual add and norm) is not taken: nothing in the
ops tells it from the next sublayer.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from tb_attn_plugin.analysis.attribution.inference.module_calls import module_calls
from tb_attn_plugin.analysis.attribution.nesting import nearest_marked_ancestor
from tb_attn_plugin.analysis.ops.opnames import canonical
from tb_attn_plugin.trace.events import Events
from tb_attn_plugin.trace.kineto import Kind
from tb_attn_plugin.vocab.aten import (
    ARITHMETIC_OPS,
    CAT_OP,
    COMPILE_BOOKKEEPING_PREFIXES,
    COMPILED_GRAPH_PREFIX,
    COPY_OPS,
    DTYPE_CONVERT_OPS,
    KV_CACHE_OPS,
    KV_EXPAND_OPS,
    LAYOUT_OPS,
    LINEAR_OP,
    MATMUL_ARGS,
    NORM_OPS,
    NORM_PIECE_OPS,
    POSITION_BIAS_OPS,
    PROJECTION_OPS,
    ROPE_OPS,
    SCALE_OPS,
    SDPA_OPS,
    TENSOR_NEW_OPS,
)
from tb_attn_plugin.vocab.kernels import GRAPH_CAPTURE_BOOKKEEPING_OPS, INDUCTOR_EPILOGUE_OP
from tb_attn_plugin.vocab.libraries import LIBRARY_KV_WRITE_OPS, LIBRARY_ROPE_OPS
from tb_attn_plugin.vocab.serving import (
    SERVING_BOOKKEEPING_OPS,
    SERVING_KV_WRITE_OPS,
    SERVING_QK_NORM_OPS,
    SERVING_ROPE_OPS,
)

__all__ = ["MISSING_AFTER", "MISSING_BEFORE", "MISSING_BOTH", "Extent", "widen"]

#: Sibling ops looked at on each side of a core (rotary embeddings take about 20; DeepSeek's MLA
#: runs about 75 ops between its first projection and its core).
_MAX_OPS = 128
#: A serving engine's or an attention library's own ops between its projections and its core: RoPE,
#: the paged KV-cache write, vLLM's weak references to graph outputs (names read through
#: ``serving.canonical``).
_SERVING_PREPARE = SERVING_ROPE_OPS | SERVING_KV_WRITE_OPS | SERVING_BOOKKEEPING_OPS | LIBRARY_ROPE_OPS \
    | LIBRARY_KV_WRITE_OPS | {INDUCTOR_EPILOGUE_OP}
#: Ops that prepare q, k and v between their projections and the core, the bookkeeping of a
#: KV cache (``torch.tensor([])``: empty, lift_fresh, detach_), and a relative position bias
#: computed between the projections and q·kᵀ (T5's first layer of each stack).
_PREPARE = LAYOUT_OPS | ROPE_OPS | ARITHMETIC_OPS | KV_CACHE_OPS | KV_EXPAND_OPS | DTYPE_CONVERT_OPS | COPY_OPS \
    | TENSOR_NEW_OPS | POSITION_BIAS_OPS | {CAT_OP} | _SERVING_PREPARE
#: What only a position bias between the projections and the core explains: not passed once the
#: projections are found (before them, an ``embedding`` is the model's token lookup, and the walk
#: would go on into the previous step's last projection, the LM head).
_BIAS_ONLY = POSITION_BIAS_OPS - (LAYOUT_OPS | ROPE_OPS | ARITHMETIC_OPS | KV_CACHE_OPS | KV_EXPAND_OPS
                                  | DTYPE_CONVERT_OPS | COPY_OPS | TENSOR_NEW_OPS)
#: A norm of q or k between its projection and the core (Qwen3's, OLMo's QK-norm), whole or as
#: RMSNorm's pieces.
_QK_NORM = NORM_OPS | NORM_PIECE_OPS | SERVING_QK_NORM_OPS
#: The head merge between the core and the output projection (in a compiled region, Inductor's
#: kernels: the merge, and the element-wise work fused into it).
_MERGE = LAYOUT_OPS | COPY_OPS | {INDUCTOR_EPILOGUE_OP}
#: Ops looked at past joint attention's first output projection for its second (the merge, and
#: the first stream's residual and norm where Inductor ran them in between).
_MAX_OUTPUT_GAP = 8


#: What a block found by its core misses, in words (``Extent.missing``).
MISSING_BEFORE = "no q, k or v projection (linear, addmm or mm) found before the core"
MISSING_AFTER = "no output projection (linear, addmm or mm) found after the core"
MISSING_BOTH = "no projection (linear, addmm or mm) found on either side of the core"


class Extent(NamedTuple):
    """A block's first and last event, and whether it is its core alone: no projection found on
    either side, or on one (``missing`` says which: its figures leave that side out)."""

    first: int
    last: int
    core_only: bool
    missing: str = ""


def widen(events: Events, parent: np.ndarray, spans: list[tuple[int, int]]) -> list[Extent]:
    """Each core ``(first, last)`` (in file order, one thread's blocks in order) widened to its
    block's projections; the cores themselves, ``core_only``, where none is found."""
    if not spans:
        return []
    cpu = events.kind == Kind.CPU_OP
    # Siblings by their nearest ancestor that is neither a module's call nor a compiled graph's
    # call: with_stack's ``nn.Module`` events (the q, k and v projections each inside its own
    # ``nn.Module: Linear``) and other tools' module labels (Lightning's ``[pl][module]...Linear:
    # ...q_proj``) do not part them, nor do the pieces of a graph that torch.compile split at the
    # attention op (vLLM's piecewise graphs hold the projections and RoPE, and the attention op runs
    # between them); a profiler step does.
    siblings = _Siblings(nearest_marked_ancestor(parent, ~module_calls(events) & ~_graph_calls(events)), cpu)
    out: list[Extent] = []
    for first, last in spans:
        floor = out[-1][1] if out and events.track[out[-1][1]] == events.track[first] else -1
        tokens = _tokens(events, first, last)
        after = siblings.after(last, _MAX_OPS)
        stop = _forward(events, after, None)
        start, joint = _back(events, siblings.before(first, _MAX_OPS), floor, tokens,
                             None if stop is None else _width(events, stop))
        if joint:
            stop = _forward(events, after, tokens)
        missing = MISSING_BOTH if start is None and stop is None else MISSING_BEFORE if start is None \
            else MISSING_AFTER if stop is None else ""
        out.append(Extent(first if start is None else start, last if stop is None else stop, bool(missing), missing))
    return out


def _width(events: Events, i: int) -> int | None:
    """The output features of projection ``i`` (the model's width, for an output projection), if
    its weight's shape is recorded: ``linear``'s weight is (N, K), ``addmm``'s and ``mm``'s (K, N)."""
    name = events.names[events.name[i]]
    if canonical(name) == LINEAR_OP:
        weight = events.input_dims(i, 1)
        return weight[0] if weight is not None and len(weight) == 2 else None
    weight = events.input_dims(i, MATMUL_ARGS.get(name, (0, 1))[1])
    return weight[-1] if weight is not None and len(weight) == 2 else None


def _opens_block(events: Events, i: int, op: str, width: int | None) -> bool:
    """Whether op ``i`` normalizes the model's width (``width`` features): the norm before the
    block, whole (``layer_norm``, ``rms_norm``) or RMSNorm's pieces (the product of the rows with
    their (..., 1) statistic). A norm inside the block normalizes a head (a QK-norm) or a latent
    (MLA's), narrower than the model."""
    if width is None or not (op in NORM_OPS or op in SCALE_OPS):
        return False
    x = events.input_dims(i, 0)
    if not x or x[-1] != width:
        return False
    if op in NORM_OPS:
        return True
    stat = events.input_dims(i, 1)
    return stat is not None and len(stat) == len(x) and stat[-1] == 1


def _graph_calls(events: Events) -> np.ndarray:
    """Per event: whether it is Inductor's annotation around a compiled graph's call."""
    ids = [k for k, n in enumerate(events.names) if n.startswith(COMPILED_GRAPH_PREFIX)]
    return np.isin(events.name, ids) & (events.kind == Kind.ANNOTATION)


def _tokens(events: Events, first: int, last: int) -> int | None:
    """How many query tokens an SDPA core attends for (q's ``B * S``), if it is one with shapes."""
    for i in (last, first):
        if canonical(events.names[events.name[i]]) in SDPA_OPS:
            q = events.input_dims(i, 0)
            return q[0] * q[2] if q is not None and len(q) == 4 else None
    return None


def _joined(a: list[int], b: list[int]) -> int:
    """The rows of two projections' inputs together."""
    return int(np.prod(a[:-1])) + int(np.prod(b[:-1]))


def _rows(dims: list[int] | None) -> int | None:
    """The rows of a projection's input: every dimension but the features."""
    return None if not dims else int(np.prod(dims[:-1]))


def _back(events: Events, before: list[int], floor: int, tokens: int | None,
          width: int | None) -> tuple[int | None, bool]:
    """The first op of the block before its core (``before``: the core's siblings, nearest
    first), or None without a projection; and whether the block is joint attention (two streams).

    Past the nearest projection the walk goes on over what prepares q, k and v (a QK-norm sits
    between a projection and the next), taking each further projection of the same input (q, k and
    v project one hidden state), and, until it passes the norm over the model's ``width`` that
    opens the block (``_opens_block``; ``width`` None: not known), each projection of another input
    that reads the core's query rows (``tokens``, where known: a latent made in the block, MLA's;
    cross-attention's query, whose keys and values project the encoder's rows). Past that norm a
    projection of another input is another sublayer's, and so is whatever lies before the block's
    first projection but the layout ops that feed it (GPT-2's Conv1D views its input first).
    Without recorded shapes only layout ops may separate the projections. Joint attention (MMDiT,
    Flux) projects two streams, text and image, and attends over them joined: a projection of a
    second input is the block's when the two inputs' rows add up to the core's query tokens."""
    names, name = events.names, events.name
    start: int | None = None
    lead: int | None = None  # the earliest of the layout ops right before ``start``
    inputs: list[list[int]] = []  # the projections' inputs (two in joint attention)
    adjacent = False
    joint = False
    opened = False  # the walk passed the norm that opens the block
    for i in before:
        if i <= floor:
            break
        op = canonical(names[name[i]])
        if op in PROJECTION_OPS:
            own = _input(events, i)
            # No shapes recorded: nothing tells the inputs apart, and the walk since the last
            # projection passed only layout ops (anything else stops it while ``inputs`` is empty).
            shapeless = own is None and not inputs
            if start is not None and not shapeless and own not in inputs:
                if own is not None and len(inputs) == 1 and tokens is not None and _joined(own, inputs[0]) == tokens:
                    joint = True
                elif own is None or opened or width is None or (tokens is not None and _rows(own) != tokens):
                    break
                inputs.append(own)
            elif own is not None and not inputs:
                inputs.append(own)
            start, lead, adjacent = i, None, True
        elif start is not None and op in LAYOUT_OPS:
            lead = i if adjacent else lead
        elif op in _PREPARE or op in _QK_NORM:
            if start is not None and (not inputs or op in _BIAS_ONLY):
                break
            opened = opened or _opens_block(events, i, op, width)
            adjacent = False
        else:
            break
    return (lead if lead is not None else start), joint


def _input(events: Events, i: int) -> list[int] | None:
    """A projection's input's dims (``addmm``'s second argument: its first is the bias), if
    recorded."""
    return events.input_dims(i, MATMUL_ARGS.get(events.names[events.name[i]], (0, 1))[0])


def _forward(events: Events, after: list[int], tokens: int | None) -> int | None:
    """The block's output projection after its core (``after``: the core's siblings, nearest
    first), or None. Joint attention (``tokens``: its query tokens, where ``_back`` found two
    streams) ends at the second stream's output projection, whose input's rows are the tokens the
    first one's left: nothing but that count is asked of what lies between (Inductor fuses the
    first stream's residual and norm with whatever fed them)."""
    names, name = events.names, events.name
    for k, i in enumerate(after):
        op = canonical(names[name[i]])
        if op in PROJECTION_OPS:
            first = _rows(_input(events, i))
            if tokens is None or first is None:
                return i
            for j in after[k + 1:k + 1 + _MAX_OUTPUT_GAP]:
                other = canonical(names[name[j]])
                if other in PROJECTION_OPS:
                    return j if _rows(_input(events, j)) == tokens - first else i
            return i
        if op not in _MERGE and not _bookkeeping(op):
            return None
    return None


def _bookkeeping(op: str) -> bool:
    """What a compiled graph's call or the start of a graph capture runs around the model's ops."""
    return op in GRAPH_CAPTURE_BOOKKEEPING_OPS or op.startswith(COMPILE_BOOKKEEPING_PREFIXES)


class _Siblings:
    """The CPU ops that share a parent, in file order: each op's neighbours among them."""

    def __init__(self, parent: np.ndarray, cpu: np.ndarray) -> None:
        ops = np.flatnonzero(cpu)
        self.order = ops[np.argsort(parent[ops], kind="stable")]  # by parent, then file order
        self.parent = parent[self.order]
        self.pos = np.full(parent.size, -1, np.int64)
        self.pos[self.order] = np.arange(self.order.size)

    def before(self, i: int, n: int) -> list[int]:
        k = int(self.pos[i])
        if k < 0:
            return []
        lo = max(k - n, 0)
        same = self.parent[lo:k] == self.parent[k]
        return self.order[lo:k][same][::-1].tolist()

    def after(self, i: int, n: int) -> list[int]:
        k = int(self.pos[i])
        if k < 0:
            return []
        hi = min(k + 1 + n, self.order.size)
        same = self.parent[k + 1:hi] == self.parent[k]
        return self.order[k + 1:hi][same].tolist()
