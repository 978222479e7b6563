"""Page helpers for the browser tests, imported by every ``test_*.py`` here (test modules import
nothing from one another).

They drive the Attention tab inside TensorBoard's page (``open_tab``, ``open_run``,
``show_tab``, ...), find what it shows (``stat``, ``cell``, ``drill_title``, ``timeline_point``),
measure what its canvases drew (``ink``, ``expect_ink``), save screenshots (``shot``), ask the
analysis engine for the figures the tab should show (``engine_summary``, ``engine_drilldown``), and
format numbers the way ``frontend/src/format.ts`` does (``fmt_us``, ``fmt_ms``, ``fmt_bytes``,
``fmt_flops``, ``fmt_share``), so tests compare the tab's text with the engine's figures, and read
what a chart's axes show (``axis_labels``, ``one_unit``).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import re
import shutil
import time
from collections.abc import Iterator
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Frame, Locator, Page, expect

from devtools.tbserver import TensorBoard
from tb_attn_plugin.analysis.attribution.analyze import analyze
from tb_attn_plugin.analysis.views.drilldown import drilldown
from tb_attn_plugin.engine.loader import Loader, load_events, resolve_runs
from tb_attn_plugin.types.schema import WorkerSummary
from tb_attn_plugin.types.views import DrillTree

TAB_FRAME = "plugin_entry.html?name=tb_attn"


# ---- format.ts, in Python -----------------------------------------------------------------------

def to_fixed(value: float, digits: int) -> str:
    """JavaScript's Number.prototype.toFixed: the exact binary value, ties away from zero."""
    d = Decimal(abs(value)).quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP)
    return ("-" if value < 0 else "") + f"{d:f}"


def _fixed(value: float) -> str:
    a = abs(value)
    return to_fixed(value, 0 if a >= 100 else 1 if a >= 10 else 2)


def fmt_us(us: float) -> str:
    a = abs(us)
    if a == 0:
        return "0"
    if a < 1000:
        return f"{_fixed(us)} \u00b5s"
    if a < 1e6:
        return f"{_fixed(us / 1e3)} ms"
    return f"{_fixed(us / 1e6)} s"


def fmt_flops(flops: float) -> str:
    if flops == 0:
        return "0"
    v, i = flops, 0
    while abs(v) >= 1000 and i < 6:
        v /= 1000
        i += 1
    return f"{math.floor(v + 0.5) if i == 0 else _fixed(v)} {['', 'k', 'M', 'G', 'T', 'P', 'E'][i]}FLOP"


def fmt_share(share: float | None) -> str:
    return "\u2014" if share is None else f"{to_fixed(share * 100, 1)} %"


def fmt_ms(us: float) -> str:
    """format.ts fmtMs: ms without the unit."""
    return "0" if us == 0 else _fixed(us / 1e3)


def fmt_bytes(nbytes: float) -> str:
    v, i = float(nbytes), 0
    while abs(v) >= 1024 and i < 4:
        v /= 1024
        i += 1
    return f"{math.floor(v + 0.5)} B" if i == 0 else f"{_fixed(v)} {['B', 'KiB', 'MiB', 'GiB', 'TiB'][i]}"


# ---- the tab in TensorBoard's page --------------------------------------------------------------

def engine_summary(logdir: Path, run: str) -> WorkerSummary:
    """What the analysis engine says about the run's (only) trace."""
    (found,) = [r for r in resolve_runs(str(logdir)) if r.name == run]
    summary = Loader().summarize_run(found)
    assert not summary.errors and len(summary.workers) == 1, summary.errors
    return summary.workers[0]


def engine_drilldown(logdir: Path, run: str, *, layer: int, phase: str | None) -> DrillTree:
    """What the analysis engine's drill-down says of the run's (only) trace."""
    (found,) = [r for r in resolve_runs(str(logdir)) if r.name == run]
    (trace,) = found.files
    return drilldown(analyze(load_events(trace.path)), layer=layer, phase=phase, backward=False)


@contextlib.contextmanager
def traces_tensorboard(tmp_path_factory: pytest.TempPathFactory, traces: dict[str, Path]) -> Iterator[TensorBoard]:
    """TensorBoard with only the Attention tab over a logdir of one run per trace (``run -> trace``,
    each copied in as its run's one worker); skips where a trace is not here."""
    missing = [str(p) for p in traces.values() if not p.exists()]
    if missing:
        pytest.skip(f"not here: {missing}")
    logdir = tmp_path_factory.mktemp("traces-logdir")
    for run, path in traces.items():
        (logdir / run).mkdir()
        shutil.copy(path, logdir / run / ("w.1.pt.trace.json" + (".gz" if path.suffix == ".gz" else "")))
    with TensorBoard(logdir, only=["tb_attn"]) as tb:
        yield tb


def open_tab(page: Page, url: str) -> Frame:
    """TensorBoard's page on the Attention tab; returns the tab's iframe once its runs list is in."""
    page.goto(url + "#tb_attn")
    deadline = time.monotonic() + 30
    frame = None
    while frame is None:
        frame = next((f for f in page.frames if TAB_FRAME in f.url), None)
        if frame is None:
            assert time.monotonic() < deadline, f"no iframe {TAB_FRAME} in {[f.url for f in page.frames]}"
            page.wait_for_timeout(50)
    expect(frame.get_by_role("heading", name="Runs")).to_be_visible()
    expect(frame.locator("table.runs, .empty, [role=alert]").first).to_be_visible()
    return frame


def reload_tab(page: Page) -> Frame:
    """Reloads TensorBoard's page; returns the tab's new iframe (which opens on the view its
    session remembered, not necessarily the runs list)."""
    page.reload()
    deadline = time.monotonic() + 30
    while (frame := next((f for f in page.frames if TAB_FRAME in f.url), None)) is None:
        assert time.monotonic() < deadline, "no tab after the reload"
        page.wait_for_timeout(50)
    return frame


def open_run(frame: Frame, run: str) -> None:
    """Clicks the run in the runs list and waits for its overview (or its error)."""
    frame.get_by_role("button", name=f"Open run {run}", exact=True).click()
    expect(frame.locator(".run-title")).to_have_text(run)
    # The first load of a run reads its trace: seconds on a loaded machine, past expect's 5 s.
    expect(frame.locator(".card .stats, .card [role=alert]").first).to_be_visible(timeout=30_000)


def back_to_runs(frame: Frame) -> None:
    frame.get_by_role("button", name="\u2190 Runs").click()
    expect(frame.get_by_role("heading", name="Runs")).to_be_visible()


def show_tab(frame: Frame, label: str) -> None:
    frame.get_by_role("tab", name=label, exact=True).click()
    expect(frame.get_by_role("tab", name=label, exact=True)).to_have_attribute("aria-selected", "true")


def stat(frame: Frame, label: str) -> Locator:
    """One stat of the run overview (its label, then its value in a <b>), by its label."""
    return frame.locator(".card .stat", has=frame.locator(".stat-label", has_text=re.compile(f"^{re.escape(label)}$")))


def ink(frame: Frame, selector: str) -> list[int]:
    """Per canvas under `selector`: how many pixels are drawn (not transparent, not near-white)."""
    return frame.eval_on_selector_all(
        selector,
        """cs => cs.map(c => {
            const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
            let n = 0;
            for (let i = 0; i < d.length; i += 4)
                if (d[i + 3] > 0 && (d[i] < 235 || d[i + 1] < 235 || d[i + 2] < 235)) n++;
            return n;
        })""",
    )


def expect_ink(frame: Frame, selector: str, minimum: list[int], what: str) -> list[int]:
    """Waits (charts draw in a later frame) until each canvas under `selector` has at least its
    `minimum` of drawn pixels; fails with the counts. Generous: CI's two cores also run the server."""
    deadline = time.monotonic() + 30
    while True:
        counts = ink(frame, selector)
        if len(counts) >= len(minimum) and all(c >= m for c, m in zip(counts, minimum, strict=False)):
            return counts
        assert time.monotonic() < deadline, f"{what}: drawn pixels per canvas {counts}, expected at least {minimum}"
        frame.page.wait_for_timeout(50)


#: True once the canvases under a selector drew the same pixels at two polls in a row (the key
#: holds the previous poll's pixels on the window).
_STILL = """([sel, key]) => {
    const now = [...document.querySelectorAll(sel)].map(c => c.toDataURL()).join("|");
    const before = window[key];
    window[key] = now;
    return now.length > 0 && now === before;
}"""


def expect_still(frame: Frame, selector: str = "canvas") -> None:
    """Waits until the canvases under ``selector`` stop changing: an animation or a redraw is over
    (a screenshot, or a reading of what was drawn, sees its last frame)."""
    key = f"__tbAttnStill{next(_STILL_KEYS)}"
    frame.wait_for_function(_STILL, arg=[selector, key], polling=100, timeout=30_000)


_STILL_KEYS = itertools.count()


def release(frame: Frame, route: Any) -> None:
    """Lets a held request go on, and waits until its answer is in and the page has had a frame
    to show it: a late answer the tab must drop has had its chance to do harm."""
    try:
        route.continue_()
    except Exception:  # the tab aborted it already: no answer will come
        return
    response = route.request.response()  # waits for it; None where the tab aborted it since
    if response is not None:
        response.finished()
    frame.evaluate("() => new Promise(done => requestAnimationFrame(() => setTimeout(done)))")


def canvas_png(frame: Frame, selector: str) -> str:
    return frame.eval_on_selector(selector, "c => c.toDataURL()")


# ---- what a chart drew (charts.ts keeps each chart's ECharts instance on its element) ----------

def chart_option(frame: Frame, selector: str) -> dict[str, Any]:
    """The chart's option as ECharts holds it (functions left out)."""
    return frame.eval_on_selector(selector, "el => JSON.parse(JSON.stringify(el.echart.getOption()))")


def axis_labels(frame: Frame, selector: str, axis: str = "xAxis") -> list[tuple[float, str]]:
    """(tick value, label) of every tick ECharts lays out on the chart's first ``axis``, with
    the label its formatter wrote ("" where none is drawn)."""
    return [(float(v), str(t)) for v, t in frame.eval_on_selector(
        selector,
        """(el, axis) => el.echart.getModel().getComponent(axis, 0).axis.getViewLabels()
                 .map(l => [l.tick.value, l.formattedLabel])""",
        axis,
    )]


TIME_UNITS = {"\u00b5s": 1.0, "ms": 1e3, "s": 1e6}
BYTE_UNITS = {"B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, "TiB": 1024**4}


def one_unit(labels: list[tuple[float, str]], units: dict[str, float]) -> tuple[str, float]:
    """Checks that an axis writes every tick in one unit, each label the tick's value in it, and
    returns the unit and the step between ticks. "0" may stand alone; empty labels are not drawn."""
    drawn = [(v, t) for v, t in labels if t]
    assert len(drawn) >= 2, f"fewer than two labelled ticks: {labels}"
    written = {t.rsplit(" ", 1)[1] for _, t in drawn if t != "0"}
    assert len(written) == 1 and written <= set(units), f"units {written} on one axis: {labels}"
    (unit,) = written
    for v, t in drawn:
        number = 0.0 if t == "0" else float(t.rsplit(" ", 1)[0])
        assert math.isclose(number * units[unit], v, rel_tol=1e-9, abs_tol=1e-9 * units[unit]), (v, t)
    values = [v for v, _ in drawn]
    steps = {round(b - a, 9) for a, b in itertools.pairwise(values)}
    assert len(steps) == 1, f"uneven ticks {values}"
    return unit, steps.pop()


def shot(page: Page, artifacts: Path, name: str) -> None:
    page.screenshot(path=str(artifacts / f"{name}.png"), full_page=True)


def drill_title(frame: Frame) -> Locator:
    return frame.locator("section.drill h3")


def hover_tooltip(frame: Frame, point: dict[str, Any], text: str, chart_selector: str = ".timeline-chart"
                  ) -> Locator:
    """Hovers a chart (the timeline's by default) at ``point`` until ECharts shows a tooltip
    containing ``text`` (a hover that lands while the chart is still laying out shows none: move
    off and on again)."""
    chart = frame.locator(chart_selector)
    tooltip = chart.locator("div", has_text=text).last
    for _ in range(6):
        chart.hover(position={"x": point["x"], "y": point["y"]})
        try:
            expect(tooltip).to_be_visible(timeout=3000)
            return tooltip
        except AssertionError:
            chart.hover(position={"x": 5, "y": 5})
    expect(tooltip).to_be_visible()
    return tooltip


def cell(frame: Frame, layer: int, group: str, metric_title: str) -> Locator:
    """A cell of the per-layer table, by its tooltip ("L0 softmax, CPU time: 3.86 ms per step...")."""
    return frame.locator(f'table.layers-table td[title^="L{layer} {group}, {metric_title}:"]')


def cell_value(frame: Frame, layer: int, group: str, metric_title: str) -> Locator:
    """The figure in such a cell, without its "noisy" mark."""
    return cell(frame, layer, group, metric_title).locator(".v")


# Where the tab draws the longest event of the step shown that has the given name (or, without a
# name, the longest forward attention event that is not a kernel), read from the same /timeline
# response. The lanes are laid out as the timeline view lays them out (timeline.ts): one per track
# and depth (up to 24), 16 px each under an 8 px top margin, in a plot 170 px from the left and
# 24 px from the right.
TIMELINE_POINT = """name => {
    const entry = performance.getEntriesByType('resource').filter(e => e.name.includes('/timeline?')).pop();
    if (!entry) return 'loading';
    return fetch(entry.name).then(r => r.status === 200 ? r.json() : null).then(d => {
        if (!d || !d.events) return 'loading';  // 202: the view is still being computed
        const ev = d.events;
        const match = i => name !== null ? d.names[ev.name[i]] === name
            : ev.layer[i] >= 0 && !(ev.backward || [])[i] && ev.kind[i] !== 'kernel';
        const tracks = new Map(d.tracks.map((t, i) => [t.id, i]));
        const depth = d.tracks.map(() => 0);
        ev.track.forEach((t, i) => {
            const k = tracks.get(t);
            depth[k] = Math.max(depth[k], Math.min(ev.depth[i], 23));
        });
        const base = [];
        let lanes = 0;
        depth.forEach((dp, k) => { base[k] = lanes; lanes += dp + 1; });
        let best = -1;
        for (let i = 0; i < ev.track.length; i++)
            if (ev.depth[i] < 24 && match(i) && (best < 0 || ev.dur_us[i] > ev.dur_us[best])) best = i;
        if (best < 0) return null;
        const chart = document.querySelector('.timeline-chart').getBoundingClientRect();
        const plot = chart.width - 170 - 24, span = d.end_us - d.start_us;
        const mid = ev.start_us[best] + ev.dur_us[best] / 2 - d.start_us;
        const lane = base[tracks.get(ev.track[best])] + ev.depth[best];
        return {x: 170 + plot * mid / span, y: 8 + (lane + 0.5) * 16, layer: ev.layer[best],
                name: d.names[ev.name[best]], width: plot * ev.dur_us[best] / span};
    });
}"""


def timeline_point(frame: Frame, name: str | None = None) -> dict[str, Any]:
    """Where the timeline drew the event (see ``TIMELINE_POINT``), once it has drawn."""
    expect_ink(frame, "section.timeline canvas", [5000], "the timeline")
    deadline = time.monotonic() + 30
    while (point := frame.evaluate(TIMELINE_POINT, name)) == "loading":
        assert time.monotonic() < deadline, "the timeline's data never came"
        frame.page.wait_for_timeout(100)
    assert point is not None, f"no timeline event named {name}" if name else "no forward attention event"
    _widen(frame, point)
    return point


def _widen(frame: Frame, point: dict[str, Any]) -> None:
    """Zooms the timeline in around ``point`` until its event is wide enough to hover or click,
    however long the op happened to take: the wheel zoom keeps the time under the cursor in place,
    so the point stays on the event. (The chart's own minimum span is 1 µs.)"""
    if point["width"] >= 8:
        return
    frame.locator(".timeline-chart").hover(position={"x": point["x"], "y": point["y"]})
    steps = math.ceil(math.log(8 / max(point["width"], 1e-3)) / math.log(1.25)) + 2
    for _ in range(min(steps, 80)):
        frame.page.mouse.wheel(0, -100)
        frame.page.wait_for_timeout(20)
    expect_still(frame, "section.timeline canvas")  # the redraw after the last zoom
