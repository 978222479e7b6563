"""``tb-attn heads``: each head's cost next to its attention statistics, as a table, JSON or CSV
(one row per run × worker × layer × head, the summary's conventions: times in µs, shares as
fractions). Definitions: ``analysis/measures/heads.py`` and docs/summary.md ("AttnStats")."""

from __future__ import annotations

import csv
import io as stdio
import textwrap
from collections.abc import Sequence

import msgspec

from tb_attn_plugin.analysis.common.wording import duration, pct
from tb_attn_plugin.analysis.measures.heads import HeadRow, head_rows, with_attn_stats, with_window
from tb_attn_plugin.cli.text import lines_text, num_text, si_text, table_cells
from tb_attn_plugin.types.encoding import printable
from tb_attn_plugin.types.schema import AttnStats, Finding, RunSummary

__all__ = ["HEADS_SCHEMA", "HeadsRun", "HeadsWorker", "heads_csv", "heads_runs", "heads_table"]

HEADS_SCHEMA = "tb-attn.heads/1"


class HeadsWorker(msgspec.Struct, kw_only=True):
    worker: str
    span: str | None
    clock: str  # "device" or "cpu": the clock of time_us
    heads: list[HeadRow]
    findings: list[Finding]  # local-heads, where any head is local


class HeadsRun(msgspec.Struct, kw_only=True):
    schema: str = HEADS_SCHEMA
    run: str
    attn_stats: AttnStats | None  # null: the run's event files hold no statistics
    workers: list[HeadsWorker]


def heads_runs(summaries: Sequence[RunSummary], *, window: int | None = None, threshold: float | None = None
               ) -> list[HeadsRun]:
    """Each run's heads; with ``window`` or ``threshold`` (``tb-attn heads --window/--threshold``)
    the local verdicts and ``local-heads`` findings redone for them.
    Raises ValueError for a window a run did not record."""

    out = []
    for s in summaries:
        if s.attn_stats is not None and (window is not None or threshold is not None):
            redone = with_window(s.attn_stats, window, threshold)
            if redone is None:
                recorded = ", ".join(x for x in s.attn_stats.stats if x.startswith("window_"))
                raise ValueError(f"{s.run}: no window of {window} recorded (recorded: {recorded or 'none'})")
            s = with_attn_stats(s, redone)
        stats = s.attn_stats
        workers = [] if stats is None else [
            HeadsWorker(worker=w.worker, span=w.span, clock="device" if w.device != "cpu" else "cpu",
                        heads=head_rows(w, stats), findings=[f for f in w.findings if f.id == "local-heads"])
            for w in s.workers]
        out.append(HeadsRun(run=s.run, attn_stats=stats, workers=workers))
    return out


def _value(row: HeadRow, name: str) -> str:
    v = row.values.get(name)
    if v is None:
        return "-"
    return f"{v:.1f}" if name == "distance" else f"{v:.3f}"


def heads_table(runs: Sequence[HeadsRun]) -> str:
    lines: list[str] = []
    for r in runs:
        if r.attn_stats is None:
            lines += [f"run {printable(r.run)}: no attention statistics (record them with tb-attn-run --attn-stats, "
                      "or runner.instrument(model, attn_stats=True))", ""]
            continue
        a = r.attn_stats
        local = (f"local: at least {pct(a.threshold)} of the mass within {a.window} tokens" if a.window is not None
                 else "no window shorter than the sequence was recorded: no local verdict")
        lines.append(f"run {printable(r.run)}: attention statistics at step {a.step} ({a.weights} weights); {local}; "
                     "sink: at least half on the first 4 tokens")
        if a.note:
            lines.extend(textwrap.wrap(printable(a.note), width=100, initial_indent="  ", subsequent_indent="  "))
        for w in r.workers:
            span = f"  span {w.span}" if w.span else ""
            lines.append(f"  worker {printable(w.worker)}{span} ({w.clock} time)")
            header = ("layer", "head", "time", "share", "FLOPs", *a.stats, "local", "sink")
            rows = [(f"L{h.layer}", str(h.head), ("~" if h.derived else "") + duration(h.time_us), pct(h.time_share),
                     si_text(h.flops), *(_value(h, s) for s in a.stats), "local" if h.local else "",
                     "sink" if h.sink else "") for h in w.heads]
            cells = table_cells(rows)
            widths = [max(len(x[i]) for x in [header, *cells]) for i in range(len(header))]
            fmt = "    " + "  ".join(f"{{:<{n}}}" if i < 2 or i >= len(header) - 2 else f"{{:>{n}}}"
                                     for i, n in enumerate(widths))
            lines.append(fmt.format(*header))
            lines.extend(fmt.format(*x) for x in cells)
            lines.append("    (~: the head's time is an even share of its layer's core: no head scopes)")
            for f in w.findings:
                lines.append(f"    [{f.severity}] {f.id}: {printable(f.title)}")
                lines.extend(textwrap.wrap(printable(f.explanation), width=100, initial_indent="      ",
                                           subsequent_indent="      "))
                lines.extend(textwrap.wrap("-> " + printable(f.suggestion), width=100, initial_indent="      ",
                                           subsequent_indent="         "))
        lines.append("")
    return lines_text(lines)


def heads_csv(runs: Sequence[HeadsRun]) -> str:
    names: list[str] = []
    for r in runs:
        for s in (r.attn_stats.stats if r.attn_stats else []):
            if s not in names:
                names.append(s)
    buf = stdio.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(("run", "worker", "span", "clock", "layer", "head", "derived", "time_us", "time_share", "flops", *names,
                "local", "sink"))
    for r in runs:
        for wk in r.workers:
            for h in wk.heads:
                w.writerow(printable(str(c)) for c in (
                    r.run, wk.worker, wk.span or "", wk.clock, h.layer, h.head, h.derived, num_text(h.time_us),
                    num_text(h.time_share), num_text(h.flops),
                    *(num_text(h.values[s]) if s in h.values else "" for s in names),
                    h.local, h.sink))
    return buf.getvalue()
