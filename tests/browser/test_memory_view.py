"""The Memory view (``views/memory.ts``) in a real browser: the memory curve, the per-layer peaks
(a bar opens its layer's drill-down) and the step picker. Screenshots go to ``test-artifacts/``."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pages import drill_title, expect_ink, open_run, open_tab, shot, show_tab
from playwright.sync_api import Page, expect


def test_memory_view(tensorboard: Any, page: Page, artifacts: Path) -> None:
    frame = open_tab(page, tensorboard.url)
    open_run(frame, "demo/naive")
    show_tab(frame, "Memory")
    memory = frame.locator("section.memory")
    expect(memory.locator(".muted").first).to_have_text(
        re.compile(r"^Step 1 on cpu: .+ long, peak allocated [\d.]+ (B|KiB|MiB|GiB), \d+ points\.$"))
    expect(memory.locator("canvas")).to_have_count(2)
    expect_ink(frame, "section.memory canvas", [2000, 500], "the memory curve and the peaks")
    expect(memory.locator(".legend")).to_contain_text("L0")
    expect(memory.locator(".legend")).to_contain_text("L1")
    shot(page, artifacts, "memory")
    # A peak bar opens its layer's drill-down: layer 0's bar is the left one, from the axis up.
    peak_chart = memory.locator(".chart").nth(1)
    box = peak_chart.bounding_box()
    assert box is not None
    peak_chart.click(position={"x": 80 + (box["width"] - 104) / 4, "y": box["height"] - 28 - 3})
    expect(drill_title(frame)).to_have_text("Drill-down: Layer 0 \u00b7 whole block \u00b7 forward")
    # Another step: the view reloads for it.
    frame.get_by_role("combobox", name="Step").select_option("2")
    expect(memory.locator(".muted").first).to_contain_text("Step 2 on cpu: ")
    expect_ink(frame, "section.memory canvas", [2000, 500], "the memory curve of step 2")
