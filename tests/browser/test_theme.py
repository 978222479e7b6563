"""TensorBoard's dark theme in the tab: a browser that prefers dark makes TensorBoard dark, and
the tab follows it, then follows it back when TensorBoard turns light again. Screenshots of
each view in dark go to ``test-artifacts/`` (``dark-*.png``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pages import expect_ink, expect_still, open_run, open_tab, shot, show_tab
from playwright.sync_api import Frame, Page, expect


def _background(frame: Frame) -> str:
    return frame.evaluate("getComputedStyle(document.querySelector('.tb-attn')).backgroundColor")


def test_the_tab_follows_tensorboards_dark_theme(tensorboard: Any, page: Page, artifacts: Path) -> None:
    page.emulate_media(color_scheme="dark")
    frame = open_tab(page, tensorboard.url)
    assert page.evaluate("document.body.classList.contains('dark-mode')")  # TensorBoard went dark
    root = frame.locator(".tb-attn")
    expect(root).to_have_class("tb-attn dark")
    assert _background(frame) == "rgb(32, 33, 36)"
    shot(page, artifacts, "dark-runs")
    open_run(frame, "demo/naive")
    expect_ink(frame, ".layers .chart canvas", [200], "the layers chart in dark")
    shot(page, artifacts, "dark-run")
    for label, name in (("Layers \u00d7 heads", "heads"), ("Memory", "memory"), ("Timeline", "timeline")):
        show_tab(frame, label)
        expect_still(frame)  # the chart drawn, its animation over
        shot(page, artifacts, f"dark-{name}")
    # TensorBoard's own switch back to light: the tab follows without a reload.
    page.evaluate("document.body.classList.remove('dark-mode')")
    expect(root).to_have_class("tb-attn")
    assert _background(frame) != "rgb(32, 33, 36)"
    show_tab(frame, "Layers \u00d7 phases")
    expect_ink(frame, ".layers .chart canvas", [200], "the layers chart, light again")


def test_compare_in_dark(tensorboard: Any, page: Page, artifacts: Path) -> None:
    page.emulate_media(color_scheme="dark")
    frame = open_tab(page, tensorboard.url)
    for run in ("demo/naive", "demo/sdpa", "demo/sdpa-math"):
        frame.get_by_role("checkbox", name=f"Pick {run} for comparing").check()
    frame.get_by_test_id("compare-button").click()
    expect(frame.get_by_test_id("headlines")).to_be_visible()
    expect(frame.locator(".tb-attn")).to_have_class("tb-attn dark")
    expect_still(frame)
    shot(page, artifacts, "dark-compare")
