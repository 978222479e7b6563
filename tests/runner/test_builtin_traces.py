"""Real traces of the built-in transformer: every attention op sits in the right scope."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from helpers import ACTIVE_STEPS, TINY
from tracetools import Op, load_trace, ops_with_scopes, scope_counts, trace_files

from runner.metadata import METADATA_FILE
from tb_attn_plugin.vocab.scopes import format_scope

ATTENTION_OPS = {
    "aten::matmul", "aten::bmm", "aten::softmax", "aten::_softmax", "aten::_safe_softmax",
    "aten::masked_fill", "aten::masked_fill_", "aten::mul", "aten::dropout",
    "aten::scaled_dot_product_attention", "aten::_scaled_dot_product_flash_attention_for_cpu",
    "aten::_scaled_dot_product_attention_math", "aten::repeat_interleave",
}
LAYERS = range(TINY.layers)

COMMON = {("qkv_proj", "aten::linear"): 1, ("out_proj", "aten::linear"): 1}
EXPECTED: dict[str, dict[tuple[str, str], int]] = {
    "naive": {**COMMON, ("qk_matmul", "aten::matmul"): 1, ("scale", "aten::mul"): 1,
              ("mask", "aten::masked_fill"): 1, ("softmax", "aten::softmax"): 1, ("av_matmul", "aten::matmul"): 1,
              ("sdpa", "aten::scaled_dot_product_attention"): 0},
    "naive-inplace": {**COMMON, ("qk_matmul", "aten::matmul"): 1, ("scale", "aten::mul"): 1,
                      ("mask", "aten::masked_fill"): 0, ("mask", "aten::masked_fill_"): 1,
                      ("softmax", "aten::softmax"): 1, ("av_matmul", "aten::matmul"): 1},
    "sdpa": {**COMMON, ("sdpa", "aten::scaled_dot_product_attention"): 1,
             ("sdpa", "aten::_scaled_dot_product_flash_attention_for_cpu"): 1, ("softmax", "aten::softmax"): 0},
    "sdpa-flash": {**COMMON, ("sdpa", "aten::scaled_dot_product_attention"): 1,
                   ("sdpa", "aten::_scaled_dot_product_flash_attention_for_cpu"): 1},
    "sdpa-math": {**COMMON, ("sdpa", "aten::scaled_dot_product_attention"): 1,
                  ("sdpa", "aten::_scaled_dot_product_attention_math"): 1, ("sdpa", "aten::_safe_softmax"): 1,
                  ("sdpa", "aten::_scaled_dot_product_flash_attention_for_cpu"): 0},
}


def _ops(logdir: Path, run: str) -> tuple[list[Op], list[dict[str, object]]]:
    files = trace_files(logdir / run)
    assert len(files) == 1, files
    return ops_with_scopes(load_trace(files[0]))


def _forward(ops: list[Op]) -> list[Op]:
    # Backward ops run outside any scope; they are attributed through sequence numbers (below).
    return [o for o in ops if o.scopes]


@pytest.mark.parametrize("impl", sorted(EXPECTED))
def test_every_attention_op_in_exactly_one_phase_of_its_layer(builtin_logdir: Path, impl: str) -> None:
    ops, _ = _ops(builtin_logdir, impl)
    attention = [o for o in _forward(ops) if o.name in ATTENTION_OPS]
    assert attention
    for op in attention:
        blocks = [s for s in op.scopes if s.is_block]
        phases = [s for s in op.scopes if s.phase is not None]
        assert len(blocks) == 1 and len(phases) == 1, (op.name, op.scopes)
        assert phases[0].layer == blocks[0].layer


@pytest.mark.parametrize("impl", sorted(EXPECTED))
def test_op_counts_per_layer_and_phase(builtin_logdir: Path, impl: str) -> None:
    ops, scopes = _ops(builtin_logdir, impl)
    counts = Counter((o.phase_scope.layer, o.phase_scope.phase, o.name) for o in _forward(ops) if o.phase_scope)
    for layer in LAYERS:
        for (phase, name), per_forward in EXPECTED[impl].items():
            assert counts[(layer, phase, name)] == per_forward * ACTIVE_STEPS, (layer, phase, name)
        assert scope_counts(scopes)[format_scope(layer)] == ACTIVE_STEPS


def test_attention_ops_never_outside_a_block(builtin_logdir: Path) -> None:
    for impl in EXPECTED:
        ops, _ = _ops(builtin_logdir, impl)
        stray = {o.name for o in ops if not o.scopes and not o.backward
                 and o.name in {"aten::softmax", "aten::masked_fill", "aten::scaled_dot_product_attention"}}
        assert not stray, (impl, stray)


def test_out_of_place_mask_copies_and_inplace_does_not(builtin_logdir: Path) -> None:
    def copies(run: str) -> int:
        ops, _ = _ops(builtin_logdir, run)
        in_mask = [o for o in _forward(ops) if o.phase_scope and o.phase_scope.phase == "mask"]
        return sum(1 for o in in_mask if o.name == "aten::clone")

    assert copies("naive") == TINY.layers * ACTIVE_STEPS
    assert copies("naive-inplace") == 0


def test_backward_ops_map_to_their_forward_layer_through_sequence_numbers(builtin_logdir: Path) -> None:
    for run, backward_name, phase in (
        ("naive", "SoftmaxBackward0", "softmax"),
        ("sdpa", "ScaledDotProductFlashAttentionForCpuBackward0", "sdpa"),
    ):
        ops, _ = _ops(builtin_logdir, run)
        forward_by_seq: dict[int, Op] = {}
        for o in ops:
            seq = o.args.get("Sequence number")
            if seq is not None and o.scopes and o.phase_scope is not None:
                forward_by_seq.setdefault(seq, o)
        hits = Counter()
        for o in ops:
            if o.name == backward_name:
                fwd = forward_by_seq[o.args["Sequence number"]]
                assert fwd.phase_scope is not None and fwd.phase_scope.phase == phase
                hits[fwd.phase_scope.layer] += 1
        assert hits == {layer: ACTIVE_STEPS for layer in LAYERS}, (run, hits)


def test_per_head_mode_gives_a_scope_per_head(builtin_logdir: Path) -> None:
    for run in ("naive-per-head", "sdpa-per-head"):
        ops, scopes = _ops(builtin_logdir, run)
        names = scope_counts(scopes)
        for layer in LAYERS:
            for head in range(TINY.heads):
                assert names[format_scope(layer, head=head)] == ACTIVE_STEPS
        core = "softmax" if run.startswith("naive") else "sdpa"
        per_head = Counter((o.phase_scope.layer, o.phase_scope.head) for o in _forward(ops)
                           if o.phase_scope and o.phase_scope.phase == core
                           and o.name in {"aten::softmax", "aten::scaled_dot_product_attention"})
        assert per_head == {(layer, h): ACTIVE_STEPS for layer in LAYERS for h in range(TINY.heads)}


def test_gqa_expands_kv_heads_in_its_own_phase(builtin_logdir: Path) -> None:
    ops, _ = _ops(builtin_logdir, "naive-gqa")
    expand = Counter(o.phase_scope.layer for o in _forward(ops)
                     if o.phase_scope and o.phase_scope.phase == "kv_expand" and o.name == "aten::repeat_interleave")
    assert expand == {layer: 2 * ACTIVE_STEPS for layer in LAYERS}  # k and v


def test_dropout_phase_only_when_active(builtin_logdir: Path) -> None:
    with_dropout, _ = _ops(builtin_logdir, "naive-dropout")
    without, _ = _ops(builtin_logdir, "naive")
    assert any(o.phase_scope and o.phase_scope.phase == "dropout" for o in with_dropout)
    assert not any(o.phase_scope and o.phase_scope.phase == "dropout" for o in without)


def test_inference_mode_has_no_backward(builtin_logdir: Path) -> None:
    ops, _ = _ops(builtin_logdir, "naive-inference")
    assert not any(o.name.startswith("autograd::engine") for o in ops)
    assert Counter(o.phase_scope.layer for o in ops if o.phase_scope and o.name == "aten::softmax") == {
        layer: ACTIVE_STEPS for layer in LAYERS}


def test_trace_files_carry_shapes_and_memory(builtin_logdir: Path) -> None:
    trace = load_trace(trace_files(builtin_logdir / "naive")[0])
    assert trace["record_shapes"] and trace["profile_memory"]
    assert any(e.get("name") == "[memory]" for e in trace["traceEvents"])
    assert any("Input Dims" in e.get("args", {}) for e in trace["traceEvents"])


@pytest.mark.parametrize("impl", ["sdpa-efficient", "sdpa-cudnn"])
def test_unsupported_backends_are_recorded_not_crashed(builtin_logdir: Path, impl: str) -> None:
    run_dir = builtin_logdir / impl
    assert trace_files(run_dir) == []
    meta = json.loads((run_dir / METADATA_FILE).read_text())
    assert meta["status"] == "unsupported"
    assert "No viable backend" in meta["error"]
