"""The runs list (``views/runs.ts``) in a real browser: groups, metadata, figures, status, sorting,
the filter, and runs that appear after TensorBoard's reload. Screenshots go to ``test-artifacts/``."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

from pages import fmt_bytes, fmt_ms, fmt_share, open_run, open_tab, shot, stat
from playwright.sync_api import Frame, Page, expect

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
        # run (without its group), model, impl, seq, dtype, device, the five figures, who, when, status
        assert cells[0] == run.split("/", 1)[1], cells
        assert cells[1] == "builtin" and cells[3] == "16" and cells[4] == "float32" and cells[5] == "cpu", cells
        assert cells[2] == run.split("/")[1].removesuffix("-per-head"), cells
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d", cells[12]), cells
        assert cells[13] in ("unloaded", "loading", "ready"), cells
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


def _summary(frame: Frame, run: str) -> dict[str, Any]:
    """The server's /summary of a run, fetched in the tab's frame (relative URL, as the tab does)."""
    response = frame.evaluate("async (run) => { const r = await fetch('./summary?run=' + encodeURIComponent(run));"
                              " return {status: r.status, body: await r.json()}; }", run)
    assert response["status"] == 200, response
    return response["body"]  # type: ignore[no-any-return]


def _group_rows(frame: Frame, group: str) -> list[str]:
    """The runs of one group, in the order the list shows them."""
    return frame.locator("table.runs tbody tr").evaluate_all(
        "(rs, g) => { let on = false; const out = []; for (const r of rs) {"
        " if (r.classList.contains('group')) on = r.textContent === g;"
        " else if (on && r.classList.contains('run-row')) out.push(r.dataset.run); } return out; }", group)


def test_figures_fill_in_without_opening_runs_and_sort(tensorboard: Any, page: Page, artifacts: Path) -> None:
    frame = open_tab(page, tensorboard.url)
    # The server parses the runs in the background once listed; the tab polls and fills them in.
    for run in DEMO_RUNS:
        cell = frame.get_by_role("button", name=f"Open run {run}", exact=True).locator("td[data-col=attention]")
        expect(cell.locator(".fig-value")).to_be_visible(timeout=60_000)
    urls = frame.evaluate("performance.getEntriesByType('resource').map(e => e.name)")
    assert not any("/summary" in u for u in urls), "the tab opened a run to get its figures"
    shot(page, artifacts, "runs-figures")

    attention: dict[str, float] = {}
    for run in DEMO_RUNS:
        (w,) = _summary(frame, run)["workers"]
        assert w["device"] == "cpu"  # so the figures are on the CPU clock
        attention[run] = w["attention_cpu_us"]
        row = frame.get_by_role("button", name=f"Open run {run}", exact=True)

        def col(key: str) -> str:
            return row.locator(f"td[data-col={key}]").inner_text()  # noqa: B023 -- used at once

        assert row.locator("td[data-col=attention] .fig-value").inner_text() == fmt_ms(w["attention_cpu_us"])
        assert row.locator("td[data-col=attention] .clock").inner_text() == "cpu"
        per_step = [s["attention_cpu_us"] for s in w["per_step"]]
        assert len(per_step) == 2
        assert row.locator("td[data-col=attention] .spread").inner_text() == \
            f"{fmt_ms(min(per_step))}\u2013{fmt_ms(max(per_step))}"
        # "±" exactly when the summary calls attention's steps noisy.
        marks = row.locator("td[data-col=attention] [data-testid=noisy]").count()
        assert marks == int(w["spread"]["attention_cpu_us"]["noisy"])
        assert col("share") == fmt_share(w["attention_share_cpu"])
        assert col("peak") == fmt_bytes(max(layer["peak_bytes"] for layer in w["layers"]))
        assert col("backend") == w["backend"] and col("steps") == str(w["step_count"])
    # A run whose trace cannot be read has no figures, and says why on hover.
    broken = frame.get_by_role("button", name="Open run broken/not-a-trace", exact=True)
    expect(broken.locator("td[data-col=attention]")).to_have_text("\u2014")
    assert "No figures" in (broken.locator("td[data-col=attention]").get_attribute("title") or "")

    header = frame.locator("table.runs th[data-col=attention]")
    expect(header).to_have_attribute("aria-sort", "none")
    expect(frame.locator("table.runs th[data-col=run]")).to_have_attribute("aria-sort", "ascending")
    header.click()  # the slowest first
    expect(frame.locator("table.runs th[data-col=attention]")).to_have_attribute("aria-sort", "descending")
    slowest_first = sorted(DEMO_RUNS, key=lambda r: -attention[r])
    assert _group_rows(frame, "demo") == slowest_first
    shot(page, artifacts, "runs-sorted")
    frame.locator("table.runs th[data-col=attention]").press("Enter")  # the keyboard sorts too
    expect(frame.locator("table.runs th[data-col=attention]")).to_have_attribute("aria-sort", "ascending")
    assert _group_rows(frame, "demo") == slowest_first[::-1]
    expect(frame.locator("table.runs th[data-col=run]")).to_have_attribute("aria-sort", "none")
    # The groups stay (sorting is within each) and so does picking runs to compare.
    assert frame.locator("table.runs tr.group").all_inner_texts()[:1] != []
    for run in slowest_first[:2]:
        frame.get_by_role("checkbox", name=f"Pick {run} for comparing").check()
    expect(frame.get_by_test_id("compare-button")).to_have_text("Compare 2 runs")
    expect(frame.get_by_test_id("compare-button")).to_be_enabled()
    frame.get_by_role("button", name="clear (2)").click()
    # The run overview calls the same figure "peak".
    peak = frame.get_by_role("button", name="Open run demo/naive", exact=True).locator("td[data-col=peak]").inner_text()
    open_run(frame, "demo/naive")
    expect(stat(frame, "peak").locator("b")).to_have_text(peak)


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
    ``tests/server/test_responses.py``) must not look like runs that stopped changing. Here the
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
