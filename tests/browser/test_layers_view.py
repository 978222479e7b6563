"""The Layers × phases chart (``views/layers.ts``) in a real browser: the stacked bars, the
chart-metric switch and the axis tooltip, against the analysis engine's figures. Screenshots go
to ``test-artifacts/``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pages import canvas_png, engine_summary, expect_ink, fmt_flops, open_run, open_tab, shot
from playwright.sync_api import Page, expect


def test_stacked_bar_chart_and_metric_switch(tensorboard: Any, browser_logdir: Path, page: Page,
                                             artifacts: Path) -> None:
    ws = engine_summary(browser_logdir, "demo/naive")
    frame = open_tab(page, tensorboard.url)
    open_run(frame, "demo/naive")
    canvas = "section.layers .chart canvas"
    expect(frame.locator(canvas).first).to_be_visible()
    expect_ink(frame, canvas, [2000], "the bar chart")
    before = canvas_png(frame, canvas)

    chart_metric = frame.get_by_role("combobox", name="Chart metric")
    chart_metric.select_option("flops")
    expect(chart_metric).to_have_value("flops")
    frame.wait_for_function("png => document.querySelector('section.layers .chart canvas').toDataURL() !== png",
                            arg=before)
    expect_ink(frame, canvas, [2000], "the bar chart of FLOPs")
    # The axis tooltip over layer 0 now speaks FLOPs, with the engine's total for the layer.
    box = frame.locator("section.layers .chart").bounding_box()
    assert box is not None
    plot_left, plot_right = 70, 16  # the chart's grid margins (layers.ts)
    x0 = plot_left + (box["width"] - plot_left - plot_right) / len(ws.layers) / 2
    frame.locator("section.layers .chart").hover(position={"x": x0, "y": box["height"] - 60})
    tooltip = frame.locator("section.layers .chart div", has_text="total:").last
    expect(tooltip).to_contain_text("Layer 0")
    expect(tooltip).to_contain_text("FLOPs")
    expect(tooltip).to_contain_text(f"total: {fmt_flops(sum(p.flops for p in ws.layers[0].phases))}")
    shot(page, artifacts, "chart-flops")
