"""Sparse attention in the tab (``views/sparsity.ts``) in a real browser: the run's mask and its
density in the overview, the layer table's "sparsity saved" column against the engine's figures,
local and global layers of a Gemma-style model, and the expected exponent of sliding-window
series in the Compare view's scaling (the H200 traces of ``tests/gpu_traces/scaling``).
Screenshots go to ``test-artifacts/``."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from pages import engine_summary, fmt_us, open_run, open_tab, shot, stat
from playwright.sync_api import Page, expect

from devtools.tbserver import TensorBoard

GPU = Path(__file__).resolve().parents[1] / "gpu_traces"


@pytest.fixture(scope="module")
def sparse_ui(tmp_path_factory: pytest.TempPathFactory, sparse_logdir: Path) -> Iterator[tuple[TensorBoard, Path]]:
    logdir = tmp_path_factory.mktemp("sparse-ui")
    for run in ("flex-sliding", "naive-sliding", "gemma3-flex"):
        shutil.copytree(sparse_logdir / run, logdir / "sparse" / run)
    shutil.copytree(GPU / "scaling", logdir / "h200")
    with TensorBoard(logdir) as tb:
        yield tb, logdir


def test_mask_density_and_sparsity_saved(sparse_ui: tuple[TensorBoard, Path], page: Page, artifacts: Path) -> None:
    tb, logdir = sparse_ui
    frame = open_tab(page, tb.url)
    flex = engine_summary(logdir, "sparse/flex-sliding")
    m = flex.layers[0].mask
    assert m is not None and not m.dense_work
    open_run(frame, "sparse/flex-sliding")
    mask = stat(frame, "mask")
    expect(mask.locator("b")).to_have_text(f"sliding:64: keeps {m.kept * 100:.1f}% of scores, "
                                            f"{(m.blocks or 0) * 100:.1f}% of 128\u00d7128 blocks")
    saved = sum(x.mask.dense_equiv_us - x.mask.core_us for x in flex.layers if x.mask)
    expect(mask).to_contain_text(f"sparsity saved {fmt_us(saved)} per step")
    cells = frame.locator("table.layers-table td.saved")
    expect(cells).to_have_count(2)
    for layer, cell in zip(flex.layers, cells.all(), strict=True):
        assert layer.mask is not None
        expect(cell).to_have_text(fmt_us(layer.mask.dense_equiv_us - layer.mask.core_us))
    shot(page, artifacts, "sparse-flex")
    frame.get_by_role("button", name="\u2190 Runs").click()
    open_run(frame, "sparse/naive-sliding")
    expect(stat(frame, "mask")).to_contain_text("dense work: every score computed, then masked")
    expect(frame.locator("table.layers-table td.dense-work")).to_have_count(2)
    expect(frame.locator("[data-finding=sparsity-unused]")).to_be_visible()


def test_local_and_global_layers(sparse_ui: tuple[TensorBoard, Path], page: Page, artifacts: Path) -> None:
    tb, _ = sparse_ui
    frame = open_tab(page, tb.url)
    open_run(frame, "sparse/gemma3-flex")
    rows = frame.locator("table.layers-table tbody th.row-head")
    expect(rows.nth(0).locator(".badge.layer-local")).to_have_text("local")
    expect(rows.nth(1).locator(".badge.layer-global")).to_have_text("global")
    expect(stat(frame, "mask").locator("b")).to_contain_text("local layers (L0) sliding:64")
    expect(stat(frame, "mask").locator("b")).to_contain_text("global layers (L1) causal")
    shot(page, artifacts, "sparse-gemma")


def test_scaling_says_what_the_exponent_should_be(sparse_ui: tuple[TensorBoard, Path], page: Page,
                                                  artifacts: Path) -> None:
    tb, _ = sparse_ui
    frame = open_tab(page, tb.url)
    for impl in ("flex", "naive"):
        for seq in (1024, 4096, 8192):
            run = f"h200/builtin/{impl}-sliding256/seq{seq}-bfloat16"
            frame.get_by_role("checkbox", name=f"Pick {run} for comparing").check()
    frame.get_by_test_id("compare-button").click()
    expects = frame.get_by_test_id("expect")
    expect(expects.first).to_be_visible(timeout=30_000)
    texts = expects.all_text_contents()
    assert any("k \u2248 1" in t for t in texts) and any("k \u2248 2" in t for t in texts), texts
    expects.first.scroll_into_view_if_needed()
    page.screenshot(path=str(artifacts / "sparse-scaling.png"))
