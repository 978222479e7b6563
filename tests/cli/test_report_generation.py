"""A generation's prefill and decode steps in the CLI (``cli/report_generation.py``): the summary's lines,
the per-step CSV and compare's decode table, from a hand-built ``Generation`` whose figures are worked out by
hand (µs below a millisecond, binary units for bytes, SI prefixes for FLOPs)."""

from __future__ import annotations

import csv
import io
import re
from typing import Any

import msgspec
import pytest

from tb_attn_plugin.cli.report_generation import (
    TOKEN_CSV_FIELDS,
    compare_decode_lines,
    generation_lines,
    tokens_csv,
)
from tb_attn_plugin.types.results import CompareDecode, CompareRatio, CompareRun, Comparison
from tb_attn_plugin.types.schema import (
    Backward,
    Fit,
    Generation,
    GenerationPhase,
    LayerStats,
    Roof,
    RunSummary,
    TokenStats,
    WorkerSummary,
)

KIB, MIB = 1 << 10, 1 << 20


def _layer(n: int, backend: str, us: float, flops: float, alloc: float = 0.0) -> LayerStats:
    return LayerStats(layer=n, module=None, backend=backend, backend_evidence=[], inferred=False, calls=1.0,
                      cpu_us=us, device_us=us / 10, flops=flops, flops_per_s=0.0, alloc_bytes=alloc, peak_bytes=0,
                      sxs_bytes=0.0, heads_count=None, phases=[], heads=[], backward=Backward())


def _roof(intensity: float | None, share: float | None, verdict: str) -> Roof:
    return Roof(dtype="fp32", time_us=1.0, launches=1.0, intensity=intensity, flops_per_s=0.0, bytes_per_s=0.0,
                ceiling=None, share=share, verdict=verdict)


PREFILL = GenerationPhase(steps=1, step_us=5000.0, attention_us=2500.0, core_us=1200.0, kv_cache_us=300.0,
                          kv_bytes=64.0 * KIB, launches=12.0, flops=3e9,
                          layers=[_layer(0, "flash", 1000.0, 1.5e9), _layer(1, "flash", 1500.0, 1.5e9)],
                          roof=_roof(25.0, 0.5, "compute-bound"))
DECODE = GenerationPhase(steps=2, step_us=800.0, attention_us=400.0, core_us=250.0, kv_cache_us=100.0,
                         kv_bytes=68.0 * KIB, launches=6.4, flops=2.5e6,
                         layers=[_layer(0, "sdpa", 200.0, 1.25e6, alloc=4.0 * KIB)],
                         roof=_roof(None, None, "no bytes modeled"))
TOKENS = [
    TokenStats(step=3, role="prefill", context=64, queries=64, step_us=5000.0, attention_us=2500.0, core_us=1200.0,
               kv_cache_us=300.0, kv_bytes=64.0 * KIB, kv_alloc_bytes=64.0 * KIB, launches=12.0, flops=3e9),
    TokenStats(step=4, role="decode", context=65, queries=1, step_us=810.0, attention_us=410.5, core_us=250.0,
               kv_cache_us=100.0, kv_bytes=65.0 * KIB, kv_alloc_bytes=0.0, launches=6.0, flops=2.5e6),
    TokenStats(step=5, role="decode", context=66, queries=1, step_us=790.0, attention_us=389.5, core_us=250.0,
               kv_cache_us=100.0, kv_bytes=66.0 * KIB, kv_alloc_bytes=0.0, launches=7.0, flops=2.5e6),
]


def _generation(**changes: Any) -> Generation:
    fields: dict[str, Any] = dict(
        source="scopes", clock="cpu", kv_cache="dynamic", prompt_len=64, batch=2, heads=4, kv_heads=1, head_dim=16,
        kv_dtype="float32", prefill=PREFILL, decode=DECODE, tokens=TOKENS,
        fit=Fit(a=1.0, k=0.98765, r2=0.876, points=2), per_key_us=0.5, fixed_us=1500.0,
        kv_bytes_per_layer=1.5 * MIB, kv_bytes_per_head=384.0 * KIB, kv_bytes_per_token=4.0 * KIB, kv_memory="agrees",
        realloc_bytes_per_token=8.0 * KIB, read_bytes_per_token=2.0 * MIB, achieved_bytes_per_s=1e9,
        reference_bytes_per_s=4e9, reference="copy bandwidth probe")
    return Generation(**(fields | changes))


def _worker(generation: Generation | None, worker: str = "w", span: str | None = None) -> WorkerSummary:
    return WorkerSummary(file="w.json", worker=worker, span=span, device="cpu", inferred=False, backend="sdpa",
                         steps=[3, 4, 5], step_count=3, step_cpu_us=0.0, step_device_us=0.0, attention_cpu_us=0.0,
                         attention_device_us=0.0, attention_share_cpu=None, attention_share_device=None, layers=[],
                         per_step=[], diagnostics={}, notes=[], generation=generation)


def _columns(line: str) -> list[str]:
    return re.split(r" {2,}", line.strip())


# -- generation_lines -------------------------------------------------------------------------------


def test_no_generation_gives_no_lines() -> None:
    assert generation_lines(_worker(None)) == []


def test_the_summary_of_a_generation_line_by_line() -> None:
    lines = generation_lines(_worker(_generation()))
    assert lines[:6] == [
        # 2 decode tokens among the steps
        "  generation (cpu time; steps from scopes): prompt 64 tokens, 2 decode steps, batch 2, dynamic KV cache, "
        "1 KV heads for 4 query heads, float32",
        # 5000 µs = 5.00 ms; 300 µs stays in µs; 12 launches; 3e9 = 3.00G; 64 KiB
        "    prefill step 5.00 ms, attention 2.50 ms (core 1.20 ms, kv_cache 300.0 µs), 12 launches, 3.00G FLOPs, "
        "K and V 64.0 KiB (mean of 1 step)",
        # per step, plural steps; 6.4 launches to none decimals: 6
        "    decode  step 800.0 µs per step, attention 400.0 µs (core 250.0 µs, kv_cache 100.0 µs), 6 launches, "
        "2.50M FLOPs, K and V 68.0 KiB (mean of 2 steps)",
        # k 0.98765 to 0.99, R2 0.876 to 0.88; the line's intercept 1500 µs and slope 0.5 µs
        "    decode attention per step ~ a * context^k: k=0.99, R2 0.88 over 2 contexts; straight line: 1.50 ms + "
        "0.5 µs per key",
        # 1.5 MiB, 384 KiB, 4 KiB
        "    KV cache: 1.5 MiB per layer at the last step (384.0 KiB per KV head), growing 4.0 KiB per token over all "
        "layers",
        "      memory events: agrees",
    ]
    assert lines[6] == "    appends allocate 8.0 KiB per decode step (the cache copied)"
    # 1e9 B/s = 953.7 MiB/s; 1e9 / 4e9 = 25% of 4e9 B/s = 3.7 GiB/s; wrapped under a 4-space indent
    reads = []
    i = 7
    while not lines[i].startswith("    roofline"):
        reads.append(lines[i])
        i += 1
    assert all(len(x) <= 100 for x in reads) and reads[0].startswith("    decode reads")
    assert " ".join(x.strip() for x in reads) == (
        "decode reads 2.0 MiB of K and V per step: 953.7 MiB/s over the core's time, 25% of 3.7 GiB/s "
        "(copy bandwidth probe)")
    assert lines[i:i + 2] == ["    roofline, prefill: 25 FLOP/B, 50% of its ceiling: compute-bound",
                              "    roofline, decode: no bytes modeled"]
    header, *rows = lines[i + 2:]
    assert _columns(header) == ["layer", "backend", "prefill", "decode/step", "prefill FLOPs", "decode FLOPs",
                                "decode alloc"]
    # L0's backend from the decode layers; L1 only in the prefill: dashes for its decode cells
    assert [_columns(r) for r in rows] == [["L0", "sdpa", "1.00 ms", "200.0 µs", "1.50G", "1.25M", "4.0 KiB"],
                                           ["L1", "flash", "1.50 ms", "-", "1.50G", "-", "-"]]


def test_the_device_clock_times_the_layers_by_their_device_time() -> None:
    lines = generation_lines(_worker(_generation(clock="device")))
    assert lines[0].startswith("  generation (device time; ")
    assert [_columns(r)[2:4] for r in lines[-2:]] == [["100.0 µs", "20.0 µs"], ["150.0 µs", "-"]]  # a tenth


def test_what_is_unknown_is_left_out() -> None:
    g = _generation(kv_cache=None, prompt_len=None, batch=None, heads=None, kv_heads=None, kv_dtype=None,
                    prefill=None, decode=None, tokens=[], fit=None, per_key_us=None, realloc_bytes_per_token=0.0,
                    reference_bytes_per_s=None, source="shapes")
    lines = generation_lines(_worker(g))
    assert lines[0] == "  generation (cpu time; steps from shapes): 0 decode steps"
    assert lines[1].startswith("    KV cache: ") and lines[2] == "      memory events: agrees"
    assert " ".join(x.strip() for x in lines[3:]) == (
        "decode reads 2.0 MiB of K and V per step: 953.7 MiB/s over the core's time; no reference bandwidth recorded")


def test_kv_heads_without_query_heads_and_a_fit_without_quality() -> None:
    g = _generation(heads=None, kv_heads=2, fit=Fit(a=1.0, k=1.0, r2=None, points=2), per_key_us=None)
    lines = generation_lines(_worker(g))
    assert lines[0].endswith("dynamic KV cache, 2 KV heads, float32")
    assert "    decode attention per step ~ a * context^k: k=1.00 over 2 contexts" in lines


def test_a_fit_note_is_wrapped_and_escaped() -> None:
    note = "contexts span under 2x \x1b[2J " + "so no exponent is fitted " * 5
    lines = generation_lines(_worker(_generation(fit=None, fit_note=note)))
    i = next(n for n, x in enumerate(lines) if "contexts span" in x)
    assert lines[i].startswith(r"    contexts span under 2x \x1b[2J so")
    assert lines[i + 1].startswith("      ") and all(len(x) <= 100 for x in lines[i:i + 2])
    assert not any("a * context^k" in x for x in lines)


def test_hostile_memory_events_text_is_escaped() -> None:
    lines = generation_lines(_worker(_generation(kv_memory="differs: \u202e")))
    assert r"      memory events: differs: \u202e" in lines


# -- tokens_csv -------------------------------------------------------------------------------------


def test_tokens_csv_has_one_row_per_step_of_each_generation() -> None:
    runs = [RunSummary(run="r", metadata=None, errors=[],
                       workers=[_worker(_generation(), span="s1"), _worker(None, worker="plain")])]
    rows = list(csv.reader(io.StringIO(tokens_csv(runs))))
    assert tuple(rows[0]) == TOKEN_CSV_FIELDS
    # six significant digits: 65536 B stays whole, 3e9 FLOPs is 3e+09
    assert rows[1:] == [
        ["r", "w", "s1", "cpu", "3", "prefill", "64", "64", "5000", "2500", "1200", "300", "65536", "65536", "12",
         "3e+09"],
        ["r", "w", "s1", "cpu", "4", "decode", "65", "1", "810", "410.5", "250", "100", "66560", "0", "6", "2.5e+06"],
        ["r", "w", "s1", "cpu", "5", "decode", "66", "1", "790", "389.5", "250", "100", "67584", "0", "7", "2.5e+06"],
    ]


def test_tokens_csv_without_generations_is_the_header() -> None:
    assert tokens_csv([]) == ",".join(TOKEN_CSV_FIELDS) + "\n"
    runs = [RunSummary(run="r", metadata=None, errors=[], workers=[_worker(None)])]
    assert tokens_csv(runs) == ",".join(TOKEN_CSV_FIELDS) + "\n"


def test_tokens_csv_escapes_names() -> None:
    runs = [RunSummary(run="r\x1b", metadata=None, errors=[], workers=[_worker(_generation(), worker="w\udcff")])]
    text = tokens_csv(runs)
    assert text.isascii()
    row = next(csv.DictReader(io.StringIO(text)))
    assert (row["run"], row["worker"]) == (r"r\x1b", r"w\xff")


# -- compare_decode_lines ---------------------------------------------------------------------------


def _compare_run(run: str, decode: CompareDecode | None, ratio: float | None, baseline: str = "a") -> CompareRun:
    fields: dict[str, Any] = dict(
        run=run, impl=None, seq=None, dtype=None, model=None, backend="sdpa", steps=1, attention_cpu_us=0.0,
        attention_device_us=0.0, step_cpu_us=0.0, attention_share_cpu=None, alloc_bytes=0.0, peak_bytes=0,
        sxs_bytes=0.0, flops=0.0, flops_per_s=0.0, ops_per_forward=0.0, kernels_per_forward=0.0, phases={},
        layers=[], findings=[], baseline=baseline, decode=decode,
        ratio=CompareRatio(attention_cpu_us=None, attention_device_us=None, alloc_bytes=None, peak_bytes=None,
                           flops_per_s=None, decode_us_per_step=ratio))
    return CompareRun(**fields)


DECODE_A = CompareDecode(us_per_step=400.0, step_us=800.0, prefill_us=2500.0, context=66.4, kv_cache="dynamic",
                         kv_heads=1, read_bytes_per_token=2.0 * MIB, kv_bytes_per_layer=MIB, launches_per_step=6.4)


def test_no_generation_runs_give_no_decode_table() -> None:
    assert compare_decode_lines(Comparison(baseline="a", runs=[_compare_run("a", None, None)], errors=[])) == []


def test_the_decode_table_in_column_order() -> None:
    b = msgspec.structs.replace(DECODE_A, us_per_step=600.0, prefill_us=None, kv_cache=None, kv_heads=None,
                                step_us=1200.0)
    result = Comparison(baseline="a", errors=[], runs=[_compare_run("a", DECODE_A, 1.0), _compare_run("b", b, 1.5),
                                                      _compare_run("c", None, None)])
    lines = compare_decode_lines(result)
    assert lines[:2] == ["", "decode, per step (one token per sequence; attention time on the run's clock; ratios "
                             "within the groups above):"]
    assert _columns(lines[2]) == ["run", "cache", "kv heads", "context", "decode/step", "ratio", "step", "prefill",
                                  "reads/step", "launches/step"]
    assert [_columns(r) for r in lines[3:]] == [
        # the baseline marked *; context 66.4 and 6.4 launches to whole numbers
        ["a *", "dynamic", "1", "66", "400.0 µs", "1.00x", "800.0 µs", "2.50 ms", "2.0 MiB", "6"],
        # unknown cache, heads and prefill: dashes
        ["b", "-", "-", "66", "600.0 µs", "1.50x", "1.20 ms", "-", "2.0 MiB", "6"],
    ]  # run c has no decode steps: no row


def test_decode_table_escapes_run_names_and_shows_no_ratio_as_a_dash() -> None:
    result = Comparison(baseline="a", errors=[], runs=[_compare_run("x\x1b[2J", DECODE_A, None)])
    row = _columns(compare_decode_lines(result)[3])
    assert row[0] == r"x\x1b[2J" and row[5] == "-"


@pytest.mark.parametrize("baseline", [None, "other"])
def test_a_run_that_is_not_its_baseline_is_not_starred(baseline: str | None) -> None:
    run = _compare_run("a", DECODE_A, 1.0, baseline=baseline)  # type: ignore[arg-type]
    assert _columns(compare_decode_lines(Comparison(baseline=None, errors=[], runs=[run]))[3])[0] == "a"
