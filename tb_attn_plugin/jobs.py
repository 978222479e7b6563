"""Background parsing: a few daemon threads, at most one job per key at a time.

Routes never parse on the request thread. They start (or join) the job for a trace file and
wait a moment for it; a job still running after that is answered "loading" and polled. So one
huge trace keeps one worker busy, not the server, and many clients asking for the same run
share one parse. The threads start on the first job (the plugin's constructor starts none),
and they are daemons: stopping TensorBoard never waits for a parse to finish.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from typing import Any

__all__ = ["Jobs"]


class Jobs:
    def __init__(self, workers: int = 2, *, name: str = "tb-attn-parse") -> None:
        if workers < 1:
            raise ValueError("workers must be at least 1")
        self.workers = workers
        self.name = name
        self._queue: queue.SimpleQueue[tuple[Hashable, Callable[[], Any], Future[Any]]] = queue.SimpleQueue()
        self._running: dict[Hashable, Future[Any]] = {}
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def submit(self, key: Hashable, fn: Callable[[], Any]) -> Future[Any]:
        """The future of the job for ``key``: the one queued or running, else a new one."""
        with self._lock:
            future = self._running.get(key)
            if future is not None:
                return future
            future = Future()
            self._running[key] = future
            if len(self._threads) < self.workers:
                thread = threading.Thread(target=self._work, name=f"{self.name}-{len(self._threads)}", daemon=True)
                self._threads.append(thread)
                thread.start()
        self._queue.put((key, fn, future))
        return future

    def running(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._running

    def _work(self) -> None:
        while True:
            key, fn, future = self._queue.get()
            if future.set_running_or_notify_cancel():
                try:
                    result = fn()
                except BaseException as exc:  # handed to whoever waits on the future
                    with self._lock:
                        self._running.pop(key, None)
                    future.set_exception(exc)
                else:
                    with self._lock:
                        self._running.pop(key, None)
                    future.set_result(result)
            else:
                with self._lock:
                    self._running.pop(key, None)
