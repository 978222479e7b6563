"""The drill-down (``views/drilldown.ts``) in a real browser, opened from a cell of the per-layer
table: its events, its trace file, and its link to the PyTorch Profiler tab (or the trace's
download without it). Screenshots go to ``test-artifacts/``."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

from pages import cell, drill_title, open_run, open_tab, shot
from playwright.sync_api import Page, expect

from tb_attn_plugin.loader import resolve_runs


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
