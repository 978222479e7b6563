"""The event model: one trace as compact numpy columns with interned names.

Complete events ("X") are rows of parallel arrays sorted by (track, start, longest first), so
that nesting on a thread is a single sweep. Memory events are a second table. Shapes are kept
only for the ops the analysis reads (``vocab.shape_ops.SHAPE_OPS``), interned, because many ops share
them. Times are microseconds relative to ``TraceMeta.t0_us``; memory is bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["Events", "LinkedFileError", "OpShapes", "ReadError", "TraceError", "TraceMeta", "Track"]

I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
I8 = npt.NDArray[np.int8]


class TraceError(ValueError):
    """A trace that cannot be read: the message says why, for the user."""


class ReadError(TraceError):
    """The storage failed (a missing file, a network or permission error), not the trace's
    content: trying again later may succeed, so it is never remembered as the file's fault."""


class LinkedFileError(TraceError):
    """A file whose content would be served as it is (run metadata, a trace's download) has more
    than one hard link: its other name may lie outside the log directory, so it is not read."""


@dataclass(frozen=True, slots=True)
class Track:
    """A timeline: a CPU thread (pid, tid) or a device stream (device, stream)."""

    pid: int | str
    tid: int | str
    device: bool  # holds kernels, memcpys, memsets or device annotations


@dataclass(frozen=True, slots=True)
class OpShapes:
    """What the profiler recorded about an op's inputs (``record_shapes=True``)."""

    dims: tuple[Any, ...]
    types: tuple[str, ...]
    concrete: tuple[str, ...]


@dataclass(frozen=True)
class TraceMeta:
    t0_us: float  # the trace's earliest timestamp; event times are relative to it
    base_time_ns: int | None
    schema_version: int | None
    device_properties: tuple[dict[str, Any], ...]
    distributed_info: dict[str, Any] | None
    record_shapes: bool | None
    profile_memory: bool | None
    with_flops: bool | None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, eq=False)
class Events:
    names: tuple[str, ...]
    tracks: tuple[Track, ...]
    shapes: tuple[OpShapes, ...]
    # complete events
    name: I32
    kind: I8
    track: I32
    ts: F64
    dur: F64
    ext: I64  # External id, -1 when absent
    corr: I64  # correlation (runtime <-> kernel), -1 when absent
    seq: I64  # autograd Sequence number, -1 when absent
    shape: I32  # index into shapes, -1 when not kept
    graph: I64  # the CUDA graph a replayed kernel, memcpy or memset ran in (``graph id``, CUDA 12+), -1 when absent
    # memory events
    mem_ts: F64
    mem_track: I32
    mem_bytes: I64
    mem_total: I64  # Total Allocated after the event, -1 when absent (2021 traces)
    mem_device_type: I8  # 0 CPU, 1 CUDA (and ROCm), other values as written
    mem_device_id: I32
    meta: TraceMeta
    diagnostics: dict[str, int] = field(default_factory=dict)  # e.g. unknown categories, bad durations

    def __len__(self) -> int:
        return int(self.name.shape[0])

    @property
    def nbytes(self) -> int:
        """Approximate memory held, for cache accounting."""
        arrays = (self.name, self.kind, self.track, self.ts, self.dur, self.ext, self.corr, self.seq,
                  self.shape, self.graph, self.mem_ts, self.mem_track, self.mem_bytes, self.mem_total,
                  self.mem_device_type, self.mem_device_id)
        strings = sum(len(n) + 49 for n in self.names)
        return sum(a.nbytes for a in arrays) + strings + 200 * len(self.shapes)

    def input_dims(self, i: int, arg: int) -> list[int] | None:
        """The recorded dims of event ``i``'s input ``arg`` (``Input Dims``), None where it has none."""
        sid = int(self.shape[i])
        if sid < 0:
            return None
        dims = self.shapes[sid].dims
        d = dims[arg] if arg < len(dims) else None
        return [int(x) for x in d] if isinstance(d, list) and d else None

    def name_ids(self, wanted: set[str] | frozenset[str]) -> np.ndarray:
        """Ids of the names in ``wanted`` that occur in this trace."""
        return np.array([i for i, n in enumerate(self.names) if n in wanted], dtype=np.int32)
