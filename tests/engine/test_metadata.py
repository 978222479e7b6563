"""Run metadata as every door reads it: bounded in bytes and depth, a JSON object or nothing."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tb_attn_plugin.engine.metadata import MAX_DEPTH, parse_metadata, read_metadata, read_metadata_many
from tb_attn_plugin.trace.events import ReadError


def _arrays(depth: int, inner: str = "1") -> bytes:
    return ("[" * depth + inner + "]" * depth).encode()


def test_a_runners_metadata_is_read_as_it_is() -> None:
    raw = json.dumps({"model": "builtin", "config": {"seq": 64, "masks": [{"kind": "sliding", "w": 8}]}}).encode()
    assert parse_metadata(raw) == (json.loads(raw), None)


@pytest.mark.parametrize("depth", [MAX_DEPTH, MAX_DEPTH + 1, 500, 5000, 200_000])
def test_values_past_the_depth_bound_are_cut_to_null(depth: int) -> None:
    raw = b'{"a": ' + _arrays(depth - 1) + b', "b": "[[[{{{", "c": {"d": 2}}'
    value, note = parse_metadata(raw)
    assert value is not None and value["b"] == "[[[{{{" and value["c"] == {"d": 2}  # brackets in strings count not
    kept, item = 1, value["a"]
    while isinstance(item, list):
        kept, item = kept + 1, item[0]
    assert kept == min(depth, MAX_DEPTH)
    assert item == (1 if depth <= MAX_DEPTH else None)
    assert (note is None) == (depth <= MAX_DEPTH)
    if note is not None:
        assert note == f"nested {depth} levels deep: values below level {MAX_DEPTH} are cut to null"


def test_siblings_are_cut_each_and_escaped_quotes_do_not_end_strings() -> None:
    deep = _arrays(MAX_DEPTH + 3).decode()
    raw = ('{"s": "a\\"]]}", "x": [' + deep + ", 7, " + deep + "]}").encode()
    value, note = parse_metadata(raw)
    assert value is not None and note is not None
    assert value["s"] == 'a"]]}'
    assert value["x"][1] == 7
    # A string ending in an escaped backslash ends at its quote: the brackets after it count.
    raw = ('{"s": "x\\\\", "x": ' + deep + "}").encode()
    value, note = parse_metadata(raw)
    assert value is not None and value["s"] == "x\\" and note is not None


@pytest.mark.parametrize("raw", [b"", b"[1]", b"null", b"{", b"{" * 100 + b"]" * 100, b"[" * 5000, b"\xff\xfe"])
def test_anything_else_is_no_metadata(raw: bytes) -> None:
    assert parse_metadata(raw).value is None


def test_a_lone_surrogate_escape_becomes_its_text() -> None:
    value, _ = parse_metadata(b'{"user": "a\\ud800b"}')
    assert value == {"user": "a\\ud800b"}


def test_read_notes_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "tb_attn_run.json"
    path.write_bytes(b'{"a": ' + _arrays(100) + b"}")
    got = read_metadata(str(path))
    assert got.value is not None and got.note is not None and got.note.startswith(f"{path}: nested 101 levels")
    assert read_metadata(None) == (None, None)
    assert read_metadata(str(tmp_path / "missing.json")) == (None, None)


def test_a_file_with_several_hard_links_is_refused_with_a_note(tmp_path: Path) -> None:
    path = tmp_path / "tb_attn_run.json"
    path.write_text('{"model": "m"}')
    assert read_metadata(str(path)).value == {"model": "m"}
    os.link(path, tmp_path / "other")
    value, note = read_metadata(str(path))
    assert value is None and note is not None and "2 hard links" in note and "\n" not in note


def test_a_storage_error_is_kept_apart(tmp_path: Path) -> None:
    got = read_metadata_many([str(tmp_path / "missing.json")])
    assert isinstance(got[str(tmp_path / "missing.json")], ReadError)  # read again on the next listing
