"""``tb-attn strategies`` as text and CSV (``analysis.strategies``; JSON is ``text.json_text``),
and the lines a summary's table gives sparse and approximate attention (``variant_lines``)."""

from __future__ import annotations

import csv
import io as stdio
from typing import TYPE_CHECKING

from tb_attn_plugin.analysis.common import wording
from tb_attn_plugin.analysis.cross_run.strategies import APPROXIMATE_BACKENDS, accuracy_of
from tb_attn_plugin.cli.text import findings_lines, lines_text, mib_text, ms_text, si_text, table_cells
from tb_attn_plugin.types.encoding import printable

if TYPE_CHECKING:
    from tb_attn_plugin.types.schema import LayerStats, RunSummary, WorkerSummary
    from tb_attn_plugin.types.strategies import StrategyRow, StrategyTable

__all__ = ["STRATEGY_CSV_FIELDS", "strategies_csv", "strategies_table", "variant_lines"]

#: The CSV's columns: one row per run (implementation × sequence length); empty cells are "not
#: measured" (accuracy) or "no baseline run at this length" (speed-up).
STRATEGY_CSV_FIELDS = ("group", "strategy", "seq", "run", "backend", "exact", "clock", "time_us", "peak_bytes",
                       "alloc_bytes", "sxs_bytes", "flops", "iops", "quant_share", "rel_l1", "max_abs", "cosine",
                       "loss_diff", "baseline", "speedup", "pareto")


def _error(row: StrategyRow) -> str:
    return f"{row.accuracy.rel_l1:.2%}" if row.accuracy is not None else "not measured"


def _loss(row: StrategyRow) -> str:
    a = row.accuracy
    return "not measured" if a is None else "-" if a.loss_diff is None else f"{a.loss_diff:+.4f}"


def variant_lines(run: RunSummary, worker: WorkerSummary) -> list[str]:
    """The summary's lines on sparse and approximate attention: each mask and what it saved,
    integer ops, and the error the runner measured (``not measured`` for an approximate run
    without the record)."""
    lines = _mask_lines(worker)
    iops = sum(x.iops for x in worker.layers)
    if iops:
        lines.append(f"  integer ops: {si_text(iops)} per step (int8 GEMMs), apart from the FLOPs")
    acc = accuracy_of(run.metadata)
    if acc is not None:
        loss = f", loss {acc.loss_diff:+.4f}" if acc.loss_diff is not None else ""
        lines.append(f"  error against exact fp32 attention (worst layer): relative {acc.rel_l1:.3%}, max "
                     f"{acc.max_abs:.3g}, cosine {acc.cosine:.5f}{loss}")
    elif worker.backend in APPROXIMATE_BACKENDS:
        lines.append("  error against exact attention: not measured (no accuracy record in the run's metadata)")
    return lines


def _mask_lines(worker: WorkerSummary) -> list[str]:
    """One line per mask of the run's layers: what it keeps, the work asked and done, and what
    the sparsity saved (``analysis.sparsity``)."""
    groups: dict[str, list[LayerStats]] = {}
    for layer in worker.layers:
        if layer.mask is not None:
            groups.setdefault(layer.mask.spec, []).append(layer)
    lines = []
    for spec, layers in groups.items():
        m = layers[0].mask
        assert m is not None
        blocks = f", {m.blocks:.1%} of 128x128 blocks" if m.blocks is not None else ""
        saved = sum(x.mask.dense_equiv_us - x.mask.core_us for x in layers if x.mask is not None)
        tail = ("dense work (every score computed, then masked): nothing saved" if m.dense_work
                else f"sparsity saved {wording.ms(saved)} ms per step (the dense work at the layers' own FLOP rate)")
        lines.append(f"  mask {printable(spec)} in {wording.layer_list([x.layer for x in layers])}: keeps "
                     f"{m.kept:.1%} of scores{blocks}; core FLOPs per call {si_text(m.mask_flops)} asked, "
                     f"{si_text(m.work_flops)} done, {si_text(m.dense_flops)} dense; {tail}")
    return lines


def strategies_table(result: StrategyTable) -> str:
    header = ("strategy", "seq", "backend", "attn ms", "speed-up", "error", "loss diff", "peak MiB", "SxS MiB",
              "FLOPs", "IOPs", "quant", "pareto")
    lines = [f"the error column: relative L1 of the attention output against exact fp32 attention (worst layer); "
             f"accuracy-cost over {result.rel_tol:.1%} or a loss moved by more than {result.loss_tol:g}; "
             "~ = the steps spread over 20% of their median (noisy: no crossover or finding rests on it); "
             "≈ = a speed-up the two runs cannot tell from drift between runs (profile with --repeats 3)"]
    if not result.groups:
        lines.append("no runs with attention and a sequence length in their metadata")
    for g in result.groups:
        rows = [(x.strategy + (" *" if x.strategy == g.baseline else ""), str(x.seq), x.backend,
                 ms_text(x.time_us) + (" ~" if x.noisy else ""),
                 ("≈" if x.speedup_verdict is not None and not x.speedup_verdict.decided else "")
                 + (f"{x.speedup:.2f}x" if x.speedup is not None else "-"), _error(x), _loss(x), mib_text(x.peak_bytes),
                 mib_text(x.sxs_bytes), si_text(x.flops), si_text(x.iops),
                 f"{x.quant_share:.0%}" if x.quant_share is not None else "-", "yes" if x.pareto else "")
                for x in g.rows]
        cells = table_cells(rows)
        widths = [max(len(r[i]) for r in [header, *cells]) for i in range(len(header))]
        fmt = "  ".join(f"{{:<{w}}}" if i in (0, 2) else f"{{:>{w}}}" for i, w in enumerate(widths))
        lines += ["", f"{printable(g.label)}: attention {g.clock} time per step; speed-up against "
                      f"{printable(g.baseline or '-')} (*) at the same length",
                  fmt.format(*header), *(fmt.format(*r) for r in cells)]
        fitted = [s for s in g.series if s.fit is not None]
        if fitted:
            lines += ["", "  time ~ a * S^k, and where each crosses the baseline:"]
            for s in fitted:
                assert s.fit is not None
                cross = (f"  {printable(s.crossover.text)}" if s.crossover
                         else f"  {printable(s.crossover_note)}" if s.crossover_note else "")
                lines.append(f"  {printable(s.strategy):<24} k={s.fit.k:.2f}{cross}")
        lines += findings_lines(g.findings)
    return lines_text(lines)


def strategies_csv(result: StrategyTable) -> str:
    out = stdio.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(STRATEGY_CSV_FIELDS)
    for g in result.groups:
        for x in g.rows:
            a = x.accuracy
            w.writerow([printable(g.label), printable(x.strategy), x.seq, printable(x.run), x.backend, x.exact,
                        g.clock, x.time_us, x.peak_bytes, x.alloc_bytes, x.sxs_bytes, x.flops, x.iops,
                        "" if x.quant_share is None else x.quant_share,
                        *(("", "", "", "") if a is None else
                          (a.rel_l1, a.max_abs, a.cosine, "" if a.loss_diff is None else a.loss_diff)),
                        printable(g.baseline or ""), "" if x.speedup is None else x.speedup, x.pareto])
    return out.getvalue()
