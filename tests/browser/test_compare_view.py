"""The Compare view (``views/compare.ts``) in a real browser: two runs ticked in the runs list, their
ratios against the analysis engine's ``compare`` and the scaling chart. Screenshots go to
``test-artifacts/``."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from pages import open_tab, shot
from playwright.sync_api import Page, expect


def test_compare_view_with_ratios_and_scaling(tensorboard: Any, browser_logdir: Path, page: Page,
                                              artifacts: Path) -> None:
    from tb_attn_plugin.analysis.cross_run.compare import compare
    from tb_attn_plugin.engine.loader import Loader, resolve_runs

    frame = open_tab(page, tensorboard.url)
    for run in ("demo/sdpa", "demo/naive"):  # ticked in this order; the baseline is the first by name
        frame.get_by_role("checkbox", name=f"Pick {run} for comparing").check()
    frame.get_by_test_id("compare-button").click()
    table = frame.get_by_test_id("compare-table")
    expect(table).to_be_visible()
    expect(table).to_contain_text("demo/naive")
    expect(table).to_contain_text("baseline")
    runs = {r.name: r for r in resolve_runs(str(browser_logdir))}
    loader = Loader()
    expected = compare([loader.summarize_run(runs["demo/sdpa"]), loader.summarize_run(runs["demo/naive"])])
    assert expected.baseline == "demo/naive"
    sdpa = next(r for r in expected.runs if r.run == "demo/sdpa")
    assert sdpa.ratio.alloc_bytes is not None
    ratio = f"{sdpa.ratio.alloc_bytes:.2f}"
    row = table.locator("tr", has=frame.get_by_role("link", name="demo/sdpa", exact=True)).first
    expect(row).to_contain_text(ratio)
    naive = table.locator("tr", has=frame.get_by_role("link", name="demo/naive", exact=True)).first
    expect(naive).to_contain_text("baseline")
    expect(naive).to_contain_text("hidden-copy")
    expect(frame.get_by_test_id("scaling-chart")).to_be_visible()
    shot(page, artifacts, "compare")


def test_compare_headline_matches_the_cli(tensorboard: Any, browser_logdir: Path, page: Page, artifacts: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """The headline sentence of a group (three implementations of one configuration) is the one
    the CLI prints, figures included."""
    from tb_attn_plugin.cli.main import main

    runs = ("demo/naive", "demo/sdpa", "demo/sdpa-math")
    assert main(["compare", str(browser_logdir), "--runs", ",".join(runs), "--format", "json"]) == 0
    (headline,) = json.loads(capsys.readouterr().out)["compare"]["headlines"]
    assert headline["group"] == "builtin, seq 16, float32, training" and len(headline["versus"]) == 2
    assert re.search(r"\d+\.\d× less time than", headline["sentence"])
    frame = open_tab(page, tensorboard.url)
    for run in runs:
        frame.get_by_role("checkbox", name=f"Pick {run} for comparing").check()
    frame.get_by_test_id("compare-button").click()
    expect(frame.get_by_test_id("headlines")).to_have_text(headline["sentence"])
    shot(page, artifacts, "compare-headline")
