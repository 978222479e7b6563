"""Minimal trace reading for tests of the runner: ops and the scopes that enclose them.

Deliberately independent of the plugin's analysis engine, so runner tests do not depend on it.
"""

from __future__ import annotations

import bisect
import gzip
import json
import re
import shutil
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tb_attn_plugin.vocab.scopes import Scope, is_scope_name, parse_scope


@dataclass(frozen=True)
class Op:
    name: str
    tid: Any
    ts: float
    end: float
    args: dict[str, Any]
    scopes: tuple[Scope, ...]  # enclosing tb-attn scopes, outermost first
    backward: bool  # runs inside an autograd engine function

    @property
    def phase_scope(self) -> Scope | None:
        return next((s for s in reversed(self.scopes) if s.phase is not None), None)

    @property
    def block_scope(self) -> Scope | None:
        return next((s for s in self.scopes if s.is_block), None)


def load_trace(path: Path) -> dict[str, Any]:
    data = path.read_bytes()
    if path.suffix == ".gz":
        data = gzip.decompress(data)
    return json.loads(data)


def trace_files(run_dir: Path) -> list[Path]:
    return sorted(p for p in run_dir.iterdir() if ".pt.trace.json" in p.name and not p.name.startswith("."))


def ops_with_scopes(trace: dict[str, Any]) -> tuple[list[Op], list[dict[str, Any]]]:
    """CPU ops with their enclosing scopes (time containment on the same thread), and the scopes."""
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    # Our scopes: the runner's are cpu_op events (PyTorch's fast record function), instrument()'s
    # user_annotation ones; a gpu_user_annotation is a scope's projection on a device stream.
    scope_events = [e for e in events if e.get("cat") in ("user_annotation", "cpu_op") and parse_scope(e["name"])]
    by_tid: dict[Any, list[dict[str, Any]]] = {}
    for e in scope_events:
        by_tid.setdefault(e["tid"], []).append(e)
    backward_spans: dict[Any, list[tuple[float, float]]] = {}
    for e in events:
        if str(e.get("name", "")).startswith("autograd::engine::evaluate_function"):
            backward_spans.setdefault(e["tid"], []).append((float(e["ts"]), float(e["ts"]) + float(e["dur"])))
    ops = []
    for e in events:
        if e.get("cat") != "cpu_op" or is_scope_name(str(e.get("name", ""))):
            continue
        ts, end = float(e["ts"]), float(e["ts"]) + float(e["dur"])
        enclosing = [s for s in by_tid.get(e["tid"], [])
                     if float(s["ts"]) <= ts and end <= float(s["ts"]) + float(s["dur"])]
        enclosing.sort(key=lambda s: (float(s["ts"]), -float(s["dur"])))
        parsed = tuple(p for p in (parse_scope(s["name"]) for s in enclosing) if p is not None)
        backward = any(b0 <= ts and end <= b1 for b0, b1 in backward_spans.get(e["tid"], []))
        ops.append(Op(e["name"], e["tid"], ts, end, e.get("args", {}), parsed, backward))
    return ops, scope_events


def step_windows(trace: dict[str, Any]) -> list[tuple[float, float]]:
    return sorted(
        (float(e["ts"]), float(e["ts"]) + float(e["dur"]))
        for e in trace["traceEvents"]
        if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")
    )


def scope_counts(scope_events: list[dict[str, Any]]) -> Counter[str]:
    return Counter(e["name"] for e in scope_events)


def as_ranks(source: Path, target: Path, *, slow_rank: int | None = None, slow_us: float = 0.0,
              heads_per_rank: int | None = None) -> None:
    """Two ranks from one runner trace: rank 1 optionally slowed (``slow_us`` of idle time at the
    end of each attention block: later events move, enclosing ones grow) and, with
    ``heads_per_rank``, each rank naming its global heads as tensor parallelism does."""
    target.mkdir(parents=True)
    (trace,) = trace_files(source)
    for rank in (0, 1):
        data = load_trace(trace)
        data["distributedInfo"] = {"backend": "gloo", "rank": rank, "world_size": 2}
        events = data["traceEvents"]
        if rank == slow_rank:
            ends = sorted(float(e["ts"]) + float(e["dur"]) for e in events
                          if re.fullmatch(r"tbattn\.v1/L\d+", str(e.get("name", ""))) and e.get("ph") == "X")
            for e in events:
                if "ts" not in e or e.get("ph") == "M":
                    continue
                start = float(e["ts"])
                end = start + float(e.get("dur", 0.0))
                e["ts"] = start + slow_us * bisect.bisect_right(ends, start)
                if "dur" in e:
                    e["dur"] = end + slow_us * bisect.bisect_right(ends, end) - e["ts"]
        for e in events:
            name = e.get("name", "")
            if heads_per_rank is not None and isinstance(name, str) and name.startswith("tbattn.v1/"):
                first = rank * heads_per_rank
                e["name"] = re.sub(r"^(tbattn\.v1/L\d+)/(?=[a-z])", rf"\1/H{first}-{first + heads_per_rank - 1}/", name)
        (target / f"host_rank{rank}.{1000 + rank}.pt.trace.json").write_text(json.dumps(data))
    shutil.copy(source / "tb_attn_run.json", target / "tb_attn_run.json")
