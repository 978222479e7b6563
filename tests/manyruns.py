"""A logdir of many small runs for tests (importable as ``manyruns``): one real runner run, copied.

Each run is ``<user>/<model>/<impl>/seq<S>-<i>`` holding a hard link to the source trace (a copy
where links are not possible) and its own ``tb_attn_run.json``: the source's metadata with the
user, model, implementation, sequence length, start time and, for every 97th run, the status
``running`` changed. Everything is a function of ``i``, so the tests know what to expect.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

USERS = ("alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy")
MODELS = ("builtin", "gpt2", "llama", "bert", "mha")
IMPLS = ("naive", "naive-inplace", "sdpa", "sdpa-math", "sdpa-flash", "eager")
SEQS = (128, 256, 512, 1024, 2048)
RUNNING_EVERY = 97
_T0 = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class ManyRun:
    name: str
    user: str
    model: str
    impl: str
    seq: int
    status: str  # the runner's: "ok" or "running"


def many_run(i: int) -> ManyRun:
    """The ``i``-th run: users cycle fastest, then models, implementations and lengths, so that
    the combinations spread (1,000 runs give every user 100 runs, every model 200...)."""
    user = USERS[i % len(USERS)]
    model = MODELS[(i // 3) % len(MODELS)]
    impl = IMPLS[(i // 7) % len(IMPLS)]
    seq = SEQS[(i // 11) % len(SEQS)]
    status = "running" if i % RUNNING_EVERY == RUNNING_EVERY - 1 else "ok"
    return ManyRun(f"{user}/{model}/{impl}/seq{seq}-{i}", user, model, impl, seq, status)


def write_many_runs(logdir: Path, source: Path, indices: range | list[int]) -> list[ManyRun]:
    """Writes runs ``indices`` under ``logdir`` from the runner run in ``source`` (its one trace
    file and its ``tb_attn_run.json``)."""
    (trace,) = [f for f in source.iterdir() if ".pt.trace.json" in f.name]
    template = json.loads((source / "tb_attn_run.json").read_text())
    out = []
    for i in indices:
        run = many_run(i)
        target = logdir / run.name
        target.mkdir(parents=True)
        try:
            os.link(trace, target / trace.name)
        except OSError:
            shutil.copy2(trace, target / trace.name)
        started = _T0 + timedelta(hours=i)
        meta = dict(template)
        meta.update(user=run.user, model=run.model, impl=run.impl, run=run.name, status=run.status,
                    started_at=started.isoformat(timespec="seconds"),
                    finished_at=None if run.status == "running" else
                    (started + timedelta(seconds=30)).isoformat(timespec="seconds"))
        meta["config"] = {**template.get("config", {}), "impl": run.impl, "seq": run.seq}
        (target / "tb_attn_run.json").write_text(json.dumps(meta, indent=2))
        out.append(run)
    return out


def write_ranked_run(target: Path, source: Path, ranks: int, *, world_size: int | None = None) -> list[Path]:
    """One run of ``ranks`` traces in ``target``: the runner run ``source``'s trace once per rank,
    named ``host_rank<r>.<span>.pt.trace.json`` and with ``"distributedInfo": {"rank": r, ...}``
    put first in its JSON object (written as text: the rest of the file is unchanged)."""
    (trace,) = [f for f in source.iterdir() if ".pt.trace.json" in f.name]
    raw = trace.read_bytes()
    start = raw.index(b"{") + 1
    target.mkdir(parents=True, exist_ok=True)
    shutil.copy2(source / "tb_attn_run.json", target / "tb_attn_run.json")
    out = []
    for r in range(ranks):
        info = json.dumps({"rank": r, "world_size": world_size or ranks, "backend": "gloo"})
        path = target / f"host_rank{r}.{1000 + r}.pt.trace.json"
        path.write_bytes(raw[:start] + b'\n  "distributedInfo": ' + info.encode() + b"," + raw[start:])
        out.append(path)
    return out


#: The largest run metadata file the plugin reads (docs/limits.md); a larger one is ignored.
METADATA_LIMIT = 1 << 20
#: The metadata fields the runs list shows, each made long and odd by ``hostile_metadata``.
SHOWN = ("model", "impl", "dtype", "device", "device_name", "user", "host", "started_at", "torch_version",
         "status", "error", "parallel")
#: Markup, a bidi override, control characters (escaped by JSON to 6 bytes each), non-ASCII and
#: an astral character: one repeat of a hostile string.
ODD = "<b>x</b>\u202e\x01\t\u00e9\U0001f600 "


def hostile_metadata(i: int, template: dict[str, Any]) -> bytes:
    """The ``i``-th of four hostile ``tb_attn_run.json`` files built on a real one
    (``template``), each 95% to 100% of ``METADATA_LIMIT``, so that the plugin
    reads it: 0, a model string that fills the file; 1, every field the runs list shows tens of
    kilobytes of ``ODD``, and numbers that are not (a sequence length of 1e308, a string batch,
    a boolean world size); 2, a config 20,000 keys wide, the model an object, and thousands of
    keys at the top; 3, lists and objects 200 levels deep, in the model and the config too."""
    meta: dict[str, Any] = dict(template)
    kind = i % 4
    if kind == 0:
        meta["model"] = ""
    elif kind == 1:
        for key in SHOWN:
            meta[key] = ""
        meta["config"] = {**template.get("config", {}), "seq": 1e308, "batch": "2", "mode": ODD * 5}
        meta["world_size"] = True
    elif kind == 2:
        meta["config"] = {**{f"k{k:05d}": k for k in range(20_000)}, "seq": {"value": 512}}
        meta["model"] = {"name": "builtin", "layers": list(range(1000))}
    else:
        deep: Any = "bottom"
        for _ in range(200):
            deep = {"a": [deep]}
        meta["model"] = deep
        meta["config"] = {"seq": deep, "impl": [deep]}
        meta["blocks"] = []
    fixed = len(json.dumps(meta).encode())
    room = METADATA_LIMIT - 64 - fixed
    if kind == 0:
        meta["model"] = "m" * room
    elif kind == 1:
        repeats = room // len(SHOWN) // len(json.dumps(ODD).encode())
        for key in SHOWN:
            meta[key] = key + ODD * repeats
    elif kind == 2:
        step = len(', "w00000": 99999')
        meta.update({f"w{k:05d}": k for k in range(room // step)})
    else:
        chain = len(json.dumps(deep)) + 2
        meta["blocks"] = [deep] * (room // chain)
    body = json.dumps(meta).encode()
    assert METADATA_LIMIT * 95 // 100 <= len(body) <= METADATA_LIMIT, (kind, len(body))
    return body
