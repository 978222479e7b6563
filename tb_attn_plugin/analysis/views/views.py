"""Views of one analyzed trace for the tab: memory curve and timeline (the drill-down is ``drilldown.py``).

Pure functions over ``analyze.Analysis`` that return ``MemoryCurve`` and ``TimelineSlice``
(``types.views``, documented in ``docs/http_api.md``). Times are microseconds relative to the trace start.
"""

from __future__ import annotations

import numpy as np

from tb_attn_plugin.analysis.attribution.analyze import Analysis
from tb_attn_plugin.analysis.attribution.nesting import EPS_US
from tb_attn_plugin.analysis.attribution.query import TraceQuery
from tb_attn_plugin.trace.kineto import DEVICE_KINDS, Kind
from tb_attn_plugin.types.views import (
    BackwardBlock,
    EventKind,
    LayerPeak,
    MemoryCurve,
    MemoryScope,
    StepPeak,
    TimelineEvents,
    TimelineSlice,
    TimelineTrack,
)
from tb_attn_plugin.vocab.scopes import PHASES

__all__ = ["KIND_NAMES", "memory_curve", "step_window", "steps_of", "timeline"]

KIND_NAMES: dict[int, EventKind] = {
    int(Kind.CPU_OP): "cpu_op", int(Kind.ANNOTATION): "annotation", int(Kind.GPU_ANNOTATION): "annotation",
    int(Kind.KERNEL): "kernel", int(Kind.MEMCPY): "memcpy", int(Kind.MEMSET): "memset",
    int(Kind.RUNTIME): "runtime", int(Kind.MODULE): "module", int(Kind.SYNC): "other", int(Kind.OTHER): "other",
}


class ViewError(ValueError):
    """A request for something the trace does not have (an unknown step, layer or phase)."""


def _step_events(analysis: Analysis) -> np.ndarray:
    return TraceQuery(analysis.events, analysis.attr).step_events


def steps_of(analysis: Analysis) -> list[int]:
    return TraceQuery(analysis.events, analysis.attr).steps


def step_window(analysis: Analysis, step: int | None) -> tuple[int | None, float, float]:
    """(step, start, end) of a step (the first by default); the whole trace if it has none."""
    ev = analysis.events
    idx = _step_events(analysis)
    if step is not None and step < 0:
        raise ViewError(f"step must be 0 or more, got {step}")
    if idx.size == 0:
        if step is not None:
            raise ViewError(f"this trace has no ProfilerStep#{step}")
        end = float((ev.ts + ev.dur).max()) if len(ev) else 0.0
        return None, 0.0, end
    numbers = analysis.attr.step[idx]
    if step is None:
        step = int(numbers.min())
    mine = idx[numbers == step]
    if mine.size == 0:
        raise ViewError(f"no ProfilerStep#{step} in this trace; steps: {steps_of(analysis)}")
    return step, float(ev.ts[mine].min()), float((ev.ts[mine] + ev.dur[mine]).max())


def _downsample(t: np.ndarray, y: np.ndarray, max_points: int) -> list[tuple[float, float]]:
    """At most ``max_points`` points that keep each bucket's minimum and maximum."""
    if t.size <= max_points:
        return [(float(a), float(b)) for a, b in zip(t.tolist(), y.tolist(), strict=True)]
    buckets = np.array_split(np.arange(t.size), max_points // 2)
    out: list[tuple[float, float]] = []
    for b in buckets:
        if b.size == 0:
            continue
        lo, hi = b[np.argmin(y[b])], b[np.argmax(y[b])]
        for k in sorted({int(lo), int(hi)}):
            out.append((float(t[k]), float(y[k])))
    return out


def memory_curve(analysis: Analysis, *, step: int | None, max_points: int = 4000) -> MemoryCurve:
    ev, a = analysis.events, analysis.attr
    step, start, end = step_window(analysis, step)
    device_type = TraceQuery(ev, a).mem_device
    mem_idx = np.flatnonzero(ev.mem_device_type == device_type)
    mem_idx = mem_idx[np.argsort(ev.mem_ts[mem_idx], kind="stable")]
    t = ev.mem_ts[mem_idx]
    nbytes = ev.mem_bytes[mem_idx]
    total = ev.mem_total[mem_idx]
    if total.size and (total < 0).any():  # 2021 traces: no Total Allocated, so integrate
        total = np.cumsum(nbytes)
    window = (t >= start) & (t <= end)
    points = _downsample(t[window], total[window], max_points)
    scopes_idx = np.flatnonzero(a.is_scope & ~a.backward & (ev.ts >= start) & (ev.ts <= end) & (a.head < 0))
    lay, ph = a.layer[scopes_idx], a.phase[scopes_idx]
    begin, stop = ev.ts[scopes_idx], ev.ts[scopes_idx] + ev.dur[scopes_idx]
    scopes = [MemoryScope(layer=la, phase=PHASES[p] if p >= 0 else None, start_us=b, end_us=e)
              for la, p, b, e in zip(lay.tolist(), ph.tolist(), begin.tolist(), stop.tolist(), strict=True)]
    best = dict.fromkeys(sorted(set(lay.tolist())), 0)
    for la, gain in _block_gains(t, nbytes, total, lay[ph < 0], begin[ph < 0], stop[ph < 0]):
        best[la] = max(best[la], gain)
    peaks = [LayerPeak(layer=la, peak_bytes=b) for la, b in best.items()]
    return MemoryCurve(step=step, device="cpu" if device_type == 0 else "cuda", start_us=start, end_us=end,
                          points=points, scopes=scopes, backward=_backward_blocks(analysis, start, end),
                          peak=_step_peak(analysis, mem_idx[window], total[window]), peaks=peaks)


def _backward_blocks(analysis: Analysis, start: float, end: float) -> list[BackwardBlock]:
    """Each layer's backward block among the host events that start in [start, end]: from the
    first of its backward events to the end of the last. The engine runs layers one after another
    (in reverse), so blocks are apart; where two layers' extents overlap, their work interleaves
    and one block covers both, rather than two shaded areas drawn over each other."""
    ev, a = analysis.events, analysis.attr
    idx = np.flatnonzero(a.backward & (a.layer >= 0) & ~np.isin(ev.kind, DEVICE_KINDS)
                         & (ev.ts >= start) & (ev.ts <= end))
    if idx.size == 0:
        return []
    layers, which = np.unique(a.layer[idx], return_inverse=True)
    first = np.full(layers.size, np.inf)
    last = np.full(layers.size, -np.inf)
    np.minimum.at(first, which, ev.ts[idx])
    np.maximum.at(last, which, ev.ts[idx] + ev.dur[idx])
    blocks: list[BackwardBlock] = []
    for k in np.argsort(first, kind="stable").tolist():
        layer, b, e = int(layers[k]), float(first[k]), float(last[k])
        if blocks and b < blocks[-1].end_us - EPS_US:
            blocks[-1].layers = sorted([*blocks[-1].layers, layer])
            blocks[-1].end_us = max(blocks[-1].end_us, e)
        else:
            blocks.append(BackwardBlock(layers=[layer], start_us=b, end_us=e))
    return blocks


def _step_peak(analysis: Analysis, mem: np.ndarray, total: np.ndarray) -> StepPeak | None:
    """The highest total (the first time it is reached), and the attribution of the memory event
    that reached it (``mem``: those events' rows, in time order)."""
    if mem.size == 0:
        return None
    k = int(np.argmax(total))
    m, ev, a = int(mem[k]), analysis.events, analysis.attr
    layer, phase, event = int(a.mem_layer[m]), int(a.mem_phase[m]), int(a.mem_event[m])
    return StepPeak(t_us=float(ev.mem_ts[m]), allocated_bytes=int(total[k]), layer=layer,
                    backward=bool(a.mem_backward[m]), phase=PHASES[phase] if layer >= 0 and phase >= 0 else None,
                    op=ev.names[int(ev.name[event])] if event >= 0 else None)


def _block_gains(t: np.ndarray, nbytes: np.ndarray, total: np.ndarray, layer: np.ndarray, begin: np.ndarray,
                 stop: np.ndarray) -> list[tuple[int, int]]:
    """(layer, peak minus the total just before) of each block that holds memory events.

    ``t`` is sorted, so each block's events are one slice, found by binary search: O((blocks +
    memory events) log) where masks over all memory events per block took 8.7 s on a 36 MB trace.
    """
    lo = np.searchsorted(t, begin, side="left")
    hi = np.searchsorted(t, stop, side="right")
    full = np.flatnonzero(hi > lo)
    if full.size == 0:
        return []
    lo, hi = lo[full], hi[full]
    base = np.where(lo > 0, total[np.maximum(lo - 1, 0)], total[lo] - nbytes[lo])
    # Python ints: the difference of two int64 totals may not fit one
    return [(la, top - b) for la, top, b in zip(layer[full].tolist(), _range_max(total, lo, hi).tolist(),
                                                 base.tolist(), strict=True)]


def _range_max(values: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``max(values[lo[k]:hi[k]])`` for every k (no slice empty), with a segment tree queried for all
    k at once: O((len(values) + len(lo)) log len(values)) however much the slices overlap."""
    size = 1 << max(0, int(values.size) - 1).bit_length()
    lowest = np.iinfo(values.dtype).min
    tree = np.full(2 * size, lowest, values.dtype)
    tree[size:size + values.size] = values
    k = size // 2
    while k >= 1:
        tree[k:2 * k] = np.maximum(tree[2 * k:4 * k:2], tree[2 * k + 1:4 * k:2])
        k //= 2
    out = np.full(lo.size, lowest, values.dtype)
    left, right = lo + size, hi + size
    while True:
        live = left < right
        if not live.any():
            return out
        take = live & (left % 2 == 1)
        out[take] = np.maximum(out[take], tree[left[take]])
        left += take
        take = live & (right % 2 == 1)
        right -= take
        out[take] = np.maximum(out[take], tree[right[take]])
        left //= 2
        right //= 2


def _track_name(analysis: Analysis, track: int) -> str:
    t = analysis.events.tracks[track]
    if t.device:
        return f"GPU {t.pid} stream {t.tid}"
    return f"CPU thread {t.tid}" + (f" (process {t.pid})" if t.pid != t.tid else "")


def timeline(
    analysis: Analysis, *, step: int | None, start_us: float | None = None, end_us: float | None = None,
    limit: int = 200_000,
) -> TimelineSlice:
    ev, a = analysis.events, analysis.attr
    step, start, end = step_window(analysis, step)
    if start_us is not None:
        start = max(start, start_us) if step is not None else start_us
    if end_us is not None:
        end = min(end, end_us) if step is not None else end_us
    if end < start:
        raise ViewError("end_us is before start_us")
    stop = ev.ts + ev.dur
    sel = (stop >= start) & (ev.ts <= end) & (ev.kind != Kind.OTHER)
    idx = np.flatnonzero(sel)
    total = int(idx.size)
    truncated = total > limit
    if truncated:
        keep = np.argsort(-ev.dur[idx], kind="stable")[:limit]
        idx = np.sort(idx[keep])
    depth = _depths(a.parent, idx)
    tracks = sorted(set(ev.track[idx].tolist()))
    track_ids = {t: k for k, t in enumerate(tracks)}
    names_used = sorted(set(ev.name[idx].tolist()))
    name_ids = {n: k for k, n in enumerate(names_used)}
    return TimelineSlice(
        step=step, start_us=start, end_us=end, truncated=bool(truncated), total_events=total,
        tracks=[TimelineTrack(id=track_ids[t], name=_track_name(analysis, t), device=analysis.events.tracks[t].device)
                for t in tracks],
        names=[ev.names[n] for n in names_used],
        phases=list(PHASES),
        events=TimelineEvents(
            track=[track_ids[t] for t in ev.track[idx].tolist()],
            start_us=np.round(ev.ts[idx], 3).tolist(),
            dur_us=np.round(ev.dur[idx], 3).tolist(),
            depth=depth,
            name=[name_ids[n] for n in ev.name[idx].tolist()],
            layer=a.layer[idx].tolist(),
            phase=a.phase[idx].tolist(),
            backward=a.backward[idx].astype(np.int8).tolist(),
            kind=[KIND_NAMES.get(k, "other") for k in ev.kind[idx].tolist()],
        ),
    )


def _depths(parent: np.ndarray, idx: np.ndarray) -> list[int]:
    """Nesting depth of each selected event among the selected events: how many enclose it.

    Pointer jumping over every event at once, log2(deepest nest) rounds of vectorised work.
    Walking up from each selected event through the left-out ones was quadratic: 56 s for a
    2.8 MB trace with 15k nested "Trace" spans. The depth is the number of selected ancestors
    because ``attribute`` puts parents before their children. On a forest the jumps end within
    log2(n) rounds; the bound only keeps a cyclic ``parent`` from looping.
    """
    n = int(parent.size)
    selected = np.zeros(n, np.bool_)
    selected[idx] = True
    up = parent.astype(np.int64)
    above = np.zeros(n, np.int64)  # selected events from an event's parent up to ``up`` (inclusive)
    live = np.flatnonzero(up >= 0)
    above[live] = selected[up[live]]
    for _ in range(n.bit_length() + 1):
        if live.size == 0:
            break
        jump = up[live]
        above[live] += above[jump]
        up[live] = up[jump]
        live = live[up[live] >= 0]
    return above[idx].tolist()
