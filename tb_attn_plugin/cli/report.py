"""Terminal renderings for ``tb-attn``: summary tables, JSON and CSV, comparisons, ranks and
gate reports. Pure: values in, text out (``cli.py`` reads the traces and writes the text).

Names come from file names, trace contents and run metadata, which anyone who can write to the
logdir controls. Every string that reaches the terminal goes through ``printable``: tables and
CSV escape each cell before measuring widths, and each finished line once more, so an escape
sequence in a name is shown, never obeyed. JSON is ASCII, with ``\\uXXXX`` escapes. Times and
sizes are written as the findings write them (``analysis.wording``).
"""

from __future__ import annotations

import csv
import io as stdio
import textwrap
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tb_attn_plugin.analysis.common import wording
from tb_attn_plugin.cli.text import (
    findings_lines,
    json_text,
    lines_text,
    mib_text,
    ms_text,
    num_text,
    ratio_text,
    si_text,
    table_cells,
)
from tb_attn_plugin.types.encoding import printable

if TYPE_CHECKING:
    from tb_attn_plugin.types.results import Comparison, RankView, ScalingFits
    from tb_attn_plugin.types.schema import Fit, RunSummary, Spread

__all__ = [
    "CSV_FIELDS",
    "compare_table",
    "json_text",
    "ranks_table",
    "spread_text",
    "summary_csv",
    "summary_json",
    "summary_table",
]


def ranks_table(view: RankView) -> str:
    """The ranks table, with the labels of its metric and median as the route and the tab give them."""
    layers = [a.layer for a in view.all_ranks]
    header = ("rank", "worker", "fastest ms", "step ms", "attn ms", "coll ms", "other ms",
              *(f"L{k} ms" for k in layers), "heads", "")
    rows = [(str(r.rank if r.rank is not None else "-"), r.worker, ms_text(r.attention_best_us), ms_text(r.step_us),
             ms_text(r.attention_us), ms_text(r.collective_us), ms_text(r.other_us),
             *(ms_text(next((x.time_us for x in r.layers if x.layer == k), 0.0)) for k in layers),
             _head_span(r.heads), "STRAGGLER" if r.straggler else "") for r in view.ranks]
    for agg in ("mean", "median", "max"):
        rows.append(("all", agg, *(ms_text(getattr(c, f"{agg}_us")) for c in view.columns),
                     *(ms_text(getattr(a, f"{agg}_us")) for a in view.all_ranks), "", ""))
    rows = table_cells(rows)
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    fmt = "  ".join(f"{{:<{w}}}" if i < 2 or i >= len(widths) - 2 else f"{{:>{w}}}" for i, w in enumerate(widths))
    sampled = f" of {view.ranks_total} (--ranks {view.ranks_selected})" if view.ranks_selected else ""
    lines = [f"{view.run}: {len(view.ranks)} ranks{sampled}",
             f"fastest: {view.metric_label} (the straggler metric)",
             f"other columns: {view.means_label}",
             f"median: {view.median_label}",
             fmt.format(*header).rstrip(), *(fmt.format(*row).rstrip() for row in rows)]
    for s in view.stragglers:
        lines.append(f"straggler: rank {s.rank if s.rank is not None else '-'} ({s.worker}): {s.label}: "
                     f"{ms_text(s.value_us)} ms against the median over ranks {ms_text(s.median_us)} ms "
                     f"({s.ratio:.2f}x, margin {view.margin:.0%})")
    names = sorted({c.name for r in view.ranks for c in r.collectives})
    if names:
        lines.append("collectives per step: " + "; ".join(
            f"rank {r.rank if r.rank is not None else r.worker}: " + ", ".join(
                f"{c.name} x{c.calls:g} {ms_text(c.device_us if view.clock == 'device' else c.cpu_us)} ms"
                for c in r.collectives) for r in view.ranks if r.collectives))
    if view.heads:
        kind = "sharded across ranks (tensor parallel)" if view.heads_sharded else "on every rank"
        gaps = "" if view.heads_complete else " (with gaps: some heads were not seen)"
        lines.append(f"heads: {view.head_count} per layer, {kind}{gaps}; the map shows {view.heads_label}")
    return lines_text(lines)


def _head_span(heads: list[int]) -> str:
    if len(heads) <= 1:
        return str(heads[0]) if heads else "-"
    return wording.int_range(heads) or ",".join(map(str, heads))


def compare_table(result: Comparison, scale: ScalingFits) -> str:
    from tb_attn_plugin.cli.report_generation import (
        compare_decode_lines,  # lazy: `--help` loads no analysis
    )
    from tb_attn_plugin.cli.report_roofline import (
        compare_roof_cells,  # lazy: `--help` loads no analysis
    )

    header = ("run", "impl", "seq", "dtype", "backend", "attn ms", "steps' spread", "ratio", "alloc MiB", "ratio",
              "peak MiB", "ratio", "FLOP/s", "ratio", "FLOP/B", "% roof", "bound", "ops/fwd", "kernels/fwd",
              "findings")
    rows = []
    for f in result.runs:
        r = f.ratio
        device = f.clock == "device"
        t = f.attention_device_us if device else f.attention_cpu_us
        t_ratio = r.attention_device_us if device else r.attention_cpu_us
        undecided = f.time_verdict is not None and not f.time_verdict.decided
        rows.append((f.run + (" *" if f.baseline == f.run else ""), str(f.impl or "-"), str(f.seq or "-"),
                     str(f.dtype or "-"), f.backend, ms_text(t) + (" partial" if f.device_partial else ""),
                     spread_text(f.attention_spread),
                     ("≈" if undecided and t_ratio is not None else "") + ratio_text(t_ratio),
                     mib_text(f.alloc_bytes), ratio_text(r.alloc_bytes),
                     mib_text(f.peak_bytes), ratio_text(r.peak_bytes), si_text(f.flops_per_s),
                     ratio_text(r.flops_per_s),
                     *compare_roof_cells(f), f"{f.ops_per_forward:.1f}", f"{f.kernels_per_forward:.1f}",
                     ",".join(f.findings) or "-"))
    cells = table_cells(rows)
    widths = [max(len(row[i]) for row in [header, *cells]) for i in range(len(header))]
    fmt = "  ".join(f"{{:<{w}}}" if i < 5 or i == len(widths) - 1 else f"{{:>{w}}}" for i, w in enumerate(widths))
    lines = [printable(h.sentence) for h in result.headlines]
    lines += [""] if lines else []
    lines += [f"baseline: {result.baseline}; ratios only within groups of like-for-like runs (same model, sizes, "
              "seq, dtype, mode, parallel layout), against the run marked * in each (the baseline's implementation "
              "there, else the group's first by name)",
              "time is device time where all of attention's kernels ran in the trace, else CPU (a trace whose "
              "kernels were partly captured into a CUDA/HIP graph is on CPU time, marked 'partial'); means per "
              "step; ~ marks a time whose steps "
              "spread over 20% of their median; ≈ a time ratio the two runs cannot tell from drift between runs "
              "(one run each: profile with --repeats 3); FLOP/B, % roof, bound: attention's forward under the "
              "roofline, on device time or, on a CPU, CPU self time (tb-attn summarize shows the peaks and each "
              "phase); - a figure the trace did not record",
              fmt.format(*header), *(fmt.format(*row) for row in cells)]
    alone = [f.run for f in result.runs if f.unpaired]
    if alone:
        lines.append(f"no ratios for {', '.join(printable(r) for r in alone)}: " + printable(
            "no other run here has the same model, sizes and configuration (implementation aside), and a ratio "
            "between different models measures the models, not the implementations"))
    lines += [f"error: {e.run}: {e.error}" for e in result.errors]
    lines += compare_decode_lines(result)
    for f in result.runs:
        if f.why_slower:
            lines += ["", f"why {printable(f.run)} is slower than {printable(f.baseline or 'the baseline')} "
                          "(same model and configuration):"]
            for reason in f.why_slower:
                lines.extend(textwrap.wrap(printable(reason), width=100, initial_indent="  - ",
                                           subsequent_indent="    "))
    fitted = [s for s in scale.series if s.time_fit or s.memory_fit]
    if fitted:
        lines.append("")
        lines.append("scaling with sequence length (cost ~ a * S^k; decode series: time per decode step and KV "
                     "cache against the context):")
        for s in fitted:
            seqs = ("ctx " if s.x == "context" else "") + ",".join(str(p.seq) for p in s.points)
            tf, mf = s.time_fit, s.memory_fit
            label = printable(s.label)
            lines.append(f"  {label:<32} seq {seqs:<16} time k={tf.k:.2f} ({_quality(tf)})"
                         if tf else f"  {label:<32} seq {seqs:<16} time -")
            if mf:
                lines[-1] += f"  memory k={mf.k:.2f} ({_quality(mf)})"
            if s.expect:
                lines.append(f"  {'':<32} expected: {printable(s.expect)}")
    return lines_text(lines)


def _quality(fit: Fit) -> str:
    return f"R2 {fit.r2:.2f}, {fit.points} points" if fit.r2 is not None else f"{fit.points} points: no fit quality"


def summary_json(summaries: Sequence[RunSummary]) -> str:
    from tb_attn_plugin.types.encoding import (
        summaries_json,  # lazy: `--help` loads no analysis
    )

    return summaries_json(summaries).decode("ascii")


CSV_FIELDS = ("run", "worker", "span", "step_count", "layer", "module", "backend", "inferred", "core_only", "phase",
              "calls", "cpu_us", "cpu_self_us", "device_us", "kernels", "flops", "flops_per_s", "alloc_bytes",
              "freed_bytes", "peak_bytes", "sxs_bytes", "bwd_calls", "bwd_cpu_us", "bwd_device_us", "bwd_flops",
              "bytes", "intensity", "bytes_per_s", "ceiling_flops_per_s", "roof_share", "verdict")


def summary_csv(summaries: Sequence[RunSummary]) -> str:
    from tb_attn_plugin.cli.report_roofline import (
        roof_csv_cells,  # lazy: `--help` loads no analysis
    )

    buf = stdio.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_FIELDS)
    for run in summaries:
        for worker in run.workers:
            for layer in worker.layers:
                for ph in layer.phases:
                    w.writerow(printable(str(c)) for c in (
                        run.run, worker.worker, worker.span or "", worker.step_count,
                        layer.layer, layer.module or "", layer.backend, layer.inferred, layer.core_only, ph.phase,
                        num_text(ph.calls), num_text(ph.cpu_us), num_text(ph.cpu_self_us),
                        "" if ph.captured else num_text(ph.device_us),  # captured into a graph: unavailable
                        num_text(ph.kernels), num_text(ph.flops), "" if ph.captured else num_text(ph.flops_per_s),
                        num_text(ph.alloc_bytes),
                        num_text(ph.freed_bytes), ph.peak_bytes, num_text(ph.sxs_bytes), num_text(ph.backward.calls),
                        num_text(ph.backward.cpu_us), num_text(ph.backward.device_us), num_text(ph.backward.flops),
                        *roof_csv_cells(ph)))
    return buf.getvalue()


def spread_text(spread: Spread | None, *, mark: bool = True) -> str:
    """A figure's steps as "12.1-14.3 ms over 5", "~" in front when noisy (``mark``); "-" with one step."""
    if spread is None:
        return "-"
    what = "IQR " if spread.kind == "iqr" else ""
    return (f"{'~' if spread.noisy and mark else ''}{what}{wording.ms(spread.lo)}-{wording.ms(spread.hi)} ms"
            f" over {spread.steps}")


def _noisy_ms(us: float, spreads: dict[str, Spread], key: str) -> str:
    """A time in ms, "~" in front when its steps spread over 20% of their median."""
    s = spreads.get(key)
    return ("~" if s is not None and s.noisy and us else "") + ms_text(us)


def summary_table(summaries: Sequence[RunSummary]) -> str:
    from tb_attn_plugin.analysis.common.clock import PARTIAL_DEVICE, clock_of  # lazy: `--help` loads no analysis
    from tb_attn_plugin.cli.report_generation import (
        generation_lines,  # lazy: `--help` loads no analysis
    )
    from tb_attn_plugin.cli.report_roofline import (
        roofline_lines,  # lazy: `--help` loads no analysis
    )
    from tb_attn_plugin.cli.report_serving import (
        serving_lines,  # lazy: `--help` loads no analysis
    )
    from tb_attn_plugin.cli.report_strategies import (
        variant_lines,  # lazy: `--help` loads no analysis
    )

    lines: list[str] = []
    header = ("layer", "phase", "calls", "cpu ms", "dev ms", "FLOPs", "FLOP/s", "alloc MiB", "peak MiB", "SxS MiB",
              "bwd cpu ms", "bwd dev ms")
    for run in summaries:
        for worker in run.workers:
            share = worker.attention_share_device if worker.attention_share_device is not None \
                else worker.attention_share_cpu
            where = "device" if worker.attention_share_device is not None else "CPU"
            what = wording.attention(sum(x.core_only for x in worker.layers), len(worker.layers)).removeprefix("the ")
            lines.append(f"run {run.run}  worker {worker.worker}" + (f"  span {worker.span}" if worker.span else "")
                         + f"  [{worker.file}]")
            lines.append(f"  device {worker.gpu or worker.device}, backend {worker.backend}, "
                         f"{worker.step_count} step(s)"
                         + (", inferred (no tb-attn scopes)" if worker.inferred else "")
                         + ("" if worker.memory_recorded else f", {wording.MEMORY_NOT_RECORDED}")
                         + (f", {what} {share:.1%} of {where} step time" if share is not None else "")
                         + (f"; {PARTIAL_DEVICE}" if worker.device_partial else ""))
            if worker.headline:
                lines.extend(textwrap.wrap(printable(worker.headline), width=100, initial_indent="  ",
                                           subsequent_indent="  "))
            clock = clock_of(worker)
            spread = worker.spread.get(f"attention_{clock}_us")
            if spread is not None:
                lines.append(f"  {what} {clock} time per step: mean "
                             f"{wording.ms(getattr(worker, f'attention_{clock}_us'))} ms, steps "
                             f"{spread_text(spread, mark=False)}"
                             + (" (noisy: over 20% of the median)" if spread.noisy else ""))
            for note in worker.notes:
                lines.append(f"  note: {note}")
            lines.extend(variant_lines(run, worker))
            lines.extend(generation_lines(worker))
            lines.extend(serving_lines(worker))
            if not worker.layers:
                lines.append("")
                continue
            rows = []
            for layer in worker.layers:
                label = f"L{layer.layer}" + (f" {layer.module}" if layer.module else "")
                for ph in layer.phases:
                    sp = ph.spread
                    rows.append((label, ph.phase, f"{ph.calls:g}", _noisy_ms(ph.cpu_us, sp, "cpu_us"),
                                 _noisy_ms(ph.device_us, sp, "device_us"), si_text(ph.flops),
                                 si_text(ph.flops_per_s), mib_text(ph.alloc_bytes), mib_text(ph.peak_bytes),
                                 mib_text(ph.sxs_bytes),
                                 _noisy_ms(ph.backward.cpu_us, sp, "bwd_cpu_us"),
                                 _noisy_ms(ph.backward.device_us, sp, "bwd_device_us")))
                    label = ""
                sp = layer.spread
                part = "*" if any(p.captured for p in layer.phases) else ""  # some phase ran no kernel here
                rows.append(("", f"= {layer.backend}", f"{layer.calls:g}", _noisy_ms(layer.cpu_us, sp, "cpu_us"),
                             _noisy_ms(layer.device_us, sp, "device_us") + part,
                             si_text(layer.flops), si_text(layer.flops_per_s), mib_text(layer.alloc_bytes),
                             mib_text(layer.peak_bytes), mib_text(layer.sxs_bytes), _noisy_ms(layer.backward.cpu_us, sp,
                                                                                      "bwd_cpu_us"),
                             _noisy_ms(layer.backward.device_us, sp, "bwd_device_us")))
            total_flops = sum(layer.flops for layer in worker.layers)
            rows.append(("total", "", "", ms_text(sum(layer.cpu_us for layer in worker.layers)),
                         ms_text(sum(layer.device_us for layer in worker.layers))
                         + ("*" if worker.device_partial else ""), si_text(total_flops), "",
                         mib_text(sum(layer.alloc_bytes for layer in worker.layers)), "",
                         mib_text(sum(layer.sxs_bytes for layer in worker.layers)),
                         ms_text(sum(layer.backward.cpu_us for layer in worker.layers)),
                         ms_text(sum(layer.backward.device_us for layer in worker.layers))))
            cells = table_cells(rows)
            widths = [max(len(r[i]) for r in [header, *cells]) for i in range(len(header))]
            fmt = "  " + "  ".join(f"{{:<{w}}}" if i < 2 else f"{{:>{w}}}" for i, w in enumerate(widths))
            lines.append(fmt.format(*header))
            lines.extend(fmt.format(*r) for r in cells)
            lines.append(f"  (means per step over {worker.step_count} step(s); ~ = the steps spread over 20% of "
                         "their median; bwd = backward work attributed through autograd sequence numbers"
                         + ("; * = partial: phases captured into a CUDA/HIP graph ran no kernel here, - = none" if
                            worker.device_partial else "") + ")")
            lines.extend(roofline_lines(worker))
            lines.extend(findings_lines(worker.findings))
            lines.append("")
        for err in run.errors:
            lines.append(f"run {run.run}  file {err.file}: error: {err.error}")
            lines.append("")
    return lines_text(lines)
