"""``analysis.infer``: attention found in traces without our scopes (``*Attention`` modules, SDPA and
serving ops, matmul -> softmax -> matmul, compiled frames called once per layer), as synthetic block
and phase scopes. ``infer_scopes`` runs on tiny hand-built traces and each op is read back in the
innermost synthetic scope that encloses it, the layer and phase the module docstring's rules give."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from tb_attn_plugin.analysis.attribution.analyze import analyze
from tb_attn_plugin.analysis.attribution.attribute import attribute
from tb_attn_plugin.analysis.attribution.inference import infer
from tb_attn_plugin.analysis.attribution.inference.infer import TOO_MANY_BLOCKS, Inferred, infer_scopes
from tb_attn_plugin.trace.decode import decode_bytes
from tb_attn_plugin.trace.events import Events
from tb_attn_plugin.trace.kineto import Kind

SDPA = "aten::scaled_dot_product_attention"
CPU_FLASH = "aten::_scaled_dot_product_flash_attention_for_cpu"
SCORES = [2, 4, 16, 16]
Q, KT, V = [2, 4, 16, 8], [2, 4, 8, 16], [2, 4, 16, 8]
Event = dict[str, Any]


def _x(cat: str, name: str, ts: float, dur: float, dims: list[Any] | None = None, tid: int = 1) -> Event:
    args = {"Input Dims": dims, "Input type": ["float"] * len(dims), "Concrete Inputs": [""] * len(dims)} \
        if dims is not None else {}
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": tid, "args": args}


def _op(name: str, ts: float, dur: float = 20, dims: list[Any] | None = None, tid: int = 1) -> Event:
    return _x("cpu_op", name, ts, dur, dims, tid)


def _step(n: int, ts: float, dur: float = 1000) -> Event:
    return _x("user_annotation", f"ProfilerStep#{n}", ts, dur)


def _module(name: str, ts: float, dur: float) -> Event:
    return _x("python_function", f"nn.Module: {name}", ts, dur)


def _sdpa_block(t0: float, *, projections: bool = True) -> list[Event]:
    """q/k/v projection, SDPA (calling the CPU flash kernel), output projection."""
    core = [_op(SDPA, t0 + 40, 50), _op(CPU_FLASH, t0 + 41, 48)]
    if not projections:
        return core
    return [_op("aten::linear", t0 + 10, 20, [[2, 16, 32], [96, 32]]), *core,
            _op("aten::linear", t0 + 100, 20, [[2, 16, 32], [32, 32]])]


def _eager_block(t0: float, scores: list[int] | None = SCORES, kt: list[int] = KT) -> list[Event]:
    """matmul(q, kᵀ) -> softmax -> matmul(probs, v), with shapes, or without when ``scores`` is None."""
    if scores is None:
        return [_op("aten::matmul", t0 + 40), _op("aten::softmax", t0 + 70), _op("aten::matmul", t0 + 100)]
    return [_op("aten::matmul", t0 + 40, dims=[Q, kt]), _op("aten::softmax", t0 + 70, dims=[scores, [], []]),
            _op("aten::matmul", t0 + 100, dims=[scores, V])]


def _infer(events: list[Event], diagnostics: dict[str, int] | None = None) -> tuple[Events, Inferred]:
    ev = decode_bytes(json.dumps({"traceEvents": events}).encode())
    attr = attribute(ev)
    return ev, infer_scopes(ev, attr.parent, attr.backward, attr.step, diagnostics=diagnostics)


def _placed(ev: Events, found: Inferred) -> list[tuple[str, float, str | None]]:
    """(op, start, innermost synthetic scope enclosing it) for every CPU op, in file order."""
    out = []
    for i in range(len(ev)):
        if ev.kind[i] != Kind.CPU_OP:
            continue
        start, end = float(ev.ts[i]), float(ev.ts[i] + ev.dur[i])
        around = [s for s in found.scopes if s.track == ev.track[i] and s.ts <= start and end <= s.ts + s.dur]
        inner = min(around, key=lambda s: s.dur).name if around else None
        out.append((ev.names[ev.name[i]], start + ev.meta.t0_us, inner))
    return out


def _blocks(found: Inferred) -> list[str]:
    """The block scopes' names (a block's name has no phase after its layer)."""
    return [s.name for s in found.scopes if s.name.split(" ")[0].count("/") == 1]


def test_a_trace_without_attention_infers_nothing() -> None:
    diagnostics: dict[str, int] = {}
    _, found = _infer([_step(1, 0), _op("aten::linear", 10, dims=[[2, 16, 32], [32, 32]]), _op("aten::relu", 40),
                       _op("aten::matmul", 70, dims=[[2, 32], [32, 2]])], diagnostics)
    assert found == Inferred([], frozenset(), {}) and diagnostics == {}


def test_sdpa_calls_are_blocks_widened_to_their_projections() -> None:
    """Two SDPA blocks per step over two steps: layers 0 and 1 in each step, the projections in
    qkv_proj and out_proj, the SDPA call and its kernel's op in sdpa; none is core only."""
    events = []
    for n, t0 in ((1, 0), (2, 1000)):
        events += [_step(n, t0), *_sdpa_block(t0), *_sdpa_block(t0 + 300)]
    ev, found = _infer(events)
    assert found.core_only == frozenset()
    assert _blocks(found) == ["tbattn.v1/L0", "tbattn.v1/L1"] * 2
    layer = [(name, scope) for name, _, scope in _placed(ev, found)][:4]
    assert layer == [("aten::linear", "tbattn.v1/L0/qkv_proj"), (SDPA, "tbattn.v1/L0/sdpa"),
                     (CPU_FLASH, "tbattn.v1/L0/sdpa"), ("aten::linear", "tbattn.v1/L0/out_proj")]
    assert [scope for _, ts, scope in _placed(ev, found) if ts == 1340] == ["tbattn.v1/L1/sdpa"]


def test_a_bare_sdpa_call_is_its_core_only() -> None:
    """No projection around the call: its layer is core only, and still has its sdpa phase."""
    ev, found = _infer([_step(1, 0), *_sdpa_block(0), *_sdpa_block(300, projections=False)])
    assert found.core_only == frozenset({1})
    assert [scope for name, _, scope in _placed(ev, found) if name == CPU_FLASH] == ["tbattn.v1/L0/sdpa",
                                                                                   "tbattn.v1/L1/sdpa"]


def test_a_backends_own_sdpa_op_is_a_block_only_without_the_wrapper() -> None:
    """torch.compile calls the CPU flash op with no ``scaled_dot_product_attention`` around it: that op
    is a block, its sdpa phase whole (its own ops are the kernel's bookkeeping). Inside the wrapper it
    is the wrapper's block, not a second one."""
    bare = [_op(CPU_FLASH, 40, 50), _op("aten::empty", 42, 2)]
    ev, found = _infer([_step(1, 0), *bare, *_sdpa_block(300)])
    assert _blocks(found) == ["tbattn.v1/L0", "tbattn.v1/L1"]
    assert _placed(ev, found)[:2] == [(CPU_FLASH, 40, "tbattn.v1/L0/sdpa"), ("aten::empty", 42, "tbattn.v1/L0/sdpa")]


def test_a_serving_engines_attention_op_is_the_sdpa_phase() -> None:
    events = [_step(1, 0), _op("aten::linear", 10, dims=[[2, 16, 32], [96, 32]]),
              _op("vllm::unified_attention_with_output", 40, 50), _op("aten::empty", 42, 2),
              _op("aten::linear", 100, dims=[[2, 16, 32], [32, 32]])]
    ev, found = _infer(events)
    assert [scope for _, _, scope in _placed(ev, found)] == ["tbattn.v1/L0/qkv_proj", "tbattn.v1/L0/sdpa",
                                                             "tbattn.v1/L0/sdpa", "tbattn.v1/L0/out_proj"]
    assert found.core_only == frozenset()


def test_nn_mha_fast_path_is_a_whole_block_never_core_only() -> None:
    """``_native_multi_head_attention`` holds its projections: its ops take their phases inside it."""
    events = [_step(1, 0), _op("aten::_native_multi_head_attention", 40, 300),
              _op("aten::_transform_bias_rescale_qkv", 42), _op("aten::bmm", 70), _op("aten::_softmax", 100),
              _op("aten::bmm", 130), _op("aten::addmm", 160)]
    ev, found = _infer(events)
    assert found.core_only == frozenset()
    assert [scope for _, _, scope in _placed(ev, found)] == [
        "tbattn.v1/L0", "tbattn.v1/L0/qkv_proj", "tbattn.v1/L0/qk_matmul", "tbattn.v1/L0/softmax",
        "tbattn.v1/L0/av_matmul", "tbattn.v1/L0/out_proj"]


# -- matmul -> softmax -> matmul -------------------------------------------------------------------

def test_matmul_softmax_matmul_with_matching_shapes_is_a_block() -> None:
    """(2, 4, 16, 8) · (2, 4, 8, 16) makes (…, 16, 16) scores; softmax and the second matmul take them."""
    events = [_step(1, 0), _op("aten::linear", 10, dims=[[2, 16, 32], [96, 32]]), *_eager_block(0),
              _op("aten::linear", 130, dims=[[2, 16, 32], [32, 32]])]
    ev, found = _infer(events)
    assert [scope for _, _, scope in _placed(ev, found)] == [
        "tbattn.v1/L0/qkv_proj", "tbattn.v1/L0/qk_matmul", "tbattn.v1/L0/softmax", "tbattn.v1/L0/av_matmul",
        "tbattn.v1/L0/out_proj"]


@pytest.mark.parametrize(("scores", "kt"), [
    ([2, 4, 16, 12], KT),  # the softmax's input is not q·kᵀ's (16, 16)
    (SCORES, [2, 4, 8, 12]),  # q·kᵀ makes (16, 12), the softmax takes (16, 16)
    ([16], KT),  # a softmax over a vector
])
def test_shapes_that_do_not_chain_are_not_attention(scores: list[int], kt: list[int]) -> None:
    _, found = _infer([_step(1, 0), *_eager_block(0, scores, kt)])
    assert found == Inferred([], frozenset(), {})


def test_without_shapes_proximity_is_all_there_is() -> None:
    ev, found = _infer([_step(1, 0), *_eager_block(0, None)])
    assert [scope for _, _, scope in _placed(ev, found)] == ["tbattn.v1/L0/qk_matmul", "tbattn.v1/L0/softmax",
                                                             "tbattn.v1/L0/av_matmul"]
    assert found.core_only == frozenset({0})


def test_a_pattern_spread_over_more_than_64_events_is_not_attention() -> None:
    """The bound on the search: 70 ops between the two matmuls."""
    between = [_op("aten::add", 100 + k, 0.5) for k in range(70)]
    events = [_step(1, 0), _op("aten::matmul", 40, dims=[Q, KT]), *between,
              _op("aten::softmax", 200, dims=[SCORES, [], []]), _op("aten::matmul", 230, dims=[SCORES, V])]
    assert _infer(events)[1] == Inferred([], frozenset(), {})


def test_the_pattern_must_stay_on_one_thread() -> None:
    """The softmax's next matmul runs on another thread: not this thread's attention."""
    events = [_step(1, 0), _op("aten::matmul", 40, dims=[Q, KT]), _op("aten::softmax", 70, dims=[SCORES, [], []]),
              _op("aten::matmul", 100, dims=[SCORES, V], tid=2)]
    assert _infer(events)[1] == Inferred([], frozenset(), {})


def test_backward_ops_are_never_a_block() -> None:
    """The same pattern inside an autograd engine function is backward work."""
    backward = [_x("cpu_op", "autograd::engine::evaluate_function: BmmBackward0", 500, 200),
                *[{**e, "ts": e["ts"] + 460} for e in _eager_block(0)]]
    ev, found = _infer([_step(1, 0), *_eager_block(0), *backward])
    assert _blocks(found) == ["tbattn.v1/L0"]
    assert [scope for _, ts, scope in _placed(ev, found) if ts >= 500] == [None] * 4


def test_int8_attention_starts_at_the_first_integer_gemm() -> None:
    """One ``_int_mm`` per head before the softmax: the block opens at the first, both are q·kᵀ."""
    int8 = [[16, 8], [8, 16]]
    events = [_step(1, 0), _op("aten::_int_mm", 40, 10, int8), _op("aten::_int_mm", 52, 10, int8),
              _op("aten::softmax", 70, dims=[[2, 16, 16], [], []]),
              _op("aten::bmm", 100, dims=[[2, 16, 16], [2, 16, 8]])]
    ev, found = _infer(events)
    assert [scope for _, _, scope in _placed(ev, found)] == ["tbattn.v1/L0/qk_matmul", "tbattn.v1/L0/qk_matmul",
                                                             "tbattn.v1/L0/softmax", "tbattn.v1/L0/av_matmul"]


# -- modules -----------------------------------------------------------------------------------------

def test_the_outermost_attention_module_is_the_block_and_cores_outside_are_their_own() -> None:
    """BertAttention holds BertSelfAttention (one block, named for the outer instance); an SDPA call
    outside every attention module is a block found by its ops, core only."""
    events = [_step(1, 0), _module("BertAttention_0", 5, 300), _module("BertSelfAttention_0", 6, 200),
              *_sdpa_block(0)[:3], _op("aten::linear", 250, dims=[[2, 16, 32], [32, 32]]),
              *_sdpa_block(400, projections=False)]
    ev, found = _infer(events)
    assert _blocks(found) == ["tbattn.v1/L0 BertAttention_0", "tbattn.v1/L1"]
    assert [scope for _, _, scope in _placed(ev, found)] == [
        "tbattn.v1/L0/qkv_proj", "tbattn.v1/L0/sdpa", "tbattn.v1/L0/sdpa", "tbattn.v1/L0/out_proj",
        "tbattn.v1/L1", "tbattn.v1/L1/sdpa"]
    assert found.core_only == frozenset({1})


def test_an_attention_module_is_one_layer_in_every_step() -> None:
    events = []
    for n, t0 in ((1, 0), (2, 1000)):
        for k in range(2):
            events += [_module(f"LlamaAttention_{k}", t0 + 300 * k + 5, 200), *_sdpa_block(t0 + 300 * k)[:3]]
        events.append(_step(n, t0))
    _, found = _infer(events)
    assert _blocks(found) == ["tbattn.v1/L0 LlamaAttention_0", "tbattn.v1/L1 LlamaAttention_1"] * 2


# -- compiled frames ---------------------------------------------------------------------------------

def _compiled(calls: int, frame: str = "2", steps: int = 1) -> list[Event]:
    events = []
    for n in range(steps):
        t0 = 1000.0 * n
        events.append(_step(n + 1, t0))
        for k in range(calls):
            events += [_op(f"Torch-Compiled Region: {frame}/0", t0 + 100 + 200 * k, 100),
                       _op("aten::mm", t0 + 120 + 200 * k, 10)]
    return events


def test_a_frame_called_once_per_layer_is_a_block_with_one_compiled_phase() -> None:
    ev, found = _infer(_compiled(3))
    assert _blocks(found) == ["tbattn.v1/L0", "tbattn.v1/L1", "tbattn.v1/L2"]
    assert [scope for _, _, scope in _placed(ev, found)] == [
        f"tbattn.v1/L{k}/compiled" for k in range(3) for _ in range(2)]  # the region and its op


def test_a_frame_called_once_per_step_is_the_whole_model() -> None:
    assert _infer(_compiled(1, steps=2))[1] == Inferred([], frozenset(), {})


def test_the_frame_called_most_often_is_the_attention() -> None:
    """Frame 5 runs twice per step, frame 2 three times: frame 2's calls are the blocks."""
    frame5 = [_op("Torch-Compiled Region: 5/0", t0, 100) for t0 in (1100, 1300)]
    events = [{**_step(1, 0), "dur": 2000}, *_compiled(3)[1:], *frame5]
    ev, found = _infer(events)
    assert len(_blocks(found)) == 3
    assert {name for name, _, scope in _placed(ev, found) if scope is not None} == {
        "Torch-Compiled Region: 2/0", "aten::mm"}
    assert all(scope is None for name, _, scope in _placed(ev, found) if name.startswith("Torch-Compiled Region: 5"))


def test_a_compiled_frame_holding_its_projections_is_the_whole_block() -> None:
    assert _infer(_compiled(3))[1].core_only == frozenset()  # each frame runs an aten::mm


def test_a_compiled_frame_without_a_projection_is_the_core_alone() -> None:
    """``flex_attention`` compiled alone: its frame runs the kernel's launch and no GEMM."""
    events = [_step(1, 0)]
    for k in range(3):
        events += [_op("Torch-Compiled Region: 2/0", 100 + 200 * k, 100), _op("aten::empty", 120 + 200 * k, 10)]
    assert _infer(events)[1].core_only == frozenset({0, 1, 2})


def test_compiled_flex_on_a_gpu_is_its_core_as_its_scoped_twin_says() -> None:
    """The H200 trace of the built-in model with compiled flex_attention, without scopes: each
    layer's frame is the flex kernel (16.6 µs), where the scoped twin's layer adds its projections
    (qkv 13.6 and out 7.0 µs): the plain trace's layers are the core alone."""
    from tb_attn_plugin.analysis.summary import summarize_analysis

    base = Path(__file__).resolve().parents[3] / "gpu_traces" / "seq2048" / "builtin"
    (plain,) = (base / "flex-sliding256-unscoped" / "seq2048-bfloat16").glob("*.pt.trace.json.gz")
    w = summarize_analysis(analyze(decode_bytes(gzip.decompress(plain.read_bytes()))))
    assert [layer.core_only for layer in w.layers] == [True, True]
    assert all({p.phase for p in layer.phases} <= {"compiled", "other"} for layer in w.layers)


# -- bounds ------------------------------------------------------------------------------------------

def test_blocks_past_the_layer_bound_are_counted_not_analyzed(monkeypatch: pytest.MonkeyPatch) -> None:
    """With room for two layers, a step's third SDPA call is dropped and counted, on top of any count
    the caller already holds; without a diagnostics dict it is dropped all the same."""
    monkeypatch.setattr(infer, "MAX_LAYERS", 2)
    events = [_step(1, 0), *_sdpa_block(0), *_sdpa_block(300), *_sdpa_block(600)]
    diagnostics = {TOO_MANY_BLOCKS: 2}
    _, found = _infer(events, diagnostics)
    assert _blocks(found) == ["tbattn.v1/L0", "tbattn.v1/L1"] and diagnostics == {TOO_MANY_BLOCKS: 3}
    assert _blocks(_infer(events, None)[1]) == ["tbattn.v1/L0", "tbattn.v1/L1"]


def test_the_extent_of_an_event_is_one_past_its_last_nested_event() -> None:
    """A [40, 90) holds B [41, 89), and C [90, 95) starts as A ends (within its 1 ns tolerance): A's
    extent runs past both; B's stops before C; D [200, 220) is the last event."""
    ev = decode_bytes(json.dumps({"traceEvents": [_op("A", 40, 50), _op("B", 41, 48), _op("C", 90, 5),
                                                  _op("D", 200, 20)]}).encode())
    assert [ev.names[ev.name[i]] for i in range(len(ev))] == ["A", "B", "C", "D"]
    assert infer._extent(ev, 0) == 3 and infer._extent(ev, 1) == 2 and infer._extent(ev, 3) == 4
