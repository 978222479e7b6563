"""The roofline in the CLI: ``tb-attn summarize``'s roofline table (per layer × phase: bytes,
intensity, achieved rates, ceiling, share and verdict), its CSV columns, and ``tb-attn compare``'s
roofline columns. Definitions: ``analysis/measures/roofline.py`` and docs/summary.md ("Roofline")."""

from __future__ import annotations

from tb_attn_plugin.analysis.common.wording import share, size
from tb_attn_plugin.cli.text import num_text, printable, si_text, table_cells
from tb_attn_plugin.types.results import CompareRun
from tb_attn_plugin.types.schema import PhaseStats, Roof, Roofline, WorkerSummary

__all__ = ["ROOF_CSV_FIELDS", "compare_roof_cells", "peaks_line", "roof_csv_cells", "roofline_lines"]

ROOF_CSV_FIELDS = ("bytes", "intensity", "bytes_per_s", "ceiling_flops_per_s", "roof_share", "verdict")
_VERDICT_SHORT = {"compute-bound": "compute", "memory-bound": "memory", "latency-bound": "latency",
                  "no peak known": "no peak", "no bytes modeled": "no bytes", "above its ceiling": "above ceiling"}


def peaks_line(rl: Roofline) -> str:
    """"peaks: NVIDIA H100 80GB HBM3 (table: H100 SXM5, ...): fp32 67 T, bf16 990 T FLOP/s, 3.35 TB/s; ..."."""
    if not rl.peak_flops or rl.peak_bytes_per_s is None:
        return f"no peak known ({printable(rl.note)})" if rl.note else "no peak known"
    shown = ("fp32", "tf32", "bf16", "fp8", "int8")
    flops = ", ".join(f"{k} {si_text(v)}" for k, v in rl.peak_flops.items() if k in shown)
    # The ridge of attention's own dtype, as its points and verdicts use it.
    which = rl.attention.dtype if rl.attention is not None and rl.attention.dtype in rl.peak_flops else "fp32"
    ridge = rl.peak_flops.get(which or "fp32", 0.0)
    return (f"{printable(rl.device)} ({printable(rl.source)}): {flops} FLOP/s, {size(rl.peak_bytes_per_s)}/s; "
            f"ridge ({which}) {ridge / rl.peak_bytes_per_s:.3g} FLOP/B; launch floor {rl.launch_us:.3g} µs")


def _roof_text(r: Roof) -> str:
    parts = [f"{r.intensity:.3g} FLOP/B" if r.intensity is not None else "no bytes", f"{si_text(r.flops_per_s)}FLOP/s",
             f"{size(r.bytes_per_s)}/s"]
    if r.share is not None:
        parts.append(f"{share(r.share)} of its ceiling" + (f" ({si_text(r.ceiling)}FLOP/s)" if r.ceiling else ""))
    return ", ".join(parts) + f": {r.verdict}" + (" (bytes a lower bound)" if r.lower_bound else "")


def roofline_lines(worker: WorkerSummary) -> list[str]:
    """The summary's roofline: the peaks, attention as one point, and a table per layer × phase."""
    rl = worker.roofline
    if rl is None or not worker.layers:
        return []
    clock = "device time" if rl.clock == "device" else "CPU self time"
    lines = ["", f"  roofline ({clock}, forward; an upper bound, not a prediction): peaks {peaks_line(rl)}"]
    if rl.note and rl.peak_flops and rl.peak_bytes_per_s is not None:
        lines.append(f"  note: {printable(rl.note)}")
    if rl.attention is not None:
        lines.append(f"  attention: {_roof_text(rl.attention)}"
                     + ("; partial: phases captured into a CUDA/HIP graph ran no kernel here and are left out"
                        if rl.partial else ""))
    header = ("layer", "phase", "bytes", "FLOP/B", "FLOP/s", "B/s", "ceiling", "% roof", "bound")
    rows = []
    for layer in worker.layers:
        label = f"L{layer.layer}"
        for p in layer.phases:
            rows.append((label, p.phase, *_row(p.bytes, p.roof, p.unmodeled_ops > 0)))
            label = ""
        rows.append(("", "= layer", *_row(layer.bytes, layer.roof, False)))
    cells = table_cells(rows)
    widths = [max(len(r[i]) for r in [header, *cells]) for i in range(len(header))]
    fmt = "  " + "  ".join(f"{{:<{w}}}" if i in (0, 1, 8) else f"{{:>{w}}}" for i, w in enumerate(widths))
    lines.append(fmt.format(*header))
    lines.extend(fmt.format(*r) for r in cells)
    lines.append("  (bytes: the least its ops move, from their shapes, >= where some op has no formula; ceiling: "
                 "min(peak FLOP/s, FLOP/B x peak B/s); % roof: the time at the roofs over the time taken)")
    return lines


def _row(nbytes: float, r: Roof | None, lower: bool) -> tuple[str, ...]:
    # Bytes in binary units (MiB, GiB/s), as every other figure of the CLI.
    if r is None:
        return (size(nbytes), "-", "-", "-", "-", "-", "-")
    return ((">=" if lower or r.lower_bound else "") + size(nbytes),
            f"{r.intensity:.3g}" if r.intensity is not None else "-", si_text(r.flops_per_s),
            f"{size(r.bytes_per_s)}/s",
            si_text(r.ceiling) if r.ceiling else "-", share(r.share) if r.share is not None else "-",
            _VERDICT_SHORT.get(r.verdict, r.verdict))


def roof_csv_cells(p: PhaseStats) -> tuple[str, ...]:
    r = p.roof
    if r is None:
        return (num_text(p.bytes), "", "", "", "", "")
    return (num_text(p.bytes), num_text(r.intensity) if r.intensity is not None else "", num_text(r.bytes_per_s),
            num_text(r.ceiling) if r.ceiling is not None else "", num_text(r.share) if r.share is not None else "",
            r.verdict)


def compare_roof_cells(f: CompareRun) -> tuple[str, str, str]:
    """(FLOP/B, % roof, bound) of a run's attention."""
    r = f.roofline.attention if f.roofline is not None else None
    if r is None:
        return ("-", "-", "-")
    return (f"{r.intensity:.3g}" if r.intensity is not None else "-", share(r.share) if r.share is not None else "-",
            _VERDICT_SHORT.get(r.verdict, r.verdict))
