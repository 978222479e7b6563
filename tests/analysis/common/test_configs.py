"""``analysis.configs`` reads a run's configuration from its metadata, keys runs like for like but one field, names
groups in words and tells exact from approximate attention; the tests use hand-written metadata and summaries."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from tb_attn_plugin.analysis.common.configs import config, config_key, distinct_labels, exact, group_label, text
from tb_attn_plugin.types.schema import RunSummary, WorkerSummary
from tb_attn_plugin.vocab.backends import Backend

BASE: dict[str, Any] = {"model": "builtin", "impl": "sdpa", "seq": 512, "dtype": "float32", "mode": "training",
                        "batch": 2, "heads": 8}


def _run(metadata: dict[str, object] | None, *workers: WorkerSummary) -> RunSummary:
    return RunSummary(run="r", metadata=metadata, workers=list(workers), errors=[])


def _worker(backend: str, attention_us: float = 10.0, rank: int | None = None) -> WorkerSummary:
    return WorkerSummary(file=f"{backend}.json", worker=f"w{rank}", span=None, device="cpu", inferred=False,
                         backend=backend, steps=[1], step_count=1, step_cpu_us=100.0, step_device_us=0.0,
                         attention_cpu_us=attention_us, attention_device_us=0.0, attention_share_cpu=None,
                         attention_share_device=None, layers=[], per_step=[], diagnostics={}, notes=[], rank=rank)


# -- config ---------------------------------------------------------------------------------------

def test_the_config_is_the_metadata_config_with_the_top_level_fields_it_lacks() -> None:
    meta: dict[str, object] = {"config": {"seq": 128, "impl": "naive"}, "model": "hf:gpt2", "impl": "sdpa",
                               "dtype": "bfloat16", "world_size": 2, "status": "ok", "host": "box"}
    # The config's own impl wins over the top level's; status and host are not configuration.
    assert config(_run(meta)) == {"seq": 128, "impl": "naive", "model": "hf:gpt2", "dtype": "bfloat16",
                                  "world_size": 2}


def test_the_config_does_not_write_through_to_the_metadata() -> None:
    inner = {"seq": 128}
    cfg = config(_run({"config": inner, "model": "builtin"}))
    cfg["seq"] = 1
    assert inner == {"seq": 128}


@pytest.mark.parametrize("meta", [None, {}, {"config": ["seq", 128]}, {"config": "seq=128"}, {"config": None}])
def test_metadata_without_a_config_dict_gives_an_empty_config(meta: dict[str, object] | None) -> None:
    assert config(_run(meta)) == {}


# -- config_key -----------------------------------------------------------------------------------

def test_runs_that_differ_only_in_the_left_out_field_share_a_key() -> None:
    naive, sdpa = {**BASE, "impl": "naive"}, dict(BASE)
    assert config_key(naive, but="impl") == config_key(sdpa, but="impl")
    assert config_key(naive, but="seq") != config_key(sdpa, but="seq")
    # The key is the rest of the configuration as sorted JSON: key order does not matter.
    reordered = dict(reversed(list(sdpa.items())))
    assert config_key(reordered, but="impl") == config_key(sdpa, but="impl")
    assert json.loads(config_key(sdpa, but="impl")) == {k: v for k, v in BASE.items() if k != "impl"}


def test_several_fields_can_be_left_out() -> None:
    a, b = {**BASE, "seq": 128, "impl": "naive"}, {**BASE, "seq": 256}
    assert config_key(a, but=("impl", "seq")) == config_key(b, but=("impl", "seq"))
    assert config_key(a, but="impl") != config_key(b, but="impl")


def test_a_two_rank_run_is_not_in_a_single_process_series() -> None:
    assert config_key({**BASE, "world_size": 2}, but="seq") != config_key({**BASE, "world_size": 1}, but="seq")


def test_values_json_cannot_hold_are_keyed_by_their_text() -> None:
    # Anyone can write a metadata file; a value json cannot encode must not crash the grouping.
    key = config_key({"seq": 1, "odd": {1, 2}}, but="impl")
    assert json.loads(key) == {"odd": str({1, 2}), "seq": 1}


# -- text -----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("value", "expected"), [("sdpa", "sdpa"), ("", ""), (5, None), (None, None),
                                                 (["sdpa"], None), (True, None)])
def test_only_a_string_is_a_name(value: object, expected: str | None) -> None:
    assert text(value) == expected


# -- group_label ----------------------------------------------------------------------------------

def test_a_training_group_in_words() -> None:
    assert group_label(BASE) == "builtin, seq 512, float32, training"


def test_a_generation_group_names_its_prompt_and_tokens() -> None:
    cfg = {**BASE, "mode": "generate", "prompt_len": 128, "new_tokens": 6}
    assert group_label(cfg) == "builtin, prompt 128 + 6 tokens, float32, generate"


def test_parallel_layout_and_ranks_are_named_only_when_there_are_some() -> None:
    assert group_label({**BASE, "parallel": "tp", "world_size": 2}) == \
        "builtin, seq 512, float32, training, parallel tp, 2 ranks"
    assert group_label({**BASE, "parallel": "none", "world_size": 1}) == group_label(BASE)


def test_a_world_size_that_is_no_integer_is_not_a_rank_count() -> None:
    assert group_label({**BASE, "world_size": "8"}) == group_label(BASE)


def test_missing_fields_read_as_question_marks_and_no_empty_parts() -> None:
    # No model, dtype or mode: "?" where a name belongs, and no ", ," where the mode would be.
    assert group_label({"seq": 64}) == "?, seq 64, ?"
    assert group_label({"model": "", "seq": 64, "dtype": None, "mode": None}) == "?, seq 64, ?"


# -- distinct_labels ------------------------------------------------------------------------------

def test_groups_that_read_apart_keep_their_labels() -> None:
    a, b = {**BASE, "seq": 128}, {**BASE, "seq": 256}
    assert distinct_labels([a, b]) == [group_label(a), group_label(b)]
    assert distinct_labels([]) == []


def test_labels_alike_gain_every_field_that_parts_them_in_key_order() -> None:
    a = {**BASE, "batch": 4, "mask": "causal"}
    b = {**BASE, "batch": 8, "mask": "sliding:64"}
    c = {**BASE, "seq": 1024}  # reads apart already
    label = group_label(BASE)
    assert distinct_labels([a, b, c]) == [f"{label}, batch 4, mask causal", f"{label}, batch 8, mask sliding:64",
                                          group_label(c)]


def test_the_field_a_group_holds_together_is_not_named() -> None:
    a, b = {**BASE, "impl": "naive", "kv_cache": "static"}, {**BASE, "impl": "sdpa", "kv_cache": "dynamic"}
    label = group_label(BASE)
    assert distinct_labels([a, b], but=("impl",)) == [f"{label}, kv_cache static", f"{label}, kv_cache dynamic"]
    assert distinct_labels([a, b]) == [f"{label}, impl naive, kv_cache static", f"{label}, impl sdpa, kv_cache dynamic"]


def test_a_field_one_group_lacks_parts_it_from_the_other() -> None:
    a, b = {**BASE, "compile": True}, dict(BASE)
    label = group_label(BASE)
    assert distinct_labels([a, b]) == [f"{label}, compile True", f"{label}, compile None"]


def test_identical_configurations_keep_identical_labels() -> None:
    # Nothing parts them: no field is invented.
    assert distinct_labels([dict(BASE), dict(BASE)]) == [group_label(BASE)] * 2


# -- exact ----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("backend", "expected"), [
    (Backend.NAIVE, True), (Backend.FLASH, True), (Backend.FLEX, True), (Backend.UNKNOWN, True),
    (Backend.LINEAR, False), (Backend.PERFORMER, False), (Backend.INT8_QK, False)])
def test_approximate_backends_are_not_exact(backend: Backend, expected: bool) -> None:
    assert exact(_run({"config": {}}, _worker(backend.value))) is expected


def test_quantized_projections_are_not_exact() -> None:
    assert not exact(_run({"config": {"quant": "int8"}}, _worker("sdpa")))
    # "quant" that names nothing (absent, null, a number written by hand) is no quantization.
    assert exact(_run({"config": {"quant": None}}, _worker("sdpa")))
    assert exact(_run({"config": {"quant": 8}}, _worker("sdpa")))
    assert exact(_run(None, _worker("sdpa")))


def test_exactness_is_the_representative_workers() -> None:
    # Two ranks: the lower median by attention time is the faster one (10 µs, linear), so the run is not exact.
    run = _run(None, _worker("naive", attention_us=30.0, rank=0), _worker("linear", attention_us=10.0, rank=1))
    assert not exact(run)
    flipped = msgspec.structs.replace(run, workers=[_worker("naive", 10.0, 0), _worker("linear", 30.0, 1)])
    assert exact(flipped)


def test_a_run_without_traces_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="no traces"):
        exact(_run(None))
