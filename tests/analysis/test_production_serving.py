"""Serving engines' attention (issue 33): vLLM and SGLang, found by their own ops, phased by role,
named, and honest about CUDA/HIP graphs.

Three real traces (``shared/production-traces/README.md``; expectations read from them by hand):

- vLLM v1 on MI300X, recorded while its piecewise graphs were captured: 24 layers, no module
  events. Each layer's ``vllm::unified_kv_cache_update`` and ``vllm::unified_attention_with_output``
  run eagerly between two captured pieces (``## Call CompiledFxGraph``), and the pieces hold the
  projections and RoPE, whose kernels were captured, not run.
- SGLang, Qwen3-8B prefill+decode: 36 ``Qwen3Attention`` modules, the core a CK-tile paged prefill
  kernel under ``sglang_profiler::mha__mha_batch_prefill_<n>``.
- SGLang decode at batch 32, recorded while its graph was captured: the same modules, the core
  ``sglang_profiler::attention_paged_attention_ragged_<n>``, and no kernel of any layer.

Synthetic traces cover names no public trace shows, each citing the source the names come from.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import SHARED_TRACES

from tb_attn_plugin.analysis.attribution.analyze import analyze
from tb_attn_plugin.analysis.attribution.graphs import GRAPHS_OFF
from tb_attn_plugin.analysis.attribution.roles import assign_roles
from tb_attn_plugin.analysis.ops.backend import SERVING_BACKENDS, detect_backend
from tb_attn_plugin.analysis.ops.opnames import canonical
from tb_attn_plugin.analysis.summary import summarize_trace
from tb_attn_plugin.cli.report import summary_csv
from tb_attn_plugin.engine.loader import load_events
from tb_attn_plugin.trace.decode import decode_bytes
from tb_attn_plugin.types.schema import LayerStats, RunSummary, WorkerSummary

PRODUCTION = SHARED_TRACES.parent / "production-traces"
VLLM = PRODUCTION / "tracelens_vllm_mi300_prefilldecode_piecewise_graphs.pt.trace.json.gz"
SGLANG_PREFILL = PRODUCTION / "tracelens_sglang_qwen3-8b_mi300_prefilldecode.json.gz"
SGLANG_DECODE = PRODUCTION / "tracelens_sglang_qwen3-8b_mi300_decode_bs32_graphs.json.gz"
#: The phases of a whole serving block, in order (the core is fused: ``sdpa``).
BLOCK = ["qkv_proj", "rope", "kv_cache", "sdpa", "out_proj"]
NO_ATTENTION = "no attention found in this trace"


def _summary_of(path: Path) -> WorkerSummary:
    if not path.exists():
        pytest.skip(f"{path} is not here")
    return summarize_trace(analyze(load_events(str(path))), file=path.name, worker="w", span=None)


def _raw(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path) as f:
        events: list[dict[str, Any]] = json.load(f)["traceEvents"]
    return events


def _phases(layer: LayerStats) -> dict[str, Any]:
    return {p.phase: p for p in layer.phases}


def _nested_kernels_us(events: list[dict[str, Any]], op: str) -> list[float]:
    """For each call of ``op`` (file order by start), the summed durations of the kernels launched
    inside it: the runtime launches on its thread within its span, matched to kernels by
    ``correlation``. Read from the raw JSON, apart from the engine."""
    kernel_us: dict[int, float] = {}
    for e in events:
        if e.get("cat") == "kernel":
            corr = e["args"]["correlation"]
            kernel_us[corr] = kernel_us.get(corr, 0.0) + e["dur"]
    launches = [e for e in events if e.get("ph") == "X" and e.get("cat") == "cuda_runtime"]
    calls = sorted((e for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op" and e["name"] == op),
                   key=lambda e: e["ts"])
    out = []
    for call in calls:
        end = call["ts"] + call["dur"]
        inner = [e["args"].get("correlation") for e in launches
                 if e["tid"] == call["tid"] and call["ts"] <= e["ts"] <= end]
        out.append(sum(kernel_us.get(x, 0.0) for x in inner if x is not None))
    return out


@pytest.fixture(scope="module")
def vllm() -> WorkerSummary:
    return _summary_of(VLLM)


@pytest.fixture(scope="module")
def prefill() -> WorkerSummary:
    return _summary_of(SGLANG_PREFILL)


@pytest.fixture(scope="module")
def decode() -> WorkerSummary:
    return _summary_of(SGLANG_DECODE)


# -- vLLM, piecewise graph capture ---------------------------------------------------------------

#: gpt-oss-20b's attention (vLLM's capture at 8192 tokens): hidden 2880, 64 query heads and 8 KV
#: heads of 64; the projections' shapes as recorded (the ``aten::linear`` inside ``rocm_unquantized_gemm``).
TOKENS, HIDDEN, QKV_OUT, O_IN = 8192, 2880, (64 + 2 * 8) * 64, 64 * 64


def test_vllm_layers_are_found_by_their_attention_op(vllm: WorkerSummary) -> None:
    """24 ``vllm::unified_attention_with_output`` calls, one per layer; no module events. The
    projections and RoPE run in the compiled graph pieces on either side of the attention op
    (``## Call CompiledFxGraph``), which do not part them from it: each block is the qkv GEMM (the
    last of the piece before), RoPE, the KV write, the core and the output GEMM (the first of the
    piece after), with the projections' FLOPs from their shapes."""
    assert NO_ATTENTION not in vllm.notes
    assert [layer.layer for layer in vllm.layers] == list(range(24))
    for layer in vllm.layers:
        assert layer.backend == "vllm-unified" and layer.backend_evidence == ["vllm::unified_attention_with_output"]
        assert [p.phase for p in layer.phases if p.calls] == ["qkv_proj", "rope", "kv_cache", "sdpa", "out_proj"]
        assert not layer.core_only
        phases = _phases(layer)
        assert phases["qkv_proj"].flops == 2 * TOKENS * HIDDEN * QKV_OUT
        assert phases["out_proj"].flops == 2 * TOKENS * O_IN * HIDDEN
        assert phases["sdpa"].flops == 0  # varlen over a paged cache: the context lengths are in tensors
        # Captured: no kernel ran for the projections, so no rate is given for them, and they say so.
        assert phases["qkv_proj"].device_us == 0 and phases["qkv_proj"].flops_per_s == 0
        assert layer.flops_per_s == 0
        assert [p.phase for p in layer.phases if p.captured] == ["qkv_proj", "rope", "out_proj"]
    # The CSV leaves a captured phase's device time empty, not 0.
    rows = list(csv.DictReader(io.StringIO(summary_csv([RunSummary(run="r", metadata=None, workers=[vllm],
                                                                  errors=[])]))))
    assert {(r["phase"], r["device_us"]) for r in rows if r["layer"] == "0"} >= {("qkv_proj", ""), ("rope", "")}
    assert next(r for r in rows if r["layer"] == "0" and r["phase"] == "sdpa")["device_us"] != ""


def test_vllm_device_time_is_the_kernels_that_ran(vllm: WorkerSummary) -> None:
    """The core's device time is the kernels launched under its op (here a ``fill_`` of the
    output: this capture run has no attention metadata), the KV write's its cache kernel's."""
    raw = _raw(VLLM)
    core = _nested_kernels_us(raw, "vllm::unified_attention_with_output")
    write = _nested_kernels_us(raw, "vllm::unified_kv_cache_update")
    assert len(core) == len(write) == 24
    assert (core[0], write[0]) == pytest.approx((14.199, 18.639))  # L0: one kernel each, read off the trace
    for layer, c, w in zip(vllm.layers, core, write, strict=True):
        phases = _phases(layer)
        assert phases["sdpa"].device_us == pytest.approx(c)
        assert phases["kv_cache"].device_us == pytest.approx(w)


def test_vllm_capture_is_said_and_no_device_share_given(vllm: WorkerSummary) -> None:
    """25 ``hipStreamBeginCapture`` calls: the step's device time is only what ran between them."""
    assert vllm.attention_share_device is None
    (layers, note) = [n for n in vllm.notes if "captured" in n]
    assert "25 CUDA/HIP graphs were captured (hipStreamBeginCapture)" in note
    assert layers.startswith("Layers 0-23 ran while a CUDA/HIP graph was captured")
    assert "launched from qkv_proj, rope and out_proj were recorded" in layers
    assert "kv_cache and sdpa ran outside the captures" in layers and "under \"other\"" in layers
    assert "device step time" not in vllm.headline and "CPU step time" in vllm.headline
    assert not [f for f in vllm.findings if f.id == "dispatch-bound"]


# -- SGLang prefill: modules, phases by role -----------------------------------------------------

def test_sglang_prefill_blocks_have_every_phase(prefill: WorkerSummary) -> None:
    assert [layer.module for layer in prefill.layers] == [f"Qwen3Attention_{k}" for k in range(36)]
    for layer in prefill.layers:
        assert layer.backend == "sglang-aiter-prefill"
        assert [canonical(n) for n in layer.backend_evidence] == ["sglang_profiler::mha__mha_batch_prefill"]
        assert [p.phase for p in layer.phases if p.calls] == BLOCK
        assert not layer.core_only
        # Paged and varlen: the shapes do not give the work, the engine's batch annotation does
        # (tests/analysis/attribution/test_serving_batch.py: 15 requests of 1024 tokens, causal).
        assert _phases(layer)["sdpa"].flops == 4 * 32 * 128 * (15 * 1024 * 1025 // 2)


def test_sglang_prefill_phase_device_times_are_their_kernels(prefill: WorkerSummary) -> None:
    """Per layer, in order: the CK-tile prefill kernel is the core, ``store_kvcache`` the KV write,
    ``rotary_embedding_kernel`` RoPE; each phase's device time is that kernel's duration."""
    kernels = sorted((e for e in _raw(SGLANG_PREFILL) if e.get("cat") == "kernel"), key=lambda e: e["ts"])

    def durations(needle: str) -> list[float]:
        return [e["dur"] for e in kernels if needle in e["name"]]

    for phase, needle in (("sdpa", "FmhaBatchPrefillWithPagedKVCacheKernel"), ("kv_cache", "store_kvcache"),
                          ("rope", "rotary_embedding_kernel")):
        expected = durations(needle)
        assert len(expected) == 36
        assert [_phases(layer)[phase].device_us for layer in prefill.layers] == pytest.approx(expected)


def test_sglang_prefill_places_the_qk_norm_with_the_projections(prefill: WorkerSummary) -> None:
    """Qwen3's QK-norm (``apply_qk_norm``: a copy and an RMSNorm each of q and k, 4 kernels) runs
    between the qkv GEMM and RoPE: ``qkv_proj`` holds it, 5 kernels. What no phase names is the
    cos/sin cache's dtype conversion alone, which launches nothing."""
    kernels = sorted((e for e in _raw(SGLANG_PREFILL) if e.get("cat") == "kernel"), key=lambda e: e["ts"])
    for layer in prefill.layers:
        other, qkv = _phases(layer)["other"], _phases(layer)["qkv_proj"]
        assert other.device_us == 0 and other.kernels == 0
        assert {canonical(op) for op in other.ops} == {"aten::to"}
        assert qkv.kernels == 5
        assert "sglang_profiler::utils_apply_qk_norm" in {canonical(op) for op in qkv.ops}
    # Each layer's qkv_proj time is its GEMM's (the k-th qkv-shaped GEMM kernel) and the kernels
    # launched inside its ``apply_qk_norm`` (the k-th call), read from the raw JSON.
    events = _raw(SGLANG_PREFILL)
    (norm_op,) = {e["name"] for e in events if e.get("cat") == "cpu_op" and "utils_apply_qk_norm" in e["name"]}
    norms = _nested_kernels_us(events, norm_op)
    gemms = [e["dur"] for e in kernels if "MT256x192x64" in e["name"]]
    assert len(gemms) == len(norms) == 36
    qkv_us = [_phases(layer)["qkv_proj"].device_us for layer in prefill.layers]
    assert qkv_us == pytest.approx([g + n for g, n in zip(gemms, norms, strict=True)])
    assert prefill.attention_share_device is not None  # no graph: the device share stands
    assert not [n for n in prefill.notes if "graph" in n]


# -- SGLang decode under graph capture ----------------------------------------------------------

def test_sglang_decode_capture_is_said_per_layer(decode: WorkerSummary) -> None:
    assert NO_ATTENTION not in decode.notes
    assert len(decode.layers) == 36
    for layer in decode.layers:
        assert layer.backend == "sglang-aiter-paged"
        assert [p.phase for p in layer.phases if p.calls] == BLOCK
        assert layer.device_us == 0 and all(p.kernels == 0 for p in layer.phases)
    (note,) = [n for n in decode.notes if n.startswith("Layers 0-35 ran while a CUDA/HIP graph was captured")]
    assert GRAPHS_OFF in note and "--disable-cuda-graph" in note and "enforce_eager=True" in note
    # Never "0% of the device step": the device share is unavailable and the headline uses the CPU.
    assert decode.attention_share_device is None
    assert "of the step's device time" not in " ".join(f.title + f.explanation for f in decode.findings)
    assert decode.headline.startswith("Attention is 57% of the CPU step time")


# -- names no public trace shows -----------------------------------------------------------------

def test_canonical_names() -> None:
    # python/sglang/srt/utils/kernel_shape_profiler.py: sglang_profiler::<module>_<function>_<counter>
    assert canonical("sglang_profiler::attention_paged_attention_ragged_100") == \
        "sglang_profiler::attention_paged_attention_ragged"
    assert canonical("sglang_profiler::mha__mha_batch_prefill_167") == "sglang_profiler::mha__mha_batch_prefill"
    # vllm/model_executor/layers/utils.py rocm_unquantized_gemm; aiter/ops/gemm_op_a16w16.py
    assert canonical("vllm::rocm_unquantized_gemm") == canonical("aiter::gemm_a16w16") == "aten::linear"
    assert canonical("vllm::unified_attention") == "vllm::unified_attention"


def test_serving_backends_from_ops_and_kernels() -> None:
    # csrc/torch_bindings.cpp (_C::paged_attention_v1/v2), csrc/attention/paged_attention_v1.cu
    assert detect_backend(["_C::paged_attention_v1"], []) == ("vllm-paged", ["_C::paged_attention_v1"])
    assert detect_backend(["_C::paged_attention_v2"], ["void vllm::paged_attention_v2_kernel<...>(...)"])[0] == \
        "vllm-paged"
    # csrc/rocm/torch_bindings.cpp, csrc/rocm/attention.cu
    assert detect_backend(["_rocm_C::paged_attention"], ["paged_attention_ll4mi_QKV_mfma16_kernel"])[0] == \
        "vllm-rocm-paged"
    # vllm/attention/ops/triton_unified_attention.py: the kernel beats the op that dispatched it.
    assert detect_backend(["vllm::unified_attention"], ["kernel_unified_attention_3d", "triton_poi_fused_0"]) == \
        ("vllm-triton", ["kernel_unified_attention_3d"])
    # An Inductor kernel beside the op is not the core: the op names the backend.
    assert detect_backend(["vllm::unified_attention_with_output"], ["triton_poi_fused_0"])[0] == "vllm-unified"
    # vllm/model_executor/layers/attention/mla_attention.py
    assert detect_backend(["vllm::unified_mla_attention"], [])[0] == "vllm-unified-mla"
    # python/sglang/srt/layers/attention/triton_ops/decode_attention.py, via the profiler
    assert detect_backend(["sglang_profiler::decode_attention_decode_attention_fwd_grouped_12"], [])[0] == \
        "sglang-triton"
    # python/sglang/srt/layers/radix_attention.py
    assert detect_backend(["sglang::unified_attention_with_output"], [])[0] == "sglang-unified"
    assert {"vllm-unified", "sglang-aiter-paged", "sglang-aiter-prefill"} <= set(SERVING_BACKENDS)


def test_serving_ops_take_their_phases() -> None:
    ops = ["aiter::gemm_a16w16", "aten::split_with_sizes", "sgl_kernel::rotary_embedding",
           "sglang_profiler::memory_pool__set_kv_buffer_impl_9", "sglang_profiler::attention_paged_attention_ragged_3",
           "aiter::gemm_a16w16"]
    assert assign_roles(ops, [None] * 6) == ["qkv_proj", "qkv_proj", "rope", "kv_cache", "sdpa", "out_proj"]
    vllm = ["vllm::rocm_unquantized_gemm", "_C::rotary_embedding", "vllm::unified_kv_cache_update",
            "_C::weak_ref_tensor", "vllm::unified_attention_with_output", "vllm::rocm_unquantized_gemm"]
    assert assign_roles(vllm, [None] * 6) == ["qkv_proj", "rope", "kv_cache", None, "sdpa", "out_proj"]


class _Trace:
    """A hand-written trace on one thread: ops, runtime calls and kernels, with small times."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.ext = 0

    def event(self, cat: str, name: str, ts: float, dur: float, **args: Any) -> None:
        self.rows.append({"ph": "X", "cat": cat, "name": name, "pid": 7, "tid": 7, "ts": ts, "dur": dur,
                          "args": args})

    def op(self, name: str, ts: float, dur: float, dims: list[list[int]] | None = None) -> int:
        self.ext += 1
        args: dict[str, Any] = {"External id": self.ext}
        if dims is not None:
            args |= {"Input Dims": dims, "Input type": ["c10::BFloat16" if d else "Scalar" for d in dims],
                     "Concrete Inputs": ["" for _ in dims]}
        self.event("cpu_op", name, ts, dur, **args)
        return self.ext

    def launch(self, ext: int, ts: float, kernel: str | None, kernel_ts: float, kernel_dur: float,
               runtime: str = "cudaLaunchKernel") -> None:
        corr = 1000 + len(self.rows)
        self.event("cuda_runtime", runtime, ts, 2, correlation=corr, **{"External id": ext})
        if kernel is not None:
            self.rows.append({"ph": "X", "cat": "kernel", "name": kernel, "pid": 0, "tid": 7, "ts": kernel_ts,
                              "dur": kernel_dur, "args": {"device": 0, "stream": 7, "correlation": corr,
                                                           "External id": ext}})

    def summary(self) -> WorkerSummary:
        data = json.dumps({"schemaVersion": 1, "traceEvents": self.rows}).encode()
        return summarize_trace(analyze(decode_bytes(data)), file="t", worker="w", span=None)


def _vllm_eager(launch_core: Callable[[_Trace, int], None]) -> _Trace:
    """vLLM with ``enforce_eager=True``: one layer's ops as siblings in a step. Names from
    vllm/model_executor/layers/attention/attention.py (the attention and KV-update ops) and
    csrc/torch_bindings.cpp (``_C::rotary_embedding``, ``_C_cache_ops::reshape_and_cache_flash``).
    32 tokens, 8 query heads and 2 KV heads of 32: q, k, v projected together (384 = (8 + 2·2)·32)."""
    t = _Trace()
    t.event("user_annotation", "ProfilerStep#1", 0, 1000, **{"External id": 0})
    t.op("aten::linear", 10, 40, [[32, 256], [384, 256], [384]])
    rope = t.op("_C::rotary_embedding", 60, 10, [[32], [32, 256], [32, 64], [], [4096, 32], []])
    t.launch(rope, 62, "void vllm::rotary_embedding_kernel<c10::BFloat16, true>(...)", 100, 4)
    t.op("vllm::unified_kv_cache_update", 80, 30, [[32, 2, 32], [32, 2, 32], []])
    write = t.op("_C_cache_ops::reshape_and_cache_flash", 85, 20)
    t.launch(write, 90, "void vllm::reshape_and_cache_flash_kernel<...>(...)", 110, 6)
    core = t.op("vllm::unified_attention_with_output", 120, 60,
                [[32, 8, 32], [32, 2, 32], [32, 2, 32], [32, 8, 32], [], [], [], []])
    launch_core(t, core)
    t.op("aten::linear", 200, 40, [[32, 256], [256, 256], []])
    return t


def test_a_vllm_eager_block_reaches_its_projections() -> None:
    """The core op anchors the block; it grows back over the KV write and RoPE to the qkv
    projection, and forward to the output projection. The Triton kernel names the backend."""
    t = _vllm_eager(lambda t, core: t.launch(core, 130, "kernel_unified_attention_2d", 140, 25))
    s = t.summary()
    (layer,) = s.layers
    assert layer.backend == "vllm-triton" and layer.backend_evidence == ["kernel_unified_attention_2d"]
    assert [p.phase for p in layer.phases if p.calls] == BLOCK and not layer.core_only
    phases = _phases(layer)
    assert (phases["rope"].device_us, phases["kv_cache"].device_us, phases["sdpa"].device_us) == (4, 6, 25)
    assert phases["qkv_proj"].flops == 2 * 32 * 256 * 384 and phases["out_proj"].flops == 2 * 32 * 256 * 256
    assert phases["sdpa"].flops == 0
    assert s.attention_share_device == pytest.approx(35 / 35) and not [n for n in s.notes if "graph" in n]


def test_a_graph_replays_attention_kernels_add_to_the_layer() -> None:
    """The core launches nothing of its own; a ``cudaGraphLaunch`` after the block runs an attention
    kernel and a KV write (its replay of a decode step): the replay's first run of attention
    kernels is layer 0's core, so its 30 µs are layer 0's and attention's device share stands.
    The KV write after the core is no layer's."""
    t = _vllm_eager(lambda t, core: None)
    graph = t.op("aten::empty", 300, 1)  # a stand-in for the runner's replay call
    t.launch(graph, 400, "kernel_unified_attention_2d", 410, 30, runtime="cudaGraphLaunch")
    t.launch(graph, 401, "void vllm::reshape_and_cache_flash_kernel<...>(...)", 450, 5, runtime="cudaGraphLaunch")
    s = t.summary()
    (layer,) = s.layers
    assert layer.backend == "vllm-triton"  # named by the kernel the replay ran
    assert {p.phase: p for p in layer.phases}["sdpa"].device_us == 30
    assert s.attention_share_device is not None
    (note,) = [n for n in s.notes if "replay" in n]
    assert note.startswith("2 CUDA/HIP graph replays (cudaGraphLaunch): layer 0 also ran in the replays")
    assert GRAPHS_OFF in note


def test_an_sglang_block_captured_into_a_graph() -> None:
    """SGLang's Triton decode under graph capture: a ``LlamaAttention`` module whose launches fall
    between ``cudaStreamBeginCapture`` and ``cudaStreamEndCapture``. Names: sgl-kernel
    csrc/common_extension.cc (``sgl_kernel::rotary_embedding``), SGLang's ``sglang::store_cache``
    and its profiler ranges (python/sglang/srt/utils/kernel_shape_profiler.py) around
    python/sglang/srt/mem_cache/memory_pool.py ``_set_kv_buffer_impl`` and
    python/sglang/srt/layers/attention/triton_ops/decode_attention.py ``decode_attention_fwd_grouped``."""
    t = _Trace()
    t.event("user_annotation", "ProfilerStep#1", 0, 1000, **{"External id": 0})
    t.event("cuda_runtime", "cudaStreamBeginCapture", 5, 1, correlation=1)
    t.event("python_function", "nn.Module: LlamaAttention_0", 10, 300)
    gemm = t.op("aiter::gemm_a16w16", 20, 40, [[4, 256], [384, 256]])
    t.op("aten::linear", 22, 36, [[4, 256], [384, 256], []])
    t.launch(gemm, 30, None, 0, 0)
    rope = t.op("sgl_kernel::rotary_embedding", 70, 10)
    t.launch(rope, 72, None, 0, 0)
    t.op("sglang_profiler::memory_pool__set_kv_buffer_impl_7", 90, 30)
    store = t.op("sglang::store_cache", 95, 20)
    t.launch(store, 100, None, 0, 0)
    core = t.op("sglang_profiler::decode_attention_decode_attention_fwd_grouped_12", 130, 80)
    t.launch(core, 140, None, 0, 0)
    out = t.op("aiter::gemm_a16w16", 220, 40, [[4, 256], [256, 256]])
    t.launch(out, 230, None, 0, 0)
    t.event("cuda_runtime", "cudaStreamEndCapture", 400, 1, correlation=2)
    fill = t.op("aten::fill_", 500, 10)
    t.launch(fill, 502, "void at::native::vectorized_elementwise_kernel<...>", 510, 3)
    s = t.summary()
    (layer,) = s.layers
    assert layer.backend == "sglang-triton"
    assert [p.phase for p in layer.phases if p.calls] == BLOCK
    assert _phases(layer)["qkv_proj"].flops == 2 * 4 * 256 * 384  # the aten::linear inside aiter's GEMM
    assert layer.device_us == 0 and s.device == "cuda" and s.attention_share_device is None
    assert [n for n in s.notes if n.startswith("Layer 0 ran while a CUDA/HIP graph was captured "
                                               "(cudaStreamBeginCapture)")]
