"""Findings on sparse and compiled attention: masks whose sparsity saved nothing, flex_attention
run eagerly, a BlockMask built in every forward, and torch.compile compiling or breaking in the
profiled steps. Thresholds and reasons are in ``docs/findings.md``; the mask figures come from
``analysis.sparsity``.
"""

from __future__ import annotations

import numpy as np

from tb_attn_plugin.analysis.attribution.query import RuleQuery
from tb_attn_plugin.analysis.common.finding import new_finding
from tb_attn_plugin.analysis.common.spread import median
from tb_attn_plugin.analysis.common.wording import count, duration, layer_list, pct
from tb_attn_plugin.trace.kineto import Kind
from tb_attn_plugin.types.schema import Finding
from tb_attn_plugin.vocab.aten import COMPILE_BOOKKEEPING_PREFIXES, COMPILED_REGION_PREFIX, FLEX_EAGER_OP
from tb_attn_plugin.vocab.backends import Backend
from tb_attn_plugin.vocab.scopes import MODEL_BLOCK_MASK, PHASES

__all__ = ["SPARSE_RULES"]

#: A mask is sparse enough to matter when it keeps less than this share of the pairs...
SPARSE_KEPT = 0.5
#: ...and its sparsity went unused when the layer's core takes at least this share of the time of
#: the same work done densely (measured on the run's dense layers, or the ops' own dense work).
UNUSED_SHARE = 0.8
#: Compiled flex computes whole blocks: a mask whose blocks keep at least half the block grid and
#: this many times its pairs' share saves little of the work, whatever it drops.
COARSE_BLOCKS = 2.0
#: Compile work in the profiled steps is named so by dynamo's timers (``dynamo_timed``).
COMPILE_MARK = "(dynamo_timed)"
_WHY_DENSE: dict[str, str] = {
    Backend.FLEX_EAGER: "flex_attention ran eagerly (its reference path computes every score)",
    Backend.NAIVE: "the mask is applied to full score matrices",
    Backend.SDPA_MATH: "SDPA's math backend computes every score"}


def _sparsity_unused(t: RuleQuery) -> list[Finding]:
    sparse = [x for x in t.s.layers if x.mask is not None and x.mask.kept < SPARSE_KEPT]
    if not sparse:
        return []
    # Dense layers of the same model (Gemma-style global layers) give the time per dense FLOP.
    dense_rate: dict[str, list[float]] = {}
    for x in t.s.layers:
        if x.mask is not None and x.mask.kept >= SPARSE_KEPT and x.mask.work_flops > 0:
            dense_rate.setdefault(t.models.get(x.layer, ""), []).append(x.mask.core_us / x.mask.work_flops)
    rows = []
    for x in sparse:
        m = x.mask
        assert m is not None
        mine = dense_rate.get(t.models.get(x.layer, ""))
        rate = median(mine) if mine else 0.0  # time per FLOP of its model's dense layers
        if m.dense_work:
            rows.append((x.layer, 1.0, "its ops computed every score"))
        elif (x.backend == Backend.FLEX and m.blocks is not None
              and m.blocks >= max(SPARSE_KEPT, COARSE_BLOCKS * m.kept)):
            rows.append((x.layer, m.blocks, f"it keeps {pct(m.blocks)} of the 128×128 blocks flex_attention "
                                            "computes whole: the block size is too coarse for the mask"))
        elif rate > 0 and m.core_us > 0:
            dense_us = rate * m.dense_flops  # the layer's dense work at the dense layers' rate
            share = m.core_us / dense_us
            if share >= UNUSED_SHARE:
                rows.append((x.layer, share, f"it took {pct(share)} of the time its dense work takes at the rate "
                                             f"of the run's dense layers ({duration(dense_us)} per step)"))
    if not rows:
        return []
    layers = [r[0] for r in rows]
    first = t.layers[layers[0]].mask
    assert first is not None
    backend = t.layers[layers[0]].backend
    why = _WHY_DENSE.get(backend, "the kernel computed the blocks that hold any kept pair")
    core_us = sum(m.core_us for x in layers if (m := t.layers[x].mask) is not None)
    return [new_finding(
        "sparsity-unused", "high", "The mask drops most scores but the time did not drop",
        f"The mask {first.spec} keeps {pct(first.kept)} of the (query, key) pairs in {layer_list(layers)}, but "
        f"{rows[0][2]}: {why}. The sparsity is in the meaning, not in the work: the attention core takes "
        f"{duration(core_us)} per step, where a kernel that skipped what the mask drops would do "
        f"{pct(first.kept)} of the arithmetic.",
        "Run the mask through compiled flex_attention (torch.compile(flex_attention) with a BlockMask built once), "
        "check that the block size is fine enough for the mask (BlockMask.sparsity()), and do not rebuild the "
        "BlockMask in every forward.",
        layers=layers, ops=t.backend_evidence(layers), kernels=[], time_us=core_us,
        details={"mask": first.spec, "kept": first.kept, "backend": backend, "dense_share": rows[0][1]})]


def _flex_eager(t: RuleQuery) -> list[Finding]:
    layers = [x.layer for x in t.s.layers if x.backend == Backend.FLEX_EAGER]
    if not layers:
        return []
    ops = t.ops([FLEX_EAGER_OP])
    return [new_finding(
        "flex-eager", "high", "flex_attention ran uncompiled",
        f"{layer_list(layers)} ran flex_attention's eager path (its ops compute every score: "
        f"{', '.join(t.backend_evidence(layers))}): PyTorch's reference implementation, which materializes the "
        "full score matrix and applies the mask to it, so it is slower and larger than dense SDPA rather than "
        "faster.",
        "Call flex_attention through torch.compile (flex = torch.compile(flex_attention), once, at module level). "
        "If it is compiled already, dynamo ran it eagerly: it recompiles for every new mask function or block "
        "mask it has not seen, up to its recompile limit (TORCH_LOGS=recompiles shows why).",
        layers=layers, ops=t.backend_evidence(layers), kernels=[], time_us=t.layers_time(layers),
        details={"calls": int(ops.size)})]


def _cpu_clock(t: RuleQuery) -> str:
    """Said of CPU work (building a mask, compiling) where the trace is judged by device time, whose
    figures stand beside it."""
    return " of CPU time" if t.cuda else ""


def _block_mask_rebuilt(t: RuleQuery) -> list[Finding]:
    ev, a = t.ev, t.a
    ids = ev.name_ids(frozenset({MODEL_BLOCK_MASK}))
    outside = np.isin(ev.name, ids) & t.in_steps
    inside = t.in_steps & a.is_scope & (a.phase == PHASES.index("block_mask"))
    builds = np.flatnonzero(outside | inside)
    if builds.size == 0:
        return []
    per_step = builds.size / t.step_count
    spent = t.per_step(builds)
    # A mask built outside the layers serves them all.
    layers = sorted({int(x) for x in a.layer[builds].tolist() if x >= 0}) or [x.layer for x in t.s.layers]
    return [new_finding(
        "block-mask-rebuilt", "medium", "The BlockMask is built in every forward",
        f"create_block_mask ran {count(per_step, 'time', 'times')} per step, {duration(spent)}{_cpu_clock(t)} per "
        "step: the mask is rebuilt in every forward although it depends only on the sequence length and the mask "
        "function.",
        "Build the BlockMask once per sequence length (at model set-up, or cached by length) and pass it to every "
        "call; Hugging Face rebuilds it per forward unless you pass your own.",
        layers=layers, ops=[MODEL_BLOCK_MASK] if outside.any() else ["block_mask phase"], kernels=[],
        time_us=spent, details={"builds_per_step": per_step})]


def _recompiles(t: RuleQuery) -> list[Finding]:
    ev = t.ev
    marks = np.array([COMPILE_MARK in n for n in ev.names], np.bool_)
    hits = np.flatnonzero(marks[ev.name] & t.in_steps & (ev.kind != Kind.MODULE))
    if hits.size == 0:
        return []
    outer = t.outermost(hits)
    spent = t.per_step(outer)
    return [new_finding(
        "recompiles", "high", "torch.compile compiled inside the profiled steps",
        f"Dynamo compiled during the profiled steps ({duration(spent)}{_cpu_clock(t)} per step, "
        f"{count(outer.size, 'compile', 'compiles')}): "
        "shapes, dtypes or guards changed after the warm-up, and the steps' times include compilation.",
        "Warm up with the shapes of the profiled steps, mark varying dimensions dynamic "
        "(torch._dynamo.mark_dynamic), or find the failing guard with TORCH_LOGS=recompiles.",
        layers=sorted({int(x) for x in t.a.layer[outer].tolist() if x >= 0}), ops=t.names_by_time(outer),
        kernels=[], time_us=spent, details={"compiles": int(outer.size)})]


def _graph_break(t: RuleQuery) -> list[Finding]:
    config = t.meta.get("config")
    if not (isinstance(config, dict) and config.get("compile")):
        return []
    ev, a = t.ev, t.a
    region = np.array([n.startswith(COMPILED_REGION_PREFIX) for n in ev.names], np.bool_)[ev.name]
    bookkeeping = np.array([n.startswith(COMPILE_BOOKKEEPING_PREFIXES) for n in ev.names], np.bool_)[ev.name]
    in_region = np.zeros(len(ev), np.bool_)
    for i in np.flatnonzero(region & t.in_steps).tolist():
        in_region[i:t.subtree_end(i)] = True
    rows = []
    for x in t.s.layers:
        ops = np.flatnonzero(t.fwd & (a.layer == x.layer) & (ev.kind == Kind.CPU_OP) & t.top_op & ~bookkeeping)
        eager = ops[~in_region[ops]]
        if ops.size and eager.size:
            rows.append((x.layer, eager))
    if not rows:
        return []
    layers = [r[0] for r in rows]
    eager = np.concatenate([r[1] for r in rows])
    return [new_finding(
        "graph-break", "medium", "Attention ran outside the compiled region",
        f"The run asked for --compile, but in {layer_list(layers)} "
        f"{count(eager.size / t.step_count, 'top-level op', 'top-level ops')} per step ran eagerly, outside any "
        "compiled region: a graph break, or the recompile limit reached.",
        "Find the break with TORCH_LOGS=graph_breaks (or torch._dynamo.explain), and raise "
        "torch._dynamo.config.cache_size_limit if each layer recompiles.",
        layers=layers, ops=t.names_by_time(eager), kernels=[], time_us=t.per_step(eager),
        details={"eager_ops_per_step": eager.size / t.step_count})]


SPARSE_RULES = (_sparsity_unused, _flex_eager, _block_mask_rebuilt, _recompiles, _graph_break)
