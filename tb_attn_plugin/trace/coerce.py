"""Lenient coercion: what a decoded value of the wrong type, or out of range, becomes. Times and
sizes beyond any real trace's are unusable like non-finite ones (``MAX_TIME_US``, ``MAX_SIZE``),
so the analyses' int64 and float arithmetic cannot overflow; shapes are reduced to lists of
integers in range; an integer of thousands of digits reads as an infinite float instead of
failing (``loads``); no string keeps a lone surrogate (``clean_text``: ``\\ud800`` is valid JSON,
but no UTF-8 encoder takes the string it decodes to, so a response carrying it failed); and no
string kept is longer than ``MAX_NAME_CHARS`` (``clip``: a name of a gigabyte is a name of 2000
characters, in the decoder as in the summary); and no argument list (``Input Dims``, ``Input type``,
``Concrete Inputs``) written in more than ``MAX_ARG_BYTES`` is read: a list of ten million entries is read
as absent, counted in the diagnostics (``cut_arg_label``), instead of as ten million Python objects.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from typing import Any

import msgspec

from tb_attn_plugin.trace.events import OpShapes, TraceError

__all__ = [
    "ARG_NAMES",
    "EMPTY_RAW",
    "MAX_ARG_BYTES",
    "MAX_NAME_CHARS",
    "MAX_SIZE",
    "MAX_TIME_US",
    "as_float",
    "as_id",
    "as_raw",
    "clean_text",
    "clean_tree",
    "clip",
    "cut_arg_label",
    "flag",
    "int_or_none",
    "loads",
    "nested_too_deeply",
    "op_shapes",
]

EMPTY_RAW = msgspec.Raw(b"")
_INT64_MAX = 2**63 - 1
#: Larger times (microseconds; about 3 million years) or sizes (bytes or elements) are not from
#: a real trace: treated as unusable, so sums and products downstream stay finite and in int64.
MAX_TIME_US = 1e20
MAX_SIZE = 2**53
#: Longer names (kernels of deep templates run to about 1000 characters), and any other string the
#: decoder keeps, are clipped where they are interned, and so in the summary.
MAX_NAME_CHARS = 2000
#: Longer argument lists (their JSON as written, in bytes) are read as absent (``cut_arg_label``), by both
#: decoders (``_scan.c`` mirrors it). The longest in the public, production and test traces is 3.3 KB
#: (``Input Dims`` of a ``SplitWithSizesBackward0`` of 300 inputs); ops whose shapes we read take a few
#: dozen inputs. As ``filler.STRING_BYTES``: a triple of them costs at most 192 KiB however long its lists.
MAX_ARG_BYTES = 64 << 10
#: The arguments ``MAX_ARG_BYTES`` bounds, in the order of a shape key (``OpShapes``: dims, types, concrete).
ARG_NAMES = ("Input Dims", "Input type", "Concrete Inputs")
_MAX_ID_DIGITS = 4000  # a longer pid or tid of digits stays text (int() refuses 4300 digits and more)
_MAX_RANK = 64  # sizes of one input (PyTorch tensors have at most 64 dimensions)
_MAX_INPUTS = 4096  # inputs of one op


def as_id(value: int | str) -> int | str:
    """A pid or tid: a string of ASCII digits is that number ("25738" and 25738 are one thread)."""
    if isinstance(value, str):
        if value.isascii() and value.isdigit() and len(value) <= _MAX_ID_DIGITS:
            return int(value)
        return clean_text(clip(value))
    return value


def clip(text: str, limit: int = MAX_NAME_CHARS) -> str:
    """``text`` cut to at most ``limit`` characters (code points), ending in "…" where it was cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_text(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD. Only strings seen for the first time
    come here (interned names, tracks, shapes, metadata), so the check costs nothing per event;
    msgspec refuses lone surrogates, so they come only from ``json.loads`` (the lenient path,
    the header and trailer, shapes)."""
    return text if text.isascii() else _SURROGATE.sub("\ufffd", text)


def clean_tree(value: Any) -> Any:
    """``value`` (decoded JSON) with every string in it cleaned and clipped, keys included. In place
    and without recursion: a value may nest as deeply as ``json.loads`` managed."""
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if not all(k.isascii() and len(k) <= MAX_NAME_CHARS for k in node):
                items = [(clean_text(clip(k)), v) for k, v in node.items()]
                node.clear()
                node.update(items)  # two keys that clean to one: the last wins, as with duplicate keys
            children: Iterable[tuple[Any, Any]] = node.items()
        elif isinstance(node, list):
            children = enumerate(node)
        else:
            continue
        for k, v in children:
            if isinstance(v, str):
                node[k] = clean_text(clip(v))  # an existing key or index: the container does not change size
            elif isinstance(v, (dict, list)):
                stack.append(v)
    return value


def cut_arg_label(arg: int, op: str) -> str:
    """The diagnostic that counts events of ``op`` whose ``ARG_NAMES[arg]`` was longer than ``MAX_ARG_BYTES``
    (read as absent)."""
    return f"argument lists over {MAX_ARG_BYTES} bytes, read as absent: '{ARG_NAMES[arg]}' of {clip(op, 100)}"


def flag(value: Any) -> bool | None:
    return bool(value) if isinstance(value, (bool, int)) else None


def op_shapes(key: tuple[bytes, bytes, bytes]) -> OpShapes:
    def load(text: bytes) -> tuple[Any, ...]:
        if not text:
            return ()
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):  # not JSON, an int of thousands of digits, nested too deeply
            return ()
        return tuple(value) if isinstance(value, list) else ()

    dims, types, concrete = (load(text)[:_MAX_INPUTS] for text in key)
    return OpShapes(dims=tuple(_sizes(d) for d in dims), types=tuple(_text(t) for t in types),
                    concrete=tuple(_text(c) for c in concrete))


def _sizes(value: Any) -> list[int]:
    """One input's sizes: a list of integers in range, else ``[]`` (not a tensor, or unusable: a
    tensor list, strings, floats, sizes no tensor has). Analyses then never meet other types."""
    if isinstance(value, list) and len(value) <= _MAX_RANK and all(
            type(x) is int and -MAX_SIZE <= x <= MAX_SIZE for x in value):
        return value
    return []


def _text(value: Any) -> str:
    """A type name or concrete input as text ("" for a value nested too deeply to format)."""
    try:
        return clean_text(clip(str(value)))
    except RecursionError:
        return ""


# -- the lenient path's fields ------------------------------------------------------------
def int_or_none(value: Any) -> int | None:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value if -_INT64_MAX <= value <= _INT64_MAX else None
    if isinstance(value, float) and math.isfinite(value) and abs(value) <= _INT64_MAX:
        return int(value)
    if isinstance(value, str):
        try:
            return int_or_none(int(value))
        except ValueError:
            return None
    return None


def as_float(value: Any, default: float) -> float:
    if isinstance(value, bool):
        return default
    if isinstance(value, (int, float)):
        try:
            return float(value)
        except OverflowError:
            return math.nan
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return math.nan
    return default


def as_raw(value: Any) -> msgspec.Raw:
    return EMPTY_RAW if value is None else msgspec.Raw(json.dumps(value).encode())


def loads(text: bytes) -> Any:
    """``json.loads``, except that an integer of more digits than Python converts (4300) reads
    as a float (infinite, so unusable like any other out-of-range number) instead of failing."""
    try:
        return json.loads(text)
    except ValueError as exc:
        if "integer string conversion" not in str(exc):
            raise
    return json.loads(text, parse_int=_parse_int)


def _parse_int(digits: str) -> int | float:
    return int(digits) if len(digits) <= 4000 else float(digits)


def nested_too_deeply(exc: RecursionError) -> TraceError:
    return TraceError(f"invalid JSON: nested too deeply to read ({exc})")
