"""Findings on quantized attention: time spent converting to and from integers. Thresholds and
reasons are in ``docs/findings.md``. The cross-run rules on approximate attention (slower than
exact attention at this length, or an error that costs more than the time it saves) need several
runs: they are in ``analysis.strategies``.
"""

from __future__ import annotations

from tb_attn_plugin.analysis.attribution.query import RuleQuery
from tb_attn_plugin.analysis.common.finding import new_finding
from tb_attn_plugin.analysis.common.wording import duration, layer_list, pct
from tb_attn_plugin.types.schema import Finding
from tb_attn_plugin.vocab.scopes import QUANT_PHASES, in_order

__all__ = ["QUANT_RULES", "QUANT_SHARE", "quant_share"]

#: Quantizing the inputs and dequantizing the integer results (``QUANT_PHASES``) are the price of
#: int8 arithmetic, and over this share of the block they eat what the integer GEMM saves.
QUANT_SHARE = 0.25


def quant_share(phases: dict[str, float], block: float) -> float | None:
    """The quantize and dequantize phases' share of the block's time; None without them or time."""
    spent = sum(phases.get(p, 0.0) for p in in_order(QUANT_PHASES))
    return spent / block if block > 0 and any(p in phases for p in QUANT_PHASES) else None


def _quantization_overhead(t: RuleQuery) -> list[Finding]:
    rows = []
    for layer in t.s.layers:
        times = {p.phase: p.device_us if t.cuda else p.cpu_us for p in layer.phases}
        block = layer.device_us if t.cuda else layer.cpu_us
        share = quant_share(times, block)
        if share is not None and share > QUANT_SHARE:
            rows.append((layer.layer, share, sum(times.get(p, 0.0) for p in in_order(QUANT_PHASES)), block))
    if not rows:
        return []
    layers = [r[0] for r in rows]
    spent, block = sum(r[2] for r in rows), sum(r[3] for r in rows)
    share = spent / block
    return [new_finding(
        "quantization-overhead", "medium" if share > 2 * QUANT_SHARE else "low",
        "Quantizing and dequantizing take a large share of attention",
        f"In {layer_list(layers)}, the quantize and dequantize phases take {duration(spent)} per step, "
        f"{pct(share)} of the blocks' {'device' if t.cuda else 'CPU'} time ({duration(block)}): converting Q and K "
        "to int8 and the int32 scores back costs more than a quarter of what the integer Q·Kᵀ is meant to save.",
        "Fuse the conversions into the attention kernel (SageAttention quantizes Q and K inside its Triton kernel "
        "and dequantizes in registers), or quantize once per sequence rather than per call; on a CPU, where int8 "
        "GEMMs are not faster than fp32 ones, keep exact attention.",
        layers=layers, ops=[], kernels=[], time_us=spent,
        details={"share": share, "quant_us": spent, "block_us": block})]


QUANT_RULES = (_quantization_overhead,)
