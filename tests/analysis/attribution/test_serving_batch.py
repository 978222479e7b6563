"""A serving engine's batches from its iteration annotations, and the core FLOPs they give (issue 33).

The annotation grammar is vLLM's (``vllm/v1/worker/gpu_worker.py`` ``annotate_profile``:
``execute_context_<n>(<tokens>)_generation_<n>(<tokens>)``) and the detailed form the shared SGLang
trace carries (``execute_<tokens>_context_<n>(sq..sk..sqsq..sqsk..)_generation_<n>(...)``). The
op names and argument layouts are vLLM's (``vllm::unified_attention_with_output``: q as (tokens,
heads, head size); ``_C_cache_ops::reshape_and_cache_flash``: k, v, key cache, value cache) as the
shared vLLM trace records them. Every expected figure is worked out by hand in its test.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from helpers import SHARED_TRACES

from tb_attn_plugin.analysis.attribution.analyze import analyze
from tb_attn_plugin.analysis.attribution.batch import Sums, parse
from tb_attn_plugin.analysis.summary import summarize_trace
from tb_attn_plugin.cli.report import summary_table
from tb_attn_plugin.engine.loader import load_events
from tb_attn_plugin.trace.decode import decode_bytes
from tb_attn_plugin.types.schema import RunSummary, WorkerSummary

SGLANG_PREFILL = SHARED_TRACES.parent / "production-traces" / "tracelens_sglang_qwen3-8b_mi300_prefilldecode.json.gz"


def test_the_two_forms_parse() -> None:
    b = parse("execute_context_2(100)_generation_3(3)")
    assert b is not None
    assert (b.prefill_requests, b.prefill_tokens, b.decode_requests, b.decode_tokens) == (2, 100, 3, 3)
    assert b.prefill is None and b.pairs() is None
    d = parse("execute_15360_context_15(sq15360sk15360sqsq15728640sqsk15728640)_generation_0(sq0sk0sqsq0sqsk0)")
    assert d is not None and d.prefill == Sums(15360, 15360, 15728640, 15728640) and d.decode == Sums(0, 0, 0, 0)


@pytest.mark.parametrize("name", [
    "execute_context_1(10)_generation_0(0)x",  # trailing text
    "execute_context_" + "9" * 40 + "(1)_generation_0(0)",  # no batch of this world
    "execute_4_context_1(sq4sk4sqsq3sqsk16)_generation_0(sq0sk0sqsq0sqsk0)",  # Σsq² < Σsq: no lengths give it
    "execute_4_context_2(sq4sk4sqsq9sqsk8)_generation_0(sq0sk0sqsq0sqsk0)",  # Σsq² - Σsq odd: no lengths give it
    "ProfilerStep#1", "execute_model",
])
def test_what_no_batch_makes_is_not_read(name: str) -> None:
    assert parse(name) is None


def test_causal_pairs_are_counted_by_hand() -> None:
    """Prefill: a request of 3 queries after 2 cached keys attends 3 + 4 + 5 = 12 keys, one of 4
    queries with no prefix 1 + 2 + 3 + 4 = 10. Decode: 3 requests of contexts 10, 20 and 30 attend
    60. The sums: Σsq 7, Σsk 5 + 4, Σsq² 9 + 16, Σsq·sk 15 + 16."""
    assert Sums(7, 9, 25, 31).pairs() == 12 + 10
    assert Sums(3, 60, 3, 60).pairs() == 60
    b = parse("execute_10_context_2(sq7sk9sqsq25sqsk31)_generation_3(sq3sk60sqsq3sqsk60)")
    assert b is not None and b.pairs() == 82


# -- the SGLang prefill trace ------------------------------------------------------------------

@pytest.fixture(scope="module")
def prefill() -> WorkerSummary:
    if not SGLANG_PREFILL.exists():
        pytest.skip(f"{SGLANG_PREFILL} is not here")
    return summarize_trace(analyze(load_events(str(SGLANG_PREFILL))), file=SGLANG_PREFILL.name, worker="w", span=None)


def test_sglang_prefill_cores_count_their_annotated_work(prefill: WorkerSummary) -> None:
    """One iteration of 15 prefill requests, 15360 tokens: Σsq² = 15·1024² says each is 1024 tokens
    long, Σsk = Σsq that none has a cached prefix. Causal pairs 15 · 1024·1025/2; Qwen3-8B's core
    (aiter ``mha_batch_prefill``, q (15360, 32, 128)) does 4·32·128 FLOPs per pair, in each of
    the 36 layers. Its KV cache: 8 KV heads of 128, k and v, bf16."""
    s = prefill.serving
    assert s is not None
    assert (s.iterations, s.prefill_requests, s.prefill_tokens) == (1, 15, 15360)
    assert (s.decode_requests, s.decode_tokens) == (0, 0)
    pairs = 15 * 1024 * 1025 // 2
    assert s.pairs == pairs == s.fewest_pairs  # equal lengths, no prefix: the least the batch can attend
    assert s.kv_bytes_per_token == 2 * 8 * 128 * 2 and s.kv_dtype == "c10::BFloat16"
    assert s.decode_kv_bytes == 0 and s.decode_core_us is None
    for layer in prefill.layers:
        sdpa = {p.phase: p for p in layer.phases}["sdpa"]
        assert sdpa.flops == 4 * 32 * 128 * pairs
    assert s.sentences[0].startswith("1 engine iteration per step: 15 prefill requests (15360 tokens) and no decode")
    assert "7.87M (query, key) pairs" in s.sentences[1]


def test_the_cli_says_the_serving_batch(prefill: WorkerSummary) -> None:
    text = summary_table([RunSummary(run="r", metadata=None, workers=[prefill], errors=[])])
    assert "  serving:\n    1 engine iteration per step: 15 prefill requests" in text
    assert "KV cache: 4.0 KiB per token per layer (BFloat16" in text


# -- synthetic vLLM decode ----------------------------------------------------------------------

H, HKV, D, LAYERS = 32, 8, 128, 2
CONTEXTS = (100, 200, 700)  # the decode requests' keys: Σsk = 1000


def _x(name: str, ts: float, dur: float, cat: str = "cpu_op", **args: Any) -> dict[str, Any]:
    gpu = cat == "kernel"
    return {"ph": "X", "cat": cat, "name": name, "pid": 0 if gpu else 1, "tid": 7 if gpu else 1, "ts": ts,
            "dur": dur, "args": args}


def _vllm(annotation: str, tokens: int, cache_type: str, *, q_rows: int | None = None) -> WorkerSummary:
    """One profiler step of one engine iteration: per layer the KV write (k and v of ``tokens``
    rows into a paged cache of ``cache_type``) and the core (q of ``q_rows`` rows), each launching
    one kernel: the core's 40 µs."""
    rows = tokens if q_rows is None else q_rows
    events = [_x("ProfilerStep#1", 0, 10_000, "user_annotation"), _x(annotation, 10, 9_000, "user_annotation")]
    t, corr = 100.0, 1
    for _ in range(LAYERS):
        events.append(_x("_C_cache_ops::reshape_and_cache_flash", t, 20,
                         **{"Input Dims": [[tokens, HKV, D], [tokens, HKV, D], [4096, 16, HKV, D], [4096, 16, HKV, D],
                                           [tokens], [], [], []],
                            "Input type": ["c10::BFloat16", "c10::BFloat16", cache_type, cache_type, "long int", "",
                                           "float", "float"]}))
        events.append(_x("vllm::unified_attention_with_output", t + 40, 30,
                         **{"Input Dims": [[rows, H, D], [tokens, HKV, D], [tokens, HKV, D], [rows, H, D], [], [], [],
                                           [0]],
                            "Input type": ["c10::BFloat16"] * 4 + ["", "", "", "c10::BFloat16"]}))
        events.append(_x("cudaLaunchKernel", t + 50, 5, "cuda_runtime", correlation=corr))
        events.append(_x("kernel_unified_attention_2d", t + 100, 40, "kernel", correlation=corr))
        t, corr = t + 1000, corr + 1
    trace = {"traceEvents": events, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "numSms": 132}]}
    return summarize_trace(analyze(decode_bytes(json.dumps(trace).encode())), file="v.json", worker="w", span=None)


def _decode_annotation() -> str:
    n, sk = len(CONTEXTS), sum(CONTEXTS)
    return f"execute_{n}_context_0(sq0sk0sqsq0sqsk0)_generation_{n}(sq{n}sk{sk}sqsq{n}sqsk{sk})"


def test_decode_reads_its_contexts_kv_cache_at_the_cache_element_size() -> None:
    """Decode of 3 requests over 1000 keys: each layer's core attends 1000 pairs, 4·32·128 FLOPs
    each. An FP8 cache that vLLM stores as bytes: 2·8·128 = 2048 bytes per token per layer; decode
    reads 1000 keys in 2 layers: 4,096,000 bytes (3.9 MiB), at the H100 SXM's 3.35 TB/s 1.22 µs; its
    cores took 2 x 40 µs, so the read ran at 1.5% of the roof."""
    s = _vllm(_decode_annotation(), len(CONTEXTS), "unsigned char")
    w = s.serving
    assert w is not None and w.pairs == 1000 and w.decode_keys == 1000
    for layer in s.layers:
        assert {p.phase: p for p in layer.phases}["sdpa"].flops == 4 * H * D * 1000
    assert w.kv_bytes_per_token == 2 * HKV * D * 1 and w.kv_dtype == "unsigned char"
    assert w.decode_kv_bytes == 1000 * LAYERS * 2 * HKV * D
    assert w.decode_core_us == pytest.approx(2 * 40)
    assert w.decode_roof_us == pytest.approx(4_096_000 / 3.35e12 * 1e6)
    assert w.sentences[-1] == ("Decode reads 3.9 MiB of KV cache per step, all layers (1k keys in each): 1.2 µs at "
                               "the peak memory bandwidth; its cores took 80.0 µs (1.5% of the roof)")


def test_a_bf16_cache_is_twice_the_bytes() -> None:
    s = _vllm(_decode_annotation(), len(CONTEXTS), "c10::BFloat16").serving
    assert s is not None and s.kv_bytes_per_token == 2 * HKV * D * 2 and s.decode_kv_bytes == 1000 * LAYERS * 4096


def test_without_the_sums_pairs_are_bounded_not_counted() -> None:
    """vLLM's form: 2 prefill requests of 100 tokens together and 3 decode tokens. The fewest pairs:
    two of 50 tokens, no prefix (50·51/2 each), and one key per decode token: 2553. The cores'
    FLOPs stay uncounted."""
    s = _vllm("execute_context_2(100)_generation_3(3)", 103, "c10::BFloat16")
    w = s.serving
    assert w is not None and w.pairs is None and w.fewest_pairs == 2 * 50 * 51 // 2 + 3
    assert all({p.phase: p for p in layer.phases}["sdpa"].flops == 0 for layer in s.layers)
    assert "at least 2.55k (query, key) pairs" in w.sentences[1] and "not counted" in w.sentences[1]


def test_a_core_that_holds_fewer_rows_than_the_batch_is_not_given_its_work() -> None:
    """q of 2 rows for an iteration of 3 tokens: the core is not the whole iteration's (a split
    call), so the annotation's pairs are not its."""
    s = _vllm(_decode_annotation(), len(CONTEXTS), "c10::BFloat16", q_rows=2)
    assert all({p.phase: p for p in layer.phases}["sdpa"].flops == 0 for layer in s.layers)
