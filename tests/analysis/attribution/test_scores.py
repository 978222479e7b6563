"""Materialized S×S scores (analysis/attribution/scores.py): the sizes a layer's score tensor can have, worked
from its ops' shapes by hand (B·H·Sq·Sk elements times the element size, and the mask sizes beside
them), CUDA's allocator rounding, and which allocations of a tiny hand-written trace are scores,
masks or neither by the ops they are made under. ``test_score_sizes.py`` checks the summary's
figures; these tests call the module's own functions."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from tb_attn_plugin.analysis.attribution.attribute import Attribution, attribute
from tb_attn_plugin.analysis.attribution.scores import (
    SCORE_ALLOC_PHASES,
    ScoreSizes,
    allocator_sizes,
    score_allocs,
    sxs_sizes,
)
from tb_attn_plugin.trace.decode import decode_bytes
from tb_attn_plugin.trace.events import Events
from tb_attn_plugin.vocab.scopes import OTHER

MIB = 1 << 20
# Softmax over fp32 scores (2, 4, 16, 16): 2048 elements, 8192 bytes.
SOFTMAX = {"Input Dims": [[2, 4, 16, 16], [], []], "Input type": ["float", "Scalar", ""]}
SCORE = 2 * 4 * 16 * 16 * 4


def _x(name: str, ts: float, dur: float, cat: str = "cpu_op", **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": 1, "args": args}


def _mem(ts: float, nbytes: int, device: int = 0) -> dict[str, Any]:
    return {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": ts,
            "args": {"Bytes": nbytes, "Total Allocated": max(nbytes, 0), "Total Reserved": max(nbytes, 0), "Addr": 1,
                     "Device Type": device, "Device Id": 0 if device else -1}}


def _attributed(inner: list[dict[str, Any]], phase: str = "softmax") -> tuple[Events, Attribution]:
    """Layer 0 in one step, its ``phase`` scope holding ``inner`` (ops and memory events, ts 10 to 990)."""
    events = [_x("ProfilerStep#1", 0, 1000, "user_annotation"), _x("tbattn.v1/L0", 1, 998, "user_annotation"),
              _x(f"tbattn.v1/L0/{phase}", 2, 996, "user_annotation"), *inner]
    ev = decode_bytes(json.dumps({"traceEvents": events}).encode())
    return ev, attribute(ev)


def _sizes(inner: list[dict[str, Any]], phase: str = "softmax") -> ScoreSizes:
    ev, a = _attributed(inner, phase)
    return sxs_sizes(ev, a, np.flatnonzero((a.layer == 0) & ~a.backward))


def _verdicts(inner: list[dict[str, Any]]) -> list[tuple[int, bool, bool]]:
    """(bytes, score, mask) of each memory event in order, with the sizes of the layer's own ops."""
    ev, a = _attributed(inner)
    sizes = sxs_sizes(ev, a, np.flatnonzero((a.layer == 0) & ~a.backward))
    score, mask = score_allocs(ev, a, np.arange(len(ev.mem_ts)), sizes)
    return list(zip(ev.mem_bytes.tolist(), score.tolist(), mask.tolist(), strict=True))


# -- allocator_sizes ------------------------------------------------------------------------------

@pytest.mark.parametrize(("sizes", "recorded"), [
    ({1000}, {1000, 1024}),  # up to 2 · 512
    ({512}, {512}),  # already a multiple of 512
    ({MIB}, {MIB}),  # 1 MiB is not over 1 MiB: no 2 MiB rounding
    ({MIB + 1}, {MIB + 1, MIB + 512, 2 * MIB}),  # over 1 MiB: to 512 B and to 2 MiB
    # 1.728 GB is 3,375,000 · 512 B exactly, and 823.97 · 2 MiB: up to 824 of them
    ({1_728_000_000}, {1_728_000_000, 824 * 2 * MIB}),
    ({1, 513}, {1, 512, 513, 1024}),
    (set(), set()),
])
def test_allocator_sizes_round_as_cudas_caching_allocator(sizes: set[int], recorded: set[int]) -> None:
    assert allocator_sizes(frozenset(sizes)) == frozenset(recorded)


# -- sxs_sizes ------------------------------------------------------------------------------------

def test_softmax_shape_gives_the_score_and_mask_sizes() -> None:
    s = _sizes([_x("aten::softmax", 10, 10, **SOFTMAX)])
    # 2048 fp32 elements: 8192 B as they are, and 8192 B upcast to fp32 (the same here).
    assert s.scores == {SCORE} and s.tensor_bytes == SCORE and s.shape == (2, 4, 16, 16)
    assert s.bool_masks == {2048}  # one byte per element
    # (Sq, Sk) = 256, (B, Sq, Sk) = 512 and (B, H, Sq, Sk) = 2048 elements, at 1 and 4 bytes each.
    assert s.masks == {256, 1024, 512, 2048, 8192}


def test_an_sdpa_call_gives_its_scores_shape_from_q_and_k() -> None:
    # q (2, 4, 16, 8) and k (2, 4, 32, 8) in fp16: scores (2, 4, 16, 32), 4096 elements.
    sdpa = {"Input Dims": [[2, 4, 16, 8], [2, 4, 32, 8], [2, 4, 32, 8]],
            "Input type": ["c10::Half", "c10::Half", "c10::Half"]}
    s = _sizes([_x("aten::scaled_dot_product_attention", 10, 10, **sdpa)], phase="sdpa")
    assert s.shape == (2, 4, 16, 32) and s.tensor_bytes == 4096 * 2
    assert s.scores == {4096 * 2, 4096 * 4}  # fp16, and fp32 for an upcast softmax
    assert s.bool_masks == {4096}
    # 512, 1024 and 4096 elements at 1, 2 and 4 bytes.
    assert s.masks == {512, 1024, 2048, 4096, 8192, 16384}


def test_a_matmul_is_a_score_only_in_the_qk_phase() -> None:
    # q (2, 4, 16, 8) @ kᵀ (2, 4, 8, 16): (2, 4, 16, 16) fp32 scores.
    mm = {"Input Dims": [[2, 4, 16, 8], [2, 4, 8, 16]], "Input type": ["float", "float"]}
    qk = _sizes([_x("aten::matmul", 10, 10, **mm)], phase="qk_matmul")
    assert qk.scores == {SCORE} and qk.shape == (2, 4, 16, 16)
    # probs @ v has the same kind of shape, but its output is (Sq, D): no scores.
    assert _sizes([_x("aten::matmul", 10, 10, **mm)], phase="av_matmul") == ScoreSizes()


def test_the_largest_score_tensor_is_the_one_reported() -> None:
    small = {"Input Dims": [[1, 1, 16, 16], []], "Input type": ["float", "Scalar"]}  # 1024 B
    s = _sizes([_x("aten::softmax", 10, 5, **small), _x("aten::softmax", 20, 5, **SOFTMAX)])
    assert s.tensor_bytes == SCORE and s.shape == (2, 4, 16, 16) and s.scores == {1024, SCORE}


@pytest.mark.parametrize("args", [
    {},  # no shapes recorded
    {"Input Dims": [[1, 1, 15, 17], []], "Input type": ["float", "Scalar"]},  # 255 elements: too small to mean scores
    {"Input Dims": [[16, 16], []], "Input type": ["float", "Scalar"]},  # not (B, H, Sq, Sk)
    {"Input Dims": [[2**40, 2**40, 16, 16], []], "Input type": ["float", "Scalar"]},  # past any tensor: ignored
    {"Input Dims": [[2, -4, 16, 16], []], "Input type": ["float", "Scalar"]},  # a negative size: ignored
])
def test_shapes_that_tell_no_scores_give_no_sizes(args: dict[str, Any]) -> None:
    assert _sizes([_x("aten::softmax", 10, 10, **args)]) == ScoreSizes()


def test_a_score_of_256_elements_counts() -> None:
    s = _sizes([_x("aten::softmax", 10, 10, **{"Input Dims": [[1, 1, 16, 16], []], "Input type": ["c10::BFloat16"]})])
    assert s.scores == {512, 1024} and s.tensor_bytes == 512  # 256 bf16 elements, and their fp32 upcast


def test_score_phases_include_the_blocks_unscoped_work() -> None:
    assert OTHER in SCORE_ALLOC_PHASES and {"softmax", "qk_matmul", "sdpa", "flex"} <= SCORE_ALLOC_PHASES
    assert "av_matmul" not in SCORE_ALLOC_PHASES and "qkv_proj" not in SCORE_ALLOC_PHASES


# -- score_allocs ---------------------------------------------------------------------------------

def test_no_score_sizes_mark_nothing() -> None:
    ev, a = _attributed([_x("aten::softmax", 10, 10), _mem(11, SCORE)])
    score, mask = score_allocs(ev, a, np.arange(len(ev.mem_ts)), ScoreSizes())
    assert score.tolist() == [False] and mask.tolist() == [False]


def test_scores_and_masks_by_the_op_that_allocates_them() -> None:
    got = _verdicts([
        _x("aten::softmax", 10, 10, **SOFTMAX), _mem(11, SCORE),  # the probabilities: scores
        _x("aten::tril", 30, 10), _mem(31, 2048), _mem(32, SCORE),  # a triangle: a mask, at either size
        _x("aten::masked_fill", 50, 10), _mem(51, 1024),  # an (Sq, Sk) fp32 mask applied: a mask
        _x("aten::softmax", 60, 10), _mem(61, 1024),  # the same size under softmax: neither
        _mem(80, -SCORE),  # a free is no allocation
        _x("aten::softmax", 90, 10), _mem(91, SCORE + 512),  # off by the rounding on the CPU: another tensor
    ])
    assert got == [(SCORE, True, False), (2048, False, True), (SCORE, False, True), (1024, False, True),
                   (1024, False, False), (-SCORE, False, False), (SCORE + 512, False, False)]


def test_cuda_allocations_are_matched_through_the_allocators_rounding() -> None:
    # 1000-element softmax scores: 4000 B, recorded by CUDA as 4096; a 1000 B bool mask as 1024.
    shape = {"Input Dims": [[1, 1, 10, 100], []], "Input type": ["float", "Scalar"]}
    got = _verdicts([_x("aten::softmax", 10, 10, **shape), _mem(11, 4096, device=1), _mem(12, 4096, device=0),
                     _x("aten::tril", 30, 10), _mem(31, 1024, device=1)])
    assert got == [(4096, True, False), (4096, False, False), (1024, False, True)]


def test_a_matmuls_copy_of_its_input_is_not_scores() -> None:
    # q·kᵀ's input made contiguous inside matmul (a clone): the size of the scores, but q or kᵀ.
    got = _verdicts([_x("aten::matmul", 10, 30), _x("aten::contiguous", 11, 5), _x("aten::clone", 12, 3),
                     _mem(13, SCORE), _x("aten::bmm", 20, 5), _mem(21, SCORE),
                     _x("aten::softmax", 50, 2, **SOFTMAX)])
    # The clone's allocation is a copy; the GEMM's own output is the scores.
    assert got == [(SCORE, False, False), (SCORE, True, False)]


@pytest.mark.parametrize(("chain", "score"), [
    # a fused kernel's output (and SDPA's copies of its inputs) store no scores...
    (["aten::scaled_dot_product_attention", "aten::_scaled_dot_product_flash_attention_for_cpu"], False),
    (["aten::_flash_attention_forward"], False),
    (["aten::linear"], False),  # a projection's output
    # ...but the math backend's own ops do
    (["aten::scaled_dot_product_attention", "aten::_scaled_dot_product_attention_math", "aten::_safe_softmax"], True),
])
def test_ops_that_store_no_scores(chain: list[str], score: bool) -> None:
    # Each op in the chain encloses the next; the allocation is made by the innermost.
    ops = [_x(name, 10 + k, 50 - 2 * k) for k, name in enumerate(chain)]
    got = _verdicts([_x("aten::softmax", 5, 2, **SOFTMAX), *ops, _mem(10 + len(chain), SCORE)])
    assert got == [(SCORE, score, False)]


@pytest.mark.parametrize(("chain", "nbytes", "score", "mask"), [
    # aten::dropout draws its noise into a new tensor (a mask), then multiplies (the dropped scores)
    (["aten::dropout", "aten::empty_like"], SCORE, False, True),
    (["aten::dropout", "aten::mul"], SCORE, True, False),
    # native_dropout: its output at the scores' size, its bool mask at a byte an element
    (["aten::native_dropout"], SCORE, True, False),
    (["aten::native_dropout"], 2048, False, True),
])
def test_dropout_masks_and_dropped_scores(chain: list[str], nbytes: int, score: bool, mask: bool) -> None:
    ops = [_x(name, 10 + k, 50 - 2 * k) for k, name in enumerate(chain)]
    got = _verdicts([_x("aten::softmax", 5, 2, **SOFTMAX), *ops, _mem(10 + len(chain), nbytes)])
    assert got == [(nbytes, score, mask)]


def test_only_the_memory_events_asked_about_are_judged() -> None:
    ev, a = _attributed([_x("aten::softmax", 10, 10, **SOFTMAX), _mem(11, SCORE), _mem(12, SCORE)])
    sizes = sxs_sizes(ev, a, np.flatnonzero(a.layer == 0))
    score, mask = score_allocs(ev, a, np.array([1]), sizes)
    assert score.tolist() == [True] and mask.tolist() == [False]
    empty = score_allocs(ev, a, np.array([], np.int64), sizes)
    assert empty[0].size == 0 and empty[1].size == 0


# -- where scores exist ------------------------------------------------------------------------------

def _block_verdicts(phases: list[tuple[str, list[dict[str, Any]]]], calls: int = 1) -> list[tuple[bool, bool]]:
    """(score, mask) of each memory event of layer 0, whose block runs these phase scopes in order,
    each 100 µs long with its events 1 µs in, ``calls`` times."""
    events = [_x("ProfilerStep#1", 0, 100_000, "user_annotation")]
    for c in range(calls):
        t0 = c * 10_000
        events.append(_x("tbattn.v1/L0", t0 + 1, 9_000, "user_annotation"))
        for k, (phase, inner) in enumerate(phases):
            at = t0 + 10 + 100 * k
            if phase != "other":
                events.append(_x(f"tbattn.v1/L0/{phase}", at, 90, "user_annotation"))
            events += [{**e, "ts": at + 1 + e["ts"]} for e in inner]
    ev = decode_bytes(json.dumps({"traceEvents": events}).encode())
    a = attribute(ev)
    sizes = sxs_sizes(ev, a, np.flatnonzero((a.layer == 0) & ~a.backward))
    score, mask = score_allocs(ev, a, np.arange(len(ev.mem_ts)), sizes)
    return list(zip(score.tolist(), mask.tolist(), strict=True))


QK = {"Input Dims": [[2, 4, 16, 16], [2, 4, 16, 16]], "Input type": ["float", "float"]}  # D = Sk = 16
NEITHER, SCORES, MASK = (False, False), (True, False), (False, True)


def test_scores_exist_from_q_kt_to_attn_v() -> None:
    """With the head size equal to the key length, q scaled before the core and attn·V's output
    (B, H, Sq, Dv) have the scores' size: only q·kᵀ's output and what follows it up to attn·V are
    scores."""
    got = _block_verdicts([
        ("scale", [_x("aten::mul", 0, 5, **{"Input Dims": [[2, 4, 16, 16], []]}), _mem(1, SCORE)]),
        ("qk_matmul", [_x("aten::matmul", 0, 5, **QK), _mem(1, SCORE)]),
        ("mask", [_x("aten::add", 0, 5), _mem(1, SCORE)]),
        ("softmax", [_x("aten::softmax", 0, 5, **SOFTMAX), _mem(1, SCORE)]),
        ("av_matmul", [_x("aten::matmul", 0, 5, **QK), _mem(1, SCORE)]),
    ])
    assert got == [NEITHER, SCORES, SCORES, SCORES, NEITHER]


def test_a_fused_sdpa_block_has_no_scores_but_its_bias_and_mask() -> None:
    """A fused SDPA call stores no scores. At B = 1 a relative position bias (1, H, Sq, Sk) has the
    scores' size: its lookup (``embedding``) and its copy in the mask phase are a bias, counted as a
    mask; q scaled first (Whisper) and a norm's output are neither."""
    one = 1 * 4 * 16 * 16 * 4
    sdpa = {"Input Dims": [[1, 4, 16, 16]] * 3, "Input type": ["float"] * 3}
    got = _block_verdicts([
        ("other", [_x("aten::pow", 0, 5), _mem(1, one)]),
        ("scale", [_x("aten::mul", 0, 5), _mem(1, one)]),
        ("other", [_x("aten::embedding", 0, 5), _x("aten::index_select", 1, 2), _mem(2, one)]),
        ("mask", [_x("aten::contiguous", 0, 5), _x("aten::clone", 1, 3), _mem(2, one)]),
        ("sdpa", [_x("aten::scaled_dot_product_attention", 0, 50, **sdpa),
                  _x("aten::_scaled_dot_product_flash_attention_for_cpu", 1, 48, **sdpa), _mem(2, one)]),
    ])
    assert got == [NEITHER, NEITHER, MASK, MASK, NEITHER]


def test_the_math_backends_scores_are_its_q_kt_to_its_attn_v() -> None:
    """Inside the math backend q and k are scaled first (the scores' size where D = Sk), then q·kᵀ,
    the safe softmax and attn·V."""
    sdpa = {"Input Dims": [[2, 4, 16, 16]] * 3, "Input type": ["float"] * 3}
    got = _block_verdicts([("sdpa", [
        _x("aten::scaled_dot_product_attention", 0, 80, **sdpa), _x("aten::_scaled_dot_product_attention_math", 1, 78),
        _x("aten::mul", 2, 2), _mem(3, SCORE), _x("aten::mul", 5, 2), _mem(6, SCORE),
        _x("aten::matmul", 10, 5, **QK), _mem(11, SCORE), _x("aten::_safe_softmax", 20, 5), _mem(21, SCORE),
        _x("aten::matmul", 30, 5, **QK), _mem(31, SCORE)])])
    assert got == [NEITHER, NEITHER, SCORES, SCORES, NEITHER]


def test_scores_end_with_their_block_call() -> None:
    """An attn·V that no matmul shows (a kernel tb-attn does not know) leaves the stretch open to the
    call's end: the next call's q, scaled before its q·kᵀ, is no score."""
    got = _block_verdicts([
        ("scale", [_x("aten::mul", 0, 5), _mem(1, SCORE)]),
        ("qk_matmul", [_x("aten::matmul", 0, 5, **QK), _mem(1, SCORE)]),
        ("softmax", [_x("aten::softmax", 0, 5, **SOFTMAX), _mem(1, SCORE)]),
    ], calls=2)
    assert got == [NEITHER, SCORES, SCORES] * 2
