"""Gzipped traces through ISA-L's inflate (``isal``) and through zlib, its fallback: the same
bytes, members and errors."""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

import pytest
from helpers import HAND_TRACES

from tb_attn_plugin.trace import io
from tb_attn_plugin.trace.events import TraceError


@pytest.fixture(params=["isal", "zlib"])
def inflate(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "zlib":
        monkeypatch.setattr(io, "_inflate", zlib)
    else:
        from isal import isal_zlib

        assert io._inflate is isal_zlib  # installed with the package where it has a wheel
    return str(request.param)


def _read(path: Path, chunk_bytes: int = 1 << 12) -> bytes:
    return b"".join(io.read_chunks(str(path), chunk_bytes=chunk_bytes))


def test_a_gzipped_trace_reads_as_its_bytes(inflate: str, tmp_path: Path) -> None:
    plain = (HAND_TRACES / "backward.json").read_bytes()
    path = tmp_path / "w.1.pt.trace.json.gz"
    path.write_bytes(gzip.compress(plain, compresslevel=1))
    assert _read(path) == plain
    assert _read(path, chunk_bytes=7) == plain


def test_several_members_and_trailing_zeros(inflate: str, tmp_path: Path) -> None:
    parts = [b'{"traceEvents": [', b'{"ph": "X"}', b"]}"]
    path = tmp_path / "w.1.pt.trace.json.gz"
    path.write_bytes(b"".join(gzip.compress(p) for p in parts) + b"\x00" * 64)
    assert _read(path) == b"".join(parts)


def test_corrupt_and_truncated_streams_are_trace_errors(inflate: str, tmp_path: Path) -> None:
    data = gzip.compress((HAND_TRACES / "steps.json").read_bytes())
    corrupt = tmp_path / "c.1.pt.trace.json.gz"
    corrupt.write_bytes(data[:20] + bytes(b ^ 0xFF for b in data[20:60]) + data[60:])
    with pytest.raises(TraceError, match="corrupt gzip"):
        _read(corrupt)
    cut = tmp_path / "t.1.pt.trace.json.gz"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceError, match="truncated gzip"):
        _read(cut)


def test_the_limit_holds_while_inflating(inflate: str, tmp_path: Path) -> None:
    path = tmp_path / "b.1.pt.trace.json.gz"
    path.write_bytes(gzip.compress(b" " * (8 << 20)))
    with pytest.raises(TraceError, match="larger than the limit of 1 MiB"):
        b"".join(io.read_chunks(str(path), max_bytes=1 << 20))
