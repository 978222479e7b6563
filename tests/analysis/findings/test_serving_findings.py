"""``per-sequence-attention`` (issue 33): a block that calls its core once per sequence of the batch.

The trace is what a serving engine's torch-native fallback records (SGLang's ``torch_native``
backend calls ``scaled_dot_product_attention`` on each request's q, k and v in turn): inside one
attention module, the projections, then N SDPA calls of batch 1, then the output projection.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from test_finding_figures import problems

from tb_attn_plugin.analysis.attribution.analyze import analyze
from tb_attn_plugin.analysis.summary import summarize_trace
from tb_attn_plugin.trace.decode import decode_bytes
from tb_attn_plugin.types.schema import Finding, WorkerSummary

H, S, D = 4, 16, 8


def _x(name: str, ts: float, dur: float, cat: str = "cpu_op", dims: list[Any] | None = None) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur,
            "args": {} if dims is None else {"Input Dims": dims}}


def _trace(batches: list[int], calls: int = 1) -> WorkerSummary:
    """``calls`` calls of an attention module per step, each running one SDPA per entry of
    ``batches`` (q of that batch), 50 µs each, between its projections."""
    events = [_x("ProfilerStep#1", 0, 100_000, "user_annotation")]
    t = 10.0
    for _ in range(calls):
        start = t
        body = [_x("aten::linear", t + 5, 20, dims=[[sum(batches), S, H * D], [3 * H * D, H * D], [3 * H * D]])]
        t += 30
        for b in batches:
            body += [_x("aten::scaled_dot_product_attention", t, 50, dims=[[b, H, S, D]] * 3),
                     _x("aten::_scaled_dot_product_flash_attention_for_cpu", t + 5, 40, dims=[[b, H, S, D]] * 3)]
            t += 60
        body.append(_x("aten::linear", t, 20, dims=[[sum(batches), S, H * D], [H * D, H * D], [H * D]]))
        t += 30
        events.append(_x("nn.Module: LlamaAttention_0", start, t - start, "python_function"))
        events += body
        t += 100
    trace = json.dumps({"traceEvents": events}).encode()
    return summarize_trace(analyze(decode_bytes(trace)), file="loop.json", worker="w", span=None)


def _found(s: WorkerSummary) -> list[Finding]:
    return [f for f in s.findings if f.id == "per-sequence-attention"]


def test_a_loop_over_the_batch_is_found() -> None:
    """4 requests one by one: 4 SDPA calls of batch 1 per block call, 4 x 50 µs of CPU time."""
    s = _trace([1, 1, 1, 1])
    (f,) = _found(s)
    assert f.evidence.layers == [0] and f.evidence.details["calls_per_block"] == 4
    (layer,) = s.layers
    sdpa = {p.phase: p for p in layer.phases}["sdpa"]
    assert f.evidence.time_us == pytest.approx(sdpa.cpu_us) and sdpa.cpu_us >= 4 * 50
    assert "runs its attention core 4 times or more, every call on a batch of 1" in f.explanation
    assert f.evidence.ops == ["aten::scaled_dot_product_attention"]
    assert problems(f, s) == []  # its figures are the summary's (tests/analysis/findings/test_finding_figures.py)


@pytest.mark.parametrize(("batches", "calls"), [
    ([4], 1),  # one batched call
    ([1], 2),  # a module called twice, one sequence each time: one core per block call
    ([2, 2], 1),  # two calls, but each takes two sequences: a split, not a per-sequence loop
])
def test_a_batched_call_is_not(batches: list[int], calls: int) -> None:
    assert _found(_trace(batches, calls)) == []


# -- SageAttention's quantization kernels --------------------------------------------------------

def test_sage_quantization_kernels_are_the_quantize_phase() -> None:
    """SageAttention patched into a model's attention module quantizes q and k through pybind and
    Triton calls between the projections and its core op: their kernels have no op, so they are
    placed by name in ``quantize``: 3 x 30 µs of the block's 150 µs of device time, over the 25%
    the rule allows (docs/findings.md, ``quantization-overhead``)."""
    cpu = {"pid": 1, "tid": 1}
    gpu = {"pid": 0, "tid": 7}

    def launch(ts: float, corr: int) -> dict[str, Any]:
        return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": ts, "dur": 2, **cpu,
                "args": {"correlation": corr}}

    def kernel(name: str, ts: float, dur: float, corr: int) -> dict[str, Any]:
        return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur, **gpu, "args": {"correlation": corr}}

    events = [
        _x("ProfilerStep#1", 0, 2000, "user_annotation"),
        _x("nn.Module: LlamaAttention_0", 10, 900, "python_function"),
        _x("aten::linear", 12, 6, dims=[[1, S, H * D], [3 * H * D, H * D], [3 * H * D]]),
        launch(20, 1), launch(40, 2), launch(60, 3),
        _x("sageattention::qk_int8_sv_f16_accum_f32_attn", 100, 50),
        launch(110, 4),
        _x("aten::linear", 200, 6, dims=[[1, S, H * D], [H * D, H * D], [H * D]]),
        kernel("void QuantInt8Kernel<64>(...)", 300, 30, 1),
        kernel("quant_per_block_int8_kernel", 340, 30, 2),
        kernel("void MeanScaleKernel<64>(...)", 380, 30, 3),
        kernel("qk_int_sv_f16_attn_kernel<128>", 420, 60, 4),
    ]
    s = summarize_trace(analyze(decode_bytes(json.dumps({"traceEvents": events}).encode())), file="sage.json",
                        worker="w", span=None)
    (layer,) = s.layers
    phases = {p.phase: p for p in layer.phases}
    assert phases["quantize"].device_us == 90 and phases["quantize"].kernels == 3
    assert phases["sdpa"].device_us == 60 and "other" not in {p.phase for p in layer.phases if p.device_us}
    (f,) = [f for f in s.findings if f.id == "quantization-overhead"]
    assert f.evidence.details["share"] == pytest.approx(90 / 150)
