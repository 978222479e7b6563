"""Concurrent HTTP clients against a TensorBoard plugin's routes, for a bounded time.

``run_load(base_url, requests, clients=20, duration_s=20)`` starts that many client threads.
Each one loops until the time is up: it picks a route (the routes in turn, each client starting
at a different one) and a run (at random, seeded per client), and GETs it with ``urllib`` (a
new connection each time). A ``202`` answer ("still loading") is polled again after the
``retry_after_ms`` it names, as the tab does: it is counted, never an error. An error is any
other status than 200 and 202, or a connection failure or timeout.

Latency is the wall time of one HTTP request, from sending it to the last byte of the body.
A request is *cold* if it is the first one for its route and run (the server may have to parse
the trace first) or if it got one or more 202s; its time to data counts from its first HTTP
request to the final 200. Every other request is *warm*. A 202 for a route and run that had
been answered before (``reloads``) means the server parsed the trace again: its cache had let
the data go. ``LoadResult.report()`` gives p50/p95/p99/max per route and overall.

Two sets of requests are built in: ``tb_attn_requests`` (the Attention tab) and
``profiler_requests`` (torch-tb-profiler's routes for the same runs, for a peer figure).
"""

from __future__ import annotations

import json
import random
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["LoadResult", "Request", "percentile", "profiler_requests", "run_load", "tb_attn_requests"]

TB_ATTN = "data/plugin/tb_attn/"
PROFILER = "data/plugin/pytorch_profiler/"
MAX_POLL_S = 1.0


@dataclass(frozen=True)
class Request:
    route: str  # a short name for reports: "summary", "memory"...
    path: str  # relative to the server's base URL, with its query
    run: str | None = None


def _get_json(url: str, *, timeout_s: float = 60.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        return json.load(response)


def _query(**params: str) -> str:
    return urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})


def tb_attn_requests(base_url: str, *, deadline_s: float = 120.0) -> dict[str, list[Request]]:
    """Per route, one request per run: /runs, /summary, /drilldown (layer 0), /memory, /timeline
    and /compare (the run against the next one). Waits for the runs to be listed."""
    runs: list[dict[str, Any]] = []
    deadline = time.monotonic() + deadline_s
    while not runs:
        runs = _get_json(base_url + TB_ATTN + "runs?refresh=1")["runs"]
        if not runs and time.monotonic() > deadline:
            raise RuntimeError(f"no runs listed at {base_url}")
        if not runs:
            time.sleep(0.5)
    names = [r["run"] for r in runs]
    out: dict[str, list[Request]] = {"runs": [Request("runs", TB_ATTN + "runs")]}
    for i, run in enumerate(runs):
        name = run["run"]
        where: dict[str, str] = {"run": name}
        files = [(w["worker"], s["span"]) for w in run["workers"] for s in w["spans"]]
        if len(files) > 1:
            where |= {"worker": files[0][0], "span": files[0][1]}
        other = names[(i + 1) % len(names)]
        for route, params in (
            ("summary", {"run": name}),
            ("drilldown", {**where, "layer": "0"}),
            ("memory", where),
            ("timeline", where),
            ("compare", {"runs": f"{name},{other}" if other != name else name}),
        ):
            out.setdefault(route, []).append(Request(route, f"{TB_ATTN}{route}?{_query(**params)}", name))
    return out


def profiler_requests(base_url: str, *, deadline_s: float = 600.0) -> dict[str, list[Request]]:
    """torch-tb-profiler's routes for every run, once it has loaded them all: /runs, /overview,
    /operation, /memory and /trace (its equivalents of ours, in that order)."""
    deadline = time.monotonic() + deadline_s
    while True:
        listing = _get_json(base_url + PROFILER + "runs")
        if listing["runs"] and not listing["loading"]:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"torch-tb-profiler did not load its runs within {deadline_s:.0f} s")
        time.sleep(0.5)
    out: dict[str, list[Request]] = {"runs": [Request("runs", PROFILER + "runs")]}
    for name in listing["runs"]:
        workers = _get_json(base_url + PROFILER + "workers?" + _query(run=name, view="Overview"))
        spans = _get_json(base_url + PROFILER + "spans?" + _query(run=name, worker=workers[0]))
        where = {"run": name, "worker": workers[0], **({"span": str(spans[0])} if spans else {})}
        for route, extra in (("overview", {}), ("operation", {"group_by": "Operation"}), ("memory", {}),
                             ("trace", {})):
            out.setdefault(route, []).append(Request(route, f"{PROFILER}{route}?{_query(**where, **extra)}", name))
    return out


def percentile(values: Sequence[float], q: float) -> float | None:
    """The nearest-rank percentile (``q`` in 0..100); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def _stats(values: Sequence[float]) -> dict[str, float | int | None]:
    def r(v: float | None) -> float | None:
        return None if v is None else round(v, 1)

    return {"n": len(values), "p50_ms": r(percentile(values, 50)), "p95_ms": r(percentile(values, 95)),
            "p99_ms": r(percentile(values, 99)), "max_ms": r(max(values) if values else None)}


@dataclass
class LoadResult:
    clients: int
    duration_s: float
    wall_s: float = 0.0
    #: (route, status or None for a connection failure, ms) for every HTTP response
    responses: list[tuple[str, int | None, float]] = field(default_factory=list)
    warm_ms: dict[str, list[float]] = field(default_factory=dict)
    cold_ms: dict[str, list[float]] = field(default_factory=dict)  # time to data
    errors: list[str] = field(default_factory=list)
    unfinished: int = 0  # still loading when the time was up
    reloads: Counter[str] = field(default_factory=Counter)  # 202s after the route and run had data

    @property
    def ok_routes(self) -> set[str]:
        return {route for route, status, _ in self.responses if status == 200}

    def report(self) -> dict[str, Any]:
        statuses = Counter("error" if s is None else str(s) for _, s, _ in self.responses)
        routes = sorted({r for r, _, _ in self.responses})
        every = [ms for _, _, ms in self.responses]
        warm_all = [ms for v in self.warm_ms.values() for ms in v]
        cold_all = [ms for v in self.cold_ms.values() for ms in v]
        return {
            "clients": self.clients, "duration_s": self.duration_s, "wall_s": round(self.wall_s, 2),
            "requests": len(self.responses), "requests_per_s": round(len(self.responses) / max(self.wall_s, 1e-9), 1),
            "statuses": dict(statuses), "errors": len(self.errors), "error_samples": self.errors[:10],
            "unfinished": self.unfinished, "reloads": dict(self.reloads),
            "overall": {"all": _stats(every), "warm": _stats(warm_all), "cold_time_to_data": _stats(cold_all)},
            "routes": {
                route: {
                    "all": _stats([ms for r, _, ms in self.responses if r == route]),
                    "warm": _stats(self.warm_ms.get(route, [])),
                    "cold_time_to_data": _stats(self.cold_ms.get(route, [])),
                    "loading_202": sum(1 for r, s, _ in self.responses if r == route and s == 202),
                }
                for route in routes
            },
        }


def _fetch(url: str, timeout_s: float) -> tuple[int | None, bytes, str | None]:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return response.status, response.read(), None
    except urllib.error.HTTPError as exc:
        body = exc.read()
        return exc.code, body, f"{exc.code} {body[:200]!r}"
    except (OSError, ValueError) as exc:  # refused, reset, timed out, a bad status line
        return None, b"", f"{type(exc).__name__}: {exc}"


def run_load(base_url: str, requests: dict[str, list[Request]], *, clients: int = 20, duration_s: float = 20.0,
             timeout_s: float = 60.0, seed: int = 0) -> LoadResult:
    """``clients`` threads GET ``requests`` for ``duration_s`` seconds; see the module docstring."""
    result = LoadResult(clients=clients, duration_s=duration_s)
    lock = threading.Lock()
    answered: set[str] = set()  # paths answered 200 at least once
    routes = sorted(requests)
    start = time.monotonic()
    deadline = start + duration_s

    def client(index: int) -> None:
        rng = random.Random(seed * 1000 + index)
        turn = index
        while time.monotonic() < deadline:
            route = routes[turn % len(routes)]
            turn += 1
            request = rng.choice(requests[route])
            first = time.perf_counter()
            with lock:
                cold = request.path not in answered
            polled = False
            while True:
                t0 = time.perf_counter()
                status, body, error = _fetch(base_url + request.path, timeout_s)
                ms = (time.perf_counter() - t0) * 1e3
                with lock:
                    result.responses.append((route, status, ms))
                    if error is not None and status != 202:
                        result.errors.append(f"{route} {request.path}: {error}")
                if status != 202:
                    break
                polled = True
                if time.monotonic() >= deadline:
                    with lock:
                        result.unfinished += 1
                    return
                try:
                    retry_ms = float(json.loads(body).get("retry_after_ms", 300))
                except (ValueError, AttributeError):
                    retry_ms = 300.0
                time.sleep(min(max(retry_ms, 10.0) / 1e3, MAX_POLL_S))
            if status == 200:
                with lock:
                    answered.add(request.path)
                    if polled and not cold:
                        result.reloads[route] += 1
                    if polled or cold:
                        result.cold_ms.setdefault(route, []).append((time.perf_counter() - first) * 1e3)
                    else:
                        result.warm_ms.setdefault(route, []).append(ms)

    threads = [threading.Thread(target=client, args=(i,), name=f"load-client-{i}", daemon=True)
               for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(duration_s + timeout_s * 2 + 30)
    result.wall_s = time.monotonic() - start
    alive = [t.name for t in threads if t.is_alive()]
    if alive:
        result.errors.append(f"clients still running after the time was up: {alive}")
    return result
