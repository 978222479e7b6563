"""The rules on sparse and compiled attention (analysis/findings/sparse_findings.py): each of ``SPARSE_RULES``
run on a tiny hand-written two-step trace beside a hand-built summary whose layer masks are chosen so
that the rule's share, per-step time and counts can be worked by hand, at and past each threshold,
and silent where there is nothing to say."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tb_attn_plugin.analysis.attribution.attribute import attribute
from tb_attn_plugin.analysis.attribution.query import RuleQuery
from tb_attn_plugin.analysis.findings.sparse_findings import COARSE_BLOCKS, SPARSE_KEPT, SPARSE_RULES, UNUSED_SHARE
from tb_attn_plugin.trace.decode import decode_bytes
from tb_attn_plugin.types.schema import Backward, Finding, LayerMask, LayerStats, WorkerSummary

#: Each step is 1000 µs; layer 0's block runs 10-400 µs into it, layer 1's 500-900.
STEPS = (0.0, 1000.0)
ROUNDED = 1e-4  # a finding's figures are rounded to 4 decimals (finding.new_finding)


def _x(name: str, ts: float, dur: float, cat: str = "cpu_op") -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": 1, "args": {}}


def _scope(name: str, ts: float, dur: float) -> dict[str, Any]:
    return _x(name, ts, dur, "user_annotation")


def _trace(per_step: list[dict[str, Any]] | None = None, *, outside: list[dict[str, Any]] | None = None
           ) -> list[dict[str, Any]]:
    """Two steps of two blocks, each holding one bmm; ``per_step`` events (ts relative to the
    step's start) added in each step, ``outside`` events added as they are."""
    events = []
    for n, t0 in enumerate(STEPS, start=1):
        events += [_scope(f"ProfilerStep#{n}", t0, 1000), _scope("tbattn.v1/L0", t0 + 10, 390),
                   _x("aten::bmm", t0 + 20, 5), _scope("tbattn.v1/L1", t0 + 500, 400), _x("aten::bmm", t0 + 510, 5)]
        events += [{**e, "ts": e["ts"] + t0} for e in per_step or []]
    return events + (outside or [])


def _mask(spec: str, kept: float, *, core_us: float, work: float, dense: float = 1e9, blocks: float | None = None,
          dense_work: bool = False) -> LayerMask:
    return LayerMask(spec=spec, kept=kept, blocks=blocks, dense_flops=dense, mask_flops=dense * kept, work_flops=work,
                     dense_work=dense_work, core_us=core_us, dense_equiv_us=core_us)


def _layer(layer: int, backend: str, mask: LayerMask | None = None, *, cpu_us: float = 100.0) -> LayerStats:
    return LayerStats(layer=layer, module=None, backend=backend, backend_evidence=[f"evidence-{backend}"],
                      inferred=False, calls=1.0, cpu_us=cpu_us, device_us=0.0, flops=0.0, flops_per_s=0.0,
                      alloc_bytes=0.0, peak_bytes=0, sxs_bytes=0.0, heads_count=None, phases=[], heads=[],
                      backward=Backward(), mask=mask)


def _summary(*layers: LayerStats, device: str = "cpu") -> WorkerSummary:
    return WorkerSummary(file="w.1.pt.trace.json", worker="w", span=None, device=device, inferred=False,
                         backend="mixed", steps=[1, 2], step_count=2, step_cpu_us=1000.0, step_device_us=0.0,
                         attention_cpu_us=0.0, attention_device_us=0.0, attention_share_cpu=None,
                         attention_share_device=None, layers=list(layers), per_step=[], diagnostics={}, notes=[])


def _findings(summary: WorkerSummary, events: list[dict[str, Any]] | None = None,
              meta: dict[str, object] | None = None) -> dict[str, Finding]:
    """Every sparse rule's findings, by id (each rule gives at most one)."""
    ev = decode_bytes(json.dumps({"traceEvents": events or _trace()}).encode())
    t = RuleQuery(ev, attribute(ev), summary, meta or {})
    found = [f for rule in SPARSE_RULES for f in rule(t)]
    by_id = {f.id: f for f in found}
    assert len(by_id) == len(found)
    return by_id


# -- sparsity-unused ------------------------------------------------------------------------------

def _dense_and_sparse(core_us: float, backend: str = "flash") -> WorkerSummary:
    """Layer 1 dense (causal, kept 0.6): 100 µs for 1e9 FLOPs, 1e-7 µs a FLOP. Layer 0 sparse (kept
    0.25): its 1e9 dense FLOPs at that rate would take 100 µs; it took ``core_us``."""
    return _summary(_layer(0, backend, _mask("sliding:4", 0.25, core_us=core_us, work=0.25e9)),
                    _layer(1, backend, _mask("causal", 0.6, core_us=100.0, work=1e9)))


def test_a_sparse_layer_as_slow_as_dense_work_is_unused_sparsity() -> None:
    f = _findings(_dense_and_sparse(90.0))["sparsity-unused"]
    # 90 µs against the 100 µs its dense work takes at the dense layer's rate: 90 %, past 80 %.
    assert f.severity == "high" and f.evidence.layers == [0] and f.evidence.time_us == 90.0
    assert f.evidence.details == {"mask": "sliding:4", "kept": 0.25, "backend": "flash", "dense_share": 0.9}
    assert f.evidence.ops == ["evidence-flash"]
    assert ("The mask sliding:4 keeps 25% of the (query, key) pairs in layer 0, but it took 90% of the time its dense "
            "work takes at the rate of the run's dense layers (100.0 µs per step): the kernel computed the blocks "
            "that hold any kept pair.") in f.explanation
    assert "the attention core takes 90.0 µs per step" in f.explanation and "do 25% of the arithmetic" in f.explanation


@pytest.mark.parametrize(("core_us", "fires"), [(81.0, True), (79.0, False), (10.0, False)])
def test_unused_sparsity_starts_at_the_share_bound(core_us: float, fires: bool) -> None:
    assert UNUSED_SHARE == 0.8  # 81 and 79 µs of the dense work's 100 µs fall either side
    assert ("sparsity-unused" in _findings(_dense_and_sparse(core_us))) is fires


def test_the_dense_rate_is_the_median_of_the_dense_layers() -> None:
    # Dense layers at 1e-7, 2e-7 and 9e-7 µs a FLOP: the median 2e-7, so 1e9 dense FLOPs take 200 µs;
    # the sparse layer's 170 µs is 85 % of it (the mean rate, 4e-7, would make it 42 %).
    dense = [_layer(k, "flash", _mask("causal", 1.0, core_us=us, work=1e9)) for k, us in ((1, 100), (2, 200),
                                                                                           (3, 900))]
    s = _summary(_layer(0, "flash", _mask("sliding:4", 0.25, core_us=170.0, work=0.25e9)), *dense)
    f = _findings(s)["sparsity-unused"]
    assert f.evidence.details["dense_share"] == pytest.approx(0.85, abs=ROUNDED)
    assert "(200.0 µs per step)" in f.explanation


def test_without_dense_layers_there_is_no_rate_to_compare() -> None:
    s = _summary(_layer(0, "flash", _mask("sliding:4", 0.25, core_us=500.0, work=0.25e9)),
                 _layer(1, "flash", _mask("causal", 0.6, core_us=100.0, work=0.0)))  # no work: no rate
    assert "sparsity-unused" not in _findings(s)


def test_dense_work_is_unused_sparsity_whatever_its_time() -> None:
    s = _summary(_layer(0, "naive", _mask("sliding:4", 0.25, core_us=1.0, work=1e9, dense_work=True)),
                 _layer(1, "naive", _mask("sliding:4", 0.25, core_us=2.0, work=1e9, dense_work=True)))
    f = _findings(s)["sparsity-unused"]
    assert f.evidence.layers == [0, 1] and f.evidence.details["dense_share"] == 1.0
    assert "layers 0-1, but its ops computed every score: the mask is applied to full score matrices" in f.explanation
    assert f.evidence.time_us == 3.0  # both layers' cores: 1 + 2 µs


@pytest.mark.parametrize(("kept", "blocks", "fires"), [
    (0.1, 0.6, True),  # 60 % of the blocks for 10 % of the pairs: at least half, and 2x the pairs
    (0.1, 0.5, True),  # at the half
    (0.1, 0.4, False),  # under half the blocks
    (0.3, 0.55, False),  # over half, but under 2 · 0.3 = 0.6
    (0.3, 0.6, True),
])
def test_compiled_flex_with_too_coarse_blocks(kept: float, blocks: float, fires: bool) -> None:
    assert COARSE_BLOCKS == 2.0 and SPARSE_KEPT == 0.5
    s = _summary(_layer(0, "flex", _mask("sliding:4", kept, core_us=50.0, work=kept * 1e9, blocks=blocks)))
    found = _findings(s)
    assert ("sparsity-unused" in found) is fires
    if fires:
        f = found["sparsity-unused"]
        assert f.evidence.details["dense_share"] == blocks
        assert (f"it keeps {round(100 * blocks)}% of the 128×128 blocks flex_attention computes whole: the block size "
                "is too coarse for the mask: the kernel computed the blocks that hold any kept pair.") in f.explanation


def test_masks_that_keep_half_or_more_are_not_sparse() -> None:
    s = _summary(_layer(0, "naive", _mask("sliding:12", SPARSE_KEPT, core_us=1.0, work=1e9, dense_work=True)),
                 _layer(1, "naive"))
    assert _findings(s) == {}


def test_eager_flex_and_the_math_backend_say_why_their_work_is_dense() -> None:
    for backend, why in (("flex-eager", "flex_attention ran eagerly (its reference path computes every score)"),
                         ("sdpa-math", "SDPA's math backend computes every score")):
        s = _summary(_layer(0, backend, _mask("sliding:4", 0.25, core_us=1.0, work=1e9, dense_work=True)))
        assert f"computed every score: {why}." in _findings(s)["sparsity-unused"].explanation


# -- flex-eager -----------------------------------------------------------------------------------

def test_eager_flex_is_named_with_its_calls_and_the_layers_time() -> None:
    events = _trace([_x("FlexAttentionAutogradOp", 30, 50), _x("FlexAttentionAutogradOp", 520, 50)])
    s = _summary(_layer(0, "flex-eager", cpu_us=120.0), _layer(1, "flex-eager", cpu_us=80.0))
    f = _findings(s, events)["flex-eager"]
    assert f.severity == "high" and f.evidence.layers == [0, 1]
    assert f.evidence.time_us == 200.0  # the layers' forward time per step: 120 + 80 µs
    assert f.evidence.details == {"calls": 4}  # one a layer in each of two steps
    assert f.explanation.startswith("layers 0-1 ran flex_attention's eager path (its ops compute every score: "
                                    "evidence-flex-eager)")


def test_compiled_flex_is_not_eager() -> None:
    assert "flex-eager" not in _findings(_summary(_layer(0, "flex"), _layer(1, "naive")))


# -- block-mask-rebuilt ---------------------------------------------------------------------------

def test_a_block_mask_built_outside_the_layers_each_step() -> None:
    # One create_block_mask of 8 µs in each step, before the layers: 1 per step, 8 µs per step.
    events = _trace([_scope("tbattn.v1/block_mask", 1, 8)],
                    outside=[_scope("tbattn.v1/block_mask", 2500, 100)])  # after the steps: not counted
    s = _summary(_layer(0, "flex"), _layer(1, "flex"))
    f = _findings(s, events)["block-mask-rebuilt"]
    assert f.severity == "medium" and f.evidence.layers == [0, 1]  # built outside them: it serves them all
    assert f.evidence.details == {"builds_per_step": 1.0} and f.evidence.time_us == 8.0
    assert f.evidence.ops == ["tbattn.v1/block_mask"]
    assert f.explanation.startswith("create_block_mask ran 1 time per step, 8.0 µs per step: the mask is rebuilt")


def test_a_block_mask_phase_in_a_layer_names_that_layer_and_the_clock() -> None:
    # Twice per step in layer 1's block_mask phase, 6 and 4 µs: 2 builds, 10 µs per step.
    events = _trace([_scope("tbattn.v1/L1/block_mask", 520, 6), _scope("tbattn.v1/L1/block_mask", 530, 4)])
    f = _findings(_summary(_layer(0, "flex"), _layer(1, "flex"), device="cuda"), events)["block-mask-rebuilt"]
    assert f.evidence.layers == [1] and f.evidence.ops == ["block_mask phase"]
    assert f.evidence.details == {"builds_per_step": 2.0} and f.evidence.time_us == 10.0
    # A device trace is judged by device time: CPU work is said to be CPU time.
    assert "ran 2 times per step, 10.0 µs of CPU time per step" in f.explanation


# -- recompiles -----------------------------------------------------------------------------------

def test_compiles_in_the_profiled_steps_are_counted_outermost() -> None:
    # Step 1 compiles twice, 300 µs (with a nested timer) and 100 µs: 400 µs over 2 steps, 200 per step.
    events = _trace(outside=[
        _scope("_compile.compile_inner (dynamo_timed)", 20, 300),
        _scope("compile_fx.<locals>.fw_compiler_base (dynamo_timed)", 30, 100),
        _scope("_compile.compile_inner (dynamo_timed)", 520, 100),
        _scope("_compile.compile_inner (dynamo_timed)", 3000, 500)])  # outside the steps
    f = _findings(_summary(_layer(0, "compiled"), _layer(1, "compiled")), events)["recompiles"]
    assert f.severity == "high" and f.evidence.details == {"compiles": 2}
    assert f.evidence.time_us == 200.0 and f.evidence.layers == [0, 1]
    assert f.evidence.ops == ["_compile.compile_inner (dynamo_timed)"]
    assert "(200.0 µs per step, 2 compiles)" in f.explanation


def test_no_compile_no_recompile_finding() -> None:
    assert "recompiles" not in _findings(_summary(_layer(0, "compiled")))


# -- graph-break ----------------------------------------------------------------------------------

def _compiled_trace() -> list[dict[str, Any]]:
    """Layer 0's bmm runs eagerly; layer 1's bmm is inside a compiled region. Dynamo's cache
    lookup, top level in layer 0, is bookkeeping, not an eager op."""
    return _trace([_x("TorchDynamo Cache Lookup", 12, 2), _scope("Torch-Compiled Region: 0/0", 505, 20)])


def test_ops_outside_the_compiled_region_are_a_graph_break() -> None:
    f = _findings(_summary(_layer(0, "naive"), _layer(1, "compiled")), _compiled_trace(),
                  {"config": {"compile": True}})["graph-break"]
    # Layer 0's one bmm a step, 5 µs: eager; layer 1's bmm is compiled.
    assert f.severity == "medium" and f.evidence.layers == [0] and f.evidence.ops == ["aten::bmm"]
    assert f.evidence.details == {"eager_ops_per_step": 1.0} and f.evidence.time_us == 5.0
    assert "in layer 0 1 top-level op per step ran eagerly" in f.explanation


@pytest.mark.parametrize("meta", [{}, {"config": {"compile": False}}, {"config": "compile"}, {"config": {}}])
def test_without_compile_asked_there_is_no_graph_break(meta: dict[str, object]) -> None:
    assert "graph-break" not in _findings(_summary(_layer(0, "naive"), _layer(1, "compiled")), _compiled_trace(), meta)


def test_a_fully_compiled_run_has_no_graph_break() -> None:
    events = _trace([_scope("Torch-Compiled Region: 0/0", 15, 20), _scope("Torch-Compiled Region: 0/0", 505, 20)])
    assert "graph-break" not in _findings(_summary(_layer(0, "compiled"), _layer(1, "compiled")), events,
                                          {"config": {"compile": True}})


def test_a_plain_run_says_nothing() -> None:
    assert _findings(_summary(_layer(0, "naive"), _layer(1, "flash"))) == {}
    assert _findings(_summary()) == {}
