"""A many-rank run in the tab, with and without a precomputed summary cache.

The logdir: one run of N ranks (``--ranks``, default 1000), each rank a copy of one small runner
trace (the built-in model, 2 layers, seq 64, naive; written here once with ``python -m runner``)
named ``host_rank<r>.<span>.pt.trace.json`` with ``"distributedInfo": {"rank": r}`` put first in
its JSON object. Then:

1. **precompute**: ``tb-attn summarize LOGDIR --cache-dir CACHE --format json --no-progress``
   (``--jobs 2``: this machine's cores), a fresh process, timed from spawn to exit;
2. **tab**: a real ``tensorboard --logdir LOGDIR`` (our plugin only), fresh for each round,
   started with ``--tb_attn_cache_dir CACHE`` or without; the time from the first request of
   ``/data/plugin/tb_attn/ranks?run=.`` (what the Ranks view asks for when the run opens) to its
   final answer, polling the 202s as the tab does, and how many ranks it answered. (That the tab
   parses nothing with the cache is a test: ``tests/remote/test_remote_many.py``.)

Run from the repository root::

    .venv/bin/python bench/tab_cache.py [--ranks 1000] [--rounds 3] [--work DIR]
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
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from devtools.tbserver import TensorBoard  # noqa: E402

PY = sys.executable
RANKS_ROUTE = "data/plugin/tb_attn/ranks?run=."


def _source(work: Path) -> Path:
    """One small runner trace (cached under ``work``)."""
    done = work / "source"
    traces = list(done.rglob("*.pt.trace.json")) if done.exists() else []
    if traces:
        return traces[0]
    shutil.rmtree(done, ignore_errors=True)
    subprocess.run([PY, "-m", "runner", "--model", "builtin", "--layers", "2", "--seq", "64", "--impl", "naive",
                    "--logdir", str(done), "--no-progress"], check=True, cwd=ROOT, capture_output=True)
    return next(done.rglob("*.pt.trace.json"))


def _ranked(work: Path, source: Path, ranks: int) -> Path:
    """The N-rank logdir (one run, ``.``), written once."""
    logdir = work / f"ranks{ranks}"
    if len(list(logdir.glob("*.pt.trace.json"))) == ranks:
        return logdir
    shutil.rmtree(logdir, ignore_errors=True)
    logdir.mkdir(parents=True)
    raw = source.read_bytes()
    start = raw.index(b"{") + 1
    for r in range(ranks):
        info = json.dumps({"rank": r, "world_size": ranks}).encode()
        (logdir / f"host_rank{r}.{1000 + r}.pt.trace.json").write_bytes(
            raw[:start] + b'\n  "distributedInfo": ' + info + b"," + raw[start:])
    return logdir


def _get_final(url: str, timeout_s: float = 1800) -> tuple[float, dict[str, object], int]:
    """(seconds to the final answer, its JSON, the 202s polled)."""
    t0 = time.perf_counter()
    polls = 0
    while time.perf_counter() - t0 < timeout_s:
        with urllib.request.urlopen(url, timeout=600) as response:
            body = json.loads(response.read())
            if response.status != 202:
                return time.perf_counter() - t0, body, polls
        polls += 1
        time.sleep(min(float(body.get("retry_after_ms", 300)) / 1000, 1.0))
    raise TimeoutError(url)


def _tab(logdir: Path, cache: Path | None) -> tuple[float, int, int]:
    args = ["--tb_attn_cache_dir", str(cache)] if cache is not None else []
    with TensorBoard(logdir, only=["tb_attn"], args=args) as tb:
        seconds, body, polls = _get_final(tb.url + RANKS_ROUTE)
    ranks = body.get("ranks")
    return seconds, len(ranks) if isinstance(ranks, list) else 0, polls


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ranks", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "tb-attn-bench-traces" / "tab-cache")
    args = p.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    source = _source(args.work)
    logdir = _ranked(args.work, source, args.ranks)
    size = sum(f.stat().st_size for f in logdir.glob("*.pt.trace.json"))
    print(f"{args.ranks} ranks of {source.stat().st_size / 1e3:.0f} kB ({size / 1e6:.0f} MB) in {logdir}",
          file=sys.stderr)
    cache = args.work / f"cache{args.ranks}"
    shutil.rmtree(cache, ignore_errors=True)
    t0 = time.perf_counter()
    subprocess.run([str(ROOT / ".venv" / "bin" / "tb-attn"), "summarize", str(logdir), "--cache-dir", str(cache),
                    "--jobs", "2", "--format", "json", "--no-progress"], check=True, stdout=subprocess.DEVNULL,
                   cwd=ROOT)
    precompute = time.perf_counter() - t0
    entries = len(list(cache.rglob("*.tba")))
    rows: dict[str, list[tuple[float, int, int]]] = {"with cache": [], "without": []}
    for rnd in range(args.rounds):
        order = ["with cache", "without"] if rnd % 2 == 0 else ["without", "with cache"]
        for name in order:
            rows[name].append(_tab(logdir, cache if name == "with cache" else None))
            print(f"round {rnd}: {name}: {rows[name][-1]}", file=sys.stderr)
    print(f"\n{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}; {args.ranks} ranks, {size / 1e6:.0f} MB of traces\n")
    print(f"precompute (`tb-attn summarize --cache-dir --jobs 2`): {precompute:.1f} s, {entries} entries\n")
    print("| tensorboard | /ranks of the run, median | rounds | ranks answered | 202 polls |")
    print("|---|---|---|---|---|")
    for name, got in rows.items():
        print(f"| {name} | {statistics.median(g[0] for g in got):.2f} s | "
              f"{', '.join(f'{g[0]:.2f}' for g in got)} | {got[0][1]} | {got[0][2]} |")
    with_cache = statistics.median(g[0] for g in rows["with cache"])
    without = statistics.median(g[0] for g in rows["without"])
    print(f"\nspeed-up of the cache: {without / with_cache:.1f}x")


if __name__ == "__main__":
    main()
