"""The Memory view (``views/memory.ts``) in a real browser: the memory curve with forward and
backward blocks labelled and the step's peak marked, against the engine's /memory figures; the
axes (one time unit, bytes on power-of-two steps); the per-layer peaks (a bar opens its layer's
drill-down), the step picker and the span picker. Screenshots go to ``test-artifacts/``."""

from __future__ import annotations

import math
import re
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from pages import (
    BYTE_UNITS,
    TIME_UNITS,
    axis_labels,
    chart_option,
    drill_title,
    expect_ink,
    expect_still,
    fmt_bytes,
    fmt_us,
    one_unit,
    open_run,
    open_tab,
    shot,
    show_tab,
    stat,
)
from playwright.sync_api import Frame, Page, expect

from tb_attn_plugin.analysis.attribution.analyze import analyze
from tb_attn_plugin.analysis.views.views import memory_curve
from tb_attn_plugin.engine.loader import load_events
from tb_attn_plugin.types.views import MemoryCurve, StepPeak
from tb_attn_plugin.vocab.names import parse_trace_name

CURVE = "section.memory .memory-curve"
PEAKS = "section.memory .memory-peaks"


def _engine(logdir: Path, run: str, step: int) -> tuple[MemoryCurve, Path]:
    (trace,) = sorted((logdir / run).glob("*.pt.trace.json*"))
    return memory_curve(analyze(load_events(str(trace))), step=step), trace


def _where(p: StepPeak) -> str:
    """views/memory.ts's peakWhere, for a peak in no phase."""
    assert p.phase is None, "demo/naive's peak lies in no phase; this helper words no phase"
    if p.layer < 0:
        return "outside attention, in backward" if p.backward else "outside attention"
    return f"L{p.layer} {'bwd' if p.backward else 'fwd'}"


def _power_of_two_steps(labels: list[tuple[float, str]]) -> None:
    _, step = one_unit(labels, BYTE_UNITS)
    assert step >= 1 and int(step) == step and int(step) & (int(step) - 1) == 0, f"step {step} B: {labels}"
    assert all(v % step == 0 for v, _ in labels if _), labels


def _decimal_steps(labels: list[tuple[float, str]]) -> float:
    _, step = one_unit(labels, TIME_UNITS)
    mantissa = step / 10 ** math.floor(math.log10(step))
    assert any(math.isclose(mantissa, m) for m in (1, 2, 5)), f"step {step} µs: {labels}"
    return step


def test_memory_view(tensorboard: Any, browser_logdir: Path, page: Page, artifacts: Path) -> None:
    d, _ = _engine(browser_logdir, "demo/naive", 1)
    assert d.peak is not None and d.backward, "a training step has backward blocks and a peak"
    frame = open_tab(page, tensorboard.url)
    open_run(frame, "demo/naive")
    show_tab(frame, "Memory")
    memory = frame.locator("section.memory")
    rel = d.peak.t_us - d.start_us
    expect(memory.locator(".muted").first).to_have_text(
        f"Step 1 on cpu: {fmt_us(d.end_us - d.start_us)} long, {len(d.points)} points. Peak allocated "
        f"{fmt_bytes(d.peak.allocated_bytes)} at {fmt_us(rel)}, {_where(d.peak)}"
        + (f" ({d.peak.op})." if d.peak.op else "."))
    expect(memory.locator("canvas")).to_have_count(2)
    expect_ink(frame, "section.memory canvas", [2000, 500], "the memory curve and the peaks")
    legend = memory.locator(".legend")
    for layer in (0, 1):
        expect(legend).to_contain_text(f"L{layer}")
        expect(legend).to_contain_text(f"L{layer} bwd")
    expect(legend).to_contain_text("step peak")
    shot(page, artifacts, "memory")

    # Forward blocks and backward blocks, labelled, where the engine puts them (from the step's start).
    line = chart_option(frame, CURVE)["series"][0]
    areas = {a[0]["name"]: (a[0]["xAxis"], a[1]["xAxis"]) for a in line["markArea"]["data"]}
    blocks = {f"L{s.layer}": (s.start_us - d.start_us, s.end_us - d.start_us) for s in d.scopes if s.phase is None}
    blocks |= {f"L{b.layers[0]} bwd": (b.start_us - d.start_us, b.end_us - d.start_us) for b in d.backward}
    assert areas == blocks
    # A block is labelled where its name fits its width (views/memory.ts: 6 px a character, 4 of
    # padding; the plot is the chart less 80 + 24 px of margins), and some of them fit here.
    box = memory.locator(".memory-curve").bounding_box()
    assert box is not None
    px_per_us = (box["width"] - 104) / (d.end_us - d.start_us)
    room = {a[0]["name"]: (a[1]["xAxis"] - a[0]["xAxis"]) * px_per_us - (6 * len(a[0]["name"]) + 4)
            for a in line["markArea"]["data"]}  # spare pixels; within 2 of 0 is left to rounding
    shown = {a[0]["name"]: a[0]["label"]["show"] for a in line["markArea"]["data"]}
    assert all(shown[n] == (r > 0) for n, r in room.items() if abs(r) > 2), (shown, room)
    assert any(shown.values()), room
    # The peak: marked at its time and value, and labelled with where it falls.
    (mark,) = line["markPoint"]["data"]
    assert mark["coord"] == [rel, d.peak.allocated_bytes]
    assert line["markPoint"]["label"]["formatter"] == f"peak {fmt_bytes(d.peak.allocated_bytes)}\n{_where(d.peak)}"

    # Axes: time in one unit on 1/2/5 steps, bytes on power-of-two steps, on both charts.
    _decimal_steps(axis_labels(frame, CURVE, "xAxis"))
    _power_of_two_steps(axis_labels(frame, CURVE, "yAxis"))
    _power_of_two_steps(axis_labels(frame, PEAKS, "yAxis"))
    # Zoomed in, the ticks follow the window, still in one unit.
    before = _decimal_steps(axis_labels(frame, CURVE, "xAxis"))
    box = memory.locator(".memory-curve").bounding_box()
    assert box is not None
    memory.locator(".memory-curve").hover(position={"x": box["width"] / 2, "y": 120})
    for _ in range(12):
        page.mouse.wheel(0, -100)
        page.wait_for_timeout(20)
    expect_still(frame, f"{CURVE} canvas")  # the redraw after the last zoom
    assert _decimal_steps(axis_labels(frame, CURVE, "xAxis")) < before

    # A peak bar opens its layer's drill-down: layer 0's bar is the left one, from the axis up.
    peak_chart = memory.locator(".chart").nth(1)
    pbox = peak_chart.bounding_box()
    assert pbox is not None
    peak_chart.click(position={"x": 80 + (pbox["width"] - 104) / 4, "y": pbox["height"] - 28 - 3})
    expect(drill_title(frame)).to_have_text("Drill-down: Layer 0 \u00b7 whole block \u00b7 forward")
    # Another step: the view reloads for it.
    frame.get_by_role("combobox", name="Step").select_option("2")
    expect(memory.locator(".muted").first).to_contain_text("Step 2 on cpu: ")
    expect_ink(frame, "section.memory canvas", [2000, 500], "the memory curve of step 2")


def test_a_backward_block_opens_its_backward_drilldown(tensorboard: Any, browser_logdir: Path, page: Page) -> None:
    d, _ = _engine(browser_logdir, "demo/naive", 1)
    block = d.backward[0]
    frame = open_tab(page, tensorboard.url)
    open_run(frame, "demo/naive")
    show_tab(frame, "Memory")
    expect_ink(frame, "section.memory canvas", [2000, 500], "the memory curve")
    curve = frame.locator(CURVE)
    box = curve.bounding_box()
    assert box is not None
    plot = box["width"] - 80 - 24
    mid = ((block.start_us + block.end_us) / 2 - d.start_us) / (d.end_us - d.start_us)
    curve.click(position={"x": 80 + plot * mid, "y": 60})
    expect(drill_title(frame)).to_have_text(f"Drill-down: Layer {block.layers[0]} \u00b7 whole block \u00b7 backward")


def _browser_zone(frame: Frame) -> ZoneInfo:
    return ZoneInfo(frame.evaluate("Intl.DateTimeFormat().resolvedOptions().timeZone"))


def test_span_and_step_selectors_read_plainly(tensorboard: Any, browser_logdir: Path, page: Page,
                                              artifacts: Path) -> None:
    _, trace = _engine(browser_logdir, "demo/naive", 1)
    parsed = parse_trace_name(trace.name)
    assert parsed is not None and parsed[1] is not None and len(parsed[1]) == 19  # ns since the epoch
    span = parsed[1]
    frame = open_tab(page, tensorboard.url)
    open_run(frame, "demo/naive")
    option = frame.get_by_role("combobox", name="Span").locator("option")
    expect(option).to_have_count(1)
    written = datetime.fromtimestamp(int(span) / 1e9, tz=_browser_zone(frame))
    # its place and its time, never the raw number, which stays in the tooltip
    expect(option).to_have_text(f"span 1 \u00b7 {written:%H:%M:%S}")
    expect(option).to_have_attribute("title", f"{trace.name} (span {span})")
    # the count of profiled steps beside the step selector
    expect(stat(frame, "steps profiled")).to_have_text(re.compile(r"^\s*2\s*steps profiled\s*$"))
    expect(frame.locator("label", has=frame.get_by_role("combobox", name="Step"))).to_have_text(
        re.compile(r"^step: ?1\s*2$"))
    shot(page, artifacts, "run-header-selectors")
