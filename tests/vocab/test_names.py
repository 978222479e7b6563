"""The trace-file grammar: the runner names files by it, and the plugin reads them by it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tb_attn_plugin.trace.discover import find_runs
from tb_attn_plugin.trace.io import FileInfo
from tb_attn_plugin.vocab.names import (
    CANDIDATE_NAME_RE,
    METADATA_FILE,
    TRACE_NAME_RE,
    TRACE_PATTERNS,
    display_name,
    encodable,
    parse_candidate_name,
    parse_trace_name,
    trace_file_name,
)


@pytest.mark.parametrize("worker", ["host_123", "host-a_rank3", "a.b.c", "w.5", "7", "ünï code", "x.pt"])
@pytest.mark.parametrize("gz", [False, True])
def test_a_written_name_reads_back(worker: str, gz: bool) -> None:
    name = trace_file_name(worker, 1700000000000000000, gz=gz)
    assert name.endswith(".pt.trace.json.gz" if gz else ".pt.trace.json")
    assert parse_trace_name(name) == (worker, "1700000000000000000")


@pytest.mark.parametrize(("worker", "span"), [(".hidden", 1), ("", 1), ("a\nb", 1), ("w", "x1"), ("w", -1)])
def test_a_name_the_plugin_could_not_read_back_is_refused(worker: str, span: int | str) -> None:
    with pytest.raises(ValueError, match="cannot name a trace"):
        trace_file_name(worker, span)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("w.pt.trace.json", ("w", None)),  # no span: other tools write these, and they are traces
        ("w.1.pt.trace.json.gz", ("w", "1")),
        (".w.1.pt.trace.json", None),  # hidden
        (".w.1.pt.trace.json.tmp", None),  # the runner's temporary file
        ("w.1.pt.trace.json.tmp", None),
        ("w.1.pt.trace.json.gz.tmp", None),
        (METADATA_FILE, None),
    ],
)
def test_trace_names(name: str, expected: tuple[str, str | None] | None) -> None:
    assert parse_trace_name(name) == expected
    assert bool(TRACE_NAME_RE.match(name)) == (expected is not None)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("profile_0.json", ("profile_0", None)),  # Accelerate's, one per process
        ("profile_12.json.gz", ("profile_12", None)),
        ("rank3.1700000000.json.gz", ("rank3", "1700000000")),  # the span read as a trace name's is
        ("trace.json", ("trace", None)),  # export_chrome_trace("trace.json")
        ("a.b.12.json", ("a.b", "12")),  # the shortest worker, dots and all
        ("12.json", ("12", None)),
        ("config.json", ("config", None)),  # a candidate: its content says no
        ("w.1.pt.trace.json", None),  # a trace by its name, not a candidate
        ("w.pt.trace.json.gz", None),
        (METADATA_FILE, None),
        (".profile_0.json", None),  # hidden
        (".json", None),
        ("x.json.tmp", None),
        ("x.jsonl", None),
        ("x.json.gz.part", None),
        ("x.gz", None),
        ("events.out.tfevents.1.host", None),
    ],
)
def test_candidate_names(name: str, expected: tuple[str, str | None] | None) -> None:
    assert parse_candidate_name(name) == expected
    # A name is a trace name, a candidate or neither: never both.
    assert not (parse_candidate_name(name) is not None and parse_trace_name(name) is not None)
    if expected is not None:
        assert CANDIDATE_NAME_RE.match(name)


def test_the_patterns_in_words_name_both_kinds() -> None:
    assert TRACE_PATTERNS == "*.pt.trace.json[.gz], or *.json[.gz] written by torch.profiler"


class _Profile:
    """Exports a complete (if empty) trace, as torch.profiler does."""

    def export_chrome_trace(self, path: str) -> None:
        Path(path).write_text(json.dumps({"traceEvents": [], "traceName": path}))


def test_the_runner_writes_what_the_plugin_reads(tmp_path: Path) -> None:
    from runner.metadata import METADATA_FILE as RUNNER_METADATA
    from runner.traces import TRACE_FILE_RE, trace_handler

    # One pattern: every name is a trace to both or to neither (they differed on these).
    for name in ("w.pt.trace.json", ".w.1.pt.trace.json", "w.1.pt.trace.json", "w.1.pt.trace.json.tmp"):
        assert bool(TRACE_FILE_RE.match(name)) == (parse_trace_name(name) is not None), name
    assert RUNNER_METADATA == METADATA_FILE
    for gz in (False, True):
        trace_handler(tmp_path, "host_rank0", use_gzip=gz)(_Profile())  # type: ignore[arg-type]
    (run,) = find_runs(str(tmp_path), [FileInfo(str(p), p.stat().st_size, 0.0) for p in tmp_path.iterdir()])
    assert [(f.worker, f.span is not None) for f in run.files] == [("host_rank0", True)] * 2
    with pytest.raises(ValueError, match="cannot name a trace"):
        trace_handler(tmp_path, ".hidden")


# -- display names ---------------------------------------------------------------------------------

_PIECES = ["\\", "x", "ff", "u00e9", "\udcff", "\udc80", "a", "/", "é"]


@given(st.lists(st.sampled_from(_PIECES), max_size=8), st.lists(st.sampled_from(_PIECES), max_size=8))
def test_display_names_are_one_to_one_and_encodable(a: list[str], b: list[str]) -> None:
    """Names built from the pieces that could collide: a byte and its escape's text, backslashes."""
    one, other = "".join(a), "".join(b)
    display_name(one).encode("utf-8")  # raises if it is not encodable
    if one != other:
        assert display_name(one) != display_name(other)


def test_display_names_keep_ordinary_backslashes_and_mark_the_ambiguous_ones() -> None:
    assert display_name("r\udcff") == "r\\xff"
    assert display_name("r\\xff") == "r\\\\xff"
    assert display_name("exp/a\\b") == "exp/a\\b" and display_name("a\\") == "a\\"
    assert display_name("plain/é") == "plain/é"
    assert encodable("r\\xff") == "r\\xff"  # text, not a name: left as it is
