"""JSON for every door: the tab's responses, ``tb-attn ... --format json`` and the notebook API's
``to_json``. One encoder, so that the three write the same values. And text for a terminal
(``printable``), which the CLI and the notebook API both print names and messages through.

msgspec's encoder, written in C: no Python recursion, and non-finite floats as null. It is bounded
in depth by Python's recursion limit (about 1,000 levels less the caller's stack), and nothing it is
handed comes near that: the summary's types nest about 10 levels, and the one free-form value, run
metadata, is cut at ``engine.metadata.MAX_DEPTH`` (32) where it is read.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import msgspec

from tb_attn_plugin.types.schema import SUMMARY_SCHEMA, RunSummary
from tb_attn_plugin.vocab.names import encodable

__all__ = ["printable", "summaries_json", "to_json"]

_NON_ASCII = re.compile("[^\x00-\x7f]")


# C0 (tab and newline too: a cell is one line), DEL, C1 (U+009B is a CSI to some terminals), the
# line and paragraph separators, the bidi embeddings, overrides and isolates ("Trojan Source"),
# and lone surrogates, which every strict encoder refuses.
_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _visible(match: re.Match[str]) -> str:
    """A character a terminal would act on, as the text of its escape."""
    code = ord(match.group())
    if 0xDC80 <= code <= 0xDCFF:  # an undecodable byte of a file name, as surrogateescape lists it
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` with every character a terminal would act on written as a visible escape
    (``\\x1b``, ``\\u202e``; an undecodable byte ``\\xff``). Other text, non-ASCII included, is
    unchanged, and so is a string already escaped."""
    return _UNPRINTABLE.sub(_visible, text)


def to_json(value: Any, *, pretty: bool = False) -> bytes:
    """``value`` (msgspec Structs included) as JSON: compact UTF-8 (the tab's bodies), or with
    ``pretty`` indented by 2, ASCII only and ending in a newline (the CLI's and the notebook's: safe
    to print whatever the names hold). Names are made encodable where they enter
    (``names.display_name``, the decoder), so the fallback only catches a lone surrogate that
    slipped through some other way (an OS error message quoting an undecodable path): escaped
    text, never an error."""
    try:
        body = msgspec.json.encode(value)
    except UnicodeEncodeError:
        body = msgspec.json.encode(_encodable(msgspec.to_builtins(value)))
    if not pretty:
        return body
    text = msgspec.json.format(body, indent=2).decode("utf-8")
    return (_NON_ASCII.sub(_escape, text) + "\n").encode("ascii")


def summaries_json(runs: Sequence[RunSummary]) -> bytes:
    """Runs' summaries as one document, ``{"schema": SUMMARY_SCHEMA, "runs": [...]}``, pretty:
    ``tb-attn summarize --format json`` and the notebook API's ``Summaries.to_json()``."""
    return to_json({"schema": SUMMARY_SCHEMA, "runs": runs}, pretty=True)


def _escape(match: re.Match[str]) -> str:
    """A character as JSON's escape (outside strings JSON holds no character that is not ASCII)."""
    code = ord(match.group())
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def _encodable(value: Any) -> Any:
    """``value`` (builtins only) with every string made encodable, iteratively."""

    root: list[Any] = [value]
    stack: list[tuple[list[Any] | dict[Any, Any], Any]] = [(root, 0)]
    while stack:
        container, key = stack.pop()
        item = container[key]
        if isinstance(item, str):
            container[key] = encodable(item)
        elif isinstance(item, dict):
            fixed = {encodable(k) if isinstance(k, str) else k: v for k, v in item.items()}
            container[key] = fixed
            stack.extend((fixed, k) for k in fixed)
        elif isinstance(item, list):
            stack.extend((item, i) for i in range(len(item)))
    return root[0]
