"""``analysis.quant_findings``: the quantize and dequantize phases' share of an int8 block
(``quant_share``) and the quantization-overhead rule on it. The rule runs on a ``RuleQuery`` over a
tiny scoped trace whose summary's layers are replaced by hand-built ones, so every share, time and
severity below is worked by hand from the phase times given."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from tb_attn_plugin.analysis.attribution.analyze import Analysis, analyze
from tb_attn_plugin.analysis.attribution.query import RuleQuery
from tb_attn_plugin.analysis.findings.quant_findings import QUANT_RULES, QUANT_SHARE, quant_share
from tb_attn_plugin.analysis.summary import summarize_analysis
from tb_attn_plugin.trace.decode import decode_bytes
from tb_attn_plugin.types.schema import Finding, LayerStats, WorkerSummary

replace = msgspec.structs.replace
CPU = {"pid": 1, "tid": 1}
(RULE,) = QUANT_RULES


def _x(cat: str, name: str, ts: float, dur: float) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, **CPU, "args": {}}


@pytest.fixture(scope="module")
def base() -> tuple[Analysis, WorkerSummary]:
    """One step with one block and one phase: the template the hand-built layers are made from."""
    events = [_x("user_annotation", "ProfilerStep#1", 0, 1000), _x("user_annotation", "tbattn.v1/L0", 10, 100),
              _x("user_annotation", "tbattn.v1/L0/quantize", 11, 30), _x("cpu_op", "aten::round", 12, 20)]
    analysis = analyze(decode_bytes(json.dumps({"traceEvents": events}).encode()))
    summary = summarize_analysis(analysis)
    assert [x.layer for x in summary.layers] == [0]
    return analysis, summary


def _layer(template: LayerStats, layer: int, block: tuple[float, float], phases: dict[str, tuple[float, float]]
           ) -> LayerStats:
    """A layer of (CPU, device) block time with phases of (CPU, device) time each."""
    (proto,) = [p for p in template.phases if p.phase == "quantize"]
    made = [replace(proto, phase=name, cpu_us=cpu, device_us=dev) for name, (cpu, dev) in phases.items()]
    return replace(template, layer=layer, cpu_us=block[0], device_us=block[1], phases=made)


def _run(base: tuple[Analysis, WorkerSummary], layers: list[LayerStats], device: str = "cpu") -> list[Finding]:
    analysis, summary = base
    s = replace(summary, layers=layers, device=device)
    return RULE(RuleQuery(analysis.events, analysis.attr, s, {}))


def test_quant_share_adds_both_conversions_over_the_block() -> None:
    assert quant_share({"quantize": 20.0, "dequantize": 10.0, "qk_matmul": 50.0}, 100.0) == pytest.approx(0.3)
    assert quant_share({"dequantize": 5.0}, 20.0) == pytest.approx(0.25)  # either phase alone: 5 / 20
    assert quant_share({"quantize": 0.0}, 50.0) == 0.0  # present but empty: a share of nothing, not None


@pytest.mark.parametrize(("phases", "block"), [
    ({"qk_matmul": 1.0, "softmax": 2.0}, 10.0),  # no conversion phase: not int8 attention
    ({}, 10.0),
    ({"quantize": 5.0}, 0.0),  # no block time to share
    ({"quantize": 5.0}, -1.0),  # a nonsense block time
])
def test_quant_share_has_no_value_without_conversions_or_time(phases: dict[str, float], block: float) -> None:
    assert quant_share(phases, block) is None


def test_a_layer_whose_conversions_pass_a_quarter_is_a_low_finding(base: tuple[Analysis, WorkerSummary]) -> None:
    (template,) = base[1].layers
    # Layer 0: (20 + 10) / 100 = 30 % > 25 %; layer 1: (10 + 10) / 100 = 20 %, under the threshold.
    layers = [_layer(template, 0, (100, 0), {"quantize": (20, 0), "qk_matmul": (40, 0), "dequantize": (10, 0)}),
              _layer(template, 1, (100, 0), {"quantize": (10, 0), "dequantize": (10, 0)})]
    (f,) = _run(base, layers)
    assert (f.id, f.severity) == ("quantization-overhead", "low")
    assert f.evidence.layers == [0] and f.evidence.time_us == 30
    assert f.evidence.details == {"share": 0.3, "quant_us": 30, "block_us": 100}
    assert "In layer 0, the quantize and dequantize phases take 30.0 µs per step, 30% of the blocks' CPU time " \
           "(100.0 µs)" in f.explanation


def test_the_share_quoted_is_of_the_flagged_layers_together(base: tuple[Analysis, WorkerSummary]) -> None:
    """Layers 0 (30 of 100 µs) and 2 (60 of 100 µs) pass; layer 1 (10 of 100 µs) does not and is left
    out of the sums: 90 of 200 µs is 45 %, under twice the threshold, so low."""
    (template,) = base[1].layers
    layers = [_layer(template, 0, (100, 0), {"quantize": (30, 0)}),
              _layer(template, 1, (100, 0), {"quantize": (10, 0)}),
              _layer(template, 2, (100, 0), {"dequantize": (60, 0)})]
    (f,) = _run(base, layers)
    assert f.severity == "low" and f.evidence.layers == [0, 2]
    assert f.evidence.details == {"share": 0.45, "quant_us": 90, "block_us": 200}
    assert "In layers 0 and 2," in f.explanation and "90.0 µs per step, 45% of the blocks' CPU time (200.0 µs)" \
        in f.explanation


@pytest.mark.parametrize(("quant", "expected"), [
    (25.0, None),  # exactly a quarter: not over it
    (25.5, "low"),
    (50.0, "low"),  # exactly twice the threshold: not over it
    (51.0, "medium"),
])
def test_thresholds_are_strict(base: tuple[Analysis, WorkerSummary], quant: float, expected: str | None) -> None:
    assert QUANT_SHARE == 0.25  # the bounds below are a quarter and a half of the 100 µs block
    (template,) = base[1].layers
    found = _run(base, [_layer(template, 0, (100, 0), {"quantize": (quant, 0)})])
    assert [f.severity for f in found] == ([expected] if expected else [])


def test_a_gpu_trace_is_judged_on_device_time(base: tuple[Analysis, WorkerSummary]) -> None:
    (template,) = base[1].layers
    # CPU: 80 of 100 µs in conversions (dispatch); device: 5 of 200 µs. On a GPU trace only the latter counts.
    cheap_on_device = [_layer(template, 0, (100, 200), {"quantize": (80, 5)})]
    assert _run(base, cheap_on_device, device="cuda") == []
    assert [f.severity for f in _run(base, cheap_on_device, device="cpu")] == ["medium"]  # 80 % > 50 %
    # Device: 120 of 200 µs = 60 %.
    costly_on_device = [_layer(template, 0, (100, 200), {"quantize": (1, 100), "dequantize": (1, 20)})]
    (f,) = _run(base, costly_on_device, device="cuda")
    assert f.severity == "medium" and f.evidence.details == {"share": 0.6, "quant_us": 120, "block_us": 200}
    assert "of the blocks' device time (200.0 µs)" in f.explanation


def test_no_conversions_or_no_time_no_finding(base: tuple[Analysis, WorkerSummary]) -> None:
    (template,) = base[1].layers
    assert _run(base, []) == []
    assert _run(base, [_layer(template, 0, (100, 0), {"qk_matmul": (90, 0)})]) == []
    assert _run(base, [_layer(template, 0, (0, 0), {"quantize": (0, 0)})]) == []  # a block of no time


def test_the_rule_reads_the_trace_it_was_built_from(base: tuple[Analysis, WorkerSummary]) -> None:
    """Unchanged, the template's own layer: block 100 µs, quantize 30 µs (its scope's wall time): 30 %."""
    analysis, summary = base
    (f,) = RULE(RuleQuery(analysis.events, analysis.attr, summary, {}))
    assert f.evidence.details == {"share": 0.3, "quant_us": 30, "block_us": 100}
