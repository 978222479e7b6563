"""Run metadata on the hostile side: ``/metadata`` of a dense 1 MiB file, and deep files read.

Two cases, in this process (the tab's WSGI app driven by werkzeug's test client, so the figures are
the route's own work, without a network):

- ``route``: a run whose ``tb_attn_run.json`` is a dense 1 MiB JSON object (small objects in an
  array). ``--requests`` (50) GETs of ``/metadata?run=r`` after one warm-up: the mean time per
  request, the requests per second one thread serves, and the bytes allocated per request
  (``tracemalloc``'s peak). Before issue 48 every request read and parsed the file again (about
  25 MB and 0.23 s each on a busy 2-core machine); the target is the parse once per file version.
- ``deep``: how long the metadata reader takes on a 1 MiB file of brackets (half a million levels)
  and on a 1 MiB file nested 500 levels deep, which it cuts at 32 levels.

``--repo DIR`` imports the plugin from another checkout (an older commit's tree, for example
``git archive REV | tar -x -C /tmp/old``) for a before/after: ``deep`` needs this tree's reader.
Run from the repository root::

    python bench/metadata.py [--case route|deep|all] [--requests N] [--repo DIR]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _dense(target: int = 1 << 20) -> bytes:
    rows, size = [], 20
    while size < target - 64:
        row = {"k": len(rows), "v": "x" * 8, "f": 0.5}
        rows.append(row)
        size += len(json.dumps(row, separators=(",", ":"))) + 1
    return json.dumps({"model": "m", "rows": rows}, separators=(",", ":")).encode()


def route(requests: int) -> dict[str, float]:
    from tensorboard.backend import application
    from tensorboard.plugins import base_plugin
    from werkzeug.test import Client

    from tb_attn_plugin.server.plugin import AttentionPlugin

    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "r"
        run.mkdir()
        shutil.copy(ROOT / "tests" / "traces" / "flops.json", run / "w.1.pt.trace.json")
        raw = _dense()
        (run / "tb_attn_run.json").write_bytes(raw)
        plugin = AttentionPlugin(base_plugin.TBContext(logdir=tmp))
        client = Client(application.TensorBoardWSGI([plugin]))
        url = "/data/plugin/tb_attn/metadata?run=r"
        assert client.get(url).status_code == 200  # the listing, and the first read
        peaks = []
        started = time.perf_counter()
        for _ in range(requests):
            tracemalloc.start()
            response = client.get(url)
            peaks.append(tracemalloc.get_traced_memory()[1])
            tracemalloc.stop()
            assert response.status_code == 200
        traced_s = time.perf_counter() - started
        started = time.perf_counter()
        for _ in range(requests):
            client.get(url)
        took = time.perf_counter() - started
    return {"file_bytes": len(raw), "requests": requests, "mean_ms": 1000 * took / requests,
            "requests_per_s": requests / took, "mean_ms_traced": 1000 * traced_s / requests,
            "peak_alloc_mb_per_request": max(peaks) / 1e6}


def deep() -> dict[str, float]:
    from tb_attn_plugin.engine.metadata import parse_metadata

    out = {}
    for name, raw in (("brackets_1mib", b'{"a":' + b"[" * (1 << 19) + b"]" * (1 << 19) + b"}"),
                      ("object_500_deep", b'{"a":' + b"[" * 499 + b"]" * 499 + b',"rows":' + _dense()[:-1] + b"}}")):
        started = time.perf_counter()
        value, _ = parse_metadata(raw)
        out[f"{name}_s"] = time.perf_counter() - started
        out[f"{name}_kept"] = float(value is not None)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=("route", "deep", "all"), default="all")
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--repo", type=Path, default=ROOT)
    args = parser.parse_args()
    sys.path.insert(0, str(args.repo))
    import tb_attn_plugin

    result: dict[str, object] = {"repo": str(Path(tb_attn_plugin.__file__).parent.parent)}
    if args.case in ("route", "all"):
        result["route"] = route(args.requests)
    if args.case in ("deep", "all"):
        result["deep"] = deep()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
