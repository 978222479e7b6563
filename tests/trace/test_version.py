"""A file's version, the one key of everything kept per file."""

from __future__ import annotations

from tb_attn_plugin.trace.discover import TraceFile
from tb_attn_plugin.trace.io import FileInfo
from tb_attn_plugin.trace.version import file_version


def test_a_listed_file_and_its_trace_have_one_version_that_any_change_moves() -> None:
    info = FileInfo("/l/r/w.1.pt.trace.json", 10, 2.0, "e1")
    trace = TraceFile(info.path, "w.1.pt.trace.json", "w", "1", info.size, info.mtime, info.etag)
    assert file_version(info) == file_version(trace) == ("/l/r/w.1.pt.trace.json", 10, 2.0, "e1")
    for changed in (FileInfo(info.path, 11, 2.0, "e1"), FileInfo(info.path, 10, 3.0, "e1"),
                    FileInfo(info.path, 10, 2.0, "e2"), FileInfo("/l/r/x", 10, 2.0, "e1")):
        assert file_version(changed) != file_version(info)
