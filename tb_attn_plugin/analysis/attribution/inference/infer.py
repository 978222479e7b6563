"""Finding attention in traces that lack our scopes, marked as inferred.

Three sources, best first:

1. Attention modules' calls (``analysis.module_calls``): ``nn.Module`` events (``with_modules`` /
   ``with_stack``) of classes whose name ends in ``Attention``, and labels other tools write
   around a module's forward that name an attention module (PyTorch Lightning's
   ``[pl][module]...LlamaAttention: model.layers.3.self_attn``, a label holding such a module
   path); the outermost one of a nest: one block per module instance, or per module path. Cores
   found by 2 and 3 outside every such module are blocks too (a torch.compile'd transformer's SDPA
   calls, its modules compiled away, beside its text encoders' modules); a core inside one is its.
2. Otherwise, every top-level SDPA call is a block (a backend's own SDPA op, such as
   ``_scaled_dot_product_flash_attention``, when no ``scaled_dot_product_attention`` encloses
   it, as torch.compile calls it), and so is every serving engine's attention op
   (``serving.SERVING_CORE_OPS``: vLLM's ``unified_attention_with_output``, SGLang's profiler ranges),
   from the KV-cache write just before it (``serving.serving_cores``).
3. Otherwise, ``matmul -> softmax -> matmul`` on one thread is a block. The first matmul may be
   integer (``_int_mm``: int8 attention's q·kᵀ, one call per head), and then the block starts
   at the first of the integer GEMMs just before the softmax.
4. Otherwise, compiled attention: the calls of the compiled frame (``Torch-Compiled Region:
   <frame>/<n>``) that runs most often per step, when it runs at least twice per step. A model
   that compiles its attention (``torch.compile(flex_attention)``, or each block) calls that one
   compiled frame once per layer; a model compiled whole shows one region per step, which says
   nothing about attention, and is left alone. Each call is a block with one ``compiled`` phase:
   the region fuses its phases, and its kernels are the region's.

Layers are numbered by ``analysis.numbering``: a module instance (or path) is a layer, and a block found by
its ops is the k-th of the outermost module or compiled region call that holds it (of its step,
when none does). Blocks found by 2 and 3 are widened from their core to their projections
(``extent``), never into a module's block. A layer any of whose blocks found no projection on a
side is *core only* (``Inferred.core_only``): its figures cover the core alone, or leave out the
side it missed (``Inferred.missing`` says which). Blocks found by 1 are whole modules, and blocks
found by 4 whole compiled frames: the frame is what the model compiled (each block, or
``flex_attention`` alone), its ops are fused, and it is core only where no projection op
(Inductor's extern ``mm``/``addmm``) runs in it.
Inside a block, phases come from each op's role in the block (``analysis.roles``): projections
before the core, rotary embeddings, the KV cache, q·kᵀ, scale, mask, softmax, dropout, attn·v,
projections after. The result is a list of synthetic
scopes that ``attribute`` treats like real ones.

Layers found are numbered below ``scopes.MAX_LAYERS``, like written ones: blocks numbered past
it (more attention modules, or more SDPA calls in one step, than a model has layers) are not
analyzed, and counted under ``TOO_MANY_BLOCKS`` in the caller's diagnostics.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from tb_attn_plugin.analysis.attribution.inference.extent import (
    MISSING_AFTER,
    MISSING_BEFORE,
    MISSING_BOTH,
    Extent,
    widen,
)
from tb_attn_plugin.analysis.attribution.inference.module_calls import attention_calls
from tb_attn_plugin.analysis.attribution.inference.numbering import Found, number_blocks
from tb_attn_plugin.analysis.attribution.inference.serving import serving_cores
from tb_attn_plugin.analysis.attribution.nesting import nearest_marked_ancestor
from tb_attn_plugin.analysis.attribution.query import ancestors
from tb_attn_plugin.analysis.attribution.roles import SyntheticScope, assign_roles, phase_spans, span_scope
from tb_attn_plugin.analysis.ops.opnames import is_serving_core
from tb_attn_plugin.trace.events import Events
from tb_attn_plugin.trace.kineto import Kind
from tb_attn_plugin.vocab.aten import (
    COMPILED_REGION_PREFIX,
    FUSED_BLOCK_OPS,
    INT_MM_OP,
    MATMUL_ARGS,
    MATMUL_OPS,
    PROJECTION_OPS,
    SDPA_FORWARD,
    SDPA_OPS,
    SOFTMAX_OPS,
)
from tb_attn_plugin.vocab.libraries import ATTENTION_CORE_OPS
from tb_attn_plugin.vocab.scopes import MAX_LAYERS, format_scope

__all__ = ["TOO_MANY_BLOCKS", "Inferred", "SyntheticScope", "infer_scopes"]

_PAD = 1e-4  # synthetic scopes are padded so that they sort before the ops they wrap
TOO_MANY_BLOCKS = f"attention blocks found past {MAX_LAYERS} layers (not analyzed)"
#: Why a compiled frame is its core alone.
_NO_PROJECTION_COMPILED = "no projection op (mm, addmm) runs in the compiled frame"


class Inferred(NamedTuple):
    """The synthetic scopes of the attention found, and the layers found by their core alone."""

    scopes: list[SyntheticScope]
    core_only: frozenset[int]  # layers with a block that ``extent.widen`` found no projection around, on a side
    missing: dict[int, str]  # each core-only layer: what its blocks miss, in words (``extent.MISSING_*``)


def infer_scopes(events: Events, parent: np.ndarray, backward: np.ndarray, step: np.ndarray, *,
                 diagnostics: dict[str, int] | None = None) -> Inferred:
    """Synthetic block and phase scopes for the attention found in an unscoped trace; blocks
    past ``MAX_LAYERS`` are counted in ``diagnostics``."""
    names = events.names
    kind = events.kind
    name = events.name
    forward = ~backward
    calls = attention_calls(events, parent, forward)
    found: list[Found] = []
    if calls.every:
        found = _module_blocks(events, parent, calls.outer)
        # Attention no such module holds (a compiled transformer's SDPA calls next to a text
        # encoder's modules): found by its ops, as in a trace without modules.
        in_module = np.zeros(len(events), np.bool_)
        in_module[calls.every] = True
        inside = nearest_marked_ancestor(parent, in_module)
        spans = [s for s in _blocks_from_ops(events, parent, forward) if inside[s[0]] < 0]
        found += _op_found(events, spans, widen(events, parent, spans), found)
    else:
        spans = _blocks_from_ops(events, parent, forward)
        wide = widen(events, parent, spans)
        if wide:
            found = _op_found(events, spans, wide, [])
        else:  # each call of the compiled frame is a block, its own extent
            found = [Found(i, i, i, "", not _holds_projection(events, i), _NO_PROJECTION_COMPILED)
                     for i, _ in _compiled_blocks(events, parent, forward, step)]
    layers = number_blocks(events, parent, step, found, backward=backward)
    blocks = sorted((b.first, b.last, layer, b.module, b.core_only, b.missing)
                    for b, layer in zip(found, layers, strict=True))
    kept = [b for b in blocks if b[2] < MAX_LAYERS]
    if len(kept) < len(blocks) and diagnostics is not None:
        diagnostics[TOO_MANY_BLOCKS] = diagnostics.get(TOO_MANY_BLOCKS, 0) + len(blocks) - len(kept)
    out: list[SyntheticScope] = []
    cpu_op = kind == Kind.CPU_OP
    cpu_above = nearest_marked_ancestor(parent, cpu_op) if kept else parent
    compiled = _region_mask(events)
    for first, last, layer, module, _, _ in kept:
        block = _scope(events, first, format_scope(layer, module=module or None), pad=2 * _PAD, end=last)
        if first == last and compiled[events.name[first]] and not module:
            out += [block, _scope(events, first, format_scope(layer, phase="compiled"))]
            continue
        # A block of one op is read through its own ops (a module's, the fused block op's, the SDPA
        # op's call of its backend), but for a backend's own SDPA op, which torch.compile calls
        # with no ``scaled_dot_product_attention`` around it, and a serving engine's core op: its
        # ops are its kernel's bookkeeping (layout, empty outputs), and the op is the sdpa phase whole.
        lo = first + 1 if first == last and names[name[first]] not in SDPA_FORWARD \
            and not is_serving_core(names[name[first]]) and names[name[first]] not in ATTENTION_CORE_OPS else first
        phases = _phases(events, _top_ops(cpu_op, cpu_above, lo, _extent(events, last)), layer, parent)
        out += [_enclosing(block, phases), *phases]
    missing: dict[int, str] = {}
    for b in kept:
        if b[4]:
            missing.setdefault(b[2], b[5])
    return Inferred(out, frozenset(missing), missing)


def _module_blocks(events: Events, parent: np.ndarray, modules: list[tuple[int, str]]) -> list[Found]:
    """Blocks of attention modules' calls ``(event, module)``. A module with no projection
    inside is the core alone (flash_attn's ``MHA`` keeps its ``Wqkv`` and ``out_proj`` outside the
    ``SelfAttention`` it calls): its ops are widened to the projections around them, as a core
    found by its ops is (``extent.widen``)."""
    cpu_op = events.kind == Kind.CPU_OP
    cpu_above = nearest_marked_ancestor(parent, cpu_op)
    projection = np.isin(events.name, events.name_ids(PROJECTION_OPS))
    out: list[Found] = []
    cores: list[tuple[int, int, int]] = []  # (index into out, first op, last op)
    for i, inst in modules:
        end = _extent(events, i)
        ops = _top_ops(cpu_op, cpu_above, i + 1, end)
        if ops and not (projection[i + 1:end] & cpu_op[i + 1:end]).any():
            cores.append((len(out), ops[0], ops[-1]))
        out.append(Found(i, i, i, inst, False))
    wide = widen(events, parent, [(first, last) for _, first, last in cores])
    for (k, _, _), (first, last, core_only, missing) in zip(cores, wide, strict=True):
        out[k] = out[k]._replace(first=first, last=last, core_only=core_only, missing=missing)
    return out


def _op_found(events: Events, cores: list[tuple[int, int]], wide: list[Extent], modules: list[Found]) -> list[Found]:
    """Blocks found by their ops: each core ``cores[k]`` widened to ``wide[k]``. A side widened
    into a module block (``modules``) is the core's again: the projection there is the module's.
    A fused block op (nn.MultiheadAttention's fast path) holds its projections: never core only."""
    if not cores:
        return []
    edge = np.zeros(len(events) + 1, np.int64)
    for b in modules:
        edge[b.first] += 1
        edge[max(_extent(events, b.anchor), _extent(events, b.last))] -= 1
    # taken[j]: how many events before event j lie in a module block
    taken = np.concatenate(([0], np.cumsum(np.cumsum(edge[:-1]) > 0)))
    names, name = events.names, events.name
    out = []
    for (core_first, core_last), (first, last, _, _) in zip(cores, wide, strict=True):
        before = first == core_first or taken[core_first] > taken[first]
        after = last == core_last or taken[last + 1] > taken[core_last + 1]
        first, last = (core_first if before else first), (core_last if after else last)
        missing = MISSING_BOTH if before and after else MISSING_BEFORE if before else MISSING_AFTER if after else ""
        if names[name[first]] in FUSED_BLOCK_OPS:
            missing = ""
        out.append(Found(core_first, first, last, "", bool(missing), missing))
    return out


def _enclosing(block: SyntheticScope, phases: list[SyntheticScope]) -> SyntheticScope:
    """The block's scope widened to enclose its phase scopes. The first phase takes in the time
    before its first op, back to the end of the op before it (``roles.span_scope``), and so starts
    before the block's first op: a block scope that started at that op would cut the phase scope
    off from it, and the op (q·kᵀ, when an eager block starts with it) would be in no phase."""
    if not phases:
        return block
    start = min(block.ts, min(p.ts for p in phases) - _PAD)
    stop = max(block.ts + block.dur, max(p.ts + p.dur for p in phases) + _PAD)
    return SyntheticScope(block.track, start, stop - start, block.name)


def _scope(events: Events, i: int, name: str, *, pad: float = _PAD, end: int | None = None) -> SyntheticScope:
    start = float(events.ts[i])
    last = i if end is None else end
    stop = float(events.ts[last] + events.dur[last])
    return SyntheticScope(int(events.track[i]), start - pad, stop - start + 2 * pad, name)


def _top_ops(cpu_op: np.ndarray, cpu_above: np.ndarray, lo: int, hi: int) -> list[int]:
    """CPU ops in [lo, hi) with no CPU-op ancestor in that range (``cpu_above``: each event's
    nearest CPU-op ancestor). A block's range starts at its first op, or just after the module
    event that encloses it, so an ancestor outside the range is above the block."""
    inside = np.flatnonzero(cpu_op[lo:hi]) + lo
    return inside[cpu_above[inside] < lo].tolist()


def _holds_projection(events: Events, i: int) -> bool:
    """Whether a projection op (``linear``, ``addmm``, ``mm``: Inductor calls them as extern
    kernels) runs inside event ``i``: a compiled frame that holds none compiled the core alone."""
    end = _extent(events, i)
    inside = events.name[i + 1:end][events.kind[i + 1:end] == Kind.CPU_OP]
    return bool(np.isin(inside, events.name_ids(PROJECTION_OPS)).any())


def _extent(events: Events, i: int) -> int:
    """One past the last event nested in (or starting within) event ``i`` on its track."""
    end = events.ts[i] + events.dur[i] + 1e-3
    j = i + 1
    n = len(events)
    while j < n and events.track[j] == events.track[i] and events.ts[j] <= end:
        j += 1
    return j


def _phases(events: Events, ops: list[int], layer: int, parent: np.ndarray) -> list[SyntheticScope]:
    """Phase scopes over the block's ops, placed by their roles, as ``roles.role_scopes`` places
    them in scoped blocks (runs of siblings merged, the time before each included)."""
    given: list[str | None] = [None] * len(ops)
    assigned = assign_roles([events.names[events.name[j]] for j in ops], given)
    return [span_scope(events, first, last, format_scope(layer, phase=phase), parent)
            for first, last, phase in phase_spans(ops, given, assigned, parent)]


def _blocks_from_ops(events: Events, parent: np.ndarray, forward: np.ndarray) -> list[tuple[int, int]]:
    """(first, last) event of each block, in file order: an op that runs a whole block
    (``FUSED_BLOCK_OPS``: nn.MultiheadAttention's fast path, projections included), then the cores
    outside such ops (``_cores``)."""
    cpu = (events.kind == Kind.CPU_OP) & forward
    fused_ids = [i for i, n in enumerate(events.names) if n in FUSED_BLOCK_OPS]
    fused = [(i, i) for i in np.flatnonzero(cpu & np.isin(events.name, fused_ids)).tolist()
             if not _has_ancestor(events, parent, i, FUSED_BLOCK_OPS)] if fused_ids else []
    cores = [span for span in _cores(events, parent, forward)
             if not (fused and _has_ancestor(events, parent, span[0], FUSED_BLOCK_OPS))]
    return sorted(fused + cores)


def _cores(events: Events, parent: np.ndarray, forward: np.ndarray) -> list[tuple[int, int]]:
    """(first, last) event of each core: a serving engine's attention op (``serving_cores``), a
    top-level SDPA op outside one, or matmul -> softmax -> matmul."""
    names = events.names
    name = events.name
    cpu = (events.kind == Kind.CPU_OP) & forward
    serving = serving_cores(events, parent, cpu)
    sdpa_ids = [i for i, n in enumerate(names) if n in SDPA_OPS or n in ATTENTION_CORE_OPS]  # a library's core too
    if sdpa_ids or serving:
        served = {i for i, n in enumerate(names) if is_serving_core(n)}
        sdpa = [(i, i) for i in np.flatnonzero(cpu & np.isin(name, sdpa_ids)).tolist()
                if not _has_ancestor(events, parent, i, SDPA_OPS)
                and not (served and any(int(name[p]) in served for p in ancestors(parent, i)))] if sdpa_ids else []
        return sorted(serving + sdpa)
    soft_ids = [i for i, n in enumerate(names) if n in SOFTMAX_OPS]
    mm_ids = [i for i, n in enumerate(names) if n in MATMUL_OPS or n == INT_MM_OP]
    int_id = names.index(INT_MM_OP) if INT_MM_OP in names else -1
    if not soft_ids or not mm_ids:
        return []
    softmaxes = [s for s in np.flatnonzero(cpu & np.isin(name, soft_ids)).tolist()
                 if not _has_ancestor(events, parent, s, SOFTMAX_OPS)]
    mms = [j for j in np.flatnonzero(cpu & np.isin(name, mm_ids)).tolist()
           if not _has_ancestor(events, parent, j, MATMUL_OPS)]
    mm_arr = np.array(mms, dtype=np.int64)
    out = []
    used = -1
    for s in softmaxes:
        # Events are sorted by track then time, so the neighbours in index order are the
        # matmuls just before and just after the softmax on the same thread.
        k = int(np.searchsorted(mm_arr, s))
        if k == 0 or k >= len(mms):
            continue
        before, after = mms[k - 1], mms[k]
        if before <= used or events.track[before] != events.track[s] or events.track[after] != events.track[s]:
            continue
        if not _looks_like_attention(events, before, s, after):
            continue
        first, j = before, k - 1
        while (j > 0 and name[mms[j - 1]] == int_id and name[first] == int_id and mms[j - 1] > used
               and events.track[mms[j - 1]] == events.track[s] and before - mms[j - 1] <= _MAX_GAP_EVENTS):
            j -= 1
            first = mms[j]
        out.append((first, after))
        used = after
    return out


def _region_mask(events: Events) -> np.ndarray:
    """Per name id: whether it is a compiled region's event."""
    return np.array([n.startswith(COMPILED_REGION_PREFIX) for n in events.names] or [False], np.bool_)


def _compiled_blocks(events: Events, parent: np.ndarray, forward: np.ndarray,
                     step: np.ndarray) -> list[tuple[int, int]]:
    """The calls of the compiled frame that runs most often per step (at least twice), outermost
    only."""
    names = events.names
    frames: dict[int, str] = {}
    for i, n in enumerate(names):
        if n.startswith(COMPILED_REGION_PREFIX):
            frames[i] = n[len(COMPILED_REGION_PREFIX):].lstrip(": ").split("/", 1)[0]
    if not frames:
        return []
    cpu = (events.kind == Kind.CPU_OP) & forward
    calls = [i for i in np.flatnonzero(cpu & np.isin(events.name, list(frames))).tolist()
             if not any(events.name[p] in frames for p in ancestors(parent, i))]
    by_frame: dict[str, list[int]] = {}
    for i in calls:
        by_frame.setdefault(frames[int(events.name[i])], []).append(i)
    if not by_frame:
        return []
    steps = max(len({int(step[i]) for i in calls}), 1)
    chosen = max(by_frame.items(), key=lambda kv: (len(kv[1]), kv[0]))[1]
    if len(chosen) < 2 * steps:
        return []
    return [(i, i) for i in chosen]


_MAX_GAP_EVENTS = 64  # q·kᵀ, softmax and attn·v sit close together; this bounds the search


def _operands(events: Events, i: int) -> tuple[int, int]:
    """Where matmul ``i``'s two operands are among its inputs (einsum: as for matmul)."""
    return MATMUL_ARGS.get(events.names[events.name[i]], (0, 1))


def _looks_like_attention(events: Events, first: int, softmax: int, second: int) -> bool:
    """Scores of shape (..., Sq, Sk) from q·kᵀ go through softmax into probs·v."""
    if second - first > _MAX_GAP_EVENTS:
        return False
    first_a, first_b = _operands(events, first)
    a, b = events.input_dims(first, first_a), events.input_dims(first, first_b)
    scores = events.input_dims(softmax, 0)
    probs = events.input_dims(second, _operands(events, second)[0])
    if a is None or b is None or scores is None or probs is None:
        return True  # no shapes recorded: proximity is all we have
    if len(scores) < 2 or len(a) < 2 or len(b) < 2:
        return False
    return scores[-2:] == [a[-2], b[-1]] and probs[-2:] == scores[-2:]


def _has_ancestor(events: Events, parent: np.ndarray, i: int, wanted: frozenset[str]) -> bool:
    return any(events.names[events.name[p]] in wanted for p in ancestors(parent, i))
