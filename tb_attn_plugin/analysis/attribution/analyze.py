"""Analyze one trace: attribute its events, and find attention where it carries no scopes.

``analyze(events)`` is the step between decoding and every figure: the summary, the findings
and the views all read the ``Analysis`` it returns. Where a trace has no tb-attn scopes,
``analysis.infer`` finds attention from module names and op patterns, and the trace is
attributed again with those scopes added; the analysis says so in its notes. Where scoped
blocks hold ops outside phase scopes (``runner.instrument()`` on a real model), ``analysis.roles``
places them in phases by their role, and the trace is attributed again with those added. A scoped
trace is read without other tools' labels around modules (PyTorch Lightning's, which its hooks
close out of order with our scopes'): the scopes say where attention is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tb_attn_plugin.analysis.attribution.attribute import Attribution, attribute
from tb_attn_plugin.analysis.attribution.inference.infer import infer_scopes
from tb_attn_plugin.analysis.attribution.inference.module_calls import module_labels
from tb_attn_plugin.analysis.attribution.replays import place_replay_kernels
from tb_attn_plugin.analysis.attribution.roles import role_scopes
from tb_attn_plugin.analysis.common.bounds import merge_diagnostics
from tb_attn_plugin.analysis.common.wording import layer_list
from tb_attn_plugin.trace.events import Events
from tb_attn_plugin.trace.kineto import Kind

__all__ = ["Analysis", "analyze"]


@dataclass(frozen=True, eq=False)
class Analysis:
    """A trace's events (with synthetic scopes where attention was inferred) and their attribution."""

    events: Events
    attr: Attribution
    inferred: bool
    notes: tuple[str, ...]
    diagnostics: dict[str, int] = field(default_factory=dict)  # the decoder's, attribution's and inference's
    #: Inferred layers found by their core alone, no projection around it (``analysis.extent``):
    #: their figures cover the core only.
    core_only: frozenset[int] = frozenset()

    @property
    def nbytes(self) -> int:
        a = self.attr
        return self.events.nbytes + sum(x.nbytes for x in (a.parent, a.layer, a.head, a.phase, a.step, a.backward,
                                                            a.is_scope, a.flops, a.mem_layer, a.mem_phase))


def analyze(events: Events) -> Analysis:
    """Attribute events; infer attention where the trace has no tb-attn scopes."""
    attr = attribute(events)
    if attr.is_scope.any():
        labels = module_labels(events)
        if labels.any():  # scopes win: other tools' module labels are left out, as if never written
            events = _without(events, ~labels)
            attr = attribute(events)
        roles = role_scopes(events, attr)
        if roles:  # ops of scoped blocks outside phase scopes, placed by their role
            events = with_annotations(events, [(s.track, s.ts, s.dur, s.name) for s in roles])
            attr = attribute(events)
        return Analysis(events, attr, False, (), merge_diagnostics(events.diagnostics, attr.diagnostics))
    found: dict[str, int] = {}
    synthetic, core_only, missing = infer_scopes(events, attr.parent, attr.backward, attr.step, diagnostics=found)
    if synthetic:
        events = with_annotations(events, [(s.track, s.ts, s.dur, s.name) for s in synthetic])
        attr = attribute(events)
    # Attention a graph replay ran has no op in the trace: its kernels are read by name.
    scoped = frozenset(int(x) for x in np.unique(attr.layer[attr.is_scope & (attr.layer >= 0)]).tolist())
    replayed = place_replay_kernels(events, attr).layers - scoped
    if not synthetic and not replayed:
        return Analysis(events, attr, False, ("no attention found in this trace",),
                        merge_diagnostics(events.diagnostics, attr.diagnostics, found))
    how = "module names and op patterns" if synthetic else "the kernels its graph replays ran"
    notes = (f"no tb-attn scopes in this trace: attention was inferred from {how}", *_core_only_notes(missing))
    return Analysis(events, attr, True, notes, merge_diagnostics(events.diagnostics, attr.diagnostics, found),
                    core_only | replayed)


def _core_only_notes(missing: dict[int, str]) -> list[str]:
    """Why the layers found by their core are marked core only: one line per reason."""
    by_why: dict[str, list[int]] = {}
    for layer, why in sorted(missing.items()):
        by_why.setdefault(why, []).append(layer)
    return [f"{layer_list(layers).capitalize()}: the attention core only ({why})" for why, layers in by_why.items()]


def with_annotations(events: Events, rows: list[tuple[int, float, float, str]]) -> Events:
    """A copy of ``events`` with extra annotation events (track, ts, dur, name), re-sorted."""
    if not rows:
        return events
    names = list(events.names)
    ids = {n: i for i, n in enumerate(names)}
    extra_name = []
    for _, _, _, label in rows:
        if label not in ids:
            ids[label] = len(names)
            names.append(label)
        extra_name.append(ids[label])
    k = len(rows)

    def cat(a: np.ndarray, b: list[Any] | np.ndarray, dtype: Any) -> np.ndarray:
        return np.concatenate([a, np.asarray(b, dtype=dtype)])

    name = cat(events.name, extra_name, np.int32)
    kind = cat(events.kind, [int(Kind.ANNOTATION)] * k, np.int8)
    track = cat(events.track, [r[0] for r in rows], np.int32)
    ts = cat(events.ts, [r[1] for r in rows], np.float64)
    dur = cat(events.dur, [r[2] for r in rows], np.float64)
    minus = [-1] * k
    order = _merged_order(events, track[len(events):], ts[len(events):], dur[len(events):])
    return Events(
        names=tuple(names), tracks=events.tracks, shapes=events.shapes,
        name=name[order], kind=kind[order], track=track[order], ts=ts[order], dur=dur[order],
        ext=cat(events.ext, minus, np.int64)[order], corr=cat(events.corr, minus, np.int64)[order],
        seq=cat(events.seq, minus, np.int64)[order],
        shape=cat(events.shape, minus, np.int32)[order], graph=cat(events.graph, minus, np.int64)[order],
        mem_ts=events.mem_ts, mem_track=events.mem_track, mem_bytes=events.mem_bytes, mem_total=events.mem_total,
        mem_device_type=events.mem_device_type, mem_device_id=events.mem_device_id,
        meta=events.meta, diagnostics=events.diagnostics,
    )


def _without(events: Events, keep: np.ndarray) -> Events:
    """A copy of ``events`` with only the complete events ``keep`` marks (the memory events all)."""
    return Events(
        names=events.names, tracks=events.tracks, shapes=events.shapes,
        name=events.name[keep], kind=events.kind[keep], track=events.track[keep], ts=events.ts[keep],
        dur=events.dur[keep], ext=events.ext[keep], corr=events.corr[keep], seq=events.seq[keep],
        shape=events.shape[keep], graph=events.graph[keep],
        mem_ts=events.mem_ts, mem_track=events.mem_track, mem_bytes=events.mem_bytes, mem_total=events.mem_total,
        mem_device_type=events.mem_device_type, mem_device_id=events.mem_device_id,
        meta=events.meta, diagnostics=events.diagnostics,
    )


def _merged_order(events: Events, track: np.ndarray, ts: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """The order that sorts ``events`` followed by the new rows (``track``, ``ts``, ``dur``)
    by (track, start, longest first), ties in that order: what a stable
    ``np.lexsort((-dur, ts, track))`` of the concatenation gives, without sorting the events,
    which are sorted already. Each new row goes after the events whose key is not greater."""
    n, k = len(events), track.size
    new = np.lexsort((-dur, ts, track))
    track, ts, dur = track[new], ts[new], dur[new]
    at = np.empty(k, np.int64)  # how many events come before each new row
    for t in np.unique(track).tolist():
        rows = np.flatnonzero(track == t)
        lo, hi = (int(x) for x in np.searchsorted(events.track, [t, t + 1]))
        seg_ts = events.ts[lo:hi]
        left = np.searchsorted(seg_ts, ts[rows], side="left")
        right = np.searchsorted(seg_ts, ts[rows], side="right")
        at[rows] = lo + left
        for r in np.flatnonzero(right > left).tolist():  # equal starts: after the events at least as long
            a, b = lo + int(left[r]), lo + int(right[r])
            at[rows[r]] = a + int(np.searchsorted(-events.dur[a:b], -dur[rows[r]], side="right"))
    order = np.empty(n + k, np.int64)
    placed = at + np.arange(k)
    rest = np.ones(n + k, np.bool_)
    rest[placed] = False
    order[rest] = np.arange(n)
    order[placed] = n + new
    return order
