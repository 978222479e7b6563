"""Security of the tab's routes: nothing outside the logdir is read, nothing under it is written.

A canary directory beside the logdir holds a real trace and run metadata whose op names and
user carry ``CANARY``, and a secret file; symlinks inside the logdir point at them. Hostile run,
worker, span, file, phase and ``runs`` values (traversal, absolute paths, URLs, encodings,
backslashes, NUL bytes, very long names, lookalike characters) and hostile static paths must
give 400 or 404: never a 500, never a 200 holding anything from outside. Then every route and
the CLI run over the logdir, and over a read-only copy of it, and the logdir is unchanged.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest
from tensorboard.plugins import base_plugin
from tracetools import trace_files
from webtools import BASE, get, plugin_client
from werkzeug.test import Client

from tb_attn_plugin.server import plugin as plugin_module
from tb_attn_plugin.server.plugin import STATIC_DIR, AttentionPlugin

CANARY = "CANARY-7b1e0c"  # only in files outside the logdir, never in a name
#: In server/plugin.py, a file beside the static directory: the static route must never serve it.
PLUGIN_SOURCE_MARK = "def _safe_static_path"
TESTS_DIR = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Site:
    root: Path
    logdir: Path
    outside: Path  # the canary directory beside the logdir
    evil: Path  # a directory whose path starts with the logdir's ("logdir-evil")
    file: str  # the trace file of exp/naive
    canary_file: str  # the trace file of the canary run


def _canary_run(source: Path, target: Path) -> str:
    """A copy of a runner run whose op names and metadata carry CANARY; returns its trace's name."""
    target.mkdir(parents=True)
    (trace,) = trace_files(source)
    text = trace.read_text().replace('"aten::softmax"', json.dumps(f"aten::softmax {CANARY}"))
    assert CANARY in text
    name = "canary.1.pt.trace.json"
    (target / name).write_text(text)
    (target / "tb_attn_run.json").write_text(json.dumps({"user": CANARY, "impl": CANARY, "status": "ok"}))
    return name


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory, builtin_logdir: Path) -> Site:
    root = tmp_path_factory.mktemp("security")
    logdir, outside, evil = root / "logdir", root / "outside", root / "logdir-evil"
    for run in ("naive", "sdpa"):
        shutil.copytree(builtin_logdir / run, logdir / "exp" / run)
    canary_file = _canary_run(builtin_logdir / "naive", outside / "run")
    _canary_run(builtin_logdir / "naive", evil / "run")
    (outside / "secret.txt").write_text(CANARY)
    # Symlink escapes: a run directory, a trace file and a metadata file that are links out, a
    # directory link inside a run, and a link named like a trace at the top.
    (logdir / "linked").symlink_to(outside / "run", target_is_directory=True)
    mixed = logdir / "exp" / "mixed"
    mixed.mkdir()
    (naive_trace,) = trace_files(logdir / "exp" / "naive")
    shutil.copy(naive_trace, mixed / naive_trace.name)
    (mixed / "evil.1.pt.trace.json").symlink_to(outside / "run" / canary_file)
    (mixed / "tb_attn_run.json").symlink_to(outside / "run" / "tb_attn_run.json")
    (logdir / "exp" / "naive" / "sub").symlink_to(outside / "run", target_is_directory=True)
    (logdir / "top.1.pt.trace.json").symlink_to(outside / "run" / canary_file)
    return Site(root, logdir, outside, evil, naive_trace.name, canary_file)


@pytest.fixture(scope="module")
def client(site: Site) -> Client:
    return plugin_client(site.logdir)


def _fetch(client: Client, url: str) -> tuple[int, str]:
    response = get(client, BASE + url)
    return response.status_code, response.get_data().decode("utf-8", "replace")


def _assert_refused(client: Client, urls: list[str]) -> None:
    """Every URL answers 400 or 404, and nothing from outside the logdir shows."""
    wrong = []
    for url in urls:
        status, body = _fetch(client, url)
        if status not in (400, 404) or CANARY in body or PLUGIN_SOURCE_MARK in body:
            wrong.append(f"{url[:160]} -> {status} {body[:160]!r}")
    assert wrong == []


# -- the listing ----------------------------------------------------------------------------
def test_only_what_is_inside_is_listed(client: Client, site: Site) -> None:
    status, body = _fetch(client, "/runs")
    assert status == 200 and CANARY not in body
    runs = {r["run"]: r for r in json.loads(body)["runs"]}
    assert set(runs) == {"exp/mixed", "exp/naive", "exp/sdpa"}  # not "linked", nor "." for the top link
    mixed = runs["exp/mixed"]
    assert mixed["info"] is None  # its tb_attn_run.json is a link out
    assert [s["file"] for w in mixed["workers"] for s in w["spans"]] == [site.file]
    assert [w["worker"] for w in runs["exp/naive"]["workers"]] == [site.file.split(".")[0]]


# -- hostile parameters ---------------------------------------------------------------------
#: Run, worker, span, file and phase values. "{outside}", "{logdir}" and "{evil}" stand for
#: absolute paths of the fixture.
HOSTILE = [
    ".", "..", "../", "../..", "../x", "../outside/run", "../logdir-evil/run", "exp/../../outside/run",
    "exp/naive/../../../outside/run", "../" * 3000 + "outside/run",
    "/", "/etc", "/etc/passwd", "{outside}/run", "{outside}/secret.txt", "{evil}/run", "{logdir}/exp/naive",
    "{logdir}/linked", "file://{outside}/run", "memory://run", "s3://bucket/run", "~", "~root/x", "$HOME",
    "%2e%2e%2foutside%2frun", "%2e%2e", "%252e%252e%252foutside%252frun", "..%2f..%2f", "..%5c..%5c", "%00",
    "..\\outside\\run", "exp\\naive", "\\\\server\\share\\run", "C:\\Windows",
    "\x00", "exp/naive\x00", "..\x00/outside", "exp/naive\r\nX-Injected: 1",
    "x" * 10_000,
    "ｅｘｐ／ｎａｉｖｅ", "exp∕naive", "exp⁄naive", "．．／outside／run", "‥/outside/run", "exp/naïve",
    "exp/naive\u200b",
    "EXP/NAIVE", " exp/naive", "exp/naive ", "exp/naive/", "exp//naive", "./exp/naive", "exp/./naive",
    "linked", "exp/mixed/evil", "evil", "top", "secret", "*", "exp/*", "exp/naive;ls", "<script>alert(1)</script>",
    "tb_attn_run.json", "../sdpa/tb_attn_run.json", "../naive/" + "{file}",
]


def _expand(template: str, site: Site) -> str:
    return (template.replace("{outside}", str(site.outside)).replace("{logdir}", str(site.logdir))
            .replace("{evil}", str(site.evil)).replace("{file}", site.file))


def _hostile_urls(value: str, site: Site) -> list[str]:
    v, f = quote(value, safe=""), quote(site.file)
    run_routes = [f"/metadata?run={v}", f"/summary?run={v}", f"/ranks?run={v}", f"/drilldown?run={v}&layer=0",
                  f"/memory?run={v}", f"/timeline?run={v}", f"/trace?run={v}&file={f}",
                  f"/trace?run={v}&file={quote(site.canary_file)}",
                  f"/compare?runs={v},exp/naive", f"/compare?runs=exp/naive,{v}", f"/scaling?runs={v},exp/naive",
                  f"/compare?runs=exp/naive,exp/sdpa&baseline={v}", f"/strategies?runs={v},exp/naive",
                  f"/strategies?runs=exp/naive,{v}"]
    in_a_real_run = [f"/{route}?run=exp/naive&{param}={v}{extra}"
                     for route, extra in (("summary", ""), ("drilldown", "&layer=0"), ("memory", ""), ("timeline", ""))
                     for param in ("worker", "span")]
    files = [f"/trace?run=exp/naive&file={v}", f"/trace?run=exp/mixed&file={v}",
             f"/drilldown?run=exp/naive&layer=0&phase={v}"]
    return run_routes + in_a_real_run + files


@pytest.mark.parametrize("template", HOSTILE, ids=[repr(h)[1:41] for h in HOSTILE])
def test_hostile_names_are_refused_on_every_route(client: Client, site: Site, template: str) -> None:
    _assert_refused(client, _hostile_urls(_expand(template, site), site))


#: Routes (as get_plugin_apps names them) that the hostile table above drives.
COVERED_ROUTES = {"/index.js", "/static/*", "/runs", "/metadata", "/summary", "/ranks", "/drilldown", "/memory",
                  "/timeline", "/trace", "/compare", "/scaling", "/strategies"}


def test_the_tables_cover_every_route() -> None:
    """A new route must join the tables here (and the drive below) before it ships."""
    routes = set(AttentionPlugin(base_plugin.TBContext(logdir="x")).get_plugin_apps())
    assert routes == COVERED_ROUTES


@pytest.mark.parametrize("url", [
    "/compare?runs=" + ",".join(f"r{i}" for i in range(201)),
    "/scaling?runs=" + ",".join(["exp/naive"] * 100 + [quote("../outside/run", safe="")]),
    "/compare?runs=,,,",
    "/compare?runs=" + quote("exp/naive,../outside/run,/etc", safe=""),
    "/scaling?runs=" + quote(",".join(["x" * 5000] * 3), safe=""),
    "/strategies?runs=" + ",".join(f"r{i}" for i in range(201)),
    "/strategies?runs=" + quote("exp/naive,../outside/run,/etc", safe=""),
])
def test_hostile_run_lists(client: Client, url: str) -> None:
    _assert_refused(client, [url])


#: Refused wherever a number is expected: Python's int or float would take some of them (other
#: scripts' digits, underscores, spaces), but no client sends them.
NOT_NUMBERS = ["1e400", "-1e400", "nan", "inf", "0x10", "\u0661", "1_000", " 1", "1 ", "\x00", "9" * 5000, "--1",
               "+-1", "1e", "x" * 10_000]
#: Refused where an integer is expected: beyond int64, or not integers.
NOT_INT64 = ["9223372036854775808", "-9223372036854775809", "1" * 19, "1.5", "1e3"]


@pytest.mark.parametrize(("param", "route"), [
    ("layer", "/drilldown?run=exp/naive&"), ("step", "/timeline?run=exp/naive&"), ("step", "/memory?run=exp/naive&"),
    ("limit", "/timeline?run=exp/naive&"), ("start_us", "/timeline?run=exp/naive&"),
    ("end_us", "/timeline?run=exp/naive&"), ("margin", "/ranks?run=exp/naive&"),
])
def test_hostile_numbers(client: Client, param: str, route: str) -> None:
    values = NOT_NUMBERS + (NOT_INT64 if param in ("layer", "step", "limit") else [])
    _assert_refused(client, [f"{route}{param}={quote(v, safe='')}" for v in values])


# -- static paths ---------------------------------------------------------------------------
STATIC_HOSTILE = [
    # were TRAVERSAL in test_plugin.py
    "/static/../plugin.py", "/static/..%2Fplugin.py", "/static/%2e%2e/plugin.py", "/static/%2e%2e%2fplugin.py",
    "/static//etc/passwd", "/static/%2Fetc%2Fpasswd", "/static/..\\server/plugin.py", "/static/.hidden", "/static/",
    "/static/nope.js",
    # double encoding, encoded backslash and NUL, dot variants, lookalikes, absolute paths
    "/static/%252e%252e/plugin.py", "/static/%252e%252e%252fplugin.py", "/static/..%5cplugin.py",
    "/static/%2e%2e%5cplugin.py", "/static/index.js%00", "/static/index.js%00.png", "/static/%00",
    "/static/.%2e/plugin.py", "/static/%2e./plugin.py", "/static/..../plugin.py", "/static/....//plugin.py",
    "/static/./index.js", "/static/index.js/", "/static/index.js/..", "/static/LICENSES.txt/../../plugin.py",
    "/static/" + "%2e%2e%2f" * 12 + "etc/passwd", "/static/" + "../" * 12 + "etc/passwd",
    "/static/%c0%ae%c0%ae/plugin.py", "/static/%ef%bc%8e%ef%bc%8e/plugin.py", "/static/%e2%80%a5/plugin.py",
    "/static/" + quote(os.path.join(os.path.dirname(STATIC_DIR), "server/plugin.py")),
    "/static/" + quote(os.path.join(os.path.dirname(STATIC_DIR), "server/plugin.py"), safe=""),
    "/static/" + "a" * 10_000, "/static/" + "a/" * 3000 + "index.js", "/static/~", "/static/*",
    "/index.js/../plugin.py", "/index.js%2f..%2fplugin.py", "/plugin.py", "/static%2f..%2fplugin.py",
]


@pytest.mark.parametrize("url", STATIC_HOSTILE, ids=[u[:60] for u in STATIC_HOSTILE])
def test_static_paths_stay_in_the_static_directory(client: Client, url: str) -> None:
    _assert_refused(client, [url])


def test_static_assets_are_served(client: Client) -> None:
    """The refusals above are not because the static route serves nothing."""
    for url in ("/index.js", "/static/index.js", "/static/LICENSES.txt"):
        status, body = _fetch(client, url)
        assert status == 200 and body


@pytest.mark.parametrize("rel", ["index.js", "LICENSES.txt"])
def test_safe_static_path_accepts_assets(rel: str) -> None:
    assert plugin_module._safe_static_path(rel) == os.path.realpath(os.path.join(STATIC_DIR, rel))


@pytest.mark.parametrize("rel", ["", ".", "..", "../plugin.py", "a/../index.js", "/index.js", "index.js\x00",
                                 "..\\server/plugin.py", "%2e%2e/plugin.py", ".hidden", "index.js/", "x" * 10_000])
def test_safe_static_path_refuses(rel: str) -> None:
    assert plugin_module._safe_static_path(rel) is None


# -- symlink escapes ------------------------------------------------------------------------
def test_links_out_of_the_logdir_are_not_followed(client: Client, site: Site) -> None:
    c = quote(site.canary_file)
    _assert_refused(client, [
        "/summary?run=linked", f"/trace?run=linked&file={c}", "/drilldown?run=linked&layer=0",
        f"/trace?run=exp/mixed&file={c}", "/trace?run=exp/mixed&file=evil.1.pt.trace.json",
        "/summary?run=exp/mixed&worker=evil", "/timeline?run=exp/mixed&worker=evil",
        "/trace?run=exp/mixed&file=tb_attn_run.json", "/trace?run=.&file=top.1.pt.trace.json",
        f"/trace?run=exp/naive/sub&file={c}", "/summary?run=exp/naive/sub",
    ])
    for url in ("/summary?run=exp/mixed", "/drilldown?run=exp/mixed&layer=0&phase=softmax",
                "/timeline?run=exp/mixed", f"/trace?run=exp/mixed&file={quote(site.file)}",
                "/compare?runs=exp/mixed,exp/naive", "/summary?run=exp/naive"):
        status, body = _fetch(client, url)
        assert status == 200 and CANARY not in body, (url, status, body[:200])


def _swap_in(path: Path, target: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        path.rename(path.with_name(path.name + ".moved"))
    else:
        path.unlink()
    path.symlink_to(target, target_is_directory=target.is_dir())


@pytest.mark.parametrize("what", ["trace file", "run directory"])
def test_a_link_swapped_in_after_listing_is_not_followed(tmp_path: Path, site: Site, what: str) -> None:
    logdir = tmp_path / "logdir"
    shutil.copytree(site.logdir / "exp" / "naive", logdir / "victim", symlinks=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    # The canary trace under the victim's file name, so a stale listing's path leads to it.
    shutil.copy(site.outside / "run" / site.canary_file, outside / site.file)
    client = plugin_client(logdir, scan_ttl_s=3600.0)
    status, _ = _fetch(client, "/runs")
    assert status == 200
    if what == "trace file":
        _swap_in(logdir / "victim" / site.file, outside / site.file)
    else:
        _swap_in(logdir / "victim", outside)
    for url in (f"/trace?run=victim&file={quote(site.file)}", "/summary?run=victim",
                "/drilldown?run=victim&layer=0&phase=softmax"):
        _, body = _fetch(client, url)
        assert CANARY not in body, url


# -- never writes ---------------------------------------------------------------------------
def _snapshot(root: Path) -> dict[str, tuple[int, int, int]]:
    """(size, mtime_ns, mode) of every entry under root, links themselves not followed."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [".", *dirnames, *filenames]:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            out[os.path.relpath(path, root)] = (st.st_size, st.st_mtime_ns, st.st_mode)
    return out


def _valid_urls(file: str) -> list[str]:
    """One good request per route and option."""
    return ["/runs", "/runs?refresh=1", "/metadata?run=exp/naive", "/metadata?run=exp/mixed",
            "/summary?run=exp/naive", "/summary?run=exp/mixed", "/ranks?run=exp/naive",
            "/drilldown?run=exp/naive&layer=0&phase=softmax", "/drilldown?run=exp/naive&layer=0&backward=1",
            "/memory?run=exp/naive", "/timeline?run=exp/naive", "/timeline?run=exp/sdpa&limit=5",
            f"/trace?run=exp/naive&file={quote(file)}", "/compare?runs=exp/naive,exp/sdpa,exp/mixed",
            "/compare?runs=exp/naive,exp/sdpa&baseline=exp/sdpa", "/scaling?runs=exp/naive,exp/sdpa",
            "/strategies?runs=exp/naive,exp/sdpa", "/strategies?runs=exp/naive,exp/sdpa&baseline=sdpa&rel_tol=0.05",
            "/index.js", "/static/index.js"]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tb_attn_plugin.cli", *args], capture_output=True, text=True,
                          timeout=300)


def test_routes_and_cli_never_write_into_the_logdir(site: Site) -> None:
    before = _snapshot(site.root)
    client = plugin_client(site.logdir)  # a fresh service: every trace is parsed again
    for url in _valid_urls(site.file):
        status, body = _fetch(client, url)
        assert status == 200 and CANARY not in body, (url, status, body[:200])
    for command in ("summarize", "compare"):
        out = _cli(command, str(site.logdir), "--format", "json")
        assert out.returncode == 0, out.stderr[-2000:]
        assert CANARY not in out.stdout and "exp/naive" in out.stdout
    assert _snapshot(site.root) == before


#: Drives every route over a read-only logdir, in a process that cannot write there (run without
#: capabilities when we are root: root's bypass of file permissions is a capability).
READ_ONLY_CHILD = r"""
import json, os, subprocess, sys
sys.path.insert(0, sys.argv[3])
logdir, urls = sys.argv[1], json.loads(sys.argv[2])
try:
    open(os.path.join(logdir, "probe"), "w").close()
except OSError:
    pass
else:
    os.unlink(os.path.join(logdir, "probe"))
    sys.exit(77)  # chmod does not stop this process: the check would prove nothing
from webtools import BASE, get, plugin_client
client = plugin_client(logdir)
results = {url: get(client, BASE + url).status_code for url in urls}
for command in ("summarize", "compare"):
    out = subprocess.run([sys.executable, "-m", "tb_attn_plugin.cli", command, logdir, "--format", "json"],
                         capture_output=True, text=True)
    results["cli " + command] = 200 if out.returncode == 0 else out.returncode
print("RESULT " + json.dumps(results))
"""


@pytest.fixture
def read_only_copy(tmp_path: Path, site: Site) -> Iterator[Path]:
    copy = tmp_path / "logdir"
    shutil.copytree(site.logdir, copy, symlinks=True)
    entries = [Path(d) / n for d, dirs, files in os.walk(copy) for n in [*dirs, *files]] + [copy]
    for p in entries:
        if not p.is_symlink():
            p.chmod(stat.S_IMODE(p.stat().st_mode) & ~0o222)
    try:
        yield copy
    finally:
        for p in entries:
            if not p.is_symlink():
                p.chmod(stat.S_IMODE(p.stat().st_mode) | 0o200)


def test_routes_and_cli_work_on_a_read_only_logdir(read_only_copy: Path, site: Site) -> None:
    prefix: list[str] = []
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root, which ignores file modes, and no setpriv to drop that")
        prefix = [setpriv, "--inh-caps=-all", "--bounding-set=-all"]
    before = _snapshot(read_only_copy)
    urls = _valid_urls(site.file)
    out = subprocess.run([*prefix, sys.executable, "-c", READ_ONLY_CHILD, str(read_only_copy), json.dumps(urls),
                          str(TESTS_DIR)], capture_output=True, text=True, timeout=300)
    if out.returncode == 77:
        pytest.skip("this process can write into a read-only directory; the check would prove nothing")
    assert out.returncode == 0, out.stderr[-3000:]
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("RESULT "))
    results = json.loads(line[len("RESULT "):])
    assert results == {**{url: 200 for url in urls}, "cli summarize": 200, "cli compare": 200}
    assert _snapshot(read_only_copy) == before


# -- hostile run metadata -------------------------------------------------------------------
def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


HOSTILE_METADATA: dict[str, str | bytes] = {
    "nested 100k deep": _deep(100_000),
    "nested 980 deep in an object": '{"user": "u", "x": ' + _deep(980) + "}",
    "nested 900 deep in an object": '{"user": "u", "x": ' + _deep(900) + "}",
    "nested 500 deep in an object": '{"user": "u", "x": ' + _deep(500) + "}",
    "2**200, NaN, Infinity": f'{{"user": "u", "seq": {2**200}, "a": NaN, "b": -Infinity}}',
    "5000 digits": '{"user": "u", "seq": ' + "9" * 5000 + "}",
    "over 1 MiB": '{"user": "' + "u" * (1 << 20) + '"}',
    "invalid UTF-8": b'{"user": "\xff\xfe"}',
    "an array": '["user"]',
    "duplicate keys": '{"user": 1, "user": "u"}',
    "hostile accuracy": '{"config": {"seq": 16, "impl": "naive"}, "accuracy": {"rel_l1": ' + "9" * 400
                        + ', "max_abs": -1, "cosine": "x", "loss_diff": NaN, "layers": ' + _deep(900) + "}}",
    "accuracy not an object": '{"config": {"seq": 16}, "accuracy": [1, 2, 3]}',
}


@pytest.mark.parametrize("name", [
    n for n in HOSTILE_METADATA], ids=list(HOSTILE_METADATA))
def test_hostile_run_metadata_is_read_within_bounds(tmp_path: Path, site: Site, name: str) -> None:
    logdir = tmp_path / "logdir"
    shutil.copytree(site.logdir / "exp" / "naive", logdir / "run", symlinks=True)
    text = HOSTILE_METADATA[name]
    (logdir / "run" / "tb_attn_run.json").write_bytes(text.encode() if isinstance(text, str) else text)
    shutil.copytree(site.logdir / "exp" / "sdpa", logdir / "other")
    client = plugin_client(logdir)
    for url in ("/runs", "/metadata?run=run", "/summary?run=run", "/compare?runs=run,other", "/scaling?runs=run,other",
                "/ranks?run=run", "/strategies?runs=run,other"):
        status, body = _fetch(client, url)
        assert status == 200, (url, status, body[:300])
