"""Rank selections (``0-7,512``): ``parse_ranks`` turns a spec into sorted, merged inclusive ranges
or a clear ValueError, and ``select_ranks`` keeps a run's traces of the selected ranks, a worker's
rank read from its name or else its position. The tests parse specs by hand, hostile ones
included, and select from runs built from hand-written ``TraceFile`` listings."""

from __future__ import annotations

import re

import pytest

from tb_attn_plugin.engine.ranksel import MAX_RANK_SPEC, RankSet, file_ranks, parse_ranks, select_ranks
from tb_attn_plugin.trace.discover import Run, TraceFile
from tb_attn_plugin.trace.io import FileInfo
from tb_attn_plugin.vocab.ranks import MAX_WORLD_SIZE


def _run(*files: tuple[str, str], name: str = "r") -> Run:
    """A run of (worker, file name) traces, each of 10 bytes."""
    traces = tuple(TraceFile(f"/logs/{name}/{file}", file, worker, None, 10, 1.0)
                   for worker, file in sorted(files))
    return Run(name=name, path=f"/logs/{name}", files=traces,
               metadata_file=FileInfo(f"/logs/{name}/tb_attn_run.json", 7, 2.0),
               event_files=(FileInfo(f"/logs/{name}/events.out.tfevents.1", 5, 3.0),))


def _ranked(*ranks: int) -> Run:
    return _run(*((f"host_rank{r}", f"host_rank{r}.1.pt.trace.json") for r in ranks))


# -- parsing -----------------------------------------------------------------------------------

@pytest.mark.parametrize(("spec", "ranges"), [
    ("5", ((5, 5),)),
    ("0-3,7", ((0, 3), (7, 7))),
    ("7,0-3", ((0, 3), (7, 7))),  # sorted
    ("0-3,4-5", ((0, 5),)),  # adjacent ranges join: 3 and 4 leave no gap
    ("0-3,5", ((0, 3), (5, 5))),  # 4 is missing: two ranges
    ("0-10,2-3", ((0, 10),)),  # a range inside another
    ("2-6,0-3", ((0, 6),)),  # overlapping, out of order
    ("1,1,1", ((1, 1),)),
    ("4-4", ((4, 4),)),
    (" 1 - 2 , 9 ", ((1, 2), (9, 9))),  # spaces around numbers and dashes
    ("1,,2,", ((1, 2),)),  # empty parts are skipped
    (f"0-{MAX_WORLD_SIZE - 1}", ((0, MAX_WORLD_SIZE - 1),)),  # the largest rank there can be
])
def test_specs_parse_to_sorted_merged_ranges(spec: str, ranges: tuple[tuple[int, int], ...]) -> None:
    assert parse_ranks(spec).ranges == ranges


@pytest.mark.parametrize(("spec", "words"), [
    ("", "empty rank selection"),
    (" , ,", "empty rank selection"),
    ("x", "bad rank selection 'x'"),
    ("1.5", "bad rank selection '1.5'"),
    ("0x10", "bad rank selection '0x10'"),
    ("+3", "bad rank selection '+3'"),  # the grammar is digits: int() alone would take these three
    ("1_000", "bad rank selection '1_000'"),
    ("\u0663", "bad rank selection"),  # ARABIC-INDIC DIGIT THREE
    ("nan", "bad rank selection"),
    ("1-", "bad rank selection '1-'"),
    ("-3", "bad rank selection '-3'"),  # a dash with no low end, not a negative rank
    ("1-2-3", "bad rank selection '1-2-3'"),
    ("1;2", "bad rank selection '1;2'"),
    ("1 2", "bad rank selection '1 2'"),
    ("5-2", "bad rank range '5-2'"),  # high before low
    ("1--2", "bad rank selection '1--2'"),  # "-2" is no rank
    (str(MAX_WORLD_SIZE), "bad rank range"),  # one past the largest
    (f"0-{MAX_WORLD_SIZE}", "bad rank range"),
    ("9" * 4000, "bad rank range"),  # a number of 4000 digits: parsed, then out of range
])
def test_bad_specs_raise_a_value_error_that_says_what_is_wrong(spec: str, words: str) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(words)):
        parse_ranks(spec)


def test_a_spec_is_bounded_in_length() -> None:
    at_bound = ",".join(["1"] * ((MAX_RANK_SPEC + 1) // 2))  # "1,1,...,1": 2n - 1 characters
    assert len(at_bound) == MAX_RANK_SPEC - 1 and parse_ranks(at_bound).ranges == ((1, 1),)
    assert parse_ranks(at_bound + " ").ranges == ((1, 1),)  # exactly MAX_RANK_SPEC characters
    with pytest.raises(ValueError, match=f"at most {MAX_RANK_SPEC} characters"):
        parse_ranks(at_bound + "  ")


def test_a_spec_reads_back_as_the_same_selection() -> None:
    selection = parse_ranks("9, 3-5, 4, 6, 100-101")  # 3-5 and 6 join; 4 is inside
    assert selection.spec == "3-6,9,100-101"
    assert parse_ranks(selection.spec) == selection


def test_membership_is_inclusive_at_both_ends_and_only_for_ints() -> None:
    selection = parse_ranks("2-4,8")
    assert [r for r in range(10) if r in selection] == [2, 3, 4, 8]
    assert "3" not in selection and 3.0 not in selection and None not in selection


def test_a_rank_set_of_given_ranks_joins_consecutive_ones() -> None:
    assert RankSet.of([5, 3, 4, 9, 9, 11, 10]).ranges == ((3, 5), (9, 11))
    assert RankSet.of(range(0)).ranges == () and RankSet.of(()).spec == ""
    assert RankSet.of([7]).spec == "7"
    assert RankSet.of([0, 2, 4]) == parse_ranks("4,2,0")


# -- ranks of a run's workers ------------------------------------------------------------------

def test_ranks_come_from_the_workers_names() -> None:
    run = _ranked(10, 2, 7)
    assert file_ranks(run) == {"host_rank10": 10, "host_rank2": 2, "host_rank7": 7}


def test_a_rank_may_come_from_the_file_name_when_the_worker_has_none() -> None:
    """Other tools name files ``trace_rank-3.json``; the worker's first file is read."""
    run = _run(("a", "trace_rank-3.json"), ("b", "trace_rank-1.json"))
    assert file_ranks(run) == {"a": 3, "b": 1}


def test_accelerates_process_index_is_the_rank() -> None:
    """Accelerate writes ``profile_<process index>.json``: ranks by the names, not by the workers'
    order (in which profile_10 comes before profile_2)."""
    run = _run(*((f"profile_{i}", f"profile_{i}.json") for i in (0, 1, 2, 10)))
    assert file_ranks(run) == {"profile_0": 0, "profile_1": 1, "profile_10": 10, "profile_2": 2}
    four = _run(*((f"profile_{i}", f"profile_{i}.json") for i in range(4)))
    assert [f.name for f in select_ranks(four, parse_ranks("1,3")).files] == ["profile_1.json", "profile_3.json"]


def test_workers_without_ranks_in_their_names_are_numbered_in_sorted_order() -> None:
    run = _run(("host_222", "host_222.1.pt.trace.json"), ("host_111", "host_111.1.pt.trace.json"),
               ("host_333", "host_333.1.pt.trace.json"))
    assert file_ranks(run) == {"host_111": 0, "host_222": 1, "host_333": 2}


def test_one_worker_without_a_rank_numbers_them_all_by_position() -> None:
    run = _run(("host_rank5", "host_rank5.1.pt.trace.json"), ("plain", "plain.1.pt.trace.json"))
    assert file_ranks(run) == {"host_rank5": 0, "plain": 1}


def test_two_workers_naming_the_same_rank_are_numbered_by_position() -> None:
    run = _run(("a_rank1", "a_rank1.1.pt.trace.json"), ("b_rank1", "b_rank1.1.pt.trace.json"))
    assert file_ranks(run) == {"a_rank1": 0, "b_rank1": 1}


def test_a_rank_past_the_world_size_bound_counts_as_no_rank() -> None:
    huge = f"host_rank{MAX_WORLD_SIZE}"
    run = _run((huge, f"{huge}.1.pt.trace.json"), ("host_rank0", "host_rank0.1.pt.trace.json"))
    # Positions in sorted order: after the shared "host_rank", "0" sorts before "1048576".
    assert file_ranks(run) == {"host_rank0": 0, huge: 1}


def test_a_run_without_traces_has_no_ranks() -> None:
    assert file_ranks(_run()) == {}


# -- selection ---------------------------------------------------------------------------------

def test_selection_keeps_every_span_of_the_selected_ranks_and_nothing_else() -> None:
    run = _run(*((f"host_rank{r}", f"host_rank{r}.{span}.pt.trace.json") for r in range(6) for span in (1, 2)))
    picked = select_ranks(run, parse_ranks("1,4-5,900"))  # 900: no such rank, nothing to keep
    assert [f.name for f in picked.files] == [
        "host_rank1.1.pt.trace.json", "host_rank1.2.pt.trace.json",
        "host_rank4.1.pt.trace.json", "host_rank4.2.pt.trace.json",
        "host_rank5.1.pt.trace.json", "host_rank5.2.pt.trace.json"]
    # The rest of the run is as it was: its name, metadata and event files.
    assert (picked.name, picked.path, picked.metadata_file, picked.event_files) == \
        (run.name, run.path, run.metadata_file, run.event_files)
    assert len(run.files) == 12  # the given run is not changed


def test_no_selection_is_the_run_itself() -> None:
    run = _ranked(0, 1)
    assert select_ranks(run, None) is run


def test_a_selection_of_positions_on_unranked_workers() -> None:
    run = _run(("b_pid", "b_pid.1.pt.trace.json"), ("a_pid", "a_pid.1.pt.trace.json"), ("c_pid", "c_pid.json"))
    assert [f.worker for f in select_ranks(run, parse_ranks("0,2")).files] == ["a_pid", "c_pid"]


def test_a_selection_that_matches_nothing_leaves_no_files() -> None:
    assert select_ranks(_ranked(0, 1, 2), parse_ranks("3-9")).files == ()
