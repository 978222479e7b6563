"""Value axes across the tab's charts (``frontend/src/axes.ts``), read from what ECharts laid out:
one unit per axis, every label that tick's value in it, steps of 1, 2 or 5 × 10^k, and bytes on
power-of-two steps (log axes: exact powers of two). The Memory and Timeline views' axes are
checked in their own modules."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from pages import BYTE_UNITS, TIME_UNITS, axis_labels, expect_ink, one_unit, open_run, open_tab, shot
from playwright.sync_api import Frame, Page, expect

FLOP_UNITS = {f"{p}FLOP": 1000.0**i for i, p in enumerate(["", "k", "M", "G", "T", "P", "E"])}
LAYERS = "section.layers .chart"
PHASES = "section.compare-phases .chart"
SCALING_MEMORY = "[data-testid=scaling-chart] > div:nth-child(2) .chart"


def _settled(frame: Frame, selector: str, axis: str, units: dict[str, float]) -> tuple[str, float]:
    """``one_unit`` once the chart shows labels in these units (it redraws after a metric change)."""
    deadline = time.monotonic() + 30
    while True:
        labels = axis_labels(frame, selector, axis)
        written = {t.rsplit(" ", 1)[-1] for _, t in labels if t and t != "0"}
        if written and written <= set(units):
            return one_unit(labels, units)
        assert time.monotonic() < deadline, f"{selector} {axis}: {labels}"
        frame.page.wait_for_timeout(100)


def _decimal(step: float) -> bool:
    mantissa = step / 10 ** math.floor(math.log10(step))
    return any(math.isclose(mantissa, m) for m in (1, 2, 5))


def _power_of_two(step: float) -> bool:
    return step >= 1 and step == int(step) and int(step) & (int(step) - 1) == 0


def test_layer_chart_axes(tensorboard: Any, page: Page) -> None:
    frame = open_tab(page, tensorboard.url)
    open_run(frame, "demo/naive")
    expect_ink(frame, LAYERS + " canvas", [500], "the layer chart")
    metric = frame.get_by_role("combobox", name="Chart metric")
    _, step = _settled(frame, LAYERS, "yAxis", TIME_UNITS)
    assert _decimal(step)
    metric.select_option("alloc_bytes")
    _, step = _settled(frame, LAYERS, "yAxis", BYTE_UNITS)
    assert _power_of_two(step)
    metric.select_option("flops")
    _, step = _settled(frame, LAYERS, "yAxis", FLOP_UNITS)
    assert _decimal(step)


def test_compare_chart_axes(tensorboard: Any, page: Page, artifacts: Path) -> None:
    frame = open_tab(page, tensorboard.url)
    for run in ("demo/sdpa", "demo/naive"):
        frame.get_by_role("checkbox", name=f"Pick {run} for comparing").check()
    frame.get_by_test_id("compare-button").click()
    expect(frame.get_by_test_id("compare-table")).to_be_visible()
    expect_ink(frame, PHASES + " canvas", [500], "the phase chart")
    _, step = _settled(frame, PHASES, "yAxis", TIME_UNITS)
    assert _decimal(step)
    frame.get_by_role("combobox", name="Phase metric").select_option("alloc_bytes")
    _, step = _settled(frame, PHASES, "yAxis", BYTE_UNITS)
    assert _power_of_two(step)
    # the scaling chart's memory axis is logarithmic: its ticks are exact powers of two
    expect_ink(frame, SCALING_MEMORY + " canvas", [200], "the memory scaling chart")
    drawn = [(v, t) for v, t in axis_labels(frame, SCALING_MEMORY, "yAxis") if t]
    assert drawn, "no labels on the memory scaling axis"
    for v, t in drawn:
        number, unit = t.split(" ")
        assert _power_of_two(v) and math.isclose(float(number) * BYTE_UNITS[unit], v), (v, t)
    shot(page, artifacts, "compare-axes")
