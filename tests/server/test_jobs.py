"""``Jobs`` runs one job per key on a few daemon threads, in a users' lane and a background lane;
these tests order the threads with events (never sleeps) and check who runs what, where and once."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import CancelledError, Future

import pytest

from tb_attn_plugin.server.jobs import Jobs

#: How long a test waits for something that must happen (a failure, not a timing).
WAIT_S = 10.0


@pytest.fixture
def gates() -> Iterator[list[threading.Event]]:
    """Events a test holds jobs on; all set at teardown so no worker stays blocked after the test."""
    made: list[threading.Event] = []
    yield made
    for gate in made:
        gate.set()


def _gate(gates: list[threading.Event]) -> threading.Event:
    gate = threading.Event()
    gates.append(gate)
    return gate


def _threads(name: str) -> list[str]:
    """The live threads that a ``Jobs(name=name)`` started."""
    return sorted(t.name for t in threading.enumerate() if t.name.startswith(f"{name}-"))


def _held(gate: threading.Event, started: threading.Event, value: object = None) -> Callable[[], object]:
    """A job that says it started, then waits for the gate."""
    def fn() -> object:
        started.set()
        assert gate.wait(WAIT_S), "the test never opened the gate"
        return value

    return fn


def test_workers_must_be_at_least_one() -> None:
    with pytest.raises(ValueError, match="workers must be at least 1"):
        Jobs(0)


def test_no_thread_starts_before_the_first_job() -> None:
    jobs = Jobs(3, name="jobs-lazy")
    assert _threads("jobs-lazy") == []
    assert jobs.submit("a", lambda: 1).result(timeout=WAIT_S) == 1
    # One user job: one worker, not all three; and no background thread.
    assert _threads("jobs-lazy") == ["jobs-lazy-0"]
    assert jobs.submit("b", lambda: 2, background=True).result(timeout=WAIT_S) == 2
    assert _threads("jobs-lazy") == ["jobs-lazy-0", "jobs-lazy-background"]
    assert all(t.daemon for t in threading.enumerate() if t.name.startswith("jobs-lazy-"))


def test_askers_of_one_key_share_one_run_and_its_result(gates: list[threading.Event]) -> None:
    jobs = Jobs(2)
    gate, started = _gate(gates), threading.Event()
    calls: list[str] = []

    def first() -> str:
        calls.append("first")
        return str(_held(gate, started, "parsed")())

    future = jobs.submit("trace", first)
    assert started.wait(WAIT_S)
    # While it runs, a second asker (with its own function) gets the same future.
    again = jobs.submit("trace", lambda: calls.append("second"))
    assert again is future and jobs.running("trace")
    gate.set()
    assert future.result(timeout=WAIT_S) == again.result(timeout=WAIT_S) == "parsed"
    assert calls == ["first"]


def test_a_finished_key_is_free_before_its_waiters_wake_and_runs_anew() -> None:
    jobs = Jobs(1)
    runs: list[int] = []
    assert jobs.submit("k", lambda: runs.append(1) or "one").result(timeout=WAIT_S) == "one"
    # ``_done`` precedes ``set_result``: whoever the result wakes sees the key free already.
    assert not jobs.running("k")
    second = jobs.submit("k", lambda: runs.append(2) or "two")
    assert second.result(timeout=WAIT_S) == "two" and runs == [1, 2]


def test_an_exception_is_carried_in_the_future_and_frees_the_key() -> None:
    jobs = Jobs(1)

    def broken() -> None:
        raise ValueError("bad trace")

    future = jobs.submit("k", broken)
    with pytest.raises(ValueError, match="bad trace"):
        future.result(timeout=WAIT_S)
    assert not jobs.running("k")
    # The one worker survived the failure: the next job on the same key runs.
    assert jobs.submit("k", lambda: "fine").result(timeout=WAIT_S) == "fine"


def test_a_base_exception_is_carried_too_and_the_worker_survives() -> None:
    """SystemExit is no Exception: a worker that let it through would die, and every later job
    would wait forever on a lane with no thread."""
    jobs = Jobs(1, name="jobs-exit")

    def exits() -> None:
        raise SystemExit(3)

    with pytest.raises(SystemExit):
        jobs.submit("k", exits).result(timeout=WAIT_S)
    assert jobs.submit("other", lambda: "alive").result(timeout=WAIT_S) == "alive"
    assert _threads("jobs-exit") == ["jobs-exit-0"]


def test_at_most_workers_user_jobs_run_at_once(gates: list[threading.Event]) -> None:
    jobs = Jobs(2, name="jobs-bounded")
    gate_a, gate_b = _gate(gates), _gate(gates)
    started_a, started_b, started_c = threading.Event(), threading.Event(), threading.Event()
    where: dict[str, str] = {}

    def record(key: str, fn: Callable[[], object]) -> Callable[[], object]:
        def run() -> object:
            where[key] = threading.current_thread().name
            return fn()
        return run

    a = jobs.submit("a", record("a", _held(gate_a, started_a, "a")))
    jobs.submit("b", record("b", _held(gate_b, started_b, "b")))
    c = jobs.submit("c", record("c", lambda: started_c.set() or "c"))
    assert started_a.wait(WAIT_S) and started_b.wait(WAIT_S)
    # Three jobs submitted, two threads: both held, so "c" is still queued, not run.
    assert _threads("jobs-bounded") == ["jobs-bounded-0", "jobs-bounded-1"]
    assert not started_c.is_set() and jobs.running("c")
    gate_a.set()
    assert a.result(timeout=WAIT_S) == "a" and c.result(timeout=WAIT_S) == "c"
    # "c" ran on the thread "a" freed: no third thread was started for it.
    assert where["c"] == where["a"] != where["b"]
    assert _threads("jobs-bounded") == ["jobs-bounded-0", "jobs-bounded-1"]


def test_background_jobs_run_one_at_a_time_in_order_on_their_own_thread(gates: list[threading.Event]) -> None:
    jobs = Jobs(2, name="jobs-bg")
    gate, started = _gate(gates), threading.Event()
    order: list[tuple[str, str]] = []

    def note(key: str) -> Callable[[], str]:
        def run() -> str:
            order.append((key, threading.current_thread().name))
            return key
        return run

    first = jobs.submit("first", _held(gate, started, "first"), background=True)
    later = [jobs.submit(k, note(k), background=True) for k in ("second", "third")]
    assert started.wait(WAIT_S)
    # One background thread, held: the other two wait their turn; a user job does not.
    assert jobs.background_pending() == 3 and order == []
    assert jobs.submit("user", note("user")).result(timeout=WAIT_S) == "user"
    assert order == [("user", "jobs-bg-0")] and not first.done()
    gate.set()
    assert [f.result(timeout=WAIT_S) for f in later] == ["second", "third"]
    assert order[1:] == [("second", "jobs-bg-background"), ("third", "jobs-bg-background")]
    assert jobs.background_pending() == 0


def test_lane_flags_say_who_asked(gates: list[threading.Event]) -> None:
    jobs = Jobs(1)
    gate, started = _gate(gates), threading.Event()
    user = jobs.submit("user", _held(gate, started, "u"))
    background = jobs.submit("bg", lambda: "b", background=True)
    assert started.wait(WAIT_S)
    assert not jobs.background("user") and not jobs.background("unknown")
    # A background request for a key a user already wants joins it and leaves it a user's job.
    assert jobs.submit("user", lambda: "again", background=True) is user
    assert not jobs.background("user")
    assert background.result(timeout=WAIT_S) == "b"
    assert not jobs.background("bg") and not jobs.running("bg")  # done: forgotten, not "background"
    gate.set()
    assert user.result(timeout=WAIT_S) == "u" and jobs.background_pending() == 0


def test_two_background_requests_for_one_key_share_one_run(gates: list[threading.Event]) -> None:
    jobs = Jobs(1)
    gate, started = _gate(gates), threading.Event()
    calls: list[int] = []
    jobs.submit("hold", _held(gate, started), background=True)
    one = jobs.submit("k", lambda: calls.append(1) or "k", background=True)
    assert jobs.submit("k", lambda: calls.append(2) or "k", background=True) is one
    assert started.wait(WAIT_S) and jobs.background_pending() == 2  # "hold" and "k", not "k" twice
    gate.set()
    assert one.result(timeout=WAIT_S) == "k" and calls == [1]


def test_a_queued_background_job_claimed_by_a_user_runs_once_in_the_users_lane(
        gates: list[threading.Event]) -> None:
    jobs = Jobs(1, name="jobs-claim")
    gate, started = _gate(gates), threading.Event()
    ran: list[tuple[str, str]] = []

    def note(key: str) -> Callable[[], str]:
        def run() -> str:
            ran.append((key, threading.current_thread().name))
            return key
        return run

    held = jobs.submit("held", _held(gate, started, "held"), background=True)
    queued = jobs.submit("queued", note("queued"), background=True)
    assert started.wait(WAIT_S) and _threads("jobs-claim") == ["jobs-claim-background"]
    # The user's request starts a users' thread, which runs the job while the background one is held.
    assert jobs.submit("queued", note("not run")) is queued
    assert queued.result(timeout=WAIT_S) == "queued" and not held.done()
    assert ran == [("queued", "jobs-claim-0")] and jobs.background_pending() == 1
    gate.set()
    # The background lane still holds the claimed entry: it must skip it. A job queued after it
    # finishing proves the lane went past it (the lane is in order), without a sleep.
    assert jobs.submit("after", note("after"), background=True).result(timeout=WAIT_S) == "after"
    assert ran == [("queued", "jobs-claim-0"), ("after", "jobs-claim-background")]
    assert held.result(timeout=WAIT_S) == "held" and not jobs.running("queued")


def test_a_running_background_job_learns_that_a_user_now_waits(gates: list[threading.Event]) -> None:
    """A background parse asks ``background(key)`` as it runs (to keep less); once a user asks for
    the same key the answer turns False, and the user joins that run instead of starting another."""
    jobs = Jobs(1)
    asked, resume = _gate(gates), _gate(gates)
    seen: list[bool] = []
    calls: list[int] = []

    def parse() -> str:
        calls.append(1)
        seen.append(jobs.background("k"))
        asked.set()
        assert resume.wait(WAIT_S)
        seen.append(jobs.background("k"))
        return "parsed"

    future = jobs.submit("k", parse, background=True)
    assert asked.wait(WAIT_S)
    assert jobs.submit("k", lambda: calls.append(2) or "again") is future
    assert jobs.background_pending() == 0  # no longer counted as background work
    resume.set()
    assert future.result(timeout=WAIT_S) == "parsed"
    assert seen == [True, False] and calls == [1]


def test_a_job_cancelled_while_queued_never_runs_and_frees_its_key(gates: list[threading.Event]) -> None:
    jobs = Jobs(1)
    gate, started = _gate(gates), threading.Event()
    calls: list[str] = []
    jobs.submit("hold", _held(gate, started))
    queued = jobs.submit("k", lambda: calls.append("k"))
    assert started.wait(WAIT_S)
    assert queued.cancel()  # still pending: cancellable
    gate.set()
    # One worker, in order: once "next" has run, the cancelled entry was taken and dropped.
    assert jobs.submit("next", lambda: "next").result(timeout=WAIT_S) == "next"
    assert calls == [] and not jobs.running("k")
    with pytest.raises(CancelledError):
        queued.result(timeout=0)
    assert jobs.submit("k", lambda: "fresh").result(timeout=WAIT_S) == "fresh"


def test_many_threads_asking_at_once_share_one_job_per_key(gates: list[threading.Event]) -> None:
    jobs = Jobs(2)
    gate = _gate(gates)
    start = threading.Barrier(8)
    calls: list[str] = []
    lock = threading.Lock()
    futures: list[Future[str]] = []

    def fn(key: str) -> Callable[[], str]:
        def run() -> str:
            with lock:
                calls.append(key)
            assert gate.wait(WAIT_S)
            return key
        return run

    def ask(i: int) -> None:
        key = "even" if i % 2 == 0 else "odd"
        start.wait()
        futures.append(jobs.submit(key, fn(key), background=i % 4 == 0))

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT_S)
    # Eight askers, two keys: two distinct futures, each job run once.
    assert len(futures) == 8 and len({id(f) for f in futures}) == 2
    gate.set()
    assert sorted(f.result(timeout=WAIT_S) for f in futures) == ["even"] * 4 + ["odd"] * 4
    assert sorted(calls) == ["even", "odd"]


# -- the slow lane (issue 48): a slow run's jobs move aside, and other runs keep being served ----

def _slow_jobs(gates: list[threading.Event]) -> tuple[Jobs, threading.Event, list[Future[object]]]:
    """Two jobs of run "bad" holding both workers of the asked lane, past ``slow_after_s`` (0)."""
    jobs = Jobs(2, name="jobs-slow", slow_workers=2, slow_after_s=0.0)
    gate = _gate(gates)
    starts = [threading.Event(), threading.Event()]
    futures = [jobs.submit(f"bad-{i}", _held(gate, starts[i]), group="bad") for i in range(2)]
    assert all(s.wait(WAIT_S) for s in starts)
    return jobs, gate, futures


def test_a_job_running_past_its_time_moves_aside_and_another_run_is_served(gates: list[threading.Event]) -> None:
    jobs, gate, held = _slow_jobs(gates)
    # Both asked workers are busy: the next submission moves their jobs (and threads) to the slow lane.
    assert jobs.submit("good", lambda: "summary", group="good").result(timeout=WAIT_S) == "summary"
    assert jobs.slow("bad") and not jobs.slow("good")
    assert not any(f.done() for f in held)
    gate.set()
    assert [f.result(timeout=WAIT_S) for f in held] == [None, None]


def test_a_slow_runs_other_jobs_queue_in_the_slow_lane(gates: list[threading.Event]) -> None:
    jobs, gate, _ = _slow_jobs(gates)
    jobs.submit("probe", lambda: None, group="good").result(timeout=WAIT_S)  # moves "bad" aside
    ran: list[str] = []
    later = jobs.submit("bad-2", lambda: ran.append("bad-2"), group="bad")  # behind the two held ones
    assert jobs.submit("good-2", lambda: ran.append("good-2"), group="good").result(timeout=WAIT_S) is None
    assert ran == ["good-2"] and not later.done()
    gate.set()
    later.result(timeout=WAIT_S)
    assert ran == ["good-2", "bad-2"]


def test_a_heavy_job_starts_in_the_slow_lane(gates: list[threading.Event]) -> None:
    jobs = Jobs(1, name="jobs-heavy", slow_workers=1)
    gate, started = _gate(gates), threading.Event()
    heavy = jobs.submit("huge", _held(gate, started), heavy=True, group="huge")
    assert started.wait(WAIT_S)
    assert jobs.submit("small", lambda: 1, group="small").result(timeout=WAIT_S) == 1
    assert not heavy.done() and not jobs.slow("huge")  # large by size: moved aside without being marked
    assert "jobs-heavy-slow-0" in _threads("jobs-heavy")
    gate.set()
    heavy.result(timeout=WAIT_S)


def test_the_slow_lane_is_bounded(gates: list[threading.Event]) -> None:
    """Moving a job aside needs room in the slow lane: never more than ``slow_workers`` slow jobs at once."""
    jobs = Jobs(1, name="jobs-bound", slow_workers=1, slow_after_s=0.0)
    gate = _gate(gates)
    first, second = threading.Event(), threading.Event()
    jobs.submit("a", _held(gate, first), group="a")
    assert first.wait(WAIT_S)
    jobs.submit("b", _held(gate, second), group="b")  # moves "a" aside; a fresh thread takes "b"
    assert second.wait(WAIT_S)
    queued = jobs.submit("c", lambda: "c", group="c")  # "b" cannot move: the slow lane is full
    assert jobs.slow("a") and not jobs.slow("b") and not queued.done()
    assert len(_threads("jobs-bound")) == 2
    gate.set()
    assert queued.result(timeout=WAIT_S) == "c"
