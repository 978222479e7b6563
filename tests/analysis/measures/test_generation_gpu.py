"""Generation on real GPU traces (``tests/gpu_traces/generate``, an H200, bf16): decode reads the
KV cache at the memory's bandwidth, a dynamic cache's copies dominate its decode steps, fewer KV
heads read fewer bytes, Hugging Face's static cache is read whole and expanded, and decode time
and cache grow with the context."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tb_attn_plugin.analysis.attribution.analyze import analyze
from tb_attn_plugin.analysis.cross_run.scaling import scaling
from tb_attn_plugin.analysis.summary import summarize_trace
from tb_attn_plugin.engine.loader import Loader, load_events, resolve_runs
from tb_attn_plugin.types.schema import Generation, WorkerSummary

GEN = Path(__file__).resolve().parents[2] / "gpu_traces" / "generate"
BF16 = 2
#: builtin runs: 2 layers, 16 heads of 128, batch 8, prompt 8192, 16 decode steps.
LAYERS, H, D, B, P, N = 2, 16, 128, 8, 8192, 16


def _summary(run: str) -> WorkerSummary:
    run_dir = GEN / run
    (path,) = run_dir.glob("*.pt.trace.json.gz")
    meta = json.loads((run_dir / "tb_attn_run.json").read_text())
    return summarize_trace(analyze(load_events(str(path))), file=path.name, worker="w", span=None, metadata=meta)


def _gen(s: WorkerSummary) -> Generation:
    assert s.generation is not None
    return s.generation


def _ids(s: WorkerSummary) -> set[str]:
    return {f.id for f in s.findings}


@pytest.mark.parametrize(("run", "kv_heads"), [
    ("big/builtin/sdpa/gen-p8192-n16-static-bfloat16", H), ("big/builtin/sdpa/gen-p8192-n16-dynamic-bfloat16", H),
    ("big/builtin/sdpa/gen-p8192-n16-static-kv4-bfloat16", 4)])
def test_cache_bytes_and_decode_flops_on_gpu(run: str, kv_heads: int) -> None:
    s = _summary(run)
    g = _gen(s)
    assert s.device == "cuda" and g.clock == "device" and g.kv_dtype == "bfloat16"
    assert [t.context for t in g.tokens] == list(range(P, P + N + 1))
    for t in g.tokens:
        assert t.kv_bytes == t.read_bytes == LAYERS * 2 * B * kv_heads * t.context * D * BF16
    assert g.kv_bytes_per_layer == 2 * B * kv_heads * (P + N) * D * BF16
    assert g.decode is not None
    mean_context = sum(range(P + 1, P + N + 1)) / N
    for layer in g.decode.layers:
        sdpa = next(p for p in layer.phases if p.phase == "sdpa")
        assert sdpa.flops == pytest.approx(4 * B * H * mean_context * D)  # one query per sequence, every key
    assert g.reference_bytes_per_s is not None and g.reference_bytes_per_s > 3e12  # the H200's copy, ~4.1 TB/s


def test_decode_is_memory_bound_and_a_dynamic_cache_copies_itself() -> None:
    static = _summary("big/builtin/sdpa/gen-p8192-n16-static-bfloat16")
    dynamic = _summary("big/builtin/sdpa/gen-p8192-n16-dynamic-bfloat16")
    for s in (static, dynamic):
        g = _gen(s)
        assert g.reference_bytes_per_s is not None
        assert g.achieved_bytes_per_s > 0.8 * g.reference_bytes_per_s  # reading 1 GiB per token at HBM speed
        assert "decode-memory-bound" in _ids(s)
    gs, gd = _gen(static), _gen(dynamic)
    assert gs.decode is not None and gd.decode is not None
    assert gd.realloc_bytes_per_token == gd.decode.kv_bytes and gs.realloc_bytes_per_token == 0
    assert gd.decode.kv_cache_us > 10 * gd.decode.core_us  # the copy costs more than attention itself
    realloc = next(f for f in dynamic.findings if f.id == "kv-cache-realloc")
    assert realloc.severity == "medium" and realloc.evidence.details["share_of_decode_attention"] > 0.5
    assert "kv-cache-realloc" not in _ids(static)
    # Without the copy, the step's device is idle most of the time: launches wait on the CPU.
    assert "decode-dispatch-bound" in _ids(static) and "decode-dispatch-bound" not in _ids(dynamic)
    assert {"gqa-opportunity"} <= _ids(static)


def test_fewer_kv_heads_read_fewer_bytes() -> None:
    mha, gqa = _gen(_summary("big/builtin/sdpa/gen-p8192-n16-static-bfloat16")), \
        _gen(_summary("big/builtin/sdpa/gen-p8192-n16-static-kv4-bfloat16"))
    assert mha.read_bytes_per_token == 4 * gqa.read_bytes_per_token
    assert mha.decode is not None and gqa.decode is not None
    assert gqa.decode.core_us < 0.5 * mha.decode.core_us


def test_hugging_face_static_cache_is_read_whole_and_expanded() -> None:
    """Llama with 4 KV heads of 16: its dynamic cache reaches SDPA as is (enable_gqa); its static
    cache comes with a mask, so repeat_kv expands K and V to all 16 heads, over the whole
    preallocated length: four times the bytes, and the decode step is slower for it."""
    static_summary = _summary("hf/hf-llama/sdpa/gen-p4096-n16-static-kv4-bfloat16")
    dynamic_summary = _summary("hf/hf-llama/sdpa/gen-p4096-n16-dynamic-kv4-bfloat16")
    static, dynamic = _gen(static_summary), _gen(dynamic_summary)
    expanded = next(f for f in static_summary.findings if f.id == "kv-expanded")
    assert expanded.severity == "medium" and expanded.evidence.details["ratio"] == pytest.approx(4.0)
    assert expanded.evidence.details["share_of_decode_attention"] > 0.5  # repeat_kv costs more than SDPA
    assert "kv-expanded" not in _ids(dynamic_summary)
    assert static.kv_heads == dynamic.kv_heads == 4 and static.heads == 16
    last = next(t for t in reversed(static.tokens) if t.role == "decode")
    assert last.kv_bytes == LAYERS * 2 * 4 * 4 * (4096 + N) * D * BF16  # batch 4: the whole buffer, P + N
    assert last.read_bytes == 4 * last.kv_bytes
    d_last = next(t for t in reversed(dynamic.tokens) if t.role == "decode")
    assert d_last.read_bytes == d_last.kv_bytes == LAYERS * 2 * 4 * 4 * (4096 + N) * D * BF16
    assert static.decode is not None and dynamic.decode is not None
    assert static.decode.attention_us > 2 * dynamic.decode.attention_us


def test_decode_scales_with_context_on_gpu() -> None:
    loader = Loader()
    runs = [loader.summarize_run(r) for r in resolve_runs(str(GEN / "scaling"))]
    (series,) = [s for s in scaling(runs).series if s.x == "context"]
    assert [p.seq for p in series.points] == [1032, 4104, 16392]  # the decode steps' mean contexts
    assert series.memory_fit is not None and series.memory_fit.k == pytest.approx(1.0, abs=1e-3)  # bytes ∝ context
    assert series.time_fit is not None and 0.3 < series.time_fit.k < 1.1  # launch latency at short contexts


def test_decode_sits_under_the_memory_roof_and_prefill_under_the_compute_roof() -> None:
    """On the H200 (table: 989.5 TFLOP/s bf16, 4.8 TB/s): a decode step's query against the whole
    cache does 4·B·H·L·D FLOPs over about 2·B·H·L·D·2 bytes of K and V, about one FLOP per byte,
    far under the 206 FLOP/B ridge; the prefill's 8192² scores put it far above."""
    s = _summary("big/builtin/sdpa/gen-p8192-n16-static-bfloat16")
    g = _gen(s)
    assert s.roofline is not None and "H200 SXM" in s.roofline.source
    assert g.prefill is not None and g.decode is not None
    pre, dec = g.prefill.roof, g.decode.roof
    assert pre is not None and pre.verdict == "compute-bound" and pre.intensity is not None and pre.intensity > 206
    assert dec is not None and dec.verdict == "memory-bound" and dec.intensity is not None and dec.intensity < 4
    (sdpa,) = [p for p in g.decode.layers[0].phases if p.phase == "sdpa"]
    # the core reads K and V of the keys filled so far (P + 1 ... P + N over the steps: a mean of
    # P + (N + 1) / 2) and q, and writes o
    cache = 2 * B * H * (P + (N + 1) / 2) * D * BF16
    assert sdpa.bytes == pytest.approx(cache + 2 * B * H * D * BF16, rel=1e-6)
    assert sdpa.roof is not None and sdpa.roof.verdict == "memory-bound" and sdpa.roof.share is not None
    assert 0.3 < sdpa.roof.share < 1.2  # a copy-like read of the cache: near the bandwidth roof
