"""A 24-layer run in a real browser: the Memory view labels only the blocks whose names fit their
width (24 narrow blocks printed their names over each other), and the Memory and Timeline legends
name every layer, one entry per layer colour (the Timeline's stopped at L15)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import profile_run
from pages import chart_option, expect_ink, open_run, open_tab, shot, show_tab
from playwright.sync_api import Page

from devtools.tbserver import TensorBoard

LAYERS = 24
RUN = "deep/sdpa"
#: views/memory.ts: LINE_GRID's left + right, LABEL_CHAR_PX, and the label's padding.
GRID_X, CHAR_PX, PAD = 80 + 24, 6, 4
#: metrics.ts's LAYER_COLORS: layer colours repeat every 6 layers.
COLORS = 6


@pytest.fixture(scope="module")
def deep_tensorboard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TensorBoard]:
    logdir = tmp_path_factory.mktemp("deep")
    profile_run(logdir / "deep", "sdpa", impl="sdpa", layers=LAYERS)
    with TensorBoard(logdir) as tb:
        yield tb


def _groups(prefix: str = "", noun: str = "") -> list[str]:
    """The legend's entries for layers 0..23: "L0, L6, L12, L18" and so on."""
    out = []
    for c in range(COLORS):
        names = ", ".join(f"L{layer}" for layer in range(c, LAYERS, COLORS))
        out.append(f"{prefix}{names}{f' {noun}s' if noun else ''}")
    return out


def test_memory_labels_only_blocks_that_hold_their_names(deep_tensorboard: Any, page: Page, artifacts: Path) -> None:
    frame = open_tab(page, deep_tensorboard.url)
    open_run(frame, RUN)
    show_tab(frame, "Memory")
    memory = frame.locator("section.memory")
    expect_ink(frame, "section.memory canvas", [2000, 500], "the memory curve and the peaks")
    items = memory.locator(".legend .legend-item").all_inner_texts()
    # Forward, then backward: each layer once.
    assert items[:2 * COLORS] == _groups() + [f"{g} bwd" for g in _groups()], items
    shot(page, artifacts, "memory-24-layers")

    option = chart_option(frame, ".memory-curve")
    line = option["series"][0]
    box = memory.locator(".memory-curve").bounding_box()
    assert box is not None
    span = option["xAxis"][0]["max"] - option["xAxis"][0]["min"]
    px_per_us = (box["width"] - GRID_X) / span
    areas = line["markArea"]["data"]
    assert len(areas) == 2 * LAYERS
    shown = [(a[0]["xAxis"], a[1]["xAxis"], a[0]["name"]) for a in areas if a[0]["label"]["show"]]
    for start, end, name in shown:
        assert (end - start) * px_per_us >= len(name) * CHAR_PX + PAD, (name, (end - start) * px_per_us)
    # At least one forward block is too narrow here for its name, so some go unlabelled...
    assert len(shown) < len(areas)
    # ...and zoomed in to the first forward block, it is labelled.
    start, end = areas[0][0]["xAxis"], areas[0][1]["xAxis"]
    frame.eval_on_selector(".memory-curve", "(el, w) => el.echart.dispatchAction({type: 'dataZoom', "
                                            "startValue: w[0], endValue: w[1]})", [start, end])
    for _ in range(50):
        if chart_option(frame, ".memory-curve")["series"][0]["markArea"]["data"][0][0]["label"]["show"]:
            break
        page.wait_for_timeout(100)
    else:
        pytest.fail("zoomed in to L0's forward block, its label is still hidden")


def test_timeline_legend_names_every_layer(deep_tensorboard: Any, page: Page) -> None:
    frame = open_tab(page, deep_tensorboard.url)
    open_run(frame, RUN)
    show_tab(frame, "Timeline")
    expect_ink(frame, "section.timeline canvas", [500], "the timeline")
    legend = frame.locator("section.timeline .legend")
    items = legend.locator("[data-layer]").all_inner_texts()
    assert items == _groups(noun="block"), items
