"""Hostile load: clients that ask for unknown runs, and a gzip bomb, against a real TensorBoard.

Two cases, each on a real ``tensorboard --logdir`` (``devtools.tbserver``, our plugin alone):

- ``unknown-names``: a logdir of ``--dirs`` directories (10,000 by default; 4 of them hold a small
  trace). ``--attackers`` clients (18) GET ``/summary?run=<a random unknown name>`` and
  ``/runs?refresh=1`` in a loop while ``--clients`` legitimate clients (2) GET ``/runs`` and
  ``/summary`` of the real runs, for ``--duration`` seconds. Before issue 23 every unknown name
  re-listed the logdir under the registry lock. Target: the legitimate clients' p95 under 100 ms.
- ``gzip-bomb``: ``--bomb-mb`` (1 MB) of gzip holding about a GiB of whitespace between two
  events (``--bomb-kind whitespace``) or one event's name of about a GiB (``name``), beside a
  normal run, served with ``--tb_attn_cache_mb 64``. After a warm-up summary of the normal run,
  the server's resident memory is read from ``/proc``; then the bomb's summary is asked for while
  a legitimate client keeps asking for the normal run. Reported: the peak resident memory
  (VmHWM) over the warm-up level, against the target of the cache bound plus 100 MiB, what the
  server keeps after the request (VmRSS over the warm-up level), and the legitimate client's
  latencies meanwhile.

``--repo DIR`` serves the plugin from another checkout (for example a worktree of an older
commit, ``git worktree add /tmp/old REV``) for a before/after in one run. Run from the
repository root::

    python bench/hostile.py [--case unknown-names|gzip-bomb|all] [--bomb-kind whitespace|name] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import quote

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from devtools.bombs import BOMBS  # noqa: E402
from devtools.loadgen import Request, percentile, run_load  # noqa: E402
from devtools.tbserver import TensorBoard  # noqa: E402

TRACE = ROOT / "tests" / "traces" / "steps.json"
API = "data/plugin/tb_attn/"


def _server(logdir: Path, repo: str | None, *args: str) -> TensorBoard:
    # PYTHONSAFEPATH: the server runs in this checkout, whose directory would otherwise come first.
    env = {"PYTHONPATH": repo, "PYTHONSAFEPATH": "1"} if repo else None
    return TensorBoard(logdir, only=["tb_attn"], args=args, env=env)


def _memory_kib(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0])
    return out


def _get(url: str, *, timeout_s: float = 600.0) -> tuple[int, float]:
    """Status and seconds to the final answer, polling 202s as the tab does."""
    started = time.perf_counter()
    while True:
        try:
            with urllib.request.urlopen(url, timeout=timeout_s) as response:
                status, body = response.status, response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, time.perf_counter() - started
        if status != 202:
            return status, time.perf_counter() - started
        time.sleep(min(float(json.loads(body).get("retry_after_ms", 300)) / 1e3, 1.0))


def unknown_names(work: Path, args: argparse.Namespace) -> dict[str, Any]:
    logdir = work / "many"
    for k in range(args.dirs):
        (logdir / f"team{k % 100:02d}" / f"exp{k:05d}").mkdir(parents=True)
    real = [f"team{k:02d}/exp{k:05d}" for k in range(4)]
    for name in real:
        shutil.copy(TRACE, logdir / name / "host.1.pt.trace.json")
    with _server(logdir, args.repo) as tb:
        for name in real:  # parsed before the clock starts: the load is about listing, not parsing
            _get(f"{tb.url}{API}summary?run={quote(name)}")
        legit = {"runs": [Request("runs", f"{API}runs")],
                 "summary": [Request("summary", f"{API}summary?run={quote(n)}", n) for n in real]}
        rng = random.Random(0)
        hostile = {"unknown": [Request("unknown", f"{API}summary?run=nope-{rng.randrange(10**9)}")
                               for _ in range(5000)],
                   "refresh": [Request("refresh", f"{API}runs?refresh=1")]}
        results: dict[str, Any] = {}

        def attack() -> None:
            results["attackers"] = run_load(tb.url, hostile, clients=args.attackers, duration_s=args.duration,
                                            seed=1)

        thread = threading.Thread(target=attack, daemon=True)
        thread.start()
        time.sleep(0.5)  # the attackers are at it before the legitimate clients start
        results["legit"] = run_load(tb.url, legit, clients=args.clients, duration_s=args.duration - 1, seed=2)
        thread.join()
    legit_ms = [ms for route, status, ms in results["legit"].responses if status == 200]
    attackers = results["attackers"].report()
    return {
        "case": "unknown-names", "dirs": args.dirs, "attacker_clients": args.attackers, "clients": args.clients,
        "duration_s": args.duration,
        "legit": {"requests": len(legit_ms), "requests_per_s": round(len(legit_ms) / (args.duration - 1), 1),
                  "p50_ms": percentile(legit_ms, 50), "p95_ms": percentile(legit_ms, 95),
                  "max_ms": max(legit_ms) if legit_ms else None, "errors": len(results["legit"].errors)},
        "attackers": {"requests": attackers["requests"], "requests_per_s": attackers["requests_per_s"],
                      "statuses": attackers["statuses"]},
        "target_p95_ms": 100,
    }


def gzip_bomb(work: Path, args: argparse.Namespace) -> dict[str, Any]:
    logdir = work / "bomb"
    (logdir / "normal").mkdir(parents=True)
    (logdir / "bomb").mkdir()
    shutil.copy(TRACE, logdir / "normal" / "host.1.pt.trace.json")
    path = logdir / "bomb" / "host.1.pt.trace.json.gz"
    uncompressed = BOMBS[args.bomb_kind](path, stored_mib=args.bomb_mb)
    cache_mb = 64
    with _server(logdir, args.repo, "--tb_attn_cache_mb", str(cache_mb)) as tb:
        assert tb.pid is not None
        _get(f"{tb.url}{API}summary?run=normal")
        before = _memory_kib(tb.pid)
        legit: list[float] = []
        done = threading.Event()

        def keep_asking() -> None:
            while not done.is_set():
                legit.append(_get(f"{tb.url}{API}summary?run=normal")[1] * 1e3)
                time.sleep(0.02)

        thread = threading.Thread(target=keep_asking, daemon=True)
        thread.start()
        status, seconds = _get(f"{tb.url}{API}summary?run=bomb")
        done.set()
        thread.join()
        after = _memory_kib(tb.pid)
    growth_mib = (after["VmHWM"] - before["VmRSS"]) / 1024
    return {
        "case": "gzip-bomb", "kind": args.bomb_kind, "stored_mib": round(path.stat().st_size / 2**20, 2),
        "uncompressed_mib": round(uncompressed / 2**20), "status": status, "seconds": round(seconds, 2),
        "rss_before_mib": round(before["VmRSS"] / 1024), "peak_after_mib": round(after["VmHWM"] / 1024),
        "peak_growth_mib": round(growth_mib, 1), "target_growth_mib": cache_mb + 100,
        "kept_after_mib": round((after["VmRSS"] - before["VmRSS"]) / 1024, 1),
        "legit_during": {"requests": len(legit), "p50_ms": percentile(legit, 50), "p95_ms": percentile(legit, 95),
                         "max_ms": round(max(legit), 1) if legit else None},
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--case", choices=("unknown-names", "gzip-bomb", "all"), default="all")
    p.add_argument("--dirs", type=int, default=10_000)
    p.add_argument("--attackers", type=int, default=18)
    p.add_argument("--clients", type=int, default=2)
    p.add_argument("--duration", type=float, default=15.0)
    p.add_argument("--bomb-mb", type=float, default=1.0, help="the bomb's stored size in MiB (default 1)")
    p.add_argument("--bomb-kind", choices=sorted(BOMBS), default="whitespace",
                   help="what the bomb holds: whitespace between two events, or one event's name")
    p.add_argument("--repo", help="serve the plugin from this checkout instead (PYTHONPATH)")
    p.add_argument("--json", help="also write the results here")
    args = p.parse_args()
    out = []
    with tempfile.TemporaryDirectory(prefix="tb-attn-hostile-") as tmp:
        for case, fn in (("unknown-names", unknown_names), ("gzip-bomb", gzip_bomb)):
            if args.case in (case, "all"):
                result = fn(Path(tmp), args)
                result["repo"] = args.repo or str(ROOT)
                print(json.dumps(result, indent=2), flush=True)
                out.append(result)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
