"""Many runs: how fast the Attention tab lists a logdir of 1,000 (and 5,000) small runs, in a real
``tensorboard --logdir`` and headless Chromium, with torch-tb-profiler as the peer.

The logdir: one small real runner run (``--source``, or one profiled here with ``python -m
runner``, about 3 s) copied N times as ``<user>/<model>/<impl>/seq<S>-<i>/``, its trace hard-linked
(copied where links fail) and its ``tb_attn_run.json`` rewritten per run: 10 users, 5 models, 6
implementations, 5 sequence lengths, start times an hour apart, every 97th run still "running".
(The tests build the same shape with ``tests/manyruns.py``; a benchmark does not import tests.)

For each N (``--runs``, default 1000,5000), on TensorBoard serving its static plugins and ours only
(torch-tb-profiler would start parsing every run in its own process, see the peer below):

1. **server**, over HTTP, ``--cold`` fresh servers: *cold* is the first ``/runs`` of a fresh process
   (walk the logdir, read every run's metadata; the OS file cache is warm), *launch to list* the
   time from starting ``tensorboard`` to that answer. Then ``--repeat`` times *refresh*
   (``/runs?refresh=1``: walk again, metadata of unchanged runs not re-read) and *cached*
   (``/runs`` within the scan TTL: the response only).
2. **browser**, ``--repeat`` fresh pages: from the tab's iframe starting to the frame in which the
   runs table is painted (and, of that, the ``/runs`` fetch and the render after its last byte);
   the time for a filter keystroke to the next painted frame (typing "alice", "sdpa",
   "seq512" letter by letter, then clearing); choosing a user and then an implementation in the
   filters; and "Show all" (every matching row built, not just the first page).

**Peer**: torch-tb-profiler 0.4.3 lists a run only once it has parsed it, and parses every run in
a spawned Python process of its own, all at once (a thread per run, no limit): about 85 MB
resident per process before any parsing, so 1,000 runs would ask for about 85 GB. It is measured
on the first ``--peer-runs`` runs (default 25) of the same logdir shape, from launch until its
``/data/plugin/pytorch_profiler/runs`` lists them all and says ``loading: false``, against our
launch to list on the same logdir, in the same invocation; per-run cost and a linear estimate for
N are reported as estimates, never as measurements.

Run from the repository root::

    .venv/bin/python bench/many_runs.py [--runs 1000,5000] [--repeat 5] [--cold 3] [--peer-runs 25] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from devtools.tbserver import TensorBoard  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
TAB_FRAME = "plugin_entry.html?name=tb_attn"
TARGET_S = 2.0
PEER_MAX = 100  # runs: beyond this the peer's process per run risks the machine's memory

# ---- the logdir ------------------------------------------------------------------------------

USERS = ("alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy")
MODELS = ("builtin", "gpt2", "llama", "bert", "mha")
IMPLS = ("naive", "naive-inplace", "sdpa", "sdpa-math", "sdpa-flash", "eager")
SEQS = (128, 256, 512, 1024, 2048)
RUNNING_EVERY = 97


def write_runs(logdir: Path, source: Path, n: int) -> None:
    (trace,) = [f for f in source.iterdir() if ".pt.trace.json" in f.name]
    template = json.loads((source / "tb_attn_run.json").read_text())
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    for i in range(n):
        user, model = USERS[i % len(USERS)], MODELS[(i // 3) % len(MODELS)]
        impl, seq = IMPLS[(i // 7) % len(IMPLS)], SEQS[(i // 11) % len(SEQS)]
        status = "running" if i % RUNNING_EVERY == RUNNING_EVERY - 1 else "ok"
        name = f"{user}/{model}/{impl}/seq{seq}-{i}"
        target = logdir / name
        target.mkdir(parents=True)
        try:
            os.link(trace, target / trace.name)
        except OSError:
            shutil.copy2(trace, target / trace.name)
        started = t0 + timedelta(hours=i)
        meta = {**template, "user": user, "model": model, "impl": impl, "run": name, "status": status,
                "started_at": started.isoformat(timespec="seconds"),
                "finished_at": None if status == "running" else
                (started + timedelta(seconds=30)).isoformat(timespec="seconds"),
                "config": {**template.get("config", {}), "impl": impl, "seq": seq}}
        (target / "tb_attn_run.json").write_text(json.dumps(meta, indent=2))


def profile_source(tmp: Path) -> Path:
    """One small run of the built-in transformer (2 layers, d_model 32, seq 16, 2 active steps)."""
    logdir = tmp / "source"
    subprocess.run([sys.executable, "-m", "runner", "--logdir", str(logdir), "--impl", "naive", "--seq", "16",
                    "--layers", "2", "--heads", "4", "--d-model", "32", "--batch", "2", "--vocab", "64",
                    "--warmup", "1", "--active", "2", "--no-progress"],
                   check=True, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    (meta,) = logdir.rglob("tb_attn_run.json")
    return meta.parent


# ---- servers -----------------------------------------------------------------------------------

def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class Server:
    """TensorBoard (``devtools.tbserver``) with its static plugins and ours ("ours") or
    torch-tb-profiler ("peer"); times its start."""

    def __init__(self, logdir: Path, which: str = "ours") -> None:
        self.launched = time.perf_counter()
        self.tb = TensorBoard(logdir, only=["tb_attn" if which == "ours" else "torch_profiler"])
        self.ready = time.perf_counter()
        self.url = self.tb.url

    def get(self, route: str, timeout_s: float = 300.0) -> tuple[Any, float]:
        """(JSON body, seconds) of one request."""
        t = time.perf_counter()
        with urllib.request.urlopen(self.url + route, timeout=timeout_s) as r:
            body = json.loads(r.read())
        return body, time.perf_counter() - t

    def stop(self) -> None:
        self.tb.stop()


RUNS = "data/plugin/tb_attn/runs"


def server_figures(logdir: Path, n: int, *, cold: int, repeat: int) -> dict[str, Any]:
    out: dict[str, list[float]] = {"cold_s": [], "launch_to_list_s": [], "refresh_s": [], "cached_s": [],
                                   "bytes": []}
    for k in range(cold):
        tb = Server(logdir)
        try:
            body, s = tb.get(RUNS)
            out["launch_to_list_s"].append(time.perf_counter() - tb.launched)
            assert len(body["runs"]) == n, (len(body["runs"]), n)
            out["cold_s"].append(s)
            if k == 0:
                out["bytes"].append(len(json.dumps(body)))
                for _ in range(repeat):
                    out["refresh_s"].append(tb.get(RUNS + "?refresh=1")[1])
                    out["cached_s"].append(tb.get(RUNS)[1])
        finally:
            tb.stop()
        log(f"  N={n} server {k + 1}/{cold}: cold /runs {out['cold_s'][-1]:.3f} s, "
            f"launch to list {out['launch_to_list_s'][-1]:.2f} s")
    return {"samples": out, **{key: med(v) for key, v in out.items() if v}}


# ---- the browser -------------------------------------------------------------------------------

# In the tab's frame: the time (ms since the frame started) of the first frame painted with the
# runs table and its count "N runs".
SHOWN = """(() => {
  if (!location.href.includes('plugin_entry.html?name=tb_attn')) return;
  const check = () => {
    const c = document.querySelector('[data-testid=runs-count]');
    if (c && /^\\d+ runs$/.test(c.textContent) && document.querySelector('table.runs tbody tr.run-row')) {
      requestAnimationFrame(() => { window.__runsShown = performance.now(); });
      return;
    }
    requestAnimationFrame(check);
  };
  requestAnimationFrame(check);
})();"""

# From a change of the text filter (or a select) to the next painted frame.
TYPE = """async (text) => {
  const input = document.querySelector('input.filter');
  const t0 = performance.now();
  input.value = text;
  input.dispatchEvent(new Event('input', {bubbles: true}));
  await new Promise(r => requestAnimationFrame(() => setTimeout(r, 0)));
  return [performance.now() - t0, document.querySelector('[data-testid=runs-count]').textContent,
          document.querySelectorAll('tr.run-row').length];
}"""
CHOOSE = """async ([label, index]) => {
  const sel = document.querySelector(`select[aria-label="${label}"]`);
  const t0 = performance.now();
  sel.value = sel.options[index].value;
  sel.dispatchEvent(new Event('change', {bubbles: true}));
  await new Promise(r => requestAnimationFrame(() => setTimeout(r, 0)));
  return [performance.now() - t0, document.querySelector('[data-testid=runs-count]').textContent,
          document.querySelectorAll('tr.run-row').length];
}"""
SHOW_ALL = """async () => {
  const b = [...document.querySelectorAll('[data-testid=more-runs] button')]
    .find(b => b.textContent.startsWith('Show all'));
  if (!b) return null;
  const t0 = performance.now();
  b.click();
  await new Promise(r => requestAnimationFrame(() => setTimeout(r, 0)));
  return [performance.now() - t0, document.querySelectorAll('tr.run-row').length];
}"""
OPENED = """() => {
  const e = performance.getEntriesByType('resource').filter(e => /\\/runs(\\?|$)/.test(e.name))[0];
  return {shown: window.__runsShown, fetch_start: e.startTime, fetch_end: e.responseEnd,
          rows: document.querySelectorAll('tr.run-row').length};
}"""


def browser_figures(browser: Any, tb: TensorBoard, n: int, *, repeat: int) -> dict[str, Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.add_init_script(SHOWN)
    opened: list[dict[str, float]] = []
    keys: list[float] = []
    facets: list[float] = []
    show_all: list[float] = []
    try:
        for k in range(repeat):
            page = context.new_page()
            page.set_default_timeout(120_000)
            page.goto(tb.url + "#tb_attn")
            frame = None
            while frame is None:
                frame = next((f for f in page.frames if TAB_FRAME in f.url), None)
                if frame is None:
                    page.wait_for_timeout(20)
            frame.wait_for_function("window.__runsShown !== undefined", polling=50)
            o = frame.evaluate(OPENED)
            opened.append({"shown_ms": o["shown"], "fetch_ms": o["fetch_end"] - o["fetch_start"],
                           "render_ms": o["shown"] - o["fetch_end"], "rows": o["rows"]})
            for word in ("alice", "sdpa", "seq512"):
                for i in range(1, len(word) + 1):
                    keys.append(frame.evaluate(TYPE, word[:i])[0])
                keys.append(frame.evaluate(TYPE, "")[0])
            for label in ("Filter by user", "Filter by implementation"):
                ms, count, _ = frame.evaluate(CHOOSE, [label, 1])
                facets.append(ms)
            if k == 0:
                log(f"  user + implementation: {count}")
            for label in ("Filter by user", "Filter by implementation"):
                facets.append(frame.evaluate(CHOOSE, [label, 0])[0])
            got = frame.evaluate(SHOW_ALL)
            if got is not None:
                assert got[1] == n, got
                show_all.append(got[0])
            page.close()
            log(f"  N={n} page {k + 1}/{repeat}: table painted {o['shown']:.0f} ms after the frame started "
                f"(/runs fetch {opened[-1]['fetch_ms']:.0f} ms, render {opened[-1]['render_ms']:.0f} ms, "
                f"{o['rows']} rows)")
    finally:
        context.close()
    return {
        "table_shown_ms": med([o["shown_ms"] for o in opened]),
        "runs_fetch_ms": med([o["fetch_ms"] for o in opened]),
        "render_ms": med([o["render_ms"] for o in opened]),
        "rows_built": opened[0]["rows"],
        "keystroke_ms": med(keys), "keystroke_max_ms": round(max(keys), 1),
        "facet_ms": med(facets), "facet_max_ms": round(max(facets), 1),
        "show_all_ms": med(show_all) if show_all else None,
        "samples": {"opened": opened, "keystroke_ms": keys, "facet_ms": facets, "show_all_ms": show_all},
    }


# ---- the peer ----------------------------------------------------------------------------------

def peer_figures(logdir: Path, n: int, *, timeout_s: float) -> dict[str, Any]:
    ours = Server(logdir)
    try:
        body, _ = ours.get(RUNS)
        ours_s = time.perf_counter() - ours.launched
        ours_ready_s = time.perf_counter() - ours.ready
        assert len(body["runs"]) == n
    finally:
        ours.stop()
    peer = Server(logdir, "peer")
    try:
        listed = 0
        while True:
            body, _ = peer.get("data/plugin/pytorch_profiler/runs")
            listed = len(body["runs"])
            if listed >= n and not body["loading"]:
                break
            if time.perf_counter() - peer.launched > timeout_s:
                break
            time.sleep(0.1)
        peer_s = time.perf_counter() - peer.launched
        peer_ready_s = time.perf_counter() - peer.ready
    finally:
        peer.stop()
    return {"runs": n, "ours_launch_to_list_s": round(ours_s, 3), "ours_ready_to_list_s": round(ours_ready_s, 3),
            "peer_launch_to_list_s": round(peer_s, 3), "peer_ready_to_list_s": round(peer_ready_s, 3),
            "peer_listed": listed, "peer_complete": listed >= n,
            "ratio_peer_over_ours": round(peer_s / ours_s, 1)}


def med(values: list[float]) -> float:
    return round(statistics.median(values), 4 if max(values) < 10 else 1)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--runs", default="1000,5000", help="run counts, comma-separated (default 1000,5000)")
    p.add_argument("--source", type=Path, help="a runner run directory (one trace and tb_attn_run.json)")
    p.add_argument("--repeat", type=int, default=5, help="warm requests and browser pages per N (default 5)")
    p.add_argument("--cold", type=int, default=3, help="fresh servers per N for the cold figure (default 3)")
    p.add_argument("--peer-runs", type=int, default=25, help=f"runs for the torch-tb-profiler peer, at most "
                   f"{PEER_MAX}; 0 skips it (default 25)")
    p.add_argument("--peer-timeout-s", type=float, default=300.0)
    p.add_argument("--no-browser", action="store_true")
    p.add_argument("--chromium", default=CHROMIUM)
    p.add_argument("--json", dest="json_out", type=Path, help="write the results here")
    args = p.parse_args()
    counts = [int(x) for x in args.runs.split(",") if x]
    if args.peer_runs > PEER_MAX:
        p.error(f"--peer-runs above {PEER_MAX}: torch-tb-profiler spawns a process per run, all at once")
    if not args.no_browser and not os.path.exists(args.chromium):
        p.error(f"{args.chromium} is missing (apt-get install chromium)")

    result: dict[str, Any] = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "server": "tensorboard (static plugins + tb_attn) over HTTP on 127.0.0.1", "target_s": TARGET_S, "n": {},
    }
    with tempfile.TemporaryDirectory(prefix="tb-attn-many-runs-") as tmp_name:
        tmp = Path(tmp_name)
        source = args.source or profile_source(tmp)
        trace_bytes = sum(f.stat().st_size for f in source.iterdir() if ".pt.trace.json" in f.name)
        result["trace_bytes"] = trace_bytes
        log(f"source run {source}: {trace_bytes / 1e6:.1f} MB of trace")
        pw_cm = browser = None
        if not args.no_browser:
            from playwright.sync_api import sync_playwright

            pw_cm = sync_playwright()
            pw = pw_cm.__enter__()
            browser = pw.chromium.launch(executable_path=args.chromium, headless=True,
                                         args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        try:
            for n in counts:
                logdir = tmp / f"logdir-{n}"
                t = time.perf_counter()
                write_runs(logdir, source, n)
                log(f"N={n}: logdir written in {time.perf_counter() - t:.1f} s")
                fig: dict[str, Any] = {"server": server_figures(logdir, n, cold=args.cold, repeat=args.repeat)}
                if browser is not None:
                    tb = Server(logdir)
                    try:
                        fig["browser"] = browser_figures(browser, tb, n, repeat=args.repeat)
                    finally:
                        tb.stop()
                result["n"][str(n)] = fig
                shutil.rmtree(logdir)
            if args.peer_runs:
                logdir = tmp / "logdir-peer"
                write_runs(logdir, source, args.peer_runs)
                log(f"peer: torch-tb-profiler and ours on {args.peer_runs} runs")
                peer = peer_figures(logdir, args.peer_runs, timeout_s=args.peer_timeout_s)
                per_run = (peer["peer_ready_to_list_s"]) / args.peer_runs
                peer["peer_s_per_run_estimate"] = round(per_run, 3)
                peer["peer_estimate_s"] = {str(n): round(per_run * n) for n in counts}
                result["peer"] = peer
        finally:
            if browser is not None:
                browser.close()
            if pw_cm is not None:
                pw_cm.__exit__(None, None, None)

    report(result)
    if args.json_out:
        args.json_out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


def report(result: dict[str, Any]) -> None:
    print(f"\ntrace per run {result['trace_bytes'] / 1e6:.1f} MB (hard-linked); {result['server']}")
    print("\n| runs | cold /runs s | launch to list s | refresh s | cached s | JSON MB | target | verdict |")
    print("|---|---|---|---|---|---|---|---|")
    for n, fig in result["n"].items():
        s = fig["server"]
        verdict = "PASS" if s["cold_s"] < TARGET_S else "MISS"
        print(f"| {n} | {s['cold_s']:.3f} | {s['launch_to_list_s']:.2f} | {s['refresh_s']:.3f} | {s['cached_s']:.3f} "
              f"| {s['bytes'] / 1e6:.2f} | < {TARGET_S:.0f} s | {verdict} |")
    if any("browser" in fig for fig in result["n"].values()):
        print("\n| runs | table painted ms | of which /runs fetch ms | render ms | rows built | keystroke ms (max) "
              "| user/impl select ms (max) | show all ms |")
        print("|---|---|---|---|---|---|---|---|")
        for n, fig in result["n"].items():
            b = fig.get("browser")
            if b:
                print(f"| {n} | {b['table_shown_ms']:.0f} | {b['runs_fetch_ms']:.0f} | {b['render_ms']:.0f} "
                      f"| {b['rows_built']} | {b['keystroke_ms']:.1f} ({b['keystroke_max_ms']:.0f}) "
                      f"| {b['facet_ms']:.1f} ({b['facet_max_ms']:.0f}) | {b['show_all_ms'] or 0:.0f} |")
    peer = result.get("peer")
    if peer:
        print(f"\npeer on {peer['runs']} runs, launch to complete list: torch-tb-profiler "
              f"{peer['peer_launch_to_list_s']:.1f} s ({peer['peer_listed']} listed), ours "
              f"{peer['ours_launch_to_list_s']:.2f} s: ratio {peer['ratio_peer_over_ours']}x; "
              f"peer per run about {peer['peer_s_per_run_estimate']} s, so about "
              + ", ".join(f"{v} s for {k}" for k, v in peer["peer_estimate_s"].items()) + " (estimates)")


if __name__ == "__main__":
    sys.exit(main())
