"""The Kineto adapter: the one place that knows how torch.profiler traces spell things.

Kineto's chrome-trace JSON has drifted since 2021: capitalised categories in old traces
(``Operator``, ``Kernel``, ``Runtime``), ``External id`` vs ``external id``, memory events with
or without a category and ``Total Allocated``, ``deviceProperties`` vs ``computeProperties``,
ROCm's spellings. The event fields we read are spelled once, in ``WireEvent`` and ``WireArgs``
(the strict decoder's types, whose field names the lenient path reuses), and everything
downstream sees the normalised ``Kind`` codes and field names defined here, never raw category
strings or field spellings. ``is_kineto_head`` tells a Kineto trace from other JSON by the same
spellings, from the first bytes of a file. Other tools' labels around a module's forward (PyTorch
Lightning's, a module path in a label) are read here too (``module_label``).
"""

from __future__ import annotations

import math
import re
import typing
from enum import IntEnum
from typing import Any, NamedTuple

import msgspec
import numpy as np

from tb_attn_plugin.trace.coerce import EMPTY_RAW, as_float, as_raw, int_or_none
from tb_attn_plugin.vocab.scopes import is_scope_name

__all__ = [
    "BACKWARD_PREFIX",
    "CATEGORY_KIND",
    "DEVICE_PROPERTY_KEYS",
    "FSDP_PREFIX",
    "HEADER_KEYS",
    "HIP_RUNTIME_PREFIX",
    "LIGHTNING_MODULE_PREFIX",
    "LIGHTNING_PREFIX",
    "MEMORY_EVENT_NAME",
    "MODULE_PREFIX",
    "NO_ARGS",
    "ROCM_KEYS",
    "STEP_PREFIX",
    "UNSET",
    "Kind",
    "ModuleLabel",
    "WireArgs",
    "WireEvent",
    "decode_events",
    "is_kineto_head",
    "kind_of",
    "lenient_event",
    "module_label",
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

#: PyTorch Lightning's label around a module's forward. ``PyTorchProfiler(record_module_names=True)``
#: (the default) hooks every submodule of the LightningModule (``RegisterRecordFunction`` in
#: ``pytorch_lightning/profilers/pytorch.py``, 2.6): ``record_function("[pl][module]" +
#: f"{type(m).__module__}.{type(m).__name__}: {name}")``, ``name`` from ``named_modules()``, so
#: relative to the LightningModule (``model.model.layers.0.self_attn``). A user annotation.
LIGHTNING_MODULE_PREFIX = "[pl][module]"
#: How all of Lightning's labels begin; the others (``[pl][profile]<action>``) time hooks and steps.
LIGHTNING_PREFIX = "[pl]["
#: FSDP2's labels, ``FSDP::<action> (<module path>)`` (``FSDPParamGroup._with_fqn`` in
#: ``torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py``): they time its hooks (all-gather,
#: reduce-scatter) around a module's forward, not the forward.
FSDP_PREFIX = "FSDP::"
#: A module path in a label: a dotted name whose first part is an identifier (``model.layers.3``).
_MODULE_PATH = re.compile(r"(?<![\w.])[A-Za-z_]\w*(?:\.\w+)+(?![\w.])", re.ASCII)


class ModuleLabel(NamedTuple):
    """The module a label wraps: its path (``model.layers.3.self_attn``), and its class where the
    label carries it (Lightning's: ``LlamaAttention``; "" where not)."""

    path: str
    cls: str


def module_label(name: str) -> ModuleLabel | None:
    """The module whose forward a ``record_function`` label (a user annotation) named ``name``
    wraps: Lightning's ``[pl][module]<module>.<Class>: <path>`` (``LIGHTNING_MODULE_PREFIX``);
    else the one module path the label holds, a dotted name whose first part is an identifier, one
    of whose parts is an integer (the index of a layer in its list) and two of whose parts are
    names (``model.layers.3.self_attn``, ``## forward: encoder.layer.2.attention.self``, ``h.0.attn``;
    not ``v1.2.3`` nor ``model.embed_tokens``). None for a label holding no such path or
    several, for our scopes, for Lightning's other labels (``[pl][profile]...``) and for FSDP's
    (``FSDP::pre_forward (model.layers.3)``: a hook's work, not the module's forward)."""
    if name.startswith(LIGHTNING_MODULE_PREFIX):
        qualified, sep, path = name[len(LIGHTNING_MODULE_PREFIX):].rpartition(": ")
        if not sep or not path or any(c.isspace() for c in path):
            return None
        return ModuleLabel(path, qualified.rpartition(".")[2])
    if "." not in name or name.startswith((LIGHTNING_PREFIX, FSDP_PREFIX)) or is_scope_name(name):
        return None
    paths = [p for p in _MODULE_PATH.findall(name) if _is_module_path(p.split("."))]
    return ModuleLabel(paths[0], "") if len(paths) == 1 else None


def _is_module_path(parts: list[str]) -> bool:
    """Whether a dotted name's parts make a module path in a list of layers: an integer part, and
    two named ones (``model.layers.3``, ``h.0.attn``; not a version, ``v1.2.3``)."""
    numbers = sum(part.isdigit() for part in parts)
    return numbers > 0 and len(parts) - numbers >= 2


#: Top-level keys that describe devices, by schema generation.
DEVICE_PROPERTY_KEYS: tuple[str, ...] = ("deviceProperties", "computeProperties")
#: Top-level keys only a ROCm build's Kineto writes (roctracer and the HIP runtime's versions).
ROCM_KEYS: tuple[str, ...] = ("roctracer_version", "hip_runtime_version", "hip_driver_version")
#: How HIP runtime calls begin (``hipLaunchKernel``, ``hipMemcpyAsync``): a ROCm trace's, where
#: its header lacks ``ROCM_KEYS`` (older ROCm builds).
HIP_RUNTIME_PREFIX = "hip"

#: Top-level keys Kineto writes beside ``schemaVersion`` (the profiler's options and the events too).
HEADER_KEYS: tuple[str, ...] = (*DEVICE_PROPERTY_KEYS, "distributedInfo", "record_shapes", "profile_memory",
                                "with_flops", "with_stack", "with_modules", "traceEvents", "baseTimeNanoseconds",
                                "displayTimeUnit", *ROCM_KEYS)
#: Categories only Kineto writes, besides ``CATEGORY_KIND``'s: flow arrows from CPU to GPU and from
#: forward to backward, the profiling window, instant events and profiler ranges.
_OTHER_CATEGORIES = ("ac2g", "fwdbwd", "trace", "cpu_instant_event", "cuda_profiler_range")
#: Every category that marks an event as Kineto's, in lower case (compared case-insensitively).
_KINETO_CATEGORIES = frozenset(CATEGORY_KIND) | frozenset(_OTHER_CATEGORIES)


def _key(names: typing.Iterable[str]) -> re.Pattern[bytes]:
    return re.compile(rb'"(?:' + b"|".join(re.escape(n.encode()) for n in names) + rb')"\s*:')


_SCHEMA_KEY = _key(["schemaVersion"])
_HEADER_KEY = _key(HEADER_KEYS)
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_CATEGORY = re.compile(rb'"cat"\s*:\s*"([^"\\]{1,64})"')
_KINETO_NAME = re.compile(rb'"name"\s*:\s*"(?:' + re.escape(STEP_PREFIX.encode()) + rb"|"
                          + re.escape(MEMORY_EVENT_NAME.encode()) + rb'")')
_BOM = b"\xef\xbb\xbf"


def is_kineto_head(head: bytes) -> bool:
    """Whether the first bytes of a file (decompressed) show a Chrome trace written by Kineto
    (torch.profiler): after an optional UTF-8 byte-order mark and whitespace, a JSON object with a
    ``schemaVersion`` key and one of ``HEADER_KEYS``, or a ``traceEvents`` array (an object) or a
    bare array of events (as older exporters write) in which an event in the head has a Kineto
    category (``CATEGORY_KIND``'s, ``ac2g``, ``fwdbwd``, ``Trace``...; in any case) or is a
    ``ProfilerStep#`` or ``[memory]`` event.

    Another tool's Chrome trace (DevTools' ``devtools.timeline``, ``v8``, events without a
    category), a JSON array of numbers or a config file are not. The keys are matched as keys (a
    quoted name and a colon), wherever they are in the head; a head cut in the middle of the
    header only lacks what it lacks."""
    text = (head[len(_BOM):] if head.startswith(_BOM) else head).lstrip(b" \t\r\n")
    if text.startswith(b"{"):
        if _SCHEMA_KEY.search(text) and _HEADER_KEY.search(text):
            return True
        found = _EVENTS_KEY.search(text)
        if found is None:
            return False
        events = text[found.end():]
    elif text.startswith(b"["):
        events = text[1:]
    else:
        return False
    if _KINETO_NAME.search(events):
        return True
    return any(m.group(1).decode("latin-1").lower() in _KINETO_CATEGORIES for m in _CATEGORY.finditer(events))


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
    graph: int | None = msgspec.field(name="graph id", default=UNSET)  # CUDA 12+: the graph a replayed kernel ran in


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
