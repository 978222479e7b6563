"""The Timeline view (``views/timeline.ts``) in a real browser: the lanes drawn, the legend in
phase order, the time axis in one unit (also zoomed in), every layer's blocks labelled, forward
and backward, and a click on an attention event where the tab drew it opens its layer's
drill-down. Screenshots go to ``test-artifacts/``."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pages import (
    TIME_UNITS,
    axis_labels,
    drill_title,
    expect_ink,
    expect_still,
    one_unit,
    open_run,
    open_tab,
    shot,
    show_tab,
    timeline_point,
)
from playwright.sync_api import Frame, Page, expect

from tb_attn_plugin.analysis.attribution.analyze import analyze
from tb_attn_plugin.analysis.views.views import timeline
from tb_attn_plugin.engine.loader import load_events
from tb_attn_plugin.types.views import TimelineSlice
from tb_attn_plugin.vocab.scopes import PHASES

CHART = "section.timeline .timeline-chart"
ENGINE = "autograd::engine::evaluate_function: "


def _engine(logdir: Path, run: str) -> TimelineSlice:
    (trace,) = sorted((logdir / run).glob("*.pt.trace.json*"))
    return timeline(analyze(load_events(str(trace))), step=1)


def _drawn_texts(frame: Frame) -> list[str]:
    """The texts the timeline's canvas holds now (bar labels; axis labels are ECharts' own)."""
    return frame.eval_on_selector(
        CHART, "el => el.echart.getZr().storage.getDisplayList().filter(e => e.style && e.style.text)"
               ".map(e => String(e.style.text))")


def _zoom_to(frame: Frame, start: float, end: float) -> None:
    frame.eval_on_selector(CHART, "(el, w) => el.echart.dispatchAction({type: 'dataZoom', startValue: w[0], "
                                  "endValue: w[1]})", [start, end])


def _longest(d: TimelineSlice, keep: Any) -> int:
    ev = d.events
    return max((i for i in range(len(ev.start_us)) if keep(i)), key=lambda i: ev.dur_us[i])


def test_timeline_view_and_click(tensorboard: Any, page: Page, artifacts: Path) -> None:
    frame = open_tab(page, tensorboard.url)
    open_run(frame, "demo/naive")
    show_tab(frame, "Timeline")
    timeline_el = frame.locator("section.timeline")
    expect(timeline_el.locator("p.muted")).to_contain_text(re.compile(r"^Step 1: .+, [\d,]+ events on \d+ rows?\."))
    expect(timeline_el.locator("canvas").first).to_be_visible()
    expect_ink(frame, "section.timeline canvas", [5000], "the timeline")
    shot(page, artifacts, "timeline")
    # Click the longest forward attention event of a CPU thread where the tab drew it.
    point = timeline_point(frame)
    frame.locator(".timeline-chart").click(position={"x": point["x"], "y": point["y"]})
    expect(drill_title(frame)).to_contain_text(f"Drill-down: Layer {point['layer']} \u00b7 ")
    expect(drill_title(frame)).to_contain_text("forward")
    shot(page, artifacts, "timeline-drilldown")


def test_legend_axis_and_labels(tensorboard: Any, browser_logdir: Path, page: Page, artifacts: Path) -> None:
    d = _engine(browser_logdir, "demo/naive")
    ev = d.events
    frame = open_tab(page, tensorboard.url)
    open_run(frame, "demo/naive")
    show_tab(frame, "Timeline")
    expect_ink(frame, "section.timeline canvas", [5000], "the timeline")
    legend = frame.locator("section.timeline .legend")
    # Phases in the engine's order (scopes.PHASES), then each layer's other work, then the rest.
    seen = {d.phases[p] for p, layer in zip(ev.phase, ev.layer, strict=True) if p >= 0 and layer >= 0}
    phases = [p for p in PHASES if p in seen]
    assert len(phases) >= 5
    expect(legend.locator("[data-phase]")).to_have_count(len(phases))
    assert [e.get_attribute("data-phase") for e in legend.locator("[data-phase]").all()] == phases
    items = legend.locator(".legend-item").all_inner_texts()
    assert items[len(phases):] == ["L0 block", "L1 block", "not attention"]

    # The time axis: one unit, steps of 1, 2 or 5 × 10^k, also zoomed in to a tenth of the step.
    _, step = one_unit(axis_labels(frame, CHART), TIME_UNITS)
    span = d.end_us - d.start_us
    _zoom_to(frame, span * 0.45, span * 0.55)
    expect_still(frame, f"{CHART} canvas")
    _, zoomed = one_unit(axis_labels(frame, CHART), TIME_UNITS)
    assert zoomed < step

    # Every layer's forward block and the outermost of its backward work carry its label, layer 0
    # included: zoomed to each, whatever the ops took.
    for layer in (0, 1):
        block = _longest(d, lambda i, layer=layer: ev.layer[i] == layer and ev.kind[i] == "annotation"
                         and ev.phase[i] < 0 and not ev.backward[i])
        bwd = _longest(d, lambda i, layer=layer: ev.layer[i] == layer and ev.backward[i]
                       and d.names[ev.name[i]].startswith(ENGINE))
        for i, text in ((block, f"L{layer} attention"), (bwd, f"L{layer} bwd")):
            t0 = ev.start_us[i] - d.start_us
            _zoom_to(frame, t0, t0 + ev.dur_us[i])
            expect_still(frame, f"{CHART} canvas")
            drawn = _drawn_texts(frame)
            assert any(s == text or s.startswith(text + " ") for s in drawn), (text, drawn[:40])
    shot(page, artifacts, "timeline-backward")
