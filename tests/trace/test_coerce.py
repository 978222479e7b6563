"""Lenient coercion (``trace/coerce.py``): what a decoded value of the wrong type or out of range
becomes. Each function is called directly on hand-picked values at and beyond its bounds, and its
result checked against the rule its docstring states (int64, 2**53, 2000 characters, 64 dimensions).
"""

from __future__ import annotations

import json
import math
from typing import Any

import msgspec
import pytest

from tb_attn_plugin.trace.coerce import (
    EMPTY_RAW,
    MAX_NAME_CHARS,
    MAX_SIZE,
    MAX_TIME_US,
    as_float,
    as_id,
    as_raw,
    clean_text,
    clean_tree,
    clip,
    flag,
    int_or_none,
    loads,
    nested_too_deeply,
    op_shapes,
)
from tb_attn_plugin.trace.events import OpShapes, TraceError

INT64_MAX = 2**63 - 1


def test_the_bounds_are_the_documented_ones() -> None:
    # 1e20 us is about 3.2 million years (1e20 / 1e6 / 3.156e7); 2**53 is where float64 stops
    # holding every integer, so sizes up to it survive the analyses' float arithmetic exactly.
    assert MAX_TIME_US == 1e20 and 1e20 / 1e6 / 3.156e7 > 3e6
    assert MAX_SIZE == 9_007_199_254_740_992 and float(MAX_SIZE) + 1 == float(MAX_SIZE)
    assert MAX_NAME_CHARS == 2000 and bytes(EMPTY_RAW) == b""


# -- pids and tids ------------------------------------------------------------------------
@pytest.mark.parametrize(("value", "want"), [
    ("25738", 25738),
    (25738, 25738),
    ("0", 0),
    ("PyTorch Profiler", "PyTorch Profiler"),
    ("-5", "-5"),  # a sign is not a digit: the string is a name
    (" 12", " 12"),
    ("²", "²"),  # str.isdigit() is True, but int() refuses it: kept as text
    ("9" * 4000, int("9" * 4000)),  # at the bound: still a number
    ("9" * 4001, "9" * 1999 + "…"),  # past it: text, clipped like any name
    ("t\ud800", "t\ufffd"),
])
def test_a_pid_of_ascii_digits_is_a_number_and_anything_else_text(value: int | str, want: int | str) -> None:
    assert as_id(value) == want
    assert type(as_id(value)) is type(want)


# -- strings -------------------------------------------------------------------------------
def test_clip_keeps_strings_up_to_the_limit_and_marks_a_cut() -> None:
    assert clip("a" * MAX_NAME_CHARS) == "a" * MAX_NAME_CHARS
    cut = clip("a" * (MAX_NAME_CHARS + 1))
    assert len(cut) == MAX_NAME_CHARS and cut == "a" * (MAX_NAME_CHARS - 1) + "…"
    # Counted in code points, not bytes: 5 emoji (20 bytes of UTF-8) fit a limit of 5.
    assert clip("😀" * 5, limit=5) == "😀" * 5
    assert clip("abcdef", limit=4) == "abc…"
    assert clip("", limit=1) == ""


def test_clean_text_replaces_only_lone_surrogates() -> None:
    ascii_text = "aten::mm"
    assert clean_text(ascii_text) is ascii_text  # the common case costs no copy
    assert clean_text("a\ud800b\udfffc") == "a\ufffdb\ufffdc"
    assert clean_text("é😀\ufffd") == "é😀\ufffd"  # real characters, astral included, stay
    # Two halves as separate code points (not one character) are two lone surrogates.
    assert clean_text("\ud83d\ude00") == "\ufffd\ufffd"
    clean_text("x\udcff").encode("utf-8")  # what failed before: the result always encodes


def test_clean_tree_cleans_and_clips_keys_and_values_in_place() -> None:
    long_value = "v" * (MAX_NAME_CHARS + 10)
    long_key = "k" * (MAX_NAME_CHARS + 10)
    tree: dict[str, Any] = {"name\ud800": ["GPU \udfff", 3, None, {"deep": long_value}], long_key: 1.5, "ok": True}
    out = clean_tree(tree)
    assert out is tree
    assert tree == {"name\ufffd": ["GPU \ufffd", 3, None, {"deep": "v" * (MAX_NAME_CHARS - 1) + "…"}],
                    "k" * (MAX_NAME_CHARS - 1) + "…": 1.5, "ok": True}


def test_clean_tree_merges_two_keys_that_clean_to_one_keeping_the_last() -> None:
    # "\ud800" and "\udfff" both become U+FFFD: as with a JSON object's duplicate keys, the last wins.
    tree = dict([("\ud800", 1), ("\udfff", 2)])
    assert len(tree) == 2
    assert clean_tree(tree) == {"\ufffd": 2}


def test_clean_tree_walks_nesting_deeper_than_the_recursion_limit() -> None:
    depth = 50_000
    root: list[Any] = []
    node = root
    for _ in range(depth):
        child: list[Any] = []
        node.append(child)
        node = child
    node.append("\ud800")
    clean_tree(root)
    node = root
    for _ in range(depth):
        node = node[0]
    assert node == ["\ufffd"]


def test_clean_tree_leaves_scalars_as_they_are() -> None:
    for value in (None, 3, 2.5, "\ud800"):  # a bare string has no container to be written back into
        assert clean_tree(value) == value


# -- flags and shapes -----------------------------------------------------------------------
@pytest.mark.parametrize(("value", "want"), [(True, True), (False, False), (1, True), (0, False), (2, True),
                                             ("true", None), (1.0, None), (None, None), ([1], None)])
def test_a_flag_is_a_bool_or_an_int_else_unknown(value: Any, want: bool | None) -> None:
    assert flag(value) is want


def test_op_shapes_reads_dims_types_and_concrete_inputs() -> None:
    shapes = op_shapes((b"[[2, 16, 32], [96, 32], []]", b'["float", "float", "Scalar"]', b'["", "", "1"]'))
    assert shapes == OpShapes(dims=([2, 16, 32], [96, 32], []), types=("float", "float", "Scalar"),
                              concrete=("", "", "1"))


@pytest.mark.parametrize(("dims", "why"), [
    ([1.0, 2.0], "floats"),
    ([True, 2], "a bool is not a size"),
    (["2", 3], "strings"),
    ([[2, 3], [4]], "a tensor list"),
    ([1] * 65, "65 dimensions: more than a PyTorch tensor has"),
    ([MAX_SIZE + 1], "a size past 2**53"),
    ([-MAX_SIZE - 1], "a size past -2**53"),
    (5, "a number, not a list"),
])
def test_an_input_that_is_no_tensor_of_sizes_in_range_reads_as_no_sizes(dims: Any, why: str) -> None:
    got = op_shapes((json.dumps([dims, [2, 2]]).encode(), b"", b""))
    assert got.dims == ([], [2, 2]), why


def test_sizes_at_the_bounds_are_kept() -> None:
    at = [MAX_SIZE, -MAX_SIZE, 0]
    assert op_shapes((json.dumps([at, [1] * 64]).encode(), b"", b"")).dims == (at, [1] * 64)


@pytest.mark.parametrize("text", [b"", b"not json", b'{"a": [1]}', b"5", b"[" * 100_000, b"1" * 5000])
def test_unreadable_shape_fields_read_as_no_inputs(text: bytes) -> None:
    # No JSON, not a list, nested past the recursion limit, an int past Python's 4300 digits.
    assert op_shapes((text, text, text)) == OpShapes(dims=(), types=(), concrete=())


def test_types_and_concrete_inputs_become_clean_clipped_text() -> None:
    types = json.dumps(["float", 3, None, "x\ud800", "t" * (MAX_NAME_CHARS + 1)]).encode()
    concrete = json.dumps([[1, [2]], 0.5]).encode()
    got = op_shapes((b"[]", types, concrete))
    assert got.types == ("float", "3", "None", "x\ufffd", "t" * (MAX_NAME_CHARS - 1) + "…")
    assert got.concrete == ("[1, [2]]", "0.5")  # str() of what json.loads built


def test_inputs_past_4096_are_cut() -> None:
    dims = json.dumps([[1]] * 5000).encode()
    assert len(op_shapes((dims, b"", b"")).dims) == 4096


# -- the lenient path's numbers ------------------------------------------------------------
@pytest.mark.parametrize(("value", "want"), [
    (True, 1), (False, 0),
    (7, 7), (INT64_MAX, INT64_MAX), (-INT64_MAX, -INT64_MAX),
    (INT64_MAX + 1, None),
    (-INT64_MAX - 1, None),  # int64's minimum is kineto.UNSET, so it is never a value read
    (3.9, 3), (-3.9, -3),  # truncated toward zero, as int() does
    (math.nan, None), (math.inf, None), (1e19, None),  # 1e19 > 2**63 - 1 (about 9.22e18)
    ("42", 42), (" 42 ", 42), ("4.2", None), ("0x10", None), ("abc", None),
    (str(2**64), None),
    ("9" * 5000, None),  # int() refuses more than 4300 digits with ValueError
    (None, None), ([1], None), ({"a": 1}, None),
])
def test_int_or_none_keeps_int64_values_and_drops_the_rest(value: Any, want: int | None) -> None:
    assert int_or_none(value) == want


@pytest.mark.parametrize(("value", "want"), [
    (3, 3.0), (2.5, 2.5), ("1.5", 1.5), (" 2.5 ", 2.5), ("1e400", math.inf),
    (10**400, math.nan),  # float() overflows: unusable, like NaN
    ("abc", math.nan), ("nan", math.nan),
    (True, -1.0), (None, -1.0), ([1], -1.0), ({"a": 1}, -1.0),  # the default
])
def test_as_float_reads_numbers_and_numeric_strings_else_default_or_nan(value: Any, want: float) -> None:
    got = as_float(value, -1.0)
    assert (math.isnan(got) and math.isnan(want)) or got == want


def test_as_raw_re_encodes_a_value_and_leaves_none_absent() -> None:
    assert as_raw(None) is EMPTY_RAW
    raw = as_raw([[1, 2], [3]])
    assert isinstance(raw, msgspec.Raw) and bytes(raw) == b"[[1, 2], [3]]"


def test_loads_reads_an_integer_of_thousands_of_digits_as_infinity() -> None:
    assert loads(b'{"a": [1, 2.5, "x"]}') == {"a": [1, 2.5, "x"]}
    got = loads(b"[" + b"9" * 5000 + b", 7]")
    assert got[0] == math.inf and got[1] == 7 and type(got[1]) is int
    # Under Python's own limit of 4300 digits an integer is read exactly, as json.loads reads it.
    assert loads(b"9" * 4100) == int("9" * 4100)


def test_loads_raises_json_errors_other_than_the_digit_limit() -> None:
    with pytest.raises(json.JSONDecodeError):
        loads(b'{"a": ')
    with pytest.raises(RecursionError):
        loads(b"[" * 100_000 + b"]" * 100_000)


def test_nested_too_deeply_is_a_trace_error_saying_so() -> None:
    err = nested_too_deeply(RecursionError("maximum recursion depth exceeded"))
    assert isinstance(err, TraceError)
    assert str(err) == "invalid JSON: nested too deeply to read (maximum recursion depth exceeded)"
