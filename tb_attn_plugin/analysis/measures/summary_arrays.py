"""The per-trace arrays every figure of a summary is read from, built once, and the reductions
over them: per-step means and sums, spreads, the top names of a set of events, graph replays and
the largest rise of allocated memory over a scope's start (``analysis.summary_figures`` reads
them to build the measured summary)."""

from __future__ import annotations

from collections import Counter
from functools import cached_property

import numpy as np

from tb_attn_plugin.analysis.attribution.attribute import Attribution
from tb_attn_plugin.analysis.attribution.query import TraceQuery
from tb_attn_plugin.analysis.common.bounds import MAX_PHASE_NAMES, clip
from tb_attn_plugin.analysis.common.spread import per_step_sums, spread
from tb_attn_plugin.analysis.measures.traffic import event_bytes
from tb_attn_plugin.trace.events import Events
from tb_attn_plugin.trace.kineto import BACKWARD_PREFIX, Kind
from tb_attn_plugin.types.schema import Spread
from tb_attn_plugin.vocab.kernels import GRAPH_LAUNCH
from tb_attn_plugin.vocab.scopes import parse_scope

__all__ = ["TraceArrays"]


class TraceArrays:
    """One trace's per-event arrays (step codes, device work, self times, memory ranges, index
    groups per layer) and the reductions every figure uses, over events given as index arrays."""

    def __init__(self, events: Events, attr: Attribution) -> None:
        self.ev, self.a = events, attr
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

    @cached_property
    def _launch_corr(self) -> np.ndarray:
        """The correlation ids of the trace's graph replays (``cudaGraphLaunch``), once per trace."""
        ev = self.ev
        return ev.corr[(ev.kind == Kind.RUNTIME) & np.isin(ev.name, ev.name_ids(GRAPH_LAUNCH))]

    def replays(self, fwd: np.ndarray) -> int:
        """A layer found in graph replays alone (no block scope): the replays its kernels ran in."""
        dev = fwd[self.on_device[fwd]]
        return int(np.unique(self.ev.corr[dev][np.isin(self.ev.corr[dev], self._launch_corr)]).size)

    def per_step(self, x: float) -> float:
        return float(x) / self.step_count

    def by_step(self, idx: np.ndarray) -> np.ndarray:
        """The durations of events ``idx`` (all within the steps) summed per step."""
        return per_step_sums(self.step_code[idx], self.ev.dur[idx], len(self.steps))

    def spreads(self, **per_step: np.ndarray) -> dict[str, Spread]:
        """The spread of each figure's per-step values, keyed as ``schema.SPREAD_KEYS``."""
        if len(self.steps) < 2:
            return {}
        out = {k: spread(v) for k, v in per_step.items()}
        return {k: v for k, v in out.items() if v is not None}

    def top_names(self, idx: np.ndarray, top: int = MAX_PHASE_NAMES) -> list[str]:
        totals: Counter[str] = Counter()
        for nid, d in zip(self.ev.name[idx].tolist(), self.ev.dur[idx].tolist(), strict=True):
            totals[self.ev.names[nid]] += d
        return [clip(n) for n, _ in totals.most_common(top)]

    def peak(self, scope_idx: np.ndarray) -> int:
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
