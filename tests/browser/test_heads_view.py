"""The Layers × heads heatmap (``views/heads.ts``) in a real browser: measured head scopes and
heads derived from the layer. Screenshots go to ``test-artifacts/``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pages import back_to_runs, expect_ink, open_run, open_tab, shot, show_tab
from playwright.sync_api import Page, expect


def test_heads_heatmap_marks_derived_heads(tensorboard: Any, page: Page, artifacts: Path) -> None:
    frame = open_tab(page, tensorboard.url)
    derived = "derived: split evenly from the layer"
    for run, is_derived in (("demo/naive", True), ("demo/naive-per-head", False)):
        open_run(frame, run)
        show_tab(frame, "Layers \u00d7 heads")
        legend = frame.locator("section.heads .legend")
        expect(legend).to_be_visible()
        expect(frame.locator("section.heads .chart canvas").first).to_be_visible()
        expect_ink(frame, "section.heads .chart canvas", [2000], f"{run}'s heatmap")
        if is_derived:
            expect(legend).to_contain_text(derived)
            expect(legend).not_to_contain_text("measured")
        else:
            expect(legend).to_contain_text("measured (head scopes)")
            expect(legend).not_to_contain_text("derived")
        shot(page, artifacts, "heads-" + run.split("/")[1])
        show_tab(frame, "Layers \u00d7 phases")
        back_to_runs(frame)
