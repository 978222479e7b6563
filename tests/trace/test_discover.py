"""Run discovery (``trace/discover.py``): a recursive listing grouped into runs (directories that hold
trace files: by name, or candidates whose content the caller found to be traces), each with its
workers and spans in order, its metadata file and its TensorBoard event files. Logdirs are built
with ``tmp_path`` and listed by ``io.list_tree``, as the plugin lists them; object-store listings,
which only ``find_runs`` sees, are written by hand.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tb_attn_plugin.trace import io
from tb_attn_plugin.trace.discover import EVENT_FILE_MARK, MAX_EVENT_FILES, Run, candidates, find_runs
from tb_attn_plugin.trace.io import FileInfo


def _touch(root: Path, *relative: str, size: int = 2) -> None:
    for rel in relative:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x" * size)


def _runs(root: Path) -> list[Run]:
    return find_runs(str(root), io.list_tree(str(root)))


def test_runs_are_the_directories_that_hold_traces_named_relative_to_the_logdir(tmp_path: Path) -> None:
    _touch(tmp_path, "top.1.pt.trace.json", "a/w.1.pt.trace.json", "a/b/w.1.pt.trace.json.gz", "c/notes.txt",
           "d/tb_attn_run.json", "e/events.out.tfevents.1.host", "f/w.1.pt.trace.json.tmp")
    runs = _runs(tmp_path)
    # c, d, e and f hold no trace: a metadata file, event files or a temporary file alone make no run.
    assert [(r.name, r.path) for r in runs] == [(".", str(tmp_path)), ("a", str(tmp_path / "a")),
                                                ("a/b", str(tmp_path / "a" / "b"))]
    assert [f.name for f in runs[2].files] == ["w.1.pt.trace.json.gz"]


def test_a_logdir_given_with_a_trailing_slash_names_runs_the_same(tmp_path: Path) -> None:
    _touch(tmp_path, "x/w.1.pt.trace.json", "w.2.pt.trace.json")
    assert [r.name for r in find_runs(str(tmp_path) + "/", io.list_tree(str(tmp_path)))] == [".", "x"]


def test_files_are_ordered_by_worker_then_span_as_a_number(tmp_path: Path) -> None:
    _touch(tmp_path, "w.10.pt.trace.json", "w.9.pt.trace.json.gz", "w.9.pt.trace.json", "w.pt.trace.json",
           "a.b.5.pt.trace.json", "rank1.2.pt.trace.json")
    (run,) = _runs(tmp_path)
    # Span 9 before 10 (numbers, not text); no span (-1) first; equal worker and span: by name.
    assert [(f.worker, f.span, f.name) for f in run.files] == [
        ("a.b", "5", "a.b.5.pt.trace.json"),  # a worker may hold dots
        ("rank1", "2", "rank1.2.pt.trace.json"),
        ("w", None, "w.pt.trace.json"),
        ("w", "9", "w.9.pt.trace.json"),
        ("w", "9", "w.9.pt.trace.json.gz"),
        ("w", "10", "w.10.pt.trace.json"),
    ]
    assert run.workers == ["a.b", "rank1", "w"]


def test_a_trace_file_carries_its_size_and_time_from_the_listing(tmp_path: Path) -> None:
    _touch(tmp_path, "run/w.1.pt.trace.json", size=1234)
    os.utime(tmp_path / "run" / "w.1.pt.trace.json", (1_700_000_000.5, 1_700_000_000.5))
    (run,) = _runs(tmp_path)
    (trace,) = run.files
    assert (trace.path, trace.size, trace.mtime, trace.etag) == (
        str(tmp_path / "run" / "w.1.pt.trace.json"), 1234, 1_700_000_000.5, "")


def test_the_metadata_file_is_found_with_its_time(tmp_path: Path) -> None:
    _touch(tmp_path, "with/w.1.pt.trace.json", "with/tb_attn_run.json", "without/w.1.pt.trace.json",
           "without/sub/tb_attn_run.json")
    os.utime(tmp_path / "with" / "tb_attn_run.json", (42.0, 42.0))
    with_meta, without = _runs(tmp_path)
    assert with_meta.metadata_file is not None
    assert with_meta.metadata_path == str(tmp_path / "with" / "tb_attn_run.json")
    assert with_meta.metadata_file.mtime == 42.0
    # A metadata file in a subdirectory is another directory's.
    assert (without.metadata_path, without.metadata_file) == (None, None)


def test_event_files_are_listed_in_order_and_capped(tmp_path: Path) -> None:
    names = [f"events.out.tfevents.{i:03d}.host" for i in range(MAX_EVENT_FILES + 6)]
    _touch(tmp_path, "run/w.1.pt.trace.json", *(f"run/{n}" for n in reversed(names)), "other/x.tfevents.y")
    (run,) = _runs(tmp_path)
    assert EVENT_FILE_MARK == "tfevents" and MAX_EVENT_FILES == 64
    # 70 files, sorted by path: the first 64 (000 to 063) are read.
    assert [Path(f.path).name for f in run.event_files] == names[:MAX_EVENT_FILES]
    assert all(isinstance(f, FileInfo) and f.size == 2 for f in run.event_files)


def test_a_run_without_event_files_has_none(tmp_path: Path) -> None:
    _touch(tmp_path, "w.1.pt.trace.json")
    (run,) = _runs(tmp_path)
    assert run.event_files == () and run.metadata_path is None


@pytest.mark.skipif(os.name != "posix", reason="names of any bytes are POSIX's")
def test_names_that_are_not_utf8_are_displayed_escaped_and_opened_as_listed(tmp_path: Path) -> None:
    directory = os.path.join(os.fsencode(tmp_path), b"r\xff")
    os.mkdir(directory)
    with open(os.path.join(directory, b"w\xfe.3.pt.trace.json"), "wb") as f:
        f.write(b"{}")
    (run,) = _runs(tmp_path)
    (trace,) = run.files
    # Python lists byte 0xff as the lone surrogate U+DCFF; the display name writes it \xff.
    assert run.name == "r\\xff" and (trace.name, trace.worker, trace.span) == ("w\\xfe.3.pt.trace.json", "w\\xfe", "3")
    assert trace.path == os.fsdecode(os.path.join(directory, b"w\xfe.3.pt.trace.json"))
    assert b"".join(io.read_chunks(trace.path)) == b"{}"  # the listed spelling opens the file
    (run.name + trace.name + trace.worker).encode("utf-8")  # what the routes encode


def test_an_object_store_listing_groups_the_same_way_and_keeps_etags() -> None:
    root = "s3://bucket/logs"
    files = [FileInfo(f"{root}/exp/run1/host_rank0.17.pt.trace.json.gz", 100, 1.0, "etag-1"),
             FileInfo(f"{root}/exp/run1/tb_attn_run.json", 10, 2.0, "etag-2"),
             FileInfo(f"{root}/exp/run1/events.out.tfevents.9.host", 5, 3.0),
             FileInfo(f"{root}/w.pt.trace.json", 7, 4.0)]
    top, run1 = find_runs(root, files)
    assert (top.name, top.path) == (".", root)
    assert (run1.name, run1.path) == ("exp/run1", f"{root}/exp/run1")
    assert [(f.worker, f.span, f.size, f.etag) for f in run1.files] == [("host_rank0", "17", 100, "etag-1")]
    assert run1.metadata_path == f"{root}/exp/run1/tb_attn_run.json" and run1.metadata_file is not None
    assert run1.metadata_file.mtime == 2.0
    assert [f.path for f in run1.event_files] == [f"{root}/exp/run1/events.out.tfevents.9.host"]


def test_an_empty_listing_has_no_runs(tmp_path: Path) -> None:
    assert find_runs(str(tmp_path), []) == []
    _touch(tmp_path, "a/readme.md", ".hidden/w.1.pt.trace.json")  # hidden: never listed
    assert _runs(tmp_path) == []


def test_candidates_are_the_json_files_not_named_as_traces(tmp_path: Path) -> None:
    _touch(tmp_path, "a/profile_0.json", "a/w.1.pt.trace.json", "a/tb_attn_run.json", "b/trace.json.gz",
           "b/config.json", "b/events.out.tfevents.1.host", "b/notes.txt", "c/.hidden.json", ".d/profile_0.json")
    assert sorted(Path(f.path).relative_to(tmp_path).as_posix() for f in candidates(io.list_tree(str(tmp_path)))) == [
        "a/profile_0.json", "b/config.json", "b/trace.json.gz"]


def test_a_candidate_is_a_trace_only_where_the_caller_says_its_content_is(tmp_path: Path) -> None:
    _touch(tmp_path, "accel/profile_0.json", "accel/profile_1.json", "accel/profile_10.json", "accel/config.json",
           "export/rank3.1700000000.json.gz", "export/rank3.9.json", "hf/trainer_state.json")
    files = io.list_tree(str(tmp_path))
    assert find_runs(str(tmp_path), files) == []  # no content judged: no candidate is a trace
    traces = {str(tmp_path / rel) for rel in ("accel/profile_0.json", "accel/profile_1.json",
                                              "accel/profile_10.json", "export/rank3.1700000000.json.gz",
                                              "export/rank3.9.json")}
    accel, export = find_runs(str(tmp_path), files, traces=traces)
    # Workers and spans are read from the name as a trace name's are; config.json and hf/ are not traces.
    assert (accel.name, [(f.worker, f.span, f.name) for f in accel.files]) == ("accel", [
        ("profile_0", None, "profile_0.json"), ("profile_1", None, "profile_1.json"),
        ("profile_10", None, "profile_10.json")])
    assert accel.workers == ["profile_0", "profile_1", "profile_10"]
    assert [(f.worker, f.span) for f in export.files] == [("rank3", "9"), ("rank3", "1700000000")]


def test_a_run_may_hold_traces_by_name_and_by_content_and_remote_listings_too() -> None:
    root = "s3://b/logs"
    files = [FileInfo(f"{root}/r/w.1.pt.trace.json.gz", 10, 1.0, "e1"),
             FileInfo(f"{root}/r/profile_0.json", 20, 2.0, "e2"), FileInfo(f"{root}/r/config.json", 30, 3.0, "e3")]
    assert [f.path for f in candidates(files)] == [f"{root}/r/profile_0.json", f"{root}/r/config.json"]
    (run,) = find_runs(root, files, traces={f"{root}/r/profile_0.json"})
    assert run.name == "r" and [(f.worker, f.size, f.etag) for f in run.files] == [("profile_0", 20, "e2"),
                                                                                    ("w", 10, "e1")]
