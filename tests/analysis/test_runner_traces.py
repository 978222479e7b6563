"""The engine on traces written by our runner: FLOPs, S×S memory, backends, heads, backward."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import TINY
from tracetools import trace_files

from tb_attn_plugin.analysis.summary import summarize
from tb_attn_plugin.engine.loader import load_events
from tb_attn_plugin.types.schema import LayerStats, WorkerSummary

B, T, C, H = TINY.batch, TINY.seq, TINY.d_model, TINY.heads
D = C // H
SXS_BYTES = B * H * T * T * 4  # one float32 score tensor
QKV_FLOPS = 2 * B * T * C * 3 * C
MATMUL_FLOPS = 2 * B * H * T * T * D  # q·kᵀ, and attn·v
OUT_FLOPS = 2 * B * T * C * C
CAUSAL = (T + 1) / (2 * T)


def _summary(logdir: Path, run: str) -> WorkerSummary:
    (path,) = trace_files(logdir / run)
    return summarize(load_events(str(path)), file=path.name)


def _phase(layer: LayerStats, name: str) -> object:
    return next(p for p in layer.phases if p.phase == name)


@pytest.mark.parametrize(
    ("run", "backend", "core_flops"),
    [
        ("naive", "naive", {"qk_matmul": MATMUL_FLOPS, "av_matmul": MATMUL_FLOPS}),
        ("naive-inplace", "naive", {"qk_matmul": MATMUL_FLOPS, "av_matmul": MATMUL_FLOPS}),
        ("sdpa", "cpu-flash", {"sdpa": 2 * MATMUL_FLOPS * CAUSAL}),
        ("sdpa-flash", "cpu-flash", {"sdpa": 2 * MATMUL_FLOPS * CAUSAL}),
        ("sdpa-math", "sdpa-math", {"sdpa": 2 * MATMUL_FLOPS}),  # the math path computes all S×S scores
    ],
)
def test_flops_equal_analytic_values_and_backend(
    builtin_logdir: Path, run: str, backend: str, core_flops: dict[str, float]
) -> None:
    s = _summary(builtin_logdir, run)
    assert s.step_count == 2 and not s.inferred and s.backend == backend
    assert [layer.layer for layer in s.layers] == list(range(TINY.layers))
    for layer in s.layers:
        assert layer.backend == backend
        assert _phase(layer, "qkv_proj").flops == QKV_FLOPS
        assert _phase(layer, "out_proj").flops == OUT_FLOPS
        for phase, flops in core_flops.items():
            assert _phase(layer, phase).flops == pytest.approx(flops)
        assert layer.flops == pytest.approx(QKV_FLOPS + OUT_FLOPS + sum(core_flops.values()))
        assert layer.flops_per_s > 0 and layer.cpu_us > 0
        assert layer.backward.calls > 0 and layer.backward.flops > 0  # backward attributed to the layer


def test_naive_materializes_sxs_scores_and_fused_does_not(builtin_logdir: Path) -> None:
    naive = _summary(builtin_logdir, "naive")
    for layer in naive.layers:
        assert _phase(layer, "qk_matmul").sxs_bytes >= SXS_BYTES
        assert _phase(layer, "mask").sxs_bytes == SXS_BYTES  # the hidden copy of out-of-place masked_fill
        assert _phase(layer, "softmax").sxs_bytes == SXS_BYTES
        assert layer.sxs_bytes >= 4 * SXS_BYTES
        assert layer.peak_bytes >= SXS_BYTES
    inplace = _summary(builtin_logdir, "naive-inplace")
    for layer in inplace.layers:
        assert _phase(layer, "mask").sxs_bytes == 0
    for run in ("sdpa", "sdpa-flash"):
        for layer in _summary(builtin_logdir, run).layers:
            assert layer.sxs_bytes == 0
    for layer in _summary(builtin_logdir, "sdpa-math").layers:
        assert layer.sxs_bytes >= SXS_BYTES  # the math backend builds the scores inside SDPA


def test_heads_measured_in_per_head_mode_and_derived_otherwise(builtin_logdir: Path) -> None:
    per_head = _summary(builtin_logdir, "naive-per-head")
    for layer in per_head.layers:
        assert [h.head for h in layer.heads] == list(range(H)) and not any(h.derived for h in layer.heads)
        for h in layer.heads:
            assert h.flops == 2 * MATMUL_FLOPS / H
            assert h.cpu_us > 0
    batched = _summary(builtin_logdir, "naive")
    for layer in batched.layers:
        assert layer.heads_count == H
        assert all(h.derived for h in layer.heads) and len(layer.heads) == H
        assert sum(h.flops for h in layer.heads) == pytest.approx(2 * MATMUL_FLOPS)


def test_attention_share_of_step(builtin_logdir: Path) -> None:
    s = _summary(builtin_logdir, "naive")
    assert s.attention_share_cpu is not None and 0 < s.attention_share_cpu < 1
    assert s.attention_share_device is None and s.device == "cpu"
    assert len(s.per_step) == 2
    assert all(0 < st.attention_cpu_us < st.cpu_us for st in s.per_step)


def test_inference_and_gqa_runs(builtin_logdir: Path) -> None:
    inference = _summary(builtin_logdir, "naive-inference")
    assert all(layer.backward.calls == 0 for layer in inference.layers)
    gqa = _summary(builtin_logdir, "naive-gqa")
    assert all(_phase(layer, "kv_expand").calls == 1 for layer in gqa.layers)
