"""A generation's prefill and decode steps in the CLI: ``tb-attn summarize``'s lines, the per-step
CSV (``summarize --format csv --tokens``), and ``tb-attn compare``'s decode table."""

from __future__ import annotations

import csv
import io as stdio
import textwrap
from collections.abc import Sequence

from tb_attn_plugin.analysis.common.wording import duration, share, size
from tb_attn_plugin.cli.text import num_text, ratio_text, si_text, table_cells
from tb_attn_plugin.types.encoding import printable
from tb_attn_plugin.types.results import Comparison
from tb_attn_plugin.types.schema import Generation, GenerationPhase, LayerStats, RunSummary, WorkerSummary

__all__ = ["TOKEN_CSV_FIELDS", "compare_decode_lines", "generation_lines", "tokens_csv"]

TOKEN_CSV_FIELDS = ("run", "worker", "span", "clock", "step", "role", "context", "queries", "step_us", "attention_us",
                    "core_us", "kv_cache_us", "kv_bytes", "kv_alloc_bytes", "launches", "flops")


def generation_lines(worker: WorkerSummary) -> list[str]:
    """The summary's lines on a generation: prefill and decode apart, the decode fit, the KV cache."""
    g = worker.generation
    if g is None:
        return []
    decode_n = sum(1 for t in g.tokens if t.role == "decode")
    heads = f"{g.kv_heads} KV heads" + (f" for {g.heads} query heads" if g.heads else "") if g.kv_heads else ""
    what = ", ".join(p for p in (f"prompt {g.prompt_len} tokens" if g.prompt_len else "", f"{decode_n} decode steps",
                                 f"batch {g.batch}" if g.batch else "", f"{g.kv_cache} KV cache" if g.kv_cache else "",
                                 heads, g.kv_dtype or "") if p)
    lines = [f"  generation ({g.clock} time; steps from {g.source}): {what}"]
    for name, phase in (("prefill", g.prefill), ("decode", g.decode)):
        if phase is not None:
            lines.append(f"    {name:<8}{_phase_text(phase, per_token=name == 'decode')}")
    if g.fit is not None:
        quality = f", R2 {g.fit.r2:.2f}" if g.fit.r2 is not None else ""
        line = f"    decode attention per step ~ a * context^k: k={g.fit.k:.2f}{quality} over {g.fit.points} contexts"
        if g.per_key_us is not None:
            line += f"; straight line: {duration(g.fixed_us or 0.0)} + {duration(g.per_key_us)} per key"
        lines.append(line)
    if g.fit_note:
        lines.extend(_wrap(g.fit_note, 4))
    lines.append(f"    KV cache: {size(g.kv_bytes_per_layer)} per layer at the last step "
                 f"({size(g.kv_bytes_per_head)} per KV head), growing {size(g.kv_bytes_per_token)} per token over "
                 "all layers")
    lines.extend(_wrap(f"memory events: {g.kv_memory}", 6))
    if g.realloc_bytes_per_token:
        lines.append(f"    appends allocate {size(g.realloc_bytes_per_token)} per decode step (the cache copied)")
    ref = (f", {g.achieved_bytes_per_s / g.reference_bytes_per_s:.0%} of {size(g.reference_bytes_per_s)}/s ("
           f"{g.reference})" if g.reference_bytes_per_s else "; no reference bandwidth recorded")
    lines.extend(_wrap(f"decode reads {size(g.read_bytes_per_token)} of K and V per step: "
                       f"{size(g.achieved_bytes_per_s)}/s over the core's time{ref}", 4))
    for name, phase in (("prefill", g.prefill), ("decode", g.decode)):
        r = phase.roof if phase is not None else None
        if r is not None:
            reach = f", {share(r.share)} of its ceiling" if r.share is not None else ""
            lines.append(f"    roofline, {name}: {r.intensity:.3g} FLOP/B{reach}: {r.verdict}"
                         if r.intensity is not None else f"    roofline, {name}: {r.verdict}")
    lines.extend(_layer_table(g))
    return lines


def _phase_text(p: GenerationPhase, *, per_token: bool) -> str:
    per = " per step" if per_token else ""
    return (f"step {duration(p.step_us)}{per}, attention {duration(p.attention_us)} (core {duration(p.core_us)}, "
            f"kv_cache {duration(p.kv_cache_us)}), {p.launches:.0f} launches, {si_text(p.flops)} FLOPs, "
            f"K and V {size(p.kv_bytes)} (mean of {p.steps} step{'s' if p.steps != 1 else ''})")


def _layer_table(g: Generation) -> list[str]:
    prefill = {layer.layer: layer for layer in (g.prefill.layers if g.prefill else [])}
    decode = {layer.layer: layer for layer in (g.decode.layers if g.decode else [])}
    if not prefill and not decode:
        return []
    device = g.clock == "device"

    def t(layer: LayerStats | None) -> str:
        return duration(layer.device_us if device else layer.cpu_us) if layer else "-"

    header = ("layer", "backend", "prefill", "decode/step", "prefill FLOPs", "decode FLOPs", "decode alloc")
    rows = [(f"L{n}", (decode.get(n) or prefill[n]).backend, t(prefill.get(n)), t(decode.get(n)),
             si_text(prefill[n].flops) if n in prefill else "-", si_text(decode[n].flops) if n in decode else "-",
             size(decode[n].alloc_bytes) if n in decode else "-") for n in sorted(prefill.keys() | decode.keys())]
    cells = table_cells(rows)
    widths = [max(len(r[i]) for r in [header, *cells]) for i in range(len(header))]
    fmt = "    " + "  ".join(f"{{:<{wd}}}" if i < 2 else f"{{:>{wd}}}" for i, wd in enumerate(widths))
    return [fmt.format(*header), *(fmt.format(*r) for r in cells)]


def _wrap(text: str, indent: int) -> list[str]:
    return textwrap.wrap(printable(text), width=100, initial_indent=" " * indent, subsequent_indent=" " * (indent + 2))


def tokens_csv(summaries: Sequence[RunSummary]) -> str:
    """One row per generation step of every worker that has them."""
    buf = stdio.StringIO()
    out = csv.writer(buf, lineterminator="\n")
    out.writerow(TOKEN_CSV_FIELDS)
    for run in summaries:
        for worker in run.workers:
            g = worker.generation
            for t in g.tokens if g is not None else []:
                out.writerow(printable(str(c)) for c in (
                    run.run, worker.worker, worker.span or "", g.clock if g else "", t.step, t.role, t.context,
                    t.queries, num_text(t.step_us), num_text(t.attention_us), num_text(t.core_us),
                    num_text(t.kv_cache_us),
                    num_text(t.kv_bytes), num_text(t.kv_alloc_bytes), num_text(t.launches), num_text(t.flops)))
    return buf.getvalue()


def compare_decode_lines(result: Comparison) -> list[str]:
    """Compare's table of decode cost per decode step, for the runs that are generations."""
    runs = [f for f in result.runs if f.decode is not None]
    if not runs:
        return []
    header = ("run", "cache", "kv heads", "context", "decode/step", "ratio", "step", "prefill", "reads/step",
              "launches/step")
    rows = []
    for f in runs:
        d = f.decode
        assert d is not None
        rows.append((f.run + (" *" if f.baseline == f.run else ""), d.kv_cache or "-", str(d.kv_heads or "-"),
                     f"{d.context:.0f}", duration(d.us_per_step), ratio_text(f.ratio.decode_us_per_step),
                     duration(d.step_us), duration(d.prefill_us) if d.prefill_us is not None else "-",
                     size(d.read_bytes_per_token), f"{d.launches_per_step:.0f}"))
    cells = table_cells(rows)
    widths = [max(len(r[i]) for r in [header, *cells]) for i in range(len(header))]
    fmt = "  ".join(f"{{:<{wd}}}" if i < 2 else f"{{:>{wd}}}" for i, wd in enumerate(widths))
    return ["", "decode, per step (one token per sequence; attention time on the run's clock; ratios within the "
                "groups above):", fmt.format(*header), *(fmt.format(*r) for r in cells)]
