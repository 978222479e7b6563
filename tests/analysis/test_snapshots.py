"""Every public trace, every runner trace of the model corpus and every hand-written trace give
exactly the decoded columns and the summary JSON stored in ``snapshots/`` (made before a change
to the decoder or the engine's speed). A change that alters any figure fails here, with the
first differing paths named. Regenerate only on purpose, and review the diff:

    TB_ATTN_REGEN_SNAPSHOTS=1 pytest tests/analysis/test_snapshots.py
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import SHARED_TRACES

from devtools.corpus import TRACES as CORPUS_TRACES
from tb_attn_plugin.analysis.summary import summarize
from tb_attn_plugin.loader import load_events
from tb_attn_plugin.report import json_text
from tb_attn_plugin.trace.events import Events

HERE = Path(__file__).resolve().parent
SNAPSHOTS = HERE / "snapshots"
REGEN_ENV = "TB_ATTN_REGEN_SNAPSHOTS"
HAND_WRITTEN = HERE.parent / "traces"


def _cases() -> list[tuple[str, Path]]:
    shared = [(f"shared-{p.name.split('.')[0]}", p) for p in sorted(SHARED_TRACES.glob("*/*.json.gz"))]
    corpus = [(f"corpus-{p.relative_to(CORPUS_TRACES).parts[0]}", p)
              for p in sorted(CORPUS_TRACES.glob("*/**/*.pt.trace.json*"))]
    hand = [(f"hand-{p.stem}", p) for p in sorted(HAND_WRITTEN.glob("*.json"))]
    return shared + corpus + hand


CASES = _cases()


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


def _differences(a: Any, b: Any, path: str = "$", out: list[str] | None = None) -> list[str]:
    out = [] if out is None else out
    if len(out) >= 8:
        return out
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            if k not in a or k not in b:
                out.append(f"{path}.{k}: {'missing' if k not in a else 'new'}")
            else:
                _differences(a[k], b[k], f"{path}.{k}", out)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _differences(x, y, f"{path}[{i}]", out)
    elif a != b:
        out.append(f"{path}: {str(b)[:80]} (stored) -> {str(a)[:80]}")
    return out


def test_cases_cover_every_trace() -> None:
    groups = {name.split("-")[0] for name, _ in CASES}
    assert groups == {"shared", "corpus", "hand"}, groups
    assert sum(name.startswith("shared-") for name, _ in CASES) == 10
    assert sum(name.startswith("corpus-") for name, _ in CASES) >= 21
    assert len({name for name, _ in CASES}) == len(CASES)


@pytest.mark.parametrize(("name", "path"), CASES, ids=[n for n, _ in CASES])
def test_decoded_columns_and_summary_as_stored(name: str, path: Path) -> None:
    events = load_events(str(path))
    actual = {"events": events_record(events),
              "summary": json.loads(json_text(summarize(events, file=path.name)))}
    stored = SNAPSHOTS / f"{name}.json.gz"
    if os.environ.get(REGEN_ENV) == "1":
        SNAPSHOTS.mkdir(exist_ok=True)
        text = json.dumps(actual, indent=1, sort_keys=True) + "\n"
        stored.write_bytes(gzip.compress(text.encode(), compresslevel=9, mtime=0))
        return
    if not stored.exists():
        pytest.fail(f"no snapshot {stored.name}: run with {REGEN_ENV}=1 to write it, then review it")
    expected = json.loads(gzip.decompress(stored.read_bytes()))
    diff = _differences(actual, expected)
    assert not diff, f"{name} differs from snapshots/{stored.name}:\n" + "\n".join(diff)
