"""The drill-down of one layer and phase (``/drilldown``): its ops as a tree of call paths, with
the device work each launched and the memory each allocated, means per step.

A node is a distinct call path inside the scope: the names of the scope's ops that enclose the
op, from the outermost down, then the op's own name and its input shapes and types. The same path
in every call and every step is one node, its calls counted, so the tree reads like the code.
Scopes and other non-op events between two ops are skipped (an op's parent is the nearest op of
the scope around it); an op whose enclosing ops lie outside the scope is a root.

- Device work (kernels, memcpy, memset) hangs under the innermost op of the scope around the
  call that launched it (``attribute.launchers``: the runtime call by correlation, else the op by
  External id), or at the root where there is none.
- Memory: an allocation (a memory event of positive size, on the memory device) belongs to the
  innermost op of the scope around it (``Attribution.mem_event``, then up to an op).

The tree is cut to ``max_nodes``: nodes are taken the most expensive first (CPU time plus device
time), each only after its parent, so what is listed is the costly part of the tree, whole.
"""

from __future__ import annotations

import heapq
from collections import defaultdict

import numpy as np
import numpy.typing as npt

from tb_attn_plugin.analysis.attribution.analyze import Analysis
from tb_attn_plugin.analysis.attribution.attribute import launchers
from tb_attn_plugin.analysis.attribution.nesting import nearest_marked_ancestor
from tb_attn_plugin.analysis.attribution.query import TraceQuery
from tb_attn_plugin.analysis.views.views import ViewError
from tb_attn_plugin.trace.kineto import Kind
from tb_attn_plugin.types.views import DrillKernel, DrillNode, DrillNodeKind, DrillOp, DrillTree
from tb_attn_plugin.vocab.scopes import PHASES

__all__ = ["MAX_TREE_NODES", "drilldown"]

#: Nodes in one drill-down's tree at most (a layer of a large model runs a few hundred distinct
#: call paths; the most expensive are kept, with their ancestors).
MAX_TREE_NODES = 400

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
B = npt.NDArray[np.bool_]

_OP: DrillNodeKind = "op"
_DEVICE_KINDS: dict[int, DrillNodeKind] = {int(Kind.MEMCPY): "memcpy", int(Kind.MEMSET): "memset"}  # else "kernel"


def drilldown(analysis: Analysis, *, layer: int, phase: str | None, backward: bool,
              max_nodes: int = MAX_TREE_NODES) -> DrillTree:
    """The figures of ``/drilldown``; the service adds the links to the trace file."""
    ev = analysis.events
    q = TraceQuery(ev, analysis.attr)
    sel, mem_sel = _selection(analysis, q, layer=layer, phase=phase, backward=backward)
    steps = q.step_count
    ops = np.flatnonzero(sel & (ev.kind == Kind.CPU_OP))
    device = np.flatnonzero(sel & q.device_work)
    allocs = np.flatnonzero(mem_sel & (ev.mem_bytes > 0))
    up = nearest_marked_ancestor(analysis.attr.parent, ev.kind == Kind.CPU_OP)  # each event's nearest op
    own = q.self_us[ops]
    tree, total = _Tree(analysis, ops, own, device, allocs).render(steps, max_nodes)
    return DrillTree(
        layer=layer, phase=phase, backward=backward, step_count=steps,
        tree=tree, tree_nodes=total, tree_truncated=len(tree) < total, max_tree_nodes=max_nodes,
        alloc_bytes=float(ev.mem_bytes[allocs].sum(dtype=np.float64)) / steps,
        ops=_flat_ops(analysis, ops, own, up[ops] < 0, steps), kernels=_flat_kernels(analysis, device, steps),
    )


def _selection(analysis: Analysis, q: TraceQuery, *, layer: int, phase: str | None,
               backward: bool) -> tuple[B, B]:
    """The events, and the memory events, of one layer's forward or backward, in one phase."""
    a = analysis.attr
    if layer < 0:  # -1 marks events outside attention: it is no layer
        raise ViewError(f"layer must be 0 or more, got {layer}")
    if not (a.layer == layer).any():
        raise ViewError(f"no layer {layer} in this trace")
    sel = (a.layer == layer) & (a.backward == backward) & q.in_steps
    mem = (a.mem_layer == layer) & (a.mem_backward == backward) & q.mem_in_steps & q.mem_ok
    if phase is not None:
        if phase == "other":
            code = -1
        elif phase in PHASES:
            code = PHASES.index(phase)
        else:
            raise ViewError(f"unknown phase {phase!r}; phases: {', '.join((*PHASES, 'other'))}")
        sel &= a.phase == code
        mem &= a.mem_phase == code
    return sel, mem


class _Tree:
    """The nodes of one drill-down, in the order they were found (a parent before its children)."""

    def __init__(self, analysis: Analysis, ops: I64, own: F64, device: I64, allocs: I64) -> None:
        ev, a = analysis.events, analysis.attr
        self.ev = ev
        in_scope = np.zeros(len(ev), np.bool_)
        in_scope[ops] = True
        above = nearest_marked_ancestor(a.parent, in_scope)  # each event's nearest op of the scope

        def owner(idx: I64) -> I64:
            """The op of the scope at or around each event (-1: none, or no event)."""
            ok = idx >= 0
            safe = np.maximum(idx, 0)
            return np.where(ok & in_scope[safe], safe, np.where(ok, above[safe], -1)).astype(np.int64)

        self.keys: dict[tuple[int, str, int, int], int] = {}
        self.parent: list[int] = []
        self.kind: list[DrillNodeKind] = []
        self.name: list[int] = []
        self.shape: list[int] = []
        node_of = np.full(len(ev), -1, np.int64)
        sid = ev.shape[ops].astype(np.int64)
        believed = a.shape_ok[np.maximum(sid, 0)] if a.shape_ok.size else np.zeros(sid.size, np.bool_)
        sid = np.where((sid >= 0) & believed, sid, -1)  # shapes that claim an impossible tensor: none
        op_node = np.empty(ops.size, np.int64)
        for k, (i, up, nid, s) in enumerate(zip(ops.tolist(), above[ops].tolist(), ev.name[ops].tolist(),
                                                sid.tolist(), strict=True)):
            # ``up`` comes first in trace order (a parent precedes its children), so it has its node
            node_of[i] = op_node[k] = self._node(int(node_of[up]) if up >= 0 else -1, _OP, nid, s)
        launcher = owner(launchers(ev, device).astype(np.int64))
        dev_node = np.empty(device.size, np.int64)
        for k, (op, nid, kind) in enumerate(zip(launcher.tolist(), ev.name[device].tolist(),
                                                ev.kind[device].tolist(), strict=True)):
            dev_node[k] = self._node(int(node_of[op]) if op >= 0 else -1, _DEVICE_KINDS.get(kind, "kernel"), nid, -1)
        alloc_op = owner(a.mem_event[allocs].astype(np.int64))
        alloc_node = np.where(alloc_op >= 0, node_of[np.maximum(alloc_op, 0)], -1)

        n = len(self.parent)
        placed = alloc_node >= 0
        self.calls = (np.bincount(op_node, minlength=n) + np.bincount(dev_node, minlength=n)).astype(np.float64)
        self.cpu = np.bincount(op_node, weights=ev.dur[ops], minlength=n)
        self.own = np.bincount(op_node, weights=own, minlength=n)
        self.device = np.bincount(dev_node, weights=ev.dur[device], minlength=n)
        self.self_alloc = np.bincount(alloc_node[placed], weights=ev.mem_bytes[allocs][placed].astype(np.float64),
                                      minlength=n)
        self.alloc = self.self_alloc.copy()
        for node in range(n - 1, -1, -1):  # children were made after their parents: sum upwards
            p = self.parent[node]
            if p >= 0:
                self.device[p] += self.device[node]
                self.alloc[p] += self.alloc[node]

    def _node(self, parent: int, kind: DrillNodeKind, nid: int, sid: int) -> int:
        key = (parent, kind, nid, sid)
        node = self.keys.get(key)
        if node is None:
            node = self.keys[key] = len(self.parent)
            self.parent.append(parent)
            self.kind.append(kind)
            self.name.append(nid)
            self.shape.append(sid)
        return node

    def render(self, steps: int, max_nodes: int) -> tuple[list[DrillNode], int]:
        """The nodes kept (at most ``max_nodes``), depth first, and the number there were."""
        n = len(self.parent)
        cost = self.cpu + self.device
        children: dict[int, list[int]] = defaultdict(list)
        for node, p in enumerate(self.parent):
            children[p].append(node)
        for kids in children.values():
            kids.sort(key=lambda c: (-cost[c], c))
        kept = np.zeros(n, np.bool_)
        frontier = [(-cost[c], c) for c in children[-1]]
        heapq.heapify(frontier)
        for _ in range(min(n, max_nodes)):
            _, node = heapq.heappop(frontier)
            kept[node] = True
            for c in children[node]:
                heapq.heappush(frontier, (-cost[c], c))
        order: list[int] = []
        stack = [c for c in reversed(children[-1]) if kept[c]]
        while stack:
            node = stack.pop()
            order.append(node)
            stack.extend(c for c in reversed(children[node]) if kept[c])
        ids = {node: k for k, node in enumerate(order)}
        depth: dict[int, int] = {-1: -1}
        out = []
        names, shapes = self.ev.names, self.ev.shapes
        for node in order:
            p = self.parent[node]
            depth[node] = depth[p] + 1
            kids = [ids[c] for c in children[node] if kept[c]]
            sid = self.shape[node]
            out.append(DrillNode(
                id=ids[node], parent=ids[p] if p >= 0 else None, children=kids,
                omitted_children=len(children[node]) - len(kids), depth=depth[node], kind=self.kind[node],
                name=names[self.name[node]], calls=float(self.calls[node]) / steps,
                cpu_us=float(self.cpu[node]) / steps, self_us=float(self.own[node]) / steps,
                device_us=float(self.device[node]) / steps, alloc_bytes=float(self.alloc[node]) / steps,
                self_alloc_bytes=float(self.self_alloc[node]) / steps,
                input_dims=[list(d) for d in shapes[sid].dims] if sid >= 0 else [],
                input_types=list(shapes[sid].types) if sid >= 0 else [],
            ))
        return out, n


def _flat_ops(analysis: Analysis, ops: I64, self_us: F64, top: B, steps: int) -> list[DrillOp]:
    """Each op name, all its call paths together, the most CPU time first (``top``: inside no op)."""
    ev = analysis.events
    rows: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
    for nid, d, own, outer in zip(ev.name[ops].tolist(), ev.dur[ops].tolist(), self_us.tolist(), top.tolist(),
                                  strict=True):
        row = rows[ev.names[nid]]
        row[0] += 1
        row[1] += d
        row[2] += own
        row[3] = max(row[3], 1.0 if outer else 0.0)
    return [DrillOp(name=n, calls=r[0] / steps, cpu_us=r[1] / steps, self_us=r[2] / steps, top_level=bool(r[3]))
            for n, r in sorted(rows.items(), key=lambda kv: -kv[1][1])]


def _flat_kernels(analysis: Analysis, device: I64, steps: int) -> list[DrillKernel]:
    """Each kernel (memcpy, memset) name, whichever op launched it, the most device time first."""
    ev = analysis.events
    rows: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for nid, d in zip(ev.name[device].tolist(), ev.dur[device].tolist(), strict=True):
        row = rows[ev.names[nid]]
        row[0] += 1
        row[1] += d
    return [DrillKernel(name=n, calls=r[0] / steps, device_us=r[1] / steps)
            for n, r in sorted(rows.items(), key=lambda kv: -kv[1][1])]
