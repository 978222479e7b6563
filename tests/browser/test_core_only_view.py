"""A trace in which only attention's core could be found (bare SDPA calls, no projection around
them) in the tab: the run overview and every layer of the layers table carry a "core only" mark
that says why; the share, the table's block column and the headline are the attention core's. A
plain trace widened to its projections carries none. Screenshots go to ``test-artifacts/``."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import bare_sdpa, profile_run, profile_script
from pages import engine_summary, fmt_share, open_run, open_tab, shot, stat
from playwright.sync_api import Page, expect

from devtools.tbserver import TensorBoard

CORE_ONLY, WIDENED = "bare-sdpa", "plain-naive"


@pytest.fixture(scope="module")
def core_logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    logdir = tmp_path_factory.mktemp("core-only-logdir")
    (logdir / CORE_ONLY).mkdir()
    profile_script(logdir / CORE_ONLY, bare_sdpa)
    result = profile_run(logdir, WIDENED, impl="naive", mode="inference", scopes=False)
    assert result.status == "ok", result.error
    return logdir


@pytest.fixture(scope="module")
def core_tensorboard(core_logdir: Path) -> Iterator[TensorBoard]:
    with TensorBoard(core_logdir) as tb:
        yield tb


def test_core_only_layers_are_marked(core_tensorboard: Any, core_logdir: Path, page: Page, artifacts: Path) -> None:
    ws = engine_summary(core_logdir, CORE_ONLY)
    assert ws.layers and all(layer.core_only for layer in ws.layers)
    frame = open_tab(page, core_tensorboard.url)
    # The runs list marks the attention time and share of the run whose layers are cores only.
    for run, marks in ((CORE_ONLY, 2), (WIDENED, 0)):
        row = frame.get_by_role("button", name=f"Open run {run}", exact=True)
        expect(row.locator("td[data-col=share]")).not_to_have_text("\u2026")
        expect(row.get_by_test_id("core-only")).to_have_count(marks)
    expect(frame.get_by_role("button", name=f"Open run {CORE_ONLY}", exact=True).get_by_test_id("core-only").first
           ).to_have_attribute("title", re.compile(f"^{len(ws.layers)} layers of .* found by the attention core alone"))
    shot(page, artifacts, "core-only-runs")
    open_run(frame, CORE_ONLY)
    expect(frame.get_by_test_id("run-headline")).to_have_text(ws.headline)
    assert ws.headline.startswith("The attention core is ")
    expect(stat(frame, "attention core share, CPU").locator("b")).to_have_text(fmt_share(ws.attention_share_cpu))
    box = frame.get_by_test_id("core-only-note")
    expect(box).to_contain_text("Every layer was found by the attention core alone")
    expect(box.locator(".badge.core-only")).to_have_attribute(
        "title", "Found by its core (SDPA, or q\u00b7k\u1d40 \u2192 softmax \u2192 attn\u00b7v) without its "
        "projections on at least one side (q, k, v before it, or the output after it; the run's notes say which), "
        "so this layer's figures leave that side out.")
    expect(frame.locator("table.layers-table th.group-head").first).to_have_text("attention core")
    rows = frame.locator("table.layers-table tbody tr")
    expect(rows).to_have_count(len(ws.layers))
    marks = rows.get_by_test_id("core-only")
    expect(marks).to_have_count(len(ws.layers))
    expect(marks.first).to_have_text("core only")
    expect(marks.first).to_have_attribute("title", box.locator(".badge.core-only").get_attribute("title") or "")
    expect(frame.locator(".finding", has_text="The attention core takes").first).to_be_visible()
    shot(page, artifacts, "core-only-run")

    frame.get_by_role("button", name="\u2190 Runs").click()
    open_run(frame, WIDENED)
    expect(stat(frame, "attention share, CPU")).to_be_visible()
    expect(frame.locator("table.layers-table tbody tr").first).to_contain_text("inferred")
    expect(frame.locator("table.layers-table th.group-head").first).to_have_text("whole block")
    expect(frame.locator("table.layers-table").get_by_test_id("core-only")).to_have_count(0)
    expect(frame.get_by_test_id("core-only-note")).to_have_count(0)
