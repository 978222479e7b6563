"""The runs list with 1,000 runs, in a real TensorBoard and Chromium: count, filters, runs in progress,
and figures for the runs parsed ahead (a bounded number of them).

TensorBoard here serves its static plugins and ours only: torch-tb-profiler, if loaded, would
start parsing all 1,000 runs at once, each in a spawned Python process of its own. Speed is
measured by ``bench/many_runs.py``, not asserted here. Screenshots go to ``test-artifacts/``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from manyruns import ManyRun, many_run, write_many_runs
from pages import open_tab as open_runs_tab
from playwright.sync_api import Frame, Page, expect

from devtools.tbserver import TensorBoard

N = 1000
PAGE = 100  # rows the list builds at once (frontend/src/views/runs.ts)
PREFETCH = 50  # trace files the server parses ahead for the list's figures (--tb_attn_prefetch_files)
RUNS = [many_run(i) for i in range(N)]


@pytest.fixture(scope="module")
def many_url(tmp_path_factory: pytest.TempPathFactory, builtin_logdir: Path) -> Iterator[str]:
    """``tensorboard --logdir`` (static plugins and ours) over 1,000 runs; its URL."""
    logdir = tmp_path_factory.mktemp("many-runs-browser")
    write_many_runs(logdir, builtin_logdir / "naive", range(N))
    with TensorBoard(logdir, only=["tb_attn"], args=["--tb_attn_prefetch_files", str(PREFETCH)]) as tb:
        yield tb.url


def open_tab(page: Page, url: str) -> Frame:
    frame = open_runs_tab(page, url)
    expect(frame.get_by_test_id("runs-count")).to_have_text(f"{N} runs")
    return frame


def shown_runs(frame: Frame) -> list[str]:
    return frame.locator("table.runs tr.run-row").evaluate_all("rs => rs.map(r => r.dataset.run)")


def _chunks(name: str) -> list[int | str]:
    return [int(c) if c.isdigit() else c for c in re.findall(r"\d+|\D+", name)]


def _compare(a: list[int | str], b: list[int | str]) -> int:
    """The list's natural order (runs.ts compareChunks): numbers as numbers, before text."""
    for x, y in zip(a, b, strict=False):
        if x == y:
            continue
        if isinstance(x, int) and isinstance(y, int):
            return -1 if x < y else 1
        if isinstance(x, int) or isinstance(y, int):
            return -1 if isinstance(x, int) else 1
        return -1 if x < y else 1
    return len(a) - len(b)


def ordered(runs: list[ManyRun]) -> list[str]:
    """Run names as the list shows them: by group (the path without its last part), then name,
    both in natural order (seq512 before seq1024)."""
    def compare(a: str, b: str) -> int:
        return _compare(_chunks(a.rsplit("/", 1)[0]), _chunks(b.rsplit("/", 1)[0])) or _compare(_chunks(a), _chunks(b))

    return sorted((r.name for r in runs), key=functools.cmp_to_key(compare))


def count_text(runs: list[ManyRun]) -> str:
    return f"{len(runs)} of {N} runs"


def text_match(r: ManyRun, text: str) -> bool:
    return any(text in s.lower() for s in (r.name, r.user, r.model, r.impl))


def test_thousand_runs_filters_and_running_badge(many_url: str, page: Page, artifacts: Path) -> None:
    frame = open_tab(page, many_url)
    rows = frame.locator("table.runs tr.run-row")
    # One page of rows is built; the rest on demand.
    expect(rows).to_have_count(PAGE)
    assert shown_runs(frame) == ordered(RUNS)[:PAGE]
    more = frame.get_by_test_id("more-runs")
    expect(more).to_contain_text(f"Showing the first {PAGE} of {N} matching runs.")
    page.screenshot(path=str(artifacts / "many-runs.png"))
    more.get_by_role("button", name=f"Show all {N}").click()
    expect(rows).to_have_count(N)
    assert shown_runs(frame) == ordered(RUNS)
    expect(frame.get_by_test_id("more-runs")).to_have_count(0)

    # The filters list the values found in the metadata, with their run counts.
    user_select = frame.get_by_role("combobox", name="Filter by user")
    impl_select = frame.get_by_role("combobox", name="Filter by implementation")
    model_select = frame.get_by_role("combobox", name="Filter by model")
    users = sorted({r.user for r in RUNS})
    assert user_select.locator("option").all_inner_texts() == [f"all users ({len(users)})"] + [
        f"{u} ({sum(r.user == u for r in RUNS)})" for u in users]
    assert len(model_select.locator("option").all()) == 1 + len({r.model for r in RUNS})

    # A user, then an implementation: the run in progress among them is in the list.
    running = next(r for r in RUNS if r.status == "running" and r.user == "carol")
    user_select.select_option(running.user)
    want = [r for r in RUNS if r.user == running.user]
    expect(frame.get_by_test_id("runs-count")).to_have_text(count_text(want))
    assert shown_runs(frame) == ordered(want)[:PAGE]
    impl_select.select_option(running.impl)
    want = [r for r in want if r.impl == running.impl]
    assert 1 < len(want) < PAGE
    expect(frame.get_by_test_id("runs-count")).to_have_text(count_text(want))
    assert shown_runs(frame) == ordered(want)
    row = frame.get_by_role("button", name=f"Open run {running.name}", exact=True)
    expect(row.locator(".badge")).to_have_count(1)  # not "running" twice (the tab's and the runner's)
    expect(row.locator(".badge.status-running")).to_have_text("running")
    # One call that finds and scrolls the row: the list is rebuilt as parsed runs' figures come in.
    row.evaluate("e => e.scrollIntoView({block: 'center'})")
    page.screenshot(path=str(artifacts / "many-runs-filtered.png"))
    finished = next(r for r in want if r.status == "ok")
    expect(frame.get_by_role("button", name=f"Open run {finished.name}", exact=True)
           .locator(".badge")).to_have_text("unloaded")

    # The text filter narrows the chosen user and implementation further.
    search = frame.get_by_role("searchbox", name="Filter runs")
    text = f"seq{running.seq}"
    search.fill(text.upper())  # case-insensitive
    want = [r for r in want if text_match(r, text)]
    expect(frame.get_by_test_id("runs-count")).to_have_text(count_text(want))
    assert shown_runs(frame) == ordered(want)

    # Back to all users: the text filter and the implementation still apply.
    user_select.select_option("")
    want = [r for r in RUNS if r.impl == running.impl and text_match(r, text)]
    expect(frame.get_by_test_id("runs-count")).to_have_text(count_text(want))
    impl_select.select_option("")
    search.fill("no-such-run")
    expect(frame.get_by_text("No run matches \u201cno-such-run\u201d.")).to_be_visible()
    search.fill("")
    expect(frame.get_by_test_id("runs-count")).to_have_text(f"{N} runs")
    expect(rows).to_have_count(PAGE)  # a filter change starts again from one page

    # Every run in progress shows as such, and only those.
    running_names = {r.name for r in RUNS if r.status == "running"}
    frame.get_by_test_id("more-runs").get_by_role("button", name=f"Show all {N}").click()
    expect(rows).to_have_count(N)
    badged = frame.locator("tr.run-row:has(.badge.status-running)").evaluate_all("rs => rs.map(r => r.dataset.run)")
    assert set(badged) == running_names


def test_figures_fill_in_for_the_runs_parsed_ahead_only(many_url: str, page: Page, artifacts: Path) -> None:
    frame = open_tab(page, many_url)
    frame.get_by_test_id("more-runs").get_by_role("button", name=f"Show all {N}").click()
    rows = frame.locator("table.runs tr.run-row")
    expect(rows).to_have_count(N)
    # The list polls while the server parses; then no cell says "parsing" any more.
    expect(frame.locator("table.runs td[data-col=attention]", has_text="\u2026")).to_have_count(0, timeout=120_000)
    with_figures = frame.locator("table.runs tr.run-row:has(td[data-col=attention] .fig-value)")
    # Every trace is a hard link of one file, so equally new: the first runs by name are parsed.
    parsed = with_figures.evaluate_all("rs => rs.map(r => r.dataset.run)")
    assert sorted(parsed) == sorted(r.name for r in RUNS)[:PREFETCH]
    rest = frame.locator("table.runs td[data-col=attention]", has_text="\u2014")
    expect(rest).to_have_count(N - PREFETCH)
    assert rest.first.get_attribute("title") == "Not parsed yet: open the run to read it"
    page.screenshot(path=str(artifacts / "many-runs-figures.png"))
