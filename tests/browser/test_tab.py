"""The Attention tab in a real browser: TensorBoard's page, the tab in its iframe, real routes.

One TensorBoard serves the module (``tensorboard`` fixture); each test opens its own page. The
figures the tab shows are checked against the analysis engine's own output for the same trace,
formatted the way ``frontend/src/format.ts`` formats them. Every view is saved as a screenshot
in ``test-artifacts/``; the performance figures go to ``test-artifacts/perf.json`` (measured,
not asserted).
"""

from __future__ import annotations

import importlib.util
import json
import math
import re
import shutil
import statistics
import time
import urllib.parse
import urllib.request
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

from playwright.sync_api import Frame, Locator, Page, expect

from devtools.tabprobe import OPEN_AND_PAINT, ROUTE_TIMINGS, SHOW_AND_PAINT
from tb_attn_plugin.loader import Loader, resolve_runs
from tb_attn_plugin.schema import WorkerSummary

TAB_FRAME = "plugin_entry.html?name=tb_attn"
DEMO_RUNS = ("demo/naive", "demo/naive-per-head", "demo/sdpa", "demo/sdpa-math")


# ---- format.ts, in Python ------------------------------------------------------------------

def _to_fixed(value: float, digits: int) -> str:
    """JavaScript's Number.prototype.toFixed: the exact binary value, ties away from zero."""
    d = Decimal(abs(value)).quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP)
    return ("-" if value < 0 else "") + f"{d:f}"


def _fixed(value: float) -> str:
    a = abs(value)
    return _to_fixed(value, 0 if a >= 100 else 1 if a >= 10 else 2)


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
    return "\u2014" if share is None else f"{_to_fixed(share * 100, 1)} %"


def test_format_mirror() -> None:
    # Values whose JavaScript formatting is known (node: (0.125).toFixed(2) === "0.13").
    assert _to_fixed(0.125, 2) == "0.13" and _to_fixed(2.5, 0) == "3" and _to_fixed(1.005, 2) == "1.00"
    assert fmt_us(12141.937) == "12.1 ms" and fmt_us(999.996) == "1000 \u00b5s" and fmt_us(56.147) == "56.1 \u00b5s"
    assert fmt_flops(327680) == "328 kFLOP" and fmt_flops(999) == "999 FLOP" and fmt_flops(16384) == "16.4 kFLOP"
    assert fmt_share(0.378873) == "37.9 %"


# ---- helpers ---------------------------------------------------------------------------------

def engine_summary(logdir: Path, run: str) -> WorkerSummary:
    """What the analysis engine says about the run's (only) trace."""
    (found,) = [r for r in resolve_runs(str(logdir)) if r.name == run]
    summary = Loader().summarize_run(found)
    assert not summary.errors and len(summary.workers) == 1, summary.errors
    return summary.workers[0]


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


def open_run(frame: Frame, run: str) -> None:
    """Clicks the run in the runs list and waits for its overview (or its error)."""
    frame.get_by_role("button", name=f"Open run {run}", exact=True).click()
    expect(frame.locator(".run-title")).to_have_text(run)
    expect(frame.locator(".card .stats, .card [role=alert]").first).to_be_visible()


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
    `minimum` of drawn pixels; fails with the counts."""
    deadline = time.monotonic() + 10
    while True:
        counts = ink(frame, selector)
        if len(counts) >= len(minimum) and all(c >= m for c, m in zip(counts, minimum, strict=False)):
            return counts
        assert time.monotonic() < deadline, f"{what}: drawn pixels per canvas {counts}, expected at least {minimum}"
        frame.page.wait_for_timeout(50)


def canvas_png(frame: Frame, selector: str) -> str:
    return frame.eval_on_selector(selector, "c => c.toDataURL()")


def shot(page: Page, artifacts: Path, name: str) -> None:
    page.screenshot(path=str(artifacts / f"{name}.png"), full_page=True)


def drill_title(frame: Frame) -> Locator:
    return frame.locator("section.drill h3")


def cell(frame: Frame, layer: int, group: str, metric_title: str) -> Locator:
    """A cell of the per-layer table, by its tooltip ("L0 softmax, CPU time: 3863.1")."""
    return frame.locator(f'table.layers-table td[title^="L{layer} {group}, {metric_title}:"]')


# Where the tab draws the longest event of the step shown that has the given name (or, without a
# name, the longest forward attention event that is not a kernel), read from the same /timeline
# response. The lanes are laid out as the timeline view lays them out (timeline.ts): one per track
# and depth (up to 24), 16 px each under an 8 px top margin, in a plot 170 px from the left and
# 24 px from the right.
TIMELINE_POINT = """name => {
    const entry = performance.getEntriesByType('resource').filter(e => e.name.includes('/timeline?')).pop();
    return fetch(entry.name).then(r => r.json()).then(d => {
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
    point = frame.evaluate(TIMELINE_POINT, name)
    assert point is not None, f"no timeline event named {name}" if name else "no forward attention event"
    assert point["width"] >= 2, f"the chosen event is too narrow to click: {point}"
    return point


# ---- tests -----------------------------------------------------------------------------------

def test_runs_view_groups_metadata_status_and_filter(tensorboard: Any, page: Page, artifacts: Path) -> None:
    frame = open_tab(page, tensorboard.url)
    table = frame.locator("table.runs")
    groups = table.locator("tr.group").all_inner_texts()
    assert "demo" in groups and "broken" in groups, groups
    for run in DEMO_RUNS:
        row = frame.get_by_role("button", name=f"Open run {run}", exact=True)
        cells = row.locator("td").all_inner_texts()[1:]  # the first cell is the compare checkbox
        # run (without its group), model, impl, seq, dtype, device, who, when, status
        assert cells[0] == run.split("/", 1)[1], cells
        assert cells[1] == "builtin" and cells[3] == "16" and cells[4] == "float32" and cells[5] == "cpu", cells
        assert cells[2] == run.split("/")[1].removesuffix("-per-head"), cells
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d", cells[7]), cells
        assert cells[8] in ("unloaded", "ready"), cells
    # The group rows come before their runs, in order.
    names = table.locator("tbody tr").evaluate_all("rs => rs.map(r => r.classList.contains('group') ? '#' + "
                                                   "r.textContent : r.querySelector('.run-name')?.textContent)")
    assert names.index("#demo") < names.index("naive") < names.index("sdpa") < names.index("sdpa-math")
    assert names.index("#broken") < names.index("not-a-trace")
    total = len(table.locator("tr.run-row").all())
    expect(frame.get_by_text(f"{total} runs", exact=True)).to_be_visible()
    shot(page, artifacts, "runs")

    search = frame.get_by_role("searchbox", name="Filter runs")
    search.fill("sdpa")
    expect(frame.get_by_text(f"2 of {total} runs", exact=True)).to_be_visible()
    assert table.locator("tr.run-row .run-name").all_inner_texts() == ["sdpa", "sdpa-math"]
    shot(page, artifacts, "runs-filtered")
    search.fill("NAIVE")  # case-insensitive, matches the run path and the implementation
    assert set(table.locator("tr.run-row .run-name").all_inner_texts()) >= {"naive", "naive-per-head"}
    search.fill("no-such-run")
    expect(frame.get_by_text("No run matches \u201cno-such-run\u201d.")).to_be_visible()
    search.fill("")
    expect(frame.get_by_text(f"{total} runs", exact=True)).to_be_visible()


def test_run_overview_matches_the_engine(tensorboard: Any, browser_logdir: Path, page: Page,
                                         artifacts: Path) -> None:
    ws = engine_summary(browser_logdir, "demo/naive")
    assert ws.backend == "naive" and len(ws.layers) == 2
    frame = open_tab(page, tensorboard.url)
    open_run(frame, "demo/naive")
    expect(frame.locator(".card .backend-chip")).to_have_text("naive")
    share = stat(frame, "attention share, CPU")
    expect(share.locator("b")).to_have_text(fmt_share(ws.attention_share_cpu))
    expect(share).to_contain_text(f"{fmt_us(ws.attention_cpu_us)} / {fmt_us(ws.step_cpu_us)}")
    expect(stat(frame, "layers").locator("b")).to_have_text(str(len(ws.layers)))
    expect(stat(frame, "steps").locator("b")).to_have_text(str(ws.step_count))
    expect(stat(frame, "device").locator("b")).to_have_text(ws.device)
    expect(frame.locator(".card .meta-line")).to_contain_text("builtin \u00b7 naive \u00b7 seq 16 \u00b7 batch 2")

    rows = frame.locator("table.layers-table tbody tr")
    expect(rows).to_have_count(len(ws.layers))
    assert [t.split()[0] for t in rows.locator("th").all_inner_texts()] == [f"L{x.layer}" for x in ws.layers]
    for layer in ws.layers:
        expect(rows.nth(layer.layer).locator("td").first).to_have_text(layer.backend)
        expect(cell(frame, layer.layer, "block", "CPU time")).to_have_text(fmt_us(layer.cpu_us))
        for phase in layer.phases:
            expect(cell(frame, layer.layer, phase.phase, "CPU time")).to_have_text(fmt_us(phase.cpu_us))
    # FLOPs are exact (not timings): add the FLOPs column and compare every cell.
    frame.get_by_role("button", name="FLOPs", exact=True).click()
    for layer in ws.layers:
        expect(cell(frame, layer.layer, "block", "FLOPs")).to_have_text(fmt_flops(layer.flops))
        for phase in layer.phases:
            expect(cell(frame, layer.layer, phase.phase, "FLOPs")).to_have_text(fmt_flops(phase.flops))
    shot(page, artifacts, "run-naive")


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


def test_drilldown_from_a_table_cell(tensorboard: Any, browser_logdir: Path, page: Page, artifacts: Path) -> None:
    frame = open_tab(page, tensorboard.url)
    open_run(frame, "demo/naive")
    cell(frame, 0, "softmax", "CPU time").click()
    expect(drill_title(frame)).to_have_text("Drill-down: Layer 0 \u00b7 softmax \u00b7 forward")
    drill = frame.locator("section.drill")
    expect(drill.locator("td.name", has_text="aten::softmax").first).to_be_visible()
    expect(cell(frame, 0, "softmax", "CPU time")).to_have_class(re.compile(r"\bsel\b"))
    (run,) = [r for r in resolve_runs(str(browser_logdir)) if r.name == "demo/naive"]
    expect(drill.locator("code")).to_have_text(run.files[0].name)
    if importlib.util.find_spec("torch_tb_profiler") is not None:
        link = drill.get_by_role("link", name="Open the PyTorch Profiler tab")
        expect(link).to_have_attribute("href", "../../../#pytorch_profiler")
        expect(drill.locator(".trace-link")).to_contain_text(f"pick run demo/naive, worker {run.files[0].worker}")
    else:
        link = drill.get_by_role("link", name="Download the trace file")
        expect(link).to_have_attribute("href", re.compile(r"^\./trace\?run=demo%2Fnaive&file="))
    shot(page, artifacts, "drilldown")
    drill.get_by_role("button", name="Close drill-down").click()
    expect(drill).to_be_hidden()
    expect(cell(frame, 0, "softmax", "CPU time")).not_to_have_class(re.compile(r"\bsel\b"))
    if importlib.util.find_spec("torch_tb_profiler") is not None:
        # The link switches TensorBoard itself (the top page) to the profiler's tab.
        cell(frame, 0, "softmax", "CPU time").click()
        drill.get_by_role("link", name="Open the PyTorch Profiler tab").click()
        page.wait_for_url(re.compile(r"#pytorch_profiler$"))


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


def test_switching_runs_shows_no_stale_data(tensorboard: Any, page: Page, artifacts: Path) -> None:
    frame = open_tab(page, tensorboard.url)
    open_run(frame, "demo/naive")
    expect(frame.locator(".card .backend-chip")).to_have_text("naive")
    cell(frame, 0, "softmax", "CPU time").click()
    expect(drill_title(frame)).to_be_visible()
    back_to_runs(frame)
    open_run(frame, "demo/sdpa")
    expect(frame.locator(".card .backend-chip")).to_have_text("cpu-flash")
    backends = frame.locator("table.layers-table tbody tr td:first-of-type").all_inner_texts()
    assert backends and set(backends) == {"cpu-flash"}, backends
    headers = frame.locator("table.layers-table thead th").all_inner_texts()
    assert "SDPA" in headers and "softmax" not in headers, headers
    expect(frame.locator("section.drill")).to_be_hidden()
    expect(frame.locator(".card .meta-line")).not_to_contain_text("naive")
    shot(page, artifacts, "run-sdpa")

    # A slow response for the run the user left must not overwrite the run now shown. (The tab
    # aborts the request when the user leaves; a response that still came would be dropped.)
    held: list[Any] = []
    frame.page.route(re.compile(r"/summary\?run=demo%2Fnaive(&|$)"), lambda route: held.append(route))
    back_to_runs(frame)
    frame.get_by_role("button", name="Open run demo/naive", exact=True).click()
    expect(frame.locator(".run-title")).to_have_text("demo/naive")
    deadline = time.monotonic() + 10
    while not held:
        assert time.monotonic() < deadline, "the summary request for demo/naive was never sent"
        frame.page.wait_for_timeout(20)
    back_to_runs(frame)
    open_run(frame, "demo/sdpa-math")
    expect(frame.locator(".card .backend-chip")).to_have_text("sdpa-math")
    try:
        held[0].continue_()
    except Exception:  # the request is gone already
        pass
    frame.page.wait_for_timeout(500)
    expect(frame.locator(".run-title")).to_have_text("demo/sdpa-math")
    expect(frame.locator(".card .backend-chip")).to_have_text("sdpa-math")
    expect(frame.locator(".card .meta-line")).to_contain_text("sdpa-math")


def test_compare_view_with_ratios_and_scaling(tensorboard: Any, browser_logdir: Path, page: Page,
                                              artifacts: Path) -> None:
    from tb_attn_plugin.analysis.compare import compare
    from tb_attn_plugin.loader import Loader, resolve_runs

    frame = open_tab(page, tensorboard.url)
    for run in ("demo/sdpa", "demo/naive"):  # ticked in this order: demo/sdpa is the baseline
        frame.get_by_role("checkbox", name=f"Pick {run} for comparing").check()
    frame.get_by_test_id("compare-button").click()
    table = frame.get_by_test_id("compare-table")
    expect(table).to_be_visible()
    expect(table).to_contain_text("demo/naive")
    expect(table).to_contain_text("baseline")
    runs = {r.name: r for r in resolve_runs(str(browser_logdir))}
    loader = Loader()
    expected = compare([loader.summarize_run(runs["demo/sdpa"]), loader.summarize_run(runs["demo/naive"])],
                       baseline="demo/sdpa")
    naive = next(f for f in expected["runs"] if f["run"] == "demo/naive")
    ratio = f"{naive['ratio']['alloc_bytes']:.2f}"
    row = table.locator("tr", has=frame.get_by_role("link", name="demo/naive", exact=True)).first
    expect(row).to_contain_text(ratio)
    expect(row).to_contain_text("hidden-copy")
    expect(frame.get_by_test_id("scaling-chart")).to_be_visible()
    shot(page, artifacts, "compare")


def test_broken_run_shows_the_error(tensorboard: Any, page: Page, artifacts: Path) -> None:
    frame = open_tab(page, tensorboard.url)
    open_run(frame, "broken/not-a-trace")
    alert = frame.locator(".card [role=alert]")
    expect(alert).to_contain_text("Could not read w.1.pt.trace.json:")
    expect(alert).to_contain_text("not JSON")
    expect(frame.get_by_role("tab", name="Layers \u00d7 phases")).to_be_visible()
    shot(page, artifacts, "broken")
    show_tab(frame, "Memory")  # the sub-views show the error too, instead of an empty chart
    expect(frame.locator("section.memory [role=alert]")).to_contain_text("not JSON")
    show_tab(frame, "Layers \u00d7 phases")
    back_to_runs(frame)  # the tab still works
    row = frame.get_by_role("button", name="Open run broken/not-a-trace", exact=True)
    expect(row.locator(".badge")).to_have_text("error")
    expect(frame.locator("tr.run-error")).to_contain_text("not JSON")
    open_run(frame, "demo/naive")
    expect(frame.locator(".card .backend-chip")).to_have_text("naive")


def test_new_run_appears_after_reload(tensorboard: Any, browser_logdir: Path, builtin_logdir: Path, page: Page,
                                      artifacts: Path) -> None:
    frame = open_tab(page, tensorboard.url)
    new_run = "added/naive-gqa"
    expect(frame.get_by_role("button", name=f"Open run {new_run}", exact=True)).to_have_count(0)
    shutil.copytree(builtin_logdir / "naive-gqa", browser_logdir / new_run)
    page.locator("button.reload-button").click()  # TensorBoard's own reload: DataReloaded to the tab
    expect(frame.get_by_role("button", name=f"Open run {new_run}", exact=True)).to_be_visible(timeout=15_000)
    # The tab re-listed the runs itself (the same iframe, asking the server to re-scan now).
    urls = frame.evaluate("performance.getEntriesByType('resource').map(e => e.name)")
    assert any(u.endswith("/runs?refresh=1") for u in urls), urls
    assert tensorboard.proc.poll() is None
    shot(page, artifacts, "runs-after-reload")
    open_run(frame, new_run)
    expect(frame.locator(".card .backend-chip")).to_have_text("naive")


def test_hostile_names_render_as_text(tensorboard: Any, hostile: dict[str, str], page: Page,
                                     artifacts: Path) -> None:
    run, op, user = hostile["run"], hostile["op"], hostile["user"]
    frame = open_tab(page, tensorboard.url)
    row = frame.get_by_role("button", name=f"Open run {run}", exact=True)
    expect(row.locator(".run-name")).to_have_text(run)
    expect(row).to_contain_text(user)
    open_run(frame, run)
    expect(frame.locator(".card .meta-line")).to_contain_text(user)
    cell(frame, 0, "softmax", "CPU time").click()
    expect(frame.locator("section.drill td.name", has_text=op).first).to_be_visible()
    shot(page, artifacts, "hostile-drilldown")
    # The timeline's tooltip (HTML, escaped by the tab) over the hostile op.
    show_tab(frame, "Timeline")
    expect_ink(frame, "section.timeline canvas", [5000], "the timeline")
    point = timeline_point(frame, op)
    frame.locator(".timeline-chart").hover(position={"x": point["x"], "y": point["y"]})
    expect(frame.locator(".timeline-chart div", has_text=op).last).to_be_visible()
    shot(page, artifacts, "hostile-timeline")
    for where in (frame, page):
        assert where.evaluate("typeof window.__xss") == "undefined", f"script ran in {where.url}"
    injected = frame.evaluate("""() => [...document.querySelectorAll('img, svg, script')]
        .filter(e => /__xss/.test(e.outerHTML)).map(e => e.outerHTML)""")
    assert injected == [], injected


def test_path_prefix(prefixed_tensorboard: Any, page: Page, artifacts: Path) -> None:
    assert prefixed_tensorboard.url.endswith("/tb/")
    frame = open_tab(page, prefixed_tensorboard.url)
    expect(frame.get_by_role("button", name="Open run demo/naive", exact=True)).to_be_visible()
    open_run(frame, "demo/sdpa")
    expect(frame.locator(".card .backend-chip")).to_have_text("cpu-flash")
    urls = frame.evaluate("performance.getEntriesByType('resource').map(e => e.name)")
    data = [u for u in urls if "/runs" in u or "/summary" in u]
    assert data and all(urllib.parse.urlsplit(u).path.startswith("/tb/data/plugin/tb_attn/") for u in data), data
    shot(page, artifacts, "path-prefix")


# ---- performance: measured and reported, not asserted ----------------------------------------
# (bench/tab_latency.py measures the same on a large trace, with the same probes: devtools/tabprobe.py.)


def warm_routes(tb: Any, run: str) -> None:
    """Reads the run once through every route, so that what is measured next is the cached case."""
    base = tb.url + "data/plugin/tb_attn/"
    q = urllib.parse.quote(run, safe="")
    for route in ("summary", "memory", "timeline"):
        with urllib.request.urlopen(f"{base}{route}?run={q}", timeout=60) as r:
            r.read()


def _stats(samples: list[float]) -> dict[str, Any]:
    return {"median": round(statistics.median(samples), 1), "samples": [round(x, 1) for x in samples]}


def measure_tab(frame: Frame, run: str, repeat: int) -> dict[str, Any]:
    """Opens `run` `repeat` times, each time with its memory and timeline views; ms."""
    paints: dict[str, list[float]] = {"first_meaningful_paint_ms": [], "memory_view_ms": [], "timeline_view_ms": []}
    for _ in range(repeat):
        paints["first_meaningful_paint_ms"].append(frame.evaluate(OPEN_AND_PAINT, run))
        paints["memory_view_ms"].append(frame.evaluate(SHOW_AND_PAINT, ["Memory", "section.memory"]))
        paints["timeline_view_ms"].append(frame.evaluate(SHOW_AND_PAINT, ["Timeline", "section.timeline"]))
        show_tab(frame, "Layers \u00d7 phases")
        back_to_runs(frame)
    routes: dict[str, list[dict[str, float]]] = {}
    for e in frame.evaluate(ROUTE_TIMINGS):
        routes.setdefault(e["route"], []).append(e)
    return {
        **{k: _stats(v) for k, v in paints.items()},
        "routes": {
            name: {"total_ms": _stats([e["total_ms"] for e in entries]),
                   "server_ms": _stats([e["server_ms"] for e in entries]),
                   "bytes": entries[-1]["bytes"]}
            for name, entries in sorted(routes.items())
        },
    }


def test_performance_cached_run(tensorboard: Any, page: Page, artifacts: Path) -> None:
    run, repeat = "demo/naive", 3
    warm_routes(tensorboard, run)
    frame = open_tab(page, tensorboard.url)
    result = {"run": run, "repeat": repeat, **measure_tab(frame, run, repeat)}
    (artifacts / "perf.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [f"{k}: median {result[k]['median']}" for k in ("first_meaningful_paint_ms", "memory_view_ms",
                                                            "timeline_view_ms")]
    lines += [f"/{k}: median {r['total_ms']['median']} ms (server {r['server_ms']['median']} ms), {r['bytes']} B"
              for k, r in result["routes"].items()]
    print(f"\nAttention tab, cached run {run}, {repeat} times (not asserted):\n  " + "\n  ".join(lines))
    assert set(result["routes"]) == {"summary", "memory", "timeline"}
    assert all(len(r["total_ms"]["samples"]) == repeat for r in result["routes"].values())
