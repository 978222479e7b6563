"""Nesting of events on one track, in numpy: each event's parent, its nearest marked ancestor,
and the size of its subtree, all by pointer jumping (no per-event Python loop). The attribution
builds the event tree with these; inference and the drill-down walk it with
``nearest_marked_ancestor``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["EPS_US", "nearest_marked_ancestor", "or_self", "parents", "subtree_sizes"]

EPS_US = 1e-3  # timestamps are rounded to the nanosecond when written
I32 = npt.NDArray[np.int32]
F64 = npt.NDArray[np.float64]
B = npt.NDArray[np.bool_]


def parents(track: I32, end: F64) -> I32:
    """The parent (a position in these arrays, -1: none) of each event of one kind, given in
    (track, start, longest first) order. Invariant: every event strictly between an event and
    its candidate is one it ends after; so when the candidate is one it ends after too, the
    candidate's own candidate is the next to try."""
    k = track.size
    cand = np.arange(-1, k - 1, dtype=np.int32)
    if k:
        cand[1:][track[1:] != track[:-1]] = -1
    todo = np.flatnonzero(cand >= 0)
    while todo.size:
        todo = todo[end[todo] > end[cand[todo]] + EPS_US]  # still ends after its candidate
        cand[todo] = cand[cand[todo]]
        todo = todo[cand[todo] >= 0]
    return cand


def nearest_marked_ancestor(par: npt.NDArray[Any], marked: B) -> npt.NDArray[Any]:
    """Each event's nearest strict ancestor that is marked, -1: none (``par``: each event's
    parent, -1: none). Invariant: no event strictly between an event and its pointer is marked."""
    near = par.copy()
    todo = np.flatnonzero(near >= 0)
    todo = todo[~marked[near[todo]]]
    while todo.size:
        near[todo] = near[near[todo]]
        todo = todo[near[todo] >= 0]
        todo = todo[~marked[near[todo]]]
    return near


def or_self(near: npt.NDArray[Any], marked: B) -> npt.NDArray[Any]:
    """``near`` where an event is not marked itself, else the event."""
    return np.where(marked, np.arange(marked.size, dtype=near.dtype), near)


def subtree_sizes(par: I32) -> I32:
    """Each event and its descendants, counted: added up level by level, deepest first."""
    k = par.size
    # Depth by pointer jumping: ``hops`` is the distance to ``up``, or to the root once ``up``
    # is -1 (a root's is 0), so a jump adds the pointer's own.
    up = par.copy()
    hops = (up >= 0).astype(np.int32)
    todo = np.flatnonzero(up >= 0)
    while todo.size:
        nxt = up[todo]
        hops[todo] += hops[nxt]
        up[todo] = up[nxt]
        todo = todo[up[todo] >= 0]
    depth = hops
    size = np.ones(k, np.int32)
    order = np.argsort(-depth, kind="stable")
    levels = np.flatnonzero(np.diff(depth[order])) + 1
    for idx in np.split(order, levels):
        if not idx.size or depth[idx[0]] == 0:  # no events: np.split gives one empty level
            break
        np.add.at(size, par[idx], size[idx])
    return size
