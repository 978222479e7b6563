"""Load: 20 concurrent clients against the Attention tab's routes, on loopback, for a bounded time.

Starts a real ``tensorboard --logdir`` (``devtools.tbserver``; TensorBoard's built-in plugins
and ours, or every installed plugin with ``--all-plugins``) over a logdir of about 12 runs, then
runs ``devtools.loadgen``: ``--clients`` threads GET /runs, /summary, /drilldown, /memory,
/timeline and /compare for different runs for ``--duration`` seconds, polling 202 ("loading")
answers as the tab does. It reports requests, errors (any status other than 200 and 202, or a
connection failure) and p50/p95/p99/max latency per route and overall, cold (a route and run's
first request, which may wait for the parse) apart from warm.

The logdir: ``--logdir DIR`` as it is; else ``--runs`` copies of runner runs of different sizes
(``--source DIR``, or runs this script profiles once with ``python -m runner`` into
``--cache``).

``--peer`` then serves the same logdir with torch-tb-profiler alone and puts the same load on
its equivalent routes (/runs, /overview, /operation, /memory, /trace) once it has loaded every
run, for a ratio.

Run from the repository root::

    python bench/load.py [--duration 20] [--clients 20] [--peer] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from devtools.loadgen import profiler_requests, run_load, tb_attn_requests  # noqa: E402
from devtools.tbserver import TensorBoard  # noqa: E402

DEFAULT_CACHE = Path(tempfile.gettempdir()) / "tb-attn-load-runs"
# Runner sweeps that give traces of different sizes (about 1 to 10 MB), about 30 s in all.
SOURCE_SWEEPS = (
    ["--size", "tiny", "--impl", "naive,sdpa,sdpa-math", "--seq", "64,256"],
    ["--size", "small", "--impl", "naive,sdpa", "--seq", "128"],
)
PROFILE_ARGS = ["--wait", "0", "--warmup", "1", "--active", "2", "--batch", "2", "--no-progress"]
# Our route against the peer's route that shows the same thing.
PEER_ROUTES = {"runs": "runs", "summary": "overview", "drilldown": "operation", "memory": "memory",
               "timeline": "trace"}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def source_runs(cache: Path) -> list[Path]:
    """Run directories written by the runner, profiled into ``cache`` on the first use."""
    done = cache / ".complete"
    if not done.exists():
        shutil.rmtree(cache, ignore_errors=True)
        for sweep in SOURCE_SWEEPS:
            log(f"profiling {' '.join(sweep)} into {cache}")
            subprocess.run([sys.executable, "-m", "runner", "--logdir", str(cache), *sweep, *PROFILE_ARGS],
                           check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
        done.touch()
    return sorted({p.parent for p in cache.rglob("*.pt.trace.json*")})


def build_logdir(sources: list[Path], target: Path, n: int) -> None:
    """``n`` runs in ``target``: copies of ``sources`` in turn, each its own run."""
    if not sources:
        raise SystemExit("no runs to copy")
    for i in range(n):
        source = sources[i % len(sources)]
        shutil.copytree(source, target / "load" / f"r{i:02d}-{source.parent.name}-{source.name}")


def run_bytes(logdir: Path) -> list[int]:
    return sorted(sum(f.stat().st_size for f in d.iterdir() if ".pt.trace.json" in f.name)
                  for d in {p.parent for p in logdir.rglob("*.pt.trace.json*")})


def table(report: dict[str, Any], *, title: str) -> str:
    lines = [f"{title}: {report['requests']} requests in {report['wall_s']} s "
             f"({report['requests_per_s']}/s), statuses {report['statuses']}, errors {report['errors']}, "
             f"unfinished {report['unfinished']}, re-parses {report.get('reloads') or 0}",
             "", "| route | warm n | warm p50 | p95 | p99 | max | cold n | cold p50 | p95 | max | 202s |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    overall = {**report["overall"], "loading_202": report["statuses"].get("202", 0)}
    rows = [*report["routes"].items(), ("**all**", overall)]
    for route, r in rows:
        w, c = r["warm"], r["cold_time_to_data"]
        lines.append(f"| {route} | {w['n']} | {w['p50_ms']} | {w['p95_ms']} | {w['p99_ms']} | {w['max_ms']} "
                     f"| {c['n']} | {c['p50_ms']} | {c['p95_ms']} | {c['max_ms']} | {r['loading_202']} |")
    return "\n".join(lines)


def ratios(ours: dict[str, Any], peer: dict[str, Any]) -> str:
    lines = ["| our route / peer route | our warm p50 | peer p50 | peer/ours p50 | our warm p95 | peer p95 "
             "| peer/ours p95 |", "|---|---|---|---|---|---|---|"]
    for mine, theirs in PEER_ROUTES.items():
        a, b = ours["routes"].get(mine, {}).get("warm"), peer["routes"].get(theirs, {}).get("warm")
        if not a or not b or not a["p50_ms"] or not b["p50_ms"]:
            continue
        lines.append(f"| /{mine} / /{theirs} | {a['p50_ms']} | {b['p50_ms']} | {b['p50_ms'] / a['p50_ms']:.1f}x "
                     f"| {a['p95_ms']} | {b['p95_ms']} | {b['p95_ms'] / a['p95_ms']:.1f}x |")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--logdir", type=Path, help="serve this logdir as it is")
    p.add_argument("--source", type=Path, help="copy the runs under this directory (default: profile them)")
    p.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help=f"where profiled runs are kept ({DEFAULT_CACHE})")
    p.add_argument("--runs", type=int, default=12, help="runs in the logdir built from the sources (default 12)")
    p.add_argument("--clients", type=int, default=20)
    p.add_argument("--duration", type=float, default=20.0, help="seconds of load (default 20)")
    p.add_argument("--all-plugins", action="store_true", help="load every installed plugin, as a user's TensorBoard")
    p.add_argument("--peer", action="store_true", help="also load torch-tb-profiler's routes on the same logdir")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", dest="json_out", type=Path, help="write the results here")
    args = p.parse_args()

    with tempfile.TemporaryDirectory(prefix="tb-attn-load-") as tmp:
        if args.logdir is not None:
            logdir = args.logdir
        else:
            logdir = Path(tmp) / "logdir"
            sources = sorted({f.parent for f in args.source.rglob("*.pt.trace.json*")}) if args.source \
                else source_runs(args.cache)
            build_logdir(sources, logdir, args.runs)
        sizes = run_bytes(logdir)
        log(f"logdir {logdir}: {len(sizes)} runs, {sum(sizes) / 1e6:.1f} MB of trace "
            f"({sizes[0] / 1e6:.1f} to {sizes[-1] / 1e6:.1f} MB a run)")
        result: dict[str, Any] = {
            "when": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": {"cpus": os.cpu_count(), "load_average": os.getloadavg(), "python": platform.python_version(),
                        "platform": platform.platform()},
            "runs": len(sizes), "trace_bytes": sizes, "clients": args.clients, "duration_s": args.duration,
        }
        t0 = time.monotonic()
        with TensorBoard(logdir, only=None if args.all_plugins else ["tb_attn"]) as tb:
            log(f"tensorboard on {tb.url} in {time.monotonic() - t0:.1f} s, plugins: {', '.join(tb.plugins)}")
            requests = tb_attn_requests(tb.url)
            ours = run_load(tb.url, requests, clients=args.clients, duration_s=args.duration, seed=args.seed).report()
        result["tb_attn"] = ours
        print(table(ours, title=f"tb_attn, {args.clients} clients, {len(sizes)} runs"))

        if args.peer:
            t0 = time.monotonic()
            with TensorBoard(logdir, only=["torch_profiler"]) as tb:
                requests = profiler_requests(tb.url)
                loaded_s = time.monotonic() - t0
                log(f"torch-tb-profiler loaded {len(requests['overview'])} runs in {loaded_s:.1f} s")
                peer = run_load(tb.url, requests, clients=args.clients, duration_s=args.duration,
                                seed=args.seed).report()
            peer["loaded_s"] = round(loaded_s, 1)
            result["torch_tb_profiler"] = peer
            print()
            print(table(peer, title=f"torch-tb-profiler (loaded every run in {loaded_s:.1f} s first)"))
            print()
            print(ratios(ours, peer))
    if args.json_out:
        args.json_out.write_text(json.dumps(result, indent=2) + "\n")
    return 1 if ours["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
