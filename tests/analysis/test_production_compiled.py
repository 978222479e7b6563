"""Attention in compiled regions next to attention modules (issue 33): a diffusion pipeline whose
text encoders are Hugging Face ``*Attention`` modules and whose transformer is torch.compile'd.

What was read by hand in ``tracelens_xdit_sd3.5_mi300_diffusion.json.gz`` (xDiT, Stable Diffusion
3.5 on an MI300X, one ``ProfilerStep``; ``shared/production-traces/README.md``):

- CLIP: 44 ``CLIPAttention`` instances (CLIP-L's 12 layers and CLIP-G's 32), each called twice
  (the prompt and the negative one), SDPA inside them, kernel ``attn_fwd``;
- T5: 24 ``T5LayerSelfAttention`` instances (a ``T5Attention`` inside each), twice each:
  matmul, softmax, matmul;
- the MMDiT: ``SD3Transformer2DModel_0``, called 4 times (the denoising steps; the two prompts
  batched, B = 2), its forward one compiled region (``Torch-Compiled Region: 0/0`` >
  ``## Call CompiledFxGraph ... ##``) with 38 ``aten::_scaled_dot_product_flash_attention`` calls
  and no ``aten::scaled_dot_product_attention`` around them. One per MMDiT block: the joint
  attention is one SDPA over text and image together, q (2, 38, 4096 + 333, 64), concatenated
  by the Triton kernel just before each call
  (``triton_poi_fused__scaled_dot_product_flash_attention_cat_transpose_view_10``). Before it the
  six projections, image then text for q, k and v (``mm``, ``mm``, then ``addmm`` for v), each q
  and k one followed by a Triton kernel that adds its bias and applies the QK-norm
  (``triton_per_fused__to_copy_add_addmm_mean_mul_pow_rsqrt_transpose_view_8``); after it a Triton
  kernel splits text from image, then the image's output projection, a Triton kernel with the
  image's residual and norm, and the text's output projection (not in the last block, whose text
  stream ends there: ``context_pre_only``). Inductor's kernel names say what they fused, so each
  block is read whole (``analysis/ops/inductor.py``);
- the VAE decoder's ``Attention_0`` (diffusers), once, SDPA;
- 8042 kernels, 712.01 ms; ``attn_fwd`` 241 of them, 208.72 ms (29.3%), of which the 152
  launched inside the compiled regions take 204.57 ms.
"""

from __future__ import annotations

import gzip
import json
from typing import Any

import msgspec
import pytest
from helpers import SHARED_TRACES

from tb_attn_plugin.analysis.attribution.analyze import analyze
from tb_attn_plugin.analysis.attribution.inference.numbering import layer_models
from tb_attn_plugin.analysis.summary import summarize_trace
from tb_attn_plugin.engine.loader import load_events
from tb_attn_plugin.trace.decode import decode_bytes
from tb_attn_plugin.types.schema import LayerStats, WorkerSummary

TRACE = SHARED_TRACES.parent / "production-traces" / "tracelens_xdit_sd3.5_mi300_diffusion.json.gz"
CLIP, T5, MMDIT, VAE = 12 + 32, 24, 38, 1
DENOISING = 4
B, H, S, D = 2, 38, 4096 + 333, 64
ATTN_KERNEL = "attn_fwd"  # aotriton's flash forward: ROCm's SDPA flash path


@pytest.fixture(scope="module")
def summary() -> WorkerSummary:
    if not TRACE.exists():
        pytest.skip(f"{TRACE} is not here")
    return summarize_trace(analyze(load_events(str(TRACE))), file=TRACE.name, worker="w", span=None)


class _Args(msgspec.Struct, frozen=True):
    correlation: int = -1


class _Event(msgspec.Struct):
    """The fields of a trace event read here (the engine's decoder is not used, on purpose)."""

    name: str = ""
    cat: str = ""
    ts: float = 0.0
    dur: float = 0.0
    tid: int | str = 0
    args: _Args = _Args()


class _Trace(msgspec.Struct):
    traceEvents: list[_Event]


@pytest.fixture(scope="module")
def kernels() -> dict[str, Any]:
    """The trace's kernels read from its JSON, apart from the engine: every kernel's time, and
    the ``attn_fwd`` kernels launched inside each compiled region call, in launch order."""
    if not TRACE.exists():
        pytest.skip(f"{TRACE} is not here")
    with gzip.open(TRACE) as f:
        events = msgspec.json.decode(f.read(), type=_Trace).traceEvents
    launch = {e.args.correlation: e for e in events if e.cat == "cuda_runtime"}
    regions = [e for e in events if e.cat == "cpu_op" and e.name.startswith("Torch-Compiled Region")]
    kernel = [e for e in events if e.cat == "kernel"]
    attn = [(launch[k.args.correlation], k.dur) for k in kernel if k.name == ATTN_KERNEL]
    calls = [[dur for call, dur in sorted(attn, key=lambda a: a[0].ts)
              if call.tid == r.tid and r.ts <= call.ts <= r.ts + r.dur] for r in regions]
    tid = regions[0].tid
    launched = [(launch[k.args.correlation].ts, k.dur) for k in kernel
                if k.args.correlation in launch and launch[k.args.correlation].tid == tid]
    return {"all_us": sum(k.dur for k in kernel), "attn_us": sum(dur for _, dur in attn), "calls": calls,
            "launched": launched}


def _mmdit(summary: WorkerSummary) -> list[LayerStats]:
    return summary.layers[CLIP + T5:CLIP + T5 + MMDIT]


def test_text_encoders_mmdit_and_vae_are_all_found(summary: WorkerSummary) -> None:
    """Only the 69 module layers were found: the compiled MMDiT's SDPA calls were never looked at
    once a trace had an ``*Attention`` module. Layers are numbered in order of first appearance:
    the encoders, the transformer's 38 blocks (each the k-th SDPA of every call of it), the VAE."""
    assert summary.inferred
    assert [x.layer for x in summary.layers] == list(range(CLIP + T5 + MMDIT + VAE))
    modules = [x.module for x in summary.layers]
    assert modules[:CLIP] == [f"CLIPAttention_{k}" for k in range(CLIP)]
    assert modules[CLIP:CLIP + T5] == [f"T5LayerSelfAttention_{k}" for k in range(T5)]
    assert modules[CLIP + T5:CLIP + T5 + MMDIT] == [None] * MMDIT
    assert modules[-1] == "Attention_0"
    assert [x.calls for x in summary.layers] == [2.0] * (CLIP + T5) + [float(DENOISING)] * MMDIT + [1.0]


HIDDEN, IMAGE, TEXT = H * D, 2 * 4096, 2 * 333  # the projections' rows: B·tokens of each stream
_PROJECTIONS = ("aten::mm", "aten::addmm")


@pytest.fixture(scope="module")
def blocks() -> list[list[tuple[float, float]]]:
    """Per MMDiT block, read from the JSON apart from the engine: for each compiled call, the span
    from the block's first projection (the sixth before its SDPA call) to its last output projection
    (the second after the call; the first in the call's last block)."""
    if not TRACE.exists():
        pytest.skip(f"{TRACE} is not here")
    with gzip.open(TRACE) as f:
        events = msgspec.json.decode(f.read(), type=_Trace).traceEvents
    graphs = [e for e in events if e.cat == "user_annotation" and e.name.startswith("## Call CompiledFxGraph")]
    ops = sorted((e for e in events if e.cat == "cpu_op"), key=lambda e: e.ts)
    out: list[list[tuple[float, float]]] = [[] for _ in range(MMDIT)]
    for g in graphs:
        inside = [e for e in ops if e.tid == g.tid and g.ts <= e.ts <= g.ts + g.dur
                  and (e.name in _PROJECTIONS or e.name == FLASH)]
        cores = [k for k, e in enumerate(inside) if e.name == FLASH]
        assert len(cores) == MMDIT
        for n, k in enumerate(cores):
            first = inside[k - 6]
            last = inside[k + (1 if n == MMDIT - 1 else 2)]
            assert first.name in _PROJECTIONS and last.name == "aten::mm"
            out[n].append((first.ts, last.ts + last.dur))
    return out


def test_each_mmdit_layer_is_its_joint_block(summary: WorkerSummary, kernels: dict[str, Any],
                                             blocks: list[list[tuple[float, float]]]) -> None:
    """Layer k of the MMDiT holds the k-th joint attention block of each of the 4 compiled calls:
    its core is the k-th ``attn_fwd`` kernel; its projections are both streams' (q, k and v of the
    image and of the text, 3·2·(8192 + 666)·2432² FLOPs), its output projections both streams' (the
    last block's the image's alone); its device time is every kernel launched from its first
    projection to its last."""
    calls = kernels["calls"]
    assert [len(c) for c in calls] == [MMDIT] * DENOISING
    for k, layer in enumerate(_mmdit(summary)):
        want = sum(c[k] for c in calls)
        phases = {p.phase: p for p in layer.phases}
        sdpa = phases["sdpa"]
        assert sdpa.device_us == pytest.approx(want, abs=1e-3) and sdpa.kernel_names == [ATTN_KERNEL]
        # One joint attention per call: 4·B·H·S·S·D (q·kᵀ and attn·v), not causal.
        assert sdpa.flops == DENOISING * 4 * B * H * S * S * D
        assert phases["qkv_proj"].flops == DENOISING * 3 * 2 * (IMAGE + TEXT) * HIDDEN * HIDDEN
        rows = IMAGE if k == MMDIT - 1 else IMAGE + TEXT
        assert phases["out_proj"].flops == DENOISING * 2 * rows * HIDDEN * HIDDEN
        assert layer.device_us == pytest.approx(sum(_launched_us(kernels, *span) for span in blocks[k]), abs=1e-2)
    assert sum(p.device_us for x in _mmdit(summary) for p in x.phases if p.phase == "sdpa") \
        == pytest.approx(204_565.196, abs=1e-2)


def _launched_us(kernels: dict[str, Any], start: float, stop: float) -> float:
    """The durations of the kernels launched in [start, stop] on the compiled calls' thread."""
    return sum(dur for ts, dur in kernels["launched"] if start <= ts <= stop)


def test_the_sdpa_kernels_share_is_the_readmes(summary: WorkerSummary, kernels: dict[str, Any]) -> None:
    """The README: 241 SDPA calls, about 29% of all kernel time. The summary's SDPA time holds
    every ``attn_fwd`` kernel (and, in the encoders' SDPA, a few copies of their own)."""
    share = kernels["attn_us"] / kernels["all_us"]
    assert share == pytest.approx(0.293, abs=5e-4)
    sdpa_us = sum(p.device_us for x in summary.layers for p in x.phases if p.phase == "sdpa")
    assert kernels["attn_us"] <= sdpa_us < kernels["attn_us"] * 1.001
    assert sum(p.calls for x in summary.layers for p in x.phases if p.phase == "sdpa") == 241
    # The step's device time is its kernels' and its 24 copies' and fills (0.48 ms).
    assert summary.step_device_us == pytest.approx(kernels["all_us"] + 475.721, abs=1e-2)
    assert summary.attention_share_device is not None and summary.attention_share_device > share


def test_compiled_joint_blocks_are_whole_on_rocm_flash(summary: WorkerSummary) -> None:
    """Read through Inductor's kernel names, the MMDiT's blocks hold their projections, QK-norms,
    concatenation and split: none is core only, and what no phase names is at most the first
    block's image residual, whose kernel also fused the patch embedding's convolution."""
    for k, layer in enumerate(_mmdit(summary)):
        assert not layer.core_only and layer.backend == "rocm-flash" and layer.backend_evidence == [ATTN_KERNEL]
        named = {p.phase for p in layer.phases if p.cpu_us > 1e-3}
        assert named == {"qkv_proj", "sdpa", "out_proj"} | ({"other"} if k == 0 else set())
        qkv = {p.phase: p for p in layer.phases}["qkv_proj"]
        assert any("rsqrt" in n for n in qkv.kernel_names) and any("_cat_" in n for n in qkv.kernel_names)
    others = summary.layers[:CLIP + T5] + summary.layers[-1:]
    assert not any(x.core_only for x in others)
    assert {x.backend for x in others} == {"rocm-flash", "naive"}  # T5 is eager: matmul, softmax, matmul
    assert "core only" not in summary.headline


def test_the_pipelines_models_are_compared_apart() -> None:
    """Five models: CLIP-L, CLIP-G (``CLIPTextModelWithProjection`` twice), T5, the MMDiT and the VAE's
    decoder. T5's 24 layers run eager attention and the others SDPA: each model is uniform, so no
    layer of one is odd against another's (a backend-mismatch that told T5 to match CLIP and the
    MMDiT, before)."""
    if not TRACE.exists():
        pytest.skip(f"{TRACE} is not here")
    analysis = analyze(load_events(str(TRACE)))
    models = list(layer_models(analysis.events, analysis.attr).values())
    assert models == (["CLIPTextModelWithProjection_0"] * 12 + ["CLIPTextModelWithProjection_1"] * 32
                      + ["T5EncoderModel_0"] * T5 + ["SD3Transformer2DModel_0"] * MMDIT + ["Decoder_0"] * VAE)
    summary = summarize_trace(analysis, file=TRACE.name, worker="w", span=None)
    assert {x.backend for x in summary.layers[CLIP:CLIP + T5]} == {"naive"}
    assert "backend-mismatch" not in {f.id for f in summary.findings}


# -- a hand-written trace: a compiled region beside an attention module ---------------------------

def _x(name: str, ts: float, dur: float, cat: str = "cpu_op", *, dims: list[Any] | None = None,
       corr: int | None = None) -> dict[str, Any]:
    gpu = cat == "kernel"
    args: dict[str, Any] = {} if dims is None else {"Input Dims": dims}
    if corr is not None:
        args["correlation"] = corr
    return {"ph": "X", "cat": cat, "name": name, "pid": 0 if gpu else 1, "tid": 7 if gpu else 1, "ts": ts,
            "dur": dur, "args": args}


def _launch(ts: float, corr: int) -> dict[str, Any]:
    return _x("hipLaunchKernel", ts, 5, "cuda_runtime", corr=corr)


FLASH = "aten::_scaled_dot_product_flash_attention"
FORWARD = "aten::_flash_attention_forward"
#: A CLIP-like module (its projections and SDPA inside), then a compiled region called twice: its
#: first block between a layout kernel and a kernel that also fused an activation (``gelu``, an
#: origin no block rule knows: the walk stops there, core only), its second's ``mm`` beside the
#: core with only a ``view`` between; the second call holds only a first block.
HAND = [
    _x("ProfilerStep#1", 0, 1000, "user_annotation"),
    _x("nn.Module: CLIPAttention_0", 10, 190, "python_function"),
    _x("aten::linear", 20, 30, dims=[[2, 8, 64], [192, 64], [192]]),
    _x("aten::scaled_dot_product_attention", 60, 60),
    _x(FLASH, 65, 50),
    _x(FORWARD, 70, 40),
    _launch(80, 1),
    _x("aten::linear", 140, 30, dims=[[2, 8, 64], [64, 64], [64]]),
    _x("Torch-Compiled Region: 0/0", 250, 400),
    _x("## Call CompiledFxGraph f00 ##", 255, 390, "user_annotation"),
    _x("triton_poi_fused_cat_transpose_view_0", 260, 20),
    _x(FLASH, 290, 60),
    _x("aten::transpose", 292, 4),
    _x(FORWARD, 300, 40),
    _launch(310, 2),
    _x("triton_poi_fused_clone_gelu_1", 360, 20),
    _x("aten::mm", 400, 30, dims=[[16, 64], [64, 192]]),
    _launch(410, 3),
    _x("aten::view", 440, 5),
    _x(FLASH, 450, 60),
    _x(FORWARD, 460, 40),
    _launch(470, 4),
    _x("aten::view", 520, 5),
    _x("aten::mm", 530, 30, dims=[[16, 64], [64, 64]]),
    _x("Torch-Compiled Region: 0/0", 700, 200),
    _x(FLASH, 750, 60),
    _x(ATTN_KERNEL, 90, 30, "kernel", corr=1),
    _x(ATTN_KERNEL, 320, 60, "kernel", corr=2),
    _x("Cijk_Alik_Bljk_gemm", 415, 10, "kernel", corr=3),
    _x(ATTN_KERNEL, 480, 40, "kernel", corr=4),
]


def _hand(events: list[dict[str, Any]]) -> WorkerSummary:
    data = json.dumps({"traceEvents": events}).encode()
    return summarize_trace(analyze(decode_bytes(data)), file="hand.json", worker="w", span=None)


def test_a_private_sdpa_in_a_compiled_region_beside_a_module_is_found() -> None:
    """L0 the module (its private SDPA op inside is its own, not a block); L1 the first SDPA of
    each compiled call, core only; L2 the second of the first call, widened to its ``mm``s."""
    s = _hand(HAND)
    assert [(x.layer, x.module, x.calls, x.core_only) for x in s.layers] == [
        (0, "CLIPAttention_0", 1.0, False), (1, None, 2.0, True), (2, None, 1.0, False)]
    l0, l1, l2 = ({p.phase: p for p in x.phases} for x in s.layers)
    assert l0["qkv_proj"].flops == 2 * 16 * 64 * 192 and l0["out_proj"].flops == 2 * 16 * 64 * 64
    assert l0["sdpa"].device_us == 30
    # The private op is the sdpa phase whole, with the Python time before it: 280 -> 350 in the
    # first call (after the Triton kernel), 700 -> 810 in the second (from the region's start).
    assert l1["sdpa"].device_us == 60 and l1["sdpa"].cpu_us == pytest.approx(70 + 110, abs=1e-2)
    assert set(l1) <= {"sdpa", "other"} and ("other" not in l1 or l1["other"].cpu_us < 1e-3)
    assert l2["qkv_proj"].flops == 2 * 16 * 64 * 192 and l2["qkv_proj"].device_us == 10
    assert l2["sdpa"].device_us == 40 and l2["out_proj"].flops == 2 * 16 * 64 * 64
    assert [x.backend for x in s.layers] == ["rocm-flash"] * 3


def test_a_core_beside_a_module_does_not_take_its_projection() -> None:
    """A bare SDPA right after an attention module: walking back from the core, the module's
    output projection is the first projection met; it is the module's, and the core stays alone."""
    events = [
        _x("ProfilerStep#1", 0, 200, "user_annotation"),
        _x("nn.Module: Attention_0", 10, 60, "python_function"),
        _x(FLASH, 15, 20),
        _x("aten::linear", 40, 20, dims=[[2, 8, 64], [64, 64], [64]]),
        _x("aten::view", 80, 5),
        _x(FLASH, 90, 30),
    ]
    s = _hand(events)
    assert [(x.layer, x.module, x.core_only) for x in s.layers] == [(0, "Attention_0", False), (1, None, True)]
    assert {p.phase for p in s.layers[1].phases if p.cpu_us > 1e-3} == {"sdpa"}
    assert {p.phase: p.flops for p in s.layers[0].phases}["out_proj"] == 2 * 16 * 64 * 64
