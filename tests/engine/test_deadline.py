"""``deadline.within`` (``engine/deadline.py``), its cases in ``deadline_cases.py`` run in a process
of their own.

An asynchronous exception (``PyThreadState_SetAsyncExc``, how ``within`` stops a block) raised in a
process left torch's profiler spinning for ever, GIL held, in the next ``profile`` that process
started (in ``_add_metadata_json`` after ``_start_trace``), and the suite profiles models in its own
process after these cases. The server, where the limit applies, runs no profiler.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CASES = Path(__file__).with_name("deadline_cases.py")


def test_the_deadline_cases_pass_in_a_process_of_their_own() -> None:
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(CASES)],
                          capture_output=True, text=True, timeout=600, cwd=CASES.parents[2])
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "5 passed" in done.stdout, done.stdout[-2000:]
