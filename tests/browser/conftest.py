"""Browser tests: a real ``tensorboard --logdir`` on a free loopback port (``devtools.tbserver``),
and headless Chromium.

Chromium is Debian's (/usr/bin/chromium, installed by ``make test``); no browser is ever
downloaded. Screenshots go to ``test-artifacts/`` at the repository root.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devtools.tbserver import TensorBoard

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
HOSTILE_RUN = '<img src=x onerror="window.__xss=1">'
#: Replaces "aten::softmax" in the hostile run's trace (no quote or backslash: the JSON stays valid).
HOSTILE_OP = "<script>window.__xss=2</script>"
#: The hostile run's metadata "user".
HOSTILE_USER = '<svg onload="window.__xss=3">'
VIEWPORT = {"width": 1400, "height": 1400}


@pytest.fixture(scope="session")
def browser_logdir(tmp_path_factory: pytest.TempPathFactory, builtin_logdir: Path) -> Path:
    logdir = tmp_path_factory.mktemp("browser-logdir")
    for run in ("naive", "sdpa", "sdpa-math", "naive-per-head"):
        shutil.copytree(builtin_logdir / run, logdir / "demo" / run)
    broken = logdir / "broken" / "not-a-trace"
    broken.mkdir(parents=True)
    (broken / "w.1.pt.trace.json").write_text("this is not a trace")
    old = time.time() - 3600
    os.utime(broken / "w.1.pt.trace.json", (old, old))
    _write_hostile_run(builtin_logdir / "naive", logdir / HOSTILE_RUN)
    return logdir


def _write_hostile_run(source: Path, target: Path) -> None:
    """A copy of a runner run whose directory name, op names and user are HTML."""
    target.mkdir(parents=True)
    for f in source.iterdir():
        text = f.read_text()
        if f.name.endswith(".pt.trace.json"):
            assert '"aten::softmax"' in text, f"{f} has no aten::softmax to replace"
            text = text.replace('"aten::softmax"', json.dumps(HOSTILE_OP))
            json.loads(text)
        elif f.name == "tb_attn_run.json":
            meta = json.loads(text)
            meta["user"] = HOSTILE_USER
            text = json.dumps(meta)
        (target / f.name).write_text(text)


@pytest.fixture(scope="session")
def tensorboard(browser_logdir: Path) -> Iterator[TensorBoard]:
    with TensorBoard(browser_logdir) as tb:
        yield tb


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: `make test` installs Debian's chromium (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                              args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        yield b
        b.close()


@pytest.fixture(scope="session")
def hostile() -> dict[str, str]:
    """The hostile run's name, op name and user, as browser_logdir writes them."""
    return {"run": HOSTILE_RUN, "op": HOSTILE_OP, "user": HOSTILE_USER}


@pytest.fixture(scope="session")
def prefixed_tensorboard(browser_logdir: Path) -> Iterator[TensorBoard]:
    """A second TensorBoard over the same logdir, served under --path_prefix=/tb."""
    with TensorBoard(browser_logdir, path_prefix="/tb") as tb:
        yield tb


@pytest.fixture(scope="session")
def browser_context(browser: Any) -> Iterator[Any]:
    """One context for the module: TensorBoard's own bundle is fetched once and then cached.
    Each test still gets its own page, so its own sessionStorage (the tab's persisted view)."""
    context = browser.new_context(viewport=VIEWPORT)
    yield context
    context.close()


@pytest.fixture
def page(browser_context: Any) -> Iterator[Any]:
    """A fresh page; uncaught script errors in it (TensorBoard's or the tab's) fail the test.

    Errors of torch-tb-profiler's frontend are left out: offline it cannot load Google Charts
    from its CDN, and the drill-down's link opens that tab."""
    page = browser_context.new_page()
    page.set_default_timeout(20_000)
    errors: list[str] = []

    def on_error(exc: Any) -> None:
        if "/data/plugin/pytorch_profiler/" not in (exc.stack or ""):
            errors.append(f"{exc.name}: {exc.message}\n{exc.stack}")

    page.on("pageerror", on_error)
    yield page
    page.close()
    if errors:
        pytest.fail("uncaught script errors in the page:\n" + "\n".join(errors))


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed browser test carries what its TensorBoard servers printed (a 500's traceback)."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.when == "call" and report.failed:
        for name, value in getattr(item, "funcargs", {}).items():
            if isinstance(value, TensorBoard):
                report.sections.append((f"tensorboard output ({name})", value.output(20000)))
