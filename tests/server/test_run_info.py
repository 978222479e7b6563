"""``run_info``: the few fields of a run's metadata that the runs list shows, checked and clipped."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from manyruns import ODD, SHOWN, hostile_metadata

from tb_attn_plugin.engine.metadata import parse_metadata
from tb_attn_plugin.server.run_info import ELLIPSIS, ERROR_BYTES, ERROR_CHARS, INFO_BYTES, INFO_CHARS, run_info

#: A runner's metadata as ``docs/runner.md`` describes it, cut down to what matters here.
RUNNER = {
    "model": "builtin", "impl": "naive", "dtype": "float32", "device": "cuda:0", "device_name": "NVIDIA H200",
    "user": "alice", "host": "gpu-7", "started_at": "2026-01-01T00:00:00+00:00", "torch_version": "2.9.0",
    "parallel": "tp", "world_size": 2, "status": "failed", "error": "out of memory: CUDA out of memory",
    "config": {"seq": 512, "batch": 2, "mode": "training", "impl": "naive", "dtype": "float32"},
    "accuracy": {"layers": [{"layer": 0}]}, "peaks": {"device": "cuda"},
}


def test_a_runners_metadata_is_shown_whole() -> None:
    info = run_info(RUNNER)
    assert info is not None
    assert msgspec.structs.asdict(info) == {
        "model": "builtin", "impl": "naive", "seq": 512, "batch": 2, "dtype": "float32", "mode": "training",
        "device": "cuda:0", "device_name": "NVIDIA H200", "user": "alice", "host": "gpu-7",
        "started_at": "2026-01-01T00:00:00+00:00", "torch_version": "2.9.0", "parallel": "tp", "world_size": 2,
        "status": "failed", "error": "out of memory: CUDA out of memory", "clipped": {},
    }


def test_no_metadata_is_no_info_and_empty_metadata_is_all_null() -> None:
    assert run_info(None) is None
    info = run_info({})
    assert info is not None and info.clipped == {}
    assert all(v is None for k, v in msgspec.structs.asdict(info).items() if k != "clipped")


def test_impl_and_dtype_fall_back_to_the_config() -> None:
    info = run_info({"impl": "", "config": {"impl": "sdpa", "dtype": "bfloat16"}})
    assert info is not None and (info.impl, info.dtype) == ("sdpa", "bfloat16")


@pytest.mark.parametrize("length", [INFO_CHARS - 1, INFO_CHARS, INFO_CHARS + 1, 1 << 20])
def test_strings_are_clipped_with_an_ellipsis_and_their_length(length: int) -> None:
    info = run_info({"model": "m" * length, "user": "\U0001f600" * length, "config": {"mode": "x" * length}})
    assert info is not None
    for key, char in (("model", "m"), ("user", "\U0001f600"), ("mode", "x")):
        value = getattr(info, key)
        size = len(char.encode())  # UTF-8 bytes, as JSON writes it
        if length <= INFO_CHARS and length * size <= INFO_BYTES:
            assert value == char * length and key not in info.clipped
        else:  # as many characters as fit in both bounds, with the ellipsis
            kept = min(INFO_CHARS - 1, (INFO_BYTES - len(ELLIPSIS.encode())) // size)
            assert value == char * kept + ELLIPSIS and info.clipped[key] == length


def test_the_runners_error_gets_more_room() -> None:
    info = run_info({"error": "e" * (ERROR_CHARS + 7), "status": "s" * (INFO_CHARS + 1)})
    assert info is not None and info.error is not None and info.status is not None
    assert len(info.error) == ERROR_CHARS and info.error.endswith(ELLIPSIS)
    assert len(info.status) == INFO_CHARS and info.clipped == {"error": ERROR_CHARS + 7, "status": INFO_CHARS + 1}


@pytest.mark.parametrize("value", [True, False, 0, -1, 2**31, 1.0, 1e308, float("nan"), "512", [512], {"v": 512},
                                   None])
def test_numbers_that_are_not_integers_in_range_are_null(value: Any) -> None:
    info = run_info({"world_size": value, "config": {"seq": value, "batch": value}})
    assert info is not None and (info.seq, info.batch, info.world_size) == (None, None, None)


def test_integers_in_range_are_kept() -> None:
    info = run_info({"world_size": 1 << 20, "config": {"seq": 2**31 - 1, "batch": 1}})
    assert info is not None and (info.seq, info.batch, info.world_size) == (2**31 - 1, 1, 1 << 20)
    assert run_info({"world_size": (1 << 20) + 1}).world_size is None  # type: ignore[union-attr]


@pytest.mark.parametrize("value", [7, 1.5, True, ["builtin"], {"name": "builtin"}])
def test_strings_that_are_not_strings_are_null(value: Any) -> None:
    info = run_info({key: value for key in SHOWN} | {"config": value})
    assert info is not None and info.clipped == {}
    assert all(getattr(info, key) is None for key in SHOWN)


@pytest.mark.parametrize("kind", range(4))
def test_hostile_files_give_a_few_hundred_bytes(kind: int, builtin_logdir: Path) -> None:
    template = json.loads((builtin_logdir / "naive" / "tb_attn_run.json").read_text())
    meta = parse_metadata(hostile_metadata(kind, template)).value
    assert meta is not None  # read, not refused: the bound below is run_info's
    info = run_info(meta)
    assert info is not None
    size = len(msgspec.json.encode(info))
    if kind == 1:  # every field shown is long and odd: each is clipped, its characters intact
        assert set(info.clipped) == set(SHOWN) and info.mode is not None and info.mode.startswith(ODD)
        assert info.model is not None and info.model.startswith("model" + ODD) and info.model.endswith(ELLIPSIS)
        assert len(msgspec.json.encode(info.model)) - 2 <= INFO_BYTES
        assert size < 7_000, size
    else:
        assert size < 1_000, size
    # The runner's sequence length and batch of 16 and 2 where the config is left alone; the
    # template's world size of 1 but where kind 1 makes it a boolean.
    want = {0: (16, 2, 1), 1: (None, None, None)}.get(kind, (None, None, 1))
    assert (info.seq, info.batch, info.world_size) == want


@pytest.mark.parametrize("char", ["\x01", "\U0001f600", "\u202e", "é"])
def test_every_field_at_its_worst_stays_under_7_kb(char: str) -> None:
    """Characters that JSON writes in six bytes, or UTF-8 in four, cut a field shorter: 100 such
    runs list in under 0.7 MB (200 characters of controls were 1.2 KB a field)."""
    fields = ("model", "impl", "dtype", "device", "device_name", "user", "host", "started_at", "torch_version",
              "parallel", "status", "error")
    info = run_info({**{k: char * 5000 for k in fields}, "config": {"mode": char * 5000}})
    assert info is not None and len(msgspec.json.encode(info)) < 7000
    assert all(len(msgspec.json.encode(getattr(info, k))) - 2 <= (ERROR_BYTES if k == "error" else INFO_BYTES)
               for k in (*fields, "mode"))
    assert info.model is not None and info.model.endswith(ELLIPSIS) and info.clipped["model"] == 5000
