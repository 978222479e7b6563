"""Background parsing: a few daemon threads, at most one job per key at a time, in two lanes.

Routes never parse on the request thread. They start (or join) the job for a trace file and
wait a moment for it; a job still running after that is answered "loading" and polled. So one
huge trace keeps one worker busy, not the server, and many clients asking for the same run
share one parse. The threads start on the first job (the plugin's constructor starts none),
and they are daemons: stopping TensorBoard never waits for a parse to finish.

Two lanes: what a user asked for (``submit``) runs on ``workers`` threads; what the server
parses ahead of clicks (``submit(..., background=True)``, the runs list's figures) runs on one
thread of its own. So a click never waits behind a queue of background parses: at worst it
joins the one parse that the background thread has already started for the same file. A job
still queued in the background lane when a user asks for its key moves to the user's lane.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from typing import Any

__all__ = ["Jobs"]


class _Job:
    """A queued job; whichever lane takes it first runs it (``claimed``), under ``Jobs._lock``."""

    __slots__ = ("background", "claimed", "fn", "future", "key")

    def __init__(self, key: Hashable, fn: Callable[[], Any], *, background: bool) -> None:
        self.key, self.fn, self.background = key, fn, background
        self.future: Future[Any] = Future()
        self.claimed = False


class Jobs:
    def __init__(self, workers: int = 2, *, name: str = "tb-attn-parse") -> None:
        if workers < 1:
            raise ValueError("workers must be at least 1")
        self.workers = workers
        self.name = name
        self._queue: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._background: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._jobs: dict[Hashable, _Job] = {}
        self._threads: list[threading.Thread] = []
        self._background_thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def submit(self, key: Hashable, fn: Callable[[], Any], *, background: bool = False) -> Future[Any]:
        """The future of the job for ``key``: the one queued or running, else a new one.
        ``background``: parse-ahead work, on its own thread, after every job queued there before;
        a user's request (``background=False``) for a key still queued there takes it over."""
        with self._lock:
            job = self._jobs.get(key)
            if job is not None:
                if job.background and not background:
                    job.background = False  # a user waits for it now (``background``)
                    if not job.claimed:
                        self._start_worker()
                        self._queue.put(job)  # still in the background queue too: the first lane to take it runs it
                return job.future
            job = self._jobs[key] = _Job(key, fn, background=background)
            if background:
                if self._background_thread is None:
                    self._background_thread = self._thread(f"{self.name}-background", self._background)
            else:
                self._start_worker()
        (self._background if background else self._queue).put(job)
        return job.future

    def running(self, key: Hashable) -> bool:
        """Whether a job for ``key`` is queued or running."""
        with self._lock:
            return key in self._jobs

    def background(self, key: Hashable) -> bool:
        """Whether the job for ``key`` was queued in the background and no user asked for it
        since (what a job asks of itself while it runs: a background parse keeps less)."""
        with self._lock:
            job = self._jobs.get(key)
            return job is not None and job.background

    def background_pending(self) -> int:
        """Background jobs queued or running."""
        with self._lock:
            return sum(job.background for job in self._jobs.values())

    def _start_worker(self) -> None:
        if len(self._threads) < self.workers:
            self._threads.append(self._thread(f"{self.name}-{len(self._threads)}", self._queue))

    def _thread(self, name: str, lane: queue.SimpleQueue[_Job]) -> threading.Thread:
        thread = threading.Thread(target=self._work, args=(lane,), name=name, daemon=True)
        thread.start()
        return thread

    def _work(self, lane: queue.SimpleQueue[_Job]) -> None:
        while True:
            job = lane.get()
            with self._lock:
                if job.claimed:
                    continue  # taken by the other lane
                job.claimed = True
            future = job.future
            if not future.set_running_or_notify_cancel():
                self._done(job)
                continue
            try:
                result = job.fn()
            except BaseException as exc:  # handed to whoever waits on the future
                self._done(job)
                future.set_exception(exc)
            else:
                self._done(job)
                future.set_result(result)

    def _done(self, job: _Job) -> None:
        with self._lock:
            if self._jobs.get(job.key) is job:
                del self._jobs[job.key]
