"""Production traces in the tab (issue 33): the SGLang prefill's serving batches say what the
summary's figures say, and vLLM's piecewise capture shows its blocks whole, in a real browser.
Screenshots go to ``test-artifacts/``."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import SHARED_TRACES
from pages import back_to_runs, engine_summary, open_run, open_tab, shot, traces_tensorboard
from playwright.sync_api import Page, expect

from devtools.tbserver import TensorBoard

PRODUCTION = SHARED_TRACES.parent / "production-traces"
TRACES = {
    "sglang": PRODUCTION / "tracelens_sglang_qwen3-8b_mi300_prefilldecode.json.gz",
    "vllm": PRODUCTION / "tracelens_vllm_mi300_prefilldecode_piecewise_graphs.pt.trace.json.gz",
}


@pytest.fixture(scope="module")
def production_tensorboard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TensorBoard]:
    with traces_tensorboard(tmp_path_factory, TRACES) as tb:
        yield tb


def test_the_serving_box_says_the_batch(production_tensorboard: TensorBoard, page: Page, artifacts: Path) -> None:
    ws = engine_summary(Path(production_tensorboard.logdir), "sglang")
    assert ws.serving is not None
    frame = open_tab(page, production_tensorboard.url)
    open_run(frame, "sglang")
    box = frame.locator("[data-testid=serving]")
    expect(box.locator("li")).to_have_count(len(ws.serving.sentences))
    for i, sentence in enumerate(ws.serving.sentences):
        expect(box.locator("li").nth(i)).to_have_text(sentence)
    expect(box).to_contain_text("15 prefill requests (15360 tokens) and no decode")
    shot(page, artifacts, "serving-sglang")
    back_to_runs(frame)


def test_a_piecewise_capture_shows_whole_blocks(production_tensorboard: TensorBoard, page: Page,
                                                artifacts: Path) -> None:
    """No serving box without annotations; every layer holds its projections, and no layer is marked
    core only."""
    ws = engine_summary(Path(production_tensorboard.logdir), "vllm")
    assert ws.serving is None and ws.layers and not any(x.core_only for x in ws.layers)
    frame = open_tab(page, production_tensorboard.url)
    open_run(frame, "vllm")
    expect(frame.locator("[data-testid=serving]")).to_have_count(0)
    expect(frame.locator("[data-testid=core-only-note]")).to_have_count(0)
    expect(frame.locator("ul.notes")).to_contain_text("kv_cache and sdpa ran outside the captures")
    # Judged by CPU time (its device time is partial), the view opens on it; its device column shows
    # the captured phases' device time as a dash, not 0: qkv_proj, rope and out_proj of 24 layers.
    chips = frame.get_by_role("group", name="Table columns")
    expect(chips.get_by_role("button", name="CPU", exact=True)).to_have_attribute("aria-pressed", "true")
    chips.get_by_role("button", name="device", exact=True).click()
    captured = frame.locator('td[title^="Captured into a CUDA/HIP graph, not run"]')
    expect(captured).to_have_count(3 * len(ws.layers))
    expect(captured.first).to_have_text("\u2014")
    shot(page, artifacts, "vllm-piecewise")
    back_to_runs(frame)


def test_partial_device_time_is_marked_wherever_it_shows(production_tensorboard: TensorBoard, page: Page,
                                                         artifacts: Path) -> None:
    """The vLLM capture ran 0.83 ms of attention's kernels and captured the rest: the runs list shows
    its CPU time, as the headline does, marked partial; so do Compare's device time and the blocks'
    device time; Compare's FLOP/s sets no captured work against the kernels that ran (issue 47)."""
    ws = engine_summary(Path(production_tensorboard.logdir), "vllm")
    assert ws.device_partial
    frame = open_tab(page, production_tensorboard.url)
    row = frame.locator("tr.run-row[data-run=vllm]")
    cell = row.locator("td[data-col=attention]")
    expect(cell.locator(".clock")).to_have_text("cpu")
    expect(cell.locator("[data-testid=partial]")).to_have_text("partial")
    mark = cell.locator("[data-testid=partial]")
    expect(mark).to_have_attribute("title", re.compile("captured into a CUDA/HIP graph"))
    open_run(frame, "vllm")
    expect(frame.get_by_test_id("run-headline")).to_contain_text("Its device time is partial")
    # A block whose phases were captured: its device time is marked.
    frame.get_by_role("group", name="Table columns").get_by_role("button", name="device", exact=True).click()
    expect(frame.locator("table.layers-table [data-testid=partial]")).to_have_count(len(ws.layers))
    back_to_runs(frame)
    for run in ("sglang", "vllm"):
        frame.get_by_role("checkbox", name=f"Pick {run} for comparing").check()
    frame.get_by_test_id("compare-button").click()
    vllm = frame.locator("tr[data-run=vllm]").first
    expect(vllm.locator("[data-testid=partial]")).to_have_count(1)
    expect(vllm).not_to_contain_text("PFLOP/s")
    shot(page, artifacts, "vllm-partial-compare")
