"""The runs list (``views/runs.ts``) in a real browser: groups, metadata, status, the filter, and
runs that appear after TensorBoard's reload. Screenshots go to ``test-artifacts/``."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

from pages import open_run, open_tab, shot
from playwright.sync_api import Page, expect

#: The runs ``browser_logdir`` (conftest.py) copies from the runner's builtin runs.
DEMO_RUNS = ("demo/naive", "demo/naive-per-head", "demo/sdpa", "demo/sdpa-math")


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


def test_a_failed_listing_is_shown_above_the_last_runs(tensorboard: Any, page: Page, artifacts: Path) -> None:
    """A storage outage (``listing_error``, tested against a real failing store in
    ``tests/plugin/test_responses.py``) must not look like runs that stopped changing. Here the
    real server's answer is passed on with the field set, as a failing listing sets it."""
    error = "cannot list s3://team/runs: Could not connect to the endpoint URL"

    def failing_listing(route: Any) -> None:
        response = route.fetch()
        body = response.json()
        assert body["listing_error"] is None and body["runs"]
        route.fulfill(response=response, json={**body, "listing_error": error})

    page.route(re.compile(r".*/data/plugin/tb_attn/runs(\?.*)?$"), failing_listing)
    frame = open_tab(page, tensorboard.url)
    warning = frame.get_by_test_id("listing-error")
    expect(warning).to_have_text(f"Cannot list the log directory: {error}; showing the last listing.")
    for run in DEMO_RUNS:  # the last listing stays usable
        expect(frame.get_by_role("button", name=f"Open run {run}", exact=True)).to_be_visible()
    shot(page, artifacts, "runs-listing-error")
