"""Sparse and compiled attention on real GPU traces (``tests/gpu_traces``, an H200): the Triton
flex kernels, eager flex, compiled blocks without scopes, backward on the autograd device
thread, Gemma-style local and global layers, and how each scales with the sequence length."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tb_attn_plugin.analysis.attribution.analyze import analyze
from tb_attn_plugin.analysis.cross_run.scaling import scaling
from tb_attn_plugin.analysis.summary import summarize_trace
from tb_attn_plugin.engine.loader import Loader, load_events, resolve_runs
from tb_attn_plugin.types.schema import WorkerSummary
from tb_attn_plugin.vocab.masks import kept_pairs, parse_mask

GPU = Path(__file__).resolve().parents[1] / "gpu_traces"
B, H, S, D = 2, 8, 2048, 64
DENSE = 2 * B * H * S * S * (D + D)
KEPT = kept_pairs(parse_mask("sliding:256"), S, S, causal=True) / S**2


def _summary(run: str) -> WorkerSummary:
    run_dir = GPU / run
    (path,) = run_dir.glob("*.pt.trace.json.gz")
    meta = json.loads((run_dir / "tb_attn_run.json").read_text())
    return summarize_trace(analyze(load_events(str(path))), file=path.name, worker="w", span=None, metadata=meta)


def _ids(s: WorkerSummary) -> set[str]:
    return {f.id for f in s.findings}


def test_compiled_flex_on_gpu_its_kernel_its_flops_and_its_backward() -> None:
    s = _summary("seq2048/builtin/flex-sliding256/seq2048-bfloat16")
    assert s.device == "cuda" and s.step_count == 3
    for layer in s.layers:
        assert layer.backend == "flex" and layer.backend_evidence == ["triton_tem_fused_flex_attention_0"]
        flex = next(p for p in layer.phases if p.phase == "flex")
        assert flex.flops == pytest.approx(DENSE * KEPT, rel=1e-12)  # the work the mask asks for
        assert flex.backward.flops == pytest.approx(2.5 * DENSE * KEPT, rel=1e-12)
        # Backward runs on the autograd engine's device thread, outside the ProfilerStep
        # annotations: it still belongs to its step, and to its layer and phase.
        assert flex.backward.device_us > 0 and layer.backward.device_us > flex.backward.device_us
        assert layer.mask is not None and not layer.mask.dense_work
        blocks = layer.mask.blocks
        assert blocks is not None and layer.mask.dense_equiv_us == pytest.approx(layer.mask.core_us / blocks, rel=1e-9)
    assert not _ids(s) & {"sparsity-unused", "flex-eager", "recompiles", "graph-break", "backend-mismatch"}


def test_eager_flex_and_naive_on_gpu_are_dense_work() -> None:
    eager = _summary("seq2048/builtin/flex-eager-sliding256/seq2048-bfloat16")
    assert {x.backend for x in eager.layers} == {"flex-eager"}
    assert {"flex-eager", "sparsity-unused"} <= _ids(eager)
    naive = _summary("seq2048/builtin/naive-sliding256/seq2048-bfloat16")
    for s in (eager, naive):
        for layer in s.layers:
            assert layer.mask is not None and layer.mask.dense_work
            assert layer.mask.work_flops == pytest.approx(DENSE, rel=1e-9)
    assert "sparsity-unused" in _ids(naive)


def test_unscoped_compiled_flex_is_found_and_counted() -> None:
    s = _summary("seq2048/builtin/flex-sliding256-unscoped/seq2048-bfloat16")
    assert s.inferred and [x.layer for x in s.layers] == [0, 1]
    for layer in s.layers:
        assert layer.backend == "flex"
        compiled = next(p for p in layer.phases if p.phase == "compiled")
        assert compiled.flops == pytest.approx(DENSE * KEPT, rel=1e-12)


def test_compiled_dense_blocks_on_gpu() -> None:
    s = _summary("seq2048/builtin/naive-compiled/seq2048-bfloat16")
    assert {x.backend for x in s.layers} == {"compiled"}
    assert all(any(k.startswith("triton_") for k in x.backend_evidence) for x in s.layers)
    assert not _ids(s) & {"graph-break", "recompiles", "backend-mismatch"}


def test_gemma_local_and_global_layers_on_gpu() -> None:
    s = _summary("seq2048/hf-gemma3/flex-sliding256/seq2048-bfloat16")
    local, glob = (x.mask for x in s.layers)
    assert local is not None and local.local and local.spec == "sliding:256"
    assert glob is not None and not glob.local and glob.spec == "causal" and glob.kept == (S + 1) / (2 * S)
    assert "block-mask-rebuilt" in _ids(s) and "sparsity-unused" not in _ids(s)


def test_sliding_window_scaling_flex_linear_naive_quadratic() -> None:
    loader = Loader()
    runs = [loader.summarize_run(r) for r in resolve_runs(str(GPU / "scaling"))]
    series = {x.impl: x for x in scaling(runs).series}
    flex, naive = series["flex"], series["naive"]
    assert [p.seq for p in flex.points] == [1024, 4096, 8192] and flex.mask == "sliding:256"
    assert flex.time_fit is not None and flex.time_fit.k < 1.3
    assert naive.time_fit is not None and naive.time_fit.k > 1.7
    assert flex.expect is not None and flex.expect.startswith("k ≈ 1")
    assert naive.expect is not None and naive.expect.startswith("k ≈ 2")
    assert "sliding:256" in flex.label
