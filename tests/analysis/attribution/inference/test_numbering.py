"""``analysis.numbering.number_blocks``: the layer of each block inference finds, from what encloses
it (its module instance, the k-th core of its outermost module or compiled call, or the k-th of its
step); and ``layer_models``: the model each layer belongs to. Checked on tiny hand-built traces whose
layers and models are read off the module docstring's rules."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from tb_attn_plugin.analysis.attribution.attribute import attribute
from tb_attn_plugin.analysis.attribution.inference.numbering import Found, layer_models, number_blocks
from tb_attn_plugin.trace.decode import decode_bytes
from tb_attn_plugin.trace.events import Events

SDPA = "aten::scaled_dot_product_attention"


def _x(cat: str, name: str, ts: float, dur: float, tid: int = 1) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": tid, "args": {}}


def _module(name: str, ts: float, dur: float, tid: int = 1) -> dict[str, Any]:
    return _x("python_function", f"nn.Module: {name}", ts, dur, tid)


def _op(name: str, ts: float, dur: float = 10, tid: int = 1) -> dict[str, Any]:
    return _x("cpu_op", name, ts, dur, tid)


def _step(n: int, ts: float, dur: float = 1000, tid: int = 1) -> dict[str, Any]:
    return _x("user_annotation", f"ProfilerStep#{n}", ts, dur, tid)


def _decode(events: list[dict[str, Any]]) -> tuple[Events, np.ndarray, np.ndarray]:
    ev = decode_bytes(json.dumps({"traceEvents": events}).encode())
    attr = attribute(ev)
    return ev, attr.parent, attr.step


def _at(ev: Events, name: str, ts: float, tid: int = 1) -> int:
    """The event called ``name`` that starts at ``ts`` on thread ``tid``."""
    (hit,) = [i for i in range(len(ev)) if ev.names[ev.name[i]] == name and ev.ts[i] == ts - ev.meta.t0_us
              and ev.tracks[ev.track[i]].tid == tid]
    return hit


def _by_ops(ev: Events, starts: list[float], name: str = SDPA, tid: int = 1) -> list[Found]:
    """Blocks found by their ops: one per core op starting at each of ``starts``."""
    out = []
    for ts in starts:
        i = _at(ev, name, ts, tid)
        out.append(Found(i, i, i, "", False))
    return out


def test_no_blocks_no_layers() -> None:
    ev, parent, step = _decode([_step(1, 0), _op(SDPA, 10)])
    assert number_blocks(ev, parent, step, []) == []


def test_a_module_instance_is_one_layer_in_every_call() -> None:
    """Two attention modules called once per step, over two steps: instance 0 is layer 0 both times."""
    events = []
    for n, t0 in ((1, 0), (2, 1000)):
        events += [_step(n, t0), _module("LlamaAttention_0", t0 + 10, 100), _module("LlamaAttention_1", t0 + 200, 100)]
    ev, parent, step = _decode(events)
    blocks = [Found(_at(ev, f"nn.Module: LlamaAttention_{k}", t0 + ts), 0, 0, f"LlamaAttention_{k}", False)
              for t0 in (0, 1000) for k, ts in ((0, 10), (1, 200))]
    assert number_blocks(ev, parent, step, blocks) == [0, 1, 0, 1]


def test_op_blocks_are_numbered_within_their_outermost_module_call() -> None:
    """A diffusion transformer called once per denoising step, two cores per call, each core inside a
    block module of its own: counted within the outer call (0, 1), not within each block module
    (which would make both layer 0)."""
    events = [_step(1, 0, 2000)]
    for t0 in (0, 1000):
        events += [_module("DiT_0", t0 + 10, 900), _module("Block_0", t0 + 20, 100), _op(SDPA, t0 + 30),
                   _module("Block_1", t0 + 200, 100), _op(SDPA, t0 + 210)]
    ev, parent, step = _decode(events)
    blocks = _by_ops(ev, [30, 210, 1030, 1210])
    assert number_blocks(ev, parent, step, blocks) == [0, 1, 0, 1]


def test_each_outer_model_takes_its_layer_numbers_after_the_one_before() -> None:
    """A text encoder with two cores, then a transformer with three, called twice: the transformer's
    cores are layers 2-4 in both of its calls."""
    events = [_step(1, 0, 5000), _module("TextEncoder_0", 10, 500), _op(SDPA, 20), _op(SDPA, 40)]
    for t0 in (1000, 2000):
        events += [_module("Transformer_0", t0, 500), _op(SDPA, t0 + 10), _op(SDPA, t0 + 30), _op(SDPA, t0 + 50)]
    ev, parent, step = _decode(events)
    blocks = _by_ops(ev, [20, 40, 1010, 1030, 1050, 2010, 2030, 2050])
    assert number_blocks(ev, parent, step, blocks) == [0, 1, 2, 3, 4, 2, 3, 4]


def test_a_compiled_frame_is_one_call_whatever_its_recompile() -> None:
    """``Torch-Compiled Region: 0/0`` and its recompile ``0/1`` are the same frame; frame 1 is another."""
    events = [_step(1, 0, 5000),
              _op("Torch-Compiled Region: 0/0", 10, 100), _op(SDPA, 20), _op(SDPA, 50),
              _op("Torch-Compiled Region: 0/1", 200, 100), _op(SDPA, 210), _op(SDPA, 250),
              _op("Torch-Compiled Region: 1/0", 400, 100), _op(SDPA, 410)]
    ev, parent, step = _decode(events)
    blocks = _by_ops(ev, [20, 50, 210, 250, 410])
    assert number_blocks(ev, parent, step, blocks) == [0, 1, 0, 1, 2]


def test_without_modules_a_core_is_the_kth_of_its_step_on_its_thread() -> None:
    """Two steps of two cores on thread 1, and one core on thread 2 in step 1: the k-th core of each
    (step, thread) is layer k, so thread 2's core is layer 0 too."""
    events = [_step(1, 0), _op(SDPA, 10), _op(SDPA, 30), _step(2, 1000), _op(SDPA, 1010), _op(SDPA, 1030),
              _step(1, 0, tid=2), _op(SDPA, 10, tid=2)]
    ev, parent, step = _decode(events)
    blocks = _by_ops(ev, [10, 30, 1010, 1030]) + _by_ops(ev, [10], tid=2)
    assert number_blocks(ev, parent, step, blocks) == [0, 1, 0, 1, 0]


def test_without_steps_the_cores_are_counted_through_the_trace() -> None:
    ev, parent, step = _decode([_op(SDPA, 10), _op(SDPA, 30), _op(SDPA, 50)])
    assert step.tolist() == [-1, -1, -1]
    assert number_blocks(ev, parent, step, _by_ops(ev, [10, 30, 50])) == [0, 1, 2]


def test_a_backward_pass_begins_the_layers_again() -> None:
    """A trace without steps (``accelerator.profile()`` with no schedule) of three training steps, and
    a step of two micro-batches (gradient accumulation): two cores, then backward, in each pass; the
    k-th core of each forward pass is layer k."""
    events: list[dict[str, Any]] = []
    for t0 in (0, 1000, 2000):
        events += [_op(SDPA, t0 + 10), _op(SDPA, t0 + 30), _op("autograd::engine::evaluate_function: MmBackward0",
                                                                  t0 + 500, 100)]
    ev, parent, step = _decode(events)
    attr = attribute(ev)
    starts = [10, 30, 1010, 1030, 2010, 2030]
    assert number_blocks(ev, parent, step, _by_ops(ev, starts), backward=attr.backward) == [0, 1, 0, 1, 0, 1]
    assert number_blocks(ev, parent, step, _by_ops(ev, starts)) == [0, 1, 2, 3, 4, 5], "no backward given"

    accumulated = [_step(1, 0, 3000), *events[:6]]
    ev, parent, step = _decode(accumulated)
    blocks = _by_ops(ev, [10, 30, 1010, 1030])
    assert number_blocks(ev, parent, step, blocks, backward=attribute(ev).backward) == [0, 1, 0, 1]


def test_module_and_op_blocks_interleave_in_file_order() -> None:
    """A module block, a core outside every module, then a second module instance: layers 0, 1, 2 in
    the order they ran, and the answer follows the order ``blocks`` are given in."""
    events = [_step(1, 0), _module("CLIPAttention_0", 10, 50), _op(SDPA, 100), _module("CLIPAttention_1", 200, 50)]
    ev, parent, step = _decode(events)
    first = Found(_at(ev, "nn.Module: CLIPAttention_0", 10), 0, 0, "CLIPAttention_0", False)
    (core,) = _by_ops(ev, [100])
    second = Found(_at(ev, "nn.Module: CLIPAttention_1", 200), 0, 0, "CLIPAttention_1", False)
    assert number_blocks(ev, parent, step, [first, core, second]) == [0, 1, 2]
    assert number_blocks(ev, parent, step, [second, core, first]) == [2, 1, 0]


def test_the_ordinal_restarts_in_each_call_of_the_outer_module() -> None:
    """A model that ran one core in its first call and two in its second (a cache warmed up, a branch
    taken): the k-th core of each call is layer k, so the second call's first core is layer 0 again."""
    events = [_step(1, 0, 5000), _module("Model_0", 10, 100), _op("aten::linear", 20), _op(SDPA, 40),
              _module("Model_0", 200, 100), _op(SDPA, 210), _op(SDPA, 230)]
    ev, parent, step = _decode(events)
    assert number_blocks(ev, parent, step, _by_ops(ev, [40, 210, 230])) == [0, 0, 1]


# -- layer_models ---------------------------------------------------------------------------------

def _models(events: list[dict[str, Any]]) -> dict[int, str]:
    ev = decode_bytes(json.dumps({"traceEvents": events}).encode())
    return layer_models(ev, attribute(ev))


def test_a_layers_model_is_the_outermost_module_call_around_it() -> None:
    """A pipeline's text encoder and transformer, each called with two blocks; the transformer's blocks
    sit in block modules of their own, which name no model."""
    events = [_step(1, 0, 5000), _module("CLIPTextModel_0", 10, 400),
              _x("user_annotation", "tbattn.v1/L0", 20, 100), _x("user_annotation", "tbattn.v1/L1", 200, 100),
              _module("SD3Transformer2DModel_0", 1000, 900), _module("JointBlock_0", 1010, 300),
              _x("user_annotation", "tbattn.v1/L2", 1020, 100), _module("JointBlock_1", 1400, 300),
              _x("user_annotation", "tbattn.v1/L3", 1410, 100)]
    assert _models(events) == {0: "CLIPTextModel_0", 1: "CLIPTextModel_0", 2: "SD3Transformer2DModel_0",
                               3: "SD3Transformer2DModel_0"}


def test_a_layers_model_is_its_paths_first_part() -> None:
    """Two models instrumented in one container: the first part of each path, where a layer's index
    follows it; a path without an index (a one-block model) and no path at all say nothing."""
    events = [_step(1, 0, 5000),
              _x("user_annotation", "tbattn.v1/L0 text_encoder.encoder.layers.0.self_attn", 10, 100),
              _x("user_annotation", "tbattn.v1/L1 text_encoder_3.encoder.block.0.layer.0", 200, 100),
              _x("user_annotation", "tbattn.v1/L2 text_encoder_3.encoder.block.1.layer.0", 400, 100),
              _x("user_annotation", "tbattn.v1/L3 head.attn", 600, 100),
              _x("user_annotation", "tbattn.v1/L4", 800, 100)]
    assert _models(events) == {0: "text_encoder", 1: "text_encoder_3", 2: "text_encoder_3", 3: "", 4: ""}


def test_a_blocks_own_module_call_names_no_model() -> None:
    """An inferred block's scope spans its attention module's call exactly: with no call around that
    one, the layers are one model, not one model each."""
    events = [_step(1, 0, 5000), _module("Attention_0", 10, 100), _x("user_annotation", "tbattn.v1/L0", 10, 100),
              _module("Attention_1", 200, 100), _x("user_annotation", "tbattn.v1/L1", 200, 100)]
    assert _models(events) == {0: "", 1: ""}


def test_a_compiled_frame_is_one_model_whatever_its_recompile() -> None:
    events = [_step(1, 0, 5000), _op("Torch-Compiled Region: 0/0", 10, 200),
              _x("user_annotation", "tbattn.v1/L0", 20, 100), _op("Torch-Compiled Region: 0/1", 300, 200),
              _x("user_annotation", "tbattn.v1/L1", 310, 100)]
    assert _models(events) == {0: "Torch-Compiled Region: 0", 1: "Torch-Compiled Region: 0"}
