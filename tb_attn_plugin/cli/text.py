"""The CLI's text primitives, shared by every report: JSON, aligned cells escaped for the terminal
(``types.encoding.printable``), and the figures' short forms (ms, MiB, SI units, ratios)."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tb_attn_plugin.analysis.common import wording
from tb_attn_plugin.types.encoding import printable, to_json

if TYPE_CHECKING:
    from tb_attn_plugin.types.schema import Finding

__all__ = ["findings_lines", "json_text", "lines_text", "mib_text", "ms_text", "num_text", "ratio_text", "si_text",
           "table_cells"]


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
