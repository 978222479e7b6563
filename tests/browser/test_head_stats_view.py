"""Attention statistics per head in the Layers × heads view (``views/heads.ts`` and
``views/head_stats.ts``) in a real browser, on two runs: the runner's own ``--attn-stats`` run
(random weights: the note shows), and a copy of a per-head run whose event file is written here
with statistics built to make layer 0 head 1 and layer 1 head 2 local, layer 0 head 2 a sink, and
layer 1 head 3 both. The heatmap's cells, marks and colour range, the scatter's points and its
threshold line are read from the ECharts options and compared with the engine's
(``Loader().summarize_run(run).attn_stats`` and each head's cost); the local-heads finding shows
in the run's findings. TensorBoard's own Scalars and Histograms dashboards list the event file's
tags. Screenshots go to ``test-artifacts/head-stats*.png`` and ``tensorboard-*.png``."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import profile_run
from pages import TAB_FRAME, chart_option, expect_ink, fmt_us, hover_tooltip, open_run, open_tab, shot, show_tab
from playwright.sync_api import Frame, Page, expect

from devtools.tbserver import TensorBoard
from runner.attn_stats import write_events
from tb_attn_plugin.engine.loader import Loader, resolve_runs
from tb_attn_plugin.types.schema import AttnStats, RunSummary

RANDOM = "stats/random"
BUILT = "stats/built"
NONE = "stats/none"
SHORT = "stats/short"
HEATMAP = "[data-testid=heads-chart]"
SCATTER = "[data-testid=head-scatter-chart]"
TALL = {"width": 1400, "height": 1800}
#: The built run's statistics: layer -> stat -> one value per head (4 heads).
BUILT_STATS: dict[int, dict[str, list[float]]] = {
    0: {"entropy": [0.91, 0.35, 0.22, 0.88], "sink_1": [0.04, 0.01, 0.7, 0.05], "sink_4": [0.12, 0.03, 0.8, 0.14],
        "window_64": [0.85, 0.995, 0.6, 0.84], "top_32": [0.62, 0.97, 0.9, 0.66], "distance": [30.5, 3.5, 50.0, 29.0]},
    # Head 3 is both local and a sink: at this length a window of 64 holds the first tokens for
    # half the queries, and the marks must show both.
    1: {"entropy": [0.87, 0.9, 0.4, 0.3], "sink_1": [0.05, 0.04, 0.02, 0.5], "sink_4": [0.13, 0.12, 0.05, 0.55],
        "window_64": [0.86, 0.84, 0.992, 0.991], "top_32": [0.64, 0.63, 0.95, 0.96],
        "distance": [31.0, 32.0, 5.0, 2.5]},
}
LOCAL = {(0, 1), (1, 2), (1, 3)}
SINK = {(0, 2), (1, 3)}


# ---- fixtures ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``RANDOM``: the runner's naive run with --attn-stats 2 (random weights, seq 128, inference);
    ``BUILT``: a per-head naive run's trace and metadata (weights marked "checkpoint") with an event
    file of ``BUILT_STATS`` at step 3; ``NONE``: that per-head run as the runner wrote it (no statistics);
    ``SHORT``: the runner's --attn-stats run at seq 64, where no window is below S (no local verdict)."""
    root = tmp_path_factory.mktemp("head-stats")
    out = root / "logdir"
    result = profile_run(out, RANDOM, impl="naive", attn_stats=2, mode="inference", seq=128)
    assert result.status == "ok", result.error
    base = root / "base"
    result = profile_run(base, "per-head", impl="naive", per_head=True, mode="inference", seq=128)
    assert result.status == "ok", result.error
    target = out / BUILT
    target.mkdir(parents=True)
    for f in (base / "per-head").iterdir():
        if f.name.endswith(".pt.trace.json"):
            shutil.copy(f, target / f.name)
    meta = json.loads((base / "per-head" / "tb_attn_run.json").read_text())
    meta["attn_stats"] = {"weights": "checkpoint"}
    (target / "tb_attn_run.json").write_text(json.dumps(meta))
    write_events(str(target), BUILT_STATS, step=3)
    shutil.copytree(base / "per-head", out / NONE)
    result = profile_run(out, SHORT, impl="naive", attn_stats=1, mode="inference", seq=64)
    assert result.status == "ok", result.error
    return out


@pytest.fixture(scope="module")
def stats_ui(logdir: Path) -> Iterator[TensorBoard]:
    with TensorBoard(logdir) as tb:
        yield tb


def engine_run(logdir: Path, run: str) -> RunSummary:
    (found,) = [r for r in resolve_runs(str(logdir)) if r.name == run]
    summary = Loader().summarize_run(found)
    assert not summary.errors and len(summary.workers) == 1, summary.errors
    return summary


def open_heads(page: Page, tb: TensorBoard, run: str) -> Frame:
    frame = open_tab(page, tb.url)
    open_run(frame, run)
    show_tab(frame, "Layers \u00d7 heads")
    expect(frame.get_by_test_id("heads-metric")).to_be_visible()
    return frame


def cells(frame: Frame) -> list[list[float]]:
    expect_ink(frame, HEATMAP + " canvas", [2000], "the heatmap")
    return chart_option(frame, HEATMAP)["series"][0]["data"]


def flat(rows: list[list[float]]) -> list[float]:
    """Rows sorted and flattened, for ``pytest.approx`` (which takes no nesting)."""
    return [v for row in sorted(rows) for v in row]


def expected_cells(stats: AttnStats, stat: str) -> list[float]:
    """The heatmap's cells of ``stat``, flattened: (head, row, value, not derived, marks)."""
    layers = sorted({a.layer for a in stats.heads})
    return flat([[a.head, layers.index(a.layer), a.values[stat], 0, (1 if a.local else 0) | (2 if a.sink else 0)]
                 for a in stats.heads])


def choose(frame: Frame, value: str) -> None:
    picker = frame.get_by_role("combobox", name="Heatmap metric")
    picker.select_option(value)
    expect(picker).to_have_value(value)


def check_scatter(frame: Frame, summary: RunSummary) -> dict[str, Any]:
    """The scatter's points are each head's (window mass, time on the worker's clock), by layer,
    local ones filled, sinks diamonds; the threshold a dashed vertical line."""
    stats = summary.attn_stats
    assert stats is not None
    ws = summary.workers[0]
    expect(frame.get_by_test_id("head-scatter").locator("h3")).to_have_text("Which heads are expensive and local")
    expect_ink(frame, SCATTER + " canvas", [1500], "the scatter")
    option = chart_option(frame, SCATTER)
    cost = {(layer.layer, h.head): h for layer in ws.layers for h in layer.heads}
    device = ws.device != "cpu"
    points = {s["name"]: s["data"] for s in option["series"] if s["type"] == "scatter"}
    assert sorted(points) == [f"L{layer}" for layer in sorted({a.layer for a in stats.heads})]
    for a in stats.heads:
        h = cost[(a.layer, a.head)]
        got = [d for d in points[f"L{a.layer}"]]
        want = [a.values[f"window_{stats.window}"], h.device_us if device else h.cpu_us]
        matches = [d for d in got if d["value"] == pytest.approx(want)]
        assert len(matches) >= 1, (a.layer, a.head, want, [d["value"] for d in got])
        d = matches[0]
        assert d["symbol"] == ("diamond" if a.sink else "circle"), (a.layer, a.head)
        filled = d["itemStyle"]["color"] != "rgba(255,255,255,0)"
        assert filled == a.local, (a.layer, a.head, d["itemStyle"])
    assert sum(len(v) for v in points.values()) == len(stats.heads)
    (line,) = [s for s in option["series"] if s["name"] == "threshold"]
    assert line["type"] == "line" and line["lineStyle"]["type"] == "dashed"
    assert [x for x, _ in line["data"]] == pytest.approx([stats.threshold, stats.threshold])
    x_axis = option["xAxis"][0]
    assert (x_axis["min"], x_axis["max"]) == (0, 1)
    assert x_axis["name"] == f"attention mass within {stats.window} tokens"
    # It opens on the masses the heads have (the threshold included), zoomable out to 0 %.
    lowest = min([stats.threshold] + [a.values[f"window_{stats.window}"] for a in stats.heads])
    for zoom in option["dataZoom"]:
        assert zoom["startValue"] <= lowest - 0.05 and zoom["endValue"] == 1, zoom
    return option


# ---- the Layers × heads view -------------------------------------------------------------------

def test_random_weights_run_shows_its_statistics_and_the_note(stats_ui: TensorBoard, logdir: Path, page: Page,
                                                              artifacts: Path) -> None:
    summary = engine_run(logdir, RANDOM)
    stats = summary.attn_stats
    assert stats is not None and stats.weights == "random" and stats.note.startswith("Random weights")
    assert stats.stats == ["entropy", "sink_1", "sink_4", "window_64", "top_32", "distance"]
    page.set_viewport_size(TALL)
    frame = open_heads(page, stats_ui, RANDOM)

    # The note, as a warning above the chart.
    banner = frame.get_by_test_id("attn-stats-banner")
    expect(banner).to_have_class("warn stats-banner")
    expect(banner).to_contain_text(stats.note)

    # The selector: the cost metrics, then the statistics in their own group.
    picker = frame.get_by_role("combobox", name="Heatmap metric")
    groups = picker.locator("optgroup")
    expect(groups).to_have_count(2)
    assert [groups.nth(i).get_attribute("label") for i in range(2)] == ["cost", "attention statistics"]
    expect(groups.nth(1).locator("option")).to_have_text(
        ["entropy (normalized)", "sink mass, first token", "sink mass, first 4 tokens", "window mass, 64 tokens",
         "top-32 mass", "mean distance"])
    assert [o.get_attribute("value") for o in groups.nth(1).locator("option").all()] == [
        f"stat:{s}" for s in stats.stats]
    expect(groups.nth(0).locator("option")).to_have_text(["CPU time", "FLOPs", "memory allocated",
                                                          "S\u00d7S score bytes materialized"])

    # Entropy: the engine's values per head, on a fixed 0..1 scale; no head is local here.
    choose(frame, "stat:entropy")
    caption = frame.get_by_test_id("heads-metric")
    expect(caption).to_have_text("shown: entropy (normalized) by layer and head (1: uniform over the keys a query "
                                 f"may see, 0: all on one key); mean over queries and sequences, step {stats.step}.")
    got = cells(frame)
    assert flat(got) == pytest.approx(expected_cells(stats, "entropy"))
    assert not any(a.local or a.sink for a in stats.heads)
    vm = chart_option(frame, HEATMAP)["visualMap"][0]
    assert (vm["min"], vm["max"]) == (0, 1)
    check_scatter(frame, summary)
    expect(frame.get_by_test_id("scatter-derived")).to_contain_text("All heads' times are derived")
    # No local heads: no local-heads finding.
    expect(frame.locator("[data-finding=local-heads]")).to_have_count(0)
    shot(page, artifacts, "head-stats-random")

    # Back to a cost metric: the heatmap is the cost's again, the banner and scatter stay.
    choose(frame, "cpu_us")
    expect(caption).to_contain_text("shown: CPU time per step by layer and head")
    expect(banner).to_be_visible()
    expect(frame.get_by_test_id("head-scatter")).to_be_visible()


def test_built_statistics_mark_local_and_sink_heads(stats_ui: TensorBoard, logdir: Path, page: Page,
                                                    artifacts: Path) -> None:
    summary = engine_run(logdir, BUILT)
    stats = summary.attn_stats
    ws = summary.workers[0]
    assert stats is not None and stats.weights == "checkpoint" and not stats.note and stats.step == 3
    assert stats.window == 64 and stats.threshold == pytest.approx(0.99)
    assert {(a.layer, a.head) for a in stats.heads if a.local} == LOCAL
    assert {(a.layer, a.head) for a in stats.heads if a.sink} == SINK
    assert all(not h.derived for layer in ws.layers for h in layer.heads), "a per-head run measures its heads"
    page.set_viewport_size(TALL)
    frame = open_heads(page, stats_ui, BUILT)

    banner = frame.get_by_test_id("attn-stats-banner")
    expect(banner).to_have_class("note stats-banner")
    expect(banner).to_have_text(f"Attention statistics at step 3, from {', '.join(stats.files)} "
                                "(the model's own weights).")
    assert len(stats.files) == 1 and stats.files[0].startswith("events.out.tfevents.")

    # The local-heads finding, in the run's findings, as the engine words it.
    (finding,) = [f for f in ws.findings if f.id == "local-heads"]
    item = frame.locator("[data-finding=local-heads]")
    expect(item).to_have_count(1)
    expect(item.locator("summary")).to_contain_text(finding.title)
    expect(item).to_contain_text("layer 0 head 1; layer 1 heads 2, 3")
    expect(item).to_contain_text("1 of them also put at least half their mass on the first 4 tokens")

    # The cost heatmap marks the local and sink heads too.
    marks = {(int(c[1]), int(c[0])): int(c[4]) for c in cells(frame)}
    want = {(a.layer, a.head): (1 if a.local else 0) | (2 if a.sink else 0) for a in stats.heads}
    assert marks == want
    assert want[(0, 1)] == 1 and want[(0, 2)] == 2 and want[(1, 3)] == 3 and want[(0, 0)] == 0
    legend = frame.locator("section.heads .legend").first
    expect(legend).to_contain_text("local: at least 99.00 % of its attention within 64 tokens")
    expect(legend).to_contain_text("sink: at least 50.00 % on the first 4 tokens")

    # Window mass: the engine's values and marks, a fixed 0..1 scale.
    choose(frame, "stat:window_64")
    assert flat(cells(frame)) == pytest.approx(expected_cells(stats, "window_64"))
    vm = chart_option(frame, HEATMAP)["visualMap"][0]
    assert (vm["min"], vm["max"], vm["text"]) == (0, 1, ["100 %", "0 %"])
    # A cell's tooltip: every statistic, the verdicts and the head's cost.
    point = frame.eval_on_selector(HEATMAP, "el => el.echart.convertToPixel({gridIndex: 0}, [3, 1])")
    tip = hover_tooltip(frame, {"x": point[0], "y": point[1]}, "Layer 1, head 3", HEATMAP)
    cpu = next(h for layer in ws.layers if layer.layer == 1 for h in layer.heads if h.head == 3).cpu_us
    for text in ("window mass, 64 tokens: 99.10 %", "entropy (normalized): 0.300", "mean distance: 2.5 tokens",
                 "local: 99.10 % within 64 tokens (\u2265 99.00 %)", "sink: 55.00 % on the first 4 tokens",
                 f"CPU time: {fmt_us(cpu)} per step (measured)"):
        expect(tip).to_contain_text(text)
    shot(page, artifacts, "head-stats-built")

    # Mean distance: its own range, 0 to the largest.
    choose(frame, "stat:distance")
    assert flat(cells(frame)) == pytest.approx(expected_cells(stats, "distance"))
    vm = chart_option(frame, HEATMAP)["visualMap"][0]
    assert (vm["min"], vm["max"]) == (0, pytest.approx(50.0))

    # The scatter, and a click on a point opens its layer's drill-down.
    check_scatter(frame, summary)
    expect(frame.get_by_test_id("scatter-derived")).to_have_count(0)
    shot(page, artifacts, "head-stats-scatter")

    # The chosen statistic survives the tab being made again (TensorBoard re-creates its iframe).
    page.reload()
    deadline = time.monotonic() + 30
    while (frame2 := next((f for f in page.frames if TAB_FRAME in f.url), None)) is None:
        assert time.monotonic() < deadline, "no tab after the reload"
        page.wait_for_timeout(50)
    expect(frame2.locator(".run-title")).to_have_text(BUILT)
    expect(frame2.get_by_role("combobox", name="Heatmap metric")).to_have_value("stat:distance")
    expect(frame2.get_by_test_id("heads-metric")).to_contain_text("shown: mean distance by layer and head")


def test_a_run_without_statistics_keeps_its_cost_metric(stats_ui: TensorBoard, logdir: Path, page: Page) -> None:
    """A statistic chosen on one run: a run without statistics shows its cost metric and offers
    no statistics, no banner and no scatter; back on a run with statistics, the choice is kept."""
    assert engine_run(logdir, NONE).attn_stats is None
    frame = open_heads(page, stats_ui, BUILT)
    choose(frame, "stat:entropy")
    frame.get_by_role("button", name="\u2190 Runs").click()
    open_run(frame, NONE)
    show_tab(frame, "Layers \u00d7 heads")
    picker = frame.get_by_role("combobox", name="Heatmap metric")
    expect(picker).to_have_value("cpu_us")
    expect(picker.locator("optgroup")).to_have_count(0)
    expect(frame.get_by_test_id("heads-metric")).to_contain_text("shown: CPU time per step by layer and head")
    expect(frame.get_by_test_id("attn-stats-banner")).to_have_count(0)
    expect(frame.get_by_test_id("head-scatter")).to_have_count(0)
    assert all(len(c) == 5 and c[4] == 0 for c in cells(frame))
    frame.get_by_role("button", name="\u2190 Runs").click()
    open_run(frame, BUILT)
    show_tab(frame, "Layers \u00d7 heads")
    expect(frame.get_by_role("combobox", name="Heatmap metric")).to_have_value("stat:entropy")


def test_no_window_recorded_judges_no_head_local(stats_ui: TensorBoard, logdir: Path, page: Page) -> None:
    """At seq 64 the runner measures no window (each is below S only): the statistics are offered,
    no head is judged local, and the scatter says why it is not drawn."""
    summary = engine_run(logdir, SHORT)
    stats = summary.attn_stats
    assert stats is not None and stats.window is None and not any(s.startswith("window_") for s in stats.stats)
    assert not any(a.local for a in stats.heads)
    frame = open_heads(page, stats_ui, SHORT)
    picker = frame.get_by_role("combobox", name="Heatmap metric")
    expect(picker.locator("optgroup").nth(1).locator("option")).to_have_count(len(stats.stats))
    choose(frame, "stat:top_32")
    assert flat(cells(frame)) == pytest.approx(expected_cells(stats, "top_32"))
    expect(frame.get_by_test_id("scatter-no-window")).to_contain_text("no head can be judged local")
    expect(frame.locator("section.heads .legend").first).to_contain_text(
        "local: not judged: no window mass was recorded (the sequences are 64 tokens or shorter)")


# ---- TensorBoard's own dashboards over the same event files ------------------------------------

def test_tensorboard_lists_the_statistics(stats_ui: TensorBoard, page: Page, artifacts: Path) -> None:
    """The event files are TensorBoard's own: its Scalars dashboard lists a tag per statistic,
    layer and head, and its Histograms dashboard one per statistic across heads."""
    page.set_viewport_size(TALL)
    page.goto(stats_ui.url + "#scalars")
    # Its tag filter (Polymer's, in shadow DOM, which Playwright's CSS crosses).
    filt = page.locator("tf-tag-filterer input").first
    expect(filt).to_be_visible(timeout=30_000)
    filt.fill("attn_stats.entropy")
    expect(page.get_by_text("attn_stats.entropy/L0.H0", exact=True).first).to_be_visible(timeout=30_000)
    expect(page.get_by_text("attn_stats.entropy/L1.H3", exact=True).first).to_be_visible()
    shot(page, artifacts, "tensorboard-scalars")
    page.goto(stats_ui.url + "#histograms")
    expect(page.get_by_text("attn_stats.histograms/entropy", exact=True).first).to_be_visible(timeout=30_000)
    expect(page.get_by_text("attn_stats.histograms/window_64", exact=True).first).to_be_visible()
    shot(page, artifacts, "tensorboard-histograms")
