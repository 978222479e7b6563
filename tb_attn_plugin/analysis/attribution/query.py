"""Questions that several analyses ask of one attributed trace, answered once.

``TraceQuery`` is what the summary, the views and the findings share: the profiled steps, which
events lie in them, each op's self time, which ops are top-level, the device's work, the
dominant memory device, and walks over the nesting. ``RuleQuery`` adds what the findings'
rules ask on top of a summary: forward attention ops within the steps, the kernels they
launch, per-step figures and evidence. Answers are computed on first use and kept for the
query's life (one summary, one view request), never on the trace itself.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from functools import cached_property

import numpy as np
import numpy.typing as npt

from tb_attn_plugin.analysis.attribution.attribute import Attribution
from tb_attn_plugin.analysis.attribution.inference.numbering import layer_models
from tb_attn_plugin.analysis.attribution.nesting import EPS_US, nearest_marked_ancestor
from tb_attn_plugin.analysis.attribution.scores import allocator_sizes, score_allocs, sxs_sizes
from tb_attn_plugin.analysis.common import wording
from tb_attn_plugin.analysis.common.bounds import MAX_EVIDENCE_NAMES as MAX_NAMES
from tb_attn_plugin.analysis.common.bounds import clip
from tb_attn_plugin.analysis.ops.flops import elem_bytes
from tb_attn_plugin.trace.events import Events
from tb_attn_plugin.trace.kineto import DEVICE_KINDS, STEP_PREFIX, Kind
from tb_attn_plugin.types.schema import WorkerSummary
from tb_attn_plugin.vocab.aten import EMBEDDING_OP, FUSED_BLOCK_OPS, LINEAR_OP, SDPA_OPS
from tb_attn_plugin.vocab.scopes import PHASES

__all__ = ["HALF_DTYPES", "MAX_NAMES", "RuleQuery", "TraceQuery", "ancestors", "dtype_name"]

I64 = npt.NDArray[np.int64]
B = npt.NDArray[np.bool_]

#: Profiler ``Input type`` strings and run-metadata dtypes -> one name per dtype.
_DTYPES = {"c10::BFloat16": "bfloat16", "c10::Half": "float16", "float": "float32", "double": "float64",
           "bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "fp16": "float16", "half": "float16",
           "float32": "float32", "fp32": "float32"}
HALF_DTYPES = ("bfloat16", "float16")


def dtype_name(spelling: str) -> str | None:
    """``'bfloat16'`` for ``'c10::BFloat16'``, ``'bf16'``...; None for a dtype we do not name."""
    return _DTYPES.get(spelling)


def ancestors(parent: np.ndarray, i: int) -> Iterator[int]:
    """The events enclosing event ``i``, innermost first (``parent``: from the attribution)."""
    p = int(parent[i])
    while p >= 0:
        yield p
        p = int(parent[p])


class TraceQuery:
    """One attributed trace's shared answers. ``ProfilerStep#N`` events with a number are its
    steps; a trace without any counts as one step that holds everything."""

    def __init__(self, events: Events, attr: Attribution) -> None:
        self.ev, self.a = events, attr

    @cached_property
    def step_events(self) -> I64:
        """The ``ProfilerStep#N`` events, in trace order."""
        ev = self.ev
        named = np.array([n.startswith(STEP_PREFIX) for n in ev.names], np.bool_)[ev.name]
        return np.flatnonzero(named & ((ev.kind == Kind.ANNOTATION) | (ev.kind == Kind.CPU_OP))
                              & (self.a.step >= 0)).astype(np.int64)

    @cached_property
    def steps(self) -> list[int]:
        """The step numbers, ascending."""
        return sorted(set(self.a.step[self.step_events].tolist()))

    @property
    def step_count(self) -> int:
        """What per-step means divide by."""
        return max(1, len(self.steps))

    @cached_property
    def in_steps(self) -> B:
        return self.a.step >= 0 if self.steps else np.ones(len(self.ev), np.bool_)

    @cached_property
    def mem_in_steps(self) -> B:
        return self.a.mem_step >= 0 if self.steps else np.ones(len(self.ev.mem_ts), np.bool_)

    @cached_property
    def mem_ok(self) -> B:
        """Memory events on the memory device (``mem_device``), or on none named: the ones the
        figures of allocated bytes count."""
        return (self.ev.mem_device_type == self.mem_device) | (self.ev.mem_device_type < 0)

    @cached_property
    def on_device(self) -> B:
        """Events on a device's timeline, annotations projected there included."""
        return np.isin(self.ev.kind, DEVICE_KINDS)

    @cached_property
    def device_work(self) -> B:
        """The device's own work: kernels, memcpy and memset."""
        return self.on_device & (self.ev.kind != Kind.GPU_ANNOTATION)

    @cached_property
    def self_us(self) -> npt.NDArray[np.float64]:
        """Each CPU op's time outside the ops nested in it (0 for other events). A ``record_function``
        range between an op and the ops it calls (torch.compile's ``## Call CompiledFxGraph`` inside
        its ``Torch-Compiled Region``, nn.MultiheadAttention's fast path) does not hide them: counted
        twice, a compiled block's self time was 1.6x its wall time, the fast path's "other" 6x. The
        drill-down's self time is this one."""
        ev = self.ev
        cpu_op = ev.kind == Kind.CPU_OP
        up = nearest_marked_ancestor(self.a.parent, cpu_op)  # each event's nearest enclosing op
        inner = np.flatnonzero(cpu_op & (up >= 0))
        nested = np.zeros(len(ev), np.float64)
        np.add.at(nested, up[inner], ev.dur[inner])
        return np.where(cpu_op, np.maximum(ev.dur - nested, 0.0), 0.0)

    @cached_property
    def top_op(self) -> B:
        """CPU ops that no other CPU op encloses."""
        ev, a = self.ev, self.a
        parent_kind = np.where(a.parent >= 0, ev.kind[np.maximum(a.parent, 0)], -1)
        return (ev.kind == Kind.CPU_OP) & (parent_kind != Kind.CPU_OP)

    @cached_property
    def mem_device(self) -> int:
        """The memory device type most memory events are on: any device's but the CPU's (1 is
        CUDA, 6 is HIP in ROCm traces), else 0, the CPU."""
        types = self.ev.mem_device_type[self.ev.mem_device_type > 0]
        return int(np.bincount(types).argmax()) if types.size else 0

    def name(self, i: int) -> str:
        return self.ev.names[int(self.ev.name[i])]

    def ancestors(self, i: int) -> Iterator[int]:
        return ancestors(self.a.parent, i)

    def outermost(self, idx: I64) -> I64:
        """The events of ``idx`` that no other event of ``idx`` encloses."""
        chosen = set(idx.tolist())
        return np.array([i for i in idx.tolist() if not any(p in chosen for p in self.ancestors(i))], np.int64)

    def inside(self, i: int, names: frozenset[str]) -> bool:
        """Whether an event named in ``names`` encloses event ``i``."""
        return any(self.name(p) in names for p in self.ancestors(i))

    def top_level(self, i: int) -> int:
        """The outermost CPU op enclosing op ``i`` (``i`` itself when none does)."""
        top = i
        for p in self.ancestors(i):
            if self.ev.kind[p] == Kind.CPU_OP:
                top = p
        return top

    def subtree_end(self, i: int) -> int:
        """One past the last event nested in event ``i`` (events are sorted by track, start, longest first)."""
        ev = self.ev
        hi = int(np.searchsorted(ev.track, ev.track[i], side="right"))
        return i + 1 + int(np.searchsorted(ev.ts[i + 1:hi], ev.ts[i] + ev.dur[i] - EPS_US, side="left"))

    def children(self, calls: I64) -> I64:
        """The CPU ops directly inside each of ``calls`` (scopes between them and the call, such as
        the phases ``analysis.roles`` places inside a fused block op, do not count)."""
        ev, parent = self.ev, self.a.parent
        out = []
        for i in calls.tolist():
            for j in range(i + 1, self.subtree_end(i)):
                if ev.kind[j] != Kind.CPU_OP:
                    continue
                p = int(parent[j])
                while p != i and p >= 0 and self.a.is_scope[p]:
                    p = int(parent[p])
                if p == i:
                    out.append(j)
        return np.array(out, np.int64)

    def dims(self, i: int, arg: int = 0) -> list[int] | None:
        """Input ``arg``'s sizes, where recorded and believable."""
        sid = self.a.shape(self.ev, i)  # -1 also where the shapes claim an impossible tensor
        if sid < 0:
            return None
        d = self.ev.shapes[sid].dims
        if arg >= len(d) or not isinstance(d[arg], list) or not all(isinstance(x, int) for x in d[arg]):
            return None
        return [int(x) for x in d[arg]]

    def types(self, i: int) -> tuple[str, ...]:
        """The inputs' ``Input type`` strings, where recorded."""
        sid = int(self.ev.shape[i])
        return self.ev.shapes[sid].types if sid >= 0 else ()

    def nbytes(self, i: int) -> int:
        """Bytes of the first input (0 where its size or type is not recorded)."""
        d, types = self.dims(i), self.types(i)
        return int(np.prod(d, dtype=np.int64)) * elem_bytes(types[0]) if d is not None and types else 0


#: Ops that run the whole attention core: what allocates scores is one of their own ops.
_CORE_OPS = SDPA_OPS | FUSED_BLOCK_OPS


class RuleQuery(TraceQuery):
    """What the findings' rules share: forward attention ops within the steps, the device work
    they launch, and per-step figures, next to the summary and the run metadata."""

    def __init__(self, events: Events, attr: Attribution, summary: WorkerSummary, meta: dict[str, object]) -> None:
        super().__init__(events, attr)
        self.s, self.meta = summary, meta
        self.fwd = (attr.layer >= 0) & ~attr.backward & self.in_steps
        self.layers = {layer.layer: layer for layer in summary.layers}
        self.cuda = summary.device == "cuda"
        runtime = events.kind == Kind.RUNTIME
        self.runtime_corr = np.unique(events.corr[runtime & (events.corr >= 0)])

    @cached_property
    def models(self) -> dict[int, str]:
        """Each layer's model (``numbering.layer_models``): the findings that compare layers with
        each other compare a model's layers."""
        return layer_models(self.ev, self.a)

    def by_model(self, layers: Iterable[int]) -> list[list[int]]:
        """These layers grouped by model, each group sorted, the groups in the order of their
        first layers."""
        groups: dict[str, list[int]] = {}
        for x in sorted(layers):
            groups.setdefault(self.models.get(x, ""), []).append(x)
        return list(groups.values())

    def model_name(self, layers: list[int]) -> str:
        """The model of these layers (of one model), where the trace holds several; else ""."""
        return self.models.get(layers[0], "") if layers and len(set(self.models.values())) > 1 else ""

    @cached_property
    def bias_lookups(self) -> I64:
        """Lookups of a learned relative position bias (T5's): an ``embedding`` inside a block indexed
        by a 2-D (query, key) table of position buckets. A token embedding is never inside one."""
        return np.array([i for i in self.ops({EMBEDDING_OP}).tolist() if (d := self.dims(i, 1)) is not None
                         and len(d) == 2], np.int64)

    def looks_up_bias(self, layers: Iterable[int]) -> bool:
        """Whether the model of these layers looks up a relative position bias (in any of its layers:
        T5 looks it up in each stack's first block and hands it to the others)."""
        models = {self.models.get(x, "") for x in layers}
        return any(self.models.get(int(x), "") in models for x in self.a.layer[self.bias_lookups].tolist())

    def ops(self, names: Iterable[str], phase: str | None = None) -> I64:
        """Forward attention CPU ops with these names (in one phase), in trace order."""
        ids = self.ev.name_ids(frozenset(names))
        sel = self.fwd & (self.ev.kind == Kind.CPU_OP) & np.isin(self.ev.name, ids)
        if phase is not None:
            sel &= self.a.phase == PHASES.index(phase)
        return np.flatnonzero(sel).astype(np.int64)

    def named_device(self, needle: str, kind: Kind | None = None) -> I64:
        """Forward attention device work whose name contains ``needle``."""
        hits = np.array([needle in n for n in self.ev.names], np.bool_)
        sel = self.fwd & self.device_work & hits[self.ev.name]
        return np.flatnonzero(sel if kind is None else sel & (self.ev.kind == kind)).astype(np.int64)

    def launched(self, idx: I64) -> I64:
        """Device work launched from inside these CPU events."""
        ev = self.ev
        corr: set[int] = set()
        ext: set[int] = set()
        for i in idx.tolist():
            sub = slice(i, self.subtree_end(i))
            kind = ev.kind[sub]
            corr.update(ev.corr[sub][(kind == Kind.RUNTIME) & (ev.corr[sub] >= 0)].tolist())
            ext.update(ev.ext[sub][(kind == Kind.CPU_OP) & (ev.ext[sub] >= 0)].tolist())
        # As in attribution: the launching runtime call decides; the External id only where there is none.
        dev = np.flatnonzero(self.device_work)
        by_runtime = np.isin(ev.corr[dev], self.runtime_corr)
        hit = np.where(by_runtime, np.isin(ev.corr[dev], list(corr)), np.isin(ev.ext[dev], list(ext)))
        return dev[hit].astype(np.int64)

    def instances(self, layers: Iterable[int]) -> float:
        """Block calls of these layers in all steps together."""
        return max(sum(self.layers[layer].calls for layer in layers) * self.step_count, 1.0)

    def layers_of(self, *idx: I64) -> list[int]:
        return sorted({int(x) for i in idx for x in self.a.layer[i].tolist()})

    def names_by_time(self, idx: I64) -> list[str]:
        """The names of these events, the longest in total first (at most ``MAX_NAMES``)."""
        totals: dict[str, float] = {}
        for i in idx.tolist():
            totals[self.name(i)] = totals.get(self.name(i), 0.0) + float(self.ev.dur[i])
        return [clip(n) for n, _ in sorted(totals.items(), key=lambda kv: (-kv[1], kv[0]))[:MAX_NAMES]]

    def per_step(self, idx: I64) -> float:
        return float(self.ev.dur[idx].sum()) / self.step_count

    def time_of(self, ops: I64, device: I64) -> float:
        """Time per step: device time where the trace has any, else the ops' CPU time."""
        return self.per_step(device) if self.cuda else self.per_step(ops)

    def time_text(self, ops: I64, device: I64) -> str:
        """'X per step', or on a GPU trace 'X of device time and Y of CPU time per step'."""
        cpu = wording.duration(self.per_step(ops))
        if not self.cuda:
            return f"{cpu} per step"
        return f"{wording.duration(self.per_step(device))} of device time and {cpu} of CPU time per step"

    def layers_time(self, layers: list[int]) -> float:
        """These layers' forward time per step, from the summary (device time on GPU traces)."""
        return sum(self.layers[x].device_us if self.cuda else self.layers[x].cpu_us for x in layers)

    def backend_evidence(self, layers: list[int]) -> list[str]:
        """The names that showed these layers' backends, in order, once each."""
        return list(dict.fromkeys(n for x in layers for n in self.layers[x].backend_evidence))

    def score_bytes(self, layers: Iterable[int]) -> float:
        """Score tensors allocated per step in these layers' forwards: the one total every
        finding quotes (the summary's ``sxs_bytes``; masks apart)."""
        return sum(self.layers[x].sxs_bytes for x in layers)

    def score_allocators(self, layer: int) -> list[str]:
        """The top-level ops that allocate the layer's score tensors, the most bytes first (ties in
        the order they run)."""
        by_op: Counter[str] = Counter()
        fwd = np.flatnonzero(self.fwd & (self.a.layer == layer))
        mem = np.flatnonzero((self.a.mem_layer == layer) & ~self.a.mem_backward & self.mem_in_steps)
        scores, _ = score_allocs(self.ev, self.a, mem, sxs_sizes(self.ev, self.a, fwd))
        for m in mem[scores].tolist():
            i = int(self.a.mem_event[m])
            if i >= 0:
                by_op[self.name(self._allocator(i))] += int(self.ev.mem_bytes[m])
        return [n for n, _ in sorted(by_op.items(), key=lambda kv: -kv[1])[:MAX_NAMES]]  # stable: first run first

    def score_sized_masks(self, layer: int) -> tuple[int, float]:
        """The layer's forward allocations in the steps that are masks or biases of a score tensor's
        size (not scores: ``scores.score_allocs``), their number and bytes in all the steps."""
        fwd = np.flatnonzero(self.fwd & (self.a.layer == layer))
        mem = np.flatnonzero((self.a.mem_layer == layer) & ~self.a.mem_backward & self.mem_in_steps)
        sizes = sxs_sizes(self.ev, self.a, fwd)
        masks = score_allocs(self.ev, self.a, mem, sizes)[1]
        big = mem[masks & np.isin(self.ev.mem_bytes[mem], list(allocator_sizes(sizes.scores)))]
        return big.size, float(self.ev.mem_bytes[big].sum())

    def _allocator(self, i: int) -> int:
        """The op that allocated at event ``i``, as its block shows it: the top-level op, or,
        inside an op that runs the whole core (an SDPA call, nn.MHA's fast path), the op there."""
        chain = [p for p in [i, *self.ancestors(i)] if self.ev.kind[p] == Kind.CPU_OP]
        k = len(chain) - 1
        while k > 0 and self.name(chain[k]) in _CORE_OPS:
            k -= 1
        return chain[k]

    def step_peak(self) -> int:
        """The largest total allocated on the memory device within the steps."""
        ev = self.ev
        ok = (ev.mem_device_type == self.mem_device) & (ev.mem_total >= 0)
        if self.s.steps:
            ok &= self.a.mem_step >= 0
        return int(ev.mem_total[ok].max()) if ok.any() else 0

    def model_dtype(self, layers: Iterable[int] | None = None) -> tuple[str | None, str]:
        """The dtype the model of these layers (all: the trace's) runs in, and where that was seen:
        its SDPA inputs, the run metadata, or its projections' inputs (None, '' where none says)."""
        mine = (lambda idx: idx) if layers is None else (lambda idx: idx[np.isin(self.a.layer[idx], list(layers))])
        sdpa = mine(self.outermost(self.ops(SDPA_OPS)))
        seen = Counter(dtype_name(ty[0]) for i in sdpa.tolist() if (ty := self.types(i)))
        if seen:
            return seen.most_common(1)[0][0], "its SDPA inputs"
        config = self.meta.get("config")
        raw = self.meta.get("dtype") or (config.get("dtype") if isinstance(config, dict) else None)
        if isinstance(raw, str):
            return dtype_name(raw.removeprefix("torch.").lower()), "the run metadata"
        linear = Counter(dtype_name(ty[0]) for i in mine(self.ops({LINEAR_OP})).tolist() if (ty := self.types(i)))
        return (linear.most_common(1)[0][0], "its projections") if linear else (None, "")

