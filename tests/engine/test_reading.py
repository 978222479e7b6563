"""Reading one trace file into events (``engine/reading.py``): gzip or plain, the size limit, a
bad file's one-line error, and decoding in parts equal to decoding in one process."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from helpers import SHARED_TRACES
from tracetools import trace_files

from tb_attn_plugin.engine.reading import load_events
from tb_attn_plugin.trace import parallel
from tb_attn_plugin.trace.events import TraceError

GOOD_GZ = SHARED_TRACES / "gpu" / "tracelens_h100_bert-small_sdpa-flash.json.gz"


def test_gzip_and_plain_decode_the_same(tmp_path: Path) -> None:
    plain = tmp_path / "w.1.pt.trace.json"
    plain.write_bytes(gzip.decompress(GOOD_GZ.read_bytes()))
    a, b = load_events(str(GOOD_GZ)), load_events(str(plain))
    assert len(a) == len(b) and a.names == b.names and (a.ts == b.ts).all()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "empty file"),
        (b"   \n", "empty file"),
        (b"hello world", "not JSON"),
        (b'{"a": 1}', "no traceEvents"),
        (b'{"traceEvents": []}', "no events"),
        (b'{\n  "traceEvents": [\n  {\n    "ph": "X", "name": "a", "ts": 1, "dur": 2\n  },\n  {\n    "ph"',
         "truncated"),
        (b"\x1f\x8b\x08\x00garbage-not-deflate", "gzip"),
        (gzip.compress(b'{"traceEvents": [{"ph": "X"}]}')[:-12], "truncated gzip"),
    ],
)
def test_bad_files_raise_trace_error(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "w.pt.trace.json"
    path.write_bytes(content)
    with pytest.raises(TraceError, match=message):
        load_events(str(path))


def test_size_limit_refuses_big_traces(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="larger than the limit"):
        load_events(str(GOOD_GZ), max_bytes=1 << 20)


def _same_events(a: object, b: object) -> bool:
    import numpy as np

    fields = ("name", "kind", "track", "ts", "dur", "ext", "corr", "seq", "shape", "mem_ts", "mem_track", "mem_bytes",
              "mem_total", "mem_device_type", "mem_device_id")
    return (a.names == b.names and a.tracks == b.tracks and a.shapes == b.shapes  # type: ignore[attr-defined]
            and a.meta == b.meta and a.diagnostics == b.diagnostics  # type: ignore[attr-defined]
            and all(np.array_equal(getattr(a, f), getattr(b, f)) for f in fields))


@pytest.mark.parametrize("parts", [2, 3, 5])
def test_decoding_in_parts_equals_one_process(builtin_logdir: Path, parts: int) -> None:
    for run in ("naive", "sdpa-per-head"):
        (path,) = trace_files(builtin_logdir / run)
        size = path.stat().st_size
        events = parallel.decode_in_parts(str(path), size, parts)
        assert events is not None
        assert _same_events(events, load_events(str(path), parallel=False))


def test_how_many_processes_decode_a_trace() -> None:
    assert parallel.part_count(parallel.PARALLEL_MIN_BYTES - 1, cpus=16) == 1
    assert parallel.part_count(100 << 20, cpus=2) == 2
    assert parallel.part_count(100 << 20, cpus=16) == 6  # parts of at least 16 MiB
    assert parallel.part_count(4 << 30, cpus=16) == 8  # at most 8: the merge is this process's
    assert parallel.part_count(4 << 30, cpus=1) == 1


def test_a_trace_that_cannot_be_split_is_decoded_in_one_process(builtin_logdir: Path, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parallel, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(parallel, "_MIN_PART_BYTES", 1)
    # A broken last part falls back to one process, which reports the error.
    (path,) = trace_files(builtin_logdir / "naive")
    cut = tmp_path / "w.1.pt.trace.json"
    cut.write_bytes(path.read_bytes()[:-300])
    with pytest.raises(TraceError, match="truncated"):
        load_events(str(cut))
    # Other layouts are decoded whole.
    minified = tmp_path / "m.1.pt.trace.json"
    minified.write_text(json.dumps(json.loads(path.read_bytes())))
    assert _same_events(load_events(str(minified)), load_events(str(path), parallel=False))
