"""Latency of the Attention tab in a real browser: first meaningful paint of a cached run and the
response times of its routes.

Starts ``tensorboard --logdir LOGDIR`` on a free loopback port and Debian's chromium (through
playwright, as the browser tests do), then:

1. **cold**: opens the tab and clicks RUN once. The server reads and analyzes the trace; the
   figure is the time from the click to the per-layer table on screen, then the same for the
   Memory and Timeline views (each needs the analyzed trace).
2. **warm** (``--repeat`` times, a fresh page each): opens the tab, clicks RUN, and times the
   click to the frame in which the per-layer table is on screen ("first meaningful paint"), then
   the Memory and Timeline views from the click on their tab to their canvas. The routes' times
   come from the browser's Resource Timing inside the tab's iframe: ``total`` is the fetch from
   start to the last byte, ``server`` from the request sent to the first byte of the response.

Targets (issue 4), for a cached run: first meaningful paint under 1 s, each route under 100 ms.
They are reported, not enforced.

By default TensorBoard loads every installed plugin, as a user's does; torch-tb-profiler then
parses the same traces in the background, on the same cores. ``--only-tb-attn`` serves TensorBoard's
built-in plugins and ours only, to see the tab on its own.

Run from the repository root::

    python bench/tab_latency.py [--logdir DIR] [--run NAME] [--repeat 5] [--only-tb-attn] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from devtools.tabprobe import OPEN_AND_PAINT, ROUTE_TIMINGS, SHOW_AND_PAINT  # noqa: E402
from devtools.tbserver import TensorBoard  # noqa: E402
from tb_attn_plugin.engine.loader import resolve_runs  # noqa: E402

DEFAULT_LOGDIR = "/tmp/tb-attn-bench-traces/l12-d384-h12-s128-b2-a15/logdir"
CHROMIUM = "/usr/bin/chromium"
TAB_FRAME = "plugin_entry.html?name=tb_attn"
FMP_TARGET_MS = 1000.0
ROUTE_TARGET_MS = 100.0

def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def open_tab(page: Any, url: str) -> tuple[Any, float]:
    """TensorBoard's page on the tab; (the tab's frame, ms from navigation to the runs list)."""
    t0 = time.perf_counter()
    page.goto(url + "#tb_attn")
    frame = None
    while frame is None:
        frame = next((f for f in page.frames if TAB_FRAME in f.url), None)
        if frame is None:
            if time.perf_counter() - t0 > 60:
                raise RuntimeError("the Attention tab's iframe did not appear")
            page.wait_for_timeout(20)
    frame.wait_for_selector("table.runs tr.run-row")
    return frame, (time.perf_counter() - t0) * 1e3


def visit(frame: Any, run: str, *, timeout_ms: float) -> dict[str, float]:
    """Opens the run, then its Memory and Timeline views; ms to each paint (-1: an error shown)."""
    frame.page.set_default_timeout(timeout_ms)
    out = {"first_meaningful_paint_ms": frame.evaluate(OPEN_AND_PAINT, run)}
    if out["first_meaningful_paint_ms"] is None:
        raise RuntimeError(f"no run named {run!r} in the runs list")
    out["memory_view_ms"] = frame.evaluate(SHOW_AND_PAINT, ["Memory", "section.memory"])
    out["timeline_view_ms"] = frame.evaluate(SHOW_AND_PAINT, ["Timeline", "section.timeline"])
    return out


def routes(frame: Any) -> dict[str, dict[str, float]]:
    return {e["route"]: e for e in frame.evaluate(ROUTE_TIMINGS)}


def median(values: list[float]) -> float:
    return round(statistics.median(values), 1)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--logdir", default=DEFAULT_LOGDIR, help=f"(default {DEFAULT_LOGDIR})")
    p.add_argument("--run", help="run name as the tab lists it (default: the logdir's largest run)")
    p.add_argument("--repeat", type=int, default=5, help="warm repetitions, a fresh page each (default 5)")
    p.add_argument("--only-tb-attn", action="store_true", help="serve TensorBoard's static plugins and ours only")
    p.add_argument("--chromium", default=CHROMIUM)
    p.add_argument("--cold-timeout-s", type=float, default=600.0, help="how long the first load may take")
    p.add_argument("--json", dest="json_out", type=Path, help="write the results here")
    args = p.parse_args()

    if not os.path.exists(args.chromium):
        p.error(f"{args.chromium} is missing (apt-get install chromium)")
    runs = resolve_runs(args.logdir)
    if not runs:
        p.error(f"no runs under {args.logdir}")
    run = next((r for r in runs if r.name == args.run), None) if args.run else \
        max(runs, key=lambda r: sum(f.size for f in r.files))
    if run is None:
        p.error(f"no run {args.run!r} under {args.logdir}: {[r.name for r in runs]}")
    trace_bytes = sum(f.size for f in run.files)
    log(f"run {run.name}: {len(run.files)} trace file(s), {trace_bytes / 1e6:.1f} MB")

    from playwright.sync_api import sync_playwright

    tb = TensorBoard(args.logdir, only=["tb_attn"] if args.only_tb_attn else None)
    log(f"tensorboard on {tb.url}, plugins: {', '.join(tb.plugins)}")
    result: dict[str, Any] = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "logdir": args.logdir, "run": run.name, "trace_bytes": trace_bytes, "plugins": tb.plugins,
        "targets": {"first_meaningful_paint_ms": FMP_TARGET_MS, "route_ms": ROUTE_TARGET_MS},
    }
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=args.chromium, headless=True,
                                         args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
            context = browser.new_context(viewport={"width": 1400, "height": 1000})
            page = context.new_page()
            frame, tab_ms = open_tab(page, tb.url)
            t = time.perf_counter()
            cold = visit(frame, run.name, timeout_ms=args.cold_timeout_s * 1e3)
            cold["total_s"] = round(time.perf_counter() - t, 2)
            cold["routes"] = routes(frame)
            cold["tab_load_ms"] = tab_ms
            result["cold"] = cold
            log(f"cold: {json.dumps({k: v for k, v in cold.items() if k != 'routes'})}")
            page.close()

            samples: list[dict[str, Any]] = []
            for i in range(args.repeat):
                page = context.new_page()
                frame, tab_ms = open_tab(page, tb.url)
                warm: dict[str, Any] = visit(frame, run.name, timeout_ms=60_000)
                warm["tab_load_ms"] = tab_ms
                warm["routes"] = routes(frame)
                samples.append(warm)
                log(f"warm {i + 1}/{args.repeat}: fmp {warm['first_meaningful_paint_ms']:.1f} ms, " + ", ".join(
                    f"{k} {v['total_ms']:.1f} ms" for k, v in sorted(warm["routes"].items())))
                page.close()
            browser.close()
    finally:
        tb.close()

    keys = ("tab_load_ms", "first_meaningful_paint_ms", "memory_view_ms", "timeline_view_ms")
    result["warm"] = {
        **{k: median([s[k] for s in samples]) for k in keys},
        "routes": {
            name: {
                "total_ms": median([s["routes"][name]["total_ms"] for s in samples]),
                "server_ms": median([s["routes"][name]["server_ms"] for s in samples]),
                "max_total_ms": round(max(s["routes"][name]["total_ms"] for s in samples), 1),
                "bytes": samples[-1]["routes"][name]["bytes"],
                "encoded_bytes": samples[-1]["routes"][name]["encoded_bytes"],
            }
            for name in sorted(samples[0]["routes"])
        },
        "samples": samples,
    }
    warm = result["warm"]
    result["verdict"] = {
        "first_meaningful_paint": "PASS" if warm["first_meaningful_paint_ms"] < FMP_TARGET_MS else "MISS",
        **{f"route {k}": "PASS" if v["total_ms"] < ROUTE_TARGET_MS else "MISS" for k, v in warm["routes"].items()},
    }

    print(f"\n{run.name}: {trace_bytes / 1e6:.1f} MB of trace; plugins {', '.join(tb.plugins)}")
    print(f"cold (first open, trace read and analyzed): overview {cold['first_meaningful_paint_ms']:.0f} ms, "
          f"memory view {cold['memory_view_ms']:.0f} ms, timeline view {cold['timeline_view_ms']:.0f} ms")
    print(f"\nwarm, median of {args.repeat} (a fresh page each):")
    print("| figure | median ms | target | verdict |\n|---|---|---|---|")
    print(f"| first meaningful paint (click to per-layer table) | {warm['first_meaningful_paint_ms']} "
          f"| < {FMP_TARGET_MS:.0f} | {result['verdict']['first_meaningful_paint']} |")
    for name, r in warm["routes"].items():
        print(f"| /{name} (server {r['server_ms']} ms, max {r['max_total_ms']} ms, {r['bytes']:,} B) "
              f"| {r['total_ms']} | < {ROUTE_TARGET_MS:.0f} | {result['verdict'][f'route {name}']} |")
    print(f"| memory view (tab click to canvas) | {warm['memory_view_ms']} | - | info |")
    print(f"| timeline view (tab click to canvas) | {warm['timeline_view_ms']} | - | info |")
    print(f"| TensorBoard page to runs list | {warm['tab_load_ms']} | - | info |")
    if args.json_out:
        args.json_out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
