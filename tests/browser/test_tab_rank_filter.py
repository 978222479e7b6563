"""The Ranks view's rank filter in a real TensorBoard and Chromium: a run of many ranks limited to
some of them (./ranks?ranks=0-3), a selection the server refuses, and back to every rank.

The runs are one runner trace copied once per rank (``manyruns.write_ranked_run``): 16 ranks
(the filter), 64 (the hint that a selection loads faster) and 2 (no filter). Screenshots go to
``test-artifacts/`` (``ranks-filter*.png``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from manyruns import write_ranked_run
from pages import back_to_runs, open_tab, reload_tab, shot
from playwright.sync_api import Frame, Locator, Page, expect

from devtools.tbserver import TensorBoard

RUN16 = "job/ranks16"
RUN64 = "job/ranks64"
RUN2 = "job/ranks2"


@pytest.fixture(scope="module")
def filter_url(tmp_path_factory: pytest.TempPathFactory, builtin_logdir: Path) -> Iterator[str]:
    logdir = tmp_path_factory.mktemp("rank-filter-logdir")
    for run, ranks in ((RUN16, 16), (RUN64, 64), (RUN2, 2)):
        write_ranked_run(logdir / run, builtin_logdir / "naive", ranks)
    with TensorBoard(logdir, only=["tb_attn"]) as tb:
        yield tb.url


def _open_ranks(frame: Frame, run: str, ranks: int) -> None:
    frame.get_by_role("button", name=f"Open run {run}", exact=True).click()
    expect(frame.locator(".run-title")).to_have_text(run)
    frame.get_by_role("combobox", name="Worker").select_option(label=f"All ranks ({ranks})")
    expect(frame.get_by_role("tab", name="Ranks", exact=True)).to_have_attribute("aria-selected", "true")


def _rows(frame: Frame) -> Locator:
    return frame.locator("[data-testid=ranks-table] tbody tr")


def _apply(frame: Frame, spec: str, *, enter: bool = False) -> None:
    box = frame.get_by_role("textbox", name="Ranks to show")
    box.fill(spec)
    if enter:
        box.press("Enter")
    else:
        frame.get_by_test_id("rank-filter").get_by_role("button", name="Apply").click()


def test_filter_a_16_rank_run(filter_url: str, page: Page, artifacts: Path) -> None:
    frame = open_tab(page, filter_url)
    _open_ranks(frame, RUN16, 16)
    rows = _rows(frame)
    expect(rows).to_have_count(16)
    bar = frame.get_by_test_id("rank-filter")
    status = frame.get_by_test_id("rank-filter-status")
    box = bar.get_by_role("textbox", name="Ranks to show")
    expect(box).to_have_attribute("placeholder", "0-7,512")
    expect(status).to_have_text("showing all 16 ranks")
    expect(bar.get_by_role("button", name="All ranks")).to_be_disabled()
    expect(frame.get_by_test_id("rank-filter-hint")).to_be_hidden()  # 16 ranks load quickly enough

    # 0-3: four rows, the server asked for those ranks only, and the count says so.
    _apply(frame, "0-3")
    expect(status).to_have_text("showing 4 of 16 ranks (0-3)")
    expect(rows).to_have_count(4)
    # The rank, then a "±" where its steps spread over 20% (a loaded machine's timing).
    expect(rows.locator("th")).to_have_text([re.compile(rf"^{r}±?$") for r in range(4)])
    urls = frame.evaluate("performance.getEntriesByType('resource').map(e => e.name)")
    assert any("/ranks?" in u and "ranks=0-3" in u for u in urls), urls
    expect(frame.locator(".card")).to_contain_text("Ranks 0-3 of the 16 workers below")
    shot(page, artifacts, "ranks-filter")

    # A bad selection: the server's 400 message next to what was typed; the four ranks stay.
    _apply(frame, "0-3,x", enter=True)
    error = frame.get_by_test_id("rank-filter-error")
    expect(error).to_have_text("Invalid argument: bad rank selection 'x': use ranks and ranges such as 0-7,512")
    expect(box).to_have_value("0-3,x")
    expect(rows).to_have_count(4)
    expect(status).to_have_text("showing 4 of 16 ranks (0-3)")
    expect(frame.locator("section.ranks .error")).to_have_count(0)  # no error box instead of the view
    shot(page, artifacts, "ranks-filter-bad")
    bar.screenshot(path=str(artifacts / "ranks-filter-bad-bar.png"))
    # A selection of no trace: the 404's message names the ranks there are.
    _apply(frame, "40-50")
    expect(error).to_have_text("Not found: run 'job/ranks16' has no trace of ranks 40-50 (its ranks are 0-15)")
    expect(rows).to_have_count(4)

    # Typed loosely, shown as the server normalized it; the message goes once a selection is taken.
    _apply(frame, " 5, 3,4 ")
    expect(status).to_have_text("showing 3 of 16 ranks (3-5)")
    expect(box).to_have_value("3-5")
    expect(frame.get_by_test_id("rank-filter-error")).to_have_count(0)
    expect(rows).to_have_count(3)

    # The selection is kept for the run: back to the list, open it again, reload the page.
    back_to_runs(frame)
    frame.get_by_role("button", name=f"Open run {RUN16}", exact=True).click()
    expect(frame.get_by_role("tab", name="Ranks", exact=True)).to_have_attribute("aria-selected", "true")
    expect(status).to_have_text("showing 3 of 16 ranks (3-5)")
    expect(rows).to_have_count(3)
    frame = reload_tab(page)
    expect(frame.locator(".run-title")).to_have_text(RUN16)
    expect(frame.get_by_test_id("rank-filter-status")).to_have_text("showing 3 of 16 ranks (3-5)")
    expect(frame.get_by_role("textbox", name="Ranks to show")).to_have_value("3-5")
    rows = _rows(frame)
    expect(rows).to_have_count(3)

    # "All ranks" clears it: every rank again, and the box is empty.
    frame.get_by_test_id("rank-filter").get_by_role("button", name="All ranks").click()
    expect(frame.get_by_test_id("rank-filter-status")).to_have_text("showing all 16 ranks")
    expect(rows).to_have_count(16)
    expect(frame.get_by_role("textbox", name="Ranks to show")).to_have_value("")
    expect(frame.locator(".card")).to_contain_text("All 16 workers below")
    # An empty box applied is every rank too.
    _apply(frame, "")
    expect(rows).to_have_count(16)


def test_many_ranks_get_a_hint_and_few_no_filter(filter_url: str, page: Page, artifacts: Path) -> None:
    frame = open_tab(page, filter_url)
    _open_ranks(frame, RUN64, 64)
    # Nothing is filtered unasked: every rank is read, and the filter says a selection is faster.
    hint = frame.get_by_test_id("rank-filter-hint")
    expect(hint).to_be_visible()
    expect(hint).to_have_text("A selection such as 0-7 loads faster: only its ranks\u2019 traces are read.")
    expect(frame.get_by_role("textbox", name="Ranks to show")).to_have_value("")
    expect(frame.get_by_test_id("rank-filter-status")).to_have_text(
        re.compile(r"^(reading all 64 ranks’ traces…|showing all 64 ranks)$"))
    frame.get_by_test_id("rank-filter").screenshot(path=str(artifacts / "ranks-filter-hint-bar.png"))
    _apply(frame, "0-7,63")
    expect(frame.get_by_test_id("rank-filter-status")).to_have_text("showing 9 of 64 ranks (0-7,63)")
    expect(_rows(frame)).to_have_count(9)
    expect(hint).to_be_hidden()
    shot(page, artifacts, "ranks-filter-64")
    # The selection belongs to that run: another run opens on all its ranks.
    back_to_runs(frame)
    _open_ranks(frame, RUN16, 16)
    expect(frame.get_by_test_id("rank-filter-status")).to_have_text("showing all 16 ranks")
    expect(frame.get_by_role("textbox", name="Ranks to show")).to_have_value("")
    back_to_runs(frame)
    # Two ranks: no filter.
    _open_ranks(frame, RUN2, 2)
    expect(_rows(frame)).to_have_count(2)
    expect(frame.get_by_test_id("rank-filter")).to_be_hidden()


def test_the_filter_in_dark(filter_url: str, page: Page, artifacts: Path) -> None:
    page.emulate_media(color_scheme="dark")
    frame = open_tab(page, filter_url)
    _open_ranks(frame, RUN16, 16)
    expect(_rows(frame)).to_have_count(16)
    _apply(frame, "0-3,x")
    expect(frame.get_by_test_id("rank-filter-error")).to_contain_text("bad rank selection 'x'")
    expect(frame.locator(".tb-attn")).to_have_class("tb-attn dark")
    shot(page, artifacts, "ranks-filter-dark")
