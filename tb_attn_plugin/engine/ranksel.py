"""Rank sampling: which of a many-rank run's trace files to read (``--ranks 0-7,512``).

A job of a thousand ranks writes a thousand traces; to look at a few of them interactively, the
CLI, the API and the Ranks view take a selection such as ``0-7,512``: ranks and inclusive
ranges, comma-separated. It is applied to the listing, before anything is read, so a file's
rank must come from its name: ``host_rank3`` (our runner), ``trace_rank-3.json`` (others),
``profile_3.json`` (Hugging Face Accelerate's process index), as ``vocab.ranks.rank_of`` reads it
without the trace's ``distributedInfo``. Where a run's
workers carry no rank in their names (``host_pid``, as ``tensorboard_trace_handler`` names
them), a worker's rank is its position among the run's workers in sorted order. Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from tb_attn_plugin.trace.discover import Run
from tb_attn_plugin.vocab.ranks import MAX_WORLD_SIZE, rank_of

__all__ = ["MAX_RANK_SPEC", "RankSet", "file_ranks", "parse_ranks", "select_ranks"]

MAX_RANK_SPEC = 4096  # characters: far more than anyone types, bounded for a query string


@dataclasses.dataclass(frozen=True, slots=True)
class RankSet:
    """Inclusive ranges of ranks, sorted and merged; ``spec`` as the user wrote it, normalized."""

    ranges: tuple[tuple[int, int], ...]

    def __contains__(self, rank: object) -> bool:
        return isinstance(rank, int) and any(lo <= rank <= hi for lo, hi in self.ranges)

    @classmethod
    def of(cls, ranks: Iterable[int]) -> RankSet:
        """The ranks given, as runs of consecutive ranks."""
        ranges: list[tuple[int, int]] = []
        for rank in sorted(set(ranks)):
            if ranges and rank == ranges[-1][1] + 1:
                ranges[-1] = (ranges[-1][0], rank)
            else:
                ranges.append((rank, rank))
        return cls(tuple(ranges))

    @property
    def spec(self) -> str:
        return ",".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in self.ranges)


def parse_ranks(text: str) -> RankSet:
    """``"0-7,512"`` as a RankSet. Raises ValueError, with what is wrong, for anything else."""
    if len(text) > MAX_RANK_SPEC:
        raise ValueError(f"a rank selection is at most {MAX_RANK_SPEC} characters")
    ranges: list[tuple[int, int]] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        lo_text, dash, hi_text = (t.strip() for t in part.partition("-"))
        if not _rank_digits(lo_text) or (dash and not _rank_digits(hi_text)):
            raise ValueError(f"bad rank selection {part!r}: use ranks and ranges such as 0-7,512")
        lo = int(lo_text)
        hi = int(hi_text) if dash else lo
        if lo < 0 or hi < lo or hi >= MAX_WORLD_SIZE:
            raise ValueError(f"bad rank range {part!r}: ranks are 0..{MAX_WORLD_SIZE - 1}, low before high")
        ranges.append((lo, hi))
    if not ranges:
        raise ValueError("empty rank selection: use ranks and ranges such as 0-7,512")
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
        else:
            merged.append((lo, hi))
    return RankSet(tuple(merged))


def _rank_digits(text: str) -> bool:
    """ASCII digits only: int() would also take "+3", "1_000" and other scripts' digits."""
    return text.isascii() and text.isdigit()


def file_ranks(run: Run) -> dict[str, int]:
    """Each worker's rank as the names tell it: from every worker's name where each has a rank in
    it (and no two share one), else the workers' positions in sorted order."""
    workers = run.workers
    first_file: dict[str, str] = {}
    for f in run.files:
        first_file.setdefault(f.worker, f.name)
    named: dict[str, int] = {}
    for worker in workers:
        rank, _ = rank_of(None, worker, first_file.get(worker, ""))
        if rank is None:
            break
        named[worker] = rank
    if len(named) == len(workers) and len(set(named.values())) == len(named):
        return named
    return {worker: i for i, worker in enumerate(workers)}


def select_ranks(run: Run, ranks: RankSet | None) -> Run:
    """The run with only the traces of the selected ranks (all of them for None)."""
    if ranks is None:
        return run
    by_worker = file_ranks(run)
    return dataclasses.replace(run, files=tuple(f for f in run.files if by_worker.get(f.worker) in ranks))
