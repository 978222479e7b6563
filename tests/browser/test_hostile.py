"""Strings from traces and run metadata are text wherever the tab shows them.

``test_hostile_names_render_as_text`` covers a run name in the runs list and run view, an op
name in the drill-down and the timeline's tooltip, and the user in the metadata (the hostile run
of ``browser_logdir``, conftest.py). The other tests cover the rest: the compare view (its table
and its chart's tooltip, which is HTML), a module name (layers table), a thread name (timeline
tooltip), a category (decoder diagnostics) and every metadata field the tab shows, including a
runner error. Each string is HTML that would set ``window.__xss`` if it ever ran.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pages import back_to_runs, cell, hover_tooltip, open_run, open_tab, shot, show_tab, timeline_point
from playwright.sync_api import Frame, Page, expect
from tracetools import trace_files

from devtools.tbserver import TensorBoard

RUN = '<img src=x onerror="window.__xss=21">'
OP = "<img src=x onerror=window.__xss=22>"
MODULE = "<svg/onload=window.__xss=23>"  # a scope's module part has no spaces
THREAD = "<b onmouseover=window.__xss=24>main</b>"
CATEGORY = "<img src=x onerror=window.__xss=25>"
METADATA = {key: f'<img src=x onerror="window.__xss={n}">{key}'
            for n, key in enumerate(("model", "impl", "dtype", "device", "device_name", "user", "host", "error"), 26)}
SCRIPT_RAN = "typeof window.__xss"
#: A run whose metadata file is 1 MiB, nearly all of it its model string (``_long_metadata_run``).
LONG_RUN = "long-metadata"
LONG_MODEL = "gpt-" + "0123456789abcdef" * 65_000
LONG_ERROR = "RuntimeError: " + "the runner's error goes on " * 40


def _hostile_run(source: Path, target: Path) -> None:
    target.mkdir(parents=True)
    (trace,) = trace_files(source)
    data = json.loads(trace.read_text())
    events = data["traceEvents"]
    main = max({e.get("tid") for e in events if isinstance(e.get("tid"), int)},
               key=lambda t: sum(e.get("tid") == t for e in events))
    for e in events:
        if e.get("name") == "aten::softmax":
            e["name"] = OP
        elif e.get("name") == "tbattn.v1/L0":
            e["name"] = f"tbattn.v1/L0 {MODULE}"
        if e.get("tid") == main:
            e["tid"] = THREAD
    first = next(e for e in events if e.get("ph") == "X")
    events.append({**first, "cat": CATEGORY, "name": "odd", "dur": 0.001, "args": {}})
    assert OP in json.dumps(events) and f"L0 {MODULE}" in json.dumps(events)
    (target / trace.name).write_text(json.dumps(data, indent=1))
    meta = json.loads((source / "tb_attn_run.json").read_text())
    meta.update(METADATA, status="failed")
    (target / "tb_attn_run.json").write_text(json.dumps(meta))


def _long_metadata_run(source: Path, target: Path) -> None:
    shutil.copytree(source, target)
    meta = json.loads((source / "tb_attn_run.json").read_text())
    meta.update(model=LONG_MODEL, user="u" * 300, device_name="d" * 300, status="failed", error=LONG_ERROR)
    body = json.dumps(meta).encode()
    assert 1_040_000 < len(body) <= 1 << 20  # read: the plugin's limit is 1 MiB
    (target / "tb_attn_run.json").write_bytes(body)


@pytest.fixture(scope="module")
def hostile_tensorboard(tmp_path_factory: pytest.TempPathFactory, builtin_logdir: Path) -> Iterator[TensorBoard]:
    logdir = tmp_path_factory.mktemp("hostile-logdir")
    shutil.copytree(builtin_logdir / "naive", logdir / "plain")
    _hostile_run(builtin_logdir / "naive", logdir / RUN)
    _long_metadata_run(builtin_logdir / "naive", logdir / LONG_RUN)
    with TensorBoard(logdir) as tb:
        yield tb


def _assert_nothing_ran(page: Page, frame: Frame) -> None:
    for where in (frame, page):
        assert where.evaluate(SCRIPT_RAN) == "undefined", f"script ran in {where.url}"
    # Hostile text may sit in text nodes and in title attributes; never in a handler, a source
    # or a script.
    injected = frame.evaluate("""() => [...document.querySelectorAll('*')]
        .filter(e => [...e.attributes].some(a => /^on|^src|^href/i.test(a.name) && /__xss/.test(a.value))
                     || (e.tagName === 'SCRIPT' && /__xss/.test(e.textContent)))
        .map(e => e.outerHTML.slice(0, 200))""")
    assert injected == [], injected


def test_hostile_names_render_as_text(tensorboard: Any, hostile: dict[str, str], page: Page,
                                     artifacts: Path) -> None:
    run, op, user = hostile["run"], hostile["op"], hostile["user"]
    frame = open_tab(page, tensorboard.url)
    row = frame.get_by_role("button", name=f"Open run {run}", exact=True)
    expect(row.locator(".run-name")).to_have_text(run)
    expect(row).to_contain_text(user)
    open_run(frame, run)
    expect(frame.locator(".card .meta-line")).to_contain_text(user)
    cell(frame, 0, "softmax", "CPU time").click()
    expect(frame.locator("section.drill td.name", has_text=op).first).to_be_visible()
    shot(page, artifacts, "hostile-drilldown")
    # The timeline's tooltip (HTML, escaped by the tab) over the hostile op.
    show_tab(frame, "Timeline")
    hover_tooltip(frame, timeline_point(frame, op), op)
    shot(page, artifacts, "hostile-timeline")
    for where in (frame, page):
        assert where.evaluate("typeof window.__xss") == "undefined", f"script ran in {where.url}"
    injected = frame.evaluate("""() => [...document.querySelectorAll('img, svg, script')]
        .filter(e => /__xss/.test(e.outerHTML)).map(e => e.outerHTML)""")
    assert injected == [], injected


def test_metadata_module_thread_and_category_render_as_text(hostile_tensorboard: Any, page: Page,
                                                           artifacts: Path) -> None:
    frame = open_tab(page, hostile_tensorboard.url)
    row = frame.get_by_role("button", name=f"Open run {RUN}", exact=True)
    for key in ("model", "impl", "dtype", "device", "user"):
        expect(row).to_contain_text(METADATA[key])
    expect(frame.locator("tr.run-error", has_text=METADATA["error"])).to_be_visible()
    open_run(frame, RUN)
    meta = frame.locator(".card .meta-line")
    for key in ("model", "impl", "device_name", "host"):
        expect(meta).to_contain_text(METADATA[key])
    expect(frame.locator("table.layers-table")).to_contain_text(MODULE)
    diagnostics = frame.locator("details.diagnostics")
    diagnostics.locator("summary").click()
    expect(diagnostics).to_contain_text(CATEGORY)
    shot(page, artifacts, "hostile-metadata")
    show_tab(frame, "Timeline")
    tooltip = hover_tooltip(frame, timeline_point(frame, OP), OP)
    expect(tooltip).to_contain_text(THREAD)
    shot(page, artifacts, "hostile-thread")
    _assert_nothing_ran(page, frame)


def test_a_mebibyte_of_metadata_is_clipped_in_the_runs_list(hostile_tensorboard: Any, page: Page,
                                                            artifacts: Path) -> None:
    frame = open_tab(page, hostile_tensorboard.url)
    # What the tab polls is light: the run's 1 MiB file is a few hundred characters there.
    size = frame.evaluate("async () => (await (await fetch('./runs')).text()).length")
    assert size < 20_000, size
    row = frame.get_by_role("button", name=f"Open run {LONG_RUN}", exact=True)
    model = row.locator("td.clip").first
    # The server's clip: the first 199 characters and its ellipsis; the hover says it is the server's.
    expect(model).to_have_text(LONG_MODEL[:199] + "\u2026")
    title = model.get_attribute("title") or ""
    assert title.startswith(LONG_MODEL[:199] + "\u2026") and "cut short by the server" in title, title[-200:]
    assert f"{len(LONG_MODEL):,} characters" in title, title[-200:]
    # And the column's own: the cell is no wider than the CSS allows, its text cut with an ellipsis.
    width = model.evaluate("td => [td.clientWidth, td.scrollWidth, getComputedStyle(td).textOverflow]")
    assert width[0] <= 200 and width[1] > width[0] and width[2] == "ellipsis", width
    who = row.locator("td.clip", has_text="uuu")
    assert "its user has 300 characters" in (who.get_attribute("title") or "")
    error = frame.locator("tr.run-error", has_text="runner: RuntimeError")
    expect(error).to_contain_text(LONG_ERROR[:499] + "\u2026")
    shot(page, artifacts, "hostile-long-metadata")
    open_run(frame, LONG_RUN)
    meta = frame.locator(".card .meta-line")
    expect(meta).to_contain_text(LONG_MODEL[:199] + "\u2026")
    assert len(meta.inner_text()) < 2_000
    shot(page, artifacts, "hostile-long-metadata-run")


def test_compare_view_renders_run_names_as_text(hostile_tensorboard: Any, page: Page, artifacts: Path) -> None:
    frame = open_tab(page, hostile_tensorboard.url)
    for run in ("plain", RUN):
        frame.get_by_role("checkbox", name=f"Pick {run} for comparing").check()
    frame.get_by_test_id("compare-button").click()
    table = frame.get_by_test_id("compare-table")
    expect(table).to_contain_text(RUN)
    chart = frame.locator("section.compare-phases .chart")
    expect(chart).to_be_visible()
    box = chart.bounding_box()
    assert box is not None
    tooltip = chart.locator("div", has_text=RUN).last
    for x in (0.2, 0.35, 0.5, 0.65, 0.8):  # the axis tooltip lists every run at the phase hovered
        chart.hover(position={"x": box["width"] * x, "y": box["height"] * 0.6})
        if tooltip.is_visible():
            break
    expect(tooltip).to_be_visible()
    shot(page, artifacts, "hostile-compare")
    _assert_nothing_ran(page, frame)


@pytest.fixture(scope="module")
def hostile_logdir_tensorboard(tmp_path_factory: pytest.TempPathFactory,
                               builtin_logdir: Path) -> Iterator[TensorBoard]:
    """A shared logdir as a careless team leaves it: a run whose directory name is not UTF-8, a
    trace whose scope claims ten million heads, and a FIFO named like a trace (never a run)."""
    logdir = tmp_path_factory.mktemp("hostile-files")
    shutil.copytree(builtin_logdir / "naive", logdir / "plain")
    shutil.copytree(builtin_logdir / "naive", os.fsdecode(os.fsencode(logdir) + b"/r\xffun"))
    (trace,) = trace_files(builtin_logdir / "naive")
    data = json.loads(trace.read_text())
    for e in data["traceEvents"]:
        if e.get("name") == "tbattn.v1/L0/softmax":
            e["name"] = "tbattn.v1/L0/H0-10000000/softmax"
    (logdir / "heads").mkdir()
    (logdir / "heads" / trace.name).write_text(json.dumps(data))
    (logdir / "fifo").mkdir()
    os.mkfifo(logdir / "fifo" / trace.name)
    with TensorBoard(logdir) as tb:
        yield tb


def test_undecodable_names_huge_claims_and_fifos_leave_the_tab_working(hostile_logdir_tensorboard: Any, page: Page,
                                                                      artifacts: Path) -> None:
    frame = open_tab(page, hostile_logdir_tensorboard.url)
    for run in ("plain", "r\\xffun", "heads"):
        expect(frame.get_by_role("button", name=f"Open run {run}", exact=True)).to_be_visible()
    expect(frame.get_by_role("button", name="Open run fifo", exact=True)).to_have_count(0)
    open_run(frame, "r\\xffun")
    expect(frame.locator("table.layers-table")).to_be_visible()
    shot(page, artifacts, "hostile-undecodable-name")
    back_to_runs(frame)
    open_run(frame, "heads")
    expect(frame.locator("table.layers-table")).to_be_visible()
    diagnostics = frame.locator("details.diagnostics")
    diagnostics.locator("summary").click()
    expect(diagnostics).to_contain_text("out of range")
    shot(page, artifacts, "hostile-huge-heads")
