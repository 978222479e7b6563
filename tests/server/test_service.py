"""``Service`` answers the tab's routes over one logdir through its engine (``service.engine``) and
its job lanes; these tests drive it directly on small hand-written traces copied into a logdir."""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import HAND_TRACES
from tensorboard import errors

from tb_attn_plugin.engine.limits import Limits
from tb_attn_plugin.engine.loader import Loader
from tb_attn_plugin.engine.workspace import Parsed, Workspace
from tb_attn_plugin.server.service import POLL_RUNS_MS, Loading, Service
from tb_attn_plugin.trace.discover import TraceFile
from tb_attn_plugin.vocab.names import METADATA_FILE

#: Enough for any of these tiny parses, on a loaded machine: a route never answers "loading" here.
WAIT_S = 30.0
#: The runner's probes of a CPU, as run metadata carries them (``peaks.py``'s ``_probe_peaks``).
PROBES = {"device": "cpu", "gemm_flops_per_s": {"fp32": 2e11}, "copy_bytes_per_s": 3e10}
USER_PEAKS = (1e18, 1e15)
AN_HOUR_AGO = time.time() - 3600


def _trace(logdir: Path, run: str, name: str, source: str = "findings_cpu_mixed", *, old: bool = True) -> Path:
    """A hand-written trace copied into ``logdir/run/name``; ``old``: written an hour ago (a
    finished trace, not one still being written)."""
    path = logdir / run / name
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(HAND_TRACES / f"{source}.json", path)
    if old:
        os.utime(path, (AN_HOUR_AGO, AN_HOUR_AGO))
    return path


def _write(logdir: Path, run: str, name: str, text: str, *, old: bool = True) -> Path:
    path = logdir / run / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    if old:
        os.utime(path, (AN_HOUR_AGO, AN_HOUR_AGO))
    return path


@pytest.fixture
def logdir(tmp_path: Path) -> Path:
    """``mixed``: one trace with the runner's probes in its metadata; ``multi``: two workers,
    host_1 with spans 1 and 2, host_2 with span 1."""
    _trace(tmp_path, "mixed", "host_1.1.pt.trace.json")
    (tmp_path / "mixed" / METADATA_FILE).write_text(json.dumps({"status": "ok", "peaks": PROBES}))
    for name in ("host_1.1.pt.trace.json", "host_1.2.pt.trace.json", "host_2.1.pt.trace.json"):
        _trace(tmp_path, "multi", name)
    return tmp_path


def _statuses(service: Service) -> dict[str, tuple[str, str | None]]:
    return {r.run: (r.status, r.error) for r in service.runs_response(refresh=True).runs}


# -- run status -------------------------------------------------------------------------------
def test_a_run_is_unloaded_until_summarized_then_ready(logdir: Path) -> None:
    service = Service(str(logdir), wait_s=WAIT_S)
    listed = service.runs_response(refresh=False)
    assert {r.run: (r.status, r.error, r.parsing) for r in listed.runs} == {
        "mixed": ("unloaded", None, False), "multi": ("unloaded", None, False)}
    assert listed.poll_after_ms is None  # nothing parsed ahead (prefetch_files defaults to 0)
    summary = service.summary("mixed", None, None)
    (worker,) = summary.workers
    assert (summary.run, worker.worker, worker.span, worker.file) == ("mixed", "host_1", "1", "host_1.1.pt.trace.json")
    # The hand trace has one ProfilerStep#1 and two layer scopes (tbattn.v1/L0, tbattn.v1/L1).
    assert worker.step_count == 1 and len(worker.layers) == 2
    assert summary.metadata == {"status": "ok", "peaks": PROBES} and summary.errors == []
    assert _statuses(service) == {"mixed": ("ready", None), "multi": ("unloaded", None)}


def test_a_broken_trace_is_an_error_with_its_message_remembered(logdir: Path) -> None:
    _write(logdir, "broken", "w.1.pt.trace.json", "this is not a trace")
    service = Service(str(logdir), wait_s=WAIT_S)
    summary = service.summary("broken", None, None)
    assert summary.workers == [] and [e.file for e in summary.errors] == ["w.1.pt.trace.json"]
    message = summary.errors[0].error
    assert message.startswith("not JSON")
    assert _statuses(service)["broken"] == ("error", message)
    # The failure is kept per file version: asked again, the engine answers it without a parse.
    (trace,) = service.run("broken").files
    assert service.engine.cached(trace) == (None, message)


def test_a_truncated_trace_is_loading_while_fresh_and_an_error_once_old(logdir: Path) -> None:
    cut = (HAND_TRACES / "findings_cpu_mixed.json").read_text()[:300]
    _write(logdir, "fresh", "w.1.pt.trace.json", cut, old=False)
    _write(logdir, "stale", "w.1.pt.trace.json", cut, old=True)
    service = Service(str(logdir), wait_s=WAIT_S)
    for run in ("fresh", "stale"):
        (error,) = service.summary(run, None, None).errors
        assert "truncated" in error.error
    statuses = _statuses(service)
    # Modified under a minute ago (_RECENT_S): it may still be being written.
    assert statuses["fresh"] == ("loading", None)
    assert statuses["stale"][0] == "error" and "truncated" in (statuses["stale"][1] or "")


def test_running_metadata_wins_over_every_other_status(logdir: Path) -> None:
    _trace(logdir, "live", "w.1.pt.trace.json")
    (logdir / "live" / METADATA_FILE).write_text(json.dumps({"status": "running"}))
    _trace(logdir, "odd-meta", "w.1.pt.trace.json")
    (logdir / "odd-meta" / METADATA_FILE).write_text("[1, 2]")  # not an object: no metadata at all
    service = Service(str(logdir), wait_s=WAIT_S)
    assert _statuses(service)["live"] == ("running", None)
    assert service.summary("live", None, None).workers  # parsed and cached: still running, not ready
    statuses = _statuses(service)
    assert statuses["live"] == ("running", None) and statuses["odd-meta"] == ("unloaded", None)
    assert service.metadata(service.run("odd-meta")) is None


# -- choosing runs, workers, spans and files ----------------------------------------------------
def test_an_unknown_run_worker_or_span_is_not_found(logdir: Path) -> None:
    service = Service(str(logdir), wait_s=WAIT_S)
    with pytest.raises(errors.NotFoundError, match="no run named 'nope'"):
        service.summary("nope", None, None)
    with pytest.raises(errors.NotFoundError, match="no worker 'ghost' in run 'multi'"):
        service.summary("multi", "ghost", None)
    with pytest.raises(errors.NotFoundError, match="no span '9' in run 'multi'"):
        service.summary("multi", "host_1", "9")
    with pytest.raises(errors.NotFoundError, match="no span '2' in run 'multi'"):
        service.summary("multi", "host_2", "2")  # span 2 exists, but host_1's


def test_a_worker_and_a_span_narrow_the_summary(logdir: Path) -> None:
    service = Service(str(logdir), wait_s=WAIT_S)

    def picked(worker: str | None, span: str | None) -> list[tuple[str, str | None]]:
        return [(w.worker, w.span) for w in service.summary("multi", worker, span).workers]

    assert picked(None, None) == [("host_1", "1"), ("host_1", "2"), ("host_2", "1")]
    assert picked("host_1", None) == [("host_1", "1"), ("host_1", "2")]
    assert picked("host_1", "2") == [("host_1", "2")]
    assert picked(None, "1") == [("host_1", "1"), ("host_2", "1")]  # a span alone: every worker's


def test_trace_file_needs_a_choice_among_several(logdir: Path) -> None:
    service = Service(str(logdir), wait_s=WAIT_S)
    multi = service.run("multi")
    with pytest.raises(errors.InvalidArgumentError, match=r"pass worker and span \(host_1/1, host_1/2, host_2/1\)"):
        service.trace_file(multi, None, None)
    with pytest.raises(errors.InvalidArgumentError, match=r"\(host_1/1, host_1/2\)"):
        service.trace_file(multi, "host_1", None)
    with pytest.raises(errors.InvalidArgumentError, match=r"\(host_1/1, host_2/1\)"):
        service.trace_file(multi, None, "1")
    assert service.trace_file(multi, "host_1", "2").name == "host_1.2.pt.trace.json"
    assert service.trace_file(multi, "host_2", None).name == "host_2.1.pt.trace.json"  # its only trace
    assert service.trace_file(multi, None, "2").name == "host_1.2.pt.trace.json"  # the only span 2
    (only,) = service.run("mixed").files
    assert service.trace_file(service.run("mixed"), None, None) == only
    with pytest.raises(errors.NotFoundError, match="no worker 'ghost'"):
        service.trace_file(multi, "ghost", None)
    with pytest.raises(errors.NotFoundError, match="no span '7' for worker 'host_1'"):
        service.trace_file(multi, "host_1", "7")


def test_the_choices_named_stop_at_eight(tmp_path: Path) -> None:
    for span in range(1, 11):
        _write(tmp_path, "many", f"w.{span}.pt.trace.json", "{}")
    service = Service(str(tmp_path), wait_s=WAIT_S)
    with pytest.raises(errors.InvalidArgumentError) as raised:
        service.trace_file(service.run("many"), None, None)
    # Ten spans, sorted as numbers: the first eight are named, w/9 and w/10 are not.
    assert str(raised.value).endswith("(" + ", ".join(f"w/{s}" for s in range(1, 9)) + ")")


def test_downloads_name_a_file_of_the_run(logdir: Path) -> None:
    service = Service(str(logdir), wait_s=WAIT_S)
    found = service.trace_download("multi", "host_2.1.pt.trace.json")
    assert isinstance(found, TraceFile) and found.worker == "host_2"
    with pytest.raises(errors.NotFoundError, match=re.escape("no trace file 'host_9.1.pt.trace.json' in run 'multi'")):
        service.trace_download("multi", "host_9.1.pt.trace.json")
    assert json.loads(service.metadata_body("mixed"))["metadata"] == {"status": "ok", "peaks": PROBES}
    assert json.loads(service.metadata_body("multi"))["metadata"] is None


# -- waiting for a parse ---------------------------------------------------------------------
@pytest.fixture
def slow_parse(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[threading.Event, list[str]]]:
    """Every engine parse waits for the event (set at teardown too, so no job stays blocked);
    the parsed files' names are listed."""
    gate = threading.Event()
    parsed: list[str] = []
    real = Workspace.parse

    def parse(self: Workspace, trace: TraceFile, **kwargs: Any) -> Parsed:
        parsed.append(trace.name)
        assert gate.wait(WAIT_S), "the test never opened the gate"
        return real(self, trace, **kwargs)

    monkeypatch.setattr(Workspace, "parse", parse)
    yield gate, parsed
    gate.set()


def test_a_slow_parse_answers_loading_and_the_same_job_delivers(
        logdir: Path, slow_parse: tuple[threading.Event, list[str]]) -> None:
    gate, parsed = slow_parse
    service = Service(str(logdir), wait_s=0.01)
    with pytest.raises(Loading) as raised:
        service.summary("mixed", None, None)
    assert (raised.value.runs, raised.value.pending, raised.value.files) == (["mixed"], 1, 1)
    listed = {r.run: r for r in service.runs_response(refresh=False).runs}
    assert listed["mixed"].status == "loading" and listed["mixed"].parsing
    assert service.runs_response(refresh=False).poll_after_ms == POLL_RUNS_MS
    # A view of the same file waits for the same job: still one parse.
    with pytest.raises(Loading):
        service.memory("mixed", None, None, step=None)
    with pytest.raises(Loading):
        service.summary("mixed", None, None)
    assert parsed == ["host_1.1.pt.trace.json"]
    gate.set()
    service.wait_s = WAIT_S
    assert service.summary("mixed", None, None).workers[0].file == "host_1.1.pt.trace.json"
    assert service.memory("mixed", None, None, step=None)  # the analysis that parse kept
    assert parsed == ["host_1.1.pt.trace.json"]
    assert _statuses(service)["mixed"] == ("ready", None)


def test_loading_counts_the_files_still_pending_across_runs(
        logdir: Path, slow_parse: tuple[threading.Event, list[str]]) -> None:
    gate, parsed = slow_parse
    service = Service(str(logdir), wait_s=0.01)
    with pytest.raises(Loading) as raised:
        service.compare(["mixed", "multi"], None)
    # One trace in "mixed", three in "multi": four parses, all held.
    assert (raised.value.runs, raised.value.pending, raised.value.files) == (["mixed", "multi"], 4, 4)
    body = raised.value.body()
    assert (body.pending, body.files, body.runs) == (4, 4, ["mixed", "multi"])
    gate.set()
    service.wait_s = WAIT_S
    assert len(service.compare(["mixed", "multi"], None).runs) == 2
    assert sorted(parsed) == sorted(["host_1.1.pt.trace.json"] * 2 + ["host_1.2.pt.trace.json",
                                                                      "host_2.1.pt.trace.json"])


# -- the engine ------------------------------------------------------------------------------
class _Recorder:
    """Stands in for the service's engine: every attribute the service asks for is named, then
    taken from a real workspace."""

    def __init__(self, inner: Workspace) -> None:
        self.inner = inner
        self.asked: list[str] = []

    def __getattr__(self, name: str) -> Any:
        self.asked.append(name)
        return getattr(self.inner, name)


def test_the_service_reaches_the_engine_only_through_service_engine(logdir: Path) -> None:
    service = Service(str(logdir), wait_s=WAIT_S, max_trace_bytes=1 << 20, parse_timeout_s=7.0,
                      cache_bytes=1 << 26, keep_analyses=3, peaks=USER_PEAKS)
    built = service.engine
    assert isinstance(built, Workspace) and built.path == str(logdir) and built.peaks == USER_PEAKS
    assert built.limits == Limits(max_trace_bytes=1 << 20, parse_timeout_s=7.0, cache_bytes=1 << 26,
                                  keep_analyses=3)
    assert not any(isinstance(v, Loader) for v in vars(service).values())
    # Swap the engine before any request: if the service kept another way to the per-file caches
    # (the workspace's Loader), the workspace it built would have made its Loader by the end.
    recorder = _Recorder(Workspace(str(logdir), peaks=USER_PEAKS, limits=built.limits))
    service.engine = recorder  # type: ignore[assignment]
    service.runs_response(refresh=False)
    assert service.summary("mixed", None, None).workers
    assert service.memory("mixed", None, None, step=None)
    service.metadata_body("mixed")
    assert "_files" not in vars(built)  # its Loader (a cached_property) was never built
    assert "_files" in vars(recorder.inner)
    assert {"cached", "parse", "summaries", "cached_analysis", "metadata"} <= set(recorder.asked)
    assert not [name for name in recorder.asked if name.startswith("_")]


# -- peaks -----------------------------------------------------------------------------------
def test_user_peaks_draw_the_roofline_and_the_caches_keep_the_traces_own(logdir: Path) -> None:
    peaked = Service(str(logdir), wait_s=WAIT_S, peaks=USER_PEAKS)
    roofline = peaked.summary("mixed", None, None).workers[0].roofline
    assert roofline is not None and roofline.source == "given by --peak-flops and --peak-bw"
    # One FLOP/s for every peak class, and the bandwidth, as given.
    assert set(roofline.peak_flops.values()) == {1e18} and roofline.peak_bytes_per_s == 1e15
    # The summary cache keeps what the trace says; the user's peaks are applied on the way out.
    (trace,) = peaked.run("mixed").files
    kept = peaked.engine.cached(trace).summary
    assert kept is not None and kept.roofline is not None
    assert kept.roofline.source == "the runner's probes of this machine: matmul and copy"
    # A second service on the same logdir, without peaks, shows the trace's own: the probes.
    own = Service(str(logdir), wait_s=WAIT_S).summary("mixed", None, None).workers[0].roofline
    assert own is not None and own.source == "the runner's probes of this machine: matmul and copy"
    assert own.peak_flops == {"fp32": 2e11} and own.peak_bytes_per_s == 3e10
