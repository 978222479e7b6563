"""The Timeline view (``views/timeline.ts``) in a real browser: the lanes drawn, and a click on an
attention event where the tab drew it opens its layer's drill-down. Screenshots go to
``test-artifacts/``."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pages import drill_title, expect_ink, open_run, open_tab, shot, show_tab, timeline_point
from playwright.sync_api import Page, expect


def test_timeline_view_and_click(tensorboard: Any, page: Page, artifacts: Path) -> None:
    frame = open_tab(page, tensorboard.url)
    open_run(frame, "demo/naive")
    show_tab(frame, "Timeline")
    timeline = frame.locator("section.timeline")
    expect(timeline.locator("p.muted")).to_contain_text(re.compile(r"^Step 1: .+, [\d,]+ events on \d+ rows?\."))
    expect(timeline.locator("canvas").first).to_be_visible()
    expect_ink(frame, "section.timeline canvas", [5000], "the timeline")
    shot(page, artifacts, "timeline")
    # Click the longest forward attention event of a CPU thread where the tab drew it.
    point = timeline_point(frame)
    frame.locator(".timeline-chart").click(position={"x": point["x"], "y": point["y"]})
    expect(drill_title(frame)).to_contain_text(f"Drill-down: Layer {point['layer']} \u00b7 ")
    expect(drill_title(frame)).to_contain_text("forward")
    shot(page, artifacts, "timeline-drilldown")
