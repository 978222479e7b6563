"""``analysis.generation_findings``: the rules on decode steps (the cache copied whole, memory-bound and
dispatch-bound decode, fewer KV heads, K and V expanded, a KV cache built in training). Each rule runs
on a ``RuleQuery`` over a tiny four-step trace whose summary carries a hand-built ``Generation`` (three
decode steps), so every share, time and threshold is worked by hand from the figures given."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from tb_attn_plugin.analysis.attribution.analyze import Analysis, analyze
from tb_attn_plugin.analysis.attribution.query import RuleQuery
from tb_attn_plugin.analysis.findings import generation_findings as gf
from tb_attn_plugin.analysis.summary import summarize_analysis
from tb_attn_plugin.trace.decode import decode_bytes
from tb_attn_plugin.types.schema import (
    Backward,
    Finding,
    Generation,
    GenerationPhase,
    LayerStats,
    StepStats,
    TokenStats,
    WorkerSummary,
)

replace = msgspec.structs.replace
CPU = {"pid": 1, "tid": 1}
MIB = 1 << 20
#: The profiled steps of the base trace; the hand-built generation has DECODE_STEPS decode steps among them.
STEPS, DECODE_STEPS = 4, 3
Base = tuple[Analysis, WorkerSummary]


def _x(cat: str, name: str, ts: float, dur: float) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, **CPU, "args": {}}


@pytest.fixture(scope="module")
def base() -> Base:
    """Four steps of one block with a kv_cache phase: the steps ``time_us`` divides by, and a template
    layer the hand-built ones are made from."""
    events = []
    for n in range(STEPS):
        t0 = 1000.0 * n
        events += [_x("user_annotation", f"ProfilerStep#{n + 1}", t0, 1000),
                   _x("user_annotation", "tbattn.v1/L0", t0 + 10, 100),
                   _x("user_annotation", "tbattn.v1/L0/kv_cache", t0 + 11, 30),
                   _x("cpu_op", "aten::cat", t0 + 12, 20)]
    analysis = analyze(decode_bytes(json.dumps({"traceEvents": events}).encode()))
    summary = summarize_analysis(analysis)
    assert summary.steps == [1, 2, 3, 4] and [x.layer for x in summary.layers] == [0]
    return analysis, summary


def _decode(**changes: Any) -> GenerationPhase:
    """Decode means per step: 1 ms steps, 200 µs of attention (100 µs core, 40 µs appending), a 4 MiB cache."""
    fields: dict[str, Any] = dict(steps=DECODE_STEPS, step_us=1000.0, attention_us=200.0, core_us=100.0,
                                  kv_cache_us=40.0, kv_bytes=4.0 * MIB, launches=40.0, flops=1e6, layers=[])
    return GenerationPhase(**{**fields, **changes})


def _token(step: int, role: str = "decode", core_us: float = 100.0) -> TokenStats:
    return TokenStats(step=step, role=role, context=64 + step, queries=1, step_us=1000.0, attention_us=200.0,
                      core_us=core_us, kv_cache_us=40.0, kv_bytes=4.0 * MIB, read_bytes=4.0 * MIB,
                      kv_alloc_bytes=0.0, launches=40.0, flops=1e6)


def _generation(decode: GenerationPhase | None = None, **changes: Any) -> Generation:
    """Step 1 the prefill, steps 2-4 decode; 8 query heads over 8 KV heads, batch 2."""
    fields: dict[str, Any] = dict(
        source="scopes", clock="cpu", kv_cache="dynamic", prompt_len=64, batch=2, heads=8, kv_heads=8, head_dim=64,
        kv_dtype="float32", prefill=None, decode=_decode() if decode is None else decode,
        tokens=[_token(1, "prefill")] + [_token(s) for s in (2, 3, 4)], fit=None,
        kv_bytes_per_token=64.0 * 1024, read_bytes_per_token=4.0 * MIB)
    return Generation(**{**fields, **changes})


def _run(base: Base, rule: str, generation: Generation | None, *, device: str = "cpu",
         meta: dict[str, object] | None = None, **summary: Any) -> list[Finding]:
    analysis, s = base
    s = replace(s, generation=generation, device=device, **summary)
    return getattr(gf, rule)(RuleQuery(analysis.events, analysis.attr, s, meta or {}))


def _layer(base: Base, layer: int, block: tuple[float, float], phases: dict[str, tuple[float, float]],
           backward_calls: float = 0.0) -> LayerStats:
    """A layer of (CPU, device) block time with phases of (CPU, device) time each."""
    (template,) = base[1].layers
    proto = template.phases[0]
    made = [replace(proto, phase=name, cpu_us=cpu, device_us=dev) for name, (cpu, dev) in phases.items()]
    return replace(template, layer=layer, cpu_us=block[0], device_us=block[1], backward=Backward(calls=backward_calls),
                   phases=made)


RULES = ("_kv_cache_realloc", "_decode_memory_bound", "_gqa_opportunity", "_kv_expanded", "_decode_dispatch_bound")


def test_every_decode_rule_is_registered() -> None:
    assert [r.__name__ for r in gf.GENERATION_RULES] == [*RULES, "_kv_cache_in_training"]


@pytest.mark.parametrize("rule", RULES)
def test_no_decode_steps_no_decode_finding(base: Base, rule: str) -> None:
    """A generation that triggers every decode rule (a whole-cache copy, the bandwidth reached, 8 KV
    heads, K and V read 4x over, 5 µs ops whose 16 MiB take 16.8 µs at 1 TB/s, under a quarter of the
    100 µs core), then the same with no decode phase or no decode step: nothing."""
    ready = _generation(realloc_bytes_per_token=4.0 * MIB, reference_bytes_per_s=1e12, achieved_bytes_per_s=1e12,
                        read_bytes_per_token=16.0 * MIB)
    assert _run(base, rule, ready)  # the rule fires on it as it is
    assert _run(base, rule, None) == []
    assert _run(base, rule, replace(ready, decode=None)) == []
    assert _run(base, rule, replace(ready, decode=_decode(steps=0))) == []


# -- kv-cache-realloc ------------------------------------------------------------------------------

def test_a_cache_copied_whole_every_token_is_a_medium_finding(base: Base) -> None:
    (f,) = _run(base, "_kv_cache_realloc", _generation(realloc_bytes_per_token=4.0 * MIB))
    assert (f.id, f.severity) == ("kv-cache-realloc", "medium")  # 40 of 200 µs = 20 %: medium from 20 %
    assert f.evidence.ops == ["aten::cat"] and f.evidence.layers == [0] and f.evidence.bytes == 4 * MIB
    assert f.evidence.time_us == 30.0  # 40 µs per decode step, 3 decode steps over 4 profiled: 40 * 3 / 4
    assert f.evidence.details == {"realloc_bytes_per_token": 4 * MIB, "kv_cache_us": 40,
                                  "share_of_decode_attention": 0.2, "kv_bytes_per_token": 65536}
    assert ("4.0 MiB per step (the cache of every layer, K and V, which grows by 64.0 KiB per token)"
            in f.explanation)
    assert f.explanation.endswith("Appending takes 40.0 µs per decode step, 20% of decode attention time (200.0 µs) "
                                  "and 4% of the step.")  # 40 of the 1000 µs step


@pytest.mark.parametrize(("realloc_mib", "kv_cache_us", "expected"), [
    (1.99, 40.0, None),  # under half the 4 MiB cache: a page or a chunk, not the whole cache
    (2.0, 40.0, "medium"),  # half the cache exactly: taken
    (4.0, 9.0, None),  # 9 / 200 = 4.5 %, under 5 %
    (4.0, 10.0, "low"),  # 5 % exactly
    (4.0, 39.0, "low"),  # 19.5 %, under 20 %
])
def test_realloc_thresholds(base: Base, realloc_mib: float, kv_cache_us: float, expected: str | None) -> None:
    g = _generation(decode=_decode(kv_cache_us=kv_cache_us), realloc_bytes_per_token=realloc_mib * MIB)
    assert [f.severity for f in _run(base, "_kv_cache_realloc", g)] == ([expected] if expected else [])


def test_realloc_needs_bytes_and_attention_time(base: Base) -> None:
    assert _run(base, "_kv_cache_realloc", _generation()) == []  # nothing allocated in the kv_cache phase
    no_cache = _generation(decode=_decode(kv_bytes=0.0), realloc_bytes_per_token=4.0 * MIB)
    assert _run(base, "_kv_cache_realloc", no_cache) == []
    no_time = _generation(decode=_decode(attention_us=0.0), realloc_bytes_per_token=4.0 * MIB)
    assert _run(base, "_kv_cache_realloc", no_time) == []  # a share of nothing is 0


def test_realloc_without_a_step_time_says_no_share_of_it(base: Base) -> None:
    g = _generation(decode=_decode(step_us=0.0), realloc_bytes_per_token=4.0 * MIB)
    (f,) = _run(base, "_kv_cache_realloc", g)
    assert f.explanation.endswith("20% of decode attention time (200.0 µs).")


# -- decode-memory-bound ---------------------------------------------------------------------------

def test_decode_at_most_of_the_copy_bandwidth_is_memory_bound(base: Base) -> None:
    g = _generation(reference_bytes_per_s=100e9, achieved_bytes_per_s=60e9, reference="the copy bandwidth")
    (f,) = _run(base, "_decode_memory_bound", g)
    assert (f.id, f.severity) == ("decode-memory-bound", "info")
    assert f.evidence.time_us == 75.0  # the core's 100 µs per decode step, * 3 / 4
    assert f.evidence.bytes == 4 * MIB
    assert f.evidence.details == {"achieved_bytes_per_s": 60e9, "reference_bytes_per_s": 100e9,
                                  "share_of_reference": 0.6, "read_bytes_per_token": 4 * MIB}
    assert "reads 4.0 MiB of K and V over every layer, in 100.0 µs of attention core time" in f.explanation
    assert "60% of the copy bandwidth" in f.explanation
    assert "expanded to every query head" not in f.explanation  # it reads the cache as it is


def test_reading_more_than_the_cache_says_why(base: Base) -> None:
    g = _generation(reference_bytes_per_s=100e9, achieved_bytes_per_s=60e9, read_bytes_per_token=8.0 * MIB)
    (f,) = _run(base, "_decode_memory_bound", g)
    assert "over every layer (the cache is 4.0 MiB: the core reads it expanded to every query head" in f.explanation


@pytest.mark.parametrize(("achieved", "reference", "fires"), [
    (49e9, 100e9, False),  # 49 %
    (50e9, 100e9, True),  # half exactly
    (60e9, None, False),  # no bandwidth measured: no verdict
    (60e9, 0.0, False),
    (0.0, 100e9, False),  # nothing achieved (no core time, no bytes)
])
def test_memory_bound_needs_half_of_a_known_bandwidth(base: Base, achieved: float, reference: float | None,
                                                      fires: bool) -> None:
    g = _generation(reference_bytes_per_s=reference, achieved_bytes_per_s=achieved)
    assert len(_run(base, "_decode_memory_bound", g)) == int(fires)


# -- gqa-opportunity -------------------------------------------------------------------------------

def test_fewer_kv_heads_are_suggested_with_what_each_would_read(base: Base) -> None:
    """8 query heads over 4 KV heads, a 4 MiB cache: 1 MiB per KV head. H/4 = 2 KV heads read 2 MiB
    (50 % less), one KV head 1 MiB (75 % less)."""
    (f,) = _run(base, "_gqa_opportunity", _generation(kv_heads=4))
    assert (f.id, f.severity) == ("gqa-opportunity", "info")
    assert f.title == "Fewer KV heads would cut what decode reads by up to 75%"
    assert ("with 4 KV heads for 8 query heads: 2 KV heads (H/4, grouped-query) would read 2.0 MiB, 50% less; "
            "1 KV head (multi-query) would read 1.0 MiB, 75% less.") in f.explanation
    assert "--kv-heads 2 and with --kv-heads 1" in f.suggestion
    assert f.evidence.details == {"kv_heads": 4, "query_heads": 8, "cache_bytes_per_token": 4 * MIB,
                                  "bytes_per_kv_head": MIB}
    assert f.evidence.time_us == 75.0 and f.evidence.bytes == 4 * MIB  # the core's 100 µs * 3 / 4


def test_four_heads_of_one_group_suggest_multi_query_once(base: Base) -> None:
    """4 query heads, 4 KV heads: H/4 is 1, the same option as multi-query, listed once."""
    (f,) = _run(base, "_gqa_opportunity", _generation(heads=4, kv_heads=4))
    assert "1 KV head (multi-query) would read 1.0 MiB, 75% less." in f.explanation
    assert "grouped-query" not in f.explanation and f.suggestion.count("--kv-heads") == 1


@pytest.mark.parametrize(("heads", "kv_heads", "fires"), [
    (16, 4, False),  # already one KV head per 4 query heads
    (16, 5, True),  # 5 * 4 = 20 > 16
    (3, 3, False),  # fewer query heads than a group
    (8, None, False),  # KV heads unknown
    (None, 8, False),  # query heads unknown (and no metadata)
])
def test_gqa_is_suggested_only_above_a_group_of_four(base: Base, heads: int | None, kv_heads: int | None,
                                                    fires: bool) -> None:
    assert gf.GQA_GROUP == 4
    assert len(_run(base, "_gqa_opportunity", _generation(heads=heads, kv_heads=kv_heads))) == int(fires)


def test_the_configured_heads_win_over_the_shapes(base: Base) -> None:
    """The shapes say 8 query heads over 8 KV heads (a finding); the run's configuration says 32, and
    8 KV heads for 32 is already a group of four. A boolean or a zero there is no head count."""
    g = _generation(kv_heads=8)
    assert _run(base, "_gqa_opportunity", g)
    assert _run(base, "_gqa_opportunity", g, meta={"config": {"heads": 32}}) == []
    for bad in (True, 0, -8, "32", 32.0):
        (f,) = _run(base, "_gqa_opportunity", g, meta={"config": {"heads": bad}})
        assert f.evidence.details["query_heads"] == 8, bad


def test_gqa_needs_a_cache(base: Base) -> None:
    assert _run(base, "_gqa_opportunity", _generation(decode=_decode(kv_bytes=0.0), kv_heads=4)) == []


# -- kv-expanded -----------------------------------------------------------------------------------

def test_expanded_kv_heads_are_measured_by_the_kv_expand_phase(base: Base) -> None:
    """The core reads 16 MiB of a 4 MiB cache (4.0x); kv_expand takes 30 + 20 µs in two layers, 25 %
    of the 200 µs of decode attention: medium."""
    layers = [_layer(base, 0, (100, 0), {"kv_expand": (30, 0), "sdpa": (50, 0)}),
              _layer(base, 1, (100, 0), {"kv_expand": (20, 0)})]
    g = _generation(decode=_decode(layers=layers), heads=8, kv_heads=2, read_bytes_per_token=16.0 * MIB)
    (f,) = _run(base, "_kv_expanded", g)
    assert (f.id, f.severity) == ("kv-expanded", "medium")
    assert f.title == "Decode reads K and V 4.0x over: expanded to every query head"
    assert f.evidence.bytes == 12 * MIB  # read beyond the cache: 16 - 4 MiB
    assert f.evidence.time_us == 37.5  # 50 µs per decode step * 3 / 4
    assert f.evidence.details == {"read_bytes_per_token": 16 * MIB, "cache_bytes_per_token": 4 * MIB, "ratio": 4.0,
                                  "kv_expand_us": 50, "share_of_decode_attention": 0.25}
    assert ("expands K and V from 2 KV heads to every one of the 8 query heads before attention (the kv_expand "
            "phase: 50.0 µs per decode step, 25% of decode attention time, 200.0 µs)") in f.explanation


def test_reading_more_without_an_expand_phase_is_low(base: Base) -> None:
    (f,) = _run(base, "_kv_expanded", _generation(read_bytes_per_token=8.0 * MIB))
    assert f.severity == "low" and f.evidence.time_us == 0 and f.evidence.details["ratio"] == 2.0
    assert "the core is handed more than the cache holds" in f.explanation


def test_the_expand_phase_is_timed_on_the_devices_clock_on_a_gpu(base: Base) -> None:
    """CPU 50 µs, device 10 µs of kv_expand, of 200 µs of decode attention: 25 % on the CPU's clock
    (medium), 5 % on the device's (low)."""
    layers = [_layer(base, 0, (100, 100), {"kv_expand": (50, 10)})]
    g = _generation(decode=_decode(layers=layers), read_bytes_per_token=8.0 * MIB)
    (f,) = _run(base, "_kv_expanded", g, device="cuda")
    assert f.severity == "low" and f.evidence.details["kv_expand_us"] == 10
    assert f.evidence.details["share_of_decode_attention"] == 0.05
    (f,) = _run(base, "_kv_expanded", g)
    assert f.severity == "medium" and f.evidence.details["kv_expand_us"] == 50


@pytest.mark.parametrize(("read_mib", "fires"), [(5.96, False), (6.0, True)])  # 1.49x and 1.5x of 4 MiB
def test_expanded_from_one_and_a_half_times_the_cache(base: Base, read_mib: float, fires: bool) -> None:
    assert gf.EXPAND_MIN_RATIO == 1.5
    assert len(_run(base, "_kv_expanded", _generation(read_bytes_per_token=read_mib * MIB))) == int(fires)


def test_expanded_needs_a_cache_and_attention_time(base: Base) -> None:
    for d in (_decode(kv_bytes=0.0), _decode(attention_us=0.0)):
        assert _run(base, "_kv_expanded", _generation(decode=d, read_bytes_per_token=16.0 * MIB)) == []


# -- decode-dispatch-bound -------------------------------------------------------------------------

def test_small_cpu_ops_near_the_dispatch_floor_are_dispatch_bound(base: Base) -> None:
    """40 ops in 200 µs: 5 µs each, under 50 times the 3 µs default floor (150 µs); no bandwidth known."""
    (f,) = _run(base, "_decode_dispatch_bound", _generation())
    assert (f.id, f.severity) == ("decode-dispatch-bound", "medium")
    assert f.evidence.details == {"launches_per_step": 40, "us_per_launch": 5.0, "attention_us_per_step": 200}
    assert f.evidence.time_us == 150.0  # 200 µs per decode step * 3 / 4
    assert ("A decode step runs 40 ops of attention (200.0 µs per step, 40 ops per layer); each takes 5.0 µs on "
            "average, within 50 times the 3.0 µs it costs to dispatch one: the time goes to dispatching small ops"
            in f.explanation)
    assert "At batch 2 and one query per sequence" in f.explanation


def test_ops_per_layer_divide_by_the_summarys_layers(base: Base) -> None:
    two = [_layer(base, 0, (100, 0), {}), _layer(base, 1, (100, 0), {})]
    (f,) = _run(base, "_decode_dispatch_bound", _generation(), layers=two)
    assert "(200.0 µs per step, 20 ops per layer)" in f.explanation and f.evidence.layers == [0, 1]


@pytest.mark.parametrize(("attention_us", "op_us", "fires"), [
    (5999.0, None, True),  # 149.975 µs per op: under 150
    (6000.0, None, False),  # 150 µs per op: slow ops, not small ones
    (200.0, 0.05, False),  # a measured floor of 0.05 µs: 5 µs is 100 floors
    (200.0, 0.2, True),  # 5 µs is 25 floors of 0.2 µs
])
def test_small_means_within_fifty_floors(base: Base, attention_us: float, op_us: float | None, fires: bool) -> None:
    meta: dict[str, object] = {"peaks": {"op_us": op_us}} if op_us is not None else {}
    g = _generation(decode=_decode(attention_us=attention_us))
    assert len(_run(base, "_decode_dispatch_bound", g, meta=meta)) == int(fires)


def test_a_cache_that_takes_a_quarter_of_the_core_at_the_copy_bandwidth_is_not_dispatch(base: Base) -> None:
    """4 MiB at 100 GB/s is 41.9 µs, at 1 TB/s 4.19 µs; the median decode core is 100 µs, so a quarter
    is 25 µs: the first is memory time, the second leaves the rest to dispatch."""
    assert _run(base, "_decode_dispatch_bound", _generation(reference_bytes_per_s=100e9)) == []
    (f,) = _run(base, "_decode_dispatch_bound", _generation(reference_bytes_per_s=1e12))
    assert "would take 4.2 µs of the core's 100.0 µs (median step)" in f.explanation


def test_the_median_core_is_the_middle_decode_step(base: Base) -> None:
    """Decode cores of 300, 20 and 100 µs: the median is 100 (not the mean, 140, nor the decode phase's
    figure, 500 here). 4 MiB at 200 GB/s takes 20.97 µs, under a quarter of 100 µs (25 µs); at 167 GB/s
    25.1 µs, over it. The prefill's core (1 µs) is not a decode step."""
    tokens = [_token(1, "prefill", 1.0), _token(2, core_us=300.0), _token(3, core_us=20.0), _token(4, core_us=100.0)]
    g = _generation(decode=_decode(core_us=500.0), tokens=tokens, reference_bytes_per_s=200e9)
    (f,) = _run(base, "_decode_dispatch_bound", g)
    assert "of the core's 100.0 µs (median step)" in f.explanation
    slower = _generation(decode=_decode(core_us=500.0), tokens=tokens, reference_bytes_per_s=167e9)  # 25.1 µs
    assert _run(base, "_decode_dispatch_bound", slower) == []


def test_the_median_core_of_an_even_count_is_the_mean_of_the_middle_two(base: Base) -> None:
    """Decode cores of 100 and 300 µs: the median is 200 µs, a quarter of it 50 µs. 4 MiB at 70 GB/s
    takes 59.9 µs, more than that: memory time, not dispatch (the upper middle, 300, would say 75 µs)."""
    tokens = [_token(1, "prefill"), _token(2, core_us=100.0), _token(3, core_us=300.0)]
    g = _generation(decode=_decode(steps=2), tokens=tokens, reference_bytes_per_s=70e9)
    assert _run(base, "_decode_dispatch_bound", g) == []


def test_a_gpu_waiting_on_the_cpu_in_decode_steps_is_dispatch_bound(base: Base) -> None:
    """Decode steps 2-4 of 1000 µs wall time with 300 µs of device work: busy 30 %. The prefill (step 1,
    busy 100 %) is not a decode step and does not count."""
    per_step = [StepStats(step=1, cpu_us=1000.0, device_us=1000.0, attention_cpu_us=0.0, attention_device_us=0.0)]
    per_step += [StepStats(step=s, cpu_us=1000.0, device_us=300.0, attention_cpu_us=0.0, attention_device_us=0.0)
                 for s in (2, 3, 4)]
    (f,) = _run(base, "_decode_dispatch_bound", _generation(), device="cuda", per_step=per_step)
    assert f.evidence.details == {"launches_per_step": 40, "us_per_launch": 5.0, "attention_us_per_step": 200,
                                  "device_busy_share": 0.3}
    assert "40 kernels of attention" in f.explanation
    assert "the device is busy 30% of a decode step's 1.00 ms: the GPU waits for the CPU" in f.explanation
    assert "CUDA graphs" in f.suggestion
    busy = [replace(s, device_us=500.0) for s in per_step]  # half exactly: not waiting
    assert _run(base, "_decode_dispatch_bound", _generation(), device="cuda", per_step=busy) == []
    assert _run(base, "_decode_dispatch_bound", _generation(), device="cuda", per_step=per_step[:1]) == []  # no walls


def test_no_launches_no_dispatch_finding(base: Base) -> None:
    assert _run(base, "_decode_dispatch_bound", _generation(decode=_decode(launches=0.0))) == []


# -- kv-cache-in-training --------------------------------------------------------------------------

def test_a_kv_cache_built_while_training_is_found(base: Base) -> None:
    """Attention runs backward; layer 0 appends for 10 of its 100 µs, layer 1 not at all: 10 of 200 µs
    of forward attention is 5 %, medium from 5 %."""
    layers = [_layer(base, 0, (100, 0), {"kv_cache": (10, 0), "sdpa": (60, 0)}, backward_calls=1),
              _layer(base, 1, (100, 0), {"sdpa": (60, 0)}, backward_calls=1)]
    (f,) = _run(base, "_kv_cache_in_training", None, layers=layers)
    assert (f.id, f.severity, f.evidence.layers, f.evidence.time_us) == ("kv-cache-in-training", "medium", [0], 10)
    assert f.evidence.details == {"share": 0.05, "kv_cache_us": 10, "forward_us": 200}
    assert "In layer 0, the kv_cache phase takes 10.0 µs per step, 5% of attention's forward CPU time (200.0 µs)" \
        in f.explanation
    low = [replace(layers[0], phases=[replace(layers[0].phases[0], cpu_us=8.0)]), layers[1]]  # 8 / 200 = 4 %
    assert [f.severity for f in _run(base, "_kv_cache_in_training", None, layers=low)] == ["low"]


def test_a_cache_without_backward_is_inference_not_training(base: Base) -> None:
    layers = [_layer(base, 0, (100, 0), {"kv_cache": (50, 0)})]
    assert _run(base, "_kv_cache_in_training", None, layers=layers) == []


def test_training_cache_time_is_the_devices_on_a_gpu(base: Base) -> None:
    """CPU 50 µs of kv_cache, device none: on a GPU trace nothing to report."""
    layers = [_layer(base, 0, (100, 100), {"kv_cache": (50, 0)}, backward_calls=2)]
    assert _run(base, "_kv_cache_in_training", None, device="cuda", layers=layers) == []
    (f,) = _run(base, "_kv_cache_in_training", None, layers=layers)
    assert f.evidence.details["share"] == 0.5
