"""``analysis.extent`` widens an attention core found by its ops over its sibling ops to the block's q, k, v and output
projections (or leaves it core only); the tests decode hand-built op sequences where the block's ends are known."""

from __future__ import annotations

import json
from typing import Any

from tb_attn_plugin.analysis.attribution.attribute import attribute
from tb_attn_plugin.analysis.attribution.inference.extent import (
    MISSING_AFTER,
    MISSING_BEFORE,
    MISSING_BOTH,
    Extent,
    widen,
)
from tb_attn_plugin.trace.decode import decode_bytes
from tb_attn_plugin.trace.events import Events

CPU = {"pid": 1, "tid": 1}
SDPA = "aten::scaled_dot_product_attention"
HIDDEN = [2, 16, 64]  # (batch, tokens, features): the block's input
LINEAR = [HIDDEN, [64, 64], [64]]  # a projection of the hidden state
Q = [[2, 4, 16, 16]] * 3  # q, k, v as SDPA takes them: (batch, heads, tokens, head size)
MLP = [[2, 16, 256], [64, 256], [64]]  # the MLP's down projection: 256 features in

Op = tuple[str, list[list[int]] | None]  # a name and its input dims (None: none recorded)


def _x(cat: str, name: str, ts: float, dur: float, where: dict[str, int] = CPU, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, **where, "args": args}


def _op(name: str, ts: float, dims: list[list[int]] | None = None, dur: float = 5) -> dict[str, Any]:
    shapes = {} if dims is None else {"Input Dims": dims, "Input type": ["float"] * len(dims)}
    return _x("cpu_op", name, ts, dur, **shapes)


def _trace(ops: list[Op], extra: list[dict[str, Any]] | None = None) -> tuple[Events, list[int]]:
    """One profiler step of ``ops`` one after another (10 µs apart), and each op's event index."""
    events = [_x("user_annotation", "ProfilerStep#1", 0, 100_000), *(extra or [])]
    events += [_op(name, 10 + 10 * k, dims) for k, (name, dims) in enumerate(ops)]
    ev = decode_bytes(json.dumps({"traceEvents": events}).encode())
    return ev, [_at(ev, 10 + 10 * k) for k in range(len(ops))]


def _at(ev: Events, ts: float) -> int:
    """The CPU op that starts at ``ts`` (times are relative to the step at 0)."""
    (i,) = [i for i in range(len(ev)) if ev.ts[i] == ts and ev.kind[i] == 1]
    return i


def _widen(ev: Events, spans: list[tuple[int, int]]) -> list[Extent]:
    return widen(ev, attribute(ev).parent, spans)


def _llama(shapes: bool = True) -> list[Op]:
    """A pre-norm block: norm, q, k and v projections each split into heads, rotary arithmetic, the core,
    the head merge, the output projection, then the residual add."""
    lin = LINEAR if shapes else None
    return [("aten::layer_norm", None),                                             # 0
            ("aten::linear", lin), ("aten::view", None), ("aten::transpose", None),  # 1-3 q
            ("aten::linear", lin), ("aten::view", None), ("aten::transpose", None),  # 4-6 k
            ("aten::linear", lin), ("aten::view", None), ("aten::transpose", None),  # 7-9 v
            ("aten::mul", None), ("aten::neg", None), ("aten::cat", None), ("aten::add", None),  # 10-13 RoPE
            (SDPA, Q if shapes else None),                                           # 14
            ("aten::transpose", None), ("aten::reshape", None),                      # 15-16 merge
            ("aten::linear", lin), ("aten::add", None)]                              # 17 out, 18 residual


def test_no_cores_widen_to_nothing() -> None:
    ev, _ = _trace([("aten::linear", LINEAR)])
    assert _widen(ev, []) == []


def test_a_core_widens_from_its_first_projection_to_its_output_projection() -> None:
    ev, at = _trace(_llama())
    assert _widen(ev, [(at[14], at[14])]) == [Extent(at[1], at[17], False)]


def test_a_core_with_no_projection_around_it_stays_alone() -> None:
    # q, k and v projected by einsum: nothing widen knows as a projection.
    ops: list[Op] = [("aten::einsum", None), ("aten::view", None), (SDPA, Q), ("aten::reshape", None),
                     ("aten::einsum", None)]
    ev, at = _trace(ops)
    assert _widen(ev, [(at[2], at[2])]) == [Extent(at[2], at[2], True, MISSING_BOTH)]


def test_one_side_found_is_core_only_and_says_which_side_it_missed() -> None:
    # No projection before (q, k, v made elsewhere), the output projection after: widened to it, but
    # its figures leave out q, k and v.
    ev, at = _trace([("aten::layer_norm", None), ("aten::view", None), (SDPA, Q), ("aten::reshape", None),
                     ("aten::linear", LINEAR)])
    assert _widen(ev, [(at[2], at[2])]) == [Extent(at[2], at[4], True, MISSING_BEFORE)]
    # Projections before, and the next op after the core is no merge: the block ends at its core.
    ev, at = _trace([("aten::linear", LINEAR), ("aten::view", None), (SDPA, Q), ("aten::gelu", None),
                     ("aten::linear", LINEAR)])
    assert _widen(ev, [(at[2], at[2])]) == [Extent(at[0], at[2], True, MISSING_AFTER)]


def test_a_span_of_several_ops_widens_from_its_first_and_its_last() -> None:
    # q·kᵀ -> softmax -> attn·v as a span from the first bmm to the last.
    ops: list[Op] = [("aten::linear", LINEAR), ("aten::linear", LINEAR), ("aten::linear", LINEAR),
                     ("aten::bmm", None), ("aten::_softmax", None), ("aten::bmm", None), ("aten::view", None),
                     ("aten::linear", LINEAR)]
    ev, at = _trace(ops)
    assert _widen(ev, [(at[3], at[5])]) == [Extent(at[0], at[7], False)]


# -- back from the core ---------------------------------------------------------------------------

def test_a_projection_of_another_input_belongs_to_another_sublayer() -> None:
    # The MLP's down projection reads 256 features: not the hidden state q, k and v project.
    ops: list[Op] = [("aten::linear", MLP), ("aten::linear", LINEAR), ("aten::linear", LINEAR), (SDPA, Q)]
    ev, at = _trace(ops)
    assert _widen(ev, [(at[3], at[3])])[0].first == at[1]


def test_the_layout_ops_feeding_the_first_projection_are_the_blocks() -> None:
    # GPT-2's Conv1D views its input before its one addmm (bias first: the input is the second argument).
    addmm = [[192], [32, 64], [64, 192]]
    ops: list[Op] = [("aten::layer_norm", None), ("aten::view", None), ("aten::addmm", addmm),
                     ("aten::view", None), ("aten::split", None), ("aten::view", None), ("aten::permute", None),
                     (SDPA, Q)]
    ev, at = _trace(ops)
    assert _widen(ev, [(at[7], at[7])])[0].first == at[1]


def test_a_qk_norm_between_projections_is_crossed_but_not_one_before_them() -> None:
    # Qwen3: q_proj, q_norm, k_proj, k_norm, v_proj. The walk goes on past q_proj over the input norm and the
    # residual add, but the next projection (the MLP's, 256 features in) is another input's: the block opens on q_proj.
    ops: list[Op] = [("aten::linear", MLP), ("aten::add", None), ("aten::rms_norm", None),
                     ("aten::linear", LINEAR), ("aten::rms_norm", None), ("aten::linear", LINEAR),
                     ("aten::rms_norm", None), ("aten::linear", LINEAR), (SDPA, Q)]
    ev, at = _trace(ops)
    assert _widen(ev, [(at[8], at[8])])[0].first == at[3]


def _rms(width: int) -> list[Op]:
    """RMSNorm in pieces over ``width`` features of 2 x 16 rows: the statistic's product carries its shapes."""
    return [("aten::to", None), ("aten::pow", None), ("aten::mean", None), ("aten::add", None), ("aten::rsqrt", None),
            ("aten::mul", [[2, 16, width], [2, 16, 1]]), ("aten::to", None), ("aten::mul", [[width], [2, 16, width]])]


def _mla() -> list[Op]:
    """DeepSeek's multi-head latent attention over a 64-wide model, 2 x 16 tokens: q through a rank-32
    pair with a norm between; k and v from one latent (kv_a: 16 + 8 features), normed, through the cache,
    then expanded by kv_b after it; the output projection back to 64."""
    q_a, q_b = [HIDDEN, [32, 64]], [[2, 16, 32], [64, 32]]
    kv_a, kv_b = [HIDDEN, [24, 64]], [[2, 1, 16, 16], [128, 16]]
    return [("aten::linear", MLP), ("aten::add", None), *_rms(64),               # 0-9: the previous MLP, the input norm
            ("aten::linear", q_a), *_rms(32), ("aten::linear", q_b),            # 10-19: q
            ("aten::view", None), ("aten::transpose", None), ("aten::split_with_sizes", None),
            ("aten::linear", kv_a), ("aten::split_with_sizes", None), *_rms(16),  # 23-32: the latent
            ("aten::mul", None), ("aten::mul", None), ("aten::sub", None), ("aten::cat", None),  # 33-36: RoPE
            ("aten::cat", None), ("aten::cat", None),                            # 37-38: the cache
            ("aten::linear", kv_b), ("aten::view", None), ("aten::transpose", None),  # 39-41
            ("aten::new_empty", None), ("aten::copy_", None), ("aten::copy_", None),  # 42-44: k assembled
            (SDPA, Q), ("aten::transpose", None), ("aten::reshape", None),       # 45-47
            ("aten::linear", LINEAR)]                                            # 48: output


def test_the_latent_projections_of_mla_are_the_blocks() -> None:
    """Each projection after the first reads another input (a latent, or the hidden state again), but
    none lies past the norm over the model's 64 features that opens the block: the block opens on
    q_a_proj, and the MLP's down projection before that norm is the previous sublayer's."""
    ev, at = _trace(_mla())
    assert _widen(ev, [(at[45], at[45])]) == [Extent(at[10], at[48], False)]


def test_without_an_output_projection_another_input_is_another_sublayers() -> None:
    # No model width to tell the block's norm by: the walk stops at kv_b's first other input, as before.
    ev, at = _trace(_mla()[:46])
    assert _widen(ev, [(at[45], at[45])]) == [Extent(at[39], at[45], True, MISSING_AFTER)]


def test_cross_attention_takes_the_query_projection_of_the_decoders_rows() -> None:
    """BART's cross-attention: q projects the decoder's 2 x 8 rows, k and v the encoder's 2 x 16. Before
    q lie the decoder's norm over the model's width and the self-attention's dropout, residual add and
    output projection: the previous sublayer's."""
    dec, enc = [[2, 8, 64], [64, 64], [64]], [HIDDEN, [64, 64], [64]]
    ops: list[Op] = [("aten::linear", dec), ("aten::dropout", None), ("aten::add", None),
                     ("aten::layer_norm", [[2, 8, 64], [64], [64]]),
                     ("aten::linear", dec), ("aten::view", None), ("aten::transpose", None),
                     ("aten::linear", enc), ("aten::linear", enc), ("aten::view", None), ("aten::transpose", None),
                     (SDPA, [[2, 4, 8, 16], [2, 4, 16, 16], [2, 4, 16, 16]]), ("aten::transpose", None),
                     ("aten::reshape", None), ("aten::linear", dec)]
    ev, at = _trace(ops)
    assert _widen(ev, [(at[11], at[11])]) == [Extent(at[4], at[14], False)]


def test_another_input_of_other_rows_than_the_query_is_another_sublayers() -> None:
    # 2 x 12 rows: neither the query's 2 x 16 tokens nor a stream joined to them.
    other = [[2, 12, 64], [64, 64], [64]]
    ops: list[Op] = [("aten::linear", other), ("aten::linear", LINEAR), ("aten::linear", LINEAR), (SDPA, Q),
                     ("aten::view", None), ("aten::linear", LINEAR)]
    ev, at = _trace(ops)
    assert _widen(ev, [(at[3], at[3])]) == [Extent(at[1], at[5], False)]


def test_a_position_bias_is_crossed_only_between_the_projections_and_the_core() -> None:
    # T5: the relative position bias (arange, abs, embedding) is computed after q, k, v; an embedding
    # before the projections is the model's token lookup, not the block's.
    ops: list[Op] = [("aten::embedding", None), ("aten::linear", LINEAR), ("aten::linear", LINEAR),
                     ("aten::linear", LINEAR), ("aten::arange", None), ("aten::abs", None), ("aten::embedding", None),
                     ("aten::permute", None), (SDPA, Q)]
    ev, at = _trace(ops)
    assert _widen(ev, [(at[8], at[8])])[0].first == at[1]


def test_without_shapes_the_walk_stops_at_anything_but_layout_past_a_projection() -> None:
    # No input to compare: the norm before the projection cannot be crossed.
    ops: list[Op] = [("aten::linear", None), ("aten::add", None), ("aten::layer_norm", None),
                     ("aten::linear", None), ("aten::view", None), (SDPA, None)]
    ev, at = _trace(ops)
    assert _widen(ev, [(at[5], at[5])])[0].first == at[3]


def test_without_shapes_projections_separated_by_layout_ops_are_all_the_blocks() -> None:
    ev, at = _trace(_llama(shapes=False))
    # Expected from the docstring: q's projection (1) to the output projection (17), as with shapes.
    assert _widen(ev, [(at[14], at[14])]) == [Extent(at[1], at[17], False)]


def test_a_projection_past_the_sibling_window_is_not_found() -> None:
    # 128 siblings are looked at on each side: 130 layout ops between the projection and the core hide it.
    ops: list[Op] = [("aten::linear", LINEAR), *[("aten::view", None)] * 130, (SDPA, Q), ("aten::linear", LINEAR)]
    ev, at = _trace(ops)
    core = at[-2]
    assert _widen(ev, [(core, core)]) == [Extent(core, at[-1], True, MISSING_BEFORE)]
    near: list[Op] = [("aten::linear", LINEAR), *[("aten::view", None)] * 120, (SDPA, Q), ("aten::linear", LINEAR)]
    ev, at = _trace(near)
    assert _widen(ev, [(at[-2], at[-2])]) == [Extent(at[0], at[-1], False)]


def test_a_block_never_reaches_into_the_previous_block() -> None:
    """Two blocks back to back with nothing between: the first's output projection reads the same
    hidden state as the second's q, k and v, so alone the second block would take it; after the first
    block it cannot."""
    one: list[Op] = [("aten::linear", LINEAR), ("aten::linear", LINEAR), (SDPA, Q), ("aten::view", None),
                     ("aten::linear", LINEAR)]
    ev, at = _trace([*one, *one])
    first, second = (at[2], at[2]), (at[7], at[7])
    # Alone: back over the first block's output projection (4) and the head merge before it (3).
    assert _widen(ev, [second])[0].first == at[3]
    assert _widen(ev, [first, second]) == [Extent(at[0], at[4], False), Extent(at[5], at[9], False)]
    # Without shapes, the same: the projections are told apart by nothing, and the first block still bounds the second.
    ev, at = _trace([(name, None) for name, _ in [*one, *one]])
    first, second = (at[2], at[2]), (at[7], at[7])
    assert _widen(ev, [second])[0].first == at[3]
    assert _widen(ev, [first, second]) == [Extent(at[0], at[4], False), Extent(at[5], at[9], False)]


# -- siblings ----------------------------------------------------------------------------------------

def test_module_events_and_compiled_graph_calls_do_not_part_siblings() -> None:
    """with_stack's ``nn.Module: Linear`` around each projection, and vLLM's piecewise graphs (the
    projections in one graph call, the output projection in the next, the core between them)."""
    events = [_x("user_annotation", "ProfilerStep#1", 0, 10_000),
              _x("user_annotation", "## Call CompiledFxGraph abc ##", 5, 40),
              _x("python_function", "nn.Module: Linear_0", 9, 8), _op("aten::linear", 10, LINEAR),
              _x("python_function", "nn.Module: Linear_1", 19, 8), _op("aten::linear", 20, LINEAR),
              _op("aten::view", 30),
              _op(SDPA, 50, Q),
              _x("user_annotation", "## Call CompiledFxGraph def ##", 55, 40),
              _op("aten::reshape", 60), _op("aten::linear", 70, LINEAR)]
    ev = decode_bytes(json.dumps({"traceEvents": events}).encode())
    core = _at(ev, 50)
    assert _widen(ev, [(core, core)]) == [Extent(_at(ev, 10), _at(ev, 70), False)]


def test_an_op_inside_another_is_no_sibling() -> None:
    # The projections run inside a custom op around them: they are its children, not the core's siblings.
    events = [_x("user_annotation", "ProfilerStep#1", 0, 10_000), _op("my::fused_qkv", 5, None, dur=30),
              _op("aten::linear", 10, LINEAR), _op("aten::linear", 20, LINEAR), _op(SDPA, 50, Q)]
    ev = decode_bytes(json.dumps({"traceEvents": events}).encode())
    core = _at(ev, 50)
    assert _widen(ev, [(core, core)]) == [Extent(core, core, True, MISSING_BOTH)]


# -- forward from the core ----------------------------------------------------------------------------

def test_graph_capture_bookkeeping_after_the_core_is_crossed() -> None:
    # A graph capture's fill_ and Dynamo's cache lookup run between the core and the output projection.
    ops: list[Op] = [("aten::linear", LINEAR), (SDPA, Q), ("aten::fill_", None),
                     ("TorchDynamo Cache Lookup", None), ("aten::view", None), ("aten::linear", LINEAR)]
    ev, at = _trace(ops)
    assert _widen(ev, [(at[1], at[1])]) == [Extent(at[0], at[5], False)]


def test_joint_attention_takes_both_streams_projections() -> None:
    """MMDiT: the image (2 x 48 rows) and the text (2 x 16 rows) are projected apart and attended
    together, q of 64 tokens per sequence: 2 x 64 = 96 + 32 rows. The output projections follow in the
    same order: text (32 rows), then image (96 = 128 - 32)."""
    image, text = [[2, 48, 64], [64, 64], [64]], [[2, 16, 64], [64, 64], [64]]
    joint = [[2, 4, 64, 16]] * 3
    ops: list[Op] = [("aten::linear", image), ("aten::linear", image), ("aten::linear", text),
                     ("aten::linear", text), ("aten::cat", None), (SDPA, joint), ("aten::transpose", None),
                     ("aten::split", None), ("aten::linear", text), ("aten::add", None), ("aten::linear", image),
                     ("aten::add", None)]
    ev, at = _trace(ops)
    assert _widen(ev, [(at[5], at[5])]) == [Extent(at[0], at[10], False)]


def test_a_second_stream_whose_rows_do_not_add_up_is_not_the_blocks() -> None:
    # 2 x 40 + 2 x 16 = 112 rows, not the core's 128 tokens: the other input is another sublayer's.
    image, text = [[2, 40, 64], [64, 64], [64]], [[2, 16, 64], [64, 64], [64]]
    ops: list[Op] = [("aten::linear", image), ("aten::linear", text), ("aten::linear", text),
                     (SDPA, [[2, 4, 64, 16]] * 3), ("aten::view", None), ("aten::linear", text),
                     ("aten::linear", image)]
    ev, at = _trace(ops)
    # Back: the text stream only. Forward: one stream found, so the first output projection ends it.
    assert _widen(ev, [(at[3], at[3])]) == [Extent(at[1], at[5], False)]
