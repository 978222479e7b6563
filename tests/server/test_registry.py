"""The run registry lists a logdir at most once per ``scan_ttl_s`` (a forced listing at most once
per ``relist_min_s``), keeps a bounded part of each run's metadata read once per version, judges
each ``*.json`` file by its head once per version, and lets a failed or slow listing leave the last
one standing. The tests drive it on small logdirs written here with a hand-moved clock, and count
the storage reads."""

from __future__ import annotations

import gzip
import json
import os
import threading
import time
import types
from pathlib import Path

import pytest

from tb_attn_plugin.server import registry as registry_module
from tb_attn_plugin.server.registry import KEPT_BYTES, KEPT_VALUE_BYTES, Registry, kept_metadata
from tb_attn_plugin.trace import io
from tb_attn_plugin.trace.discover import Run
from tb_attn_plugin.trace.events import ReadError, TraceError
from tb_attn_plugin.trace.io import FileInfo
from tb_attn_plugin.vocab.names import METADATA_FILE


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(registry_module, "time", types.SimpleNamespace(monotonic=c.monotonic))
    return c


@pytest.fixture
def metadata_reads(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Each batch of metadata files the registry reads (``io.read_many``)."""
    batches: list[list[str]] = []
    real = io.read_many

    def counting(paths: list[str], **kwargs: int) -> dict[str, bytes | TraceError]:
        batches.append(sorted(paths))
        return real(paths, **kwargs)

    monkeypatch.setattr(io, "read_many", counting)
    return batches


def _run_dir(logdir: Path, name: str, metadata: object = None) -> Path:
    """A run directory with one trace (its content is never read here) and, if given, metadata."""
    d = logdir / name
    d.mkdir(parents=True)
    (d / "w.1.pt.trace.json").write_text("{}")
    if metadata is not None:
        (d / METADATA_FILE).write_text(json.dumps(metadata))
    return d


def _names(runs: list[Run]) -> list[str]:
    return [r.name for r in runs]


# -- kept_metadata -----------------------------------------------------------------------------

def test_each_value_is_measured_as_its_json_with_the_key() -> None:
    # '"k"' is 3 characters, the separators 4: a string value of n characters is 3 + (n + 2) + 4.
    at_bound = "x" * (KEPT_VALUE_BYTES - 3 - 2 - 4)
    assert kept_metadata({"k": at_bound}) == {"k": at_bound}
    assert kept_metadata({"k": at_bound + "x"}) == {}


def test_values_past_the_total_are_left_out_but_smaller_later_ones_are_kept() -> None:
    # Each "aNN": "<10,000 x>" is 5 + 10,002 + 4 = 10,011 characters: 6 of them (60,066) fit in
    # 64 KiB (65,536), 7 (70,077) do not; "seq": 512 is 5 + 3 + 4 = 12 more, 60,078 in all.
    assert KEPT_BYTES == 65_536
    big = {f"a{i:02d}": "x" * 10_000 for i in range(8)}
    kept = kept_metadata({**big, "seq": 512}) or {}
    assert list(kept) == ["a00", "a01", "a02", "a03", "a04", "a05", "seq"]  # the file's order


def test_unencodable_values_are_measured_as_their_text() -> None:
    value = {1, 2}  # not JSON: measured as str(value)
    assert kept_metadata({"s": value}) == {"s": value}
    assert kept_metadata({}) == {} and kept_metadata(None) is None


# -- listing -----------------------------------------------------------------------------------

def test_a_missing_logdir_lists_no_runs(tmp_path: Path, clock: Clock) -> None:
    registry = Registry(str(tmp_path / "nowhere"))
    assert registry.runs() == [] and registry.listing_error is None
    assert registry.find("a") is None


def test_runs_are_listed_again_only_after_the_ttl(tmp_path: Path, clock: Clock) -> None:
    _run_dir(tmp_path, "b")
    registry = Registry(str(tmp_path), scan_ttl_s=5.0)
    first = registry.runs()
    assert _names(first) == ["b"] and first[0].files[0].worker == "w"
    _run_dir(tmp_path, "a")
    clock.now += 5.0  # exactly the TTL: the listing is still fresh
    assert registry.runs() is first
    clock.now += 0.25
    assert _names(registry.runs()) == ["a", "b"]  # sorted by name


def test_a_forced_listing_waits_only_for_relist_min_s(tmp_path: Path, clock: Clock) -> None:
    _run_dir(tmp_path, "a")
    registry = Registry(str(tmp_path), scan_ttl_s=60.0, relist_min_s=1.0)
    registry.runs()
    _run_dir(tmp_path, "b")
    clock.now += 0.5
    assert _names(registry.runs(refresh=True)) == ["a"]  # half a second after the last listing
    clock.now += 0.75
    assert _names(registry.runs(refresh=True)) == ["a", "b"]


def test_relist_min_s_is_at_most_the_ttl() -> None:
    assert Registry("/x", scan_ttl_s=0.5, relist_min_s=2.0).relist_min_s == 0.5
    assert Registry("/x", scan_ttl_s=5.0, relist_min_s=2.0).relist_min_s == 2.0


def test_refresh_due_in_says_when_to_ask_again(tmp_path: Path, clock: Clock) -> None:
    registry = Registry(str(tmp_path), relist_min_s=1.0)
    assert registry.refresh_due_in(clock.now) == 0.0  # never listed: ask now
    registry.runs()  # listed at 1000.0
    assert registry.refresh_due_in(999.5) is None  # asked before that listing began: answered
    assert registry.refresh_due_in(1000.0) is None
    clock.now = 1000.25
    assert registry.refresh_due_in(1000.125) == 0.75  # 1000.0 + 1.0 - 1000.25
    clock.now = 1003.0
    assert registry.refresh_due_in(1002.0) == 0.0  # overdue: never negative


def test_a_new_run_is_found_after_a_rate_limited_relisting(tmp_path: Path, clock: Clock) -> None:
    _run_dir(tmp_path, "a")
    registry = Registry(str(tmp_path), scan_ttl_s=60.0, relist_min_s=1.0)
    found = registry.find("a")
    assert found is not None and found.name == "a" and found.path == str(tmp_path / "a")
    _run_dir(tmp_path, "deep/b")
    assert registry.find("deep/b") is None  # asked within relist_min_s of the listing
    clock.now += 1.5
    b = registry.find("deep/b")
    assert b is not None and b.name == "deep/b"
    assert registry.find("no-such-run") is None


def test_a_failed_listing_keeps_the_last_one_and_reports_it(tmp_path: Path, clock: Clock,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    _run_dir(tmp_path, "a")
    registry = Registry(str(tmp_path), scan_ttl_s=5.0)
    first = registry.runs()

    def refused(root: str, **kwargs: object) -> list[io.FileInfo]:
        raise ReadError(f"cannot list {root}: Connection refused")

    monkeypatch.setattr(io, "list_tree", refused)
    clock.now += 10.0
    assert registry.runs() is first  # nothing disappears
    assert registry.listing_error == f"cannot list {tmp_path}: Connection refused"
    assert registry.refresh_due_in(clock.now) is None  # the failed listing counts as one: not retried at once
    monkeypatch.undo()
    clock.now += 10.0
    assert _names(registry.runs()) == ["a"] and registry.listing_error is None


def test_requests_during_a_slow_listing_answer_from_the_last_one(tmp_path: Path, clock: Clock,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    _run_dir(tmp_path, "a")
    registry = Registry(str(tmp_path), scan_ttl_s=5.0)
    first = registry.runs()
    _run_dir(tmp_path, "b")
    entered, release = threading.Event(), threading.Event()
    real = io.list_tree

    def slow(root: str, **kwargs: bool) -> list[io.FileInfo]:
        entered.set()
        assert release.wait(10), "the test never released the listing"
        return real(root, **kwargs)

    monkeypatch.setattr(io, "list_tree", slow)
    clock.now += 10.0
    got: list[list[Run]] = []
    lister = threading.Thread(target=lambda: got.append(registry.runs()))
    lister.start()
    try:
        assert entered.wait(10)
        assert registry.runs() is first  # not waiting for the other request's listing
        assert registry.refresh_due_in(clock.now) == 0.0  # listing now: its answer may predate this ask
    finally:
        release.set()
        lister.join(10)
    assert [_names(r) for r in got] == [["a", "b"]] and _names(registry.runs()) == ["a", "b"]


# -- metadata ----------------------------------------------------------------------------------

def test_a_run_keeps_its_small_metadata_and_its_info(tmp_path: Path, clock: Clock) -> None:
    meta = {"model": "builtin", "config": {"seq": 64, "impl": "sdpa"}, "env": "x" * KEPT_VALUE_BYTES}
    _run_dir(tmp_path, "a", meta)
    registry = Registry(str(tmp_path))
    (run,) = registry.runs()
    assert registry.metadata(run) == {"model": "builtin", "config": {"seq": 64, "impl": "sdpa"}}  # "env" too large
    info = registry.info(run)
    assert info is not None and (info.model, info.impl, info.seq, info.batch) == ("builtin", "sdpa", 64, None)


def test_a_run_without_readable_metadata_has_none(tmp_path: Path, clock: Clock) -> None:
    _run_dir(tmp_path, "bare")
    _run_dir(tmp_path, "list", metadata=[1, 2])  # JSON, but not an object
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "w.1.pt.trace.json").write_text("{}")
    (tmp_path / "junk" / METADATA_FILE).write_text("{not json")
    registry = Registry(str(tmp_path))
    runs = registry.runs()
    assert _names(runs) == ["bare", "junk", "list"]
    assert [(registry.metadata(r), registry.info(r)) for r in runs] == [(None, None)] * 3


def test_metadata_is_read_once_per_version(tmp_path: Path, clock: Clock, metadata_reads: list[list[str]]) -> None:
    a = _run_dir(tmp_path, "a", {"model": "one"})
    _run_dir(tmp_path, "b", {"model": "two"})
    registry = Registry(str(tmp_path), scan_ttl_s=5.0)
    runs = registry.runs()
    assert metadata_reads == [[str(a / METADATA_FILE), str(tmp_path / "b" / METADATA_FILE)]]  # one batch
    assert [registry.metadata(r) for r in runs] == [{"model": "one"}, {"model": "two"}]
    clock.now += 10.0
    registry.runs()
    assert len(metadata_reads) == 1  # unchanged files: not read again
    (a / METADATA_FILE).write_text(json.dumps({"model": "three"}))
    stat = (a / METADATA_FILE).stat()
    os.utime(a / METADATA_FILE, (stat.st_atime, stat.st_mtime + 10))  # a new version, whatever the clock's grain
    clock.now += 10.0
    runs = registry.runs()
    assert metadata_reads[1:] == [[str(a / METADATA_FILE)]]
    assert registry.metadata(runs[0]) == {"model": "three"} and registry.info(runs[0]) is not None


def test_a_metadata_file_that_fails_to_read_is_tried_again(tmp_path: Path, clock: Clock,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    _run_dir(tmp_path, "a", {"model": "m"})
    real = io.read_many
    monkeypatch.setattr(io, "read_many", lambda paths, **kw: {p: ReadError(f"cannot read {p}") for p in paths})
    registry = Registry(str(tmp_path))
    (run,) = registry.runs()
    assert registry.metadata(run) is None  # the storage failed: not remembered as the file's fault
    monkeypatch.setattr(io, "read_many", real)
    assert registry.metadata(run) == {"model": "m"}  # read on demand, without a new listing


def test_metadata_of_a_run_not_yet_listed_is_read_on_demand(tmp_path: Path, clock: Clock,
                                                            metadata_reads: list[list[str]]) -> None:
    d = _run_dir(tmp_path, "a", {"model": "m", "config": {"batch": 4}})
    path = str(d / METADATA_FILE)
    run = Run(name="a", path=str(d), files=(), metadata_file=FileInfo(path, 40, 1.0))
    registry = Registry(str(tmp_path))
    assert registry.metadata(run) == {"model": "m", "config": {"batch": 4}}
    info = registry.info(run)
    assert info is not None and info.batch == 4
    assert metadata_reads == [[path]]  # info came from the same read
    assert registry.metadata(Run(name="x", path=str(d), files=())) is None


def test_no_storage_is_read_while_the_registry_lock_is_held(tmp_path: Path, clock: Clock,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    _run_dir(tmp_path, "a", {"model": "m"})
    registry = Registry(str(tmp_path))
    held: list[bool] = []
    real_list, real_read = io.list_tree, io.read_many

    def listing(root: str, **kwargs: bool) -> list[io.FileInfo]:
        held.append(registry._lock.locked())
        return real_list(root, **kwargs)

    def reading(paths: list[str], **kwargs: int) -> dict[str, bytes | TraceError]:
        held.append(registry._lock.locked())
        return real_read(paths, **kwargs)

    monkeypatch.setattr(io, "list_tree", listing)
    monkeypatch.setattr(io, "read_many", reading)
    (run,) = registry.runs()
    assert registry.metadata(run) == {"model": "m"}
    assert held == [False, False]  # one listing, one batch of metadata, neither under the lock


# -- has_traces --------------------------------------------------------------------------------

def test_has_traces_walks_at_most_once_per_ttl(tmp_path: Path, clock: Clock) -> None:
    registry = Registry(str(tmp_path), scan_ttl_s=5.0)
    assert registry.has_traces() is False
    _run_dir(tmp_path, "a")
    clock.now += 5.0
    assert registry.has_traces() is False  # the last walk's answer, still fresh
    clock.now += 0.25
    assert registry.has_traces() is True


def test_has_traces_uses_a_fresh_listing(tmp_path: Path, clock: Clock) -> None:
    _run_dir(tmp_path, "a")
    registry = Registry(str(tmp_path), scan_ttl_s=5.0)
    assert _names(registry.runs()) == ["a"]
    for name in os.listdir(tmp_path / "a"):
        os.remove(tmp_path / "a" / name)  # gone from storage, but the listing is fresh
    assert registry.has_traces() is True
    assert Registry(str(tmp_path)).has_traces() is False  # a walk of the storage as it is now


# -- traces named otherwise (*.json), judged by their heads ---------------------------------------

#: A trace's head as Kineto writes it (no event needs reading here: nothing parses).
KINETO = json.dumps({"schemaVersion": 1, "deviceProperties": [], "traceEvents": []}).encode()


@pytest.fixture
def head_reads(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Each batch of heads the registry reads (``io.read_heads``), as base names."""
    batches: list[list[str]] = []
    real = io.read_heads

    def counting(paths: list[str], **kwargs: int) -> dict[str, bytes | TraceError]:
        batches.append(sorted(os.path.basename(p) for p in paths))
        return real(paths, **kwargs)

    monkeypatch.setattr(io, "read_heads", counting)
    return batches


def test_traces_named_otherwise_are_listed_and_each_head_read_once_per_version(
        tmp_path: Path, clock: Clock, head_reads: list[list[str]]) -> None:
    run = tmp_path / "accel"
    run.mkdir()
    for i in range(4):
        (run / f"profile_{i}.json").write_bytes(KINETO)
    (run / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    registry = Registry(str(tmp_path), scan_ttl_s=5.0)
    (listed,) = registry.runs()
    assert listed.name == "accel" and listed.workers == [f"profile_{i}" for i in range(4)]
    assert head_reads == [["config.json", *(f"profile_{i}.json" for i in range(4))]]  # one batch
    clock.now += 10
    assert _names(registry.runs()) == ["accel"] and len(head_reads) == 1  # the verdicts are kept
    (run / "config.json").write_bytes(KINETO + b"  ")  # a new version: its head is read again, alone
    clock.now += 10
    assert registry.runs()[0].workers == ["config", *(f"profile_{i}" for i in range(4))]
    assert head_reads[1:] == [["config.json"]]


def test_has_traces_finds_a_tree_of_profile_json_only_and_reuses_the_verdicts(
        tmp_path: Path, clock: Clock, head_reads: list[list[str]]) -> None:
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text("{}")
    registry = Registry(str(tmp_path), scan_ttl_s=5.0)
    assert registry.has_traces() is False and head_reads == [["config.json"]]
    clock.now += 10
    assert registry.has_traces() is False and len(head_reads) == 1  # judged before: no read
    (tmp_path / "accel").mkdir()
    (tmp_path / "accel" / "profile_0.json").write_bytes(gzip.compress(KINETO))
    clock.now += 10
    assert registry.has_traces() is True and head_reads[1:] == [["profile_0.json"]]
    assert Registry(str(tmp_path)).has_traces() is True  # a registry of its own reads it too


def test_a_logdir_of_ten_thousand_json_files_that_are_not_traces_lists_fast_after_the_first_time(
        tmp_path: Path, clock: Clock, head_reads: list[list[str]]) -> None:
    """An HF output_dir with checkpoints: config.json, trainer_state.json... in every directory."""
    for d in range(100):
        ckpt = tmp_path / "out" / f"checkpoint-{d}"
        ckpt.mkdir(parents=True)
        for i in range(100):
            (ckpt / f"state_{i}.json").write_text('{"global_step": 1}')
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "w.1.pt.trace.json").write_text("{}")
    registry = Registry(str(tmp_path), scan_ttl_s=5.0)
    assert _names(registry.runs()) == ["run"] and sum(map(len, head_reads)) == 10_000
    clock.now += 10
    started = time.perf_counter()
    assert _names(registry.runs()) == ["run"]
    assert len(head_reads) == 1, "a second listing read heads again"
    assert time.perf_counter() - started < 5  # 0.2 s here: a listing and a look-up per file
    output_dir = Registry(str(tmp_path / "out"), scan_ttl_s=5.0)
    assert output_dir.runs() == [] and output_dir.has_traces() is False  # has_traces: from the fresh listing
    clock.now += 10
    before = len(head_reads)
    assert output_dir.has_traces() is False and len(head_reads) == before  # a walk: the listing's verdicts


def test_json_files_that_are_no_traces_list_no_run_and_never_block(tmp_path: Path, clock: Clock) -> None:
    outside = tmp_path / "outside.json"
    outside.write_bytes(KINETO)
    logdir = tmp_path / "logdir"
    run = logdir / "run"
    run.mkdir(parents=True)
    (run / "events.out.tfevents.1.host").write_bytes(b"\x00" * 64)
    (run / METADATA_FILE).write_text(json.dumps({"schema": "tb-attn.run/1"}))
    (run / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    (run / "trainer_state.json").write_text(json.dumps({"global_step": 5, "log_history": []}))
    (run / "devtools.json").write_text(json.dumps({"traceEvents": [{"cat": "devtools.timeline", "ph": "X"}]}))
    os.mkfifo(run / "f.json")
    (run / "l.json").symlink_to(outside)
    (run / "b.json.gz").write_bytes(gzip.compress(b" " * (16 << 20), compresslevel=1))
    answers: list[object] = []

    def ask() -> None:
        answers.append(Registry(str(logdir)).has_traces())
        answers.append(Registry(str(logdir)).runs())

    worker = threading.Thread(target=ask, daemon=True)
    worker.start()
    worker.join(20)
    assert answers == [False, []], "blocked, or took a file that is no trace for one"


def test_no_head_is_read_while_the_registry_lock_is_held(tmp_path: Path, clock: Clock,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "profile_0.json").write_bytes(KINETO)
    registry = Registry(str(tmp_path), scan_ttl_s=5.0)
    held: list[bool] = []
    real = io.read_heads

    def reading(paths: list[str], **kwargs: int) -> dict[str, bytes | TraceError]:
        held.append(registry._lock.locked())
        return real(paths, **kwargs)

    monkeypatch.setattr(io, "read_heads", reading)
    assert registry.has_traces() is True
    (tmp_path / "run" / "profile_0.json").write_bytes(KINETO + b" ")
    assert _names(registry.runs()) == ["run"]
    assert held == [False, False]  # the walk's read, then the listing's (a new version)
