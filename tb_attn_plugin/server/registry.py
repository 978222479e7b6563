"""The run registry of one logdir: which runs there are, listed at most so often, and their
metadata, read once per version.

The tab's service (``service.py``) asks it for runs by name; nothing here parses a trace. A
``*.json[.gz]`` file that is not named as a trace is one if its head says so (``trace.sniff``):
each file version's head is read once and its verdict kept for as long as the file is listed, so a
logdir of thousands of JSON files that are not traces costs their heads once, not every listing.
Metadata is kept for every listed run, so what it holds is bounded per run, not by what the files
hold (each may be 1 MiB): a run's ``RunInfo`` (what the runs list shows, computed from the whole
file) and its metadata with every top-level value over ``KEPT_VALUE_BYTES`` left out, at most
``KEPT_BYTES`` of them (the runner writes about 2 KB). The whole file is read again when asked
for (``/metadata``).
Invariants: no storage is read while ``_lock`` is held, so a slow store (or a FIFO swapped in
for a metadata file) delays one listing, never the other requests; and listings are
rate-limited: a regular one every ``scan_ttl_s``, a forced one (``refresh``, or a run name that
the last listing lacks) at most every ``relist_min_s``, whoever asks for it and however often.
While one request lists, the others answer from the last listing; ``refresh_due_in`` tells a
forced request so answered when to ask again (the tab does), so a reload shortly after the last
listing still shows the runs written since.
"""

from __future__ import annotations

import json
import logging
import threading
import time

from tb_attn_plugin.engine.metadata import read_metadata_many
from tb_attn_plugin.server.responses import RunInfo
from tb_attn_plugin.server.run_info import run_info
from tb_attn_plugin.trace import io
from tb_attn_plugin.trace.discover import Run, find_runs
from tb_attn_plugin.trace.events import ReadError, TraceError
from tb_attn_plugin.trace.sniff import Verdicts
from tb_attn_plugin.trace.version import Version, file_version

__all__ = ["KEPT_BYTES", "KEPT_VALUE_BYTES", "Registry", "kept_metadata"]

#: A top-level metadata value larger than this (as JSON) is not kept for the analysis...
KEPT_VALUE_BYTES = 16 << 10
#: ...nor values past this many bytes in all.
KEPT_BYTES = 64 << 10

Metadata = dict[str, object]
_log = logging.getLogger(__name__)


def kept_metadata(metadata: Metadata | None) -> Metadata | None:
    """What a listed run keeps of its metadata: the top-level values of at most
    ``KEPT_VALUE_BYTES`` each as JSON, in the file's order, up to ``KEPT_BYTES`` in all."""
    if metadata is None:
        return None
    kept: Metadata = {}
    total = 0
    for key, value in metadata.items():
        size = len(json.dumps(key)) + len(json.dumps(value, default=str)) + 4  # '"key": value, '
        if size <= KEPT_VALUE_BYTES and total + size <= KEPT_BYTES:
            kept[key] = value
            total += size
    return kept


class Registry:
    """The runs under ``logdir``. ``listing_error`` is the last listing's failure, if it failed
    (the listing before it then stands)."""

    def __init__(self, logdir: str, *, scan_ttl_s: float = 5.0, relist_min_s: float = 1.0) -> None:
        self.logdir = logdir
        self.scan_ttl_s = scan_ttl_s
        self.relist_min_s = min(relist_min_s, scan_ttl_s)
        self._runs: list[Run] = []
        self._by_name: dict[str, Run] = {}
        self._scanned_at = -1e18
        self._lock = threading.Lock()  # guards the fields; never held while reading storage
        self._listing = threading.Lock()  # one listing at a time
        self._active = False
        self._active_checked_at = -1e18
        self._metadata: dict[Version, tuple[Metadata, RunInfo | None] | None] = {}
        self._verdicts = Verdicts()  # which *.json files are traces, by their heads
        self.listing_error: str | None = None

    def runs(self, *, refresh: bool = False) -> list[Run]:
        return self._fresh(self.relist_min_s if refresh else self.scan_ttl_s)

    def refresh_due_in(self, asked_at: float) -> float | None:
        """None when the last listing began at or after ``asked_at`` (``time.monotonic()``): a
        refresh asked then was answered by a listing that can see what was written before it.
        Otherwise the seconds until a forced listing is allowed again (0 while another request is
        listing: its answer may predate the ask)."""
        with self._lock:
            if self._scanned_at >= asked_at:
                return None
            return max(0.0, self._scanned_at + self.relist_min_s - time.monotonic())

    def _fresh(self, max_age_s: float) -> list[Run]:
        with self._lock:
            if time.monotonic() - self._scanned_at <= max_age_s:
                return self._runs
            listed_before = self._scanned_at > -1e18
        # The first listing is waited for; later ones are not, if another request is at it.
        if not self._listing.acquire(blocking=not listed_before):
            with self._lock:
                return self._runs
        try:
            with self._lock:
                if time.monotonic() - self._scanned_at <= max_age_s:
                    return self._runs  # listed by another request while this one waited
            return self._relist()
        finally:
            self._listing.release()

    def _relist(self) -> list[Run]:
        """A fresh listing (under ``_listing``). When the storage cannot be listed (a network
        error), the last listing stands and the error is reported: nothing was deleted, so
        nothing disappears."""
        started = time.monotonic()
        try:
            # A missing prefix lists as empty on object stores: no separate existence check.
            files = io.list_tree(self.logdir) if io.is_url(self.logdir) or io.is_dir(self.logdir) else []
        except TraceError as exc:
            with self._lock:
                self.listing_error = str(exc)
                self._scanned_at = started
                return self._runs
        runs = find_runs(self.logdir, files, traces=self._verdicts.traces(files))
        self._read_metadata(runs)
        with self._lock:
            self.listing_error = None
            self._runs = runs
            self._by_name = {run.name: run for run in runs}  # display names are one-to-one (names.display_name)
            self._scanned_at = started
            return runs

    def _read_metadata(self, runs: list[Run]) -> None:
        """Reads the metadata files that are new or changed since the last listing, in one batch,
        without the registry lock."""
        wanted = {file_version(r.metadata_file) for r in runs if r.metadata_file is not None}
        with self._lock:
            missing = [key for key in wanted if key not in self._metadata]
        if not missing:
            return
        got = read_metadata_many([path for path, *_ in missing])
        parsed = {}
        for key in missing:
            read = got[key[0]]
            if isinstance(read, ReadError):
                continue  # read again on the next listing
            if read.note is not None:
                _log.warning("run metadata %s", read.note)  # once per file version
            whole = read.value
            parsed[key] = (kept_metadata(whole) or {}, run_info(whole)) if whole is not None else None
        with self._lock:
            if len(self._metadata) + len(parsed) > 16384:
                self._metadata = {k: v for k, v in self._metadata.items() if k in wanted}
            self._metadata.update(parsed)

    def has_traces(self) -> bool:
        """Cheap enough for ``is_active``: a fresh listing if there is one, else a local walk
        that stops at the first trace file, judging ``*.json`` files by the verdicts the listings
        keep (remote logdirs are listed, with the usual TTL)."""
        with self._lock:
            now = time.monotonic()
            if now - self._scanned_at <= self.scan_ttl_s:
                return bool(self._runs)
            if not io.is_url(self.logdir) and now - self._active_checked_at <= self.scan_ttl_s:
                return self._active
        if io.is_url(self.logdir):
            return bool(self.runs())
        active = io.has_trace_file(self.logdir, is_trace=self._verdicts.is_trace)
        with self._lock:
            self._active, self._active_checked_at = active, time.monotonic()
        return active

    def find(self, name: str) -> Run | None:
        """The run of this display name; a run the last listing lacks may be new: the logdir is
        listed again first (rate-limited). None: there is no such run."""
        self.runs()
        with self._lock:
            found = self._by_name.get(name)
        if found is None:
            self.runs(refresh=True)  # created since the last listing? (rate-limited)
            with self._lock:
                found = self._by_name.get(name)
        return found

    def metadata(self, run: Run) -> Metadata | None:
        """The run's metadata as kept (``kept_metadata``); None without a readable file."""
        got = self._kept(run)
        return got[0] if got is not None else None

    def info(self, run: Run) -> RunInfo | None:
        """What the runs list shows of the run's metadata, from the whole file."""
        got = self._kept(run)
        return got[1] if got is not None else None

    def _kept(self, run: Run) -> tuple[Metadata, RunInfo | None] | None:
        if run.metadata_file is None:
            return None
        key = file_version(run.metadata_file)
        with self._lock:
            if key in self._metadata:
                return self._metadata[key]
        self._read_metadata([run])
        with self._lock:
            return self._metadata.get(key)
