"""The CLI's text primitives, shared by every report: escaping for the terminal (``printable``),
JSON, aligned cells, and the figures' short forms (ms, MiB, SI units, ratios)."""

from __future__ import annotations

import re
import textwrap
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tb_attn_plugin.analysis import wording
from tb_attn_plugin.types.encoding import to_json

if TYPE_CHECKING:
    from tb_attn_plugin.types.schema import Finding

__all__ = ["findings_lines", "json_text", "lines_text", "mib_text", "ms_text", "num_text", "printable",
           "ratio_text", "si_text", "table_cells"]


# C0 (tab and newline too: a cell is one line), DEL, C1 (U+009B is a CSI to some terminals), the
# line and paragraph separators, the bidi embeddings, overrides and isolates ("Trojan Source"),
# and lone surrogates, which every strict encoder refuses.
_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if 0xDC80 <= code <= 0xDCFF:  # an undecodable byte of a file name, as surrogateescape lists it
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` with every character a terminal would act on written as a visible escape
    (``\\x1b``, ``\\u202e``; an undecodable byte ``\\xff``). Other text, non-ASCII included, is
    unchanged, and so is a string already escaped."""
    return _UNPRINTABLE.sub(_escape, text)


def json_text(value: object) -> str:
    """``value`` (msgspec Structs included) as the CLI prints JSON: the one encoder's pretty form
    (``types.encoding.to_json``: indented, ASCII only, non-finite floats as null)."""
    return to_json(value, pretty=True).decode("ascii")


def table_cells(rows: Sequence[Sequence[object]]) -> list[tuple[str, ...]]:
    return [tuple(printable(str(c)) for c in row) for row in rows]


def lines_text(lines: Sequence[str]) -> str:
    return "".join(printable(line) + "\n" for line in lines)


def ratio_text(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def num_text(x: float) -> str:
    return f"{x:.6g}"


def ms_text(us: float) -> str:
    return wording.ms(us) if us else "-"


def si_text(x: float | None, unit: str = "") -> str:
    if not x:
        return "-"
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= factor:
            return f"{x / factor:.2f}{prefix}{unit}"
    return f"{x:.0f}{unit}"


def mib_text(x: float | None) -> str:
    """MiB, or "-" for no bytes and for a figure the trace does not have (None)."""
    return wording.mib(x) if x else "-"


def findings_lines(findings: Sequence[Finding]) -> list[str]:
    if not findings:
        return []
    lines = ["", f"  findings ({len(findings)}):"]
    for f in findings:
        lines.append(f"  [{f.severity}] {f.id}: {f.title}")
        # Escaped before wrapping, so that the lines keep their width.
        lines.extend(textwrap.wrap(printable(f.explanation), width=100, initial_indent="      ",
                                   subsequent_indent="      "))
        lines.extend(textwrap.wrap("-> " + printable(f.suggestion), width=100, initial_indent="      ",
                                   subsequent_indent="         "))
    return lines
