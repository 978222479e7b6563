"""Honest statistics in the tab: a run made noisy on purpose (``--jitter-ms``) shows its steps'
spread and "noisy" marks, the overview's headline is the engine's, and Compare takes its ratios
within like-for-like groups against one baseline rule, with one colour per run across its charts.
Screenshots go to ``test-artifacts/``."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import profile_run
from pages import engine_summary, fmt_us, open_run, open_tab, shot
from playwright.sync_api import Frame, Page, expect

from devtools.tbserver import TensorBoard

NOISY = "noisy/naive"


@pytest.fixture(scope="module")
def stats_logdir(tmp_path_factory: pytest.TempPathFactory, builtin_logdir: Path) -> Path:
    """seq16/{naive,sdpa} and a copy of them whose metadata says seq 32 (a second like-for-like
    group), and a run whose attention sleeps 20 ms in every other step."""
    logdir = tmp_path_factory.mktemp("stats-logdir")
    for impl in ("naive", "sdpa"):
        shutil.copytree(builtin_logdir / impl, logdir / "seq16" / impl)
        shutil.copytree(builtin_logdir / impl, logdir / "seq32" / impl)
        meta_path = logdir / "seq32" / impl / "tb_attn_run.json"
        meta = json.loads(meta_path.read_text())
        meta["config"]["seq"] = 32
        meta_path.write_text(json.dumps(meta))
    assert profile_run(logdir, NOISY, impl="naive", jitter_ms=20).status == "ok"
    return logdir


@pytest.fixture(scope="module")
def stats_tensorboard(stats_logdir: Path) -> Iterator[TensorBoard]:
    with TensorBoard(stats_logdir) as tb:
        yield tb


def test_noisy_run_shows_its_spread_and_marks(stats_tensorboard: Any, stats_logdir: Path, page: Page,
                                              artifacts: Path) -> None:
    ws = engine_summary(stats_logdir, NOISY)
    spread = ws.spread["attention_cpu_us"]
    assert spread.noisy  # 2 × 20 ms of sleep in one step of two: far over 20 % of any median
    frame = open_tab(page, stats_tensorboard.url)
    open_run(frame, NOISY)
    expect(frame.get_by_test_id("run-headline")).to_have_text(ws.headline)
    assert "noisy, so profile more steps" in ws.headline
    share = frame.get_by_test_id("share-CPU")
    expect(share.get_by_test_id("range")).to_have_text(f" (steps {fmt_us(spread.lo)}\u2013{fmt_us(spread.hi)})")
    expect(share.get_by_test_id("noisy")).to_have_text("\u00b1 noisy")
    # The layers table marks each block's CPU time, whose steps differ by the 20 ms sleep.
    table = frame.locator("table.layers-table")
    for layer in ws.layers:
        assert layer.spread["cpu_us"].noisy
        row = table.locator("tbody tr", has=frame.locator("th.row-head", has_text=f"L{layer.layer}"))
        block = row.locator("td.cell").first
        expect(block.get_by_test_id("noisy")).to_have_text("\u00b1")
        expect(block).to_have_attribute("title", _contains(f"steps {fmt_us(layer.spread['cpu_us'].lo)}"))
    shot(page, artifacts, "noisy-run")


def test_quiet_figures_carry_no_mark(stats_tensorboard: Any, stats_logdir: Path, page: Page) -> None:
    """A figure is marked only when the engine says it is noisy: the marks in the table are
    exactly the noisy cells of the shown column (whatever this machine's load made noisy)."""
    ws = engine_summary(stats_logdir, "seq16/sdpa")
    frame = open_tab(page, stats_tensorboard.url)
    open_run(frame, "seq16/sdpa")
    expect(frame.get_by_test_id("run-headline")).to_have_text(ws.headline)
    table = frame.locator("table.layers-table")
    expect(table).to_be_visible()
    noisy_cells = sum(s.noisy for layer in ws.layers for x in (layer, *layer.phases)
                      if (s := x.spread.get("cpu_us")) is not None)
    expect(table.get_by_test_id("noisy")).to_have_count(noisy_cells)


def _contains(text: str) -> re.Pattern[str]:
    return re.compile(re.escape(text))


def _compare(frame: Frame, runs: tuple[str, ...]) -> None:
    for run in runs:
        frame.get_by_role("checkbox", name=f"Pick {run} for comparing").check()
    frame.get_by_test_id("compare-button").click()
    expect(frame.get_by_test_id("compare-table")).to_be_visible()


def _row(frame: Frame, run: str) -> Any:
    table = frame.get_by_test_id("compare-table")
    return table.locator("tr", has=frame.get_by_role("link", name=run, exact=True)).first


def test_compare_ratios_within_groups_and_one_baseline_rule(stats_tensorboard: Any, stats_logdir: Path,
                                                            page: Page, artifacts: Path) -> None:
    from tb_attn_plugin.analysis.cross_run.compare import compare
    from tb_attn_plugin.engine.loader import Loader, resolve_runs

    runs = ("seq32/sdpa", "seq16/sdpa", "seq32/naive", "seq16/naive")  # picked in no particular order
    found = {r.name: r for r in resolve_runs(str(stats_logdir))}
    loader = Loader()
    summaries = [loader.summarize_run(found[r]) for r in runs]
    frame = open_tab(page, stats_tensorboard.url)
    _compare(frame, runs)
    # No baseline picked: the first by name, as the CLI does; each group against its naive run.
    default = {f.run: f for f in compare(summaries).runs}
    assert default["seq32/sdpa"].baseline == "seq32/naive"
    expect(_row(frame, "seq16/naive")).to_contain_text("baseline")
    expect(_row(frame, "seq32/naive")).to_contain_text("group baseline")
    ratio = default["seq32/sdpa"].ratio.alloc_bytes
    assert ratio is not None
    expect(_row(frame, "seq32/sdpa")).to_contain_text(f"{ratio:.2f}\u00d7")
    title = _row(frame, "seq32/sdpa").locator(".ratio").first.get_attribute("title")
    assert title is not None and title.startswith("this run / seq32/naive (same model and configuration)")
    shot(page, artifacts, "compare-groups")
    # Picking SDPA at 16 as the baseline makes SDPA the baseline of the 32 group too.
    frame.get_by_role("combobox", name="Baseline run").select_option("seq16/sdpa")
    picked = {f.run: f for f in compare(summaries, baseline="seq16/sdpa").runs}
    ratio = picked["seq32/naive"].ratio.alloc_bytes
    assert picked["seq32/naive"].baseline == "seq32/sdpa" and ratio is not None
    expect(_row(frame, "seq32/naive")).to_contain_text(f"{ratio:.2f}\u00d7")
    expect(_row(frame, "seq32/sdpa")).to_contain_text("group baseline")


def test_one_colour_per_run_and_finding_tooltips(stats_tensorboard: Any, stats_logdir: Path, page: Page) -> None:
    runs = ("seq16/naive", "seq16/sdpa", "seq32/naive", "seq32/sdpa")
    frame = open_tab(page, stats_tensorboard.url)
    _compare(frame, runs)
    legend = frame.locator(".compare-phases .legend")
    expect(legend).to_contain_text("seq32/sdpa")
    colours: dict[str, str] = {}
    for run in runs:
        table_sw = _row(frame, run).locator(".sw").first
        legend_sw = legend.locator(".legend-item", has_text=run).locator(".sw")
        colours[run] = table_sw.evaluate("e => getComputedStyle(e).backgroundColor")
        assert legend_sw.evaluate("e => getComputedStyle(e).backgroundColor") == colours[run]
    assert len(set(colours.values())) == len(runs)  # four runs, four colours
    ws = engine_summary(stats_logdir, "seq16/naive")
    chip = _row(frame, "seq16/naive").locator(".finding-id", has_text="hidden-copy")
    finding = next(f for f in ws.findings if f.id == "hidden-copy")
    assert chip.get_attribute("title").startswith(f"{finding.severity}: {finding.title}")  # type: ignore[union-attr]


def test_two_point_fits_report_no_r2(stats_tensorboard: Any, page: Page, artifacts: Path) -> None:
    """Each implementation at two lengths: a line through two points fits perfectly, so the fit
    says "2 points: no fit quality" and no R² appears anywhere."""
    frame = open_tab(page, stats_tensorboard.url)
    _compare(frame, ("seq16/naive", "seq16/sdpa", "seq32/naive", "seq32/sdpa"))
    scaling = frame.locator(".compare-scaling")
    expect(scaling.locator(".legend").first).to_contain_text("2 points: no fit quality")
    expect(scaling.locator(".legend-item")).to_have_count(4)  # two series, in the time and memory legends
    assert "R\u00b2" not in scaling.inner_text()
    shot(page, artifacts, "compare-two-point-fits")
