"""``Progress`` counts files and bytes done and draws a one-line bar on a terminal at most ten times
a second; the tests read ``line`` at chosen instants against figures worked by hand, and drive
``advance`` with a fake clock and a fake terminal to check when it draws and what it writes."""

from __future__ import annotations

import io
import threading
import types

import pytest

from tb_attn_plugin.engine import progress
from tb_attn_plugin.engine.progress import Progress


class Terminal(io.StringIO):
    """A stream that says it is a terminal, and counts its flushes."""

    def __init__(self) -> None:
        super().__init__()
        self.flushes = 0

    def isatty(self) -> bool:
        return True

    def flush(self) -> None:
        self.flushes += 1


class Clock:
    """``time.monotonic`` for the progress module, moved by hand."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(progress, "time", types.SimpleNamespace(monotonic=c.monotonic))
    return c


def test_the_line_shows_files_bytes_and_the_rate(clock: Clock) -> None:
    bar = Progress(64, 1_280_000_000, stream=io.StringIO(), enabled=False)
    bar.done_files, bar.done_bytes = 12, 240_000_000
    # 240 MB of 1280 MB is 18.75 % of 24 cells: 4.5, so 4 filled; 240 MB over 2 s is 120 MB/s.
    assert bar.line(clock.now + 2.0) == ("summarizing [####....................] 12/64 files, "
                                         "240.0 MB/1.28 GB, 120.0 MB/s")


def test_the_line_reads_the_clock_when_no_instant_is_given(clock: Clock) -> None:
    bar = Progress(2, 1_000_000, label="reading", stream=io.StringIO(), enabled=False)
    bar.done_files, bar.done_bytes = 1, 500_000
    clock.now += 0.5  # 0.5 MB in 0.5 s: 1.0 MB/s; half the bytes: 12 of 24 cells
    assert bar.line() == f"reading [{'#' * 12}{'.' * 12}] 1/2 files, 0.5 MB/1.0 MB, 1.0 MB/s"


def test_gigabytes_from_one_billion_bytes(clock: Clock) -> None:
    bar = Progress(1, 2_500_000_000, stream=io.StringIO(), enabled=False)
    bar.done_bytes = 999_999_999  # just under 1 GB: still megabytes, rounded to one decimal
    assert "1000.0 MB/2.50 GB" in bar.line(clock.now + 1.0)
    bar.done_bytes = 1_000_000_000
    assert "1.00 GB/2.50 GB, 1.00 GB/s" in bar.line(clock.now + 1.0)


def test_without_a_byte_total_the_bar_follows_the_files(clock: Clock) -> None:
    bar = Progress(4, 0, stream=io.StringIO(), enabled=False)
    bar.done_files = 3  # 3/4 of 24 cells: 18
    assert f"[{'#' * 18}{'.' * 6}] 3/4 files, 0.0 MB/0.0 MB" in bar.line(clock.now + 1.0)


def test_no_files_and_no_bytes_draw_an_empty_bar(clock: Clock) -> None:
    bar = Progress(0, 0, stream=io.StringIO(), enabled=False)
    assert bar.line(clock.now) == f"summarizing [{'.' * 24}] 0/0 files, 0.0 MB/0.0 MB, 0.0 MB/s"


def test_more_done_than_the_total_fills_the_bar_and_no_more(clock: Clock) -> None:
    """Files can grow while they are read: the bar stays 24 cells wide."""
    bar = Progress(1, 100, stream=io.StringIO(), enabled=False)
    bar.done_files, bar.done_bytes = 2, 300
    assert f"[{'#' * 24}] 2/1 files" in bar.line(clock.now + 1.0)


def test_no_time_elapsed_gives_a_finite_rate(clock: Clock) -> None:
    bar = Progress(1, 10, stream=io.StringIO(), enabled=False)
    bar.done_bytes = 10
    # The elapsed time is clamped to 1e-9 s: 10 bytes / 1e-9 s = 1e10 B/s = 10.00 GB/s.
    assert bar.line(clock.now).endswith(", 10.00 GB/s")


def test_a_terminal_is_drawn_on_at_most_every_tenth_of_a_second(clock: Clock) -> None:
    term = Terminal()
    bar = Progress(10, 10_000_000, stream=term)
    assert bar.enabled  # from the stream's isatty
    bar.advance(1_000_000)  # the first is drawn
    clock.now += 0.0625  # steps that binary floats hold exactly
    bar.advance(1_000_000)  # 0.0625 s after: not drawn
    clock.now += 0.0625
    bar.advance(1_000_000)  # 0.125 s after the last drawing: drawn
    draws = term.getvalue().split("\r")[1:]
    assert len(draws) == 2 and all(d.endswith("\x1b[K") for d in draws)
    assert draws[0].startswith("summarizing [##") and " 1/10 files, 1.0 MB/10.0 MB" in draws[0]
    assert " 3/10 files, 3.0 MB/10.0 MB, 24.0 MB/s" in draws[1]  # 3 MB in 0.125 s
    assert term.flushes == 2
    assert (bar.done_files, bar.done_bytes) == (3, 3_000_000)


def test_the_last_file_is_always_drawn(clock: Clock) -> None:
    term = Terminal()
    bar = Progress(2, 200, stream=term)
    bar.advance(100)
    bar.advance(100)  # no time has passed, but this is the last file: the bar shows 2/2
    assert term.getvalue().count("\r") == 2 and "2/2 files" in term.getvalue().rsplit("\r", 1)[1]


def test_advance_counts_several_files_at_once(clock: Clock) -> None:
    bar = Progress(10, 1000, stream=io.StringIO(), enabled=False)
    bar.advance(300, files=4)
    bar.advance(0, files=0)
    assert (bar.done_files, bar.done_bytes) == (4, 300)


def test_a_disabled_bar_writes_nothing_even_on_a_terminal(clock: Clock) -> None:
    term = Terminal()
    bar = Progress(1, 10, stream=term, enabled=False)
    bar.advance(10)
    bar.close()
    assert term.getvalue() == "" and term.flushes == 0 and bar.done_files == 1


def test_a_stream_that_is_not_a_terminal_writes_nothing(clock: Clock) -> None:
    log = io.StringIO()  # isatty() is False: a redirected run
    bar = Progress(1, 10, stream=log)
    assert not bar.enabled
    bar.advance(10)
    bar.close()
    assert log.getvalue() == ""


def test_close_ends_the_line_only_after_a_drawing(clock: Clock) -> None:
    never = Terminal()
    Progress(3, 10, stream=never).close()
    assert never.getvalue() == ""
    drawn = Terminal()
    bar = Progress(3, 10, stream=drawn)
    bar.advance(1)
    bar.close()
    assert drawn.getvalue().endswith("\x1b[K\n") and drawn.getvalue().count("\n") == 1


def test_enabled_can_be_forced_on_a_stream_that_is_not_a_terminal(clock: Clock) -> None:
    out = io.StringIO()
    bar = Progress(1, 1_000_000, stream=out, enabled=True)
    clock.now += 4.0
    bar.advance(1_000_000)  # 1 MB in 4 s: 0.25 MB/s, written with one decimal
    bar.close()
    assert out.getvalue() == f"\rsummarizing [{'#' * 24}] 1/1 files, 1.0 MB/1.0 MB, 0.2 MB/s\x1b[K\n"


def test_the_default_stream_is_stderr(monkeypatch: pytest.MonkeyPatch) -> None:
    err = Terminal()
    monkeypatch.setattr(progress.sys, "stderr", err)
    bar = Progress(1, 1)
    assert bar.stream is err and bar.enabled


def test_threads_advancing_together_lose_no_count() -> None:
    bar = Progress(8 * 500, 8 * 500 * 3, stream=io.StringIO(), enabled=False)
    start = threading.Barrier(8)

    def work() -> None:
        start.wait()
        for _ in range(500):
            bar.advance(3)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert (bar.done_files, bar.done_bytes) == (4000, 12000)
