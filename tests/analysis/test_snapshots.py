"""Every public trace, every runner trace of the model corpus and every hand-written trace give
exactly what is stored for it in ``snapshots/<case>.json``: the decoded columns (dtype, length
and digest of each) and what ``tb-attn summarize PATH --format json`` prints, findings, roofline,
headline, generation, masks and run metadata included, with its exit code. PATH is the trace
file, or for a corpus trace the logdir the corpus tool wrote it into (so the run's
``tb_attn_run.json`` is read). The CLI runs in this process (``cli.main``), and
``test_in_process_output_is_the_real_cli_output`` holds that to the ``tb-attn`` program's output.

A change that alters any figure fails here, naming each JSON path that changed with its stored
and new value (the first 30). Snapshots are sorted-key JSON, one file per trace, so that their
diff can be read. Regenerate only on purpose, then review ``git diff tests/analysis/snapshots``:

    TB_ATTN_REGEN_SNAPSHOTS=1 pytest tests/analysis/test_snapshots.py

The stored traces are fixed and nothing of this machine enters the output (peaks come from the
trace's device or the run's metadata, names are relative), so a fresh clone elsewhere gives the
same files.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import hashlib
import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import SHARED_TRACES

from devtools.corpus import TRACES as CORPUS_TRACES
from tb_attn_plugin.cli import main as cli
from tb_attn_plugin.engine.loader import load_events
from tb_attn_plugin.trace.events import Events

HERE = Path(__file__).resolve().parent
SNAPSHOTS = HERE / "snapshots"
REGEN_ENV = "TB_ATTN_REGEN_SNAPSHOTS"
HAND_WRITTEN = HERE.parent / "traces"
#: How many changed paths a failure lists.
SHOWN = 30


def _cases() -> list[tuple[str, Path]]:
    shared = [(f"shared-{p.name.split('.')[0]}", p) for p in sorted(SHARED_TRACES.glob("*/*.json.gz"))]
    corpus = [(f"corpus-{p.relative_to(CORPUS_TRACES).parts[0]}", p)
              for p in sorted(CORPUS_TRACES.glob("*/**/*.pt.trace.json*"))]
    hand = [(f"hand-{p.stem}", p) for p in sorted(HAND_WRITTEN.glob("*.json"))]
    return shared + corpus + hand


CASES = _cases()


def cli_path(trace: Path) -> Path:
    """What ``tb-attn summarize`` is given for a trace: a corpus trace's logdir, else the file."""
    if trace.is_relative_to(CORPUS_TRACES):
        return CORPUS_TRACES / trace.relative_to(CORPUS_TRACES).parts[0]
    return trace


def summarize_json(path: Path) -> tuple[int, str]:
    """``tb-attn summarize PATH --format json`` run in this process: its exit code and stdout."""
    out = io.StringIO()
    collecting = gc.isenabled()
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("DASK_SCHEDULER_ADDRESS", raising=False)  # files are read here, as on a laptop
        mp.setenv("OPENBLAS_NUM_THREADS", os.environ.get("OPENBLAS_NUM_THREADS", "1"))  # main sets it: undone after
        try:
            with contextlib.redirect_stdout(out):
                code = cli.main(["summarize", str(path), "--format", "json", "--no-progress"])
        finally:
            if collecting:
                gc.enable()  # main turns the cyclic collector off for its short-lived process
    return code, out.getvalue()


def _digest(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()[:16]


def events_record(ev: Events) -> dict[str, Any]:
    """What decoding gave, compactly: each column's dtype, length and digest, the interned
    names, tracks and shapes in id order, the metadata and the diagnostics."""
    columns = ("name", "kind", "track", "ts", "dur", "ext", "corr", "seq", "shape", "mem_ts", "mem_track",
               "mem_bytes", "mem_total", "mem_device_type", "mem_device_id")
    return {
        "columns": {c: f"{getattr(ev, c).dtype}[{getattr(ev, c).size}] {_digest(getattr(ev, c))}" for c in columns},
        "names": hashlib.sha256("\0".join(ev.names).encode("utf-8", "surrogatepass")).hexdigest()[:16],
        "name_count": len(ev.names),
        "tracks": [[str(t.pid), str(t.tid), t.device] for t in ev.tracks],
        "shapes": hashlib.sha256(repr(ev.shapes).encode("utf-8", "surrogatepass")).hexdigest()[:16],
        "shape_count": len(ev.shapes),
        "meta": repr(ev.meta),
        "diagnostics": dict(sorted(ev.diagnostics.items())),
    }


def snapshot(trace: Path) -> dict[str, Any]:
    """The record of one trace that is stored and compared: plain JSON values."""
    code, text = summarize_json(cli_path(trace))
    return {"events": json.loads(json.dumps(events_record(load_events(str(trace))))),
            "exit_code": code, "summarize": json.loads(text)}


def dump(record: dict[str, Any]) -> str:
    """A snapshot file's text: sorted keys, one value a line, ASCII, floats as json writes them."""
    return json.dumps(record, indent=1, sort_keys=True) + "\n"


class _Absent:
    def __repr__(self) -> str:
        return "(absent)"


ABSENT: Any = _Absent()


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if key.isidentifier() else f"{path}[{json.dumps(key)}]"


def differences(stored: Any, now: Any, path: str = "$") -> Iterator[tuple[str, Any, Any]]:
    """Each JSON path whose value differs, with its stored and its new value (``ABSENT`` where one
    side has no such key or item), in key order. A list whose length changed is reported as
    ``len(path)`` too. Types count: ``1`` and ``1.0``, ``true`` and ``1`` differ."""
    if isinstance(stored, dict) and isinstance(now, dict):
        for key in sorted(stored.keys() | now.keys()):
            yield from differences(stored.get(key, ABSENT), now.get(key, ABSENT), _child(path, key))
    elif isinstance(stored, list) and isinstance(now, list):
        if len(stored) != len(now):
            yield f"len({path})", len(stored), len(now)
        for i in range(max(len(stored), len(now))):
            yield from differences(stored[i] if i < len(stored) else ABSENT, now[i] if i < len(now) else ABSENT,
                                   f"{path}[{i}]")
    elif type(stored) is not type(now) or stored != now:
        yield path, stored, now


def _value(v: Any, start: int = 0) -> str:
    """``v`` as JSON, from about ``start`` characters in, cut to 100 characters."""
    text = repr(v) if v is ABSENT else json.dumps(v, sort_keys=True)
    if len(text) <= 100:
        return text
    start = max(0, min(start - 30, len(text) - 99))
    end = min(start + 99, len(text))
    return ("…" if start else "") + text[start + bool(start):end - (end < len(text))] + ("…" if end < len(text) else "")


def _first_change(a: Any, b: Any) -> int:
    """Where two texts part (0 for anything else): a long string is shown from there."""
    if not (isinstance(a, str) and isinstance(b, str)):
        return 0
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def describe(diffs: list[tuple[str, Any, Any]]) -> str:
    """The first ``SHOWN`` differences, one a line: ``path: stored -> now``."""
    head = f"{len(diffs)} paths differ" + (f" (the first {SHOWN})" if len(diffs) > SHOWN else "")
    lines = [head + ", stored -> now:"]
    for path, a, b in diffs[:SHOWN]:
        at = _first_change(a, b)
        lines.append(f"  {path}: {_value(a, at)} -> {_value(b, at)}")
    return "\n".join(lines)


def test_cases_cover_every_trace() -> None:
    groups = {name.split("-")[0] for name, _ in CASES}
    assert groups == {"shared", "corpus", "hand"}, groups
    assert sum(name.startswith("shared-") for name, _ in CASES) == 10
    assert sum(name.startswith("corpus-") for name, _ in CASES) >= 21
    assert len({name for name, _ in CASES}) == len(CASES)
    assert len({cli_path(path) for _, path in CASES}) == len(CASES)  # one corpus trace per logdir


def test_every_snapshot_has_its_trace() -> None:
    stale = {p.name for p in SNAPSHOTS.iterdir()} - {f"{name}.json" for name, _ in CASES}
    assert not stale, f"snapshots of no trace (delete them): {sorted(stale)}"


@pytest.mark.parametrize(("name", "path"), CASES, ids=[n for n, _ in CASES])
def test_decoded_columns_and_cli_summary_as_stored(name: str, path: Path) -> None:
    actual = snapshot(path)
    stored = SNAPSHOTS / f"{name}.json"
    if os.environ.get(REGEN_ENV) == "1":
        SNAPSHOTS.mkdir(exist_ok=True)
        stored.write_bytes(dump(actual).encode("ascii"))
        return
    if not stored.exists():
        pytest.fail(f"no snapshot {stored.name}: run with {REGEN_ENV}=1 to write it, then review it")
    diffs = list(differences(json.loads(stored.read_bytes()), actual))
    assert not diffs, f"{name} differs from snapshots/{stored.name}: {describe(diffs)}"


@pytest.mark.parametrize("name", ["corpus-hf-llama-sdpa-train", "shared-tracelens_h100_bert-small_sdpa-flash",
                                  "hand-findings_gpu_fused"])
def test_in_process_output_is_the_real_cli_output(name: str, tmp_path: Path) -> None:
    """The snapshots' in-process run prints, byte for byte, what the installed ``tb-attn`` prints."""
    path = cli_path(dict(CASES)[name])
    code, text = summarize_json(path)
    program = Path(sys.executable).with_name("tb-attn")  # the console script installed beside this Python
    assert program.exists(), f"no {program}: install the package (pip install -e .)"
    env = {k: v for k, v in os.environ.items() if k != "DASK_SCHEDULER_ADDRESS"}
    proc = subprocess.run([str(program), "summarize", str(path), "--format", "json"], capture_output=True,
                          text=True, cwd=tmp_path, env=env, timeout=120, check=False)
    assert (proc.returncode, proc.stdout) == (code, text), proc.stderr[-2000:]
    worker = json.loads(text)["runs"][0]["workers"][0]
    assert worker["findings"] and worker["roofline"] and worker["headline"], "a case that shows the whole summary"


def test_a_changed_figure_is_named_with_both_values() -> None:
    stored = json.loads((SNAPSHOTS / "hand-findings_cpu_compute.json").read_bytes())
    now = copy.deepcopy(stored)
    roof = now["summarize"]["runs"][0]["workers"][0]["roofline"]["attention"]
    before = roof["flops_per_s"]
    roof["flops_per_s"] = before * 1.01
    del now["summarize"]["runs"][0]["workers"][0]["findings"][-1]
    diffs = list(differences(stored, now))
    path = "$.summarize.runs[0].workers[0].roofline.attention.flops_per_s"
    assert (path, before, before * 1.01) in diffs
    findings = "$.summarize.runs[0].workers[0].findings"
    n = len(stored["summarize"]["runs"][0]["workers"][0]["findings"])
    assert (f"len({findings})", n, n - 1) in diffs
    assert all(p in (path, f"len({findings})") or p.startswith(f"{findings}[") for p, _, _ in diffs), diffs
    text = describe(diffs)
    assert f"  {path}: {json.dumps(before)} -> {json.dumps(before * 1.01)}" in text.splitlines()
    assert not list(differences(stored, copy.deepcopy(stored)))


def test_differences_name_keys_types_and_the_first_thirty() -> None:
    diffs = list(differences({"a": 1, "b c": [1, 2], "d": True}, {"a": 1.0, "b c": [1], "e": None}))
    assert diffs == [("$.a", 1, 1.0), ('len($["b c"])', 2, 1), ('$["b c"][1]', 2, ABSENT),
                     ("$.d", True, ABSENT), ("$.e", ABSENT, None)]
    many = list(differences(list(range(40)), [i + 1 for i in range(40)]))
    lines = describe(many).splitlines()
    assert lines[0] == f"40 paths differ (the first {SHOWN}), stored -> now:"
    assert len(lines) == 1 + SHOWN and lines[1] == "  $[0]: 0 -> 1"
    (line,) = describe(list(differences(["x" * 150 + "ab"], ["x" * 150 + "cb"]))).splitlines()[1:]
    stored, now = line.removeprefix("  $[0]: ").split(" -> ")  # a long text, from near where it changed
    assert stored.startswith("…xx") and stored.endswith('xab"') and now.endswith('xcb"') and len(now) <= 100, line
