"""The same model profiled with our scopes and without (``--no-scopes``): inference must find what
the scopes say (issue 32). Written from the traces by hand: the built-in transformer's eager
attention runs q·kᵀ as ``matmul`` (``expand``/``reshape``/``bmm``) at the start of its core, so an
inferred block opens on it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import TINY, profile_run

from tb_attn_plugin.analysis.attribution.analyze import analyze
from tb_attn_plugin.analysis.summary import summarize_trace
from tb_attn_plugin.engine.loader import load_events
from tb_attn_plugin.types.schema import WorkerSummary

CORE = ("qk_matmul", "av_matmul")


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> dict[bool, WorkerSummary]:
    logdir = tmp_path_factory.mktemp("unscoped")
    out = {}
    for scopes in (True, False):
        name = "scoped" if scopes else "plain"
        result = profile_run(logdir, name, impl="naive", mode="inference", scopes=scopes)
        assert result.status == "ok", result.error
        (path,) = result.traces
        out[scopes] = summarize_trace(analyze(load_events(str(path))), file=path.name, worker="w", span=None)
    return out


def test_the_eager_core_is_counted_exactly_without_scopes(pair: dict[bool, WorkerSummary]) -> None:
    """q·kᵀ was in no phase (its synthetic phase scope began before the block's and so did not
    enclose the op): the core's FLOPs came out half."""
    scoped, plain = pair[True], pair[False]
    assert plain.inferred and not scoped.inferred
    assert [layer.layer for layer in plain.layers] == [layer.layer for layer in scoped.layers]
    b, h, s, d = TINY.batch, TINY.heads, TINY.seq, TINY.d_model // TINY.heads
    for want, got in zip(scoped.layers, plain.layers, strict=True):
        for phase in CORE:
            flops = {p.phase: p.flops for p in got.phases}
            assert flops.get(phase) == {p.phase: p.flops for p in want.phases}[phase] == 2 * b * h * s * s * d, phase
        ops = {p.phase: p.ops for p in got.phases}
        assert "aten::bmm" in " ".join(ops["qk_matmul"]) or "aten::matmul" in " ".join(ops["qk_matmul"])


@pytest.mark.parametrize("scopes", [True, False], ids=["scoped", "plain"])
def test_fused_sdpa_stores_no_scores_whatever_the_sizes(tmp_path: Path, scopes: bool) -> None:
    """Generation with fused SDPA, a prompt of 32 tokens and a head size of 32: q, k, v and the
    output of the prompt's SDPA have the bytes of its (B, H, 32, 32) scores. ``sxs-materialized``
    fired on them (evidence ``empty_like`` and ``linear``); a score tensor is one a score-making op
    stores, not one of the same size."""
    result = profile_run(tmp_path, "gen", impl="sdpa", mode="generate", prompt_len=32, new_tokens=2, heads=4,
                         d_model=128, seq=64, scopes=scopes)
    assert result.status == "ok", result.error
    (path,) = result.traces
    summary = summarize_trace(analyze(load_events(str(path))), file=path.name, worker="w", span=None)
    assert summary.layers and all(layer.backend != "naive" for layer in summary.layers)
    assert all(layer.sxs_bytes == 0 for layer in summary.layers)
    assert "sxs-materialized" not in [f.id for f in summary.findings]


#: The phases whose FLOPs an inferred block must count as the scoped one does.
COUNTED = ("qkv_proj", "qk_matmul", "av_matmul", "sdpa", "out_proj")


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str, bool], WorkerSummary]:
    logdir = tmp_path_factory.mktemp("unscoped-models")
    out = {}
    for model in ("builtin", "hf:llama", "hf:gpt2", "hf:bert"):
        for impl in ("naive", "sdpa"):
            for scopes in (True, False):
                name = f"{model.replace(':', '-')}-{impl}-{'scoped' if scopes else 'plain'}"
                result = profile_run(logdir, name, model=model, impl=impl, mode="inference", scopes=scopes)
                assert result.status == "ok", (name, result.error)
                (path,) = result.traces
                out[(model, impl, scopes)] = summarize_trace(analyze(load_events(str(path))), file=path.name,
                                                             worker="w", span=None)
    return out


@pytest.mark.parametrize("impl", ["naive", "sdpa"])
@pytest.mark.parametrize("model", ["builtin", "hf:llama", "hf:gpt2", "hf:bert"])
def test_an_inferred_block_is_the_whole_attention_block(models: dict[tuple[str, str, bool], WorkerSummary],
                                                        model: str, impl: str) -> None:
    """The block found by its core is widened to its projections (q, k, v before; the output
    after), rotary embeddings and KV cache between: the same FLOPs per phase as with scopes. It
    was the core alone: attention came out at a fraction of the step."""
    scoped, plain = models[(model, impl, True)], models[(model, impl, False)]
    assert plain.inferred and [layer.layer for layer in plain.layers] == [layer.layer for layer in scoped.layers]
    assert plain.backend == scoped.backend
    for want, got in zip(scoped.layers, plain.layers, strict=True):
        flops = {p.phase: p.flops for p in got.phases if p.phase in COUNTED}
        assert flops == {p.phase: p.flops for p in want.phases if p.phase in COUNTED}, (model, impl, want.layer)
        assert flops["qkv_proj"] > 0 and flops["out_proj"] > 0
