"""``analysis.replays``: the kernels of CUDA/HIP graph replays placed in the layers that launched them.
Without the capture in the trace, attention kernels with the KV write, RoPE and quantization kernels just
before them are placed by their order in each replay; with it, each kernel takes its capture's launch's
layer and phase. Checked on hand-built traces of one launch and its kernels (vLLM's and FlashAttention's
kernel names), and on the hand-written traces ``tests/traces/replay_*.json`` (a captured DiT replayed
beside an eager encoder, aiter's SageAttention replayed beside one, vLLM's decode graphs beside its
prefill), reading each kernel's layer and phase off the attribution."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from analysis_rows import attribution_rows

from tb_attn_plugin.analysis.attribution import replays
from tb_attn_plugin.analysis.attribution.analyze import analyze
from tb_attn_plugin.analysis.attribution.attribute import Attribution, attribute
from tb_attn_plugin.analysis.attribution.replays import (
    Replays,
    captures,
    graph_replays,
    match_captures,
    place_replay_kernels,
)
from tb_attn_plugin.trace.decode import decode_bytes
from tb_attn_plugin.trace.events import Events
from tb_attn_plugin.vocab.scopes import PHASES

CPU = {"pid": 1, "tid": 1}
GEMM = "nvjet_tst_64x8_64x16_4x1_v_bz_TNN"
ROPE = "void vllm::rotary_embedding_kernel<c10::BFloat16, true>(...)"
KV = "void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16>(...)"
CORE = "kernel_unified_attention_2d"
SPLIT = "void flash_fwd_splitkv_kernel<...>"
COMBINE = "void flash_fwd_splitkv_combine_kernel<...>"
#: One decoder layer of a replayed forward.
LAYER = (GEMM, ROPE, KV, CORE, GEMM)
#: Changes made to the attribution before the replays are read.
Before = Callable[[Events, Attribution], None]
SDPA, KV_CACHE, ROPE_PHASE = PHASES.index("sdpa"), PHASES.index("kv_cache"), PHASES.index("rope")


def _launch(corr: int, ts: float, name: str = "cudaGraphLaunch") -> dict[str, Any]:
    return {"ph": "X", "cat": "cuda_runtime", "name": name, "ts": ts, "dur": 5, **CPU, "args": {"correlation": corr}}


def _kernels(corr: int, t0: float, names: tuple[str, ...] | list[str], stream: int = 7) -> list[dict[str, Any]]:
    """Kernels one after another on one stream, 10 µs each with 1 µs between them."""
    return [{"ph": "X", "cat": "kernel", "name": n, "ts": t0 + 11 * k, "dur": 10, "pid": 0, "tid": stream,
             "args": {"correlation": corr}} for k, n in enumerate(names)]


def _run(events: list[dict[str, Any]], before: Before | None = None) -> tuple[Events, Attribution, Replays]:
    ev = decode_bytes(json.dumps({"traceEvents": events}).encode())
    attr = attribute(ev)
    if before is not None:
        before(ev, attr)
    return ev, attr, place_replay_kernels(ev, attr)


def _placed(ev: Events, attr: Attribution) -> list[tuple[str, int, int]]:
    """(kernel, layer, phase) of every device event, in device time order."""
    rows = [i for i in range(len(ev)) if ev.tracks[ev.track[i]].device]
    rows.sort(key=lambda i: float(ev.ts[i]))
    return [(ev.names[ev.name[i]], int(attr.layer[i]), int(attr.phase[i])) for i in rows]


def test_a_replay_of_three_layers_places_each_core_with_its_kv_write_and_rope() -> None:
    ev, attr, found = _run([_launch(100, 0), *_kernels(100, 100, LAYER * 3)])
    assert found == Replays(frozenset({0, 1, 2}), 1)
    expected = []
    for layer in range(3):
        expected += [(GEMM, -1, -1), (ROPE, layer, ROPE_PHASE), (KV, layer, KV_CACHE), (CORE, layer, SDPA),
                     (GEMM, -1, -1)]  # GEMMs: nothing in a name tells the projection from the MLP's
    assert _placed(ev, attr) == expected


def test_every_replay_numbers_its_layers_from_zero() -> None:
    """One launch per step, two layers each: layers 0 and 1 in both, and two replays."""
    ev, attr, found = _run([_launch(100, 0), *_kernels(100, 100, LAYER * 2),
                            _launch(101, 5000), *_kernels(101, 5100, LAYER * 2)])
    assert found == Replays(frozenset({0, 1}), 2)
    cores = [(layer, phase) for name, layer, phase in _placed(ev, attr) if name == CORE]
    assert cores == [(0, SDPA), (1, SDPA), (0, SDPA), (1, SDPA)]


def test_a_split_kv_core_and_its_combine_are_one_layers_core() -> None:
    ev, attr, found = _run([_launch(100, 0), *_kernels(100, 100, (GEMM, KV, SPLIT, COMBINE, GEMM) * 2)])
    assert found == Replays(frozenset({0, 1}), 1)
    layers = [(name, layer) for name, layer, _ in _placed(ev, attr) if name in (SPLIT, COMBINE)]
    assert layers == [(SPLIT, 0), (COMBINE, 0), (SPLIT, 1), (COMBINE, 1)]


def test_a_replay_without_an_attention_kernel_places_nothing() -> None:
    """A piecewise graph of GEMMs and a RoPE: no core, so the RoPE stays unplaced and no replay counts."""
    ev, attr, found = _run([_launch(100, 0), *_kernels(100, 100, (GEMM, ROPE, KV, GEMM, "fused_moe_kernel"))])
    assert found == Replays(frozenset(), 0)
    assert all(layer == -1 for _, layer, _ in _placed(ev, attr))


@pytest.mark.parametrize("events", [
    # an ordinary launch of an attention kernel: no graph in the trace
    [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 0, "dur": 5, **CPU,
      "args": {"correlation": 100}}, *_kernels(100, 100, LAYER)],
    # a graph launch without a correlation id: its kernels cannot be told
    [{**_launch(100, 0), "args": {}}, *_kernels(100, 100, LAYER)],
    # a graph launch whose kernels are not in the trace (another correlation's are)
    [_launch(100, 0), *_kernels(999, 100, LAYER)],
    # no events at all but a launch
    [_launch(100, 0)],
], ids=["no-graph", "no-correlation", "no-kernels", "launch-only"])
def test_nothing_to_read_finds_nothing_and_changes_nothing(events: list[dict[str, Any]]) -> None:
    _, attr, found = _run(events)
    assert found == Replays(frozenset(), 0)
    assert (attr.layer == -1).all() and (attr.phase == -1).all()


def test_a_hip_graph_replay_is_read_like_a_cuda_one() -> None:
    ev, attr, found = _run([_launch(100, 0, "hipGraphLaunch"), *_kernels(100, 100, LAYER * 2)])
    assert found == Replays(frozenset({0, 1}), 1)
    assert [layer for name, layer, _ in _placed(ev, attr) if name in (ROPE, KV, CORE)] == [0, 0, 0, 1, 1, 1]


def test_kernels_another_launch_ran_are_not_read() -> None:
    """A graph replay next to an ordinary launch of an attention kernel: only the replay's core is placed."""
    plain = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 50, "dur": 5, **CPU,
             "args": {"correlation": 7}}
    ev, attr, found = _run([_launch(100, 0), plain, *_kernels(100, 100, LAYER), *_kernels(7, 1000, (CORE,))])
    assert found == Replays(frozenset({0}), 1)
    cores = [layer for name, layer, _ in _placed(ev, attr) if name == CORE]
    assert cores == [0, -1]  # the replay's (t=133), then the ordinary launch's (t=1000)


def test_kernels_are_read_in_device_time_order_across_streams() -> None:
    """RoPE and the core on stream 7, the KV write between them in time on stream 8: file order (by
    stream) would put the KV write after the core; device order puts it just before."""
    events = [_launch(100, 0),
              *_kernels(100, 100, (GEMM, ROPE)),  # t=100, 111
              *_kernels(100, 122, (KV,), stream=8),  # t=122
              *_kernels(100, 133, (CORE,))]  # t=133
    ev, attr, found = _run(events)
    assert found == Replays(frozenset({0}), 1)
    assert _placed(ev, attr) == [(GEMM, -1, -1), (ROPE, 0, ROPE_PHASE), (KV, 0, KV_CACHE), (CORE, 0, SDPA)]


def test_only_the_four_kernels_just_before_a_core_are_looked_at() -> None:
    """Five RoPE/KV kernels in a row before a core: the four nearest are its, the fifth is too far."""
    names = (GEMM, ROPE, ROPE, ROPE, ROPE, KV, CORE)
    ev, attr, _ = _run([_launch(100, 0), *_kernels(100, 100, names)])
    assert [layer for _, layer, _ in _placed(ev, attr)] == [-1, -1, 0, 0, 0, 0, 0]


def test_the_look_back_stops_at_the_first_kernel_that_is_neither() -> None:
    """RoPE, then a GEMM, then the KV write, then the core: the RoPE is behind a GEMM, so not the layer's."""
    ev, attr, _ = _run([_launch(100, 0), *_kernels(100, 100, (ROPE, GEMM, KV, CORE))])
    assert _placed(ev, attr) == [(ROPE, -1, -1), (GEMM, -1, -1), (KV, 0, KV_CACHE), (CORE, 0, SDPA)]


def test_a_kernel_already_placed_is_never_taken() -> None:
    """The first core already has a layer (a scope placed it): it is left as it is and not read, so the
    replay's next core is the first of its own layers, numbered after layer 9 (the replayed kernel of layer
    9 is no kernel of layer 9's own, so nothing says the replayed model is layer 9's), and the KV write and
    RoPE before the placed core stay unplaced."""
    def place_first_core(ev: Events, attr: Attribution) -> None:
        first = min((i for i in range(len(ev)) if ev.names[ev.name[i]] == CORE), key=lambda i: float(ev.ts[i]))
        attr.layer[first], attr.phase[first] = 9, PHASES.index("qk_matmul")

    ev, attr, found = _run([_launch(100, 0), *_kernels(100, 100, LAYER * 2)], before=place_first_core)
    assert found == Replays(frozenset({10}), 1)
    assert _placed(ev, attr) == [(GEMM, -1, -1), (ROPE, -1, -1), (KV, -1, -1), (CORE, 9, PHASES.index("qk_matmul")),
                                 (GEMM, -1, -1), (GEMM, -1, -1), (ROPE, 10, ROPE_PHASE), (KV, 10, KV_CACHE),
                                 (CORE, 10, SDPA), (GEMM, -1, -1)]


def test_cores_past_the_layer_bound_are_not_placed(monkeypatch: pytest.MonkeyPatch) -> None:
    """With room for two layers, a replay's third core and the kernels before it stay unplaced."""
    monkeypatch.setattr(replays, "MAX_LAYERS", 2)
    ev, attr, found = _run([_launch(100, 0), *_kernels(100, 100, LAYER * 3)])
    assert found == Replays(frozenset({0, 1}), 1)
    assert [layer for name, layer, _ in _placed(ev, attr) if name == CORE] == [0, 1, -1]
    assert [layer for name, layer, _ in _placed(ev, attr) if name == KV] == [0, 1, -1]


# -- whose layers replayed kernels are: the hand-written traces (tests/traces/replay_*.json) --------------

def _analyzed(trace_events: Callable[[str], Events], name: str) -> tuple[Events, Attribution, list[dict[str, Any]]]:
    analysis = analyze(trace_events(name))
    rows = attribution_rows(analysis.events, analysis.attr)
    return analysis.events, analysis.attr, rows["events"]


def _where(rows: list[dict[str, Any]], name: str) -> list[tuple[int | None, str | None]]:
    """(layer, phase) of every event named ``name``, in time order."""
    return [(r["layer"], r["phase"]) for r in sorted((r for r in rows if r["name"] == name), key=lambda r: r["ts"])]


FMHA = "_ZN5aiter24fmha_fwd_hd128_bf16_rtneE"  # aiter's fmha v3 kernel (hsa/gfx942/fmha_v3_fwd/fmha_fwd.csv)
ROCM_GEMM_PREFIX = "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_"  # hipBLASLt's, as vLLM's ROCm trace has them


def test_a_captured_dit_replays_into_the_layers_that_launched_its_kernels(
        trace_events: Callable[[str], Events], golden: Callable[[str, Any], None]) -> None:
    """``replay_capture.json`` (ROCm, MI300X): a text encoder's SDPA call ran eagerly (layer 0, its
    ``attn_fwd`` kernel), then a 3-layer DiT ran while ``hipStreamBeginCapture`` captured it (layers
    1-3, found by their ops: a qkv ``linear`` and ``aiter::fmha_v3_fwd`` each, whose launches made 6
    nodes), then ``hipGraphLaunch`` replayed it: 6 kernels, one for each node, in the capture's order.
    The k-th replayed kernel is the k-th launch's: GEMMs to 1-3's qkv_proj, fmha kernels to their
    sdpa. Not to 0-2 by their order in the replay, as the runs of attention kernels alone would say."""
    ev, attr, rows = _analyzed(trace_events, "replay_capture")
    golden("replay_capture", attribution_rows(ev, attr))
    gemms = [n for n in ev.names if n.startswith(ROCM_GEMM_PREFIX)]
    assert len(gemms) == 1
    replayed_gemms = [r for r in rows if r["name"] == gemms[0] and r["track"] == "2/0"]
    assert [(r["layer"], r["phase"]) for r in sorted(replayed_gemms, key=lambda r: r["ts"])] == \
        [(1, "qkv_proj"), (2, "qkv_proj"), (3, "qkv_proj")]
    assert _where(rows, FMHA) == [(1, "sdpa"), (2, "sdpa"), (3, "sdpa")]
    assert _where(rows, "attn_fwd") == [(0, "sdpa")]  # the eager encoder keeps its own kernel


def test_replays_beside_an_eager_model_are_layers_of_their_own(
        trace_events: Callable[[str], Events], golden: Callable[[str, Any], None]) -> None:
    """``replay_sage.json`` (ROCm): two eager text-encoder layers (SDPA's ``attn_fwd``), then two
    replays of a 2-layer DiT running aiter's SageAttention (``sage_quant_kernel`` then ``sage_fwd``;
    aiter/ops/triton/_triton_kernels/attention/fav3_sage_attention.py, .../quant/sage_attention_quant.py)
    and no capture in the trace. The replays' runs name aiter-sage, the encoder's own kernels rocm-flash:
    another model, so the DiT's layers are 2 and 3, each with its quantize kernel, never 0 and 1."""
    ev, attr, rows = _analyzed(trace_events, "replay_sage")
    golden("replay_sage", attribution_rows(ev, attr))
    assert _where(rows, "sage_fwd") == [(2, "sdpa"), (3, "sdpa"), (2, "sdpa"), (3, "sdpa")]
    assert _where(rows, "sage_quant_kernel") == [(2, "quantize"), (3, "quantize"), (2, "quantize"), (3, "quantize")]
    assert _where(rows, "attn_fwd") == [(0, "sdpa"), (1, "sdpa")]
    assert all(r["layer"] is None for r in rows if r["name"].startswith(ROCM_GEMM_PREFIX))


def test_replays_of_the_model_found_eagerly_add_to_its_layers(
        trace_events: Callable[[str], Events], golden: Callable[[str, Any], None]) -> None:
    """``replay_same_model.json`` (CUDA, H100): vLLM's eager prefill runs two layers, each its
    ``unified_attention_with_output`` and ``kernel_unified_attention_2d``; two decode iterations replay a
    full graph (``graph id`` 3) whose runs are the same kernel: the same model, so each replay's k-th
    core, with the KV write before it, is layer k."""
    ev, attr, rows = _analyzed(trace_events, "replay_same_model")
    golden("replay_same_model", attribution_rows(ev, attr))
    assert _where(rows, "kernel_unified_attention_2d") == [(0, "sdpa"), (1, "sdpa"), (0, "sdpa"), (1, "sdpa"),
                                                           (0, "sdpa"), (1, "sdpa")]
    kv = next(n for n in ev.names if "reshape_and_cache_flash_kernel" in n)
    assert _where(rows, kv) == [(0, "kv_cache"), (1, "kv_cache")] * 2
    assert set(ev.graph[ev.graph >= 0].tolist()) == {3}


# -- matching replays to captures ------------------------------------------------------------------------

def _capture(ts: float, corr: int, kernels: int) -> list[dict[str, Any]]:
    """A capture of ``kernels`` launches, each inside a scoped layer of its own (layer = corr + k)."""
    out = [{"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamBeginCapture", "ts": ts, "dur": 1, **CPU,
            "args": {"correlation": corr}}]
    for k in range(kernels):
        t = ts + 10 + 20 * k
        out += [{"ph": "X", "cat": "user_annotation", "name": f"tbattn.v1/L{corr + k}/sdpa", "ts": t, "dur": 10, **CPU,
                 "args": {}},
                {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": t + 1, "dur": 2, **CPU,
                 "args": {"correlation": corr + 1 + k}}]
    out.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamEndCapture", "ts": ts + 10 + 20 * kernels,
                "dur": 1, **CPU, "args": {"correlation": corr + 100}})
    return out


def _graph_kernels(corr: int, t0: float, names: tuple[str, ...], graph: int | None) -> list[dict[str, Any]]:
    out = _kernels(corr, t0, names)
    if graph is not None:
        for n, k in enumerate(out):
            k["args"] |= {"graph id": graph, "graph node id": n + 1}
    return out


def _matches(events: list[dict[str, Any]]) -> list[tuple[int, bool]]:
    ev = decode_bytes(json.dumps({"traceEvents": events}).encode())
    attr = attribute(ev)
    return [tuple(m) for m in match_captures(ev, attr, graph_replays(ev), captures(ev))]  # type: ignore[misc]


def test_graph_ids_match_the_last_captures_from_the_last_backwards() -> None:
    """Two captures of one kernel each, and replays of graphs 4, 9 and 10 of one kernel: graphs are
    numbered as they are made, so 10 is the last capture's, 9 the one before, and 4 (made before the
    trace began) none, not even by its layers: both captures are other graphs'. A replay of graph 10 again
    takes capture 1 whatever the turn."""
    events = [*_capture(0, 10, 1), *_capture(100, 20, 1),
              _launch(300, 1000), *_graph_kernels(300, 1100, (CORE,), 9),
              _launch(301, 2000), *_graph_kernels(301, 2100, (CORE,), 10),
              _launch(302, 3000), *_graph_kernels(302, 3100, (CORE,), 4),
              _launch(303, 4000), *_graph_kernels(303, 4100, (CORE,), 10)]
    assert _matches(events) == [(0, True), (1, True), (-1, False), (1, True)]


def test_without_graph_ids_replays_of_a_size_take_its_captures_in_turn() -> None:
    """vLLM replays its piecewise graphs in the order it captured them: the replays of one kernel take
    the captures of one kernel in turn; the replay of two kernels takes the capture of two."""
    events = [*_capture(0, 10, 1), *_capture(100, 20, 1), *_capture(200, 30, 2),
              _launch(400, 1000), *_kernels(400, 1100, (CORE,)),
              _launch(401, 2000), *_kernels(401, 2100, (CORE, CORE)),
              _launch(402, 3000), *_kernels(402, 3100, (CORE,)),
              _launch(403, 4000), *_kernels(403, 4100, (CORE,))]
    assert _matches(events) == [(0, True), (2, True), (1, True), (0, True)]


def test_a_replay_before_its_capture_or_of_another_shape_is_no_captures() -> None:
    """A replay launched before the capture began, and one with a memcpy where the capture launched a
    kernel: neither matches one for one. The second has one run of attention kernels, the capture one
    attention layer: matched by its layers."""
    memcpy = {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD (Device -> Device)", "ts": 2200, "dur": 3,
              "pid": 0, "tid": 7, "args": {"correlation": 401}}
    events = [_launch(400, 0), *_kernels(400, 50, (CORE,)), *_capture(100, 10, 1),
              _launch(401, 2000), *_kernels(401, 2100, (CORE,)), memcpy]
    assert _matches(events) == [(-1, False), (0, False)]
