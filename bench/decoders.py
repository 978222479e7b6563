"""Decoder candidates for the analysis engine, each in a fresh process on the same trace.

Each candidate reads one trace file and produces the same thing: the columns the engine needs
for complete events (name, category, thread, start, duration, External id, correlation,
sequence number) and memory events. Reported: wall time of the whole process and its peak RSS.

- ``scanner``: the engine's decoder: the compiled scanner (``trace/_scan.c``) on 4 MiB batches in
  worker threads, columns appended in file order.
- ``msgspec-typed``: the engine's pure path (``TB_ATTN_PURE_DECODE=1``: chunked, typed structs,
  unknown fields skipped, two processes for a large local file).
- ``msgspec-typed-whole``: the same structs, whole document at once, one process.
- ``orjson``: ``orjson.loads`` of the whole document, then a Python loop over dicts.
- ``ijson``: streaming ``ijson.items(f, "traceEvents.item")`` with the yajl2_c backend.

    python bench/decoders.py TRACE.pt.trace.json [--repeat 3] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

CANDIDATES = ("scanner", "msgspec-typed", "msgspec-typed-whole", "orjson", "ijson")

_CHILD = r'''
import gc, sys, time
from array import array
path, which = sys.argv[1], sys.argv[2]

def columns(events):
    names, ids = [], {}
    spec = (("name", "i"), ("ts", "d"), ("dur", "d"), ("ext", "q"), ("corr", "q"), ("seq", "q"))
    cols = {k: array(t) for k, t in spec}
    mem = array("q")
    for e in events:
        ph = e.get("ph")
        if ph == "X":
            n = e.get("name", "")
            i = ids.get(n)
            if i is None:
                i = ids[n] = len(names); names.append(n)
            a = e.get("args") or {}
            cols["name"].append(i); cols["ts"].append(float(e.get("ts", 0))); cols["dur"].append(float(e.get("dur", 0)))
            cols["ext"].append(int(a.get("External id", -1))); cols["corr"].append(int(a.get("correlation", -1)))
            cols["seq"].append(int(a.get("Sequence number", -1)))
        elif ph == "i" and e.get("name") == "[memory]":
            mem.append(int((e.get("args") or {}).get("Bytes", 0)))
    return len(cols["name"]), len(mem)

if which in ("scanner", "msgspec-typed"):
    import os
    if which == "msgspec-typed":
        os.environ["TB_ATTN_PURE_DECODE"] = "1"
    from tb_attn_plugin.engine.loader import load_events
    ev = load_events(path)
    n = (len(ev), len(ev.mem_ts))
elif which == "msgspec-typed-whole":
    import os
    os.environ["TB_ATTN_PURE_DECODE"] = "1"
    from tb_attn_plugin.trace.decode import _whole
    ev = _whole(open(path, "rb").read())
    n = (len(ev), len(ev.mem_ts))
elif which == "orjson":
    import orjson
    doc = orjson.loads(open(path, "rb").read())
    n = columns(doc["traceEvents"])
elif which == "ijson":
    import ijson
    with open(path, "rb") as f:
        n = columns(ijson.items(f, "traceEvents.item", use_float=True))
print(n)
'''


def run_isolated(path: Path, which: str) -> tuple[float, float]:
    """Wall seconds and peak MiB of one fresh process (wait4 gives that child's own peak)."""
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        os.execv(sys.executable, [sys.executable, "-c", _CHILD, str(path), which])
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - start
    if status != 0:
        raise RuntimeError(f"{which} exited with status {status}")
    return wall, usage.ru_maxrss / 1024


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("trace", type=Path)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    size_mib = args.trace.stat().st_size / (1 << 20)
    results = {}
    for which in CANDIDATES:
        runs = [run_isolated(args.trace, which) for _ in range(args.repeat)]
        results[which] = {"wall_s": statistics.median(r[0] for r in runs), "peak_mib": max(r[1] for r in runs)}
    base = results["scanner"]
    print(f"{args.trace.name}: {size_mib:.0f} MiB, median of {args.repeat} fresh processes")
    print(f"{'decoder':<22}{'wall s':>8}{'peak MiB':>10}{'time / ours':>13}{'peak / file':>13}")
    for which, r in results.items():
        print(f"{which:<22}{r['wall_s']:8.2f}{r['peak_mib']:10.0f}{r['wall_s'] / base['wall_s']:13.2f}"
              f"{r['peak_mib'] / size_mib:13.2f}")
    if args.json:
        args.json.write_text(json.dumps({"trace": str(args.trace), "size_mib": size_mib, "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
