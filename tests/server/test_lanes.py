"""The tab's background work (``server/lanes.py``): one parse job per file, shared; a route's
schedule of the engine's pipeline that waits ``wait_s`` and then answers "loading"; and files
that left the logdir refused."""

from __future__ import annotations

import shutil
import threading
from collections import Counter
from pathlib import Path

import pytest
from helpers import HAND_TRACES

from tb_attn_plugin.engine.workspace import Workspace
from tb_attn_plugin.server.http_status import Loading
from tb_attn_plugin.server.jobs import Jobs
from tb_attn_plugin.server.lanes import Lanes
from tb_attn_plugin.trace.discover import TraceFile
from tb_attn_plugin.trace.events import ReadError
from tb_attn_plugin.types.schema import WorkerSummary

WAIT_S = 30.0


@pytest.fixture
def logdir(tmp_path: Path) -> Path:
    for run in ("naive", "other"):
        (tmp_path / "logs" / run).mkdir(parents=True)
        shutil.copy(HAND_TRACES / "findings_cpu_mixed.json", tmp_path / "logs" / run / "host_1.1.pt.trace.json")
    return tmp_path / "logs"


def _lanes(logdir: Path, wait_s: float, **kwargs: object) -> Lanes:
    return Lanes(Workspace(str(logdir), **kwargs), Jobs(2), str(logdir), wait_s)  # type: ignore[arg-type]


def test_a_route_answers_loading_while_its_parse_runs_then_the_same_job_delivers(
        logdir: Path, gated: tuple[threading.Event, Counter[str]]) -> None:
    gate, calls = gated
    lanes = _lanes(logdir, 0.01)
    runs = lanes.engine.runs()
    with pytest.raises(Loading) as raised:
        lanes.engine.summaries(runs, metadata=[None, None], schedule=lanes.route(runs, None))
    assert (raised.value.runs, raised.value.files) == (["naive", "other"], 2) and raised.value.pending >= 1
    gate.set()
    lanes.wait_s = WAIT_S
    got = lanes.engine.summaries(runs, metadata=[None, None], schedule=lanes.route(runs, None))
    assert [s.run for s in got] == ["naive", "other"] and all(s.workers for s in got)
    assert calls == Counter({"naive": 1, "other": 1})  # the held job delivered: no second parse


def test_the_summary_cache_batch_leaves_a_running_file_to_its_job(
        logdir: Path, tmp_path: Path, gated: tuple[threading.Event, Counter[str]]) -> None:
    gate, calls = gated
    lanes = _lanes(logdir, 0.01, cache_dir=str(tmp_path / "cache"))
    runs = lanes.engine.runs()
    naive = next(r for r in runs if r.name == "naive")
    held = lanes.parse(naive, naive.files[0], None)
    asked: list[list[str]] = []
    route = lanes.route(runs, None)

    def read(traces: list[TraceFile]) -> dict[TraceFile, WorkerSummary]:
        asked.append([t.path.split("/")[-2] for t in traces])
        return {}

    got = route.from_summary_cache([r.files[0] for r in runs], read)
    assert got == {} and asked == [["other"]] and not held.done()  # naive's job reads it
    gate.set()
    assert held.result(WAIT_S).summary.layers and calls["naive"] == 1


def test_a_file_whose_directory_left_the_logdir_is_refused(logdir: Path, tmp_path: Path) -> None:
    lanes = _lanes(logdir, WAIT_S)
    outside = TraceFile(str(tmp_path / "elsewhere" / "host_1.1.pt.trace.json"), "host_1.1.pt.trace.json", "host_1",
                        "1", 10, 1.0)
    with pytest.raises(ReadError, match="no longer inside the log directory"):
        lanes.confine(outside)
    (run,) = [r for r in lanes.engine.runs() if r.name == "naive"]
    lanes.confine(run.files[0])  # inside: no error
