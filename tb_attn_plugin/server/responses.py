"""The bodies of the tab's HTTP routes, one msgspec Struct per route (``ROUTES``).

Mirrors ``docs/http_api.md``; ``/summary`` serves ``schema.RunSummary``. The frontend's
``frontend/src/types.ts`` is generated from these types' JSON Schema by ``devtools/gen_types.py``
(a field's trailing comment becomes its doc comment there), and a test fails when the two
differ. Every field is always present in the JSON (no ``omit_defaults``). Times are
microseconds, memory bytes.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from tb_attn_plugin.types.results import Comparison, RankView, ScalingFits
from tb_attn_plugin.types.schema import RunSummary
from tb_attn_plugin.types.strategies import StrategyTable
from tb_attn_plugin.types.views import DrillTree, MemoryCurve, RunFigures, TimelineSlice

__all__ = [
    "METADATA_SCHEMA",
    "ROUTES",
    "RUNS_SCHEMA",
    "LoadingResponse",
    "MetadataResponse",
    "RunEntry",
    "RunInfo",
    "RunStatus",
    "RunsResponse",
    "SpanEntry",
    "WorkerEntry",
]

RUNS_SCHEMA = "tb-attn.runs/2"
METADATA_SCHEMA = "tb-attn.metadata/1"


# -- 202 ------------------------------------------------------------------------------------
class LoadingResponse(msgspec.Struct, kw_only=True):
    """The 202 answer of a route whose traces are still being parsed: ask again later."""

    status: Literal["loading"] = "loading"
    runs: list[str]
    pending: int  # trace files still being parsed, of ``files``
    files: int
    retry_after_ms: int  # ask again after this long


# -- /runs ----------------------------------------------------------------------------------
class SpanEntry(msgspec.Struct, kw_only=True):
    span: str | None
    file: str
    size: int  # bytes as stored
    mtime: float  # seconds since the epoch


class WorkerEntry(msgspec.Struct, kw_only=True):
    worker: str
    spans: list[SpanEntry]


RunStatus = Literal["ready", "unloaded", "loading", "error", "running"]


class RunInfo(msgspec.Struct, kw_only=True):
    """What the runs list shows of a run's metadata (the runner's ``tb_attn_run.json``,
    docs/runner.md), built by ``run_info.run_info``: each field a string of at most 200
    characters (``error`` 500), one cut there ending with "…" and named in ``clipped``, or an
    integer in range; null where the metadata lacks the field or holds anything else there.
    ``/metadata`` sends one run's whole file."""

    model: str | None
    impl: str | None  # the metadata's "impl", else its config's
    seq: int | None  # the config's sequence length, 1 to 2^31 - 1
    batch: int | None  # the config's batch size, 1 to 2^31 - 1
    dtype: str | None  # the metadata's "dtype", else its config's
    mode: str | None  # the config's: "training", "inference" or "generate"
    device: str | None
    device_name: str | None
    user: str | None
    host: str | None
    started_at: str | None  # ISO 8601, as the runner wrote it
    torch_version: str | None
    parallel: str | None  # "none", "ddp" or "tp"
    world_size: int | None  # ranks, 1 to 2^20
    status: str | None  # the runner's: "running", "ok", "failed", "unsupported" or "interrupted"
    error: str | None  # the runner's error
    clipped: dict[str, int]  # each field cut here, with its length in the metadata (characters)


class RunEntry(msgspec.Struct, kw_only=True):
    run: str
    group: str  # the run's path without its last part
    info: RunInfo | None  # a few fields of the run's metadata, clipped; null: the run has none (or it is unreadable)
    status: RunStatus  # "running": the runner's metadata says the run is still being written
    error: str | None  # with status "error": why no trace could be read
    workers: list[WorkerEntry]
    figures: RunFigures | None  # null until every trace of the run is parsed, and when none has attention
    figures_error: str | None  # why a parsed run has no figures: no trace could be read, or no attention found
    parsing: bool  # a trace of the run is queued or being parsed: its figures are coming


class RunsResponse(msgspec.Struct, kw_only=True):
    schema: str = RUNS_SCHEMA
    logdir: str
    runs: list[RunEntry]
    listing_error: str | None  # the last listing failed (a storage error): ``runs`` is the one before
    retry_after_s: float | None = None  # refresh answered by an older listing (rate limit): ask again in s
    poll_after_ms: int | None = None  # some run's figures are being parsed: list again after this long


# -- /metadata ------------------------------------------------------------------------------
class MetadataResponse(msgspec.Struct, kw_only=True):
    """One run's whole metadata file, which ``/runs`` sends only a few fields of (``RunInfo``)."""

    schema: str = METADATA_SCHEMA
    run: str
    metadata: dict[str, object] | None  # the runner's tb_attn_run.json (docs/runner.md); null: none, or unreadable
    note: str | None = None  # what was done to it: cut at its depth bound, or not read (several hard links)


#: Each JSON route's body (``/trace`` sends the file itself); any of them may answer 202 with a
#: ``LoadingResponse`` instead, except ``/runs`` and ``/metadata``.
ROUTES: dict[str, type[msgspec.Struct]] = {
    "/runs": RunsResponse,
    "/metadata": MetadataResponse,
    "/summary": RunSummary,
    "/ranks": RankView,
    "/drilldown": DrillTree,
    "/memory": MemoryCurve,
    "/timeline": TimelineSlice,
    "/compare": Comparison,
    "/scaling": ScalingFits,
    "/strategies": StrategyTable,
    "202": LoadingResponse,
}
