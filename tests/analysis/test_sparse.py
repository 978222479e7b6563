"""Sparse and compiled attention in the analysis: backends, FLOPs the mask asks for, what the
sparsity saved, inference of compiled blocks, and the findings that say what went wrong."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import SPARSE, WINDOW
from tracetools import trace_files

from tb_attn_plugin.analysis.attribution.analyze import analyze
from tb_attn_plugin.analysis.ops.backend import detect_backend
from tb_attn_plugin.analysis.summary import summarize_trace
from tb_attn_plugin.engine.loader import load_events
from tb_attn_plugin.types.schema import WorkerSummary
from tb_attn_plugin.vocab.masks import kept_pairs, parse_mask

B, H, S, C = SPARSE["batch"], SPARSE["heads"], SPARSE["seq"], SPARSE["d_model"]
D = int(C) // int(H)
DENSE = 2 * B * H * S * S * (D + D)  # the core's forward FLOPs with every pair kept
SLIDING = kept_pairs(parse_mask(f"sliding:{WINDOW}"), int(S), int(S), causal=True) / S**2


def _summary(logdir: Path, run: str, *, metadata: bool = True) -> WorkerSummary:
    (path,) = trace_files(logdir / run)
    meta = json.loads((logdir / run / "tb_attn_run.json").read_text()) if metadata else None
    return summarize_trace(analyze(load_events(str(path))), file=path.name, worker="w", span=None, metadata=meta)


def _ids(s: WorkerSummary) -> set[str]:
    return {f.id for f in s.findings}


@pytest.mark.parametrize(("run", "backend"), [
    ("flex-sliding", "flex"), ("flex-causal", "flex"), ("flex-eager-sliding", "flex-eager"),
    ("naive-sliding", "naive"), ("sdpa-sliding", "cpu-flash"), ("naive-compiled", "compiled"),
    ("gemma3-flex", "flex"),
])
def test_backends(sparse_logdir: Path, run: str, backend: str) -> None:
    assert {x.backend for x in _summary(sparse_logdir, run).layers} == {backend}


def _drawn_block_share() -> float:
    """The block-sparse mask's kept share, counted here from its draw (seed 0, as the runs)."""
    from runner.masks import dense_mask, mask_mod

    return float(dense_mask(mask_mod(parse_mask("block:0.5"), S, causal=True, seed=0), S).sum()) / S**2


def _with_mask(logdir: Path, run: str, spec: str, kept: float) -> WorkerSummary:
    """A run's trace summarized as if its metadata recorded another mask: the kernel's FLOPs
    come from the metadata alone (prefix and block masks are checked on the sliding window's
    trace, which saves a compile each)."""
    (path,) = trace_files(logdir / run)
    meta = json.loads((logdir / run / "tb_attn_run.json").read_text())
    meta["mask"].update(spec=spec, kept=kept)
    return summarize_trace(analyze(load_events(str(path))), file=path.name, worker="w", span=None, metadata=meta)


def test_compiled_flex_counts_the_work_the_mask_asks_for(sparse_logdir: Path) -> None:
    cases = [(_summary(sparse_logdir, "flex-sliding"), SLIDING),
             (_summary(sparse_logdir, "flex-causal"), (S + 1) / (2 * S)),
             (_summary(sparse_logdir, "flex-document"), kept_pairs(parse_mask("document:4"), S, S, causal=True) / S**2)]
    prefix = kept_pairs(parse_mask("prefix:100"), S, S, causal=True) / S**2
    cases += [(_with_mask(sparse_logdir, "flex-sliding", "prefix:100", prefix), prefix),
              (_with_mask(sparse_logdir, "flex-sliding", "block:0.5", _drawn_block_share()), _drawn_block_share())]
    for summary, kept in cases:
        for layer in summary.layers:
            m = layer.mask
            assert m is not None and m.kept == kept
            assert m.dense_flops == DENSE and m.mask_flops == pytest.approx(DENSE * kept, rel=1e-12)
            assert m.work_flops == pytest.approx(DENSE * kept, rel=1e-12) and not m.dense_work
            flex = next(p for p in layer.phases if p.phase == "flex")
            assert flex.flops == pytest.approx(DENSE * kept * layer.calls, rel=1e-12)
            assert m.blocks is not None and m.dense_equiv_us == pytest.approx(m.core_us / m.blocks, rel=1e-9)


@pytest.mark.parametrize("run", ["naive-sliding", "sdpa-sliding", "flex-eager-sliding"])
def test_dense_work_with_a_sparse_meaning(sparse_logdir: Path, run: str) -> None:
    s = _summary(sparse_logdir, run)
    for layer in s.layers:
        m = layer.mask
        assert m is not None and m.kept == SLIDING and m.dense_work
        assert m.work_flops == pytest.approx(DENSE, rel=1e-9)  # counted from the ops: every score
        assert m.dense_equiv_us == pytest.approx(m.core_us, rel=1e-9)  # nothing saved
    assert "sparsity-unused" in _ids(s)


#: Findings whose firing depends on the machine's speed (a measured roof against measured times).
SPEED_DEPENDENT = {"far-from-roof"}


def test_compiled_flex_with_a_sparse_mask_is_not_flagged(sparse_logdir: Path) -> None:
    """Compiled flex skips the blocks its mask empties, builds its BlockMask once and compiles once:
    the only finding left is attention's share of the step, which every trace gets."""
    s = _summary(sparse_logdir, "flex-sliding")
    assert {x.backend for x in s.layers} == {"flex"}
    assert all(x.mask is not None and not x.mask.dense_work and x.mask.kept == SLIDING for x in s.layers)
    assert _ids(s) - SPEED_DEPENDENT == {"share-of-step"}


def test_flex_eager_is_a_finding(sparse_logdir: Path) -> None:
    assert "flex-eager" in _ids(_summary(sparse_logdir, "flex-eager-sliding"))
    assert "flex-eager" not in _ids(_summary(sparse_logdir, "flex-causal"))


def test_gemma_layers_local_and_global(sparse_logdir: Path) -> None:
    s = _summary(sparse_logdir, "gemma3-flex")
    masks = {x.layer: x.mask for x in s.layers}
    assert masks[0] is not None and masks[0].spec == f"sliding:{WINDOW}" and masks[0].local
    assert masks[1] is not None and masks[1].spec == "causal" and not masks[1].local
    # Hugging Face builds the BlockMask in every forward.
    assert "block-mask-rebuilt" in _ids(s)
    assert "block-mask-rebuilt" not in _ids(_summary(sparse_logdir, "flex-sliding"))


def test_no_metadata_no_mask(sparse_logdir: Path) -> None:
    s = _summary(sparse_logdir, "flex-sliding", metadata=False)
    assert all(x.mask is None for x in s.layers) and {x.backend for x in s.layers} == {"flex"}


def test_compiled_blocks_are_inferred_without_scopes(sparse_logdir: Path) -> None:
    s = _summary(sparse_logdir, "naive-compiled-unscoped")
    assert s.inferred and [x.layer for x in s.layers] == [0, 1]
    assert {x.backend for x in s.layers} == {"compiled"}
    assert all([p.phase for p in x.phases if p.phase != "other"] == ["compiled"] for x in s.layers)
    assert all(p.op_count == 0 for x in s.layers for p in x.phases if p.phase == "other")
    assert "graph-break" not in _ids(s)


def test_compiled_run_has_no_graph_break(sparse_logdir: Path) -> None:
    """The compiled block ran compiled, one region per layer: no graph break, recompile or backend
    mismatch; attention's share of the step is its one finding."""
    s = _summary(sparse_logdir, "naive-compiled")
    assert {x.backend for x in s.layers} == {"compiled"}
    assert _ids(s) - SPEED_DEPENDENT == {"share-of-step"}


def test_detect_backend_rules() -> None:
    assert detect_backend(["Torch-Compiled Region: 0/0"], [], ["flex"]) == ("flex", ["flex phase",
                                                                                     "Torch-Compiled Region"])
    assert detect_backend(["FlexAttentionAutogradOp", "Torch-Compiled Region: 0/0", "aten::bmm"], [], ["flex"])[0] \
        == "flex-eager"
    assert detect_backend([], ["triton_tem_fused_flex_attention_0"], [])[0] == "flex"
    assert detect_backend(["Torch-Compiled Region: 2/1"], [], [])[0] == "compiled"
    assert detect_backend(["aten::addmm"], [], ["compiled"]) == ("compiled", ["compiled phase"])


def test_graph_break_when_compile_was_asked_but_the_block_ran_eagerly(sparse_logdir: Path) -> None:
    (path,) = trace_files(sparse_logdir / "naive-sliding")
    meta = json.loads((sparse_logdir / "naive-sliding" / "tb_attn_run.json").read_text())
    meta["config"]["compile"] = True
    s = summarize_trace(analyze(load_events(str(path))), file=path.name, worker="w", span=None, metadata=meta)
    (finding,) = [f for f in s.findings if f.id == "graph-break"]
    assert finding.evidence.layers == [0, 1] and finding.evidence.details["eager_ops_per_step"] > 0


def test_a_compile_inside_the_profiled_steps_is_a_finding(tmp_path: Path) -> None:
    import torch
    from torch.profiler import profile, record_function

    from tb_attn_plugin.vocab.scopes import format_scope

    def core(q: torch.Tensor) -> torch.Tensor:
        return (q @ q.transpose(-2, -1)).softmax(-1) @ q

    compiled = torch.compile(core)
    q = torch.randn(1, 2, 16, 8)
    with profile(record_shapes=True) as prof:
        for step in range(2):
            with record_function(f"ProfilerStep#{step}"), record_function(format_scope(0)):
                with record_function(format_scope(0, phase="compiled")):
                    compiled(q if step == 0 else torch.randn(1, 2, 24, 8))  # each step compiles anew
    path = tmp_path / "w.1.pt.trace.json"
    prof.export_chrome_trace(str(path))
    s = summarize_trace(analyze(load_events(str(path))), file=path.name, worker="w", span=None, metadata={})
    (finding,) = [f for f in s.findings if f.id == "recompiles"]
    assert finding.evidence.details["compiles"] >= 2


def test_hugging_face_flex_counts_its_causal_kernel(sparse_logdir: Path) -> None:
    s = _summary(sparse_logdir, "llama-flex")
    for layer in s.layers:
        assert layer.backend == "flex" and layer.mask is not None and layer.mask.spec == "causal"
        flex = next(p for p in layer.phases if p.phase == "flex")
        assert flex.flops == pytest.approx(DENSE * (S + 1) / (2 * S), rel=1e-12)


def test_flex_without_a_mask_counts_the_dense_kernel(sparse_logdir: Path) -> None:
    (path,) = trace_files(sparse_logdir / "flex-causal")
    meta = json.loads((sparse_logdir / "flex-causal" / "tb_attn_run.json").read_text())
    meta.pop("mask")
    meta["config"].update(causal=False, mask=None)  # as BERT's flex: not causal, no mask
    s = summarize_trace(analyze(load_events(str(path))), file=path.name, worker="w", span=None, metadata=meta)
    for layer in s.layers:
        assert layer.mask is None
        assert next(p for p in layer.phases if p.phase == "flex").flops == pytest.approx(DENSE, rel=1e-12)


def test_a_mask_too_fine_for_the_blocks_saves_little(sparse_logdir: Path) -> None:
    """The same window at 256 tokens: it keeps 22% of the pairs but 3 of the 4 blocks, which
    flex computes whole."""
    (path,) = trace_files(sparse_logdir / "flex-sliding")
    meta = json.loads((sparse_logdir / "flex-sliding" / "tb_attn_run.json").read_text())
    meta["mask"].update(kept=kept_pairs(parse_mask(f"sliding:{WINDOW}"), 256, 256, causal=True) / 256**2, blocks=0.75)
    s = summarize_trace(analyze(load_events(str(path))), file=path.name, worker="w", span=None, metadata=meta)
    (finding,) = [f for f in s.findings if f.id == "sparsity-unused"]
    assert "too coarse" in finding.explanation and finding.evidence.details["dense_share"] == 0.75


@pytest.mark.parametrize("bad", [float("inf"), 10**400, True, "512", -1, 2.5, None])
def test_hostile_metadata_gives_no_mask_figures_and_no_error(sparse_logdir: Path, bad: object) -> None:
    (path,) = trace_files(sparse_logdir / "flex-sliding")
    meta = json.loads((sparse_logdir / "flex-sliding" / "tb_attn_run.json").read_text())
    meta["config"]["batch"] = bad
    s = summarize_trace(analyze(load_events(str(path))), file=path.name, worker="w", span=None, metadata=meta)
    assert all(x.mask is None for x in s.layers)
    meta = json.loads((sparse_logdir / "flex-sliding" / "tb_attn_run.json").read_text())
    meta["mask"] = {"spec": "<b>sliding:64</b>", "kept": float("nan"), "blocks": 2, "layers": {"0": 7}}
    s = summarize_trace(analyze(load_events(str(path))), file=path.name, worker="w", span=None, metadata=meta)
    assert all(x.mask is None for x in s.layers)


def test_a_mask_named_without_its_share_is_counted_from_its_spec(sparse_logdir: Path) -> None:
    (path,) = trace_files(sparse_logdir / "flex-sliding")
    meta = json.loads((sparse_logdir / "flex-sliding" / "tb_attn_run.json").read_text())
    meta["mask"] = {"spec": "prefix:100"}  # written by hand: no kept share, no blocks
    s = summarize_trace(analyze(load_events(str(path))), file=path.name, worker="w", span=None, metadata=meta)
    kept = kept_pairs(parse_mask("prefix:100"), S, S, causal=True) / S**2
    for layer in s.layers:
        assert layer.mask is not None and layer.mask.kept == kept and layer.mask.blocks is None
        assert layer.mask.mask_flops == pytest.approx(DENSE * kept, rel=1e-12)
