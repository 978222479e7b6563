"""``analysis.batch`` reads a serving engine's iteration annotations into batches, gives their cores the FLOPs and bytes
the annotated lengths imply, and says per step what was batched; the tests call its functions on hand-built traces and
summaries, every figure worked by hand (``tests/analysis/attribution/test_serving_batch.py`` covers the whole
pipeline)."""

from __future__ import annotations

import itertools
import json
from typing import Any

import msgspec
import numpy as np
import pytest

from tb_attn_plugin.analysis.attribution.attribute import attribute
from tb_attn_plugin.analysis.attribution.batch import (
    Batch,
    Sums,
    batch_bytes,
    batch_flops,
    decode_roof,
    parse,
    serving_batch,
)
from tb_attn_plugin.trace.decode import decode_bytes
from tb_attn_plugin.trace.events import Events
from tb_attn_plugin.types.schema import Backward, LayerStats, PhaseStats, ServingBatch

CPU = {"pid": 1, "tid": 1}
OTHER_THREAD = {"pid": 1, "tid": 2}
H, HKV, D = 4, 2, 8  # query heads, KV heads, head size
CORE = "vllm::unified_attention_with_output"
KV_WRITE = "_C_cache_ops::reshape_and_cache_flash"
#: Prefill: 2 requests, 3 queries after 2 cached keys and 4 with none (Σsq 7, Σsk 5 + 4, Σsq² 9 + 16, Σsq·sk 15 + 16):
#: 12 + 10 = 22 pairs. Decode: 3 requests over 10, 20 and 30 keys: 60 pairs. 10 tokens in all.
DETAILED = "execute_10_context_2(sq7sk9sqsq25sqsk31)_generation_3(sq3sk60sqsq3sqsk60)"
PAIRS = 22 + 60
#: The same iteration in vLLM's form: no lengths.
SIMPLE = "execute_context_2(7)_generation_3(3)"


def _x(cat: str, name: str, ts: float, dur: float, where: dict[str, int] = CPU, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, **where, "args": args}


def _core(ts: float, rows: int = 10, q: list[int] | None = None, where: dict[str, int] = CPU) -> dict[str, Any]:
    """vLLM's attention op: q, k, v and the output, bf16; q of ``rows`` tokens (or ``q`` as given)."""
    dims = [q or [rows, H, D], [rows, HKV, D], [rows, HKV, D], [rows, H, D]]
    return _x("cpu_op", CORE, ts, 10, where, **{"Input Dims": dims, "Input type": ["c10::BFloat16"] * 4})


def _kv_write(ts: float, tokens: int = 10, cache_type: str = "c10::BFloat16", name: str = KV_WRITE,
              k: list[int] | None = None, v: list[int] | None = None) -> dict[str, Any]:
    """The KV write: k and v of ``tokens`` rows (bf16) into a paged cache of ``cache_type``."""
    dims = [k or [tokens, HKV, D], v or [tokens, HKV, D], [64, 16, HKV, D], [64, 16, HKV, D], [tokens]]
    types = ["c10::BFloat16", "c10::BFloat16", cache_type, cache_type, "long int"]
    return _x("cpu_op", name, ts, 5, **{"Input Dims": dims, "Input type": types})


def _events(events: list[dict[str, Any]]) -> Events:
    return decode_bytes(json.dumps({"traceEvents": events}).encode())


def _one_iteration(annotation: str = DETAILED, *extra: dict[str, Any]) -> list[dict[str, Any]]:
    """One profiler step of one engine iteration: a KV write and a core inside the annotation."""
    return [_x("user_annotation", "ProfilerStep#1", 0, 1000), _x("user_annotation", annotation, 10, 500),
            _kv_write(20), _core(40), *extra]


def _name(ev: Events, i: int) -> str:
    return ev.names[int(ev.name[i])]


# -- parse, Sums, Batch -----------------------------------------------------------------------------

def test_the_detailed_form_takes_its_tokens_from_the_sums() -> None:
    b = parse(DETAILED)
    assert b == Batch(2, 7, 3, 3, Sums(7, 9, 25, 31), Sums(3, 60, 3, 60))
    assert b is not None and b.pairs() == PAIRS


def test_a_count_of_fifteen_digits_is_read_and_sixteen_is_not() -> None:
    big = 10**14  # 15 digits: float64 holds it exactly
    b = parse(f"execute_context_1({big})_generation_0(0)")
    assert b is not None and b.prefill_tokens == big
    assert parse(f"execute_context_1({10 * big})_generation_0(0)") is None


@pytest.mark.parametrize("name", [
    "execute_2_context_1(sq2sk2sqsq4sqsk0)_generation_0(sq0sk0sqsq0sqsk0)",  # Σsq·sk below the causal half: negative
    "execute_context_(1)_generation_0(0)", "execute_context_1(-1)_generation_0(0)", "execute_", "",
    "xexecute_context_1(1)_generation_0(0)",
])
def test_sums_no_lengths_give_and_malformed_names_are_no_batch(name: str) -> None:
    assert parse(name) is None


def test_an_empty_iteration_is_a_batch_of_nothing() -> None:
    b = parse("execute_context_0(0)_generation_0(0)")
    assert b == Batch(0, 0, 0, 0, None, None) and b.fewest_pairs() == 0


def test_pairs_need_both_kinds_sums() -> None:
    assert Batch(1, 4, 0, 0, Sums(4, 4, 16, 16), None).pairs() is None
    assert Batch(0, 0, 1, 1, None, Sums(1, 9, 1, 9)).pairs() is None


def test_fewest_pairs_of_equal_prefills_and_one_key_per_decode_token() -> None:
    # 2 prefills of 50 tokens with no prefix: 50·51/2 each; 3 decode tokens, one key each.
    assert Batch(2, 100, 3, 3, None, None).fewest_pairs() == 2 * 50 * 51 // 2 + 3
    # Decode only: its tokens.
    assert Batch(0, 0, 5, 5, None, None).fewest_pairs() == 5


def _causal(lengths: tuple[int, ...]) -> int:
    """The pairs of prefills of these lengths with no cached prefix: n(n+1)/2 each."""
    return sum(n * (n + 1) // 2 for n in lengths)


@pytest.mark.parametrize(("requests", "tokens"), [(1, 7), (2, 7), (3, 10), (4, 9), (3, 3)])
def test_fewest_pairs_is_a_lower_bound_on_every_split_of_the_tokens(requests: int, tokens: int) -> None:
    """Every way of cutting ``tokens`` into ``requests`` prefills of at least one token attends at least
    ``fewest_pairs``; where the tokens divide evenly the bound is met."""
    splits = [c for c in itertools.product(range(1, tokens + 1), repeat=requests) if sum(c) == tokens]
    least = min(_causal(c) for c in splits)
    bound = Batch(requests, tokens, 0, 0, None, None).fewest_pairs()
    assert bound <= least
    if tokens % requests == 0:
        assert bound == least


# -- batch_flops ------------------------------------------------------------------------------------

def test_a_core_inside_its_iteration_gets_the_annotated_work() -> None:
    ev = _events(_one_iteration())
    flops = np.zeros(len(ev))
    assert batch_flops(ev, flops) == 1
    (core,) = [i for i in range(len(ev)) if _name(ev, i) == CORE]
    # 4 · heads · head size FLOPs per pair: q·kᵀ and attn·v, 2 each.
    assert flops[core] == 4 * H * D * PAIRS
    assert np.count_nonzero(flops) == 1


def test_cores_the_annotation_does_not_hold_get_nothing() -> None:
    events = [*_one_iteration(), _core(600),  # after the annotation ends
              _core(50, where=OTHER_THREAD)]  # inside its time, on another thread
    ev = _events(events)
    flops = np.zeros(len(ev))
    assert batch_flops(ev, flops) == 1


@pytest.mark.parametrize("q", [[9, H, D], [10, H * D], [2, 5, H, D]])
def test_a_core_whose_q_is_not_the_whole_iterations_gets_nothing(q: list[int]) -> None:
    # 9 rows for 10 tokens is a split call; a q of two or four dimensions is not (tokens, heads, head size).
    events = [_x("user_annotation", "ProfilerStep#1", 0, 1000), _x("user_annotation", DETAILED, 10, 500),
              _core(40, q=q)]
    ev = _events(events)
    flops = np.zeros(len(ev))
    assert batch_flops(ev, flops) == 0 and not flops.any()


def test_a_core_with_counted_flops_keeps_them() -> None:
    ev = _events(_one_iteration())
    (core,) = [i for i in range(len(ev)) if _name(ev, i) == CORE]
    flops = np.zeros(len(ev))
    flops[core] = 123.0
    assert batch_flops(ev, flops) == 0 and flops[core] == 123.0


def test_without_lengths_or_annotations_no_work_is_given() -> None:
    for events in (_one_iteration(SIMPLE), _one_iteration("execute_model")):
        ev = _events(events)
        flops = np.zeros(len(ev))
        assert batch_flops(ev, flops) == 0 and not flops.any()


def test_a_padded_q_still_gets_the_iterations_work() -> None:
    # Engines pad to a captured graph's size: 16 rows for 10 tokens.
    ev = _events([_x("user_annotation", "ProfilerStep#1", 0, 1000), _x("user_annotation", DETAILED, 10, 500),
                  _core(40, rows=16)])
    flops = np.zeros(len(ev))
    assert batch_flops(ev, flops) == 1 and flops.max() == 4 * H * D * PAIRS


# -- batch_bytes ------------------------------------------------------------------------------------

def test_a_core_moves_q_and_its_output_and_each_attended_key_once() -> None:
    ev = _events(_one_iteration())
    out = batch_bytes(ev, np.arange(len(ev)))
    (core,) = [i for i in range(len(ev)) if _name(ev, i) == CORE]
    q_bytes = 10 * H * D * 2  # (10, 4, 8) bf16
    kv_per_token = (HKV * D + HKV * D) * 2  # k and v of one token, bf16 cache
    keys = 9 + 60  # Σsk over prefill and decode
    assert out[core] == 2 * q_bytes + keys * kv_per_token
    assert np.isnan(np.delete(out, core)).all()  # every other event: no figure


def test_bytes_follow_the_index_given() -> None:
    ev = _events(_one_iteration())
    (core,) = [i for i in range(len(ev)) if _name(ev, i) == CORE]
    out = batch_bytes(ev, np.array([core, 0]))
    assert out.shape == (2,) and not np.isnan(out[0]) and np.isnan(out[1])


@pytest.mark.parametrize("events", [
    _one_iteration(SIMPLE),  # no lengths: no keys to count
    # no KV write
    [_x("user_annotation", "ProfilerStep#1", 0, 1000), _x("user_annotation", DETAILED, 10, 500), _core(40)],
    [_x("user_annotation", "ProfilerStep#1", 0, 1000), _kv_write(20), _core(40)],  # no annotation
])
def test_without_lengths_a_kv_write_or_an_annotation_bytes_are_unknown(events: list[dict[str, Any]]) -> None:
    ev = _events(events)
    assert np.isnan(batch_bytes(ev, np.arange(len(ev)))).all()


# -- serving_batch ----------------------------------------------------------------------------------

def _batch(events: list[dict[str, Any]], steps: list[int], layers: int) -> ServingBatch | None:
    ev = _events(events)
    return serving_batch(ev, attribute(ev).step, steps, layers)


def test_one_detailed_iteration_per_step() -> None:
    s = _batch(_one_iteration(), [1], layers=2)
    assert s is not None
    assert (s.iterations, s.prefill_requests, s.prefill_tokens, s.decode_requests, s.decode_tokens) == (1, 2, 7, 3, 3)
    assert s.pairs == PAIRS and s.decode_keys == 60 and s.annotation == DETAILED
    # 2 prefills of 7 tokens: 7 · (7/2 + 1) / 2 = 15.75, cut to 15; and 3 decode tokens.
    assert s.fewest_pairs == 15 + 3
    kv_per_token = (HKV * D + HKV * D) * 2
    assert (s.kv_bytes_per_token, s.kv_dtype) == (kv_per_token, "c10::BFloat16")
    assert s.decode_kv_bytes == 60 * 2 * kv_per_token  # decode's keys, in each of 2 layers
    assert (s.decode_core_us, s.decode_roof_us) == (None, None)  # decode_roof's


def test_figures_are_means_over_the_steps_asked_for() -> None:
    """Three steps of one iteration each (the second of 2 decode requests over 30 keys); only steps 1
    and 2 are asked for: per step, 1 iteration, (3 + 2) / 2 decode requests, (60 + 30) / 2 keys."""
    second = "execute_2_context_0(sq0sk0sqsq0sqsk0)_generation_2(sq2sk30sqsq2sqsk30)"
    events = [*_one_iteration(),
              _x("user_annotation", "ProfilerStep#2", 1000, 1000), _x("user_annotation", second, 1010, 500),
              _x("user_annotation", "ProfilerStep#3", 2000, 1000), _x("user_annotation", DETAILED, 2010, 500)]
    s = _batch(events, [1, 2], layers=1)
    assert s is not None
    assert (s.iterations, s.decode_requests, s.decode_keys) == (1.0, 2.5, 45.0)
    assert s.pairs == (PAIRS + 30) / 2
    assert s.annotation == DETAILED  # the first one's name
    # With no steps the trace's annotations are all counted, over one step.
    whole = _batch(events, [], layers=1)
    assert whole is not None and (whole.iterations, whole.decode_requests) == (3.0, 3 + 2 + 3)


def test_vllm_form_counts_no_pairs_or_keys() -> None:
    s = _batch(_one_iteration(SIMPLE), [1], layers=2)
    assert s is not None
    assert (s.pairs, s.decode_keys, s.decode_kv_bytes) == (None, None, None)
    assert s.fewest_pairs == 15 + 3
    assert s.kv_bytes_per_token == (HKV * D + HKV * D) * 2  # the KV write still says the cache's size


def test_a_mix_of_forms_counts_no_pairs() -> None:
    # One iteration without sums: the step's pairs cannot be given, nor can they be half given.
    events = [*_one_iteration(), _x("user_annotation", SIMPLE, 600, 100)]
    s = _batch(events, [1], layers=1)
    assert s is not None and s.iterations == 2 and s.pairs is None and s.decode_keys is None


def test_no_annotation_or_none_in_the_steps_is_no_serving_batch() -> None:
    assert _batch([_x("user_annotation", "ProfilerStep#1", 0, 1000), _core(40)], [1], layers=1) is None
    assert _batch(_one_iteration(), [7], layers=1) is None


def test_an_fp8_cache_stored_as_bytes_is_one_byte_per_element() -> None:
    events = [_x("user_annotation", "ProfilerStep#1", 0, 1000), _x("user_annotation", DETAILED, 10, 500),
              _kv_write(20, cache_type="unsigned char"), _core(40)]
    s = _batch(events, [1], layers=3)
    assert s is not None and s.kv_bytes_per_token == HKV * D * 2 and s.kv_dtype == "unsigned char"
    assert s.decode_kv_bytes == 60 * 3 * HKV * D * 2


def test_mla_caches_its_latent_and_rotary_parts() -> None:
    # DeepSeek's MLA writes a 512-wide latent and a 64-wide rotary key per token: 576 bf16 values.
    events = [_x("user_annotation", "ProfilerStep#1", 0, 1000), _x("user_annotation", DETAILED, 10, 500),
              _kv_write(20, name="_C_cache_ops::concat_and_cache_mla", k=[10, 512], v=[10, 64]), _core(40)]
    s = _batch(events, [1], layers=1)
    assert s is not None and s.kv_bytes_per_token == (512 + 64) * 2


@pytest.mark.parametrize("cache_type", ["", "Scalar"])
def test_a_kv_write_without_its_caches_type_says_nothing_of_the_cache(cache_type: str) -> None:
    events = [_x("user_annotation", "ProfilerStep#1", 0, 1000), _x("user_annotation", DETAILED, 10, 500),
              _kv_write(20, cache_type=cache_type), _core(40)]
    s = _batch(events, [1], layers=1)
    assert s is not None and (s.kv_bytes_per_token, s.kv_dtype, s.decode_kv_bytes) == (None, None, None)
    assert not any(line.startswith("KV cache") for line in s.sentences)


def test_no_layers_leave_decodes_bytes_unknown() -> None:
    s = _batch(_one_iteration(), [1], layers=0)
    assert s is not None and s.decode_kv_bytes is None and s.kv_bytes_per_token is not None


def test_the_sentences_say_the_batch() -> None:
    s = _batch(_one_iteration(), [1], layers=2)
    assert s is not None
    assert s.sentences[0] == ("1 engine iteration per step: 2 prefill requests (7 tokens) and 3 decode requests "
                              f"(3 tokens) (the engine's annotations: {DETAILED})")
    assert s.sentences[1].startswith("Each layer's attention cores attend 82 (query, key) pairs per step, causal")
    assert s.sentences[2] == "KV cache: 64 B per token per layer (BFloat16, from the KV write's k, v and cache)"
    # 60 keys x 2 layers x 64 B = 7680 B = 7.5 KiB.
    assert s.sentences[3] == "Decode reads 7.5 KiB of KV cache per step, all layers (60 keys in each)"
    simple = _batch(_one_iteration(SIMPLE), [1], layers=2)
    assert simple is not None
    assert "at least 18 (query, key) pairs" in simple.sentences[1] and "not counted" in simple.sentences[1]


def test_a_kind_with_no_requests_is_said_so() -> None:
    decode_only = "execute_3_context_0(sq0sk0sqsq0sqsk0)_generation_3(sq3sk60sqsq3sqsk60)"
    s = _batch(_one_iteration(decode_only), [1], layers=1)
    assert s is not None and s.sentences[0].startswith(
        "1 engine iteration per step: no prefill and 3 decode requests (3 tokens)")


# -- decode_roof ------------------------------------------------------------------------------------

def _phase(phase: str, device_us: float) -> PhaseStats:
    return PhaseStats(phase=phase, calls=1.0, cpu_us=1.0, cpu_self_us=1.0, device_us=device_us, kernels=1.0,
                      kernel_names=[], ops=[], flops=0.0, flops_per_s=0.0, alloc_bytes=0.0, freed_bytes=0.0,
                      peak_bytes=0, sxs_bytes=0.0, sxs_allocs=0.0, backward=Backward())


def _layer(k: int, sdpa_us: float) -> LayerStats:
    return LayerStats(layer=k, module=None, backend="vllm-unified", backend_evidence=[], inferred=True, calls=1.0,
                      cpu_us=1.0, device_us=sdpa_us + 7.0, flops=0.0, flops_per_s=0.0, alloc_bytes=0.0, peak_bytes=0,
                      sxs_bytes=0.0, heads_count=None, phases=[_phase("sdpa", sdpa_us), _phase("kv_cache", 7.0)],
                      heads=[], backward=Backward())


def _decode_only() -> ServingBatch:
    s = _batch(_one_iteration("execute_3_context_0(sq0sk0sqsq0sqsk0)_generation_3(sq3sk60sqsq3sqsk60)"), [1], layers=2)
    assert s is not None
    return s


def test_pure_decode_is_timed_against_the_kv_read_at_peak_bandwidth() -> None:
    s = _decode_only()
    kv_bytes = 60 * 2 * (HKV * D + HKV * D) * 2  # 7680 B
    assert s.decode_kv_bytes == kv_bytes
    out = decode_roof(s, [_layer(0, 30.0), _layer(1, 50.0)], bytes_per_s=1e9)
    # The cores' device time: the sdpa phases only, 30 + 50 µs. 7680 B at 1 GB/s: 7.68 µs.
    assert out.decode_core_us == 80.0
    assert out.decode_roof_us == pytest.approx(kv_bytes / 1e9 * 1e6)
    assert out.sentences[-1] == ("Decode reads 7.5 KiB of KV cache per step, all layers (60 keys in each): 7.7 µs at "
                                 "the peak memory bandwidth; its cores took 80.0 µs (9.6% of the roof)")


def test_without_a_peak_the_cores_time_stands_alone() -> None:
    out = decode_roof(_decode_only(), [_layer(0, 30.0)], bytes_per_s=None)
    assert (out.decode_core_us, out.decode_roof_us) == (30.0, None)
    assert out.sentences[-1].endswith("(60 keys in each)")


def test_a_mixed_batch_or_cores_without_kernels_have_no_roof() -> None:
    mixed = _batch(_one_iteration(), [1], layers=2)
    assert mixed is not None
    out = decode_roof(mixed, [_layer(0, 30.0)], bytes_per_s=1e9)
    assert (out.decode_core_us, out.decode_roof_us) == (None, None)  # its cores time prefill too
    graphed = decode_roof(_decode_only(), [_layer(0, 0.0)], bytes_per_s=1e9)
    assert (graphed.decode_core_us, graphed.decode_roof_us) == (None, None)  # captured into a graph: no kernels
    idle = msgspec.structs.replace(_decode_only(), decode_tokens=0.0)
    assert decode_roof(idle, [_layer(0, 30.0)], bytes_per_s=1e9).decode_core_us is None


def test_big_counts_are_written_short() -> None:
    s = _decode_only()
    for pairs, text in ((512.0, "512"), (1500.0, "1.5k"), (7_870_000.0, "7.87M"), (2.5e9, "2.5G")):
        said = decode_roof(msgspec.structs.replace(s, pairs=pairs), [], None)
        assert f"attend {text} (query, key) pairs" in said.sentences[1], said.sentences[1]
