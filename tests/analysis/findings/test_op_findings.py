"""``analysis.op_findings``: the rules on op patterns inside attention (scores copied before masking, a
mask's or bias's copy, a causal mask rebuilt per call, SDPA's math backend and why, nn.MHA's unfused
fast path, FP32 matmuls under half inputs, ``_safe_softmax``). Each rule runs on a ``RuleQuery`` over a
tiny hand-written scoped trace, with shapes and times chosen so that every figure is worked by hand."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tb_attn_plugin.analysis.attribution.analyze import analyze
from tb_attn_plugin.analysis.attribution.query import RuleQuery
from tb_attn_plugin.analysis.findings import op_findings
from tb_attn_plugin.analysis.findings.op_findings import MIN_COPY_ELEMS, OP_RULES
from tb_attn_plugin.analysis.summary import summarize_analysis
from tb_attn_plugin.trace.decode import decode_bytes
from tb_attn_plugin.types.schema import Finding

CPU = {"pid": 1, "tid": 1}
SCORES = [2, 4, 16, 16]  # (B, H, Sq, Sk): 2048 elements, 8 KiB in fp32
QK = [[8, 16, 16], [8, 16, 16]]
SDPA = "aten::scaled_dot_product_attention"
MATH = "aten::_scaled_dot_product_attention_math"
MHA = "aten::_native_multi_head_attention"
Event = dict[str, Any]


def _x(cat: str, name: str, ts: float, dur: float, dims: list[Any] | None = None, types: list[str] | None = None,
       concrete: list[str] | None = None, **args: Any) -> Event:
    if dims is not None:
        args |= {"Input Dims": dims, "Input type": types or ["float"] * len(dims),
                 "Concrete Inputs": concrete or [""] * len(dims)}
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, **CPU, "args": args}


def _scope(name: str, ts: float, dur: float) -> Event:
    return _x("user_annotation", f"tbattn.v1/L0{name}", ts, dur)


def _op(name: str, ts: float, dur: float, dims: list[Any] | None = None, types: list[str] | None = None,
        concrete: list[str] | None = None, **args: Any) -> Event:
    return _x("cpu_op", name, ts, dur, dims, types, concrete, **args)


def _unfused(t0: float, mask: list[Event], *, mask_before_qk: bool = False) -> list[Event]:
    """One step of one hand-written block: q·kᵀ, then the mask phase holding ``mask`` (times relative to
    the phase's start at t0 + 100), softmax and attn·v; or the mask phase first."""
    qk = [_scope("/qk_matmul", t0 + 20, 50), _op("aten::bmm", t0 + 21, 40, QK)]
    if mask_before_qk:
        qk = [_scope("/qk_matmul", t0 + 320, 30), _op("aten::bmm", t0 + 321, 20, QK)]
    return [_x("user_annotation", f"ProfilerStep#{int(t0 // 1000) + 1}", t0, 1000), _scope("", t0 + 10, 500),
            *qk, _scope("/mask", t0 + 100, 200), *[{**e, "ts": e["ts"] + t0 + 100} for e in mask],
            _scope("/softmax", t0 + 360, 50), _op("aten::_softmax", t0 + 361, 40, [SCORES, [], []]),
            _scope("/av_matmul", t0 + 420, 50), _op("aten::bmm", t0 + 421, 40, QK)]


def _query(events: list[Event], meta: dict[str, object] | None = None, **header: Any) -> RuleQuery:
    analysis = analyze(decode_bytes(json.dumps({"traceEvents": events, **header}).encode()))
    return RuleQuery(analysis.events, analysis.attr, summarize_analysis(analysis), meta or {})


def _rule(name: str, events: list[Event], meta: dict[str, object] | None = None, **header: Any) -> list[Finding]:
    return getattr(op_findings, name)(_query(events, meta, **header))


#: An out-of-place masked_fill of the fp32 scores: its clone copies them (times from the mask phase's start).
MASKED_FILL = [_op("aten::masked_fill", 1, 190, [SCORES, [16, 16], []], ["float", "bool", "Scalar"]),
               _op("aten::clone", 5, 100, [SCORES, []], ["float", "Scalar"]),
               _op("aten::copy_", 10, 80, [SCORES, SCORES, []])]


def test_every_rule_is_registered() -> None:
    assert [r.__name__ for r in OP_RULES] == ["_hidden_copy", "_mask_rebuilt", "_math_fallback", "_mha_unfused",
                                             "_fp32_upcast", "_safe_softmax"]


# -- hidden-copy -----------------------------------------------------------------------------------

def test_a_copy_of_the_scores_in_the_mask_phase_is_a_hidden_copy() -> None:
    """Two steps with one masked_fill each: its clone (the outermost copy: copy_ is inside it) copies
    2·4·16·16 = 2048 fp32 scores, 8 KiB, once per forward; 100 µs of CPU per step."""
    (f,) = _rule("_hidden_copy", _unfused(0, MASKED_FILL) + _unfused(1000, MASKED_FILL))
    assert (f.id, f.severity, f.evidence.layers) == ("hidden-copy", "medium", [0])
    assert f.evidence.details == {"copied": "scores", "copies_per_forward": 1, "memcpy_dtod_per_forward": 0,
                                  "copy_bytes_per_step": 2 * 4 * 16 * 16 * 4}
    assert f.evidence.bytes == 8192 and f.evidence.time_us == 100
    assert f.evidence.ops == ["aten::masked_fill", "aten::clone"]  # the caller (190 µs) before the copy (100 µs)
    assert ("aten::masked_fill copies the (2, 4, 16, 16) scores before masking them: 1 copy per forward, 8.0 KiB "
            "each (8.0 KiB per step; 100.0 µs per step)") in f.explanation


def test_small_copies_and_conversions_are_not_hidden_copies() -> None:
    """A copy of fewer than 256 elements (a scalar, a small mask), and a copy inside a dtype conversion."""
    assert MIN_COPY_ELEMS == 256
    small = [_op("aten::clone", 5, 100, [[15, 17]])]  # 255 elements
    assert _rule("_hidden_copy", _unfused(0, small)) == []
    just = [_op("aten::clone", 5, 100, [[16, 16]])]  # 256 elements, after q·kᵀ: scores
    assert _rule("_hidden_copy", _unfused(0, just))[0].evidence.details["copied"] == "scores"
    converted = [_op("aten::to", 1, 190, [SCORES, []]), _op("aten::_to_copy", 5, 150, [SCORES, []]),
                 _op("aten::copy_", 10, 100, [SCORES, SCORES, []])]
    assert _rule("_hidden_copy", _unfused(0, converted)) == []


def test_a_copy_with_no_shapes_recorded_is_taken() -> None:
    """Without ``record_shapes`` the size is unknown: the copy counts, with no bytes and no shape."""
    (f,) = _rule("_hidden_copy", _unfused(0, [_op("aten::masked_fill", 1, 190), _op("aten::clone", 5, 100)]))
    assert f.evidence.details["copied"] == "scores" and f.evidence.bytes == 0
    assert "copies the scores before masking them: 1 copy per forward (0 B per step;" in f.explanation


def test_a_copy_before_the_scores_exist_is_the_masks() -> None:
    """The mask phase runs before q·kᵀ: its copy of a (1, 1, 16, 16) bool mask (256 bytes) is of the
    core's input, a low finding named for the mask."""
    mask = [_op("aten::clone", 5, 60, [[1, 1, 16, 16], []], ["bool", "Scalar"])]
    (f,) = _rule("_hidden_copy", _unfused(0, mask, mask_before_qk=True))
    assert (f.severity, f.title) == ("low", "The attention mask is copied before the core")
    assert f.evidence.details == {"copied": "mask", "copies_per_forward": 1, "memcpy_dtod_per_forward": 0,
                                  "copy_bytes_per_step": 256}
    assert "aten::clone copies the (1, 1, 16, 16) attention mask before the attention core reads it" in f.explanation
    assert f.evidence.time_us == 60


def test_a_copy_of_int8_dequantized_scores_is_of_the_scores() -> None:
    """int8-qk: q·kᵀ in integers, the scores dequantized to fp32, then masked out of place. The scores
    exist from q·kᵀ on, so the mask phase's clone copies them (a medium finding), dequantization between
    them or not."""
    events = _unfused(0, MASKED_FILL)
    deq = [_scope("/dequantize", 75, 20), _op("aten::mul", 76, 15, [SCORES, [2, 4, 16, 1]])]
    (f,) = _rule("_hidden_copy", events[:4] + deq + events[4:])
    assert (f.severity, f.evidence.details["copied"]) == ("medium", "scores")
    assert f.evidence.bytes == 2 * 4 * 16 * 16 * 4


def test_a_copy_of_a_position_bias_is_named_for_the_bias() -> None:
    """T5's bias: an embedding indexed by a 2-D (query, key) table of buckets, then a contiguous copy
    of the (1, H, Sq, Sk) bias, all before q·kᵀ."""
    bias = [_op("aten::embedding", 1, 20, [[32, 4], [16, 16]], ["float", "long int"]),
            _op("aten::clone", 30, 60, [[1, 4, 16, 16], []], ["float", "Scalar"])]
    (f,) = _rule("_hidden_copy", _unfused(0, bias, mask_before_qk=True))
    assert f.title == "The relative position bias is copied before the core"
    assert f.evidence.details["copied"] == "position_bias" and f.evidence.bytes == 1 * 4 * 16 * 16 * 4
    assert "Build the bias once per forward" in f.suggestion


def test_a_device_to_device_copy_in_the_mask_phase_counts_on_a_gpu() -> None:
    """A GPU trace whose mask phase launches a Memcpy DtoD and no copy op: the device's copy is the evidence."""
    events = _unfused(0, [_op("aten::masked_fill", 1, 190, [SCORES, [16, 16], []], ["float", "bool", "Scalar"]),
                          _x("cuda_runtime", "cudaMemcpyAsync", 20, 5, correlation=7)])
    events.append({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD (Device -> Device)", "ts": 150, "dur": 12,
                   "pid": 0, "tid": 7, "args": {"correlation": 7, "device": 0, "stream": 7}})
    events += [_x("cuda_runtime", "cudaLaunchKernel", 30, 5, correlation=8),
               {"ph": "X", "cat": "kernel", "name": "gemm", "ts": 60, "dur": 10, "pid": 0, "tid": 7,
                "args": {"correlation": 8, "device": 0, "stream": 7}}]
    (f,) = _rule("_hidden_copy", events)
    assert f.evidence.details["memcpy_dtod_per_forward"] == 1 and f.evidence.details["copies_per_forward"] == 0
    assert f.evidence.time_us == 12  # the device's 12 µs copy, one step
    assert "In the mask phase of layer 0, the device runs 1 Memcpy DtoD per forward (12.0 µs per step)." \
        in f.explanation


def test_no_copy_no_hidden_copy() -> None:
    inplace = [_op("aten::masked_fill_", 1, 50, [SCORES, [16, 16], []], ["float", "bool", "Scalar"])]
    assert _rule("_hidden_copy", _unfused(0, inplace)) == []


# -- mask-rebuilt ----------------------------------------------------------------------------------

def test_a_triangle_built_every_forward_is_a_rebuilt_mask() -> None:
    """ones then tril in every step's mask phase: 2 mask-building ops per forward, 10 + 20 µs per step."""
    build = [_op("aten::ones", 1, 10), _op("aten::tril", 20, 20)]
    (f,) = _rule("_mask_rebuilt", _unfused(0, build) + _unfused(1000, build))
    assert (f.id, f.severity, f.evidence.layers) == ("mask-rebuilt", "low", [0])
    assert f.evidence.details == {"builder_ops_per_forward": 2, "inside_math_backend": 0}
    assert f.evidence.time_us == 30 and f.evidence.ops == ["aten::tril", "aten::ones"]  # 20 µs before 10 µs
    assert "2 mask-building ops per forward (aten::tril, aten::ones; 30.0 µs per step)" in f.explanation
    assert "register_buffer" in f.suggestion


def test_a_triangle_in_every_other_forward_is_not_every_forward() -> None:
    build = [_op("aten::tril", 20, 20)]
    assert _rule("_mask_rebuilt", _unfused(0, build) + _unfused(1000, [])) == []  # 0.5 per forward


def test_positions_compared_are_a_causal_mask_built_by_hand() -> None:
    """arange and a comparison (arange(S)[:, None] >= arange(S)) build it; arange alone builds nothing."""
    by_hand = [_op("aten::arange", 1, 5), _op("aten::arange", 10, 5), _op("aten::ge", 20, 8)]
    (f,) = _rule("_mask_rebuilt", _unfused(0, by_hand))
    assert f.evidence.details["builder_ops_per_forward"] == 3
    assert _rule("_mask_rebuilt", _unfused(0, by_hand[:2])) == []


def test_bucketing_relative_positions_for_a_bias_builds_no_mask() -> None:
    """T5's compute_bias: arange and lt pick the buckets that an embedding then looks up."""
    bias = [_op("aten::arange", 1, 5), _op("aten::lt", 10, 5),
            _op("aten::embedding", 20, 20, [[32, 4], [16, 16]], ["float", "long int"])]
    assert _rule("_mask_rebuilt", _unfused(0, bias, mask_before_qk=True)) == []


def test_a_mask_built_inside_the_math_backend_says_so() -> None:
    """SDPA's math backend with is_causal builds ones and tril on every call."""
    events = [_x("user_annotation", "ProfilerStep#1", 0, 1000), _scope("", 10, 500), _scope("/sdpa", 20, 400),
              _op(SDPA, 21, 390), _op(MATH, 25, 380), _op("aten::ones", 30, 10), _op("aten::tril", 45, 10),
              _op("aten::bmm", 60, 50, QK), _op("aten::_safe_softmax", 120, 30, [SCORES, [], []]),
              _op("aten::bmm", 160, 50, QK)]
    (f,) = _rule("_mask_rebuilt", events)
    assert f.evidence.details == {"builder_ops_per_forward": 2, "inside_math_backend": 1}
    assert "They run inside aten::_scaled_dot_product_attention_math" in f.explanation


# -- math-fallback ---------------------------------------------------------------------------------

def _math_step(t0: float, concrete: list[str] | None = None, q: list[int] | None = None) -> list[Event]:
    """One block whose SDPA call ran the math backend: the math op (300 µs) and its 3 ops."""
    q = q or [2, 4, 16, 8]
    return [_x("user_annotation", f"ProfilerStep#{int(t0 // 1000) + 1}", t0, 1000), _scope("", t0 + 10, 500),
            _scope("/sdpa", t0 + 20, 400),
            _op(SDPA, t0 + 21, 390, [q, q, q, [], [], [], [], []], ["float"] * 3 + ["", "Scalar", "Scalar", "", ""],
                concrete or ["", "", "", "", "0.", "False", "", "False"]),
            _op(MATH, t0 + 25, 300), _op("aten::bmm", t0 + 30, 50, QK),
            _op("aten::_safe_softmax", t0 + 90, 30, [SCORES, [], []]), _op("aten::bmm", t0 + 130, 50, QK)]


def test_the_math_backend_is_a_high_finding_with_its_op_count() -> None:
    """The math op and its 3 ops: 4 CPU ops per forward, 300 µs each step; on the CPU, with dropout 0,
    4-D inputs and one head dimension, the trace shows no cause."""
    (f,) = _rule("_math_fallback", _math_step(0) + _math_step(1000))
    assert (f.id, f.severity, f.evidence.layers) == ("math-fallback", "high", [0])
    assert f.evidence.details == {"ops_per_forward": 4, "kernels_per_forward": 0, "cpu_us_per_forward": 300,
                                  "causes": ""}
    assert f.evidence.time_us == 300
    assert f"SDPA ran its math backend ({MATH}): 4 CPU ops per forward where a fused backend" in f.explanation
    assert "The trace shows none of the causes it can show" in f.explanation


def test_dropout_on_the_cpu_is_the_cause_given() -> None:
    (f,) = _rule("_math_fallback", _math_step(0, ["", "", "", "", "0.1", "False", "", "False"]))
    assert f.evidence.details["causes"] == "dropout"
    assert "Why, in this trace: dropout_p 0.1 (training): the CPU flash kernel takes no dropout." in f.explanation
    assert f.suggestion.startswith("On CPU only the math backend applies attention dropout")  # capitalized


def test_a_pinned_math_backend_and_3d_inputs_are_both_causes() -> None:
    (f,) = _rule("_math_fallback", _math_step(0, q=[8, 16, 8]), meta={"impl": "sdpa-math"})
    assert f.evidence.details["causes"] == "pinned, rank"
    assert "the run pinned the math backend (impl sdpa-math); 3-D inputs" in f.explanation


def test_no_math_backend_no_fallback() -> None:
    assert _rule("_math_fallback", _unfused(0, [])) == []


@pytest.mark.parametrize(("concrete", "k", "expected"), [
    (("", "", "0.25"), 2, 0.25),
    (("", "", "0."), 2, 0.0),
    (("", "", ""), 2, None),  # not recorded
    (("", "", "p"), 2, None),  # not a number
    (("0.5",), 4, None),  # past the recorded inputs
])
def test_a_concrete_number_is_read_or_none(concrete: tuple[str, ...], k: int, expected: float | None) -> None:
    assert op_findings._number(concrete, k) == expected


@pytest.mark.parametrize(("concrete", "k", "expected"), [
    (("True",), 0, True), (("False",), 0, False), (("true",), 0, None), (("1",), 0, None), (("",), 0, None),
    (("True",), 1, None),
])
def test_a_concrete_flag_is_pythons_spelling_or_none(concrete: tuple[str, ...], k: int, expected: bool | None) -> None:
    assert op_findings._flag(concrete, k) is expected


# -- mha-unfused -----------------------------------------------------------------------------------

def _mha_step(need_weights: str, children: list[Event]) -> list[Event]:
    concrete = [""] * 10 + [need_weights, "True", ""]
    return [_x("user_annotation", "ProfilerStep#1", 0, 1000), _scope("", 10, 500),
            _op(MHA, 20, 400, [[2, 16, 32]] * 3 + [[]] * 10, ["float"] * 3 + ["Scalar"] * 10, concrete), *children]


UNFUSED_CORE = [_op("aten::bmm", 30, 50, QK), _op("aten::_softmax", 90, 30, [SCORES, [], []]),
                _op("aten::bmm", 130, 50, QK)]


def test_nn_mha_returning_its_weights_runs_unfused() -> None:
    (f,) = _rule("_mha_unfused", _mha_step("True", UNFUSED_CORE))
    assert (f.id, f.severity) == ("mha-unfused", "medium")
    assert f.evidence.details == {"calls_per_forward": 1, "need_weights": 1}
    assert f.evidence.time_us == 400  # the fast path's CPU time, one step
    assert "computed attention by hand inside it (aten::bmm, aten::_softmax, aten::bmm)" in f.explanation
    assert "need_weights=True (the module's default)" in f.explanation


def test_nn_mha_without_weights_on_the_cpu_is_unfused_all_the_same() -> None:
    (f,) = _rule("_mha_unfused", _mha_step("False", UNFUSED_CORE))
    assert f.evidence.details["need_weights"] == 0
    assert "on the CPU this path never calls a fused kernel" in f.explanation


def test_nn_mha_calling_sdpa_is_fused() -> None:
    assert _rule("_mha_unfused", _mha_step("False", [_op(SDPA, 30, 200)])) == []


# -- fp32-upcast -----------------------------------------------------------------------------------

def test_fp32_matmuls_under_a_bf16_model_are_an_upcast() -> None:
    """The run is bf16 (metadata); q·kᵀ and attn·v take float32, and a copy_ upcasts a (2, 4, 16, 16)
    bf16 tensor to fp32: 2048 · 4 = 8 KiB per step. On the CPU: medium."""
    upcast = [_op("aten::copy_", 5, 30, [SCORES, SCORES, []], ["float", "c10::BFloat16", "Scalar"])]
    (f,) = _rule("_fp32_upcast", _unfused(0, upcast), meta={"dtype": "torch.bfloat16"})
    assert (f.id, f.severity) == ("fp32-upcast", "medium")
    assert f.title == "Attention matmuls run in FP32 under bfloat16 inputs"
    assert f.evidence.details == {"model_dtype": "bfloat16", "dtype_source": "the run metadata",
                                  "fp32_matmuls_per_forward": 2, "sgemm_kernels_per_forward": 0,
                                  "upcasts_per_forward": 1, "inside_math_backend": 0}
    assert f.evidence.bytes == 2 * 4 * 16 * 16 * 4 and f.evidence.time_us == 80  # two 40 µs bmm
    assert "float32 inputs go into 2 matmuls per forward (aten::bmm, 80.0 µs per step)" in f.explanation
    assert "1 copy per forward upcast bfloat16 tensors to float32 (8.0 KiB per step)" in f.explanation


def test_fp32_matmuls_in_an_fp32_model_are_no_upcast() -> None:
    assert _rule("_fp32_upcast", _unfused(0, []), meta={"dtype": "float32"}) == []
    assert _rule("_fp32_upcast", _unfused(0, [])) == []  # nothing says the model's dtype is a half one


def test_the_model_dtype_from_the_projections_when_nothing_else_says() -> None:
    """A bf16 linear before the core and fp32 matmuls in it: the projections say the model is bf16."""
    events = _unfused(0, [])
    events.insert(2, _op("aten::linear", 12, 6, [[2, 16, 32], [96, 32]], ["c10::BFloat16", "c10::BFloat16"]))
    (f,) = _rule("_fp32_upcast", events)
    assert f.evidence.details["dtype_source"] == "its projections"


def _two_models(b_linear: list[str] | None) -> list[Event]:
    """Model ``a``'s layer runs SDPA on bf16 inputs; model ``b``'s layer computes attention by hand in
    float32 (two 40 µs bmm), after a projection of ``b_linear`` inputs where given."""
    def scope(layer: int, name: str, ts: float, dur: float) -> Event:
        return _x("user_annotation", f"tbattn.v1/L{layer}{name}", ts, dur)
    bf16 = ["c10::BFloat16"] * 3
    events = [_x("user_annotation", "ProfilerStep#1", 0, 1000), scope(0, " a.layers.0.attn", 10, 200),
              scope(0, "/sdpa", 20, 100), _op(SDPA, 21, 90, [SCORES] * 3, bf16),
              scope(1, " b.layers.0.attn", 300, 500),
              scope(1, "/qk_matmul", 320, 50), _op("aten::bmm", 321, 40, QK),
              scope(1, "/softmax", 380, 50), _op("aten::_softmax", 381, 40, [SCORES, [], []]),
              scope(1, "/av_matmul", 440, 50), _op("aten::bmm", 441, 40, QK)]
    if b_linear:
        events[4:4] = [scope(1, "/qkv_proj", 305, 10), _op("aten::linear", 306, 8, [[2, 16, 32], [96, 32]], b_linear)]
    return events


def test_a_models_matmuls_are_judged_by_its_own_dtype() -> None:
    """A pipeline's bf16 model beside an fp32 one: the fp32 model's matmuls are its own precision, not
    an upcast from the other model's bf16."""
    assert _rule("_fp32_upcast", _two_models(None)) == []
    (f,) = _rule("_fp32_upcast", _two_models(["c10::BFloat16", "c10::BFloat16"]))
    assert f.evidence.layers == [1] and f.evidence.details["model"] == "b"
    assert f.evidence.details["dtype_source"] == "its projections"
    assert f.explanation.startswith("The model b runs in bfloat16 (from its projections), but in layer 1 float32 "
                                    "inputs go into 2 matmuls per forward (aten::bmm, 80.0 µs per step).")


# -- safe-softmax ----------------------------------------------------------------------------------

def test_safe_softmax_outside_flex_is_low() -> None:
    events = _unfused(0, []) + _unfused(1000, [])
    for e in events:
        if e["name"] == "aten::_softmax":
            e["name"] = "aten::_safe_softmax"
    (f,) = _rule("_safe_softmax", events)
    assert (f.id, f.severity, f.evidence.details) == ("safe-softmax", "low", {"calls_per_forward": 1})
    assert f.evidence.time_us == 40  # one 40 µs call per step
    assert "attention uses aten::_safe_softmax, 1 call per forward (40.0 µs per step)" in f.explanation


def test_safe_softmax_inside_eager_flex_is_flexs_own() -> None:
    events = [_x("user_annotation", "ProfilerStep#1", 0, 1000), _scope("", 10, 500), _scope("/flex", 20, 400),
              _op("aten::_safe_softmax", 30, 40, [SCORES, [], []])]
    assert _rule("_safe_softmax", events) == []


def test_no_attention_no_op_findings() -> None:
    """A trace whose one op lies outside every block: no rule has anything to read."""
    events = [_x("user_annotation", "ProfilerStep#1", 0, 1000), _scope("", 10, 100),
              _op("aten::_safe_softmax", 200, 40), _op("aten::tril", 300, 10), _op(MATH, 400, 10)]
    t = _query(events)
    assert [f for rule in OP_RULES for f in rule(t)] == []
