"""An event-file flood (issue 48): a run of ``--links`` hard links to one 63 MiB TensorBoard event
file whose every record carries one of our tags (about 1M records of one scalar each, heads past
the bound), as the attack wrote it.

Measures, in this process: one file's parse (``head_events.parse_event_file`` with its default
bounds), the largest file the bounds keep whole (16,384 heads × 16 statistics, one a record), the
worst file of tiny distinct records before a tag at its end, and the whole run's statistics as
the CLI reads them (``Loader.summarize_run``) and as the tab does (``Service.summary``).

    python bench/event_flood.py [--links 64] [--skip-run] [--json OUT]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tensorboard.compat.proto import event_pb2  # noqa: E402
from tensorboard.summary.writer.record_writer import RecordWriter  # noqa: E402

from tb_attn_plugin.engine.head_events import parse_event_file  # noqa: E402

STATS = ("entropy", "distance", "sink_1", "sink_4", "window_16", "window_32", "window_64", "window_128",
         "window_256", "top_32")


def _records(datas: Any, limit: int) -> bytes:
    out = io.BytesIO()
    writer = RecordWriter(out)
    for data in datas:
        if out.tell() >= limit:
            break
        writer.write(data)
    return out.getvalue()


def _scalar(step: int, tag: str) -> bytes:
    e = event_pb2.Event(step=step, wall_time=1.0)
    e.summary.value.add(tag=tag, simple_value=0.5)
    return e.SerializeToString()


def flood_file(limit: int = 63 << 20) -> bytes:
    """Records of one scalar each with our tags, heads counting up past the bound."""
    return _records((_scalar(7, f"attn_stats.{STATS[i % 10]}/L{i // 10 // 4096}.H{i // 10 % 4096}")
                     for i in range(1 << 24)), limit)


def largest_kept() -> bytes:
    """16,384 heads of 16 statistics, one value a record."""
    stats = [*STATS, "sink_2", "sink_8", "window_8", "window_512", "top_8", "top_64"]
    return _records((_scalar(1, f"attn_stats.{s}/L{h // 128}.H{h % 128}") for h in range(16384) for s in stats),
                    1 << 30)


def tiny_then_tag(limit: int = 64 << 20) -> bytes:
    """64 MiB of tiny distinct records, one tag of ours at the end."""
    body = _records((i.to_bytes(4, "little") for i in range(1 << 26)), limit - 200)
    return body + _records([_scalar(1, "attn_stats.entropy/L0.H0")], 1 << 20)


def timed(fn: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    got = fn()
    return time.perf_counter() - started, got


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--links", type=int, default=64)
    p.add_argument("--skip-run", action="store_true", help="only the single files")
    p.add_argument("--json", dest="json_out", type=Path)
    args = p.parse_args()
    out: dict[str, Any] = {"cpus": os.cpu_count(), "load": os.getloadavg()[0]}
    flood = flood_file()
    for name, data in (("flood_file", flood), ("largest_kept", largest_kept()), ("tiny_then_tag", tiny_then_tag())):
        seconds, got = timed(lambda d=data: parse_event_file(d))
        out[name] = {"mib": round(len(data) / 2**20, 1), "s": round(seconds, 2), "values": got.values,
                     "records_parsed": getattr(got, "records", None), "dropped": dict(got.dropped)}
        print(name, out[name], file=sys.stderr, flush=True)
    if not args.skip_run:
        from tb_attn_plugin.engine.loader import Loader, resolve_runs
        from tb_attn_plugin.server.service import Service

        with tempfile.TemporaryDirectory(prefix="tb-attn-flood-") as tmp:
            run = Path(tmp) / "flood"
            run.mkdir()
            shutil.copy(ROOT / "tests" / "traces" / "steps.json", run / "w0.1.pt.trace.json")
            first = run / "events.out.tfevents.0000.flood"
            first.write_bytes(flood)
            for i in range(1, args.links):
                os.link(first, run / f"events.out.tfevents.{i:04d}.flood")
            (found,) = resolve_runs(tmp)
            seconds, summary = timed(lambda: Loader().summarize_run(found))
            note = summary.attn_stats.note if summary.attn_stats else None
            out["cli_run"] = {"files": len(found.event_files), "s": round(seconds, 2), "note": note}
            print("cli_run", out["cli_run"], file=sys.stderr, flush=True)
            service = Service(tmp, wait_s=600)
            seconds, _ = timed(lambda: service.summary("flood", None, None))
            out["tab_summary_s"] = round(seconds, 2)
            print("tab_summary_s", out["tab_summary_s"], file=sys.stderr, flush=True)
    text = json.dumps(out, indent=1)
    print(text)
    if args.json_out:
        args.json_out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
