"""The summary's types: frozen msgspec structs that round-trip through msgpack and JSON, and
``to_json``, which writes any response body as JSON even with a lone surrogate in it. The tests
build one run summary holding every struct of the module, every field set by hand, and check
that each struct refuses assignment, that both encodings give the same summary back, and what
``to_json`` writes for names that no UTF-8 encoder takes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest

from tb_attn_plugin.types import schema
from tb_attn_plugin.types.encoding import to_json
from tb_attn_plugin.types.schema import (
    SPREAD_KEYS,
    SUMMARY_SCHEMA,
    AttnStats,
    Backward,
    CollectiveStats,
    Evidence,
    FileError,
    Finding,
    Fit,
    Generation,
    GenerationPhase,
    HeadAttention,
    HeadStats,
    LayerMask,
    LayerStats,
    PhaseStats,
    Roof,
    Roofline,
    RunSummary,
    ServingBatch,
    Spread,
    StepStats,
    TokenStats,
    WorkerSummary,
)


def _spread(median: float) -> Spread:
    return Spread(median=median, lo=median - 1.0, hi=median + 2.0, kind="range", steps=3, noisy=True)


def _roof(time_us: float) -> Roof:
    return Roof(dtype="bf16", time_us=time_us, launches=4.0, intensity=12.5, flops_per_s=2.5e12, bytes_per_s=2e11,
                ceiling=5e12, share=0.5, verdict="memory-bound", lower_bound=True)


def _phase() -> PhaseStats:
    return PhaseStats(phase="softmax", calls=1.0, cpu_us=30.0, cpu_self_us=25.0, device_us=12.0, kernels=2.0,
                      kernel_names=["softmax_warp_forward"], ops=["aten::softmax"], op_count=1.0, flops=8192.0,
                      flops_per_s=6.8e8, iops=0.0, alloc_bytes=16384.0, freed_bytes=8192.0, peak_bytes=16384,
                      sxs_bytes=16384.0, sxs_allocs=1.0, sxs_mask_bytes=4096.0, sxs_mask_allocs=1.0,
                      backward=Backward(calls=1.0, cpu_us=40.0, device_us=20.0, flops=16384.0),
                      spread={"cpu_us": _spread(30.0)}, bytes=32768.0, unmodeled_ops=0.5, dtype="fp32",
                      roof=_roof(12.0), captured=False)


def _layer(layer: int) -> LayerStats:
    return LayerStats(
        layer=layer, module=f"model.layers.{layer}.attn", backend="naive", backend_evidence=["aten::softmax"],
        inferred=False, core_only=False, calls=1.0, cpu_us=120.0, device_us=50.0, flops=1.5e6, flops_per_s=3e10,
        iops=0.0, alloc_bytes=65536.0, peak_bytes=32768, sxs_bytes=16384.0, sxs_mask_bytes=4096.0,
        score_tensor_bytes=16384, score_shape=[1, 4, 32, 32], heads_count=4, phases=[_phase()],
        heads=[HeadStats(head=0, derived=False, cpu_us=30.0, device_us=12.5, flops=3.75e5, alloc_bytes=16384.0,
                         sxs_bytes=4096.0, spread={"device_us": _spread(12.5)})],
        backward=Backward(calls=2.0, cpu_us=200.0, device_us=80.0, flops=3e6), spread={"cpu_us": _spread(120.0)},
        mask=LayerMask(spec="sliding:8", kept=0.25, blocks=1.0, dense_flops=1.5e6, mask_flops=3.75e5,
                       work_flops=1.5e6, dense_work=True, core_us=40.0, dense_equiv_us=40.0, local=True),
        bytes=131072.0, roof=_roof(50.0))


def _generation() -> Generation:
    token = TokenStats(step=2, role="decode", context=33, queries=1, step_us=900.0, attention_us=300.0,
                       core_us=100.0, kv_cache_us=20.0, kv_bytes=8448.0, read_bytes=8448.0, kv_alloc_bytes=256.0,
                       launches=12.0, flops=4096.0)
    phase = GenerationPhase(steps=1, step_us=900.0, attention_us=300.0, core_us=100.0, kv_cache_us=20.0,
                            kv_bytes=8448.0, launches=12.0, flops=4096.0, layers=[_layer(1)], roof=_roof(300.0))
    return Generation(source="scopes", clock="cpu", kv_cache="dynamic", prompt_len=32, batch=1, heads=4, kv_heads=2,
                      head_dim=8, kv_dtype="float32", prefill=phase, decode=phase, tokens=[token],
                      fit=Fit(a=0.5, k=1.25, r2=None, points=2), fit_note="contexts span under 2x",
                      per_key_us=0.25, fixed_us=50.0, kv_bytes_per_layer=4224.0, kv_bytes_per_head=2112.0,
                      kv_bytes_per_token=256.0, kv_memory="agrees", realloc_bytes_per_token=8192.0,
                      read_bytes_per_token=8448.0, achieved_bytes_per_s=8.4e7, reference_bytes_per_s=1e10,
                      reference="the runner's copy probe")


def _finding() -> Finding:
    return Finding(id="hidden-copy", severity="medium", title="a copy", explanation="it copies",
                   suggestion="do not", evidence=Evidence(layers=[0, 1], ops=["aten::copy_"], kernels=["copy_kernel"],
                                                         time_us=15.0, bytes=4096.0,
                                                         details={"count": 3, "share": 0.5, "where": "qkv"}))


def _worker() -> WorkerSummary:
    return WorkerSummary(
        schema=SUMMARY_SCHEMA, file="host_rank1.17.pt.trace.json", worker="host_rank1", span="17", device="cuda",
        inferred=False, backend="naive", steps=[3, 4], step_count=2, step_cpu_us=1000.0, step_device_us=800.0,
        attention_cpu_us=240.0, attention_device_us=100.0, attention_share_cpu=0.24, attention_share_device=0.125,
        layers=[_layer(0)],
        per_step=[StepStats(step=3, cpu_us=1000.0, device_us=800.0, attention_cpu_us=240.0, attention_device_us=100.0,
                            attention_comm_cpu_us=10.0, attention_comm_device_us=5.0)],
        diagnostics={"unmatched": 2}, notes=["a note"], findings=[_finding()], rank=1, world_size=2,
        collectives=[CollectiveStats(name="all_reduce", calls=2.0, cpu_us=30.0, device_us=60.0)],
        spread={"step_cpu_us": _spread(1000.0)}, headline="attention takes 24%", generation=_generation(),
        roofline=Roofline(device="NVIDIA H100 80GB HBM3", source="table", clock="device",
                          peak_flops={"bf16": 9.89e14, "fp32": 6.7e13}, peak_bytes_per_s=3.35e12, launch_us=4.0,
                          note="dense peaks", attention=_roof(100.0)),
        gpu="CUDA · NVIDIA H100 80GB HBM3", memory_recorded=False,
        serving=ServingBatch(annotation="execute_model", iterations=2.0, prefill_requests=1.0, prefill_tokens=128.0,
                             decode_requests=3.0, decode_tokens=3.0, pairs=8256.0, fewest_pairs=8256.0,
                             decode_keys=600.0, kv_bytes_per_token=512.0, kv_dtype="bfloat16",
                             decode_kv_bytes=614400.0, decode_core_us=80.0, decode_roof_us=0.25,
                             sentences=["three decodes per step"]))


def _summary() -> RunSummary:
    stats = AttnStats(step=10, weights="checkpoint", stats=["entropy", "window_64"], window=64, threshold=0.99,
                      sink_mass=0.5,
                      heads=[HeadAttention(layer=0, head=1, values={"entropy": 0.5, "window_64": 0.995}, local=True,
                                           sink=False)],
                      files=["events.out.tfevents.1"], note="from a checkpoint")
    return RunSummary(schema=SUMMARY_SCHEMA, run="builtin/naive/seq32",
                      metadata={"config": {"seq": 32, "causal": True}, "peaks": [1.5, None], "user": "é"},
                      workers=[_worker()], errors=[FileError(file="bad.pt.trace.json", error="truncated")],
                      attn_stats=stats)


def _structs(value: Any) -> Iterator[msgspec.Struct]:
    """Every struct inside ``value``, ``value`` included, walked without recursion."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, msgspec.Struct):
            yield item
            stack.extend(getattr(item, f) for f in item.__struct_fields__)
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


SCHEMA_STRUCTS = {v for v in vars(schema).values()
                  if isinstance(v, type) and issubclass(v, msgspec.Struct) and v.__module__ == schema.__name__}


def test_the_summary_built_here_holds_every_struct_of_the_schema() -> None:
    assert {type(s) for s in _structs(_summary())} == SCHEMA_STRUCTS
    assert len(SCHEMA_STRUCTS) == 22


@pytest.mark.parametrize("cls", sorted(SCHEMA_STRUCTS, key=lambda c: c.__name__), ids=lambda c: c.__name__)
def test_every_summary_struct_is_frozen(cls: type[msgspec.Struct]) -> None:
    instance = next(s for s in _structs(_summary()) if type(s) is cls)
    assert cls.__struct_config__.frozen
    for name in instance.__struct_fields__:
        before = getattr(instance, name)
        with pytest.raises(AttributeError):
            setattr(instance, name, before)
        with pytest.raises(AttributeError):
            delattr(instance, name)
        assert getattr(instance, name) is before


def test_replace_gives_a_changed_copy_and_leaves_the_original() -> None:
    summary = _summary()
    renamed = msgspec.structs.replace(summary, run="other")
    assert (renamed.run, summary.run) == ("other", "builtin/naive/seq32")
    assert renamed.workers is summary.workers  # a shallow copy: the rest is shared, and frozen


def test_a_summary_round_trips_through_msgpack_unchanged() -> None:
    summary = _summary()
    back = msgspec.msgpack.decode(msgspec.msgpack.encode(summary), type=RunSummary)
    assert back == summary
    assert msgspec.msgpack.encode(back) == msgspec.msgpack.encode(summary)


def test_a_summary_round_trips_through_json_unchanged() -> None:
    summary = _summary()
    body = to_json(summary)
    assert body == msgspec.json.encode(summary)  # nothing to escape: the fallback is not taken
    back = msgspec.json.decode(body, type=RunSummary)
    assert back == summary
    details = back.workers[0].findings[0].evidence.details
    assert type(details["count"]) is int and type(details["share"]) is float  # 3 stays 3, 0.5 stays 0.5
    plain = json.loads(body)  # what a client reads: every field by its name
    assert plain["schema"] == "tb-attn.summary/1" and plain["workers"][0]["layers"][0]["score_shape"] == [1, 4, 32, 32]
    assert plain["workers"][0]["generation"]["fit"] == {"a": 0.5, "k": 1.25, "r2": None, "points": 2}


def test_defaults_fill_the_optional_fields() -> None:
    summary = RunSummary(run="r", metadata=None, workers=[], errors=[])
    assert (summary.schema, summary.attn_stats) == (SUMMARY_SCHEMA, None)
    back = msgspec.json.decode(b'{"run": "r", "metadata": null, "workers": [], "errors": []}', type=RunSummary)
    assert back == summary


def test_empty_mutable_defaults_are_not_shared_between_instances() -> None:
    """A frozen struct's fields cannot be reassigned, but a default dict could still be mutated:
    one shared by every instance would leak between summaries."""
    a = HeadStats(head=0, derived=True, cpu_us=1.0, device_us=0.0, flops=0.0, alloc_bytes=0.0, sxs_bytes=0.0)
    b = HeadStats(head=1, derived=True, cpu_us=1.0, device_us=0.0, flops=0.0, alloc_bytes=0.0, sxs_bytes=0.0)
    a.spread["cpu_us"] = _spread(1.0)
    assert b.spread == {} and a.spread is not b.spread


def test_a_summary_missing_a_field_or_of_a_wrong_type_is_refused_clearly() -> None:
    with pytest.raises(msgspec.ValidationError, match="missing required field `metadata`"):
        msgspec.json.decode(b'{"run": "r", "workers": [], "errors": []}', type=RunSummary)
    with pytest.raises(msgspec.ValidationError, match=r"Expected `array`, got `str` - at `\$.workers`"):
        msgspec.json.decode(b'{"run": "r", "metadata": null, "workers": "x", "errors": []}', type=RunSummary)
    with pytest.raises(msgspec.ValidationError, match=r"at `\$.errors\[0\].error`"):
        msgspec.json.decode(b'{"run": "r", "metadata": null, "workers": [], "errors": [{"file": "f", "error": 1}]}',
                            type=RunSummary)


def test_structs_take_keywords_only() -> None:
    with pytest.raises(TypeError):
        FileError("f", "e")  # type: ignore[misc]


def test_spread_keys_are_distinct_time_figures() -> None:
    assert len(set(SPREAD_KEYS)) == len(SPREAD_KEYS) == 8
    assert all(k.endswith("_us") for k in SPREAD_KEYS)
    # The layer and phase figures are their own fields; the step and attention ones are a worker's.
    assert {"cpu_us", "device_us"} <= set(LayerStats.__struct_fields__) & set(PhaseStats.__struct_fields__)
    assert {"step_cpu_us", "step_device_us", "attention_cpu_us", "attention_device_us"} <= set(
        WorkerSummary.__struct_fields__)
