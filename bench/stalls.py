"""Stalls and memory under load with a live writer: ``--clients`` clients on the Attention tab's
routes while a writer adds ``--new-runs`` runs to the logdir, on a real TensorBoard.

The logdir starts with one run per public trace (``shared/traces`` and the production traces
beside it, gzip as stored, about 12 runs of 0.1 to 4 MB); the writer copies those traces into new
run directories at an even pace over the run, as a team's jobs would (listing picks them up and
parses the newest ahead of clicks). Meanwhile:

- the clients (``devtools.loadgen``) GET /runs, /summary, /drilldown, /memory, /timeline and
  /compare, polling 202s as the tab does: p50/p95/p99/max per request;
- a heartbeat GETs TensorBoard's own ``/data/environment`` (no plugin code) every 100 ms: its
  longest answer is the longest pause of the whole process (a held GIL, a garbage collection),
  apart from any lock of ours;
- the server's RSS is sampled every second (``/proc/PID/status``).

``--minified-mb N`` also has the writer add, a third of the way in, one run holding a minified
trace of about N MiB (one line of JSON, not Kineto's layout): such a document is decoded whole,
and the heartbeat shows what that costs the whole process.

Run from the repository root (2 cores: keep ``--duration`` short)::

    python bench/stalls.py [--duration 40] [--clients 20] [--new-runs 98] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from devtools.loadgen import percentile, run_load, tb_attn_requests  # noqa: E402
from devtools.tbserver import TensorBoard  # noqa: E402

SHARED = ROOT.parent / "shared"
SOURCES = ("traces/gpu", "traces/other", "production-traces")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def sources() -> list[Path]:
    found = []
    for where in SOURCES:
        found += sorted(p for p in (SHARED / where).glob("*.json.gz"))
    if not found:
        raise SystemExit(f"no traces under {SHARED}")
    return found


def _trace_name(i: int) -> str:
    return f"host_{i}.{1700000000000 + i}.pt.trace.json.gz"


def write_run(logdir: Path, name: str, source: Path, i: int) -> None:
    target = logdir / name
    target.mkdir(parents=True, exist_ok=True)
    tmp = target / ".part"
    shutil.copyfile(source, tmp)
    tmp.rename(target / _trace_name(i))


def minified_trace(path: Path, mib: int) -> None:
    """A trace of about ``mib`` MiB written as one line of JSON (``json.dump`` with no spaces)."""
    event = ('{"ph":"X","cat":"cpu_op","name":"aten::op%d","pid":1,"tid":%d,"ts":%d,"dur":1.5,'
             '"args":{"External id":%d,"Input Dims":[[4,64,128],[4,128,64]]}}')
    with path.open("w") as f:
        f.write('{"schemaVersion":1,"traceEvents":[')
        i = 0
        while f.tell() < mib << 20:
            f.write(",".join(event % (j % 500, j % 7, j * 3, j) for j in range(i, i + 10000)) + ",")
            i += 10000
        f.write('{"ph":"X","cat":"cpu_op","name":"aten::add","pid":1,"tid":1,"ts":0,"dur":1}]}')


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--clients", type=int, default=20)
    p.add_argument("--duration", type=float, default=40.0, help="seconds of load (default 40)")
    p.add_argument("--new-runs", type=int, default=98, help="runs the writer adds during the load (default 98)")
    p.add_argument("--minified-mb", type=int, default=0, help="also write one minified trace this large (MiB)")
    p.add_argument("--json", dest="json_out", type=Path)
    args = p.parse_args()

    files = sources()
    with tempfile.TemporaryDirectory(prefix="tb-attn-stalls-") as tmp:
        logdir = Path(tmp) / "logdir"
        for i, source in enumerate(files):
            write_run(logdir, f"base/{source.name.split('.')[0]}", source, i)
        minified = Path(tmp) / "minified.pt.trace.json"
        if args.minified_mb:
            minified_trace(minified, args.minified_mb)
        with TensorBoard(logdir, only=["tb_attn"]) as tb:
            assert tb.pid is not None
            pid = tb.pid
            requests = tb_attn_requests(tb.url)
            stop = threading.Event()
            rss: list[tuple[float, float]] = []
            beats: list[tuple[float, float]] = []  # (start s, ms)
            written: list[str] = []
            t0 = time.monotonic()

            def sample() -> None:
                while not stop.is_set():
                    rss.append((time.monotonic() - t0, rss_mib(pid)))
                    stop.wait(1.0)

            def heartbeat() -> None:
                while not stop.is_set():
                    s = time.monotonic()
                    try:
                        with urllib.request.urlopen(tb.url + "data/environment", timeout=120) as r:
                            r.read()
                    except OSError:
                        pass
                    beats.append((s - t0, (time.monotonic() - s) * 1e3))
                    stop.wait(0.1)

            def writer() -> None:
                pace = args.duration * 0.9 / max(args.new_runs, 1)
                for i in range(args.new_runs):
                    if stop.wait(pace):
                        return
                    if args.minified_mb and i == args.new_runs // 3:
                        (logdir / "team" / "minified").mkdir(parents=True)
                        minified.rename(logdir / "team" / "minified" / "host.1700000000000.pt.trace.json")
                        log(f"minified trace written at {time.monotonic() - t0:.1f} s")
                    name = f"team/live-{i:03d}"
                    write_run(logdir, name, files[i % len(files)], 1000 + i)
                    written.append(name)

            helpers = [threading.Thread(target=f, daemon=True) for f in (sample, heartbeat, writer)]
            for h in helpers:
                h.start()
            log(f"{len(files)} runs, {args.clients} clients for {args.duration:.0f} s, writer adding "
                f"{args.new_runs} runs")
            result = run_load(tb.url, requests, clients=args.clients, duration_s=args.duration)
            stop.set()
            for h in helpers:
                h.join(130)
            report = result.report()
    beat_ms = [ms for _, ms in beats]
    longest = max(beats, key=lambda b: b[1]) if beats else (0.0, 0.0)
    out: dict[str, Any] = {
        "clients": args.clients, "minified_mb": args.minified_mb, "duration_s": args.duration,
        "runs_written": len(written),
        "requests": report["requests"], "errors": report["errors"], "error_samples": report["error_samples"],
        "overall": report["overall"]["all"],
        "routes": {r: v["all"] for r, v in report["routes"].items()},
        "heartbeat": {"n": len(beat_ms), "p50_ms": percentile(beat_ms, 50), "p99_ms": percentile(beat_ms, 99),
                      "longest_ms": round(longest[1], 1), "longest_at_s": round(longest[0], 1),
                      "over_1s": sum(ms > 1000 for ms in beat_ms)},
        "rss_mib": {"start": round(rss[0][1]) if rss else None, "max": round(max(r for _, r in rss)) if rss else None,
                    "end": round(rss[-1][1]) if rss else None,
                    "every_5s": [round(r) for t, r in rss[::5]]},
    }
    text = json.dumps(out, indent=1)
    print(text)
    if args.json_out:
        args.json_out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
