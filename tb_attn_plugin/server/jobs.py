"""Background parsing: a few daemon threads, at most one job per key at a time, in three lanes.

Routes never parse on the request thread. They start (or join) the job for a trace file and
wait a moment for it; a job still running after that is answered "loading" and polled. So one
huge trace keeps one worker busy, not the server, and many clients asking for the same run
share one parse. The threads start on the first job (the plugin's constructor starts none),
and they are daemons: stopping TensorBoard never waits for a parse to finish.

Three lanes, so that no slow or huge run delays the others and no parse ahead delays a click:

- ``asked``: what users asked for (``submit``), on ``workers`` threads;
- ``slow``: on ``slow_workers`` threads of its own, the jobs of runs that proved slow, and jobs
  the caller knows to be ``heavy`` (a large file). A job of the asked lane still running after
  ``slow_after_s`` moves here with its thread (where the slow lane has room), its run (``group``)
  is marked slow, so that its other jobs, queued or to come, queue here too, and a fresh thread
  takes its place in the asked lane. So a run of many slow files occupies at most the slow
  lane's threads, and small runs keep being served beside it;
- ``ahead``: what the server parses ahead of clicks (``submit(..., background=True)``, the runs
  list's figures), on one thread of its own. A job still queued there when a user asks for its
  key moves to the user's lane; one already running learns that a user waits (``background``).

Slowness is checked whenever a job is submitted or joined (every request of an unparsed run
does), so no thread of its own watches the clock.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from typing import Any, Literal

__all__ = ["SLOW_AFTER_S", "Jobs"]

Lane = Literal["asked", "slow", "ahead"]
#: A job of the asked lane running longer than this moves to the slow lane, with its run. A summary
#: of the runner's traces takes well under a second; 2 s leaves room for a busy machine.
SLOW_AFTER_S = 2.0
_GROUPS_KEPT = 4096  # runs remembered as slow (their names: a few hundred KB at most)


class _Job:
    """A job; ``lane`` says which queue it waits in (under ``Jobs._lock``)."""

    __slots__ = ("background", "fn", "future", "group", "key", "lane", "started")

    def __init__(self, key: Hashable, fn: Callable[[], Any], *, lane: Lane, group: Hashable) -> None:
        self.key, self.fn, self.lane, self.group = key, fn, lane, group
        self.background = lane == "ahead"
        self.future: Future[Any] = Future()
        self.started: float | None = None  # time.monotonic() when a thread took it


class _Worker:
    __slots__ = ("job", "lane")

    def __init__(self, lane: Lane) -> None:
        self.lane: Lane = lane
        self.job: _Job | None = None


class Jobs:
    def __init__(self, workers: int = 2, *, name: str = "tb-attn-parse", slow_workers: int | None = None,
                 slow_after_s: float = SLOW_AFTER_S) -> None:
        if workers < 1:
            raise ValueError("workers must be at least 1")
        self.workers = workers
        self.name = name
        self.slow_after_s = slow_after_s
        self._cap: dict[Lane, int] = {"asked": workers, "slow": slow_workers or workers, "ahead": 1}
        self._queues: dict[Lane, deque[_Job]] = {"asked": deque(), "slow": deque(), "ahead": deque()}
        self._threads: dict[Lane, int] = {"asked": 0, "slow": 0, "ahead": 0}
        self._idle: dict[Lane, int] = {"asked": 0, "slow": 0, "ahead": 0}
        self._busy: list[_Worker] = []  # workers running a job of the asked lane
        self._slow_groups: dict[Hashable, None] = {}
        self._jobs: dict[Hashable, _Job] = {}
        self._started = 0
        self._lock = threading.Condition(threading.Lock())

    def submit(self, key: Hashable, fn: Callable[[], Any], *, background: bool = False, group: Hashable = None,
               heavy: bool = False) -> Future[Any]:
        """The future of the job for ``key``: the one queued or running, else a new one.
        ``background``: parse-ahead work, on its own thread, after every job queued there before;
        a user's request (``background=False``) for a key still queued there takes it over.
        ``group``: the run the job is for (its jobs share the slow lane once one of them is slow);
        ``heavy``: known to be slow (a large file), so queued in the slow lane from the start."""
        with self._lock:
            self._demote_overdue()
            job = self._jobs.get(key)
            if job is not None:
                if job.background and not background:
                    job.background = False  # a user waits for it now (``background``)
                    if job.started is None:
                        self._queues["ahead"].remove(job)
                        self._enqueue(job, self._user_lane(group, heavy=heavy))
                return job.future
            lane: Lane = "ahead" if background else self._user_lane(group, heavy=heavy)
            job = self._jobs[key] = _Job(key, fn, lane=lane, group=group)
            self._enqueue(job, lane)
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

    def slow(self, group: Hashable) -> bool:
        """Whether the run ``group`` has proved slow (its jobs queue in the slow lane)."""
        with self._lock:
            return group in self._slow_groups

    # -- under the lock --------------------------------------------------------------------
    def _user_lane(self, group: Hashable, *, heavy: bool) -> Lane:
        return "slow" if heavy or (group is not None and group in self._slow_groups) else "asked"

    def _enqueue(self, job: _Job, lane: Lane) -> None:
        job.lane = lane
        self._queues[lane].append(job)
        self._grow(lane)
        self._lock.notify_all()

    def _grow(self, lane: Lane) -> None:
        """A thread more for ``lane`` if it has more jobs queued than idle threads, and room."""
        if self._idle[lane] < len(self._queues[lane]) and self._threads[lane] < self._cap[lane]:
            self._threads[lane] += 1
            self._spawn(_Worker(lane))

    def _spawn(self, worker: _Worker) -> None:
        suffix = "background" if worker.lane == "ahead" else \
            f"slow-{self._started}" if worker.lane == "slow" else str(self._started)
        self._started += worker.lane != "ahead"
        threading.Thread(target=self._work, args=(worker,), name=f"{self.name}-{suffix}", daemon=True).start()

    def _demote_overdue(self) -> None:
        """Moves jobs of the asked lane that have run past ``slow_after_s`` to the slow lane, with
        their threads and their runs, while it has room; a fresh thread takes each one's place."""
        now = time.monotonic()
        for worker in list(self._busy):
            job = worker.job
            if job is None or job.started is None or now - job.started < self.slow_after_s:
                continue
            if self._threads["slow"] >= self._cap["slow"]:
                return
            self._busy.remove(worker)
            worker.lane = "slow"
            self._threads["asked"] -= 1
            self._threads["slow"] += 1
            if job.group is not None:
                self._mark_slow(job.group)
            self._grow("asked")  # a fresh thread in its place

    def _mark_slow(self, group: Hashable) -> None:
        self._slow_groups[group] = None
        while len(self._slow_groups) > _GROUPS_KEPT:
            del self._slow_groups[next(iter(self._slow_groups))]
        queued = self._queues["asked"]
        for job in [j for j in queued if j.group == group]:
            queued.remove(job)
            self._enqueue(job, "slow")

    # -- the threads -----------------------------------------------------------------------
    def _work(self, worker: _Worker) -> None:
        while True:
            with self._lock:
                while not self._queues[worker.lane]:
                    self._idle[worker.lane] += 1
                    self._lock.wait()
                    self._idle[worker.lane] -= 1
                job = self._queues[worker.lane].popleft()
                job.started = time.monotonic()
                worker.job = job
                if worker.lane == "asked":
                    self._busy.append(worker)
            future = job.future
            if future.set_running_or_notify_cancel():
                try:
                    result = job.fn()
                except BaseException as exc:  # handed to whoever waits on the future
                    self._done(worker, job)
                    future.set_exception(exc)
                else:
                    self._done(worker, job)
                    future.set_result(result)
            else:
                self._done(worker, job)

    def _done(self, worker: _Worker, job: _Job) -> None:
        with self._lock:
            worker.job = None
            if worker in self._busy:
                self._busy.remove(worker)
            if self._jobs.get(job.key) is job:
                del self._jobs[job.key]
