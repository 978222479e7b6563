"""Attention inside CUDA/HIP graph replays, found from the kernels alone (issue 33).

vLLM replays a decode batch's whole forward pass as one CUDA graph (its ``FULL`` graphs): the
trace holds one ``cudaGraphLaunch`` per step and the kernels it ran, all with the launch's
correlation id, and no op. The kernel names are vLLM's and its libraries' (vLLM
``csrc/pos_encoding_kernels.cu`` ``rotary_embedding_kernel``, ``csrc/cache_kernels.cu``
``reshape_and_cache_flash_kernel``, ``vllm/attention/ops/triton_unified_attention.py``
``kernel_unified_attention_2d``; FlashAttention 2's ``flash_fwd_splitkv_kernel`` and its combine
kernel) around cuBLAS GEMMs (``nvjet_*``) and vLLM's ``fused_moe_kernel``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tb_attn_plugin.analysis.attribution.analyze import analyze
from tb_attn_plugin.analysis.summary import summarize_trace
from tb_attn_plugin.trace.decode import decode_bytes
from tb_attn_plugin.types.schema import WorkerSummary

CPU = {"pid": 1, "tid": 1}
GPU = {"pid": 0, "tid": 7}
GEMM = "nvjet_tst_64x8_64x16_4x1_v_bz_TNN"
ROPE = "void vllm::rotary_embedding_kernel<c10::BFloat16, true>(...)"
KV = "void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, __nv_bfloat16, (vllm::Fp8KVCacheDataType)0>(...)"
CORE = "kernel_unified_attention_2d"
#: One decoder layer of the replayed forward: (kernel, µs).
LAYER = ((GEMM, 20), (ROPE, 3), (KV, 4), (CORE, 30), (GEMM, 15), ("fused_moe_kernel", 50))
#: FlashAttention's split-KV decode: the core and its combine, one run of attention kernels.
SPLIT = ((GEMM, 20), (ROPE, 3), (KV, 4), ("void flash_fwd_splitkv_kernel<...>", 25),
         ("void flash_fwd_splitkv_combine_kernel<...>", 5), (GEMM, 15))


def _trace(layer: tuple[tuple[str, float], ...], *, layers: int = 3, steps: int = 2,
           extra: list[dict[str, Any]] | None = None) -> WorkerSummary:
    events: list[dict[str, Any]] = []
    for step in range(steps):
        t0, corr = step * 10_000.0, 100 + step
        events += [
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step + 1}", "ts": t0, "dur": 9000, **CPU,
             "args": {}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "ts": t0 + 100, "dur": 20, **CPU,
             "args": {"correlation": corr}},
        ]
        t = t0 + 200
        for _ in range(layers):
            for name, dur in layer:
                events.append({"ph": "X", "cat": "kernel", "name": name, "ts": t, "dur": dur, **GPU,
                               "args": {"correlation": corr}})
                t += dur + 1
    trace = {"traceEvents": events + (extra or []),
             "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "numSms": 132}]}
    return summarize_trace(analyze(decode_bytes(json.dumps(trace).encode())), file="replay.json", worker="w", span=None)


def test_a_replayed_forward_has_its_layers() -> None:
    """3 layers per replay, one replay per step: each layer's core is its attention kernel (30 µs),
    with the KV write (4 µs) and RoPE (3 µs) just before; the GEMMs and the MoE are not attention.
    Attention's share of the device step: 3·37 of 3·122 µs."""
    s = _trace(LAYER)
    assert [x.layer for x in s.layers] == [0, 1, 2]
    for layer in s.layers:
        phases = {p.phase: p for p in layer.phases}
        assert (phases["sdpa"].device_us, phases["kv_cache"].device_us, phases["rope"].device_us) == (30, 4, 3)
        assert phases["sdpa"].kernel_names == [CORE]
        assert layer.calls == 1 and layer.cpu_us == 0 and layer.core_only and layer.backend == "vllm-triton"
    assert s.attention_share_device == pytest.approx(3 * 37 / (3 * 122))
    assert s.attention_share_cpu is None  # no op of attention ran on the CPU
    (note,) = [n for n in s.notes if "CUDA/HIP graph replays (" in n]
    assert note.startswith("2 CUDA/HIP graph replays (cudaGraphLaunch): no op of the replayed forward is in the "
                           "trace, so layers 0-2 were found from the kernels the replays ran")
    assert "no tb-attn scopes in this trace: attention was inferred from the kernels its graph replays ran" in s.notes
    assert s.headline.startswith("The attention core is 30% of the device step time")


def test_a_split_kv_core_and_its_combine_are_one_layer() -> None:
    s = _trace(SPLIT, layers=2)
    assert [x.layer for x in s.layers] == [0, 1]
    for layer in s.layers:
        assert {p.phase: p for p in layer.phases}["sdpa"].device_us == 25 + 5
        assert layer.backend == "flash"


def test_a_replay_without_attention_kernels_finds_nothing() -> None:
    """vLLM's piecewise pieces replay the GEMMs and norms; attention runs outside them."""
    s = _trace(((GEMM, 20), ("fused_moe_kernel", 50)))
    assert s.layers == [] and "no attention found in this trace" in s.notes
    assert any("the kernels a replay runs belong to its launch" in n for n in s.notes)


def test_replayed_kernels_never_take_a_scoped_layers_time() -> None:
    """A trace with our scopes: attention is what the scopes hold; a replay's kernels are not read."""
    scope = [{"ph": "X", "cat": "user_annotation", "name": "tbattn.v1/L0", "ts": 10, "dur": 50, **CPU, "args": {}},
             {"ph": "X", "cat": "cpu_op", "name": "aten::scaled_dot_product_attention", "ts": 20, "dur": 30, **CPU,
              "args": {}}]
    s = _trace(LAYER, extra=scope)
    assert [x.layer for x in s.layers] == [0] and not s.inferred
    assert s.layers[0].device_us == 0
