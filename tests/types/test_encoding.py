"""The one JSON encoder: the tab's compact bodies and the CLI's and notebook's pretty documents; and
``printable``, the terminal escapes of every name and message the CLI and the notebook print."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tb_attn_plugin.types.encoding import printable, summaries_json, to_json
from tb_attn_plugin.types.schema import SUMMARY_SCHEMA, FileError, RunSummary


def test_compact_is_utf8_and_pretty_is_ascii_indented_with_a_newline() -> None:
    value = {"name": "é😀\x1b", "n": [1.5, float("nan")], "e": {}}
    assert to_json(value) == '{"name":"é😀\\u001b","n":[1.5,null],"e":{}}'.encode()
    pretty = to_json(value, pretty=True)
    assert pretty.isascii() and pretty.endswith(b"}\n") and b'\n  "n": [\n    1.5,\n    null\n  ]' in pretty
    assert b'"\\u00e9\\ud83d\\ude00\\u001b"' in pretty
    assert json.loads(pretty) == json.loads(to_json(value)) == {"name": "é😀\x1b", "n": [1.5, None], "e": {}}


def test_a_lone_surrogate_is_written_as_text_never_an_error() -> None:
    for pretty in (False, True):
        assert json.loads(to_json({"k\udcff": ["bad\udcffname"]}, pretty=pretty)) == {"k\\xff": ["bad\\xffname"]}


def test_nesting_far_past_the_metadata_bound_encodes() -> None:
    deep: object = None
    for _ in range(400):
        deep = [deep]
    assert json.loads(to_json({"m": deep}, pretty=True)) == {"m": deep}


def test_summaries_are_one_document() -> None:
    runs = [RunSummary(run="r", metadata={"a": 1}, workers=[], errors=[])]
    doc = json.loads(summaries_json(runs))
    assert doc["schema"] == SUMMARY_SCHEMA and doc["runs"][0]["run"] == "r" and doc["runs"][0]["metadata"] == {"a": 1}


# -- names and lone surrogates (moved from test_schema.py with the encoder) ------------------

def test_to_json_writes_utf8_and_leaves_valid_text_alone() -> None:
    assert to_json({"user": "é", "n": [1, 2.5, None, True]}) == '{"user":"é","n":[1,2.5,null,true]}'.encode()
    assert to_json("plain") == b'"plain"'


def test_an_undecodable_byte_is_written_as_its_escape() -> None:
    """A directory name with the byte 0xFF is listed as the lone surrogate U+DCFF
    (``surrogateescape``); it is written as the four characters ``\\xff``, in keys and values."""
    body = to_json({"run\udcff": ["a\udcffb", 3]})
    assert json.loads(body) == {"run\\xff": ["a\\xffb", 3]}


def test_another_lone_surrogate_is_written_as_its_code() -> None:
    assert json.loads(to_json({"e": "x\ud800"})) == {"e": "x\\ud800"}


def test_a_struct_with_a_lone_surrogate_is_written_as_builtins() -> None:
    body = to_json(FileError(file="run/\udcfe.pt.trace.json", error="cannot read"))
    assert json.loads(body) == {"file": "run/\\xfe.pt.trace.json", "error": "cannot read"}


def test_a_lone_surrogate_deep_in_nested_metadata_is_escaped() -> None:
    value: Any = "\udcff"
    for _ in range(900):  # deep, within msgspec's own nesting limit
        value = [value]
    got: Any = json.loads(to_json({"metadata": value}))["metadata"]
    depth = 0
    while isinstance(got, list):
        (got,) = got
        depth += 1
    assert (depth, got) == (900, "\\xff")


# -- printable ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("raw", "shown"), [
    ("\u2028", r"\u2028"),  # line separator: some terminals and editors break the line there
    ("\u2029", r"\u2029"),  # paragraph separator
    ("\x1f", r"\x1f"),  # the last C0 control
    ("\x80", r"\x80"),  # the first C1 control
    ("\u202a", r"\u202a"),  # the first bidi embedding
    ("\u2066", r"\u2066"),  # the first bidi isolate
    ("\udc80", r"\x80"),  # the first undecodable byte, as surrogateescape writes it
    ("\udc7f", r"\udc7f"),  # a lone surrogate below that range: no byte it stands for
    ("\ud800\udfff", r"\ud800\udfff"),  # a pair of lone surrogates, each escaped
])
def test_printable_escapes_the_separators_and_each_range_edge(raw: str, shown: str) -> None:
    assert printable(raw) == shown


@pytest.mark.parametrize("kept", [" ", "~", "\xa0", "\u2027", "\u202f", "\u2065", "\u206a", "\ue000", "\U0001f600"])
def test_printable_keeps_the_characters_just_outside_each_range(kept: str) -> None:
    # U+00A0 follows C1, U+2027/U+202F frame the separators and embeddings, U+2065/U+206A frame
    # the isolates, U+E000 follows the surrogates: all are text a terminal only draws.
    assert printable(kept) == kept


def test_printable_of_an_empty_string_is_empty() -> None:
    assert printable("") == ""
