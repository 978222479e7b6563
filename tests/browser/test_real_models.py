"""Real models in the tab (corpus traces of ``tests/models``): Llama's phases placed by role in
the layers table, the math-fallback finding with its cause, and Compare saying why SDPA is slower
than eager. Screenshots go to ``test-artifacts/``."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pages import cell, engine_summary, open_run, open_tab, shot
from playwright.sync_api import Page, expect

from devtools.corpus import TRACES
from devtools.tbserver import TensorBoard

RUNS = {"llama/eager-train": "hf-llama-eager-train", "llama/sdpa-train": "hf-llama-sdpa-train"}


@pytest.fixture(scope="module")
def models_logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    logdir = tmp_path_factory.mktemp("models-logdir")
    for run, name in RUNS.items():
        (source,) = [p.parent for p in (TRACES / name).rglob("tb_attn_run.json")]
        shutil.copytree(source, logdir / run)
    return logdir


@pytest.fixture(scope="module")
def models_tensorboard(models_logdir: Path) -> Iterator[TensorBoard]:
    with TensorBoard(models_logdir) as tb:
        yield tb


def test_llama_phases_and_fallback_cause(models_tensorboard: Any, models_logdir: Path, page: Page,
                                         artifacts: Path) -> None:
    frame = open_tab(page, models_tensorboard.url)
    open_run(frame, "llama/eager-train")
    ws = engine_summary(models_logdir, "llama/eager-train")
    rope = next(p for p in ws.layers[0].phases if p.phase == "rope")
    expect(cell(frame, 0, "rope", "CPU time").first).to_be_visible()
    for label in ("RoPE", "KV cache", "KV expand", "scale", "mask"):
        expect(frame.locator("table.layers-table")).to_contain_text(label)
    assert rope.cpu_us > 0
    shot(page, artifacts, "real-llama-layers")
    frame.get_by_role("button", name="\u2190 Runs").click()
    open_run(frame, "llama/sdpa-train")
    finding = frame.locator(".finding", has_text="SDPA ran its math backend").first
    expect(finding).to_contain_text("dropout_p 0.1 (training): the CPU flash kernel takes no dropout")
    shot(page, artifacts, "real-llama-math-fallback")


def test_compare_says_why_sdpa_is_slower(models_tensorboard: Any, page: Page, artifacts: Path) -> None:
    frame = open_tab(page, models_tensorboard.url)
    for run in ("llama/eager-train", "llama/sdpa-train"):  # the first by name is the baseline
        frame.get_by_role("checkbox", name=f"Pick {run} for comparing").check()
    frame.get_by_test_id("compare-button").click()
    why = frame.get_by_test_id("why-slower")
    expect(why).to_contain_text("Why llama/sdpa-train is slower than llama/eager-train")
    expect(why).to_contain_text("math-fallback: dropout")
    expect(why).to_contain_text("measurement noise")
    shot(page, artifacts, "real-llama-compare-why")
