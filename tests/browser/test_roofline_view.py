"""The Roofline tab (``views/roofline.ts``), the layer table's roof columns and Compare's roofline
overlay (``views/compare_roofline.ts``) in a real browser, on CPU runs of the runner (naive and
CPU flash attention in inference, with the runner's probes of this machine as peaks) and a copy of
the naive run whose metadata has no peaks. The figures are the engine's (``summary.roofline``,
each phase's and layer's ``roof``, ``compare``'s), formatted as ``format.ts`` writes them; the
chart draws a roof per peak class its points use, the ridge, one point per layer × phase with
FLOPs and bytes plus attention's; hovering a point shows its verdict, clicking it opens its
drill-down. Screenshots go to ``test-artifacts/roofline*.png``."""

from __future__ import annotations

import json
import math
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import profile_run
from pages import (
    chart_option,
    drill_title,
    engine_summary,
    expect_ink,
    fmt_bytes,
    fmt_flops,
    fmt_share,
    fmt_us,
    hover_tooltip,
    open_run,
    open_tab,
    shot,
    show_tab,
    to_fixed,
)
from playwright.sync_api import Frame, Page, expect

from devtools.tbserver import TensorBoard
from tb_attn_plugin.analysis.cross_run.compare import compare
from tb_attn_plugin.engine.loader import Loader, resolve_runs
from tb_attn_plugin.types.schema import Roof, WorkerSummary

RUNS = ("naive", "sdpa-flash")
NO_PEAK = "no-peak"
CHART = "[data-testid=roofline-chart]"
COMPARE_CHART = "[data-testid=compare-roofline-chart]"
#: metrics.ts's labels of the phases these runs have.
PHASE_LABELS = {"qkv_proj": "QKV proj", "qk_matmul": "Q\u00b7K\u1d40", "scale": "scale", "mask": "mask",
                "softmax": "softmax", "av_matmul": "attn\u00b7V", "sdpa": "SDPA", "out_proj": "out proj"}
DASH = "\u2014"
#: Tall enough for the chart, its notes and the table in one screenshot.
TALL = {"width": 1400, "height": 2300}


# ---- format.ts, in Python (the helpers pages.py lacks) -------------------------------------------

def fmt_rate(v: float) -> str:
    return "0" if v == 0 else f"{fmt_flops(v)}/s"


def fmt_bandwidth(v: float | None) -> str:
    return DASH if v is None else f"{fmt_bytes(v)}/s"


def fmt_intensity(v: float | None) -> str:
    if v is None:
        return DASH
    if v == 0:
        return "0"
    assert 0.01 <= abs(v) < 1000, v  # the range these runs reach; format.ts writes others otherwise
    return to_fixed(v, 0 if abs(v) >= 100 else 1 if abs(v) >= 10 else 2)


def flat(points: list[list[float]]) -> list[float]:
    """Points sorted and flattened, for ``pytest.approx`` (which takes no nesting)."""
    return [v for point in sorted(points) for v in point]


def plotted(r: Roof | None) -> bool:
    return r is not None and r.intensity is not None and r.intensity > 0 and r.flops_per_s > 0


# ---- fixtures ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Naive and CPU flash attention at seq 256 in inference, and ``NO_PEAK``: the naive run with
    its metadata's peaks (the runner's probes) deleted."""
    out = tmp_path_factory.mktemp("roofline") / "logdir"
    for impl in RUNS:
        result = profile_run(out, impl, impl=impl, seq=256, mode="inference")
        assert result.status == "ok", result.error
    shutil.copytree(out / "naive", out / NO_PEAK)
    meta_path = out / NO_PEAK / "tb_attn_run.json"
    meta = json.loads(meta_path.read_text())
    assert meta.get("peaks"), "the runner recorded no peaks"
    del meta["peaks"]
    meta_path.write_text(json.dumps(meta))
    return out


@pytest.fixture(scope="module")
def roofline_ui(logdir: Path) -> Iterator[TensorBoard]:
    with TensorBoard(logdir) as tb:
        yield tb


def open_roofline(page: Page, tb: TensorBoard, run: str) -> Frame:
    frame = open_tab(page, tb.url)
    open_run(frame, run)
    show_tab(frame, "Roofline")
    expect(frame.get_by_test_id("roof-peaks")).to_be_visible()
    return frame


def point_series(frame: Frame, selector: str) -> list[dict[str, Any]]:
    """The chart's point series (the roofs, ridge and labels are silent)."""
    expect_ink(frame, selector + " canvas", [2000], "the roofline chart")
    return [s for s in chart_option(frame, selector)["series"] if not s.get("silent")]


def pixel(frame: Frame, selector: str, value: list[float]) -> tuple[float, float]:
    x, y = frame.eval_on_selector(selector, "(el, v) => el.echart.convertToPixel({gridIndex: 0}, v)", value)
    return float(x), float(y)


# ---- the Roofline tab --------------------------------------------------------------------------

def test_roofline_tab_matches_the_engine(roofline_ui: TensorBoard, logdir: Path, page: Page, artifacts: Path) -> None:
    ws = engine_summary(logdir, "naive")
    rl = ws.roofline
    assert rl is not None and rl.peak_flops and rl.peak_bytes_per_s and rl.attention and rl.clock == "cpu"
    page.set_viewport_size(TALL)
    frame = open_roofline(page, roofline_ui, "naive")

    # The peaks: each class's FLOP/s, the bandwidth, the launch floor; attention as one point.
    peaks = frame.get_by_test_id("roof-peaks")
    for cls, peak in rl.peak_flops.items():
        expect(peaks.locator(f"[data-peak={cls}] b")).to_have_text(fmt_rate(peak))
    expect(peaks.locator("[data-peak=memory] b")).to_have_text(fmt_bandwidth(rl.peak_bytes_per_s))
    expect(peaks.locator("[data-peak=launch] b")).to_have_text(fmt_us(rl.launch_us))
    expect(peaks).to_contain_text(rl.device)
    expect(frame.get_by_test_id("roof-no-peak")).to_have_count(0)
    att = rl.attention
    assert att.share is not None and att.ceiling is not None
    expect(frame.get_by_test_id("roof-attention")).to_have_text(
        f"attention, all layers: {fmt_intensity(att.intensity)} FLOP/B, {fmt_rate(att.flops_per_s)}, "
        f"{fmt_bandwidth(att.bytes_per_s)}, {fmt_share(att.share)} of its ceiling ({fmt_rate(att.ceiling)}): "
        f"{att.verdict}")
    expect(frame.get_by_test_id("roof-caveat")).to_have_text(
        "A roofline is an upper bound, not a prediction: few kernels get near their ceiling.")

    # The table: every layer × phase with a roof, each layer, and attention, as the engine says.
    table = frame.get_by_test_id("roof-table")
    rows = [(layer, p.phase, p.roof, p.bytes) for layer in ws.layers for p in layer.phases if p.roof]
    rows += [(layer, "", layer.roof, layer.bytes) for layer in ws.layers if layer.roof]
    expect(table.locator("tbody tr")).to_have_count(len(rows))
    for layer, phase, roof, nbytes in rows:
        assert roof is not None
        row = table.locator(f'tbody tr[data-layer="{layer.layer}"][data-phase="{phase}"]')
        expect_roof_row(row, roof, nbytes)
    expect_roof_row(table.locator("tfoot tr"), att, sum(layer.bytes for layer in ws.layers))

    # The chart: one point per layer × phase with FLOPs and bytes, by phase, and attention's.
    expected: dict[str, list[list[float]]] = {}
    for layer in ws.layers:
        for p in layer.phases:
            if plotted(p.roof):
                assert p.roof is not None
                expected.setdefault(PHASE_LABELS[p.phase], []).append([p.roof.intensity, p.roof.flops_per_s])
    # In execution order, as the layers list them.
    memory_only = list(dict.fromkeys(
        p.phase for layer in ws.layers for p in layer.phases if p.roof and p.roof.flops_per_s == 0))
    assert set(memory_only) >= {"scale", "mask", "softmax"} and {"qk_matmul", "av_matmul"} <= {
        p.phase for layer in ws.layers for p in layer.phases if plotted(p.roof)}
    series = point_series(frame, CHART)
    got = {s["name"]: [d["value"] for d in s["data"]] for s in series}
    assert flat(got.pop("attention")) == pytest.approx([att.intensity, att.flops_per_s])
    assert got.keys() == expected.keys()
    for name, values in expected.items():
        assert flat(got[name]) == pytest.approx(flat(values)), name
    # The roof of the points' class (all fp32 here), flat at its peak from the ridge P/W, dashed there.
    option = chart_option(frame, CHART)
    lines = {s["name"]: s["data"] for s in option["series"] if s.get("silent") and s["type"] == "line"}
    assert {p.roof.dtype for layer in ws.layers for p in layer.phases if plotted(p.roof)} == {"fp32"}
    peak = rl.peak_flops["fp32"]
    ridge = peak / rl.peak_bytes_per_s
    assert set(lines) == {"roof fp32", "ridge"}, set(lines)
    roof_line = lines["roof fp32"]
    assert roof_line[1] == pytest.approx([ridge, peak]) and roof_line[-1][1] == pytest.approx(peak)
    assert roof_line[0][1] == pytest.approx(roof_line[0][0] * rl.peak_bytes_per_s)
    assert [x for x, _ in lines["ridge"]] == pytest.approx([ridge, ridge])
    for axis in ("xAxis", "yAxis"):
        assert option[axis][0]["type"] == "log"
    # Every point inside the axes.
    x_axis, y_axis = option["xAxis"][0], option["yAxis"][0]
    for s in series:
        for x, y in (d["value"] for d in s["data"]):
            assert x_axis["min"] < x < x_axis["max"] and y_axis["min"] < y < y_axis["max"]
    labels = ", ".join(PHASE_LABELS[p] for p in memory_only)
    expect(frame.get_by_test_id("roof-memory-note")).to_have_text(
        f"{len(memory_only)} phases without FLOPs ({labels}) move memory only: no place on these axes; "
        "see the table, where % of roof is of the bandwidth roof.")
    shot(page, artifacts, "roofline")

    # Hover the point farthest from the others: its figures and verdict; click it: its drill-down.
    points = [(layer, p) for layer in ws.layers for p in layer.phases if plotted(p.roof)]
    pixels = [pixel(frame, CHART, [p.roof.intensity, p.roof.flops_per_s]) for _, p in points]  # type: ignore[union-attr]
    pixels.append(pixel(frame, CHART, [att.intensity, att.flops_per_s]))
    lonely = max(range(len(points)), key=lambda i: min(math.dist(pixels[i], q) for j, q in enumerate(pixels) if j != i))
    layer, phase = points[lonely]
    x, y = pixels[lonely]
    # The same phase of another layer has the same intensity and may sit on it (a rate within a
    # symbol's width): the tooltip names the one on top, whose figures it must then show.
    tip = hover_tooltip(frame, {"x": x, "y": y}, f" \u00b7 {PHASE_LABELS[phase.phase]}", CHART)
    shown = re.search(r"L(\d+) \u00b7 ", tip.inner_text())
    assert shown is not None
    candidates = [(lay, p) for lay, p in points if lay.layer == int(shown.group(1)) and p.phase == phase.phase]
    assert len(candidates) == 1
    layer, phase = candidates[0]
    roof = phase.roof
    assert roof is not None and roof.share is not None
    expect(tip).to_contain_text(roof.verdict)
    expect(tip).to_contain_text(f"{fmt_share(roof.share)} of roof")
    expect(tip).to_contain_text(f"intensity: {fmt_intensity(roof.intensity)} FLOP/B")
    expect(tip).to_contain_text(f"achieved: {fmt_rate(roof.flops_per_s)}, {fmt_bandwidth(roof.bytes_per_s)}")
    frame.locator(CHART).click(position={"x": pixels[lonely][0], "y": pixels[lonely][1]})
    label = PHASE_LABELS[phase.phase]
    expect(drill_title(frame)).to_have_text(f"Drill-down: Layer {layer.layer} \u00b7 {label} \u00b7 forward")
    selected = table.locator(f'tbody tr[data-layer="{layer.layer}"][data-phase="{phase.phase}"]')
    expect(selected).to_have_class("phase-row sel-row")
    shot(page, artifacts, "roofline-drilldown")


def expect_roof_row(row: Any, roof: Roof, nbytes: float) -> None:
    expect(row.locator("td.intensity")).to_have_text(fmt_intensity(roof.intensity))
    expect(row.locator("td.flops-per-s")).to_have_text(fmt_rate(roof.flops_per_s) if roof.flops_per_s > 0 else DASH)
    expect(row.locator("td.bytes-per-s")).to_have_text(fmt_bandwidth(roof.bytes_per_s))
    expect(row.locator("td.bytes")).to_have_text(("\u2265 " if roof.lower_bound else "") + fmt_bytes(nbytes))
    expect(row.locator("td.ceiling")).to_have_text(DASH if roof.ceiling is None else fmt_rate(roof.ceiling))
    expect(row.locator("td.roof-share")).to_have_text(fmt_share(roof.share))
    expect(row.locator("td.bound")).to_have_text(roof.verdict)
    expect(row.locator("td.time")).to_have_text(fmt_us(roof.time_us))


def test_layer_table_has_the_roof_columns(roofline_ui: TensorBoard, logdir: Path, page: Page, artifacts: Path) -> None:
    ws = engine_summary(logdir, "naive")
    frame = open_tab(page, roofline_ui.url)
    open_run(frame, "naive")
    table = frame.locator("table.layers-table")
    expect(table).to_be_visible()
    headers = table.locator("thead th").all_inner_texts()
    assert "% of roof" in headers and "bound" in headers, headers
    for i, layer in enumerate(ws.layers):
        assert layer.roof is not None
        row = table.locator("tbody tr").nth(i)
        expect(row.locator("th")).to_contain_text(f"L{layer.layer}")
        expect(row.locator("td").first).to_have_text(layer.backend)  # the backend stays the first cell
        expect(row.locator("td.roof-share")).to_have_text(fmt_share(layer.roof.share))
        expect(row.locator("td.bound")).to_have_text(layer.roof.verdict)
    shot(page, artifacts, "roofline-layers")


def test_no_peak_known(roofline_ui: TensorBoard, logdir: Path, page: Page, artifacts: Path) -> None:
    """A trace whose run has no peaks: the note and the CLI's flags, the points without roofs,
    no share or ceiling in the table."""
    ws: WorkerSummary = engine_summary(logdir, NO_PEAK)
    rl = ws.roofline
    assert rl is not None and not rl.peak_flops and rl.peak_bytes_per_s is None and rl.note
    assert rl.attention is not None and rl.attention.verdict == "no peak known"
    page.set_viewport_size(TALL)
    frame = open_roofline(page, roofline_ui, NO_PEAK)
    warn = frame.get_by_test_id("roof-no-peak")
    expect(warn).to_contain_text(f"No peak known: {rl.note}")
    expect(warn).to_contain_text("--peak-flops")
    expect(warn).to_contain_text("--peak-bw")
    expect(warn).to_contain_text("--tb_attn_peak_flops")
    option = chart_option(frame, CHART)
    assert not [s for s in option["series"] if s.get("silent")], "roofs drawn without peaks"
    series = point_series(frame, CHART)
    count = sum(plotted(p.roof) for layer in ws.layers for p in layer.phases)
    assert sum(len(s["data"]) for s in series if s["name"] != "attention") == count > 0
    table = frame.get_by_test_id("roof-table")
    expect(table.locator("td.roof-share", has_text="%")).to_have_count(0)
    expect(table.locator("td.ceiling", has_text="FLOP/s")).to_have_count(0)
    expect(table.locator("tfoot td.bound")).to_have_text("no peak known")
    expect(frame.get_by_test_id("roof-attention")).to_contain_text(
        f"{fmt_intensity(rl.attention.intensity)} FLOP/B, {fmt_rate(rl.attention.flops_per_s)}")
    shot(page, artifacts, "roofline-no-peak")


# ---- Compare's overlay -------------------------------------------------------------------------

def test_compare_roofline_overlay(roofline_ui: TensorBoard, logdir: Path, page: Page, artifacts: Path) -> None:
    found = {r.name: r for r in resolve_runs(str(logdir))}
    loader = Loader()
    expected = compare([loader.summarize_run(found[r]) for r in RUNS])
    by_run = {r.run: r for r in expected.runs}
    # Naive attention writes its S×S scores to memory; the fused kernel does not: its attention
    # moves fewer bytes per FLOP, toward the compute roof.
    naive, flash = (by_run[r].roofline.attention for r in RUNS)  # type: ignore[union-attr]
    assert naive is not None and flash is not None and naive.intensity and flash.intensity
    assert flash.intensity > 2 * naive.intensity
    page.set_viewport_size(TALL)
    frame = open_tab(page, roofline_ui.url)
    for run in RUNS:
        frame.get_by_role("checkbox", name=f"Pick {run} for comparing").check()
    frame.get_by_test_id("compare-button").click()
    table = frame.get_by_test_id("compare-table")
    expect(table).to_be_visible()
    for run in RUNS:
        att = by_run[run].roofline.attention  # type: ignore[union-attr]
        assert att is not None
        row = table.locator("tr", has=frame.get_by_role("link", name=run, exact=True)).first
        expect(row.locator("td.intensity")).to_have_text(fmt_intensity(att.intensity))
        expect(row.locator("td.roof-share")).to_have_text(fmt_share(att.share))
        expect(row.locator("td.bound")).to_have_text(att.verdict)
    series = point_series(frame, COMPARE_CHART)
    assert [s["name"] for s in series] == [r.run for r in expected.runs]
    assert len({s["symbol"] for s in series}) == len(series)
    for s in series:
        r = by_run[s["name"]]
        values = [[p.roof.intensity, p.roof.flops_per_s] for p in r.phases.values() if plotted(p.roof)]  # type: ignore[union-attr]
        att = r.roofline.attention  # type: ignore[union-attr]
        assert att is not None
        values.append([att.intensity, att.flops_per_s])
        assert flat([d["value"] for d in s["data"]]) == pytest.approx(flat(values)), s["name"]
    silent = [s["name"] for s in chart_option(frame, COMPARE_CHART)["series"] if s.get("silent")]
    assert "roof fp32" in silent and "ridge" in silent, silent
    expect(frame.get_by_test_id("compare-roof-legend")).to_contain_text("naive")
    expect(frame.get_by_test_id("compare-roof-note")).to_contain_text("A roofline is an upper bound")
    frame.get_by_test_id("compare-roofline").scroll_into_view_if_needed()
    shot(page, artifacts, "roofline-compare")
