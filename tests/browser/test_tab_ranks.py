"""The Ranks view of multi-rank runs in a real TensorBoard and Chromium.

One run is written by the runner under torchrun (two ranks, tensor-parallel heads, rank 1 made a
straggler); two more are edited copies of its traces: the same heads computed by both ranks with
global heads 0-1 missing (replicas, gaps), and a single rank (no Ranks view). The figures the tab
shows are checked against the server's own ./ranks answer. Screenshots go to ``test-artifacts/``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pages import back_to_runs, expect_ink, fmt_us, open_tab, release, shot, show_tab
from playwright.sync_api import Frame, Page, expect

from devtools.tbserver import TensorBoard, free_port

TP_RUN = "builtin/naive-tp/seq16"
GAPS_RUN = "edited/replicas-gaps"
SINGLE_RUN = "edited/single-rank"
HEADS = 4


def _copy_trace(source: Path, target_dir: Path, worker: str, rank: int) -> None:
    """`source` as the trace of `worker`, with distributedInfo.rank set to `rank`."""
    trace = json.loads(source.read_text())
    trace["distributedInfo"]["rank"] = rank
    target_dir.mkdir(parents=True, exist_ok=True)
    (target_dir / f"{worker}.{source.name.split('.', 1)[1]}").write_text(json.dumps(trace))


@pytest.fixture(scope="session")
def ranks_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``tensorboard --logdir`` over the three runs; its URL. TensorBoard loads our plugin only
    (torch-tb-profiler would parse every run in processes of its own) and starts while torchrun
    writes the runs."""
    logdir = tmp_path_factory.mktemp("ranks-logdir")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
           "--master_port", str(free_port()), "-m", "runner", "--logdir", str(logdir), "--impl", "naive",
           "--layers", "2", "--heads", str(HEADS), "--d-model", "32", "--seq", "16", "--no-progress",
           "--wait", "0", "--warmup", "1", "--active", "2",
           "--parallel", "tp", "--slow-rank", "1", "--slow-ms", "20"]
    with tempfile.TemporaryFile(mode="w+") as out:
        torchrun = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, text=True,
                                    env={**os.environ, "OMP_NUM_THREADS": "1"})
        try:
            with TensorBoard(logdir, only=["tb_attn"]) as tb:
                assert torchrun.wait(timeout=240) == 0, _tail(out)
                _edited_runs(logdir)
                _wait_active(tb.url)
                yield tb.url
        finally:
            if torchrun.poll() is None:
                torchrun.kill()
                torchrun.wait()


def _tail(out: Any) -> str:
    out.seek(0)
    return str(out.read()[-3000:])


def _edited_runs(logdir: Path) -> None:
    traces = sorted((logdir / TP_RUN).glob("*.pt.trace.json"))
    assert [t.name.split(".")[0].rsplit("_", 1)[1] for t in traces] == ["rank0", "rank1"], traces
    # Both "ranks" compute rank 1's heads 2-3: replicas, and heads 0-1 are missing.
    for rank in (0, 1):
        _copy_trace(traces[1], logdir / GAPS_RUN, f"host_rank{rank}", rank)
    _copy_trace(traces[0], logdir / SINGLE_RUN, "host_rank0", 0)


def _wait_active(url: str) -> None:
    """Until TensorBoard lists the tab as active (it found no trace while torchrun was writing)."""
    deadline = time.monotonic() + 60
    while True:
        with urllib.request.urlopen(url + "data/plugins_listing", timeout=10) as r:
            if json.loads(r.read()).get("tb_attn", {}).get("enabled"):
                return
        assert time.monotonic() < deadline, "the Attention tab is still inactive"
        time.sleep(0.2)


def server_ranks(url: str, run: str, margin: float | None = None) -> dict[str, Any]:
    """The server's ./ranks answer (202 "loading" is polled, as the tab does)."""
    query = urllib.parse.urlencode({"run": run, **({} if margin is None else {"margin": margin})})
    deadline = time.monotonic() + 60
    while True:
        with urllib.request.urlopen(f"{url}data/plugin/tb_attn/ranks?{query}", timeout=60) as r:
            body: dict[str, Any] = json.loads(r.read())
            if r.status != 202:
                return body
        assert time.monotonic() < deadline, f"/ranks for {run} still loading after 60 s"
        time.sleep(0.2)


def open_ranks(frame: Frame, run: str) -> None:
    """Opens `run` and its Ranks view through the worker selector's "All ranks"."""
    frame.get_by_role("button", name=f"Open run {run}", exact=True).click()
    expect(frame.locator(".run-title")).to_have_text(run)
    worker = frame.get_by_role("combobox", name="Worker")
    worker.select_option(label="All ranks (2)")
    expect(frame.get_by_role("tab", name="Ranks", exact=True)).to_have_attribute("aria-selected", "true")
    expect(frame.get_by_test_id("ranks-table").locator("tbody tr").first).to_be_visible()


def row(frame: Frame, worker: str) -> Any:
    return frame.locator(f'[data-testid=ranks-table] tbody tr[data-worker="{worker}"]')


def test_ranks_view_of_a_tensor_parallel_run(ranks_url: str, page: Page, artifacts: Path) -> None:
    expected = server_ranks(ranks_url, TP_RUN)
    ranks = expected["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1] and expected["heads_sharded"] and expected["heads_complete"]
    slow = next(r for r in ranks if r["rank"] == 1)
    assert slow["straggler"] and any(s["rank"] == 1 and s["metric"] == "attention" for s in expected["stragglers"])

    frame = open_tab(page, ranks_url)
    # The runs list marks a multi-rank run, with the runner's parallelism.
    expect(frame.locator(f'tr.run-row[data-run="{TP_RUN}"] .badge.ranks')).to_have_text("2 ranks \u00b7 tp")
    open_ranks(frame, TP_RUN)
    expect(frame.get_by_test_id("ranks-clock")).to_have_text(expected["clock"])
    # Both ranks, with the server's figures per layer; the straggler's row carries the badge.
    body_rows = frame.locator("[data-testid=ranks-table] tbody tr")
    expect(body_rows).to_have_count(2)
    for r in ranks:
        tr = row(frame, r["worker"])
        # The rank, its straggler badge, and a "±" when its steps spread over 20 % (the server's
        # call: whatever this machine's load made of them).
        noisy = "\u00b1" if r["attention_spread"] and r["attention_spread"]["noisy"] else ""
        expect(tr.locator("th")).to_have_text(f"{r['rank']}{'straggler' if r['straggler'] else ''}{noisy}")
        expect(tr.locator("td[data-col=worker]")).to_have_text(r["worker"])
        for col, key in (("attention_best", "attention_best_us"), ("step", "step_us"), ("attention", "attention_us"),
                         ("collectives", "collective_us"), ("other", "other_us")):
            expect(tr.locator(f"td[data-col={col}]")).to_have_text(fmt_us(r[key]))
        for layer in r["layers"]:
            expect(tr.locator(f"td[data-col=L{layer['layer']}]")).to_have_text(fmt_us(layer["time_us"]))
        expect(tr.locator("td[data-col=heads]")).to_have_text("0-1" if r["rank"] == 0 else "2-3")
    expect(row(frame, slow["worker"])).to_have_class(re.compile(r"\bstraggler-row\b"))
    expect(row(frame, ranks[0]["worker"])).not_to_have_class(re.compile(r"\bstraggler-row\b"))
    # The "All ranks" rows: the server's mean, median and max per layer, with the slowest rank.
    foot = frame.locator("[data-testid=ranks-table] tfoot")
    for agg in expected["all_ranks"]:
        col = f"td[data-col=L{agg['layer']}]"
        expect(foot.locator(f"tr[data-agg=mean] {col}")).to_have_text(fmt_us(agg["mean_us"]))
        expect(foot.locator(f"tr[data-agg=median] {col}")).to_have_text(fmt_us(agg["median_us"]))
        expect(foot.locator(f"tr[data-agg=max] {col}")).to_have_text(f"{fmt_us(agg['max_us'])} r{agg['max_rank']}")
    for c in expected["columns"]:
        col = f"td[data-col={c['column']}]"
        expect(foot.locator(f"tr[data-agg=mean] {col}")).to_have_text(fmt_us(c["mean_us"]))
        expect(foot.locator(f"tr[data-agg=median] {col}")).to_have_text(fmt_us(c["median_us"]))
        expect(foot.locator(f"tr[data-agg=max] {col}")).to_have_text(f"{fmt_us(c['max_us'])} r{c['max_rank']}")
    expect(foot.locator("tr[data-agg=mean] td[data-col=heads]")).to_have_text(f"0-{HEADS - 1}")

    # One metric and one median: the banner, the table and its "median" row say the same.
    metric = expected["metric_label"]
    (best,) = [c for c in expected["columns"] if c["column"] == expected["metric"] == "attention_best"]
    median = fmt_us(best["median_us"])
    assert metric.startswith("attention time in each rank's fastest step") and "CPU clock" in metric
    callout = frame.get_by_test_id("stragglers")
    expect(callout.get_by_test_id("ranks-metric")).to_contain_text(
        f"judged on {metric}; median {median} ({expected['median_label']})")
    table = frame.get_by_test_id("ranks-table")
    expect(table.get_by_test_id("ranks-table-metric")).to_have_attribute("title", metric)
    expect(table.locator("thead th[data-col=attention_best]")).to_have_class(re.compile(r"\bjudged\b"))
    expect(foot.locator("tr[data-agg=median] td[data-col=attention_best]")).to_have_text(median)
    expect(frame.get_by_test_id("ranks-table-hint")).to_contain_text(
        f"Straggler metric: {metric}. The other columns: {expected['means_label']}. "
        f"\"median\": {expected['median_label']}.")
    # Exactly one median of the straggler metric appears in the view: the banner's is the table's.
    assert callout.inner_text().count(" vs median ") == len(expected["stragglers"])
    for s in expected["stragglers"]:
        column = best if s["metric"] == "attention" else next(
            a for a in expected["all_ranks"] if f"layer {a['layer']}" == s["metric"])
        assert s["median_us"] == column["median_us"], (s, column)

    # The straggler callout names rank 1, its metrics against the median, and the margin.
    expect(callout).to_contain_text("Straggler: rank 1")
    expect(callout).to_contain_text("20% margin")
    attention = next(s for s in expected["stragglers"] if s["metric"] == "attention")
    item = callout.locator('li[data-metric="attention"]')
    expect(item).to_contain_text(f"attention in the fastest step: {fmt_us(attention['value_us'])} vs median {median}")
    expect(item).to_contain_text(f"{attention['ratio']:.2f}\u00d7")

    # Sorting by a layer's time, slowest first, puts rank 1 on top; the rank column restores the order.
    frame.locator("[data-testid=ranks-table] th[data-col=L0]").click()
    expect(frame.locator("[data-testid=ranks-table] th[data-col=L0]")).to_have_attribute("aria-sort", "descending")
    first_l0 = max(ranks, key=lambda r: r["layers"][0]["time_us"])
    expect(body_rows.first).to_have_attribute("data-worker", first_l0["worker"])

    # Attention / collectives / other per rank, and the collectives by name.
    expect_ink(frame, "[data-testid=ranks-chart] canvas", [3000], "the per-rank bars")
    collectives = frame.get_by_test_id("collectives")
    for r in ranks:
        for c in r["collectives"]:
            line = collectives.locator(f'tr[data-worker="{r["worker"]}"][data-collective="{c["name"]}"]')
            expect(line.locator("td").nth(1)).to_have_text(c["name"])
            expect(line.locator("td").nth(3)).to_have_text(fmt_us(c["cpu_us"]))
    assert any(c["name"] == "all_reduce" for r in ranks for c in r["collectives"])

    # The global head map: every head 0..H-1 of both layers, sharded over the two ranks.
    heads = frame.get_by_test_id("global-heads")
    expect(heads.get_by_test_id("global-heads-metric")).to_have_text(f"shown: {expected['heads_label']}")
    expect(heads.get_by_test_id("derived-note")).to_contain_text(
        "an even share of its rank's forward time in the layer")
    expect(heads).to_contain_text("sharded across 2 ranks (tensor parallel)")
    expect(heads.get_by_test_id("heads-by-rank")).to_have_text(
        f"Global heads 0-{HEADS - 1}: rank 0 \u2192 0-1 \u00b7 rank 1 \u2192 2-3")
    expect(heads.get_by_test_id("heads-gaps")).to_have_count(0)
    cells = sorted({(h["layer"], h["head"]) for h in expected["heads"]})
    assert cells == [(k, i) for k in (0, 1) for i in range(HEADS)], cells
    expect_ink(frame, "[data-testid=global-heads-chart] canvas", [3000], "the global head map")
    # Hover head 3 of layer 1 (the grid of views/heads.ts heatmapOption, two-line column labels).
    chart = frame.get_by_test_id("global-heads-chart")
    box = chart.bounding_box()
    assert box is not None
    plot_w, plot_h = box["width"] - 80, box["height"] - 10 - 84
    chart.hover(position={"x": 60 + plot_w * 3.5 / HEADS, "y": 10 + plot_h * 0.75})
    tip = chart.locator("div", has_text="global head 3").last
    expect(tip).to_contain_text("Layer 1, global head 3")
    expect(tip).to_contain_text("computed by rank 1 \u00b7 1 replica")
    expect(tip).to_contain_text("forward CPU time per step")
    shot(page, artifacts, "ranks")

    # A wider margin is asked of the server and shown as it answers, then back.
    margin = frame.get_by_role("combobox", name="Straggler margin")
    margin.select_option(label="100%")
    wide = server_ranks(ranks_url, TP_RUN, 1.0)
    if wide["stragglers"]:  # rank 1 is 20 ms per block slower: usually far above 2x the other
        expect(callout).to_contain_text("than the median over ranks by more than the 100% margin")
        expect(frame.locator("[data-testid=ranks-table] tr.straggler-row")).to_have_count(1)
    else:
        expect(callout).to_contain_text("No straggler at a 100% margin")
        expect(frame.locator("[data-testid=ranks-table] tr.straggler-row")).to_have_count(0)
    urls = frame.evaluate("performance.getEntriesByType('resource').map(e => e.name)")
    assert any("/ranks?" in u and "margin=1" in u for u in urls), urls
    margin.select_option(label="20%")
    expect(callout).to_contain_text("Straggler: rank 1")
    expect(callout).to_contain_text("20% margin")
    expect(row(frame, slow["worker"])).to_have_class(re.compile(r"\bstraggler-row\b"))

    # A worker's name opens that worker's own overview.
    row(frame, slow["worker"]).get_by_role("button", name=slow["worker"]).click()
    expect(frame.get_by_role("tab", name="Layers \u00d7 phases", exact=True)).to_have_attribute("aria-selected", "true")
    expect(frame.get_by_role("combobox", name="Worker")).to_have_value(slow["worker"])


def test_replicas_gaps_single_rank_errors_and_stale_answers(ranks_url: str, page: Page, artifacts: Path) -> None:
    expected = server_ranks(ranks_url, GAPS_RUN)
    assert not expected["heads_sharded"] and not expected["heads_complete"] and not expected["stragglers"]
    frame = open_tab(page, ranks_url)
    open_ranks(frame, GAPS_RUN)
    heads = frame.get_by_test_id("global-heads")
    expect(heads).to_contain_text("Every rank computes every head (replicas): the mean over them is shown.")
    expect(heads.get_by_test_id("heads-gaps")).to_contain_text("missing L0: 0-1; L1: 0-1")
    expect(heads.get_by_test_id("heads-by-rank")).to_have_text("Global heads 2-3: rank 0 + rank 1 \u2192 2-3")
    expect(frame.get_by_test_id("stragglers")).to_contain_text("No straggler at a 20% margin")
    # The all-clear names the metric and its median too, the table's "median" row.
    (best,) = [c for c in expected["columns"] if c["column"] == "attention_best"]
    expect(frame.get_by_test_id("ranks-metric")).to_contain_text(
        f"judged on {expected['metric_label']}; median {fmt_us(best['median_us'])}")
    median_cell = "[data-testid=ranks-table] tfoot tr[data-agg=median] td[data-col=attention_best]"
    expect(frame.locator(median_cell)).to_have_text(fmt_us(best["median_us"]))
    shot(page, artifacts, "ranks-replicas")
    back_to_runs(frame)

    # One rank: no Ranks tab and no "All ranks" choice, even though the Ranks view was open last.
    expect(frame.locator(f'tr.run-row[data-run="{SINGLE_RUN}"] .badge.ranks')).to_have_count(0)
    frame.get_by_role("button", name=f"Open run {SINGLE_RUN}", exact=True).click()
    expect(frame.get_by_role("tab", name="Layers \u00d7 phases", exact=True)).to_have_attribute("aria-selected", "true")
    expect(frame.get_by_role("tab", name="Ranks", exact=True)).to_have_count(0)
    expect(frame.get_by_role("combobox", name="Worker").locator("option")).to_have_text(["host_rank0"])
    back_to_runs(frame)

    # The server's error is shown.
    frame.page.route(re.compile(r"/ranks\?run=edited%2Freplicas-gaps"),
                     lambda route: route.fulfill(status=500, content_type="application/json",
                                                 body='{"error": "cannot read host_rank1: boom"}'))
    frame.get_by_role("button", name=f"Open run {GAPS_RUN}", exact=True).click()
    show_tab(frame, "Ranks")
    expect(frame.locator("section.ranks [role=alert]")).to_have_text(
        "Could not load the ranks: cannot read host_rank1: boom")
    frame.page.unroute(re.compile(r"/ranks\?run=edited%2Freplicas-gaps"))
    back_to_runs(frame)

    # A late answer for the run the user left does not replace the run now shown.
    held: list[Any] = []
    frame.page.route(re.compile(r"/ranks\?run=builtin%2Fnaive-tp"), lambda route: held.append(route))
    frame.get_by_role("button", name=f"Open run {TP_RUN}", exact=True).click()  # opens on the Ranks view
    deadline = time.monotonic() + 10
    while not held:
        assert time.monotonic() < deadline, "the ranks request for the TP run was never sent"
        frame.page.wait_for_timeout(20)
    back_to_runs(frame)
    frame.get_by_role("button", name=f"Open run {GAPS_RUN}", exact=True).click()
    expect(frame.get_by_test_id("global-heads")).to_contain_text("replicas")
    release(frame, held[0])
    expect(frame.locator(".run-title")).to_have_text(GAPS_RUN)
    expect(frame.locator("[data-testid=ranks-table] tbody tr")).to_have_count(2)
    expect(frame.locator("[data-testid=ranks-table] tbody tr").first).to_have_attribute("data-worker", "host_rank0")
    expect(frame.get_by_test_id("global-heads")).to_contain_text("replicas")
