"""``analysis.nesting``: each event's parent on its track, its nearest marked ancestor and its
subtree size, all by pointer jumping. Checked on small trees drawn by hand, whose parents, marks and
sizes are read off the drawing, and on long chains whose answers are arithmetic."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from tb_attn_plugin.analysis.attribution.nesting import EPS_US, nearest_marked_ancestor, or_self, parents, subtree_sizes


def _i32(values: list[int]) -> npt.NDArray[np.int32]:
    return np.array(values, np.int32)


def _f64(values: list[float]) -> npt.NDArray[np.float64]:
    return np.array(values, np.float64)


def _b(values: list[int]) -> npt.NDArray[np.bool_]:
    return np.array(values, np.bool_)


# Two tracks, in (track, start, longest first) order, as intervals [start, end):
#   track 0:  0 A [0, 100)   1 B [10, 50)   2 C [20, 30)   3 D [60, 90)   4 E [95, 100)
#   track 1:  5 F [0, 40)    6 G [5, 20)
# A holds B and D and E; B holds C; F holds G. Nothing crosses the track boundary.
TRACK = _i32([0, 0, 0, 0, 0, 1, 1])
END = _f64([100, 50, 30, 90, 100, 40, 20])
PARENT = [-1, 0, 1, 0, 0, -1, 5]


def test_parents_of_a_tree_drawn_by_hand() -> None:
    assert parents(TRACK, END).tolist() == PARENT


def test_a_new_track_starts_without_a_parent() -> None:
    """F (track 1) ends before E, the event before it (track 0), and would nest in it on one track."""
    same = np.zeros(7, np.int32)
    assert parents(same, END).tolist()[5] == 4  # on one track F (end 40) is E's (end 100) child
    assert parents(TRACK, END).tolist()[5] == -1


def test_an_end_within_the_rounding_tolerance_still_nests() -> None:
    """Timestamps are rounded to the nanosecond: a child that ends up to ``EPS_US`` after its parent
    is still inside it; one that ends later is not, and climbs to the next ancestor that holds it."""
    track = _i32([0, 0, 0])
    assert parents(track, _f64([100, 50, 50 + EPS_US / 2])).tolist() == [-1, 0, 1]
    assert parents(track, _f64([100, 50, 50 + EPS_US])).tolist() == [-1, 0, 1]  # the bound itself: inside
    assert parents(track, _f64([100, 50, 50 + 3 * EPS_US])).tolist() == [-1, 0, 0]  # past it: A's child
    assert parents(track, _f64([100, 50, 200])).tolist() == [-1, 0, -1]  # ends after every one: a root


def test_siblings_after_a_deep_nest_climb_back_to_their_parent() -> None:
    """A chain 0 > 1 > ... > 9, then event 10 ending between event 2's end and event 3's: its parent
    is event 2, found by jumping over the seven events it ends after."""
    ends = [1000.0 - 10 * k for k in range(10)] + [975.0]  # event k ends at 1000 - 10k; 980 > 975 > 970
    par = parents(np.zeros(11, np.int32), _f64(ends))
    assert par.tolist() == [-1, *range(9), 2]


def test_a_long_chain_is_nested_one_inside_the_next() -> None:
    n = 5000
    ends = _f64([float(n - k) for k in range(n)])  # each ends one before the one above it
    par = parents(np.zeros(n, np.int32), ends)
    assert par.tolist() == list(range(-1, n - 1))
    assert subtree_sizes(par).tolist() == [n - k for k in range(n)]  # event k holds the n - k - 1 below it


def test_no_events_no_parents() -> None:
    assert parents(_i32([]), _f64([])).tolist() == []
    assert nearest_marked_ancestor(_i32([]), _b([])).tolist() == []


def test_nearest_marked_ancestor_is_strict_and_skips_unmarked_ones() -> None:
    par = _i32(PARENT)
    # Mark A and B: C's nearest is B (its parent), B's and D's and E's is A, A's none (strict).
    marked = _b([1, 1, 0, 0, 0, 0, 0])
    assert nearest_marked_ancestor(par, marked).tolist() == [-1, 0, 1, 0, 0, -1, -1]
    # Mark A alone: C climbs past the unmarked B to A.
    assert nearest_marked_ancestor(par, _b([1, 0, 0, 0, 0, 0, 0])).tolist() == [-1, 0, 0, 0, 0, -1, -1]
    # Mark C alone (a leaf): nobody has it above them.
    assert nearest_marked_ancestor(par, _b([0, 0, 1, 0, 0, 0, 0])).tolist() == [-1] * 7
    # Mark F: G's is F, track 0 sees none.
    assert nearest_marked_ancestor(par, _b([0, 0, 0, 0, 0, 1, 0])).tolist() == [-1, -1, -1, -1, -1, -1, 5]


def test_nearest_marked_ancestor_keeps_the_parents_dtype_and_leaves_them_alone() -> None:
    par = np.array(PARENT, np.int64)
    before = par.copy()
    near = nearest_marked_ancestor(par, _b([1, 0, 0, 0, 0, 0, 0]))
    assert near.dtype == np.int64 and par.tolist() == before.tolist()  # works on a copy


def test_nearest_marked_ancestor_on_a_long_chain_with_every_tenth_marked() -> None:
    n = 1000
    par = _i32(list(range(-1, n - 1)))
    marked = np.arange(n) % 10 == 0
    near = nearest_marked_ancestor(par, marked)
    # Event k's nearest strict ancestor that is a multiple of 10: 10 * ((k - 1) // 10), none for k = 0.
    assert near.tolist() == [-1] + [10 * ((k - 1) // 10) for k in range(1, n)]


def test_or_self_puts_a_marked_event_in_its_own_place() -> None:
    near = _i32([-1, 0, 1, 0, 0, -1, 5])
    marked = _b([0, 0, 1, 0, 1, 0, 0])
    assert or_self(near, marked).tolist() == [-1, 0, 2, 0, 4, -1, 5]
    assert or_self(near, marked).dtype == np.int32


def test_subtree_sizes_of_a_tree_drawn_by_hand() -> None:
    # A: itself, B, C, D, E = 5; B: itself and C = 2; leaves 1; F: itself and G = 2.
    assert subtree_sizes(_i32(PARENT)).tolist() == [5, 2, 1, 1, 1, 2, 1]


def test_subtree_sizes_of_roots_alone_are_one_each() -> None:
    assert subtree_sizes(_i32([-1, -1, -1])).tolist() == [1, 1, 1]


def test_subtree_sizes_of_a_wide_and_deep_tree() -> None:
    """A root with 3 children, each holding a chain of 4: 1 + 3 * (1 + 4) = 16 events."""
    par = [-1]
    for _ in range(3):
        top = len(par)
        par.append(0)
        par += [top + k for k in range(4)]  # the chain below this child, each under the previous one
    sizes = subtree_sizes(_i32(par)).tolist()
    assert sizes[0] == 16
    assert [sizes[i] for i in (1, 6, 11)] == [5, 5, 5]
    assert sizes[2:6] == [4, 3, 2, 1]


def test_subtree_sizes_of_no_events_is_empty() -> None:
    assert subtree_sizes(_i32([])).tolist() == []
