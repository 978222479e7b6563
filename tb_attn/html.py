"""Summaries as a notebook shows them: a short overview (runs, workers, each worker's headline),
its findings and its unreadable files, as HTML (``_repr_html_``) and as text (``__repr__``). Pure.

Run, worker and file names and every text of a finding come from the traces, which anyone who
can write to the logdir controls: each string is HTML-escaped (quotes included) in the HTML, and
passed through ``types.encoding.printable`` in the text, so a name can neither add markup nor send escape
sequences to a terminal.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from tb_attn_plugin.types.encoding import printable
from tb_attn_plugin.types.schema import RunSummary

__all__ = ["findings_html", "overview_html", "overview_text"]

_FINDING_COLUMNS = ("severity", "title", "explanation", "suggestion")
#: Rows a table shows at most (a 1,000-rank job has 1,000 workers): the rest are counted, and in the frames.
MAX_ROWS = 32


def _e(value: object) -> str:
    return escape("" if value is None else str(value), quote=True)


def _row(cells: Sequence[object], *, tag: str = "td") -> str:
    return "<tr>" + "".join(f"<{tag} style=\"text-align:left;vertical-align:top\">{_e(c)}</{tag}>"
                            for c in cells) + "</tr>"


def _table(header: Sequence[str], rows: Sequence[Sequence[object]], frame: str) -> str:
    more = len(rows) - MAX_ROWS
    tail = f"<p>... and {more} more: <code>{frame}</code></p>" if more > 0 else ""
    return "<table>" + _row(header, tag="th") + "".join(_row(r) for r in rows[:MAX_ROWS]) + "</table>" + tail


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _counts(runs: Sequence[RunSummary]) -> str:
    errors = sum(len(r.errors) for r in runs)
    text = f"{_n(len(runs), 'run')}, {_n(sum(len(r.workers) for r in runs), 'worker trace')}"
    return text + (f", {errors} unreadable" if errors else "")


def findings_html(runs: Sequence[RunSummary]) -> str:
    """Every worker's findings as a table (severity, title, explanation, suggestion); "" without any."""
    rows = [(r.run, w.worker, *(getattr(f, c) for c in _FINDING_COLUMNS))
            for r in runs for w in r.workers for f in w.findings]
    if not rows:
        return ""
    return f"<h4>Findings ({len(rows)})</h4>" + _table(("run", "worker", *_FINDING_COLUMNS), rows, "r.findings()")


def overview_html(runs: Sequence[RunSummary], source: str) -> str:
    """The overview, the findings and the unreadable files, as one HTML fragment."""
    workers = [(r.run, w.worker, w.span or "", w.gpu or w.device, w.backend, len(w.layers), w.step_count, w.headline)
               for r in runs for w in r.workers]
    parts = [f"<div><p><strong>tb-attn summaries</strong> of <code>{_e(source)}</code>: {_e(_counts(runs))}</p>"]
    if workers:
        parts.append(_table(("run", "worker", "span", "device", "backend", "layers", "steps", "headline"), workers,
                            "r.workers()"))
    parts.append(findings_html(runs))
    errors = [(r.run, e.file, e.error) for r in runs for e in r.errors]
    if errors:
        parts.append("<h4>Unreadable traces</h4>" + _table(("run", "file", "error"), errors, "r.errors()"))
    return "".join(parts) + "</div>"


def overview_text(runs: Sequence[RunSummary], source: str) -> str:
    """The overview as a few lines: one per worker, with its headline."""
    lines = [f"<tb-attn summaries of {source}: {_counts(runs)}>"]
    for r in runs:
        for w in r.workers:
            span = f" span {w.span}" if w.span else ""
            lines.append(f"  {r.run} / {w.worker}{span} ({w.gpu or w.device}, {w.backend}, "
                         f"{_n(len(w.layers), 'layer')}, {_n(w.step_count, 'step')}, "
                         f"{_n(len(w.findings), 'finding')}): {w.headline or 'no attention found'}")
        lines.extend(f"  {r.run} / {e.file}: unreadable: {e.error}" for e in r.errors)
    if len(lines) > MAX_ROWS + 1:
        lines = [*lines[:MAX_ROWS + 1], f"  ... and {len(lines) - MAX_ROWS - 1} more lines: r.workers(), r.errors()"]
    return "\n".join(printable(line) for line in lines)
