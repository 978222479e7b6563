"""A run's overview (``views/run.ts`` and the per-layer table of ``views/layers.ts``) in a real
browser: its stats and table against the analysis engine's own figures for the same trace,
switching runs with no stale data, and a run that cannot be read. Screenshots go to
``test-artifacts/``."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from pages import (
    back_to_runs,
    cell,
    cell_value,
    drill_title,
    engine_summary,
    fmt_flops,
    fmt_share,
    fmt_us,
    open_run,
    open_tab,
    release,
    shot,
    show_tab,
    stat,
)
from playwright.sync_api import Page, expect


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
    expect(stat(frame, "steps profiled").locator("b")).to_have_text(str(ws.step_count))
    expect(stat(frame, "device").locator("b")).to_have_text(ws.device)
    expect(frame.locator(".card .meta-line")).to_contain_text("builtin \u00b7 naive \u00b7 seq 16 \u00b7 batch 2")

    rows = frame.locator("table.layers-table tbody tr")
    expect(rows).to_have_count(len(ws.layers))
    assert [t.split()[0] for t in rows.locator("th").all_inner_texts()] == [f"L{x.layer}" for x in ws.layers]
    for layer in ws.layers:
        expect(rows.nth(layer.layer).locator("td").first).to_have_text(layer.backend)
        expect(cell_value(frame, layer.layer, "block", "CPU time")).to_have_text(fmt_us(layer.cpu_us))
        for phase in layer.phases:
            expect(cell_value(frame, layer.layer, phase.phase, "CPU time")).to_have_text(fmt_us(phase.cpu_us))
        # A time is marked "noisy" exactly when the engine says its steps spread over 20 %.
        for x, group in ((layer, "block"), *((p, p.phase) for p in layer.phases)):
            marks = cell(frame, layer.layer, group, "CPU time").get_by_test_id("noisy")
            expect(marks).to_have_count(int(x.spread["cpu_us"].noisy))
    # FLOPs are exact (not timings): add the FLOPs column and compare every cell.
    frame.get_by_role("button", name="FLOPs", exact=True).click()
    for layer in ws.layers:
        expect(cell(frame, layer.layer, "block", "FLOPs")).to_have_text(fmt_flops(layer.flops))
        for phase in layer.phases:
            expect(cell(frame, layer.layer, phase.phase, "FLOPs")).to_have_text(fmt_flops(phase.flops))
    shot(page, artifacts, "run-naive")


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
    release(frame, held[0])
    expect(frame.locator(".run-title")).to_have_text("demo/sdpa-math")
    expect(frame.locator(".card .backend-chip")).to_have_text("sdpa-math")
    expect(frame.locator(".card .meta-line")).to_contain_text("sdpa-math")


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
