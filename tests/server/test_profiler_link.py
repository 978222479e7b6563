"""The names the drill-down's link gives torch-tb-profiler's tab (``profiler_link.py``): written out
by hand for ``tensorboard_trace_handler``'s file names, and, where torch-tb-profiler is installed,
the same as its own loader lists."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tb_attn_plugin.server.profiler_link import profiler_link, profiler_run_name, profiler_span
from tb_attn_plugin.trace.discover import Run, TraceFile, find_runs
from tb_attn_plugin.trace.io import FileInfo

# One run directory as tensorboard_trace_handler and other tools write it.
FILES = [
    "host_1.1796341427976271408.pt.trace.json",  # three spans of host_1, named by time.time_ns()
    "host_1.1796341427976271409.pt.trace.json.gz",
    "host_1.1796341427976271400.pt.trace.json",
    "short.999.pt.trace.json",  # digits sort as strings: "10" comes before "999"
    "short.10.pt.trace.json",
    "solo.pt.trace.json",  # no span
    "mixed.pt.trace.json",  # one file without a span, one with
    "mixed.7.pt.trace.json",
    "dotted.name.5.pt.trace.json",  # worker "dotted.name"
]
EXPECTED = {  # file -> (span as the tab lists it, spans the worker has there)
    "host_1.1796341427976271408.pt.trace.json": ("2", 3),
    "host_1.1796341427976271409.pt.trace.json.gz": ("3", 3),
    "host_1.1796341427976271400.pt.trace.json": ("1", 3),
    "short.999.pt.trace.json": ("2", 2),
    "short.10.pt.trace.json": ("1", 2),
    "solo.pt.trace.json": ("default", 1),
    "mixed.pt.trace.json": ("default", 2),
    "mixed.7.pt.trace.json": ("1", 2),
    "dotted.name.5.pt.trace.json": ("1", 1),
}


def _run(root: str, names: list[str], sub: str = "exp/a") -> Run:
    base = f"{root}/{sub}" if sub != "." else root
    (run,) = find_runs(root, [FileInfo(f"{base}/{n}", 1, 0.0) for n in names])
    return run


def _file(run: Run, name: str) -> TraceFile:
    (found,) = [f for f in run.files if f.name == name]
    return found


def test_spans_are_named_by_their_rank_among_the_workers_files() -> None:
    run = _run("/logs", FILES)
    assert {f.name: profiler_span(run.files, f) for f in run.files} == EXPECTED
    link = profiler_link(run, _file(run, "dotted.name.5.pt.trace.json"), "/logs")
    assert link is not None and (link.plugin, link.run, link.worker, link.span, link.span_count) == (
        "pytorch_profiler", "exp/a", "dotted.name", "1", 1)


def test_a_trace_found_by_its_content_has_no_link_and_no_span_there() -> None:
    """torch-tb-profiler lists ``*.pt.trace.json[.gz]`` only: Accelerate's ``profile_0.json`` is
    not in its tab, and does not count among a worker's spans there."""
    traces = {"/logs/exp/a/profile_0.json", "/logs/exp/a/w.json"}
    (run,) = find_runs("/logs", [FileInfo(f"/logs/exp/a/{n}", 1, 0.0)
                                 for n in ("profile_0.json", "w.json", "w.7.pt.trace.json")], traces=traces)
    assert profiler_link(run, _file(run, "profile_0.json"), "/logs") is None
    assert profiler_span(run.files, _file(run, "w.7.pt.trace.json")) == ("1", 1)
    link = profiler_link(run, _file(run, "w.7.pt.trace.json"), "/logs")
    assert link is not None and (link.worker, link.span, link.span_count) == ("w", "1", 1)


def test_equal_digits_take_the_last_rank_as_there() -> None:
    run = _run("/logs", ["w.5.pt.trace.json", "w.5.pt.trace.json.gz", "w.6.pt.trace.json"])
    assert [profiler_span(run.files, f) for f in run.files] == [("2", 2), ("2", 2), ("3", 2)]


def test_the_logdir_itself_is_named_by_its_last_component(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert profiler_run_name("exp/a", "/logs") == "exp/a"
    assert profiler_run_name(".", "/data/logs/") == "logs"
    assert profiler_run_name(".", "s3://bucket/team/logs/") == "logs"
    monkeypatch.chdir(tmp_path)
    assert profiler_run_name(".", "relative/runs") == "runs"
    assert profiler_run_name(".", ".") == tmp_path.name
    run = _run("/data/logs", ["w.1.pt.trace.json"], sub=".")
    link = profiler_link(run, run.files[0], "/data/logs")
    assert run.name == "." and link is not None and link.run == "logs"


# -- torch-tb-profiler's own names ------------------------------------------------------------

def _their_names(logdir: Path, run_dir: Path) -> tuple[str, dict[str, list[str]]]:
    """The run name and each worker's spans as torch-tb-profiler 0.4.3 lists them: its loader's
    code, with the parsing of each file replaced by an empty profile of the worker and span it
    was given."""
    from torch_tb_profiler import io as tb_io
    from torch_tb_profiler.plugin import TorchProfilerPlugin
    from torch_tb_profiler.profiler import loader as tb_loader
    from torch_tb_profiler.run import RunProfile

    class Parsed:
        def __init__(self, target: Any, args: tuple[str, int | None, str]) -> None:
            self.loader, self.args = target.__self__, args

        def start(self) -> None:
            worker, span, _ = self.args
            self.loader.queue.put((RunProfile(worker, span), None))

    plugin = SimpleNamespace(logdir=tb_io.abspath(str(logdir).rstrip("/")))
    name = TorchProfilerPlugin._get_run_name(plugin, str(run_dir))
    original = tb_loader.Process
    tb_loader.Process = Parsed
    try:
        run = tb_loader.RunLoader(name, str(run_dir), None).load()
    finally:
        tb_loader.Process = original
    workers = sorted({w for w, _ in run.profiles})
    return name, {w: sorted(s for x, s in run.profiles if x == w) for w in workers}


@pytest.mark.skipif(importlib.util.find_spec("torch_tb_profiler") is None,
                    reason="torch-tb-profiler is not installed (the [profiler-tab] extra)")
@pytest.mark.parametrize("sub", ["exp/a", "."])
def test_the_names_are_the_ones_torch_tb_profiler_lists(tmp_path: Path, sub: str) -> None:
    logdir = tmp_path / "logs"
    run_dir = logdir / sub
    run_dir.mkdir(parents=True)
    for name in FILES:
        (run_dir / name).write_text("{}")
    their_run, their_spans = _their_names(logdir, run_dir.resolve() if sub == "." else run_dir)
    (run,) = find_runs(str(logdir), [FileInfo(os.path.join(d, f), 1, 0.0)
                                     for d, _, fs in os.walk(logdir) for f in fs])
    ours: dict[str, list[str]] = {}
    for f in run.files:
        link = profiler_link(run, f, str(logdir))
        assert link is not None and link.run == their_run
        assert link.span_count == len(their_spans[link.worker])
        ours.setdefault(link.worker, []).append(link.span)
    assert {w: sorted(set(s)) for w, s in ours.items()} == their_spans
