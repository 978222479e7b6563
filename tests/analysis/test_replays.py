"""``analysis.replays.place_replay_kernels``: attention kernels of CUDA/HIP graph replays, with the KV
write and RoPE kernels just before them, placed in layers by their order in each replay. Checked on
hand-built traces of one launch and its kernels (vLLM's and FlashAttention's kernel names), reading
each kernel's layer and phase off the attribution it writes into."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from tb_attn_plugin.analysis import replays
from tb_attn_plugin.analysis.attribute import Attribution, attribute
from tb_attn_plugin.analysis.replays import Replays, place_replay_kernels
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
    replay's next core is its layer 0, and the KV write and RoPE before the placed core stay unplaced."""
    def place_first_core(ev: Events, attr: Attribution) -> None:
        first = min((i for i in range(len(ev)) if ev.names[ev.name[i]] == CORE), key=lambda i: float(ev.ts[i]))
        attr.layer[first], attr.phase[first] = 9, PHASES.index("qk_matmul")

    ev, attr, found = _run([_launch(100, 0), *_kernels(100, 100, LAYER * 2)], before=place_first_core)
    assert found == Replays(frozenset({0}), 1)
    assert _placed(ev, attr) == [(GEMM, -1, -1), (ROPE, -1, -1), (KV, -1, -1), (CORE, 9, PHASES.index("qk_matmul")),
                                 (GEMM, -1, -1), (GEMM, -1, -1), (ROPE, 0, ROPE_PHASE), (KV, 0, KV_CACHE),
                                 (CORE, 0, SDPA), (GEMM, -1, -1)]


def test_cores_past_the_layer_bound_are_not_placed(monkeypatch: pytest.MonkeyPatch) -> None:
    """With room for two layers, a replay's third core and the kernels before it stay unplaced."""
    monkeypatch.setattr(replays, "MAX_LAYERS", 2)
    ev, attr, found = _run([_launch(100, 0), *_kernels(100, 100, LAYER * 3)])
    assert found == Replays(frozenset({0, 1}), 1)
    assert [layer for name, layer, _ in _placed(ev, attr) if name == CORE] == [0, 1, -1]
    assert [layer for name, layer, _ in _placed(ev, attr) if name == KV] == [0, 1, -1]
