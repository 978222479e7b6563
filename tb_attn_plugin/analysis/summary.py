"""Summarize one trace: attention per layer × phase × head, as means over profiled steps.

``summarize_analysis(analysis, ...)`` aggregates an analyzed trace (``analysis.analyze``) into
time, FLOPs and memory, with materialized scores found by ``analysis.scores``; what a summary
lists is bounded by ``analysis.bounds``. ``summarize_trace`` adds the findings
(``analysis.findings``): it is what the loader stores for a trace file. Definitions are in
``schema.py`` and ``docs/summary.md``.
"""

# Not split (over 400 lines): _Summarizer computes every figure of a layer from one attribution
# pass; its seam (per-phase stats) shares that state.

from __future__ import annotations

from collections import Counter
from functools import cached_property

import msgspec
import numpy as np

from tb_attn_plugin.analysis.analyze import Analysis, analyze
from tb_attn_plugin.analysis.attribute import Attribution
from tb_attn_plugin.analysis.backend import detect_backend
from tb_attn_plugin.analysis.batch import serving_batch
from tb_attn_plugin.analysis.bounds import (
    BAD_HEAD_COUNT,
    MAX_PHASE_NAMES,
    HeadRowBudget,
    check_steps,
    clip,
    fold_diagnostics,
    tally,
)
from tb_attn_plugin.analysis.collectives import attention_comm, collectives
from tb_attn_plugin.analysis.configs import checked_metadata
from tb_attn_plugin.analysis.findings import find
from tb_attn_plugin.analysis.flops import flop_rate
from tb_attn_plugin.analysis.generation import generation
from tb_attn_plugin.analysis.gpu import gpu_label
from tb_attn_plugin.analysis.graphs import graph_use
from tb_attn_plugin.analysis.peaks import peaks_for
from tb_attn_plugin.analysis.query import TraceQuery, ancestors
from tb_attn_plugin.analysis.ranks import rank_of
from tb_attn_plugin.analysis.roofline import with_roofline
from tb_attn_plugin.analysis.scores import SCORE_ALLOC_PHASES, ScoreSizes, score_allocs, sxs_sizes
from tb_attn_plugin.analysis.sparsity import with_masks
from tb_attn_plugin.analysis.spread import per_step_sums, spread
from tb_attn_plugin.analysis.traffic import event_bytes, flop_dtype
from tb_attn_plugin.trace.events import Events
from tb_attn_plugin.trace.kineto import BACKWARD_PREFIX, Kind
from tb_attn_plugin.types.schema import Backward, HeadStats, LayerStats, PhaseStats, Spread, StepStats, WorkerSummary
from tb_attn_plugin.vocab.aten import SDPA_OPS, SOFTMAX_OPS
from tb_attn_plugin.vocab.kernels import GRAPH_LAUNCH
from tb_attn_plugin.vocab.scopes import MAX_HEADS, OTHER, PHASES, SCORE_PHASES, UNSPLIT_PHASES, in_order, parse_scope

__all__ = ["summarize", "summarize_analysis", "summarize_trace", "typed"]

_EMPTY = np.empty(0, np.int64)
_KV_STATE = PHASES.index("kv_state")


def summarize(events: Events, *, file: str = "", worker: str = "", span: str | None = None) -> WorkerSummary:
    """The summary of decoded events, without findings."""
    return summarize_analysis(analyze(events), file=file, worker=worker, span=span)


def summarize_analysis(analysis: Analysis, *, file: str = "", worker: str = "", span: str | None = None
                       ) -> WorkerSummary:
    """The summary of an analyzed trace, without findings."""
    return _Summarizer(analysis.events, analysis.attr, analysis.inferred, analysis.diagnostics,
                       analysis.core_only).build(file=file, worker=worker, span=span, notes=list(analysis.notes))


def summarize_trace(analysis: Analysis, *, file: str, worker: str, span: str | None,
                    metadata: dict[str, object] | None = None) -> WorkerSummary:
    """The summary of an analyzed trace with its findings (``metadata``: the run's
    ``tb_attn_run.json``, which two rules read): what a trace file's summary is, everywhere."""
    replace = msgspec.structs.replace
    metadata, ignored = checked_metadata(metadata)  # no count out of range reaches a figure
    measured = summarize_analysis(analysis, file=file, worker=worker, span=span)
    if ignored:
        measured = replace(measured, notes=[*measured.notes, *ignored])
    measured = with_masks(measured, metadata)
    measured = replace(measured, generation=generation(analysis, measured, metadata,
                                                       lambda part: summarize_analysis(part).layers))
    found = replace(measured, findings=find(analysis, measured, metadata=metadata))
    return typed(with_roofline(found, peaks_for(found.device, analysis.events.meta.device_properties, metadata)))


def typed(summary: WorkerSummary) -> WorkerSummary:
    """The summary with every value of its declared type, as a worker process, Dask or the summary
    cache hands it back after msgpack (an empty ``sum()`` is the int 0 where a float is declared):
    so serial, ``--jobs N``, Dask and cached summaries print byte for byte alike. About 1% of a
    summary's time (2 ms for an 800 KB summary)."""
    return msgspec.msgpack.decode(msgspec.msgpack.encode(summary), type=WorkerSummary)


class _Summarizer:
    # One class of about 370 lines on purpose: every figure of a summary is read from the same
    # per-trace arrays built once here (step codes, device work, self times, memory prefix sums,
    # index groups per layer); split in two, each part would rebuild them or pass a dozen arrays.
    def __init__(self, events: Events, attr: Attribution, inferred: bool, diagnostics: dict[str, int],
                 core_only: frozenset[int] = frozenset()) -> None:
        self.ev, self.a, self.inferred, self.core_only = events, attr, inferred, core_only
        self.diag = dict(diagnostics)
        self.head_rows = HeadRowBudget(self.diag)
        names = events.names
        q = self.q = TraceQuery(events, attr)
        self.on_device, self.device_work = q.on_device, q.device_work
        self.has_device = bool((self.device_work & q.in_steps).any())
        self.steps, self.step_count = q.steps, q.step_count
        self.in_steps, self.mem_in_steps = q.in_steps, q.mem_in_steps
        # Each event's position among the profiled steps, for the per-step values behind a spread.
        self.step_code = np.searchsorted(np.asarray(self.steps, np.int64), attr.step).astype(np.int64)
        self.engine = np.array([n.startswith(BACKWARD_PREFIX) for n in names], np.bool_)[events.name]
        self.self_us, self.top_op = q.self_us, q.top_op
        self.mem_ok = q.mem_ok
        self.bytes, self.unmodeled = event_bytes(events, attr)
        # Memory events are sorted by track: each track's [lo, hi) range, found once.
        tracks, starts = np.unique(events.mem_track, return_index=True)
        ends = np.append(starts[1:], len(events.mem_track))[: len(starts)]
        self.mem_ranges = {int(t): (int(a), int(b)) for t, a, b in zip(tracks, starts, ends, strict=True)}
        self.parent_backward = np.where(attr.parent >= 0, attr.backward[np.maximum(attr.parent, 0)], False)
        self.layer_idx = _groups(attr.layer, (attr.layer >= 0) & self.in_steps)
        self.mem_layer_idx = _groups(attr.mem_layer, (attr.mem_layer >= 0) & ~attr.mem_backward & self.mem_in_steps
                                     & self.mem_ok)
        # Heads a layer's scopes name as ranges (tensor parallelism: this rank's global heads).
        self.head_ranges: dict[int, set[int]] = {}
        for nid in np.unique(events.name[attr.is_scope]).tolist():
            scope = parse_scope(names[nid])
            if scope is not None and scope.head_last is not None and scope.heads is not None:
                self.head_ranges.setdefault(scope.layer, set()).update(scope.heads)

    # -- helpers --------------------------------------------------------------------------
    def _rate(self, phases: list[PhaseStats], device_us: float, cpu_us: float) -> float:
        """A layer's FLOP/s: on a device, the FLOPs of its phases that ran kernels over their time
        (a phase captured into a CUDA graph ran none here); else over CPU time."""
        if not self.has_device:
            return flop_rate(sum(p.flops for p in phases), cpu_us)
        return flop_rate(sum(p.flops for p in phases if p.device_us > 0), device_us)

    @cached_property
    def _launch_corr(self) -> np.ndarray:
        """The correlation ids of the trace's graph replays (``cudaGraphLaunch``), once per trace."""
        ev = self.ev
        return ev.corr[(ev.kind == Kind.RUNTIME) & np.isin(ev.name, ev.name_ids(GRAPH_LAUNCH))]

    def _replays(self, fwd: np.ndarray) -> int:
        """A layer found in graph replays alone (no block scope): the replays its kernels ran in."""
        dev = fwd[self.on_device[fwd]]
        return int(np.unique(self.ev.corr[dev][np.isin(self.ev.corr[dev], self._launch_corr)]).size)

    def _per_step(self, x: float) -> float:
        return float(x) / self.step_count

    def _by_step(self, idx: np.ndarray) -> np.ndarray:
        """The durations of events ``idx`` (all within the steps) summed per step."""
        return per_step_sums(self.step_code[idx], self.ev.dur[idx], len(self.steps))

    def _spreads(self, **per_step: np.ndarray) -> dict[str, Spread]:
        """The spread of each figure's per-step values, keyed as ``schema.SPREAD_KEYS``."""
        if len(self.steps) < 2:
            return {}
        out = {k: spread(v) for k, v in per_step.items()}
        return {k: v for k, v in out.items() if v is not None}

    def _names(self, idx: np.ndarray, top: int = MAX_PHASE_NAMES) -> list[str]:
        totals: Counter[str] = Counter()
        for nid, d in zip(self.ev.name[idx].tolist(), self.ev.dur[idx].tolist(), strict=True):
            totals[self.ev.names[nid]] += d
        return [clip(n) for n, _ in totals.most_common(top)]

    def _peak(self, scope_idx: np.ndarray) -> int:
        """Largest rise of allocated memory over a scope's start, across the scope instances: for
        each, the highest ``Total Allocated`` of the usable memory events within it, over the
        total before its first one. All instances of a track at once (a summary asks for about a
        hundred scopes of thousands of instances)."""
        ev = self.ev
        best = 0
        tracks = ev.track[scope_idx]
        for track in np.unique(tracks).tolist():
            lo, hi = self.mem_ranges.get(int(track), (0, 0))
            if lo == hi:
                continue
            idx = scope_idx[tracks == track]
            seg = ev.mem_ts[lo:hi]
            start = lo + np.searchsorted(seg, ev.ts[idx], side="left")
            stop = lo + np.searchsorted(seg, ev.ts[idx] + ev.dur[idx], side="right")
            next_ok, top, negatives = self._mem_prefix
            first = next_ok[np.minimum(start, len(next_ok) - 1)]
            some = (stop > start) & (first < stop)
            start, stop, first = start[some], stop[some], first[some]
            if start.size == 0:
                continue
            signed = (negatives[stop] - negatives[start]) > 0  # a negative total: the float path below
            if (~signed).any():
                s, e, f = start[~signed], stop[~signed], first[~signed]
                highest = np.maximum.reduceat(top, np.stack([s, e], axis=1).ravel())[::2]
                rise = highest - (ev.mem_total[f] - ev.mem_bytes[f])
                best = max(best, int(rise.max()))
            for a, b in zip(start[signed].tolist(), stop[signed].tolist(), strict=True):
                # in float64: a sum of many sizes near the decoder's 2**53 bound overflows int64
                nbytes = ev.mem_bytes[a:b][self.mem_ok[a:b]]
                best = max(best, int(np.cumsum(nbytes, dtype=np.float64).max()))
        return best

    @cached_property
    def _mem_prefix(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Over the memory events: the first usable one at or after each position (n where
        none), each usable one's total (the lowest int64 elsewhere, and one more at the end, so
        that a range may end there), and the count of usable negative totals before each."""
        ok, total = self.mem_ok, self.ev.mem_total
        n = ok.size
        at = np.where(ok, np.arange(n), n)
        next_ok = np.append(np.minimum.accumulate(at[::-1])[::-1], n)
        top = np.append(np.where(ok, total, np.iinfo(np.int64).min), np.iinfo(np.int64).min)
        negatives = np.concatenate([[0], np.cumsum(ok & (total < 0))])
        return next_ok, top, negatives

    # -- the summary ----------------------------------------------------------------------
    def build(self, *, file: str, worker: str, span: str | None, notes: list[str]) -> WorkerSummary:
        ev, a = self.ev, self.a
        layers_present = sorted(self.layer_idx)  # below scopes.MAX_LAYERS: attribution drops the others
        check_steps(len(self.steps))
        layer_stats = [self._layer(layer) for layer in layers_present]
        step_idx = self.q.step_events
        step_cpu = float(ev.dur[step_idx].sum()) if step_idx.size else float(self._trace_span())
        device_in = self.device_work & self.in_steps
        step_device = float(ev.dur[device_in].sum())
        att_cpu = sum(layer.cpu_us + layer.backward.cpu_us for layer in layer_stats)
        att_dev = sum(layer.device_us + layer.backward.device_us for layer in layer_stats)
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
        spreads = self._spreads(**{k: np.array([getattr(p, f) for p in per_step]) for k, f in fields.items()})
        return WorkerSummary(
            file=file, worker=worker, span=span,
            device="cuda" if has_device else "cpu", gpu=gpu_label(ev) if has_device else None,
            memory_recorded=len(ev.mem_ts) > 0,
            inferred=self.inferred and bool(layer_stats),
            backend=backends[0] if len(backends) == 1 else ("mixed" if backends else "none"),
            steps=self.steps, step_count=self.step_count,
            step_cpu_us=self._per_step(step_cpu), step_device_us=self._per_step(step_device),
            attention_cpu_us=att_cpu, attention_device_us=att_dev,
            # None where attention ran no CPU op (found in graph replays' kernels alone): not measured.
            attention_share_cpu=att_cpu / self._per_step(step_cpu)
            if step_cpu > 0 and (att_cpu > 0 or not has_device or not layer_stats) else None,
            attention_share_device=att_dev / self._per_step(step_device)
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
                                      cpu_steps=self._by_step(scopes)))
        other = self._other(idx[phase_of < 0], block_scopes, fwd, mem[mem_phase < 0], sizes)
        if other is not None:
            phases.append(other)
        ops = [ev.names[n] for n in set(ev.name[fwd[ev.kind[fwd] == Kind.CPU_OP]].tolist())]
        kernels = [ev.names[n] for n in set(ev.name[fwd[self.on_device[fwd]]].tolist())]
        backend, evidence = detect_backend(ops, kernels, [p.phase for p in phases])
        cpu_us = self._per_step(ev.dur[block_scopes].sum())
        device_us = sum(p.device_us for p in phases)
        flops = sum(p.flops for p in phases)
        nbytes = ev.mem_bytes[mem]
        alloc = self._per_step(nbytes[nbytes > 0].sum(dtype=np.float64))
        sxs = sum(p.sxs_bytes for p in phases)
        back = Backward(
            calls=sum(p.backward.calls for p in phases), cpu_us=sum(p.backward.cpu_us for p in phases),
            device_us=sum(p.backward.device_us for p in phases), flops=sum(p.backward.flops for p in phases),
        )
        bwd = idx[a.backward[idx]]
        spreads = self._spreads(
            cpu_us=self._by_step(block_scopes), device_us=self._by_step(fwd[self.device_work[fwd]]),
            bwd_cpu_us=self._by_step(bwd[self.engine[bwd] & ~self.parent_backward[bwd]]),
            bwd_device_us=self._by_step(bwd[self.device_work[bwd]]))
        if not self.has_device:
            spreads = {k: v for k, v in spreads.items() if "device" not in k}
        stats = LayerStats(
            layer=layer, module=clip(a.modules[layer]) if layer in a.modules else None, backend=backend,
            backend_evidence=[clip(n) for n in evidence],
            inferred=self.inferred, core_only=layer in self.core_only,
            calls=self._per_step(block_scopes.size or self._replays(fwd)), cpu_us=cpu_us, device_us=device_us,
            flops=flops, flops_per_s=self._rate(phases, device_us, cpu_us), iops=sum(p.iops for p in phases),
            alloc_bytes=alloc, peak_bytes=self._peak(block_scopes), sxs_bytes=sxs,
            sxs_mask_bytes=sum(p.sxs_mask_bytes for p in phases), score_tensor_bytes=sizes.tensor_bytes,
            score_shape=list(sizes.shape),
            heads_count=self._heads_count(fwd), phases=phases,
            heads=[], backward=back, spread=spreads, bytes=sum(p.bytes for p in phases),
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
        cpu_steps = np.maximum(self._by_step(block_scopes) - self._by_step(outer), 0.0)
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
        device_us = self._per_step(ev.dur[device].sum())
        cpu_us = self._per_step(cpu_total)
        flops = self._per_step(a.flops[fwd].sum())
        spreads = self._spreads(cpu_us=self._by_step(scopes) if cpu_steps is None else cpu_steps,
                                device_us=self._by_step(device), bwd_cpu_us=self._by_step(engine_top),
                                bwd_device_us=self._by_step(bwd_device))
        if not self.has_device:
            spreads = {k: v for k, v in spreads.items() if "device" not in k}
        return PhaseStats(
            phase=phase,
            calls=self._per_step(scopes.size if calls is None else calls),
            cpu_us=cpu_us,
            cpu_self_us=self._per_step(self.self_us[fwd].sum()),
            device_us=device_us,
            kernels=self._per_step(device.size),
            kernel_names=self._names(device),
            ops=self._names(ops),
            op_count=self._per_step(ops.size),
            flops=flops,
            flops_per_s=flop_rate(flops, device_us if self.has_device else cpu_us),
            iops=self._per_step(a.iops[fwd].sum()) if a.iops.size else 0.0,
            alloc_bytes=self._per_step(nbytes[nbytes > 0].sum()),
            freed_bytes=self._per_step(-nbytes[nbytes < 0].sum()),
            peak_bytes=self._peak(scopes),
            sxs_bytes=self._per_step(nbytes[sxs].sum()),
            sxs_allocs=self._per_step(int(sxs.sum())),
            sxs_mask_bytes=self._per_step(nbytes[masks].sum()),
            sxs_mask_allocs=self._per_step(int(masks.sum())),
            backward=Backward(
                calls=self._per_step(engine_top.size),
                cpu_us=self._per_step(ev.dur[engine_top].sum()),
                device_us=self._per_step(ev.dur[bwd_device].sum()),
                flops=self._per_step(a.flops[bwd].sum()),
            ),
            spread=spreads,
            bytes=self._per_step(self.bytes[fwd].sum()),
            unmodeled_ops=self._per_step(int(self.unmodeled[fwd].sum())),
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
                spreads = self._spreads(cpu_us=self._by_step(head_scopes), device_us=self._by_step(head_device))
                if not self.has_device:
                    spreads.pop("device_us", None)
                out.append(HeadStats(
                    head=h, derived=False, spread=spreads,
                    cpu_us=self._per_step(ev.dur[head_scopes].sum()),
                    device_us=self._per_step(ev.dur[head_device].sum()),
                    flops=self._per_step(a.flops[mine].sum()),
                    alloc_bytes=self._per_step(nbytes[nbytes > 0].sum()),
                    sxs_bytes=self._per_step(nbytes[sxs].sum()),
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


def _groups(keys: np.ndarray, mask: np.ndarray) -> dict[int, np.ndarray]:
    """Indices (ascending) of the masked rows, grouped by key."""
    idx = np.flatnonzero(mask)
    if idx.size == 0:
        return {}
    order = np.argsort(keys[idx], kind="stable")
    idx = idx[order]
    values, starts = np.unique(keys[idx], return_index=True)
    ends = np.append(starts[1:], idx.size)
    return {int(v): idx[a:b] for v, a, b in zip(values, starts, ends, strict=True)}
