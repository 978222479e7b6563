"""The read boundary (``trace/io.py``), one guarantee a test: gzip known by its magic bytes and
streamed (several members, a cap on the decompressed size, a truncated stream), only regular
files opened (a FIFO refused at once, never waited on; a link never followed), ranges that notice
a file that shrank, listings that skip hidden names and links, heads read within their bound
(a gzip bomb costs its head), and every storage failure a ``ReadError`` naming the path, locally
and through fsspec (``memory://``)."""

from __future__ import annotations

import gzip
import os
import re
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path

import fsspec
import pytest

from tb_attn_plugin.trace import io
from tb_attn_plugin.trace.events import ReadError, TraceError
from tb_attn_plugin.trace.io import FileInfo

DOC = b'{"traceEvents": [' + b",".join(b'{"ph": "X", "name": "op%d"}' % i for i in range(2000)) + b"]}"


@pytest.fixture
def memfs() -> Iterator[fsspec.AbstractFileSystem]:
    fs = fsspec.filesystem("memory")
    if fs.exists("/io-test"):
        fs.rm("/io-test", recursive=True)
    yield fs
    if fs.exists("/io-test"):
        fs.rm("/io-test", recursive=True)


def _no_content_trace(info: FileInfo) -> bool:
    """``has_trace_file``'s judge of candidates, for trees where only names matter."""
    return False


def _read(path: str | Path, **kw: object) -> bytes:
    return b"".join(io.read_chunks(str(path), **kw))  # type: ignore[arg-type]


def test_gzip_is_known_by_its_magic_bytes_not_its_name(tmp_path: Path) -> None:
    named_plain = tmp_path / "w.1.pt.trace.json"  # gzip inside, no .gz
    named_plain.write_bytes(gzip.compress(DOC))
    named_gz = tmp_path / "w.2.pt.trace.json.gz"  # plain inside, .gz outside
    named_gz.write_bytes(DOC)
    assert _read(named_plain) == DOC and _read(named_gz) == DOC
    assert not io.is_plain_local_file(str(named_plain)) and io.is_plain_local_file(str(named_gz))


def test_small_chunks_and_several_members_give_the_whole_document(tmp_path: Path) -> None:
    two = tmp_path / "two.json.gz"
    two.write_bytes(gzip.compress(DOC[:5000]) + gzip.compress(DOC[5000:]) + b"\x00" * 16)  # padded, as some writers do
    chunks = list(io.read_chunks(str(two), chunk_bytes=1000))
    assert b"".join(chunks) == DOC and max(map(len, chunks)) <= 1000


def test_the_decompressed_size_is_capped_before_the_document_is_held(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.json.gz"
    bomb.write_bytes(gzip.compress(b" " * (4 << 20)))  # 4 MiB of spaces, a few KiB stored
    assert bomb.stat().st_size < 64 << 10
    got = 0
    with pytest.raises(TraceError, match=r"larger than the limit of 1 MiB uncompressed"):
        for chunk in io.read_chunks(str(bomb), chunk_bytes=64 << 10, max_bytes=1 << 20):
            got += len(chunk)
    assert got <= 1 << 20  # stopped at the cap, not after reading it all
    big = tmp_path / "big.json"
    big.write_bytes(b" " * ((1 << 20) + 1))
    with pytest.raises(TraceError, match="larger than the limit"):  # refused by its stored size, unread
        next(io.read_chunks(str(big), max_bytes=1 << 20))


def test_corrupt_and_truncated_gzip_are_trace_errors(tmp_path: Path) -> None:
    whole = gzip.compress(DOC)
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(TraceError, match="truncated gzip"):
        _read(cut)
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(whole[:10] + bytes(b ^ 0xFF for b in whole[10:40]) + whole[40:])
    with pytest.raises(TraceError, match="corrupt gzip"):
        _read(bad)


def test_a_missing_file_is_a_read_error_naming_it(tmp_path: Path) -> None:
    gone = tmp_path / "gone.json"
    for call in (lambda: _read(gone), lambda: io.stat(str(gone)), lambda: io.raw_chunks(str(gone))):
        with pytest.raises(ReadError, match=re.escape(f"cannot read {gone}")):
            call()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_is_refused_at_once_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "w.1.pt.trace.json"
    os.mkfifo(fifo)
    done = threading.Event()
    errors: list[BaseException] = []

    def read() -> None:
        try:
            _read(fifo)
        except BaseException as exc:  # handed to the test thread
            errors.append(exc)
        done.set()

    threading.Thread(target=read, daemon=True).start()
    assert done.wait(10), "reading a FIFO with no writer blocked"
    assert isinstance(errors[0], TraceError) and "not a regular file (a FIFO)" in str(errors[0])
    assert not io.has_trace_file(str(tmp_path), is_trace=_no_content_trace)  # named like a trace, but no file
    assert io.list_tree(str(tmp_path)) == []


def test_a_link_is_never_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside.json"
    outside.write_bytes(DOC)
    tree = tmp_path / "logdir"
    tree.mkdir()
    (tree / "w.1.pt.trace.json").symlink_to(outside)
    assert io.list_tree(str(tree)) == [] and not io.has_trace_file(str(tree), is_trace=_no_content_trace)
    with pytest.raises(ReadError):  # O_NOFOLLOW: a link swapped in for a listed file is not opened
        _read(tree / "w.1.pt.trace.json")
    assert not io.inside(str(tree), str(tree / "w.1.pt.trace.json"))


def test_listings_skip_hidden_names_and_say_size_and_time(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "w.1.pt.trace.json").write_bytes(DOC)
    (tmp_path / "run" / ".w.1.pt.trace.json.tmp").write_bytes(b"partial")
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "w.1.pt.trace.json").write_bytes(DOC)
    listed = io.list_tree(str(tmp_path))
    assert [Path(f.path).relative_to(tmp_path).as_posix() for f in listed] == ["run/w.1.pt.trace.json"]
    assert listed[0].size == len(DOC) and listed[0].mtime == (tmp_path / "run" / "w.1.pt.trace.json").stat().st_mtime
    assert io.has_trace_file(str(tmp_path), is_trace=_no_content_trace)
    assert io.is_dir(str(tmp_path)) and not io.is_dir(str(tmp_path / "nope"))


def test_a_range_notices_a_file_that_shrank(tmp_path: Path) -> None:
    f = tmp_path / "t.json"
    f.write_bytes(DOC)
    assert b"".join(io.read_range(str(f), 10, 110, chunk_bytes=7)) == DOC[10:110]
    assert io.find_after(str(f), 0, b'"op1999"') == DOC.find(b'"op1999"')
    with pytest.raises(ReadError, match="changed while it was read"):
        b"".join(io.read_range(str(f), len(DOC) - 10, len(DOC) + 10))


def test_read_small_and_read_many_bound_what_they_read(tmp_path: Path, memfs: fsspec.AbstractFileSystem) -> None:
    small, big = tmp_path / "m.json", tmp_path / "big.json"
    small.write_bytes(b'{"a": 1}')
    big.write_bytes(b"x" * 2048)
    assert io.read_small(str(small)) == b'{"a": 1}'
    with pytest.raises(TraceError):
        io.read_small(str(big), limit=1024)
    memfs.pipe("/io-test/m.json", b'{"b": 2}')
    memfs.pipe("/io-test/big.json", b"y" * 2048)
    got = io.read_many([str(small), str(big), "memory:///io-test/m.json", "memory:///io-test/big.json",
                        "memory:///io-test/none.json"], limit=1024)
    assert got[str(small)] == b'{"a": 1}' and got["memory:///io-test/m.json"] == b'{"b": 2}'
    assert isinstance(got[str(big)], TraceError) and isinstance(got["memory:///io-test/big.json"], TraceError)
    assert isinstance(got["memory:///io-test/none.json"], ReadError)


def test_fsspec_urls_read_list_and_fail_as_local_paths_do(memfs: fsspec.AbstractFileSystem) -> None:
    memfs.pipe("/io-test/run/w.1.pt.trace.json.gz", zlib.compress(DOC, wbits=31))
    memfs.pipe("/io-test/run/.hidden.json", b"{}")
    root = "memory:///io-test"
    assert io.is_url(root) and io.is_dir(root) and not io.is_dir("memory:///io-test/absent")
    listed = io.list_tree(root)
    assert [f.path for f in listed] == ["memory:///io-test/run/w.1.pt.trace.json.gz"]
    assert _read(listed[0].path) == DOC and io.stat(listed[0].path).size == listed[0].size
    assert io.list_tree("memory:///io-test/absent") == []
    with pytest.raises(ReadError, match=re.escape("cannot read memory:///io-test/absent.json")):
        _read("memory:///io-test/absent.json")
    assert io.join(root, "run", "w.1.pt.trace.json.gz") == "memory:///io-test/run/w.1.pt.trace.json.gz"


# -- heads ------------------------------------------------------------------------------------

HEAD = 4096


def test_a_head_is_the_first_bytes_decompressed_and_no_more(tmp_path: Path) -> None:
    plain, gz, short = tmp_path / "plain.json", tmp_path / "x.json.gz", tmp_path / "short.json"
    plain.write_bytes(DOC)
    gz.write_bytes(gzip.compress(DOC))
    short.write_bytes(DOC[:100])
    heads = io.read_heads([str(plain), str(gz), str(short)], limit=HEAD)
    assert heads == {str(plain): DOC[:HEAD], str(gz): DOC[:HEAD], str(short): DOC[:100]}


def test_a_gzip_bomb_costs_its_head(tmp_path: Path) -> None:
    bomb = tmp_path / "b.json.gz"
    bomb.write_bytes(gzip.compress(b" " * (16 << 20), compresslevel=9))  # 16 MiB of spaces in 16 KiB
    assert bomb.stat().st_size > 2 * HEAD  # more stored than a head
    read: list[int] = []
    real = io._open_local

    def counting(path: str) -> object:
        f = real(path)
        read_ = f.read

        def measured(n: int = -1) -> bytes:
            data: bytes = read_(n)
            read.append(len(data))
            return data

        f.read = measured
        return f

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(io, "_open_local", counting)
        (head,) = io.read_heads([str(bomb)], limit=HEAD).values()
    assert head == b" " * HEAD and sum(read) <= HEAD


def test_several_gzip_members_make_one_head_and_corrupt_gzip_is_a_trace_error(tmp_path: Path) -> None:
    two, bad = tmp_path / "two.json.gz", tmp_path / "bad.json.gz"
    two.write_bytes(gzip.compress(DOC[:10]) + gzip.compress(DOC[10:]))
    whole = gzip.compress(DOC)
    bad.write_bytes(whole[:10] + bytes(b ^ 0xFF for b in whole[10:40]) + whole[40:])
    heads = io.read_heads([str(two), str(bad)], limit=HEAD)
    assert heads[str(two)] == DOC[:HEAD]
    assert isinstance(heads[str(bad)], TraceError) and "corrupt gzip" in str(heads[str(bad)])


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_head_is_never_waited_for_nor_read_through_a_link(tmp_path: Path) -> None:
    fifo, link, gone = tmp_path / "f.json", tmp_path / "l.json", tmp_path / "gone.json"
    os.mkfifo(fifo)
    (tmp_path / "outside.json").write_bytes(DOC)
    link.symlink_to(tmp_path / "outside.json")
    got: dict[str, bytes | TraceError] = {}
    done = threading.Event()

    def read() -> None:
        got.update(io.read_heads([str(fifo), str(link), str(gone)], limit=HEAD))
        done.set()

    threading.Thread(target=read, daemon=True).start()
    assert done.wait(10), "reading the head of a FIFO with no writer blocked"
    assert isinstance(got[str(fifo)], TraceError) and "not a regular file (a FIFO)" in str(got[str(fifo)])
    assert isinstance(got[str(link)], ReadError) and isinstance(got[str(gone)], ReadError)


def test_remote_heads_are_read_in_one_batch_of_ranged_reads(memfs: fsspec.AbstractFileSystem,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    memfs.pipe("/io-test/a.json", DOC)
    memfs.pipe("/io-test/b.json.gz", gzip.compress(b" " * (16 << 20)))  # a bomb
    memfs.pipe("/io-test/empty.json", b"")
    batches: list[tuple[list[str], object, object]] = []
    real = type(memfs).cat_ranges

    def cat_ranges(self: fsspec.AbstractFileSystem, paths: list[str], starts: object, ends: object,
                   **kwargs: object) -> list[bytes | Exception]:
        batches.append((list(paths), starts, ends))
        return real(self, paths, starts, ends, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(type(memfs), "cat_ranges", cat_ranges)
    urls = [f"memory:///io-test/{n}" for n in ("a.json", "b.json.gz", "empty.json", "none.json")]
    heads = io.read_heads(urls, limit=HEAD)
    assert len(batches) == 1 and batches[0][1:] == (0, HEAD)  # one batch, each read from 0 to the head
    assert heads[urls[0]] == DOC[:HEAD] and heads[urls[1]] == b" " * HEAD and heads[urls[2]] == b""
    assert isinstance(heads[urls[3]], ReadError)


def test_without_a_file_named_as_a_trace_candidates_are_judged_until_one_is_a_trace(tmp_path: Path) -> None:
    for rel in ("a/config.json", "b/profile_0.json", "b/profile_1.json", "c/notes.txt", "c/tb_attn_run.json",
                "d/.hidden.json"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(b"{}")
    asked: list[str] = []

    def is_trace(info: FileInfo) -> bool:
        asked.append(Path(info.path).relative_to(tmp_path).as_posix())
        assert info.size == 2 and info.mtime == os.stat(info.path).st_mtime
        return Path(info.path).name == "profile_0.json"

    assert io.has_trace_file(str(tmp_path), is_trace=is_trace)
    # Only candidates are judged (not the metadata file, a hidden or a .txt file), up to the first trace.
    assert asked[-1] == "b/profile_0.json" and set(asked) <= {"a/config.json", "b/profile_0.json", "b/profile_1.json"}
    asked.clear()
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "w.1.pt.trace.json").write_bytes(b"{}")
    assert io.has_trace_file(str(tmp_path), is_trace=is_trace) and asked == []  # a name answers: nothing judged
