"""``analysis.module_calls``: which events are a module's call (``nn.Module`` events, other tools'
module labels) and which are attention's, and the blocks inference takes from them.

The hand-written traces (``traces/labels_*.json``, each one step on one thread) are summarized
through ``analyze`` and their attribution checked against golden rows, with the rule each shows
spelled out below it:

- ``labels_lightning``: PyTorch Lightning's labels around every module (decoder layer, norm,
  attention, each projection), and its ``run_training_batch`` running past the profiler step's end;
- ``labels_path``: two users' labels holding a module path (``model.layers.3.self_attn``,
  ``## forward: encoder.layer.2.attention.self``), each a block and a layer;
- ``labels_nested``: GPT-2's ``attn`` label holding a ``SelfAttention`` label (and a user's label
  inside that): the outermost is the block, its ``c_attn`` and ``c_proj`` its projections;
- ``labels_fsdp``: FSDP's hook labels and labels whose path ends elsewhere (a decoder layer, the
  projections): no block of their own; the SDPA call is found by its ops and widened over the
  projections in their labels;
- ``labels_modules``: ``with_stack``'s ``nn.Module`` events around Lightning's labels: one block,
  named by the label's path;
- ``labels_core_only``: flash_attn's ``MHA`` under Lightning, its ``SelfAttention`` label holding
  the core alone: widened over ``Wqkv`` and ``out_proj`` in their labels.

Shapes: B = 2, S = 16, model width 32, 4 heads of 8; no ``is_causal`` recorded (the full S²).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from tb_attn_plugin.analysis.attribution.analyze import analyze
from tb_attn_plugin.analysis.attribution.attribute import attribute
from tb_attn_plugin.analysis.attribution.inference.module_calls import (
    attention_calls,
    is_attention_label,
    is_attention_module,
    module_calls,
    module_labels,
)
from tb_attn_plugin.analysis.summary import summarize_trace
from tb_attn_plugin.trace.decode import decode_bytes
from tb_attn_plugin.trace.events import Events
from tb_attn_plugin.trace.kineto import Kind, ModuleLabel
from tb_attn_plugin.types.schema import WorkerSummary

Rows = dict[str, Any]
B, S, D, H = 2, 16, 32, 4
QKV_FLOPS = 3 * 2 * B * S * D * D  # three (or one fused) projections of the hidden state
OUT_FLOPS = 2 * B * S * D * D
SDPA_FLOPS = 2 * B * H * S * S * (D // H + D // H)  # q·kᵀ and attn·v, no mask known
LABELLED = ["labels_lightning", "labels_path", "labels_nested", "labels_fsdp", "labels_modules", "labels_core_only"]


@pytest.mark.parametrize(("name", "attention"), [
    ("nn.Module: LlamaAttention_0", True),
    ("nn.Module: SelfAttention_12", True),
    ("nn.Module: Attention", True),  # no instance number
    ("nn.Module: MultiheadAttention_3", True),
    ("nn.Module: LlamaAttentionBlock_0", False),  # the class must end in Attention
    ("nn.Module: LlamaMLP_0", False),
    ("LlamaAttention_0", False),  # not a module event
    ("nn.Module: ", False),
])
def test_which_module_events_are_attention_modules(name: str, attention: bool) -> None:
    assert is_attention_module(name) is attention


@pytest.mark.parametrize(("path", "attention"), [
    ("model.layers.3.self_attn", True),
    ("transformer.h.0.attn", True),
    ("model.layers.0.self_attention", True),  # Falcon, BLOOM
    ("gpt_neox.layers.0.attention", True),
    ("encoder.block.0.layer.0.SelfAttention", True),  # T5
    ("decoder.block.0.layer.1.EncDecAttention", True),
    ("model.decoder.layers.2.encoder_attn", True),  # Whisper, BART
    ("model.layers.1.cross_attn", True),
    ("transformer_blocks.0.attn2", True),  # diffusers
    ("encoder.layers.0.multi_head_attention", True),
    ("vit.encoder.layer.0.attention.attention", True),
    ("encoder.layer.2.attention.self", True),  # BERT's self-attention, under its attention
    ("blocks.3.ATTN", True),  # case-insensitive
    ("transformer.h.0.attn.c_attn", False),  # GPT-2's projections: one letter before
    ("transformer.h.0.crossattention.q_attn", False),
    ("model.layers.3.self_attn.q_proj", False),
    ("model.layers.3", False),  # a decoder layer
    ("encoder.layer.2.output.self", False),  # self after something else
    ("model.self_attn", False),  # no layer index
    ("model.layers.0.attention_norm", False),  # a norm named after attention
])
def test_which_label_paths_are_attention_modules(path: str, attention: bool) -> None:
    assert is_attention_label(ModuleLabel(path, "")) is attention


def test_a_label_that_names_its_class_is_attention_by_it_as_module_events_are() -> None:
    assert is_attention_label(ModuleLabel("model.mixer", "MultiheadAttention"))  # no index needed
    assert is_attention_label(ModuleLabel("model.layers.0.mixer.inner_attn", "SelfAttention"))
    assert not is_attention_label(ModuleLabel("model.layers.0.mixer", "MHA"))
    assert is_attention_label(ModuleLabel("model.layers.0.self_attn", "Foo"))  # or by its path


def _x(cat: str, name: str, ts: float, dur: float, tid: int = 1) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": tid, "args": {}}


def _decode(events: list[dict[str, Any]]) -> Events:
    return decode_bytes(json.dumps({"traceEvents": events}).encode())


def _calls(ev: Events) -> tuple[list[str], list[tuple[str, str]]]:
    """(every attention call's name, [(outermost call's name, its module)])."""
    attr = attribute(ev)
    found = attention_calls(ev, attr.parent, ~attr.backward)
    return ([ev.names[ev.name[i]] for i in found.every],
            [(ev.names[ev.name[i]], module) for i, module in found.outer])


def test_module_calls_are_module_events_and_labels_on_cpu_threads() -> None:
    """(module call, module label) per event: a label's projection on the device timeline and an
    op named like a path are neither."""
    pl = "[pl][module]torch.nn.modules.linear.Linear: model.layers.0.self_attn.q_proj"
    ev = _decode([_x("python_function", "nn.Module: Linear_0", 0, 10), _x("user_annotation", pl, 1, 8),
                  _x("gpu_user_annotation", pl, 2, 3, tid=9), _x("cpu_op", "model.layers.0.self_attn", 20, 5),
                  _x("user_annotation", "ProfilerStep#1", 30, 5), _x("user_annotation", "model.layers.0", 40, 5)])
    got = {(ev.names[n], Kind(k)): (c, lab) for n, k, c, lab in zip(
        ev.name.tolist(), ev.kind.tolist(), module_calls(ev).tolist(), module_labels(ev).tolist(), strict=True)}
    assert got == {("nn.Module: Linear_0", Kind.MODULE): (True, False), (pl, Kind.ANNOTATION): (True, True),
                   (pl, Kind.GPU_ANNOTATION): (False, False),
                   ("model.layers.0.self_attn", Kind.CPU_OP): (False, False),
                   ("ProfilerStep#1", Kind.ANNOTATION): (False, False),
                   ("model.layers.0", Kind.ANNOTATION): (True, True)}


def test_the_outermost_attention_call_is_the_block_named_by_its_path() -> None:
    ev = _decode([_x("user_annotation", "model.layers.0.self_attn", 0, 100),
                  _x("user_annotation", "model.layers.0.self_attn.attn", 10, 50),
                  _x("user_annotation", "model.layers.0.self_attn.q_proj", 2, 5),
                  _x("user_annotation", "model.layers.1.self_attn", 200, 100)])
    every, outer = _calls(ev)
    assert every == ["model.layers.0.self_attn", "model.layers.0.self_attn.attn", "model.layers.1.self_attn"]
    assert outer == [("model.layers.0.self_attn", "model.layers.0.self_attn"),
                     ("model.layers.1.self_attn", "model.layers.1.self_attn")]


def test_a_module_event_holding_its_own_label_is_named_by_the_path() -> None:
    """Lightning's hooks run inside the module's call: with ``with_stack`` the label sits in the
    module's event. BERT's outer attention holds its self-attention's event and label: the
    outer block is named by the outer label, not the inner one."""
    pl = "[pl][module]transformers.models.bert.modeling_bert."
    ev = _decode([_x("python_function", "nn.Module: BertAttention_0", 0, 100),
                  _x("user_annotation", f"{pl}BertAttention: bert.encoder.layer.0.attention", 1, 98),
                  _x("python_function", "nn.Module: BertSelfAttention_0", 2, 50),
                  _x("user_annotation", f"{pl}BertSelfAttention: bert.encoder.layer.0.attention.self", 3, 48),
                  _x("python_function", "nn.Module: BertAttention_1", 200, 100),  # no label of its own
                  _x("python_function", "nn.Module: BertSelfAttention_1", 202, 50),
                  _x("user_annotation", f"{pl}BertSelfAttention: bert.encoder.layer.1.attention.self", 203, 48)])
    _, outer = _calls(ev)
    assert outer == [("nn.Module: BertAttention_0", "bert.encoder.layer.0.attention"),
                     ("nn.Module: BertAttention_1", "BertAttention_1")]


def test_a_label_around_a_module_event_is_the_block() -> None:
    """A user's label around the call of the module: the label is the outermost, and names it."""
    ev = _decode([_x("user_annotation", "model.layers.2.self_attn", 0, 100),
                  _x("python_function", "nn.Module: LlamaAttention_2", 1, 98)])
    assert _calls(ev)[1] == [("model.layers.2.self_attn", "model.layers.2.self_attn")]


def test_backward_labels_are_no_blocks() -> None:
    ev = _decode([_x("cpu_op", "autograd::engine::evaluate_function: LinearBackward0", 0, 100),
                  _x("user_annotation", "model.layers.0.self_attn", 1, 50)])
    assert _calls(ev) == ([], [])


# -- hand-written traces -------------------------------------------------------------------------

@pytest.fixture
def summary_of(trace_events: Callable[[str], Events]) -> Callable[[str], WorkerSummary]:
    def summarize(name: str) -> WorkerSummary:
        return summarize_trace(analyze(trace_events(name)), file=f"{name}.json", worker="w", span=None)

    return summarize


@pytest.mark.parametrize("name", LABELLED)
def test_labelled_traces_are_attributed_as_stored(name: str, trace_events: Callable[[str], Events],
                                                 rows_of: Callable[[str | Events], Rows],
                                                 golden: Callable[[str, Rows], None]) -> None:
    golden(name, rows_of(analyze(trace_events(name)).events))


def _layers(summary: WorkerSummary) -> list[tuple[int, str | None, str, bool, dict[str, float]]]:
    return [(layer.layer, layer.module, layer.backend, layer.core_only,
             {p.phase: p.flops for p in layer.phases if p.flops}) for layer in summary.layers]


WHOLE = {"qkv_proj": QKV_FLOPS, "sdpa": SDPA_FLOPS, "out_proj": OUT_FLOPS}


@pytest.mark.parametrize(("name", "modules"), [
    ("labels_lightning", ["model.layers.0.self_attn"]),
    ("labels_path", ["model.layers.3.self_attn", "encoder.layer.2.attention.self"]),
    ("labels_nested", ["model.transformer.h.0.attn"]),
    ("labels_fsdp", [None]),  # found by its ops: no label names it
    ("labels_modules", ["model.layers.0.self_attn"]),
    ("labels_core_only", ["model.layers.0.mixer.inner_attn"]),
])
def test_labels_give_the_blocks_their_modules_and_layers(name: str, modules: list[str | None],
                                                        summary_of: Callable[[str], WorkerSummary]) -> None:
    """One block per labelled attention module, a layer each in order, its projections inside
    (never core only), and the FLOPs of every phase as the shapes give them."""
    summary = summary_of(name)
    assert summary.inferred and summary.steps == [1]
    assert _layers(summary) == [(k, m, "cpu-flash", False, WHOLE) for k, m in enumerate(modules)]


def test_lightnings_step_annotations_do_not_take_the_forward_out_of_its_step(
        summary_of: Callable[[str], WorkerSummary], trace_events: Callable[[str], Events],
        rows_of: Callable[[str | Events], Rows]) -> None:
    """``[pl][profile]run_training_batch`` starts in ProfilerStep#1 and ends after it: the forward
    inside it no longer nests in the step, and belongs to it by its start."""
    rows = rows_of(trace_events("labels_lightning"))["events"]
    assert {r["step"] for r in rows} == {1}
    assert summary_of("labels_lightning").layers[0].calls == 1


def test_labels_that_are_no_attention_modules_make_no_blocks(trace_events: Callable[[str], Events],
                                                              rows_of: Callable[[str | Events], Rows]) -> None:
    """FSDP's hooks and the decoder layer's and projections' labels: only the synthetic block
    found by its ops holds layer 0; FSDP's ops stay outside it."""
    rows = rows_of(analyze(trace_events("labels_fsdp")).events)["events"]
    blocks = [r["name"] for r in rows if r["scope"] and r["phase"] is None]
    assert blocks == ["tbattn.v1/L0"]
    assert {r["layer"] for r in rows if r["name"] == "aten::empty"} == {None}  # FSDP's all-gather buffers
    assert {r["layer"] for r in rows if r["name"].startswith("FSDP::") or r["name"] == "model.layers.0"} == {None}
