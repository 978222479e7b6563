"""A one-line progress bar on a terminal: files and bytes done, and the rate.

Drawn on stderr, redrawn at most ten times a second, and only when stderr is a terminal: a
piped or redirected run (CI, ``> out.json 2> log``) gets no bar and no control characters.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

__all__ = ["Progress"]

_WIDTH = 24


def _mb(n: float) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB"


class Progress:
    """Counts files and bytes done out of a total; draws itself where ``stream`` is a terminal."""

    def __init__(self, files: int, nbytes: int, *, label: str = "summarizing", stream: TextIO | None = None,
                 enabled: bool | None = None) -> None:
        self.files, self.nbytes, self.label = files, nbytes, label
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.done_files = 0
        self.done_bytes = 0
        self._start = time.monotonic()
        self._drawn = 0.0
        self._lock = threading.Lock()

    def advance(self, nbytes: int, files: int = 1) -> None:
        with self._lock:
            self.done_files += files
            self.done_bytes += nbytes
            now = time.monotonic()
            if self.enabled and (now - self._drawn >= 0.1 or self.done_files >= self.files):
                self._drawn = now
                self._draw(now)

    def line(self, now: float | None = None) -> str:
        """The bar as text: ``summarizing [#####.....] 12/64 files, 240.0/1280.0 MB, 85.0 MB/s``."""
        elapsed = max((time.monotonic() if now is None else now) - self._start, 1e-9)
        share = self.done_bytes / self.nbytes if self.nbytes else self.done_files / max(self.files, 1)
        filled = min(_WIDTH, int(share * _WIDTH))
        return (f"{self.label} [{'#' * filled}{'.' * (_WIDTH - filled)}] {self.done_files}/{self.files} files, "
                f"{_mb(self.done_bytes)}/{_mb(self.nbytes)}, {_mb(self.done_bytes / elapsed)}/s")

    def _draw(self, now: float) -> None:
        self.stream.write("\r" + self.line(now) + "\x1b[K")
        self.stream.flush()

    def close(self) -> None:
        """Ends the bar's line (nothing when it was never drawn)."""
        if self.enabled and self._drawn:
            self.stream.write("\n")
            self.stream.flush()
