"""The Kineto adapter: the one place that knows how torch.profiler traces spell things.

Kineto's chrome-trace JSON has drifted since 2021: capitalised categories in old traces
(``Operator``, ``Kernel``, ``Runtime``), ``External id`` vs ``external id``, memory events with
or without a category and ``Total Allocated``, ``deviceProperties`` vs ``computeProperties``,
ROCm's spellings. The event fields we read are spelled once, in ``WireEvent`` and ``WireArgs``
(the strict decoder's types, whose field names the lenient path reuses), and everything
downstream sees the normalised ``Kind`` codes and field names defined here, never raw category
strings or field spellings.
"""

from __future__ import annotations

import math
import typing
from enum import IntEnum
from typing import Any

import msgspec
import numpy as np

from tb_attn_plugin.trace.coerce import EMPTY_RAW, as_float, as_raw, int_or_none
from tb_attn_plugin.vocab.scopes import is_scope_name

__all__ = [
    "BACKWARD_PREFIX",
    "CATEGORY_KIND",
    "DEVICE_PROPERTY_KEYS",
    "HIP_RUNTIME_PREFIX",
    "MEMORY_EVENT_NAME",
    "MODULE_PREFIX",
    "NO_ARGS",
    "ROCM_KEYS",
    "STEP_PREFIX",
    "UNSET",
    "Kind",
    "WireArgs",
    "WireEvent",
    "decode_events",
    "kind_of",
    "lenient_event",
    "scopes_as_annotations",
]


class Kind(IntEnum):
    """Normalised kinds of complete ("X") events."""

    OTHER = 0
    CPU_OP = 1  # an ATen op or autograd function on a CPU thread
    ANNOTATION = 2  # record_function / user annotation on a CPU thread (our scopes, ProfilerStep#N)
    GPU_ANNOTATION = 3  # a user annotation projected on the device timeline
    KERNEL = 4
    MEMCPY = 5
    MEMSET = 6
    RUNTIME = 7  # cudaLaunchKernel, hipLaunchKernel, cuLaunchKernelEx (driver), ...
    MODULE = 8  # nn.Module python_function events (with_modules / with_stack)
    SYNC = 9  # cuda_sync


CATEGORY_KIND: dict[str, Kind] = {
    "cpu_op": Kind.CPU_OP,
    "operator": Kind.CPU_OP,
    "user_annotation": Kind.ANNOTATION,
    "gpu_user_annotation": Kind.GPU_ANNOTATION,
    "kernel": Kind.KERNEL,
    "gpu_memcpy": Kind.MEMCPY,
    "memcpy": Kind.MEMCPY,
    "gpu_memset": Kind.MEMSET,
    "memset": Kind.MEMSET,
    "cuda_runtime": Kind.RUNTIME,
    "runtime": Kind.RUNTIME,
    "cuda_driver": Kind.RUNTIME,
    "cuda_sync": Kind.SYNC,
    "python_function": Kind.MODULE,  # kept only for nn.Module events, see MODULE_PREFIX
}


def kind_of(category: str | None) -> Kind:
    if not category:
        return Kind.OTHER
    return CATEGORY_KIND.get(category.lower(), Kind.OTHER)


def scopes_as_annotations(names: typing.Sequence[str], name: np.ndarray, kind: np.ndarray) -> np.ndarray:
    """``kind`` with every event named by the scope grammar an annotation, whatever its category:
    ``record_function`` writes a scope as ``user_annotation``, PyTorch's fast record function (the
    runner's, ``runner/scoping.py``) as ``cpu_op``. ``name``: each event's index into ``names``."""
    scoped = np.fromiter((is_scope_name(n) for n in names), np.bool_, len(names))
    if not scoped.any():
        return kind
    return np.where((kind == int(Kind.CPU_OP)) & scoped[name], np.int8(Kind.ANNOTATION), kind).astype(np.int8)


#: Kinds that run on the device timeline (launched from a host op), as plain ints for ``np.isin``.
DEVICE_KINDS: tuple[int, ...] = (int(Kind.KERNEL), int(Kind.MEMCPY), int(Kind.MEMSET), int(Kind.GPU_ANNOTATION))


MEMORY_EVENT_NAME = "[memory]"
STEP_PREFIX = "ProfilerStep#"
MODULE_PREFIX = "nn.Module: "
BACKWARD_PREFIX = "autograd::engine::evaluate_function: "

#: Top-level keys that describe devices, by schema generation.
DEVICE_PROPERTY_KEYS: tuple[str, ...] = ("deviceProperties", "computeProperties")
#: Top-level keys only a ROCm build's Kineto writes (roctracer and the HIP runtime's versions).
ROCM_KEYS: tuple[str, ...] = ("roctracer_version", "hip_runtime_version", "hip_driver_version")
#: How HIP runtime calls begin (``hipLaunchKernel``, ``hipMemcpyAsync``): a ROCm trace's, where
#: its header lacks ``ROCM_KEYS`` (older ROCm builds).
HIP_RUNTIME_PREFIX = "hip"


#: What an integer field of ``WireArgs`` holds when the event does not have it. Not a value the
#: lenient path produces (``int_or_none`` keeps integers within +-(2**63 - 1)), so a column
#: builder tells it from any value read, in numpy, without a Python loop over events.
UNSET = -(1 << 63)


class WireArgs(msgspec.Struct, gc=False, frozen=True):
    """The ``args`` fields read from an event, as Kineto spells them (both spellings of the
    external id: traces before 2022 wrote it in lower case). An absent field is ``UNSET``
    (``EMPTY_RAW`` for the raw ones); ``None`` only where the trace wrote ``null``."""

    ext: int | None = msgspec.field(name="External id", default=UNSET)
    ext_lc: int | None = msgspec.field(name="external id", default=UNSET)
    corr: int | None = msgspec.field(name="correlation", default=UNSET)
    seq: int | None = msgspec.field(name="Sequence number", default=UNSET)
    dims: msgspec.Raw = msgspec.field(name="Input Dims", default=EMPTY_RAW)
    types: msgspec.Raw = msgspec.field(name="Input type", default=EMPTY_RAW)
    concrete: msgspec.Raw = msgspec.field(name="Concrete Inputs", default=EMPTY_RAW)
    nbytes: int | None = msgspec.field(name="Bytes", default=UNSET)
    total: int | None = msgspec.field(name="Total Allocated", default=UNSET)
    dev_type: int | None = msgspec.field(name="Device Type", default=UNSET)
    dev_id: int | None = msgspec.field(name="Device Id", default=UNSET)


#: The arguments of an event without ``args``: every field absent.
NO_ARGS = WireArgs()


class WireEvent(msgspec.Struct, gc=False):
    """One trace event, keeping only the fields we read (msgspec skips the others unbuilt).
    ``args`` is ``None`` only where the trace wrote ``"args": null``."""

    ph: str = ""
    name: str = ""
    cat: str | None = None
    pid: int | str = 0
    tid: int | str = 0
    ts: float = math.nan
    dur: float = 0.0
    args: WireArgs | None = NO_ARGS


_batch_decoder = msgspec.json.Decoder(list[WireEvent])


def decode_events(text: bytes | bytearray | memoryview) -> list[WireEvent]:
    """A JSON array of events, strictly typed. Raises msgspec's errors on any value of the wrong
    type or out of range; the caller then takes the lenient path (``lenient_event``)."""
    return _batch_decoder.decode(text)


def _args_coercions() -> list[tuple[str, str, Any]]:
    hints = typing.get_type_hints(WireArgs)
    return [(f.name, f.encode_name, as_raw if hints[f.name] is msgspec.Raw else int_or_none)
            for f in msgspec.structs.fields(WireArgs)]


#: (attribute, spelling, coercion) of each ``WireArgs`` field, read off the struct itself.
_ARGS_FIELDS = _args_coercions()


def _track_id(value: Any) -> int | str:
    return value if isinstance(value, (int, str)) and not isinstance(value, bool) else str(value)


def lenient_event(obj: dict[str, Any]) -> WireEvent:
    """The event ``obj`` (as ``json.loads`` decoded it, values of any type) with each field read
    as ``decode_events`` would have, or coerced (``trace.coerce``) where it could not be."""
    a = obj.get("args")
    args = WireArgs(**{attr: value for attr, spelling, coerce in _ARGS_FIELDS
                       if (value := coerce(a.get(spelling))) is not None}) if isinstance(a, dict) else NO_ARGS
    cat = obj.get("cat")
    return WireEvent(ph=str(obj.get("ph", "")), name=str(obj.get("name", "")),
                     cat=cat if isinstance(cat, str) else None,
                     pid=_track_id(obj.get("pid", 0)), tid=_track_id(obj.get("tid", 0)),
                     ts=as_float(obj.get("ts"), math.nan), dur=as_float(obj.get("dur"), 0.0), args=args)
