"""Hostile traces and metadata through ``tb-attn`` (issue 48): time and peak memory of each case.

Cases, each written by ``devtools.hostile_traces`` into a temporary logdir and read by one
``tb-attn summarize --format json`` (or the command named) in a fresh process, whose wall time and peak
RSS (``wait4``'s ``ru_maxrss``) are reported:

- ``serving-N``: a vLLM step of N iteration annotations and N attention cores (N = 4k, 12k, 24k, 48k).
  Before issue 48 each core scanned every annotation: 4.4 s at 4k, 68 s at 24k (the issue's machine).
- ``list-dims``, ``list-concrete``: one op whose ``Input Dims`` (or ``Concrete Inputs``) lists 10^7
  entries (50 MB as written, 73 KB of gzip); ``list-dims-32``: 32 such lists, distinct.
- ``serving-layers``: a serving step of 4096 layers (``cores=4096``, one iteration): the summary's size
  is reported too (``docs/limits.md``: about 4.3 MB at the bounds).

``--repo DIR`` runs another checkout's code (for example ``git archive REV | tar -x -C DIR``, with its
scanner built) for a before/after on one machine. Run from the repository root::

    python bench/hostile_analysis.py [--case serving|lists|layers|all] [--sizes 4000,12000] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from devtools.hostile_traces import write_long_lists, write_serving  # noqa: E402

TRACE = "w.1.pt.trace.json"


#: Runs ``tb-attn`` in this process and writes its peak RSS (VmHWM: this process's alone) to stderr at exit.
_CHILD = """
import atexit, sys
def peak():
    with open("/proc/self/status") as f:
        kib = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    sys.stderr.write(f"\\nPEAK_KIB {kib}\\n")
atexit.register(peak)
from tb_attn_plugin.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def _run(logdir: Path, repo: Path, *args: str, timeout_s: float) -> dict[str, Any]:
    """One ``tb-attn`` command in a fresh process: wall seconds, peak RSS (MiB), exit code, output size."""
    env = {**os.environ, "PYTHONPATH": str(repo), "PYTHONSAFEPATH": "1"}
    with tempfile.TemporaryFile() as out:
        start = time.monotonic()
        try:
            proc = subprocess.run([sys.executable, "-c", _CHILD, *args, str(logdir)], stdout=out,
                                  stderr=subprocess.PIPE, env=env, cwd=repo, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return {"timed_out": True, "wall_s": round(time.monotonic() - start, 2)}
        wall = time.monotonic() - start
        size = out.seek(0, os.SEEK_END)
    err = proc.stderr.decode(errors="replace")
    peak = [int(line.split()[1]) for line in err.splitlines() if line.startswith("PEAK_KIB ")]
    return {"wall_s": round(wall, 2), "peak_rss_mib": round(peak[-1] / 1024, 1) if peak else None,
            "rc": proc.returncode, "output_bytes": size, "stderr": err.split("PEAK_KIB")[0][-300:].strip()}


def _serving(tmp: Path, sizes: list[int]) -> list[tuple[str, Path, tuple[str, ...]]]:
    out = []
    for n in sizes:
        d = tmp / f"serving-{n}"
        (d / "run").mkdir(parents=True)
        write_serving(d / "run" / TRACE, n)
        out.append((f"serving-{n}", d, ("summarize", "--format", "json", "--no-progress")))
    return out


def _lists(tmp: Path) -> list[tuple[str, Path, tuple[str, ...]]]:
    out = []
    for name, arg, lists in (("list-dims", "Input Dims", 1), ("list-concrete", "Concrete Inputs", 1),
                             ("list-dims-32", "Input Dims", 32)):
        d = tmp / name
        (d / "run").mkdir(parents=True)
        write_long_lists(d / "run" / (TRACE + ".gz"), arg=arg, lists=lists)
        out.append((name, d, ("summarize", "--format", "json", "--no-progress")))
    return out


def _layers(tmp: Path) -> list[tuple[str, Path, tuple[str, ...]]]:
    d = tmp / "serving-layers"
    (d / "run").mkdir(parents=True)
    write_serving(d / "run" / TRACE, 1, cores=4096)
    return [("serving-layers-4096", d, ("summarize", "--format", "json", "--no-progress"))]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--case", choices=["serving", "lists", "layers", "all"], default="all")
    p.add_argument("--sizes", default="4000,12000,24000,48000", help="serving: annotations (and cores) per trace")
    p.add_argument("--repo", type=Path, default=ROOT, help="the checkout whose code runs (default: this one)")
    p.add_argument("--timeout-s", type=float, default=600.0, help="per command")
    p.add_argument("--json", type=Path, help="also write the results here")
    args = p.parse_args()
    results = {}
    with tempfile.TemporaryDirectory(prefix="tb-attn-hostile-") as t:
        tmp = Path(t)
        cases = []
        if args.case in ("serving", "all"):
            cases += _serving(tmp, [int(s) for s in args.sizes.split(",")])
        if args.case in ("lists", "all"):
            cases += _lists(tmp)
        if args.case in ("layers", "all"):
            cases += _layers(tmp)
        for name, logdir, cmd in cases:
            r = _run(logdir, args.repo.resolve(), *cmd, timeout_s=args.timeout_s)
            results[name] = r
            shown = {k: v for k, v in r.items() if k != "stderr" or r.get("rc")}
            print(f"{name}: {json.dumps(shown)}", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"repo": str(args.repo), "results": results}, indent=2))


if __name__ == "__main__":
    main()
