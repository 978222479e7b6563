"""A trace's rank and world size (``vocab.ranks.rank_of``): from ``distributedInfo``, else from its
worker's or file's name, within ``MAX_WORLD_SIZE``."""

from __future__ import annotations

import pytest

from tb_attn_plugin.vocab.ranks import MAX_WORLD_SIZE, RANK_OUT_OF_RANGE, rank_of


@pytest.mark.parametrize(("worker", "file", "rank"), [
    ("host_rank3", "host_rank3.1.pt.trace.json", 3),  # our runner's
    ("trace", "trace_rank-3.json", 3),  # others', from the file name
    ("profile_3", "profile_3.json", 3),  # Accelerate's process index: the whole worker name
    ("profile_12", "profile_12.json.gz", 12),
    ("host_1234", "host_1234.1.pt.trace.json", None),  # tensorboard_trace_handler's host_<pid>: a pid
    ("myprofile_3", "myprofile_3.json", None),
    ("profile_3_final", "profile_3_final.json", None),
    ("Profile_3", "Profile_3.json", None),
])
def test_a_rank_from_the_names(worker: str, file: str, rank: int | None) -> None:
    assert rank_of(None, worker, file) == (rank, None)


def test_a_named_rank_past_the_bound_is_ignored_and_counted() -> None:
    diagnostics: dict[str, int] = {}
    assert rank_of(None, f"profile_{MAX_WORLD_SIZE}", "x.json", diagnostics=diagnostics) == (None, None)
    assert diagnostics == {RANK_OUT_OF_RANGE: 1}
    # The trace's distributedInfo comes first.
    assert rank_of({"rank": 5, "world_size": 8}, "profile_3", "profile_3.json") == (5, 8)


def test_distributed_info_out_of_bounds_is_ignored_and_counted() -> None:
    diagnostics: dict[str, int] = {}
    # a bool is no rank, and a world of 0 ranks is none: both ignored, both counted, and no name to fall back on
    assert rank_of({"rank": True, "world_size": 0}, "worker", "worker.json", diagnostics=diagnostics) == (None, None)
    assert diagnostics == {RANK_OUT_OF_RANGE: 2}
    assert rank_of({"rank": MAX_WORLD_SIZE - 1, "world_size": MAX_WORLD_SIZE}, "w", "w.json") == (
        MAX_WORLD_SIZE - 1, MAX_WORLD_SIZE)
