"""A real TensorBoard against a gzip bomb: its memory stays under the cache bound plus 100 MiB.

A 1 MiB gzip file holds about a GiB of whitespace between two events, or an op name of about a
GiB. Before issue 23 the decoder kept all of the whitespace in its carry-over buffer and the
server grew by about a GiB (``bench/hostile.py``: 1046 MiB); before issue 34 the name cost 3.2 GB
at its peak, and the server kept 1.1 GB of it after the request. The server's peak resident
memory (``VmHWM``) after the bomb's summary, and what it keeps (``VmRSS``), are compared with its
resident memory after a warm-up summary of a normal run (the engine's imports are loaded by then).
"""

from __future__ import annotations

import json
import shutil
import time
import urllib.request
from pathlib import Path

import pytest
from helpers import HAND_TRACES

from devtools.bombs import BOMBS
from devtools.tbserver import TensorBoard

TRACE = HAND_TRACES / "steps.json"
CACHE_MB = 32
HEADROOM_MIB = 100


def _memory_kib(pid: int) -> dict[str, int]:
    fields = (line.partition(":") for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    return {key: int(value.split()[0]) for key, _, value in fields if key in ("VmRSS", "VmHWM")}


def _summary(url: str, timeout_s: float = 120.0) -> dict[str, object]:
    deadline = time.monotonic() + timeout_s
    while True:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            status, body = response.status, json.load(response)
        if status == 200:
            return body
        assert time.monotonic() < deadline, f"{url} still loading"
        time.sleep(0.2)


@pytest.mark.parametrize("kind", sorted(BOMBS))
def test_a_one_mib_gzip_bomb_leaves_the_server_under_its_cache_bound_plus_100_mib(tmp_path: Path, kind: str) -> None:
    (tmp_path / "normal").mkdir()
    (tmp_path / "bomb").mkdir()
    shutil.copy(TRACE, tmp_path / "normal" / "host.1.pt.trace.json")
    bomb = tmp_path / "bomb" / "host.1.pt.trace.json.gz"
    uncompressed = BOMBS[kind](bomb, stored_mib=1.0)
    assert bomb.stat().st_size < 1.1 * 2**20 and uncompressed > 2**30
    with TensorBoard(tmp_path, only=["tb_attn"], args=["--tb_attn_cache_mb", str(CACHE_MB)]) as tb:
        assert tb.pid is not None
        api = f"{tb.url}data/plugin/tb_attn/"
        assert _summary(f"{api}summary?run=normal")["workers"]
        before = _memory_kib(tb.pid)
        body = _summary(f"{api}summary?run=bomb")
        after = _memory_kib(tb.pid)
    assert body["errors"] == [] and body["workers"], body  # no error: it decodes (the name clipped)
    growth_mib = (after["VmHWM"] - before["VmRSS"]) / 1024
    kept_mib = (after["VmRSS"] - before["VmRSS"]) / 1024
    assert growth_mib < CACHE_MB + HEADROOM_MIB and kept_mib < CACHE_MB + HEADROOM_MIB, (before, after)
