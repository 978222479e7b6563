"""The routes' typed bodies (``responses.py``), the TypeScript generated from them, the one
error mapping (``service.http_errors``) and the loader as the service's only per-file cache."""

from __future__ import annotations

import ast
import json
import threading
from pathlib import Path
from typing import Any, Literal

import msgspec
import pytest
from helpers import profile_run
from tensorboard import errors
from webtools import BASE, get, get_json, plugin_client

from devtools.gen_types import TYPES_TS, render
from tb_attn_plugin.analysis.cross_run.compare import BaselineError
from tb_attn_plugin.analysis.views.views import ViewError
from tb_attn_plugin.engine.limits import Limits
from tb_attn_plugin.engine.loader import resolve_runs
from tb_attn_plugin.engine.workspace import Workspace
from tb_attn_plugin.server import responses
from tb_attn_plugin.server.plugin import STATIC_DIR
from tb_attn_plugin.server.responses import ROUTES
from tb_attn_plugin.server.service import Service, http_errors
from tb_attn_plugin.trace import io
from tb_attn_plugin.trace.events import ReadError, TraceError

PACKAGE = Path(__file__).resolve().parents[2] / "tb_attn_plugin"


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Runner traces: a sequence sweep (fitted), per-head scopes (the heads map), an SDPA run
    (empty phases) and a run whose only trace is broken (errors everywhere)."""
    root = tmp_path_factory.mktemp("responses")
    for name, changes in (("naive/seq16", {"seq": 16}), ("naive/seq32", {"seq": 32}),
                          ("sdpa/seq16", {"impl": "sdpa", "seq": 16}), ("per-head", {"per_head": True})):
        assert profile_run(root, name, **{"impl": "naive", **changes}).status == "ok"
    (root / "broken").mkdir()
    (root / "broken" / "w.1.pt.trace.json").write_text('{"traceEvents": [')
    return root


def _conforms(body: bytes, kind: type[msgspec.Struct]) -> Any:
    """Asserts that ``body`` is exactly a ``kind``: decoding checks every field's presence and
    type, and re-encoding would drop any key the type lacks. Returns the parsed JSON."""
    value = msgspec.json.decode(body, type=kind)
    parsed = json.loads(body)
    assert json.loads(msgspec.json.encode(value)) == parsed
    return parsed


# -- the generated TypeScript ---------------------------------------------------------------
def test_types_ts_is_generated_from_the_structs() -> None:
    assert TYPES_TS.read_text(encoding="utf-8") == render(), \
        "frontend/src/types.ts is stale: run `python -m devtools.gen_types`, then `cd frontend && npm run build`"


def test_a_field_added_to_a_struct_makes_types_ts_stale() -> None:
    class RunsResponse(responses.RunsResponse, kw_only=True):
        retries: int | None = None  # an added field

    grown = render({**ROUTES, "/runs": RunsResponse})
    assert grown != TYPES_TS.read_text(encoding="utf-8")
    assert "  retries: number | null;\n" in grown


class _Inner(msgspec.Struct, kw_only=True):
    """One line of doc."""

    n: int  # a ``count``


class _Body(msgspec.Struct, kw_only=True):
    """First line.

    Second paragraph."""

    when: float | int
    label: str | None = None  # has a default: still always in the JSON
    points: list[tuple[float, int]]
    kinds: list[Literal["b", "a"]]
    table: dict[str, _Inner]
    meta: dict[str, object] | None
    flag: bool


def test_the_generator_maps_each_kind_of_field() -> None:
    text = render({"/x": _Body})
    assert "/**\n * First line.\n *\n * Second paragraph.\n */\nexport interface _Body {\n" in text
    assert ("  when: number;\n  /** has a default: still always in the JSON */\n  label: string | null;\n"
            "  points: [number, number][];\n"
            '  kinds: ("a" | "b")[];\n  table: Record<string, _Inner>;\n'
            "  meta: Record<string, unknown> | null;\n  flag: boolean;\n}\n") in text
    assert "/** One line of doc. */\nexport interface _Inner {\n  /** a `count` */\n  n: number;\n}\n" in text
    assert '  "/x": _Body;\n' in text


def test_listing_error_is_in_the_contract_and_the_tab() -> None:
    assert "listing_error: string | null;" in TYPES_TS.read_text(encoding="utf-8")
    assert "Cannot list the log directory:" in (Path(STATIC_DIR) / "index.js").read_text(encoding="ascii")


# -- every route's body is its Struct -------------------------------------------------------
def test_every_route_answers_its_struct(logdir: Path) -> None:
    client = plugin_client(logdir)
    runs = _conforms(get(client, f"{BASE}/runs").get_data(), responses.RunsResponse)
    assert runs["listing_error"] is None
    names = sorted(r["run"] for r in runs["runs"])
    assert names == ["broken", "naive/seq16", "naive/seq32", "per-head", "sdpa/seq16"]
    checked = {"/runs"}
    for name in names:
        _conforms(get(client, f"{BASE}/metadata?run={name}").get_data(), ROUTES["/metadata"])
        checked.add("/metadata")
        for route, query in (("/summary", ""), ("/ranks", ""), ("/drilldown", "&layer=1&phase=softmax"),
                             ("/drilldown", "&layer=0&backward=1"), ("/memory", ""), ("/timeline", "&limit=50")):
            response = get(client, f"{BASE}{route}?run={name}{query}")
            if name == "broken" and route not in ("/summary", "/ranks"):
                assert response.status_code == 404
                assert "cannot read w.1.pt.trace.json" in response.get_data(as_text=True)
                continue
            assert response.status_code == 200, (route, name, response.get_data(as_text=True))
            _conforms(response.get_data(), ROUTES[route])
            checked.add(route)
    everything = ",".join(names)
    compared = _conforms(get(client, f"{BASE}/compare?runs={everything}&baseline=sdpa/seq16").get_data(),
                         responses.Comparison)
    assert compared["errors"][0]["run"] == "broken" and len(compared["runs"]) == 4
    scaled = _conforms(get(client, f"{BASE}/scaling?runs={everything}").get_data(), responses.ScalingFits)
    assert any(s["time_fit"] is not None for s in scaled["series"])
    heads = _conforms(get(client, f"{BASE}/ranks?run=per-head").get_data(), responses.RankView)["heads"]
    assert heads and {"layer", "head", "ranks", "replicas"} <= set(heads[0])
    statuses = {r["run"]: r["status"] for r in _conforms(get(client, f"{BASE}/runs").get_data(),
                                                        responses.RunsResponse)["runs"]}
    assert statuses["naive/seq16"] == "ready" and statuses["broken"] in ("error", "loading")
    strat = _conforms(get(client, f"{BASE}/strategies?runs={everything}&baseline=sdpa").get_data(),
                      responses.StrategyTable)
    assert strat["groups"] and strat["groups"][0]["baseline"] == "sdpa"
    checked |= {"/compare", "/scaling", "/strategies"}

    loading = plugin_client(logdir, wait_s=0.0).get(f"{BASE}/summary?run=naive/seq32")
    assert loading.status_code == 202
    assert _conforms(loading.get_data(), responses.LoadingResponse)["status"] == "loading"
    checked.add("202")
    assert checked == set(ROUTES)


def test_a_failed_listing_is_reported_with_the_last_runs(logdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    client = plugin_client(logdir, scan_ttl_s=0.0, relist_min_s=0.0)
    before = get_json(client, f"{BASE}/runs")
    assert before["listing_error"] is None

    def unreachable(root: str, **kwargs: Any) -> Any:
        raise ReadError(f"cannot list {root}: Connection refused")

    monkeypatch.setattr(io, "list_tree", unreachable)
    after = _conforms(get(client, f"{BASE}/runs?refresh=1").get_data(), responses.RunsResponse)
    assert after["listing_error"] == f"cannot list {logdir}: Connection refused"
    assert [r["run"] for r in after["runs"]] == [r["run"] for r in before["runs"]]  # nothing disappears
    monkeypatch.undo()
    assert get_json(client, f"{BASE}/runs?refresh=1")["listing_error"] is None


# -- one error mapping ----------------------------------------------------------------------
def test_http_errors_maps_the_engine_errors() -> None:
    with pytest.raises(errors.NotFoundError, match="no layer 9"), http_errors("f.json"):
        raise ViewError("no layer 9 in this trace")
    with pytest.raises(errors.NotFoundError, match=r"cannot read f\.json: truncated"), http_errors("f.json"):
        raise TraceError("truncated trace")
    with pytest.raises(errors.NotFoundError, match=r"^Not found: gone$"), http_errors():
        raise ReadError("gone")
    with pytest.raises(errors.InvalidArgumentError, match="baseline"), http_errors():
        raise BaselineError("the baseline 'x' is not among the readable runs")
    with pytest.raises(ValueError, match="a bug"), http_errors():  # anything else stays a 500
        raise ValueError("a bug")

    @http_errors()
    def view() -> None:
        raise ViewError("no ProfilerStep#9")

    with pytest.raises(errors.NotFoundError, match="ProfilerStep#9"):
        view()


def test_the_mapping_is_written_once() -> None:
    """No route or service method turns an engine error into an HTTP error by hand (an
    ``except`` or an ``isinstance`` test of one that raises one of TensorBoard's errors): only
    ``http_errors`` does."""
    engine = ("ViewError", "TraceError", "ReadError", "BaselineError")
    places = set()
    for name in ("server/service.py", "server/plugin.py", "server/http_status.py"):
        tree = ast.parse((PACKAGE / name).read_text(encoding="utf-8"))
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Raise) and node.exc is not None and "errors." in ast.unparse(node.exc)):
                continue
            scope, guards = node, []
            while not isinstance(scope, ast.FunctionDef):
                scope = parents[scope]
                if isinstance(scope, ast.ExceptHandler) and scope.type is not None:
                    guards.append(ast.unparse(scope.type))
                elif isinstance(scope, ast.If):
                    guards.append(ast.unparse(scope.test))
            if any(e in g for g in guards for e in engine):
                places.add(f"{name}:{scope.name}")
    assert places == {"server/http_status.py:http_errors"}


def test_a_trace_gone_since_the_listing_is_a_404(tmp_path: Path, logdir: Path) -> None:
    run = tmp_path / "exp"
    run.mkdir()
    (trace,) = (logdir / "naive" / "seq16").glob("*.pt.trace.json")
    (run / trace.name).write_bytes(trace.read_bytes())
    client = plugin_client(tmp_path)
    get_json(client, f"{BASE}/runs")
    (run / trace.name).unlink()
    response = get(client, f"{BASE}/trace?run=exp&file={trace.name}")
    assert response.status_code == 404 and f"cannot read {trace.name}" in response.get_data(as_text=True)


# -- the engine holds the only per-file cache ------------------------------------------------
def test_parse_yields_summary_and_analysis_from_one_decode(logdir: Path, decodes: list[str]) -> None:
    (run,) = [r for r in resolve_runs(str(logdir)) if r.name == "naive/seq16"]
    (trace,) = run.files
    engine = Workspace(str(logdir), limits=Limits(keep_analyses=4))
    assert engine.cached(trace) == (None, None) and engine.cached_analysis(trace) is None
    parsed = engine.parse(trace, metadata=None)
    assert engine.cached(trace) == (parsed.summary, None) and engine.cached_analysis(trace) is parsed.analysis
    assert engine.parse(trace, metadata=None).summary is parsed.summary
    summary = engine.run_summary(run, metadata=None, known={trace: parsed.summary})
    assert summary.workers == [parsed.summary] and summary.metadata is None
    assert len(decodes) == 1
    (broken,) = next(r for r in resolve_runs(str(logdir)) if r.name == "broken").files
    with pytest.raises(TraceError, match="truncated"):
        engine.parse(broken, metadata=None)
    failure = engine.cached(broken).failure  # remembered: no second decode
    assert failure is not None and "truncated" in failure
    with pytest.raises(TraceError, match="truncated"):
        engine.cached_analysis(broken)
    assert len(decodes) == 2


def test_a_view_and_the_summary_share_one_parse(logdir: Path, decodes: list[str]) -> None:
    service = Service(str(logdir), wait_s=60)
    results: list[object] = []
    threads = [threading.Thread(target=lambda: results.append(service.summary("naive/seq32", None, None))),
               threading.Thread(target=lambda: results.append(
                   service.drilldown("naive/seq32", None, None, layer=0, phase=None, backward=False,
                                     profiler_installed=False)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(results) == 2 and len(decodes) == 1
    service.memory("naive/seq32", None, None, step=None)
    assert len(decodes) == 1


def test_a_view_whose_analysis_was_evicted_parses_again_and_the_summary_does_not(
        logdir: Path, decodes: list[str]) -> None:
    service = Service(str(logdir), wait_s=60, keep_analyses=0)  # as if every analysis were evicted at once
    service.summary("sdpa/seq16", None, None)
    service.memory("sdpa/seq16", None, None, step=None)
    service.summary("sdpa/seq16", None, None)
    assert len(decodes) == 2


