"""The Strategies view (``views/strategies.ts``) in a real browser: exact and approximate attention
at three lengths (the ``strategies_logdir`` runs), ticked in the runs list and opened with the
Strategies button. Its table's time, error and speed-up cells against the engine's
``strategies`` (formatted as ``format.ts`` writes them), "not measured" for the run without an
accuracy record, the baseline selector, the two charts and the group's findings. Screenshots go to
``test-artifacts/`` (``strategies-*.png``)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from pages import chart_option, expect_ink, expect_still, fmt_us, open_tab, shot, to_fixed
from playwright.sync_api import Frame, Page, expect

from devtools.tbserver import TensorBoard
from tb_attn_plugin.analysis.cross_run.strategies import strategies
from tb_attn_plugin.engine.loader import Loader, resolve_runs
from tb_attn_plugin.types.strategies import StrategyGroup, StrategyTable

NOT_MEASURED = "not measured"


# ---- format.ts, in Python -----------------------------------------------------------------------

def fmt_error(rel: float) -> str:
    """format.ts fmtError: a percentage with three significant digits (JavaScript's toPrecision)."""
    if rel == 0:
        return "0 %"
    pct = rel * 100
    if pct < 0.001:
        return "< 0.001 %"
    return f"{to_fixed(pct, 0) if pct >= 100 else format(pct, '#.3g')} %"


def fmt_loss(d: float) -> str:
    """format.ts fmtLossDiff: signed, four decimals, or JavaScript's toExponential(1) under 1e-4."""
    if d == 0:
        return "0"
    text = re.sub(r"e([+-])0*(\d)", r"e\1\2", f"{d:.1e}") if abs(d) < 1e-4 else to_fixed(d, 4)
    return ("+" if d > 0 else "") + text


def fmt_ratio(r: float | None) -> str:
    """format.ts fmtRatio."""
    if r is None:
        return "\u2014"
    return f"{to_fixed(r, 0 if r >= 100 else 1 if r >= 10 else 2)}\u00d7"


# ---- the fixtures and the view --------------------------------------------------------------------

@pytest.fixture(scope="module")
def strategies_ui(strategies_logdir: Path) -> Iterator[TensorBoard]:
    with TensorBoard(strategies_logdir) as tb:
        yield tb


def engine(logdir: Path, baseline: str | None = None) -> StrategyTable:
    loader = Loader()
    return strategies([loader.summarize_run(r) for r in resolve_runs(str(logdir))], baseline=baseline)


def open_strategies(page: Page, tb: TensorBoard, runs: int, artifacts: Path | None = None) -> Frame:
    """The tab with every run ticked and the Strategies view open on them (the ticked list saved
    to ``strategies-runs.png`` when ``artifacts`` is given)."""
    frame = open_tab(page, tb.url)
    expect(frame.get_by_test_id("runs-count")).to_have_text(f"{runs} runs")
    frame.get_by_role("checkbox", name=f"Tick all {runs} shown runs").check()
    expect(frame.get_by_test_id("strategies-button")).to_be_enabled()
    if artifacts is not None:
        shot(page, artifacts, "strategies-runs")
    frame.get_by_test_id("strategies-button").click()
    expect(frame.get_by_role("heading", name=f"Strategies of {runs} runs")).to_be_visible()
    expect(frame.get_by_test_id("strategies-table")).to_be_visible(timeout=60_000)
    return frame


def expect_cells(frame: Frame, group: StrategyGroup) -> None:
    """Each row's time, error, loss and speed-up cells as the view writes the engine's figures."""
    rows = frame.locator("table.strategies-table tbody tr")
    expect(rows).to_have_count(len(group.rows))
    for r in group.rows:
        row = frame.locator(f'table.strategies-table tr[data-run="{r.run}"]')
        # The time, and the "±" mark where the run's steps spread over 20% of their median.
        expect(row.locator("td.time")).to_have_text(fmt_us(r.time_us) + ("\u00b1" if r.noisy else ""))
        acc = r.accuracy
        expect(row.locator("td.err")).to_have_text(NOT_MEASURED if acc is None else fmt_error(acc.rel_l1))
        loss = NOT_MEASURED if acc is None or acc.loss_diff is None else fmt_loss(acc.loss_diff)
        expect(row.locator("td.loss")).to_have_text(loss)
        # A speed-up the runs cannot tell from drift between runs (one run each) is marked "≈".
        undecided = r.speedup is not None and r.speedup_verdict is not None and not r.speedup_verdict.decided
        mark = "\u2248" if undecided else ""
        speedup = "1.00\u00d7" if r.strategy == group.baseline else mark + fmt_ratio(r.speedup)
        expect(row.locator("td.speedup")).to_have_text(speedup)
        expect(row.locator("td.pareto .badge")).to_have_count(1 if r.pareto else 0)


def test_table_charts_and_findings_match_the_engine(strategies_ui: TensorBoard, strategies_logdir: Path, page: Page,
                                                    artifacts: Path) -> None:
    want = engine(strategies_logdir)
    (group,) = want.groups
    assert group.baseline == "naive" and group.clock == "cpu"
    frame = open_strategies(page, strategies_ui, len(group.rows), artifacts)
    section = frame.locator("section.strategy-group")
    expect(section.locator("h3")).to_have_text(group.label)
    expect(section.get_by_label(f"Baseline strategy of {group.label}")).to_have_value("naive")
    expect(section.locator("thead")).to_contain_text("attention CPU")
    expect_cells(frame, group)

    # The run without an accuracy record: "not measured", never 0, in the table and under the scatter.
    math_row = frame.locator('tr[data-run="builtin/sdpa-math/seq256"]')
    expect(math_row.locator("td.err")).to_have_text(NOT_MEASURED)
    expect(math_row.locator("td.loss")).to_have_text(NOT_MEASURED)
    expect(section.get_by_test_id("not-measured")).to_contain_text("sdpa-math (builtin/sdpa-math/seq256)")

    # Time against length: one line of dots and one fit per strategy with a fit, every crossover listed.
    expect_ink(frame, "[data-testid=strategies-time-chart] canvas", [2000], "the time chart")
    names = [s["name"] for s in chart_option(frame, "[data-testid=strategies-time-chart]")["series"]]
    assert sorted(n for n in names if n.startswith("measured ")) == [f"measured {i}" for i in range(len(group.series))]
    assert len([n for n in names if n.startswith("fit ")]) == sum(1 for s in group.series if s.fit)
    # A crossing is marked on the chart unless it lies over 16× outside the measured 64–256.
    # Every series but the baseline's and sdpa-math's (one length: no fit) has a crossover, or says
    # why it has none (noisy steps: none rests on them).
    crossings = [s.crossover for s in group.series if s.crossover]
    noted = [s for s in group.series if not s.crossover and s.crossover_note]
    assert len(crossings) + len(noted) == len(group.series) - 2
    near = [c for c in crossings if c.seq is not None and 64 / 16 <= c.seq <= 256 * 16]
    assert len([n for n in names if n.startswith("cross ")]) == len(near), names
    listed = section.get_by_test_id("crossovers").locator("li")
    expect(listed).to_have_count(len(crossings) + len(noted))
    for c in crossings:
        expect(listed.filter(has_text=c.text)).to_have_count(1)
    # Where the baseline's own steps are noisy, every series says so in the same words.
    for note, times in Counter(x.crossover_note for x in noted).items():
        expect(listed.filter(has_text=note)).to_have_count(times)
    expect(listed.filter(has_text="(off the chart)")).to_have_count(
        sum(1 for c in crossings if c.seq is not None and c not in near))

    # Speed-up against error at the longest length: the runs with both, the front as a step line.
    expect_ink(frame, "[data-testid=strategies-tradeoff-chart] canvas", [2000], "the speed-up chart")
    expect(section.get_by_label(f"Sequence length of the speed-up chart of {group.label}")).to_have_value("256")
    option = chart_option(frame, "[data-testid=strategies-tradeoff-chart]")
    series = {s["name"]: s for s in option["series"]}
    at = [r for r in group.rows if r.seq == 256 and r.accuracy is not None and r.speedup is not None]
    assert len(series["points"]["data"]) == len(at)
    assert len(series["front"]["data"]) == sum(1 for r in at if r.pareto) + 1 >= 2  # on to the right edge
    section.get_by_label(f"Sequence length of the speed-up chart of {group.label}").select_option("64")
    option = chart_option(frame, "[data-testid=strategies-tradeoff-chart]")
    points = next(s for s in option["series"] if s["name"] == "points")
    assert len(points["data"]) == sum(1 for r in group.rows if r.seq == 64 and r.accuracy is not None)
    expect(section.get_by_test_id("not-measured")).to_have_count(0)  # sdpa-math ran at 256 only
    section.get_by_label(f"Sequence length of the speed-up chart of {group.label}").select_option("256")

    # The group's findings, as the run overview shows findings.
    # below-crossover rests only on speed-ups the runs can tell from drift (one run each here: none may be
    # decided), so the tab shows exactly the engine's; tests/analysis/cross_run/test_strategies.py makes one
    # from repeats.
    below = [f for f in group.findings if f.id == "below-crossover"]
    expect(section.locator("[data-finding=below-crossover]")).to_have_count(len(below))
    for f in below:
        expect(section.locator("[data-finding=below-crossover]", has_text=f.title)).to_have_count(1)
    expect(section.locator("[data-finding=accuracy-cost]")).to_have_count(
        sum(1 for f in group.findings if f.id == "accuracy-cost"))
    shot(page, artifacts, "strategies")


def test_changing_the_baseline_changes_the_speed_ups(strategies_ui: TensorBoard, strategies_logdir: Path, page: Page,
                                                     artifacts: Path) -> None:
    (default,) = engine(strategies_logdir).groups
    (group,) = engine(strategies_logdir, baseline="sdpa").groups
    assert group.baseline == "sdpa"
    frame = open_strategies(page, strategies_ui, len(group.rows))
    frame.get_by_label(f"Baseline strategy of {group.label}").select_option("sdpa")
    expect(frame.locator("table.strategies-table thead")).to_contain_text("speed-up vs sdpa")
    expect_cells(frame, group)
    # The new baseline's speed-ups are not the old ones.
    assert any(fmt_ratio(r.speedup) != fmt_ratio(d.speedup) for r, d in zip(group.rows, default.rows, strict=True))
    expect(frame.locator('tr[data-run="builtin/sdpa/seq256"] .badge.baseline')).to_have_count(1)
    expect(frame.locator('tr[data-run="builtin/naive/seq256"] .badge.baseline')).to_have_count(0)
    # The crossovers are now against sdpa.
    crossings = [s.crossover.text for s in group.series if s.crossover]
    for text in crossings:
        expect(frame.get_by_test_id("crossovers")).to_contain_text(text)
    assert all(re.search(r"than sdpa ", t) for t in crossings if "faster than" in t)
    expect_ink(frame, "[data-testid=strategies-time-chart] canvas", [2000], "the time chart against sdpa")
    shot(page, artifacts, "strategies-sdpa-baseline")
    # Back to the runs list, then a run opened from the table and back to the view.
    frame.locator('tr[data-run="builtin/performer/seq128"] td.strategy a').click()
    expect(frame.locator(".run-title")).to_have_text("builtin/performer/seq128")
    frame.get_by_role("button", name="\u2190 Runs").click()
    expect(frame.get_by_test_id("strategies-table")).to_be_visible()
    frame.get_by_role("button", name="\u2190 Runs").click()
    expect(frame.get_by_role("heading", name="Runs")).to_be_visible()


def test_strategies_in_dark(strategies_ui: TensorBoard, strategies_logdir: Path, page: Page, artifacts: Path) -> None:
    page.emulate_media(color_scheme="dark")
    (group,) = engine(strategies_logdir).groups
    frame = open_strategies(page, strategies_ui, len(group.rows))
    expect(frame.locator(".tb-attn")).to_have_class("tb-attn dark")
    expect_ink(frame, "[data-testid=strategies-tradeoff-chart] canvas", [500], "the speed-up chart in dark")
    expect_still(frame)
    shot(page, artifacts, "strategies-dark")
