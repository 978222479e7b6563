"""The tab as TensorBoard serves it, in a real browser: relative URLs under ``--path_prefix``, and
how fast a cached run paints. The performance figures go to ``test-artifacts/perf.json``
(measured, not asserted); screenshots go to ``test-artifacts/``."""

from __future__ import annotations

import json
import statistics
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from pages import back_to_runs, open_run, open_tab, shot, show_tab
from playwright.sync_api import Frame, Page, expect

from devtools.tabprobe import OPEN_AND_PAINT, ROUTE_TIMINGS, SHOW_AND_PAINT


def test_path_prefix(prefixed_tensorboard: Any, page: Page, artifacts: Path) -> None:
    assert prefixed_tensorboard.url.endswith("/tb/")
    frame = open_tab(page, prefixed_tensorboard.url)
    expect(frame.get_by_role("button", name="Open run demo/naive", exact=True)).to_be_visible()
    open_run(frame, "demo/sdpa")
    expect(frame.locator(".card .backend-chip")).to_have_text("cpu-flash")
    urls = frame.evaluate("performance.getEntriesByType('resource').map(e => e.name)")
    data = [u for u in urls if "/runs" in u or "/summary" in u]
    assert data and all(urllib.parse.urlsplit(u).path.startswith("/tb/data/plugin/tb_attn/") for u in data), data
    shot(page, artifacts, "path-prefix")


# ---- performance: measured and reported, not asserted ----------------------------------------
# (bench/tab_latency.py measures the same on a large trace, with the same probes: devtools/tabprobe.py.)


def warm_routes(tb: Any, run: str) -> None:
    """Reads the run once through every route, so that what is measured next is the cached case."""
    base = tb.url + "data/plugin/tb_attn/"
    q = urllib.parse.quote(run, safe="")
    for route in ("summary", "memory", "timeline"):
        with urllib.request.urlopen(f"{base}{route}?run={q}", timeout=60) as r:
            r.read()


def _stats(samples: list[float]) -> dict[str, Any]:
    return {"median": round(statistics.median(samples), 1), "samples": [round(x, 1) for x in samples]}


def measure_tab(frame: Frame, run: str, repeat: int) -> dict[str, Any]:
    """Opens `run` `repeat` times, each time with its memory and timeline views; ms."""
    paints: dict[str, list[float]] = {"first_meaningful_paint_ms": [], "memory_view_ms": [], "timeline_view_ms": []}
    for _ in range(repeat):
        paints["first_meaningful_paint_ms"].append(frame.evaluate(OPEN_AND_PAINT, run))
        paints["memory_view_ms"].append(frame.evaluate(SHOW_AND_PAINT, ["Memory", "section.memory"]))
        paints["timeline_view_ms"].append(frame.evaluate(SHOW_AND_PAINT, ["Timeline", "section.timeline"]))
        show_tab(frame, "Layers \u00d7 phases")
        back_to_runs(frame)
    routes: dict[str, list[dict[str, float]]] = {}
    for e in frame.evaluate(ROUTE_TIMINGS):
        routes.setdefault(e["route"], []).append(e)
    return {
        **{k: _stats(v) for k, v in paints.items()},
        "routes": {
            name: {"total_ms": _stats([e["total_ms"] for e in entries]),
                   "server_ms": _stats([e["server_ms"] for e in entries]),
                   "bytes": entries[-1]["bytes"]}
            for name, entries in sorted(routes.items())
        },
    }


def test_performance_cached_run(tensorboard: Any, page: Page, artifacts: Path) -> None:
    run, repeat = "demo/naive", 3
    warm_routes(tensorboard, run)
    frame = open_tab(page, tensorboard.url)
    result = {"run": run, "repeat": repeat, **measure_tab(frame, run, repeat)}
    (artifacts / "perf.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [f"{k}: median {result[k]['median']}" for k in ("first_meaningful_paint_ms", "memory_view_ms",
                                                            "timeline_view_ms")]
    lines += [f"/{k}: median {r['total_ms']['median']} ms (server {r['server_ms']['median']} ms), {r['bytes']} B"
              for k, r in result["routes"].items()]
    print(f"\nAttention tab, cached run {run}, {repeat} times (not asserted):\n  " + "\n  ".join(lines))
    assert set(result["routes"]) == {"summary", "memory", "timeline"}
    assert all(len(r["total_ms"]["samples"]) == repeat for r in result["routes"].values())
