"""Summaries as tidy tables: rows of plain values, one module-level function per table (pure; no
pandas, no I/O: ``api.Summaries`` turns each ``Table`` into a DataFrame).

Every table starts with its key columns, ``run, worker, span``, then ``layer``, ``phase``,
``head`` or ``step`` where they apply. The other columns are the schema's own fields
(``tb_attn_plugin/types/schema.py``, ``docs/summary.md``), read from the structs rather than listed
here, so a field added to the schema becomes a column: scalars under their names, a nested struct
flattened with its field's name as a prefix (``backward.cpu_us`` is ``backward_cpu_us``,
``roof.verdict`` is ``roof_verdict``; a null struct gives nulls), lists and dicts left out
(``kernels`` and ``ops`` list the top names; everything stays in ``Summaries.runs``). Every value is
the summary's own: nothing is computed here.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

import msgspec

from tb_attn_plugin.types.schema import (
    CollectiveStats,
    Generation,
    HeadStats,
    LayerStats,
    PhaseStats,
    RunSummary,
    Spread,
    StepStats,
    TokenStats,
    WorkerSummary,
)

if TYPE_CHECKING:
    from tb_attn_plugin.types.results import RankView

__all__ = [
    "KEYS", "Table", "collectives", "errors", "findings", "generation", "heads", "kernels", "layers", "memory",
    "ops", "phases", "ranks", "spreads", "steps", "tokens", "workers",
]

#: The key columns every per-worker table starts with.
KEYS = ("run", "worker", "span")
Row = tuple[object, ...]
Spec = tuple[tuple[str, tuple[str, ...]], ...]  # (column, attribute path)


@dataclass(frozen=True)
class Table:
    """Column names and rows (tuples in the columns' order); no rows still has its columns."""

    columns: tuple[str, ...]
    rows: list[Row]


_SCALARS = (int, float, str, bool)


def _members(tp: object) -> tuple[object, ...]:
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        return typing.get_args(tp)
    return (tp,)


def _struct(tp: object) -> type[msgspec.Struct] | None:
    """The struct a field holds (``Roof`` of ``Roof | None``), or None."""
    found = [m for m in _members(tp) if isinstance(m, type) and issubclass(m, msgspec.Struct)]
    return found[0] if len(found) == 1 else None


def _scalar(tp: object) -> bool:
    return all(m in _SCALARS or m is type(None) for m in _members(tp))


@cache
def _spec(cls: type[msgspec.Struct], skip: frozenset[str] = frozenset()) -> Spec:
    """The columns of ``cls``'s scalar fields, in the schema's order, nested structs flattened."""
    out: list[tuple[str, tuple[str, ...]]] = []
    for field in msgspec.structs.fields(cls):
        if field.name in skip:
            continue
        inner = _struct(field.type)
        if inner is not None:
            out.extend((f"{field.name}_{name}", (field.name, *path)) for name, path in _spec(inner))
        elif _scalar(field.type):
            out.append((field.name, (field.name,)))
    return tuple(out)


def _names(spec: Spec) -> tuple[str, ...]:
    return tuple(name for name, _ in spec)


def _values(value: object, spec: Spec) -> Row:
    return tuple(_get(value, path) for _, path in spec)


def _get(value: object, path: tuple[str, ...]) -> object:
    for name in path:
        if value is None:
            return None
        value = getattr(value, name)
    return value


def _workers(runs: Sequence[RunSummary]) -> Iterator[tuple[RunSummary, WorkerSummary, Row]]:
    for run in runs:
        for w in run.workers:
            yield run, w, (run.run, w.worker, w.span)


def _struct_table(runs: Sequence[RunSummary], cls: type[msgspec.Struct], key: str | None,
                  items: Callable[[WorkerSummary], Sequence[msgspec.Struct]]) -> Table:
    """One row per item of each worker: the keys, the item's ``key`` field, then its other fields."""
    keys = (key,) if key else ()
    spec = _spec(cls, frozenset(keys))
    return Table((*KEYS, *keys, *_names(spec)),
                 [(*k, *(getattr(x, c) for c in keys), *_values(x, spec))
                  for _, w, k in _workers(runs) for x in items(w)])


def workers(runs: Sequence[RunSummary]) -> Table:
    """One row per run × worker × span: ``WorkerSummary``'s scalars (``headline``, ``rank``...) and
    its roofline (``roofline_device``, ``roofline_attention_share``...); ``generation`` apart."""
    spec = _spec(WorkerSummary, frozenset({"schema", "worker", "span", "generation"}))
    return Table((*KEYS, *_names(spec)), [(*k, *_values(w, spec)) for _, w, k in _workers(runs)])


def phases(runs: Sequence[RunSummary]) -> Table:
    """One row per run × worker × span × layer × phase: ``PhaseStats``."""
    spec = _spec(PhaseStats, frozenset({"phase"}))
    return Table((*KEYS, "layer", "phase", *_names(spec)),
                 [(*k, layer.layer, ph.phase, *_values(ph, spec))
                  for _, w, k in _workers(runs) for layer in w.layers for ph in layer.phases])


def layers(runs: Sequence[RunSummary]) -> Table:
    """One row per run × worker × span × layer: ``LayerStats``, ``mask_*`` and ``roof_*`` flattened."""
    return _struct_table(runs, LayerStats, "layer", lambda w: w.layers)


def steps(runs: Sequence[RunSummary]) -> Table:
    """One row per run × worker × span × profiled step: ``WorkerSummary.per_step``."""
    return _struct_table(runs, StepStats, "step", lambda w: w.per_step)


def collectives(runs: Sequence[RunSummary]) -> Table:
    """One row per run × worker × span × kind of collective (``name``), means per step."""
    return _struct_table(runs, CollectiveStats, None, lambda w: w.collectives)


def tokens(runs: Sequence[RunSummary]) -> Table:
    """One row per run × worker × span × generation step (``Generation.tokens``), with the
    generation's ``clock``: workers without a generation have none."""
    spec = _spec(TokenStats, frozenset({"step"}))
    return Table((*KEYS, "step", "clock", *_names(spec)),
                 [(*k, t.step, w.generation.clock, *_values(t, spec))
                  for _, w, k in _workers(runs) if w.generation is not None for t in w.generation.tokens])


def generation(runs: Sequence[RunSummary]) -> Table:
    """One row per run × worker × span with a generation: ``Generation``'s scalars, its
    ``prefill_*`` and ``decode_*`` means and its ``fit_*``."""
    spec = _spec(Generation)
    return Table((*KEYS, *_names(spec)),
                 [(*k, *_values(w.generation, spec)) for _, w, k in _workers(runs) if w.generation is not None])


def _named(runs: Sequence[RunSummary], what: str, attr: str) -> Table:
    return Table((*KEYS, "layer", "phase", f"{what}_rank", what),
                 [(*k, layer.layer, ph.phase, i, name) for _, w, k in _workers(runs) for layer in w.layers
                  for ph in layer.phases for i, name in enumerate(getattr(ph, attr), 1)])


def kernels(runs: Sequence[RunSummary]) -> Table:
    """One row per run × worker × span × layer × phase × kernel: ``PhaseStats.kernel_names``, which
    holds the phase's most expensive kernels only (at most 5); ``kernel_rank`` 1 is the most expensive."""
    return _named(runs, "kernel", "kernel_names")


def ops(runs: Sequence[RunSummary]) -> Table:
    """As ``kernels`` for ``PhaseStats.ops``: the phase's most expensive top-level ops, at most 5."""
    return _named(runs, "op", "ops")


_MEMORY = ("alloc_bytes", "freed_bytes", "peak_bytes", "sxs_bytes", "sxs_allocs", "sxs_mask_bytes", "sxs_mask_allocs")


def memory(runs: Sequence[RunSummary]) -> Table:
    """One row per run × worker × span × layer × phase: the phase's memory figures, with its
    layer's ``peak_bytes`` (``layer_peak_bytes``) and one score tensor's size (``score_tensor_bytes``)."""
    return Table((*KEYS, "layer", "phase", *_MEMORY, "layer_peak_bytes", "score_tensor_bytes"),
                 [(*k, layer.layer, ph.phase, *(getattr(ph, m) for m in _MEMORY), layer.peak_bytes,
                   layer.score_tensor_bytes)
                  for _, w, k in _workers(runs) for layer in w.layers for ph in layer.phases])


def heads(runs: Sequence[RunSummary]) -> Table:
    """One row per run × worker × span × layer × head: ``HeadStats``, joined on (layer, head) with
    the run's per-head attention statistics where it has some (``RunSummary.attn_stats``): their
    ``weights``, the ``local`` and ``sink`` verdicts and one column per statistic recorded in any of
    the runs (``entropy``, ``sink_4``, ``window_256``...). A head with statistics that the summary
    lists no cost for has nulls for its cost; one without statistics, nulls for them."""
    spec = _spec(HeadStats, frozenset({"head"}))
    stats: list[str] = []
    for run in runs:
        stats.extend(s for s in (run.attn_stats.stats if run.attn_stats else []) if s not in stats)
    rows: list[Row] = []
    blank = (None,) * len(spec)
    for run, w, k in _workers(runs):
        a = run.attn_stats
        recorded = {(h.layer, h.head): h for h in a.heads} if a is not None else {}
        cost = {(layer.layer, h.head): h for layer in w.layers for h in layer.heads}
        keys = [*cost, *(key for key in recorded if key not in cost)]
        for layer_head in keys:
            h = cost.get(layer_head)
            r = recorded.get(layer_head)
            extra = (a.weights if a is not None else None, r.local, r.sink, *(r.values.get(s) for s in stats)) \
                if r is not None else (a.weights if a is not None else None, None, None, *(None for _ in stats))
            rows.append((*k, *layer_head, *(_values(h, spec) if h is not None else blank), *extra))
    return Table((*KEYS, "layer", "head", *_names(spec), "weights", "local", "sink", *stats), rows)


_FINDING = ("id", "severity", "title", "explanation", "suggestion")
_EVIDENCE = ("time_us", "bytes", "layers", "ops", "kernels", "details")


def findings(runs: Sequence[RunSummary]) -> Table:
    """One row per finding, in each worker's order (``docs/findings.md``): ``id``, ``severity``,
    ``title``, ``explanation``, ``suggestion`` and its evidence: ``time_us`` and ``bytes`` per step,
    ``layers``, ``ops`` and ``kernels`` (lists) and ``details`` (a dict of rule-specific figures)."""
    return Table((*KEYS, *_FINDING, *_EVIDENCE),
                 [(*k, *(getattr(f, c) for c in _FINDING), *(getattr(f.evidence, c) for c in _EVIDENCE))
                  for _, w, k in _workers(runs) for f in w.findings])


def errors(runs: Sequence[RunSummary]) -> Table:
    """One row per trace file that could not be read: ``run``, ``file``, ``error``."""
    return Table(("run", "file", "error"), [(run.run, e.file, e.error) for run in runs for e in run.errors])


def spreads(runs: Sequence[RunSummary]) -> Table:
    """How far the steps were apart: one row per run × worker × span × figure of a worker
    (``level`` "worker"), a layer ("layer") or a phase ("phase"; ``layer`` and ``phase`` null
    above their level), with ``Spread``'s fields (``noisy``: the steps differ by over 20%)."""
    spec = _spec(Spread)
    rows: list[Row] = []
    for _, w, k in _workers(runs):
        where: list[tuple[str, int | None, str | None, dict[str, Spread]]] = [("worker", None, None, w.spread)]
        for layer in w.layers:
            where.append(("layer", layer.layer, None, layer.spread))
            where.extend(("phase", layer.layer, ph.phase, ph.spread) for ph in layer.phases)
        rows.extend((*k, level, layer_no, phase, figure, *_values(s, spec))
                    for level, layer_no, phase, spread in where for figure, s in spread.items())
    return Table((*KEYS, "level", "layer", "phase", "figure", *_names(spec)), rows)


def ranks(views: Sequence[RankView]) -> Table:
    """One row per run × rank (``analysis.ranks.ranks``' ``RankRow``: means per step over the
    rank's spans, ``attention_best_us`` the straggler metric, ``attention_spread_*`` flattened)."""
    from tb_attn_plugin.types.results import RankRow

    spec = _spec(RankRow, frozenset({"worker", "rank"}))
    return Table(("run", "worker", "rank", *_names(spec)),
                 [(v.run, r.worker, r.rank, *_values(r, spec)) for v in views for r in v.ranks])
