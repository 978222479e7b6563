"""``serving_lines`` (``cli/report_serving.py``): a serving engine's batch sentences under ``serving:`` in
``tb-attn summarize``, wrapped and escaped; nothing for a worker without a serving engine's annotations."""

from __future__ import annotations

from typing import Any

from tb_attn_plugin.cli.report_serving import serving_lines
from tb_attn_plugin.types.schema import ServingBatch, WorkerSummary


def _worker(serving: ServingBatch | None) -> WorkerSummary:
    return WorkerSummary(file="w.json", worker="w", span=None, device="cuda", inferred=True, backend="vllm-paged",
                         steps=[1], step_count=1, step_cpu_us=0.0, step_device_us=0.0, attention_cpu_us=0.0,
                         attention_device_us=0.0, attention_share_cpu=None, attention_share_device=None, layers=[],
                         per_step=[], diagnostics={}, notes=[], serving=serving)


def _batch(sentences: list[str], **changes: Any) -> ServingBatch:
    fields: dict[str, Any] = dict(annotation="execute_context_2(100)_generation_3(3)", iterations=1.0,
                                  prefill_requests=2.0, prefill_tokens=100.0, decode_requests=3.0, decode_tokens=3.0,
                                  pairs=None, fewest_pairs=0.0, decode_keys=None, kv_bytes_per_token=None,
                                  kv_dtype=None, decode_kv_bytes=None, sentences=sentences)
    return ServingBatch(**(fields | changes))


def test_no_serving_engine_gives_no_lines() -> None:
    assert serving_lines(_worker(None)) == []


def test_a_batch_without_sentences_is_the_heading_alone() -> None:
    assert serving_lines(_worker(_batch([]))) == ["  serving:"]


def test_each_sentence_starts_a_line_under_the_heading() -> None:
    lines = serving_lines(_worker(_batch(["1 engine iteration per step.", "KV cache: 4.0 KiB per token."])))
    assert lines == ["  serving:", "    1 engine iteration per step.", "    KV cache: 4.0 KiB per token."]


def test_a_long_sentence_wraps_at_100_columns_with_a_hanging_indent() -> None:
    sentence = " ".join(f"request{i:02d}" for i in range(30))  # 30 words of 9 letters: 299 columns
    lines = serving_lines(_worker(_batch([sentence])))
    body = lines[1:]
    # 9 words a line (4 + 9 * 9 + 8 = 93 columns, 95 with the hanging indent; a 10th would pass 100): 9, 9, 9, 3
    assert len(body) == 4
    assert body[0].startswith("    request00 ") and all(line.startswith("      request") for line in body[1:])
    assert all(len(line) <= 100 for line in body)
    assert " ".join(line.strip() for line in body) == sentence


def test_a_sentence_from_the_trace_is_escaped() -> None:
    # The sentences quote annotation names, which the traced program chose.
    (_, line) = serving_lines(_worker(_batch(["annotation \x1b]0;pwned\x07 seen\u202e"])))
    assert line == r"    annotation \x1b]0;pwned\x07 seen\u202e"
