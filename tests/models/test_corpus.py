"""The analysis on real-model traces, checked against what reading each trace says
(``expected.py``): backends, the phase of every op of a block, the findings, score sizes and
fallback causes. The traces come from ``devtools/corpus.py``; when a rule is wrong, the rule is
fixed, not the expectation."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
import pytest
from expected import EXPECTED

from devtools.corpus import CORPUS, PLAIN, TRACES
from tb_attn_plugin.analysis.attribution.analyze import Analysis
from tb_attn_plugin.engine.loader import Loader, resolve_runs
from tb_attn_plugin.trace.kineto import Kind
from tb_attn_plugin.types.schema import WorkerSummary
from tb_attn_plugin.vocab.aten import FUSED_BLOCK_OPS
from tb_attn_plugin.vocab.scopes import PHASES


@cache
def _load(name: str) -> tuple[Analysis, WorkerSummary]:
    (run,) = resolve_runs(str(TRACES / name))
    loader = Loader()
    (trace,) = run.files
    summary = loader.summarize_run(run)
    assert not summary.errors and len(summary.workers) == 1
    return loader.analyze_file(trace), summary.workers[0]


def _block_phases(analysis: Analysis, layer: int = 0) -> dict[str, str]:
    """The top-level ops of the layer's first forward block, by phase, in order."""
    ev, a = analysis.events, analysis.attr
    (block, *_) = np.flatnonzero(a.is_scope & (a.layer == layer) & (a.phase < 0) & (a.head < 0) & ~a.backward)
    end = ev.ts[block] + ev.dur[block]
    out: dict[str, list[str]] = {}
    i = int(block) + 1
    while i < len(ev) and ev.track[i] == ev.track[block] and ev.ts[i] <= end:
        p = int(a.parent[i])
        if ev.kind[i] == Kind.CPU_OP and p >= 0 and (a.is_scope[p] or ev.names[ev.name[p]] in FUSED_BLOCK_OPS):
            phase = PHASES[a.phase[i]] if a.phase[i] >= 0 else "other"
            out.setdefault(phase, []).append(ev.names[ev.name[i]].removeprefix("aten::"))
        i += 1
    return {phase: " ".join(ops) for phase, ops in out.items()}


def _chains(analysis: Analysis, names: set[str]) -> list[set[str]]:
    """For every event of layer 0 with one of these names: its name and its ancestors' names."""
    ev, a = analysis.events, analysis.attr
    out = []
    for i in np.flatnonzero((a.layer == 0) & np.isin(ev.name, [ev.names.index(n) for n in names])).tolist():
        chain = set()
        while i >= 0:
            chain.add(ev.names[ev.name[i]])
            i = int(a.parent[i])
        out.append(chain)
    return out


def test_the_corpus_is_complete() -> None:
    assert set(EXPECTED) == set(CORPUS)
    assert all((TRACES / name).is_dir() for name in CORPUS), "run python -m devtools.corpus"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_phases_backend_and_findings(name: str) -> None:
    expected = EXPECTED[name]
    analysis, summary = _load(name)
    assert not analysis.inferred
    assert {layer.backend for layer in summary.layers} == {expected.backend}
    assert _block_phases(analysis) == expected.phases
    for layer, phases in (expected.more_phases or {}).items():
        assert _block_phases(analysis, layer) == phases, layer
    assert {f.id for f in summary.findings} == expected.findings
    for layer in summary.layers:
        other = next((p for p in layer.phases if p.phase == "other"), None)
        # "other" is bookkeeping: small, and never the largest phase.
        assert other is None or other.cpu_us < 0.2 * layer.cpu_us, (layer.layer, other.cpu_us, layer.cpu_us)
        assert other is None or other.cpu_us < max(p.cpu_us for p in layer.phases if p.phase != "other")


@pytest.mark.parametrize("name", sorted(n for n, e in EXPECTED.items() if e.flops is not None))
def test_flops_per_phase_as_the_config_gives_them(name: str) -> None:
    """Every phase's forward FLOPs, where written: each projection MLA runs, Gemma 3's q, k and v of one
    KV head, BART's cross-attention with its query from the decoder."""
    _, summary = _load(name)
    by_layer = {layer.layer: {p.phase: p.flops for p in layer.phases if p.flops} for layer in summary.layers}
    for layer, flops in (EXPECTED[name].flops or {}).items():
        assert by_layer[layer] == pytest.approx(flops), layer


@pytest.mark.parametrize("name", sorted(n for n, e in EXPECTED.items() if e.scores is not None))
def test_score_tensors_and_masks(name: str) -> None:
    expected = EXPECTED[name]
    _, summary = _load(name)
    (sxs,) = [f for f in summary.findings if f.id == "sxs-materialized"]
    d = sxs.evidence.details
    assert (d["sxs_allocs_per_forward"], d["sxs_mask_allocs_per_forward"]) == expected.scores
    # B·H·Sq·Sk·4 bytes: every corpus run is (2, 4, 48, 48) fp32.
    assert d["score_shape"] == "2x4x48x48" and d["sxs_tensor_bytes"] == 2 * 4 * 48 * 48 * 4
    assert d["sxs_bytes_per_layer"] == expected.scores[0] * 2 * 4 * 48 * 48 * 4
    # One total, quoted alike by every finding that gives one.
    totals = {f.evidence.bytes for f in summary.findings if f.id in ("sxs-materialized", "math-fallback")}
    assert totals == {sum(layer.sxs_bytes for layer in summary.layers)}
    # The evidence is the ops that allocated them: each writes a score tensor in layer 0.
    analysis, _ = _load(name)
    ev, a = analysis.events, analysis.attr
    written = {ev.names[ev.name[i]] for i in a.mem_event[(a.mem_layer == 0) & ~a.mem_backward
                                                         & (ev.mem_bytes == 2 * 4 * 48 * 48 * 4)].tolist()}
    assert sxs.evidence.ops and all(any(op in ancestors for ancestors in _chains(analysis, written))
                                    for op in sxs.evidence.ops)


@pytest.mark.parametrize("name", sorted(n for n, e in EXPECTED.items() if e.causes is not None))
def test_math_fallback_names_its_cause(name: str) -> None:
    _, summary = _load(name)
    (math,) = [f for f in summary.findings if f.id == "math-fallback"]
    assert math.evidence.details["causes"] == EXPECTED[name].causes
    assert "dropout_p 0.1 (training): the CPU flash kernel takes no dropout" in math.explanation
    assert "dropout" in math.suggestion and "none of the causes" not in math.explanation


@pytest.mark.parametrize(("name", "need_weights"), [("torch-mha-infer", 0), ("torch-mha-weights-infer", 1)])
def test_multihead_attention_fast_path_is_unfused(name: str, need_weights: int) -> None:
    """On the CPU, nn.MultiheadAttention's inference fast path computes bmm, softmax, bmm itself,
    whatever need_weights says; the finding tells the two apart from the op's own arguments."""
    _, summary = _load(name)
    (mha,) = [f for f in summary.findings if f.id == "mha-unfused"]
    assert mha.evidence.details["need_weights"] == need_weights
    assert "(aten::bmm, aten::_masked_softmax, aten::bmm)" in mha.explanation
    assert ("need_weights=True" in mha.explanation) == bool(need_weights)


def test_gpt2_other_is_not_its_largest_phase() -> None:
    """The report that started this: scale, mask and the KV cache's cat were GPT-2's "other"."""
    _, summary = _load("hf-gpt2-eager-infer")
    for layer in summary.layers:
        by_phase = {p.phase: p for p in layer.phases}
        assert max(by_phase, key=lambda p: by_phase[p].cpu_us) != "other"
        assert {"scale", "mask", "kv_cache"} <= set(by_phase)
        assert by_phase["kv_cache"].ops == ["aten::cat"] and by_phase["kv_cache"].calls == 1


def test_corpus_traces_are_small() -> None:
    sizes = [p.stat().st_size for p in Path(TRACES).rglob("*.json.gz")]
    assert len(sizes) == len(CORPUS) + len(PLAIN) and max(sizes) < 300_000


def _compare(a: str, b: str) -> list[str]:
    from tb_attn_plugin.analysis.cross_run.compare import compare

    loader = Loader()
    runs = [loader.summarize_run(r) for n in (a, b) for r in resolve_runs(str(TRACES / n))]
    base, other = compare(runs).runs
    assert base.why_slower == []
    return other.why_slower


def test_compare_says_why_sdpa_is_slower_than_eager() -> None:
    """Llama in training: SDPA fell back to math (dropout); most of the gap is in parts both runs
    share, which compare calls noise rather than blaming the implementation."""
    why = _compare("hf-llama-eager-train", "hf-llama-sdpa-train")
    assert why[0].startswith("run/hf-llama/sdpa/seq48 spends 7.27 ms of CPU time per step in attention against "
                             "6.45 ms (1.13×)")
    assert "math-fallback: dropout" in why[1]
    assert why[2].startswith("Where (forward and backward): qkv_proj +")
    # The backward of the ops that share an autograd node's number with a no-op before them (the head
    # merge's view after SDPA's, the cache's cat after detach_) is in the shared parts (analysis.autograd).
    assert "measurement noise" in why[3] and "implementation's own part is +52.7 µs" in why[3]
    # Faster (inference runs the CPU flash kernel): nothing to explain.
    assert _compare("hf-llama-eager-infer", "hf-llama-sdpa-infer") == []


def test_why_slower_on_inference_names_no_backward() -> None:
    """Llama in inference: eager is slower than SDPA's flash kernel. There is no backward, so the
    sentence has no "backward +0.0 µs" clause and the parts are forward alone."""
    from tb_attn_plugin.analysis.cross_run.why_slower import why_slower

    loader = Loader()
    eager, sdpa = (loader.summarize_run(r) for n in ("hf-llama-eager-infer", "hf-llama-sdpa-infer")
                   for r in resolve_runs(str(TRACES / n)))
    why = why_slower(eager, sdpa)
    assert why, "eager inference is slower than SDPA's flash kernel in this trace"
    assert why[0].endswith("): forward only, no backward.") and "backward +" not in " ".join(why)
    assert all(not line.startswith("Where (forward and backward)") for line in why)
    assert any(line.startswith("Where (forward): ") for line in why)
    # The figures: forward time per step in attention, summed over the layers (CPU clock).
    from tb_attn_plugin.analysis.common.wording import duration

    total = [sum(layer.cpu_us for w in r.workers for layer in w.layers) / len(r.workers) for r in (eager, sdpa)]
    assert why[0].startswith(f"{eager.run} spends {duration(total[0])} of CPU time per step in attention against "
                             f"{duration(total[1])}")
