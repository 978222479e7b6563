"""``runner.metadata``: ``tb_attn_run.json`` written whole under its schema and read back (or
None), and the environment a run records."""

from __future__ import annotations

import json
import platform
import re
from pathlib import Path

import pytest
import torch

from runner.metadata import METADATA_FILE, METADATA_SCHEMA, environment, now_iso, read_metadata, write_metadata
from tb_attn_plugin.vocab.scopes import GRAMMAR_VERSION


def test_written_under_the_schema_and_read_back(tmp_path: Path) -> None:
    run = tmp_path / "a" / "run"  # made on the way
    write_metadata(run, {"status": "ok", "config": {"seq": 64}})
    assert read_metadata(run) == {"schema": METADATA_SCHEMA, "status": "ok", "config": {"seq": 64}}
    assert (run / METADATA_FILE).read_text().endswith("}\n") and [p.name for p in run.iterdir()] == [METADATA_FILE]


@pytest.mark.parametrize("content", [None, "{half", "[1, 2]"])
def test_missing_broken_or_not_an_object_reads_as_none(tmp_path: Path, content: str | None) -> None:
    if content is not None:
        (tmp_path / METADATA_FILE).write_text(content)
    assert read_metadata(tmp_path) is None


def test_the_environment_says_where_the_run_happens() -> None:
    env = environment("cpu")
    assert (env["device"], env["torch_version"], env["python_version"]) == ("cpu", torch.__version__,
                                                                           platform.python_version())
    assert env["scope_grammar"] == GRAMMAR_VERSION and isinstance(env["device_name"], str) and env["device_name"]
    assert env["git_commit"] is None or re.fullmatch(r"[0-9a-f]{40}", env["git_commit"])
    json.dumps(env)  # all of it goes into the metadata file


def test_now_is_utc_to_the_second() -> None:
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", now_iso())
