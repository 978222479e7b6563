"""``analysis.graphs`` finds CUDA/HIP graph captures and replays in a trace and says which attention layers and phases
they hide, and whether attention's device share can be given (only where no kernel it needs is missing); the tests
decode tiny hand-built traces of scoped layers whose launches lie inside or outside a capture, and replays."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from tb_attn_plugin.analysis.attribution.attribute import Attribution, attribute
from tb_attn_plugin.analysis.attribution.graphs import GRAPHS_OFF, GraphUse, graph_use
from tb_attn_plugin.analysis.attribution.replays import place_replay_kernels
from tb_attn_plugin.trace.decode import decode_bytes
from tb_attn_plugin.trace.events import Events

CPU = {"pid": 1, "tid": 1}
OTHER_THREAD = {"pid": 1, "tid": 2}
GPU = {"pid": 0, "tid": 7}


def _x(cat: str, name: str, ts: float, dur: float, where: dict[str, int] = CPU, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, **where, "args": args}


def _rt(name: str, ts: float, where: dict[str, int] = CPU, **args: Any) -> dict[str, Any]:
    return _x("cuda_runtime", name, ts, 2, where, **args)


def _phase(layer: int, phase: str, ts: float, corr: int, *, kernel: bool = False) -> list[dict[str, Any]]:
    """A phase scope of 50 µs holding an op that launches one kernel (the kernel in the trace only if
    ``kernel``: a captured launch's kernel never ran)."""
    out = [_x("user_annotation", f"tbattn.v1/L{layer}/{phase}", ts, 50), _x("cpu_op", "aten::bmm", ts + 1, 40),
           _rt("cudaLaunchKernel", ts + 5, correlation=corr)]
    if kernel:
        out.append(_x("kernel", f"kernel_{corr}", ts + 500, 10, GPU, correlation=corr))
    return out


def _layer(layer: int, ts: float, corr: int, *, kernel: bool = False) -> list[dict[str, Any]]:
    """A block of 200 µs: qk_matmul at +1, softmax at +70."""
    return [_x("user_annotation", f"tbattn.v1/L{layer}", ts, 200),
            *_phase(layer, "qk_matmul", ts + 1, corr, kernel=kernel),
            *_phase(layer, "softmax", ts + 70, corr + 1, kernel=kernel)]


def _use(events: list[dict[str, Any]]) -> GraphUse:
    ev = _events(events)
    return graph_use(ev, attribute(ev))


def _events(events: list[dict[str, Any]]) -> Events:
    step = _x("user_annotation", "ProfilerStep#1", 0, 5000)
    return decode_bytes(json.dumps({"traceEvents": [step, *events]}).encode())


# -- no graphs ----------------------------------------------------------------------------------------

def test_a_trace_without_graphs_hides_nothing() -> None:
    use = _use([*_layer(0, 10, 1, kernel=True), *_layer(1, 300, 3, kernel=True)])
    assert use == GraphUse((), (), True) and use.captured_phases == frozenset()


# -- captures -----------------------------------------------------------------------------------------

def test_a_layer_launched_inside_a_capture_is_hidden_and_one_after_it_ran() -> None:
    events = [_rt("cudaStreamBeginCapture", 5), *_layer(0, 10, 1), _rt("cudaStreamEndCapture", 250),
              *_layer(1, 300, 3, kernel=True)]
    use = _use(events)
    assert use.captured == (0,) and not use.device_share_known
    assert use.captured_phases == {(0, "qk_matmul"), (0, "softmax")}
    captured, trace = use.notes
    assert captured.startswith("Layer 0 ran while a CUDA/HIP graph was captured (cudaStreamBeginCapture): the kernels "
                               "launched from qk_matmul and softmax were recorded into the graph, not run")
    assert "ran outside the captures, and their device figures" not in captured  # no phase of layer 0 ran
    assert "span graph pieces" not in captured  # the capture's calls lie outside the block
    assert captured.endswith(f"; {GRAPHS_OFF}")
    assert trace.startswith("This trace was recorded while 1 CUDA/HIP graph was captured (cudaStreamBeginCapture)")
    assert "; layer 1 ran outside the captures (a piecewise graph leaves attention out of its pieces)" in trace


def test_a_piecewise_capture_that_ends_inside_a_block_hides_only_its_phases() -> None:
    """The capture ends between layer 0's qk_matmul (captured) and its softmax (run): the block spans
    graph pieces, and its CPU time holds the capture's own calls."""
    block = _layer(0, 10, 1)
    end = _rt("cudaStreamEndCapture", 65)  # after qk_matmul (11-61), before softmax (80-130), inside L0 (10-210)
    use = _use([_rt("cudaStreamBeginCapture", 5), *block, end])
    assert use.captured == (0,) and use.captured_phases == {(0, "qk_matmul")}
    captured, trace = use.notes
    assert "the kernels launched from qk_matmul were recorded into the graph" in captured
    assert "; softmax ran outside the captures, and their device figures are the kernels that ran" in captured
    assert "; their blocks span graph pieces" in captured
    assert "ran outside the captures (a piecewise graph" not in trace  # every layer had a launch captured


def test_a_capture_without_an_end_runs_to_the_end_of_its_thread() -> None:
    use = _use([*_layer(0, 10, 1, kernel=True), _rt("cudaStreamBeginCapture", 250), *_layer(1, 300, 3)])
    # Layer 0 launched before the capture began; layer 1 after, with no end call.
    assert use.captured == (1,) and use.captured_phases == {(1, "qk_matmul"), (1, "softmax")}
    assert "; layer 0 ran outside the captures" in use.notes[-1]


def test_a_capture_on_another_thread_hides_nothing_of_this_one() -> None:
    events = [_rt("cudaStreamBeginCapture", 5, OTHER_THREAD), *_layer(0, 10, 1, kernel=True),
              _rt("cudaStreamEndCapture", 900, OTHER_THREAD), *_layer(1, 300, 3, kernel=True)]
    use = _use(events)
    assert use.captured == () and use.captured_phases == frozenset()
    (trace,) = use.notes  # no layer note: none was captured
    assert "; layers 0-1 ran outside the captures" in trace
    # The step's device time still misses what the other thread captured: no share.
    assert not use.device_share_known


def test_each_capture_is_counted_and_hip_names_are_read() -> None:
    events = [_rt("hipStreamBeginCapture", 5), *_layer(0, 10, 1), _rt("hipStreamEndCapture", 250),
              _rt("hipStreamBeginCapture", 280), *_layer(1, 300, 3), _rt("hipStreamEndCapture", 550)]
    use = _use(events)
    assert use.captured == (0, 1)
    captured, trace = use.notes
    assert captured.startswith("Layers 0-1 ran while a CUDA/HIP graph was captured (hipStreamBeginCapture)")
    assert trace.startswith("This trace was recorded while 2 CUDA/HIP graphs were captured (hipStreamBeginCapture)")
    assert "ran outside the captures (a piecewise" not in trace


def test_launches_outside_attention_inside_a_capture_hide_no_layer() -> None:
    # The MLP's launch is captured; the attention block runs after the capture ended.
    events = [_rt("cudaStreamBeginCapture", 5), _x("cpu_op", "aten::mm", 6, 3),
              _rt("cudaLaunchKernel", 7, correlation=9), _rt("cudaStreamEndCapture", 9),
              *_layer(0, 10, 1, kernel=True)]
    use = _use(events)
    assert use.captured == () and len(use.notes) == 1 and not use.device_share_known


# -- replays ------------------------------------------------------------------------------------------

def _replay(ts: float, corr: int, *, in_layer: int | None) -> list[dict[str, Any]]:
    """One graph launch (inside layer ``in_layer``'s sdpa scope, or outside attention) whose replay runs
    two kernels."""
    launch = [_rt("cudaGraphLaunch", ts + 2, correlation=corr),
              _x("kernel", "flash_fwd_splitkv_kernel", ts + 100, 20, GPU, correlation=corr),
              _x("kernel", "flash_fwd_splitkv_combine_kernel", ts + 130, 5, GPU, correlation=corr)]
    if in_layer is None:
        return launch
    return [_x("user_annotation", f"tbattn.v1/L{in_layer}", ts, 50),
            _x("user_annotation", f"tbattn.v1/L{in_layer}/sdpa", ts + 1, 40), *launch]


def test_replayed_kernels_of_a_scoped_layer_add_to_it_and_the_share_stands() -> None:
    use = _use(_replay(10, 5, in_layer=0))
    assert use.captured == () and use.device_share_known and use.captured_phases == frozenset()
    (note,) = use.notes
    assert note.startswith("1 CUDA/HIP graph replay (cudaGraphLaunch): layer 0 also ran in the replays")
    assert "those kernels add to their device figures" in note and note.endswith(GRAPHS_OFF)


def _plain_replay(ts: float, corr: int) -> list[dict[str, Any]]:
    """One graph launch outside attention whose replay runs a GEMM and a norm (a vLLM piecewise graph)."""
    return [_rt("cudaGraphLaunch", ts + 2, correlation=corr),
            _x("kernel", "nvjet_tst_64x8_64x16_4x1_v_bz_TNN", ts + 100, 20, GPU, correlation=corr),
            _x("kernel", "triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0", ts + 130, 5, GPU, correlation=corr)]


def test_replays_that_run_no_attention_leave_the_share_standing() -> None:
    """Every attention kernel ran outside the replays (vLLM's piecewise pieces): none is missing, so the
    device share is given."""
    use = _use([*_layer(0, 10, 1, kernel=True), *_plain_replay(400, 7), *_plain_replay(600, 8)])
    assert use.captured == () and use.device_share_known and use.captured_phases == frozenset()
    (note,) = use.notes
    assert note.startswith("2 CUDA/HIP graph replays (cudaGraphLaunch): they ran no attention kernel (a piecewise "
                           "graph leaves attention out of its pieces): the kernels a replay runs belong to its launch")
    assert "so attention's device figures and its share of the device step stand" in note


def test_attention_kernels_a_replay_ran_outside_every_layer_leave_the_share_unknown() -> None:
    """Flash kernels in replays with no layer given them (graph_use reads the attribution as it finds it):
    attention kernels are missing from attention's figures, so no share."""
    use = _use([*_layer(0, 10, 1, kernel=True), *_replay(400, 7, in_layer=None)])
    assert not use.device_share_known
    (note,) = use.notes
    assert "2 attention kernels the replays ran are no layer's, so attention's share of the device step time is " \
           "not given" in note


def _with_layers(ev: Events, attr: Attribution, layer_of: dict[str, int]) -> Attribution:
    """``attr`` with the events named in ``layer_of`` given that layer, in the forward, in no phase:
    what inference from kernels alone (``analysis.replays``) hands over."""
    layer = attr.layer.copy()
    for i in range(len(ev)):
        name = ev.names[int(ev.name[i])]
        if name in layer_of:
            layer[i] = layer_of[name]
    return dataclasses.replace(attr, layer=layer)


def test_layers_found_from_replayed_kernels_alone_are_the_core_only() -> None:
    ev = _events(_replay(10, 5, in_layer=None))
    attr = _with_layers(ev, attribute(ev), {"flash_fwd_splitkv_kernel": 2, "flash_fwd_splitkv_combine_kernel": 2})
    assert not (attr.is_scope & (attr.layer == 2)).any()  # no scope of layer 2: found from kernels only
    use = graph_use(ev, attr)
    assert use.device_share_known and use.captured == ()
    (note,) = use.notes
    assert "no op of the replayed forward is in the trace, so layer 2" in note
    assert "these layers are the attention core only, and they have no CPU time" in note
    assert "also ran in the replays" not in note


def test_captures_and_replays_together_leave_the_share_unknown() -> None:
    events = [_rt("cudaStreamBeginCapture", 5), *_layer(0, 10, 1), _rt("cudaStreamEndCapture", 250),
              *_replay(300, 9, in_layer=1)]
    use = _use(events)
    assert use.captured == (0,) and not use.device_share_known
    assert len(use.notes) == 3 and use.notes[2].startswith("1 CUDA/HIP graph replay (cudaGraphLaunch): layer 1 also")
    assert "; layer 1 ran outside the captures" in use.notes[1]



def test_a_capture_the_trace_replays_hides_nothing() -> None:
    """Layer 0's two launches are captured, and a replay in the trace runs the graph's two kernels:
    ``replays.place_replay_kernels`` gives them layer 0's qk_matmul and softmax (the capture's order), so
    no phase is missing its kernels and the device share is given."""
    events = [_rt("cudaStreamBeginCapture", 5), *_layer(0, 10, 1), _rt("cudaStreamEndCapture", 250),
              _rt("cudaGraphLaunch", 300, correlation=9),
              _x("kernel", "volta_sgemm_128x64_nn", 400, 20, GPU, correlation=9),
              _x("kernel", "softmax_warp_forward", 430, 5, GPU, correlation=9)]
    ev = _events(events)
    attr = attribute(ev)
    place_replay_kernels(ev, attr)
    use = graph_use(ev, attr)
    assert use.captured == (0,) and use.captured_phases == frozenset() and use.device_share_known
    trace, replay = use.notes
    assert trace == ("This trace was recorded while 1 CUDA/HIP graph was captured (cudaStreamBeginCapture): kernels "
                     "launched inside a capture did not run; the replays in this trace ran them all")
    assert replay.startswith("1 CUDA/HIP graph replay (cudaGraphLaunch): layer 0 ran in the replays as the trace "
                             "captured them: each replayed kernel is the layer's and phase's that launched it")


def test_a_capture_no_replay_ran_leaves_the_share_unknown_even_beside_replays() -> None:
    """Two captures, and a replay of one of them: the other's kernels never ran in the trace."""
    events = [_rt("cudaStreamBeginCapture", 5), *_layer(0, 10, 1), _rt("cudaStreamEndCapture", 250),
              _rt("cudaStreamBeginCapture", 260), _rt("cudaLaunchKernel", 270, correlation=7),
              _rt("cudaStreamEndCapture", 280),
              _rt("cudaGraphLaunch", 300, correlation=9),
              _x("kernel", "volta_sgemm_128x64_nn", 400, 20, GPU, correlation=9),
              _x("kernel", "softmax_warp_forward", 430, 5, GPU, correlation=9)]
    ev = _events(events)
    attr = attribute(ev)
    place_replay_kernels(ev, attr)
    use = graph_use(ev, attr)
    assert use.captured_phases == frozenset() and not use.device_share_known
    assert "attention's share of it is not given" in use.notes[0]
