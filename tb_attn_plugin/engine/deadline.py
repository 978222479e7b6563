"""A time limit on pure computation in a worker thread: ``within(deadline)`` raises ``Expired`` in
the thread that runs the block once ``deadline`` (``time.monotonic``) has passed.

The analysis is pure Python and numpy with no place to check a clock, and a thread cannot be
stopped from outside; so a watchdog timer asks the interpreter to raise ``Expired`` in the
thread (``PyThreadState_SetAsyncExc``), which it does at the thread's next bytecode (never inside
a C call: a numpy operation finishes first). Arming and disarming share a lock, and the exit
clears an exception that was asked for but not yet raised, so ``Expired`` is raised inside the
block or at its exit, never after it. Only for code that holds no lock and leaves nothing half
done that outlives it (the analysis of one trace builds new values and returns them).
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
import time
from collections.abc import Iterator

__all__ = ["Expired", "within"]

_set_async_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc
_set_async_exc.argtypes = (ctypes.c_ulong, ctypes.py_object)


class Expired(BaseException):
    """The block ran past its deadline. A BaseException, as KeyboardInterrupt is: an ``except
    Exception`` in the code it stops must not swallow it."""


class _Watch:
    def __init__(self, thread_id: int) -> None:
        self.thread_id = thread_id
        self.armed = True
        self.fired = False
        self.lock = threading.Lock()

    def fire(self) -> None:
        with self.lock:
            if self.armed:
                self.fired = True
                _set_async_exc(self.thread_id, ctypes.py_object(Expired))

    def disarm(self) -> None:
        with self.lock:
            self.armed = False
            if self.fired:  # asked for and maybe not raised yet: never after the block
                _set_async_exc(self.thread_id, ctypes.py_object())


@contextlib.contextmanager
def within(deadline: float | None) -> Iterator[None]:
    """Runs the block under ``deadline`` (None: no limit); raises ``Expired`` past it."""
    if deadline is None:
        yield
        return
    left = deadline - time.monotonic()
    if left <= 0:
        raise Expired
    watch = _Watch(threading.get_ident())
    timer = threading.Timer(left, watch.fire)
    timer.daemon = True
    timer.name = "tb-attn-deadline"
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        watch.disarm()
