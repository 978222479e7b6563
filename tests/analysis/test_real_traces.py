"""The engine on public traces written by other projects (../shared/traces/)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import SHARED_TRACES

from tb_attn_plugin.analysis.summary import summarize
from tb_attn_plugin.engine.loader import load_events
from tb_attn_plugin.types.schema import WorkerSummary

ALL = sorted(SHARED_TRACES.glob("*/*.json.gz"))
OTHER = sorted(SHARED_TRACES.glob("other/*.json.gz"))


def _summary(path: Path) -> WorkerSummary:
    return summarize(load_events(str(path)), file=path.name)


def test_shared_traces_are_present() -> None:
    assert len(ALL) == 10, "../shared/traces/ should hold 3 GPU and 7 other traces"


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.name[:40])
def test_every_trace_loads_and_summarizes(path: Path) -> None:
    s = _summary(path)
    assert s.step_count >= 1 and s.step_cpu_us > 0


@pytest.mark.parametrize("path", OTHER, ids=lambda p: p.name[:40])
def test_traces_without_attention_report_none(path: Path) -> None:
    s = _summary(path)
    assert s.layers == [] and s.backend == "none"
    assert "no attention found in this trace" in s.notes


@pytest.mark.parametrize(
    ("name", "backend", "kernel"),
    [
        ("tracelens_h100_bert-small_sdpa-flash.json.gz", "flash", "pytorch_flash::flash_fwd_kernel"),
        ("tracelens_mi300x_bert-small_sdpa-flash.json.gz", "rocm-flash", "attn_fwd"),
    ],
)
def test_bert_small_four_flash_layers_with_fused_kernel_time(name: str, backend: str, kernel: str) -> None:
    s = _summary(SHARED_TRACES / "gpu" / name)
    assert s.inferred and s.device == "cuda" and s.backend == backend
    assert [layer.layer for layer in s.layers] == [0, 1, 2, 3]
    assert [layer.module for layer in s.layers] == [f"BertAttention_{i}" for i in range(4)]
    for layer in s.layers:
        sdpa = next(p for p in layer.phases if p.phase == "sdpa")
        assert sdpa.kernels == 1 and kernel in sdpa.kernel_names[0]
        assert 1 < sdpa.device_us < 100  # one fused kernel, tens of microseconds
        # q/k/v [1, 8, 141, 64] bf16, not causal: 4·B·H·S²·D
        assert sdpa.flops == 4 * 1 * 8 * 141 * 141 * 64
        assert layer.sxs_bytes == 0
        assert layer.heads_count == 8
    assert s.attention_share_device is not None and 0 < s.attention_share_device < 1


def test_switchtransformers_ten_naive_fp32_blocks() -> None:
    s = _summary(SHARED_TRACES / "gpu" / "switchtransformers_a100_naive-bmm-softmax_fp32.json.gz")
    assert s.inferred and s.backend == "naive"
    assert [layer.module for layer in s.layers] == [f"MultiQueryAttention_{i}" for i in range(10)]
    for layer in s.layers:
        qk = next(p for p in layer.phases if p.phase == "qk_matmul")
        assert any("sgemm" in k for k in qk.kernel_names)  # FP32 on CUDA cores
        assert next(p for p in layer.phases if p.phase == "softmax").sxs_bytes > 0
        assert layer.device_us > 0


@pytest.mark.parametrize("name", [p.name for p in sorted(SHARED_TRACES.glob("gpu/*.json.gz"))])
def test_device_time_per_layer_is_the_sum_of_its_kernels(name: str) -> None:
    import numpy as np

    from tb_attn_plugin.analysis.attribution.analyze import analyze
    from tb_attn_plugin.analysis.summary import summarize_analysis
    from tb_attn_plugin.trace.kineto import DEVICE_KINDS, Kind

    analysis = analyze(load_events(str(SHARED_TRACES / "gpu" / name)))
    summary = summarize_analysis(analysis)
    ev, a = analysis.events, analysis.attr
    device = np.isin(ev.kind, DEVICE_KINDS) & (ev.kind != Kind.GPU_ANNOTATION) & ~a.backward
    assert summary.layers
    for layer in summary.layers:
        kernels = ev.dur[device & (a.layer == layer.layer)].sum() / summary.step_count
        assert layer.device_us == pytest.approx(kernels)
        assert layer.device_us == pytest.approx(sum(p.device_us for p in layer.phases))
