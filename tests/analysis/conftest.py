"""Fixtures for the analysis tests: hand-written traces, their attribution as rows, golden files.

Golden files are compared as parsed JSON. They change only on request: run the suite with
``TB_ATTN_REGEN_GOLDEN=1`` to rewrite them from the code under test, then read the diff.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from analysis_rows import Rows, attribution_rows
from helpers import profile_run

from tb_attn_plugin.analysis.attribution.attribute import attribute
from tb_attn_plugin.trace.events import Events

HERE = Path(__file__).parent
GOLDEN = HERE / "golden"
REGEN_ENV = "TB_ATTN_REGEN_GOLDEN"

def _dump(data: Rows) -> str:
    """Pretty JSON with one row per line, so that a regenerated golden file diffs row by row."""
    parts = []
    for key, value in data.items():
        if isinstance(value, list) and value:
            body = ",\n".join("    " + json.dumps(row) for row in value)
            parts.append(f"  {json.dumps(key)}: [\n{body}\n  ]")
        else:
            parts.append(f"  {json.dumps(key)}: {json.dumps(value)}")
    return "{\n" + ",\n".join(parts) + "\n}\n"


@pytest.fixture
def rows_of(trace_events: Callable[[str], Events]) -> Callable[[str | Events], Rows]:
    """Attribution rows of a trace under ``traces/`` (by name) or of decoded events."""

    def rows(trace: str | Events) -> Rows:
        events = trace_events(trace) if isinstance(trace, str) else trace
        return attribution_rows(events, attribute(events))

    return rows


@pytest.fixture
def golden() -> Callable[[str, Rows], None]:
    """Compare data with ``golden/<name>.json`` (or rewrite that file when TB_ATTN_REGEN_GOLDEN=1)."""

    def check(name: str, actual: Rows) -> None:
        path = GOLDEN / f"{name}.json"
        actual = json.loads(json.dumps(actual))  # as it would read back: tuples become lists
        if os.environ.get(REGEN_ENV) == "1":
            GOLDEN.mkdir(exist_ok=True)
            path.write_text(_dump(actual))
            return
        if not path.exists():
            pytest.fail(f"no golden file {path.name}: run with {REGEN_ENV}=1 to write it, then review it")
        expected = json.loads(path.read_text())
        assert actual == expected, f"differs from golden/{path.name} (regenerate with {REGEN_ENV}=1 if intended)"

    return check


def pick(rows: list[dict[str, Any]], name: str, **where: Any) -> dict[str, Any]:
    """The one row called ``name`` (matching ``where``), for explicit checks next to the golden comparison."""
    found = [r for r in rows if r["name"] == name and all(r[k] == v for k, v in where.items())]
    assert len(found) == 1, f"{len(found)} rows match {name} {where}"
    return found[0]


@pytest.fixture
def row() -> Callable[..., dict[str, Any]]:
    return pick


#: The lengths of the ``sweep`` fixture's runs.
SWEEP_SEQS = (32, 64, 128)


@pytest.fixture(scope="session")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Naive and SDPA attention of the tiny built-in model at ``SWEEP_SEQS``, one run each, named
    ``<impl>/seq<S>``: Compare's and scaling's input."""
    logdir = tmp_path_factory.mktemp("sweep")
    for impl in ("naive", "sdpa"):
        for seq in SWEEP_SEQS:
            assert profile_run(logdir, f"{impl}/seq{seq}", impl=impl, seq=seq).status == "ok"
    return logdir
