"""The measured summary of one analyzed trace: time, FLOPs, memory and calls per layer × phase ×
head, as means over the profiled steps, with the steps' own figures, the trace's collectives and
its serving batch. Every figure is read from one ``summary_arrays.TraceArrays`` of the trace;
``analysis.summary`` adds the stages that follow (roofs, findings, headline)."""

from __future__ import annotations

from collections import Counter

import msgspec
import numpy as np

from tb_attn_plugin.analysis.attribution.analyze import Analysis
from tb_attn_plugin.analysis.attribution.attribute import Attribution
from tb_attn_plugin.analysis.attribution.batch import serving_batch
from tb_attn_plugin.analysis.attribution.collectives import attention_comm, collectives
from tb_attn_plugin.analysis.attribution.graphs import graph_use
from tb_attn_plugin.analysis.attribution.query import ancestors
from tb_attn_plugin.analysis.attribution.scores import SCORE_ALLOC_PHASES, ScoreSizes, score_allocs, sxs_sizes
from tb_attn_plugin.analysis.common.bounds import (
    BAD_HEAD_COUNT,
    HeadRowBudget,
    check_steps,
    clip,
    fold_diagnostics,
    tally,
)
from tb_attn_plugin.analysis.measures.gpu import gpu_label
from tb_attn_plugin.analysis.measures.summary_arrays import TraceArrays
from tb_attn_plugin.analysis.measures.traffic import flop_dtype
from tb_attn_plugin.analysis.ops.backend import detect_backend
from tb_attn_plugin.analysis.ops.flops import flop_rate
from tb_attn_plugin.trace.events import Events
from tb_attn_plugin.trace.kineto import Kind
from tb_attn_plugin.types.schema import Backward, HeadStats, LayerStats, PhaseStats, StepStats, WorkerSummary
from tb_attn_plugin.vocab.aten import SDPA_OPS, SOFTMAX_OPS
from tb_attn_plugin.vocab.ranks import rank_of
from tb_attn_plugin.vocab.scopes import MAX_HEADS, OTHER, PHASES, SCORE_PHASES, UNSPLIT_PHASES, in_order

__all__ = ["measure"]

_EMPTY = np.empty(0, np.int64)
_KV_STATE = PHASES.index("kv_state")


def measure(analysis: Analysis, *, file: str = "", worker: str = "", span: str | None = None) -> WorkerSummary:
    """The measured summary of an analyzed trace: no masks, generation, roofs, findings or headline."""
    return _Summarizer(analysis.events, analysis.attr, analysis.inferred, analysis.diagnostics,
                       analysis.core_only).build(file=file, worker=worker, span=span, notes=list(analysis.notes))


class _Summarizer(TraceArrays):
    # Every figure of a layer comes from one pass over its events' index arrays; the arrays, built
    # once per trace, and the reductions over them are the base's.
    def __init__(self, events: Events, attr: Attribution, inferred: bool, diagnostics: dict[str, int],
                 core_only: frozenset[int] = frozenset()) -> None:
        super().__init__(events, attr)
        self.inferred, self.core_only = inferred, core_only
        self.diag = dict(diagnostics)
        self.head_rows = HeadRowBudget(self.diag)

    def _rate(self, phases: list[PhaseStats], device_us: float, cpu_us: float) -> float:
        """A layer's FLOP/s: on a device, the FLOPs of its phases that ran kernels over their time
        (a phase captured into a CUDA graph ran none here); else over CPU time."""
        if not self.has_device:
            return flop_rate(sum(p.flops for p in phases), cpu_us)
        return flop_rate(sum(p.flops for p in phases if p.device_us > 0), device_us)

    def build(self, *, file: str, worker: str, span: str | None, notes: list[str]) -> WorkerSummary:
        ev, a = self.ev, self.a
        layers_present = sorted(self.layer_idx)  # below scopes.MAX_LAYERS: attribution drops the others
        check_steps(len(self.steps))
        layer_stats = [self._layer(layer) for layer in layers_present]
        step_idx = self.q.step_events
        step_cpu = float(ev.dur[step_idx].sum()) if step_idx.size else float(self._trace_span())
        device_in = self.device_work & self.in_steps
        step_device = float(ev.dur[device_in].sum())
        att_cpu = sum((layer.cpu_us + layer.backward.cpu_us for layer in layer_stats), 0.0)
        att_dev = sum((layer.device_us + layer.backward.device_us for layer in layer_stats), 0.0)
        has_device = bool(device_in.any())
        if not self.steps:
            notes.append("no ProfilerStep# in this trace: the whole trace counts as one step")
        graphs = graph_use(ev, a)  # kernels captured into CUDA/HIP graphs, or run in replays
        notes.extend(graphs.notes)
        if graphs.captured_phases:
            layer_stats = [_captured(layer, graphs.captured_phases) for layer in layer_stats]
        backends = sorted({layer.backend for layer in layer_stats})
        rank, world_size = rank_of(ev.meta.distributed_info, worker, file, diagnostics=self.diag)
        found = collectives(ev, a.parent, [(float(ev.ts[i]), float(ev.ts[i] + ev.dur[i])) for i in step_idx],
                            diagnostics=self.diag)
        per_step = self._per_step_stats(step_idx, device_in)
        fields = {"step_cpu_us": "cpu_us", "attention_cpu_us": "attention_cpu_us"}
        if has_device:
            fields |= {"step_device_us": "device_us", "attention_device_us": "attention_device_us"}
        spreads = self.spreads(**{k: np.array([getattr(p, f) for p in per_step]) for k, f in fields.items()})
        return WorkerSummary(
            file=file, worker=worker, span=span,
            device="cuda" if has_device else "cpu", gpu=gpu_label(ev) if has_device else None,
            memory_recorded=len(ev.mem_ts) > 0,
            inferred=self.inferred and bool(layer_stats),
            backend=backends[0] if len(backends) == 1 else ("mixed" if backends else "none"),
            steps=self.steps, step_count=self.step_count,
            step_cpu_us=self.per_step(step_cpu), step_device_us=self.per_step(step_device),
            attention_cpu_us=att_cpu, attention_device_us=att_dev,
            # None where attention ran no CPU op (found in graph replays' kernels alone): not measured.
            attention_share_cpu=att_cpu / self.per_step(step_cpu)
            if step_cpu > 0 and (att_cpu > 0 or not has_device or not layer_stats) else None,
            attention_share_device=att_dev / self.per_step(step_device)
            if has_device and step_device > 0 and graphs.device_share_known else None,
            layers=layer_stats, per_step=per_step, spread=spreads,
            diagnostics=fold_diagnostics(self.diag), notes=notes,
            rank=rank, world_size=world_size, collectives=found,
            serving=serving_batch(ev, a.step, self.steps, len(layer_stats)),
            device_partial=has_device and bool(layer_stats) and graphs.attention_partial,
        )

    def _trace_span(self) -> float:
        ev = self.ev
        if len(ev) == 0:
            return 0.0
        return float((ev.ts + ev.dur).max() - ev.ts.min())

    def _per_step_stats(self, step_idx: np.ndarray, device_in: np.ndarray) -> list[StepStats]:
        ev, a = self.ev, self.a
        out = []
        attention = (a.layer >= 0)
        block_scope = a.is_scope & (a.phase < 0) & (a.head < 0) & ~a.backward
        engine_top = self.engine & a.backward & (a.layer >= 0) & ~self.parent_backward
        comm_cpu, comm_device = attention_comm(ev, a.parent, a.layer, a.is_scope, a.phase)
        for s in self.steps:
            mine = a.step == s
            out.append(StepStats(
                step=s,
                cpu_us=float(ev.dur[step_idx[a.step[step_idx] == s]].sum()),
                device_us=float(ev.dur[device_in & mine].sum()),
                attention_cpu_us=float(ev.dur[(block_scope | engine_top) & mine].sum()),
                attention_device_us=float(ev.dur[device_in & mine & attention].sum()),
                attention_comm_cpu_us=float(ev.dur[comm_cpu[mine[comm_cpu]]].sum()),
                attention_comm_device_us=float(ev.dur[comm_device[(mine & device_in)[comm_device]]].sum()),
            ))
        return out

    def _layer(self, layer: int) -> LayerStats:
        # Everything below works on index arrays of this layer's events, not full-length masks.
        ev, a = self.ev, self.a
        idx = self.layer_idx[layer]
        fwd = idx[~a.backward[idx]]
        block_scopes = fwd[a.is_scope[fwd] & (a.phase[fwd] < 0) & (a.head[fwd] < 0)]
        mem = self.mem_layer_idx.get(layer, _EMPTY)
        phase_of = a.phase[idx]
        # Linear attention's C×C chunk products are not (Sq, Sk) scores.
        sizes = ScoreSizes() if (phase_of == _KV_STATE).any() else sxs_sizes(ev, a, fwd)
        mem_phase = a.mem_phase[mem]
        phases = []
        runs = self._phase_runs(fwd)
        for code in range(len(PHASES)):
            sel = idx[phase_of == code]
            if sel.size == 0:
                continue
            f = sel[~a.backward[sel]]
            scopes = f[a.is_scope[f]]
            phases.append(self._stats(PHASES[code], sel, f, scopes, float(ev.dur[scopes].sum()),
                                      mem[mem_phase == code], sizes, calls=runs.get(code, 0),
                                      cpu_steps=self.by_step(scopes)))
        other = self._other(idx[phase_of < 0], block_scopes, fwd, mem[mem_phase < 0], sizes)
        if other is not None:
            phases.append(other)
        ops = [ev.names[n] for n in set(ev.name[fwd[ev.kind[fwd] == Kind.CPU_OP]].tolist())]
        kernels = [ev.names[n] for n in set(ev.name[fwd[self.on_device[fwd]]].tolist())]
        backend, evidence = detect_backend(ops, kernels, [p.phase for p in phases])
        cpu_us = self.per_step(ev.dur[block_scopes].sum())
        device_us = sum((p.device_us for p in phases), 0.0)
        flops = sum((p.flops for p in phases), 0.0)
        nbytes = ev.mem_bytes[mem]
        alloc = self.per_step(nbytes[nbytes > 0].sum(dtype=np.float64))
        sxs = sum((p.sxs_bytes for p in phases), 0.0)
        back = Backward(
            calls=sum((p.backward.calls for p in phases), 0.0),
            cpu_us=sum((p.backward.cpu_us for p in phases), 0.0),
            device_us=sum((p.backward.device_us for p in phases), 0.0),
            flops=sum((p.backward.flops for p in phases), 0.0),
        )
        bwd = idx[a.backward[idx]]
        spreads = self.spreads(
            cpu_us=self.by_step(block_scopes), device_us=self.by_step(fwd[self.device_work[fwd]]),
            bwd_cpu_us=self.by_step(bwd[self.engine[bwd] & ~self.parent_backward[bwd]]),
            bwd_device_us=self.by_step(bwd[self.device_work[bwd]]))
        if not self.has_device:
            spreads = {k: v for k, v in spreads.items() if "device" not in k}
        stats = LayerStats(
            layer=layer, module=clip(a.modules[layer]) if layer in a.modules else None, backend=backend,
            backend_evidence=[clip(n) for n in evidence],
            inferred=self.inferred, core_only=layer in self.core_only,
            calls=self.per_step(block_scopes.size or self.replays(fwd)), cpu_us=cpu_us, device_us=device_us,
            flops=flops, flops_per_s=self._rate(phases, device_us, cpu_us), iops=sum((p.iops for p in phases), 0.0),
            alloc_bytes=alloc, peak_bytes=self.peak(block_scopes), sxs_bytes=sxs,
            sxs_mask_bytes=sum((p.sxs_mask_bytes for p in phases), 0.0), score_tensor_bytes=sizes.tensor_bytes,
            score_shape=list(sizes.shape),
            heads_count=self._heads_count(fwd), phases=phases,
            heads=[], backward=back, spread=spreads, bytes=sum((p.bytes for p in phases), 0.0),
        )
        return msgspec.structs.replace(stats, heads=self._heads(stats, fwd, mem, sizes))

    def _other(self, sel: np.ndarray, block_scopes: np.ndarray, layer_fwd: np.ndarray, mem: np.ndarray,
               sizes: ScoreSizes) -> PhaseStats | None:
        ev, a = self.ev, self.a
        fwd = sel[~a.backward[sel]]
        outer = self._outer_scopes(layer_fwd)
        cpu_total = float(ev.dur[block_scopes].sum() - ev.dur[outer].sum())
        if not (~a.is_scope[fwd]).any() and not a.backward[sel].any() and cpu_total <= 0:
            return None
        cpu_steps = np.maximum(self.by_step(block_scopes) - self.by_step(outer), 0.0)
        return self._stats(OTHER, sel, fwd, _EMPTY, max(cpu_total, 0.0), mem, sizes, calls=0, cpu_steps=cpu_steps)

    def _phase_runs(self, fwd: np.ndarray) -> dict[int, int]:
        """Calls of each phase: its runs of consecutive scopes in one block (or head), so that q,
        k and v projected by three scopes (or three Linear modules), with the head split between
        them placed in the same phase by its role (``analysis.roles``), are one call."""
        a = self.a
        scopes = fwd[a.is_scope[fwd] & (a.phase[fwd] >= 0)]
        if scopes.size == 0:
            return {}
        code = a.phase[scopes]
        owner = a.parent[scopes].copy()  # the enclosing block or head scope, above modules and fused ops
        for k in np.flatnonzero((owner >= 0) & ~a.is_scope[np.maximum(owner, 0)]).tolist():
            p = int(owner[k])
            while p >= 0 and not a.is_scope[p]:
                p = int(a.parent[p])
            owner[k] = p
        starts = np.ones(scopes.size, np.bool_)
        starts[1:] = (code[1:] != code[:-1]) | (owner[1:] != owner[:-1])
        return dict(zip(*(x.tolist() for x in np.unique(code[starts], return_counts=True)), strict=True))

    def _outer_scopes(self, fwd: np.ndarray) -> np.ndarray:
        """The layer's head and phase scopes that no other such scope encloses."""
        a = self.a
        inner = fwd[a.is_scope[fwd] & ~((a.phase[fwd] < 0) & (a.head[fwd] < 0))]
        keep = []
        for i in inner.tolist():
            p = next((p for p in ancestors(a.parent, i) if a.is_scope[p]), -1)
            if p < 0 or (a.phase[p] < 0 and a.head[p] < 0):
                keep.append(i)
        return np.array(keep, dtype=np.int64)

    def _stats(
        self, phase: str, sel: np.ndarray, fwd: np.ndarray, scopes: np.ndarray, cpu_total: float, mem: np.ndarray,
        sizes: ScoreSizes, calls: int | None = None, cpu_steps: np.ndarray | None = None,
    ) -> PhaseStats:
        ev, a = self.ev, self.a
        device = fwd[self.device_work[fwd]]
        ops = fwd[self.top_op[fwd]]
        nbytes = ev.mem_bytes[mem].astype(np.float64)  # sums of sizes near 2**53 stay finite
        sxs, masks = score_allocs(ev, a, mem, sizes if phase in SCORE_ALLOC_PHASES else ScoreSizes())
        bwd = sel[a.backward[sel]]
        engine_top = bwd[self.engine[bwd] & ~self.parent_backward[bwd]]
        bwd_device = bwd[self.device_work[bwd]]
        device_us = self.per_step(ev.dur[device].sum())
        cpu_us = self.per_step(cpu_total)
        flops = self.per_step(a.flops[fwd].sum())
        spreads = self.spreads(cpu_us=self.by_step(scopes) if cpu_steps is None else cpu_steps,
                                device_us=self.by_step(device), bwd_cpu_us=self.by_step(engine_top),
                                bwd_device_us=self.by_step(bwd_device))
        if not self.has_device:
            spreads = {k: v for k, v in spreads.items() if "device" not in k}
        return PhaseStats(
            phase=phase,
            calls=self.per_step(scopes.size if calls is None else calls),
            cpu_us=cpu_us,
            cpu_self_us=self.per_step(self.self_us[fwd].sum()),
            device_us=device_us,
            kernels=self.per_step(device.size),
            kernel_names=self.top_names(device),
            ops=self.top_names(ops),
            op_count=self.per_step(ops.size),
            flops=flops,
            flops_per_s=flop_rate(flops, device_us if self.has_device else cpu_us),
            iops=self.per_step(a.iops[fwd].sum()) if a.iops.size else 0.0,
            alloc_bytes=self.per_step(nbytes[nbytes > 0].sum()),
            freed_bytes=self.per_step(-nbytes[nbytes < 0].sum()),
            peak_bytes=self.peak(scopes),
            sxs_bytes=self.per_step(nbytes[sxs].sum()),
            sxs_allocs=self.per_step(int(sxs.sum())),
            sxs_mask_bytes=self.per_step(nbytes[masks].sum()),
            sxs_mask_allocs=self.per_step(int(masks.sum())),
            backward=Backward(
                calls=self.per_step(engine_top.size),
                cpu_us=self.per_step(ev.dur[engine_top].sum()),
                device_us=self.per_step(ev.dur[bwd_device].sum()),
                flops=self.per_step(a.flops[bwd].sum()),
            ),
            spread=spreads,
            bytes=self.per_step(self.bytes[fwd].sum()),
            unmodeled_ops=self.per_step(int(self.unmodeled[fwd].sum())),
            dtype=flop_dtype(ev, a, fwd),
        )

    def _heads_count(self, fwd: np.ndarray) -> int | None:
        ev, a = self.ev, self.a
        counts: Counter[int] = Counter()
        for i in fwd[ev.shape[fwd] >= 0].tolist():
            name = ev.names[ev.name[i]]
            if (name not in SDPA_OPS and name not in SOFTMAX_OPS) or not a.shape_ok[ev.shape[i]]:
                continue
            dims = ev.shapes[ev.shape[i]].dims
            if not dims or not isinstance(dims[0], list) or len(dims[0]) != 4:
                continue
            if 0 < dims[0][1] <= MAX_HEADS:
                counts[int(dims[0][1])] += 1
            else:  # (B, H, S, D) with H past any model's head count: not a head count
                tally(self.diag, BAD_HEAD_COUNT)
        return counts.most_common(1)[0][0] if counts else None

    def _heads(self, stats: LayerStats, fwd: np.ndarray, mem: np.ndarray, sizes: ScoreSizes) -> list[HeadStats]:
        ev, a = self.ev, self.a
        head_of = a.head[fwd]
        measured = sorted(set(head_of[head_of >= 0].tolist()))
        heads = measured or sorted(self.head_ranges.get(stats.layer, ())) or list(range(stats.heads_count or 0))
        if not self.head_rows.take(len(heads)):
            return []
        if measured:
            score_codes = np.array([PHASES.index(p) for p in in_order(SCORE_PHASES)])
            out = []
            for h in measured:
                mine = fwd[head_of == h]
                head_scopes = mine[a.is_scope[mine] & (a.phase[mine] < 0)]
                mem_h = mem[a.mem_head[mem] == h]
                nbytes = ev.mem_bytes[mem_h].astype(np.float64)
                sxs = score_allocs(ev, a, mem_h, sizes)[0] & np.isin(a.mem_phase[mem_h], score_codes)
                head_device = mine[self.on_device[mine]]
                spreads = self.spreads(cpu_us=self.by_step(head_scopes), device_us=self.by_step(head_device))
                if not self.has_device:
                    spreads.pop("device_us", None)
                out.append(HeadStats(
                    head=h, derived=False, spread=spreads,
                    cpu_us=self.per_step(ev.dur[head_scopes].sum()),
                    device_us=self.per_step(ev.dur[head_device].sum()),
                    flops=self.per_step(a.flops[mine].sum()),
                    alloc_bytes=self.per_step(nbytes[nbytes > 0].sum()),
                    sxs_bytes=self.per_step(nbytes[sxs].sum()),
                ))
            return out
        if not heads:
            return []
        h_count = len(heads)
        core = [p for p in stats.phases if p.phase not in UNSPLIT_PHASES]
        cpu = sum(p.cpu_us for p in core)
        dev = sum(p.device_us for p in core)
        flops = sum(p.flops for p in core)
        alloc = sum(p.alloc_bytes for p in core)
        return [HeadStats(head=h, derived=True, cpu_us=cpu / h_count, device_us=dev / h_count,
                          flops=flops / h_count, alloc_bytes=alloc / h_count, sxs_bytes=stats.sxs_bytes / h_count)
                for h in heads]



def _captured(layer: LayerStats, captured: frozenset[tuple[int, str]]) -> LayerStats:
    """The layer with the phases whose kernels a CUDA/HIP graph captured marked ``captured``."""
    return msgspec.structs.replace(layer, phases=[
        msgspec.structs.replace(p, captured=True) if (layer.layer, p.phase) in captured else p for p in layer.phases])


