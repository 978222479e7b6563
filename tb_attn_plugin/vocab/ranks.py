"""A trace's rank and world size: from the ``distributedInfo`` its header holds, else from the
rank its worker's or file's name gives (``host_rank3``, as our runner names workers;
``trace_rank-3.json``, as others do; ``profile_3``, Hugging Face Accelerate's process index).

Beside the trace-file grammar (``names.py``): the summary reads each trace's rank by it, the
engine selects ranks by it (``--ranks``) and the tab bounds a run's world size by it. Imports
nothing of ours.
"""

from __future__ import annotations

import re
from typing import TypeGuard

__all__ = ["MAX_WORLD_SIZE", "RANK_OUT_OF_RANGE", "rank_of"]

#: More ranks than any job has run (about a million); larger ranks and world sizes are ignored.
MAX_WORLD_SIZE = 1 << 20
RANK_OUT_OF_RANGE = f"ranks or world sizes out of range (over {MAX_WORLD_SIZE}), ignored"
_RANK_RE = re.compile(r"(?:^|[^a-z0-9])rank[-_]?(\d+)(?:[^0-9]|$)", re.IGNORECASE)
#: Hugging Face Accelerate's worker names (``profile_<process index>.json``): the whole name only, since
#: digits after a host (``host_1234``, as ``tensorboard_trace_handler`` names workers) are a pid.
_PROCESS_INDEX_RE = re.compile(r"profile_(\d+)")
_RANK_DIGITS = len(str(MAX_WORLD_SIZE))


def rank_of(info: dict[str, object] | None, worker: str, file: str, *,
            diagnostics: dict[str, int] | None = None) -> tuple[int | None, int | None]:
    """(rank, world size) of one trace: from its ``distributedInfo``, else from a name such as
    ``host_rank3`` (our runner), ``trace_rank-3.json`` (others) or the worker ``profile_3``
    (Accelerate's process index). Values out of bounds are None, and counted in
    ``diagnostics``."""
    rank = world = None
    bad = 0
    if info is not None:
        r, w = info.get("rank"), info.get("world_size")
        rank = r if _is_int(r) and 0 <= r < MAX_WORLD_SIZE else None
        world = w if _is_int(w) and 0 < w <= MAX_WORLD_SIZE else None
        bad = int(r is not None and rank is None) + int(w is not None and world is None)
    if rank is None:
        digits = _named_rank(worker, file)
        if digits is not None:
            if len(digits) <= _RANK_DIGITS and int(digits) < MAX_WORLD_SIZE:
                rank = int(digits)
            else:
                bad += 1
    if bad and diagnostics is not None:
        diagnostics[RANK_OUT_OF_RANGE] = diagnostics.get(RANK_OUT_OF_RANGE, 0) + bad
    return rank, world


def _named_rank(worker: str, file: str) -> str | None:
    """The digits of the rank a worker's or file's name gives, if any."""
    m = _PROCESS_INDEX_RE.fullmatch(worker)
    if m is not None:
        return m.group(1)
    for name in (worker, file):
        m = _RANK_RE.search(name)
        if m is not None:
            return m.group(1)
    return None


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)

