"""Collective communication in one trace (NCCL, RCCL, Gloo, serving engines'...): calls and time per
step, by kind, and which of attention's events are communication.

What a collective looks like in a trace (PyTorch 2.x): on the CPU, ``c10d::allreduce_`` (an op)
around ``record_param_comms`` (an op carrying the collective's arguments) around a
``nccl:all_reduce`` / ``gloo:all_reduce`` annotation that the process group records; on the
device, one kernel per call, ``ncclKernel_AllReduce_RING_LL_Sum_float`` (``ncclDevKernel_...``
in newer NCCL, ``ncclSymkDevKernel_...`` for symmetric memory). A serving engine calls its own ops
(vLLM's ``vllm::all_reduce``, ``kernels.SERVING_COLLECTIVE_OPS``) and may run kernels of its own
(vLLM's custom all-reduce, ``kernels.COLLECTIVE_KERNELS``). Gloo runs the work on its own thread,
under a ``gloo:all_reduce`` annotation, while the calling thread's ``c10d::allreduce_`` only
enqueues it. A call counts once: the
outermost of the nested events on the calling thread, named after the most specific one inside
it (or the work annotation, when no calling side was recorded). CPU time is the work
annotation's span where the work runs on its own thread (the transfer and any wait for slower
ranks), else the calling thread's time in the call; device time is the kernels' time.

Bound: at most ``MAX_KINDS`` kinds are listed, the most expensive; the rest are summed into one
``OTHER`` row and counted under ``KINDS_MERGED`` in the caller's diagnostics (real traces have a
handful: all_reduce, all_gather, broadcast...).
"""

from __future__ import annotations

import re

import numpy as np

from tb_attn_plugin.analysis.common.bounds import MAX_COLLECTIVE_KINDS as MAX_KINDS
from tb_attn_plugin.trace.events import Events
from tb_attn_plugin.trace.kineto import DEVICE_KINDS, Kind
from tb_attn_plugin.types.schema import CollectiveStats
from tb_attn_plugin.vocab.kernels import COLLECTIVE_KERNELS, SERVING_COLLECTIVE_OPS
from tb_attn_plugin.vocab.scopes import PHASES, Phase

__all__ = ["KINDS_MERGED", "MAX_KINDS", "OTHER", "attention_comm", "collective_name", "collectives"]

_ANNOTATION_RE = re.compile(r"^(?:nccl|gloo|rccl|mpi|ucc|xccl):(?P<op>[a-z_]+)$")
_C10D_RE = re.compile(r"^c10d::_?(?P<op>[a-z_]+?)_*$")
#: NCCL's kernels, and RCCL's of the same names: ``ncclDevKernel_AllReduce_Sum_bf16_RING_LL``, older
#: ``ncclKernel_AllReduce_RING_LL_Sum_float``, the symmetric-memory ``ncclSymkDevKernel_AllReduce_...``.
_KERNEL_RE = re.compile(r"^(?:nccl|rccl)(?:Symk)?(?:Dev)?Kernel_(?P<op>[A-Za-z]+)")
GENERIC = "collective"  # record_param_comms with nothing more specific inside
OTHER = "other collectives"
KINDS_MERGED = f"collective kinds past {MAX_KINDS - 1} (summed as {OTHER!r})"
_COMM = PHASES.index(Phase.COMM)
#: c10d op and kernel spellings -> the annotations' names.
_ALIASES = {
    "allreduce": "all_reduce", "allreduce_coalesced": "all_reduce",
    "allgather": "all_gather", "allgather_into_tensor_coalesced": "all_gather", "allgather_base": "all_gather",
    "allgather_coalesced": "all_gather", "all_gather_into_tensor": "all_gather",
    "reduce_scatter_tensor_coalesced": "reduce_scatter", "reduce_scatter_base": "reduce_scatter",
    "reduce_scatter_tensor": "reduce_scatter",
    "alltoall": "all_to_all", "alltoall_base": "all_to_all",
    "AllReduce": "all_reduce", "AllGather": "all_gather", "ReduceScatter": "reduce_scatter",
    "Broadcast": "broadcast", "Reduce": "reduce", "SendRecv": "send_recv", "Send": "send", "Recv": "recv",
}


def collective_name(name: str) -> str | None:
    """The collective an event name stands for ("all_reduce", "broadcast"...), None if none: c10d's
    ops and annotations, NCCL's and RCCL's kernels, and a serving engine's own collective ops and
    kernels (``kernels.SERVING_COLLECTIVE_OPS``, ``kernels.COLLECTIVE_KERNELS``: vLLM's custom all-reduce)."""
    if name == "record_param_comms":
        return GENERIC
    if name in SERVING_COLLECTIVE_OPS:
        return SERVING_COLLECTIVE_OPS[name]
    m = _ANNOTATION_RE.match(name) or _C10D_RE.match(name) or _KERNEL_RE.match(name)
    if m is None:
        return next((kind for needle, kind in COLLECTIVE_KERNELS.items() if needle in name), None)
    op = m.group("op")
    return _ALIASES.get(op, op if op.islower() else op.lower())


def collectives(events: Events, parent: np.ndarray, steps: list[tuple[float, float]], *,
                diagnostics: dict[str, int] | None = None) -> list[CollectiveStats]:
    """Collectives per step (means over the profiled ``steps``, (start_us, end_us) each, or the
    whole trace if there are none), most expensive first. ``parent``: each event's enclosing
    event (-1 if none), from the attribution.

    Collectives mostly run on other threads than the step annotations (the process group's
    worker threads, autograd's), so an event belongs to the step its start falls in.
    """
    kind_of = [collective_name(n) for n in events.names]
    if not any(kind_of):
        return []
    named = np.array([k is not None for k in kind_of], np.bool_)[events.name]
    if steps:
        starts = np.array([s for s, _ in steps])
        ends = np.array([e for _, e in steps])
        order = np.argsort(starts)
        starts, ends = starts[order], ends[order]
        k = np.searchsorted(starts, events.ts, side="right") - 1
        in_steps = (k >= 0) & (events.ts < ends[np.maximum(k, 0)])
    else:
        in_steps = np.ones(len(events), np.bool_)
    step_count = max(1, len(steps))
    cpu = named & ((events.kind == Kind.CPU_OP) | (events.kind == Kind.ANNOTATION)) & in_steps
    kernel = named & (events.kind == Kind.KERNEL) & in_steps
    # The calling thread issues a call (c10d::allreduce_ around record_param_comms); NCCL records
    # its nccl:* annotation inside it, Gloo does the work on its own thread under gloo:*. A
    # call counts once, from the issuing side when there is one; CPU time is the work's span
    # where it runs apart (transfer and waiting for the other ranks), else the issuing call's.
    issue: dict[int, str] = {}
    work: dict[int, str] = {}
    for i in np.flatnonzero(cpu).tolist():
        top, p = i, int(parent[i])
        while p >= 0 and cpu[p]:
            top, p = p, int(parent[p])
        name = kind_of[events.name[i]] or GENERIC
        target = work if _ANNOTATION_RE.match(events.names[events.name[top]]) else issue
        if target.get(top, GENERIC) == GENERIC:
            target[top] = name
    calls: dict[str, float] = {}
    kernel_calls: dict[str, float] = {}
    issue_us: dict[str, float] = {}
    work_us: dict[str, float] = {}
    device_us: dict[str, float] = {}
    work_calls: dict[str, float] = {}
    for top, name in issue.items():
        calls[name] = calls.get(name, 0.0) + 1
        issue_us[name] = issue_us.get(name, 0.0) + float(events.dur[top])
    for top, name in work.items():
        work_calls[name] = work_calls.get(name, 0.0) + 1
        work_us[name] = work_us.get(name, 0.0) + float(events.dur[top])
    for name, n in work_calls.items():
        calls.setdefault(name, n)
    cpu_us = {name: work_us.get(name, issue_us.get(name, 0.0)) for name in set(issue_us) | set(work_us)}
    for i in np.flatnonzero(kernel).tolist():
        name = kind_of[events.name[i]] or GENERIC
        device_us[name] = device_us.get(name, 0.0) + float(events.dur[i])
        kernel_calls[name] = kernel_calls.get(name, 0.0) + 1
    names = sorted(set(calls) | set(device_us), key=lambda n: (-(device_us.get(n, 0.0) + cpu_us.get(n, 0.0)), n))
    # Calls as the CPU made them; kernels count only for collectives the CPU side did not show.
    out = [CollectiveStats(name=n, calls=calls.get(n, kernel_calls.get(n, 0.0)) / step_count,
                           cpu_us=cpu_us.get(n, 0.0) / step_count, device_us=device_us.get(n, 0.0) / step_count)
           for n in names]
    if len(out) <= MAX_KINDS:
        return out
    rest = out[MAX_KINDS - 1:]
    if diagnostics is not None:
        diagnostics[KINDS_MERGED] = diagnostics.get(KINDS_MERGED, 0) + len(rest)
    merged = CollectiveStats(name=OTHER, calls=sum(c.calls for c in rest), cpu_us=sum(c.cpu_us for c in rest),
                             device_us=sum(c.device_us for c in rest))
    return [*out[: MAX_KINDS - 1], merged]


def attention_comm(events: Events, parent: np.ndarray, layer: np.ndarray, is_scope: np.ndarray,
                   phase: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The events of attention whose time is communication: on the CPU, each ``comm`` phase scope
    (``phase``: each event's phase code, from the attribution) and, outside them, for each
    collective call inside attention, the outermost attention event around it that is not a scope
    (the autograd function that all-reduces tensor parallelism's input gradient, a row-parallel
    projection's op); on the device, the collectives' kernels attributed to attention and whatever
    else the ``comm`` phase ran (the device-to-device copies around a custom all-reduce). Their time
    is waiting for the other ranks as much as this rank's work, so the straggler metric leaves it
    out."""
    named = np.array([collective_name(n) is not None for n in events.names] or [False], np.bool_)[events.name]
    cpu = named & ((events.kind == Kind.CPU_OP) | (events.kind == Kind.ANNOTATION)) & (layer >= 0)
    comm = (phase == _COMM) & (layer >= 0) if phase is not None else np.zeros(len(events), np.bool_)
    tops: set[int] = set(np.flatnonzero(comm & is_scope).tolist())
    for i in np.flatnonzero(cpu).tolist():
        top, p = i, int(parent[i])
        while p >= 0 and layer[p] >= 0 and not is_scope[p]:
            top, p = p, int(parent[p])
        tops.add(top)
    # Nested tops count once: the outer one.
    out = [t for t in tops if not _inside(parent, t, tops)]
    on_device = np.isin(events.kind, DEVICE_KINDS)
    device = np.flatnonzero(on_device & (layer >= 0) & ((named & (events.kind == Kind.KERNEL)) | comm))
    return np.array(sorted(out), np.int64), device


def _inside(parent: np.ndarray, i: int, marked: set[int]) -> bool:
    p = int(parent[i])
    while p >= 0:
        if p in marked:
            return True
        p = int(parent[p])
    return False
