"""A run's ranks side by side: attention per rank and layer, the "All ranks" aggregate,
stragglers, collectives and the global layer × head map (pure: from the run's summaries).

A run written under ``torchrun`` holds one trace per rank. Ranks should cost the same; one
that spends more time in attention than the others holds them all up at the next collective.

One metric and one median, which the route, the CLI and the tab all name with the labels built
here (``metric_label`` and friends):

- the straggler metric is attention time (forward + backward) in each rank's fastest step
  (interference from other processes only ever slows a step down, while a real straggler is
  slow in every step), less the collectives inside attention (``collectives.attention_comm``:
  a row-parallel output projection all-reduces inside the block, where every rank waits for
  the slowest, so they would charge the straggler's delay to the fast ranks); the summaries
  keep no per-step figure per layer, so a layer is judged on its column: its mean per step less
  its ``comm`` phase; the table's other columns are means per step too;
- the median is ``median_over_ranks``: over every rank, the rank itself included, and with an
  even number of ranks the lower of the two middle values (``spread.median_low``). With two ranks
  that is the faster one, not a mean that half includes the straggler; for any rank in the slower
  half of an even count it equals the median of the other ranks. It is the rule that picks the
  rank every other view describes a run by (``spread.representative_worker``), so the "attention"
  column's median is the figure the runs list and Compare show for the run.

A straggler's figure exceeds that median by more than ``margin`` and by at least
``MIN_GAP_US``. Under tensor parallelism each rank
computes a slice of the heads and names them with global indices (``docs/scopes.md``), so
putting every rank's heads together gives the whole layer × head map; under data parallelism
every rank computes every head and the map shows their mean.

Bounds: a rank is in [0, ``MAX_WORLD_SIZE``) and a world size in [1, ``MAX_WORLD_SIZE``]
(``vocab.ranks.rank_of``, which each summary uses; others are ignored and counted under
``RANK_OUT_OF_RANGE`` in its diagnostics). The layer × head map lists at most
``MAX_MAP_HEADS`` cells, the first in (layer, head) order, with a warning naming how many more
there were.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Literal

from tb_attn_plugin.analysis.common.spread import median_low, spread
from tb_attn_plugin.types.results import GlobalHead, RankLayer, RankRow, RanksColumn, RanksLayer, RankView, Straggler
from tb_attn_plugin.types.schema import CollectiveStats, LayerStats, RunSummary, WorkerSummary
from tb_attn_plugin.vocab.scopes import Phase

__all__ = ["DEFAULT_MARGIN", "MAX_MAP_HEADS", "MEDIAN_LABEL", "heads_label", "means_label", "median_over_ranks",
           "metric_label", "ranks"]

DEFAULT_MARGIN = 0.2
#: A rank ahead of the median by less than this is not called a straggler, whatever the ratio:
#: below it, scheduling noise between processes dominates.
MIN_GAP_US = 500.0
#: Cells of the run's layer × head map: twice what a summary lists (``bounds.MAX_HEAD_ROWS``).
MAX_MAP_HEADS = 1 << 14
#: How the one median of the view is computed (``median_over_ranks``), in words.
MEDIAN_LABEL = ("over every rank, the rank itself included; with an even number of ranks, "
                "the lower of the two middle values")
#: The table's columns over every rank, in order: the straggler metric first.
COLUMNS = ("attention_best", "step", "attention", "collectives", "other")


def _clock_words(clock: str) -> str:
    return "device clock" if clock == "device" else "CPU clock"


def _passes(backward: bool) -> str:
    return "forward + backward" if backward else "forward: the trace has no backward"


def metric_label(clock: str, *, backward: bool = True) -> str:
    """The straggler metric, in the words the CLI and the tab use. ``backward``: whether any rank
    ran a backward pass (an inference trace's attention is its forward alone)."""
    return (f"attention time in each rank's fastest step ({_passes(backward)}, less the collectives inside it, "
            f"{_clock_words(clock)})")


def means_label(clock: str, *, backward: bool = True) -> str:
    """The table's other columns and the layers' figures."""
    return (f"means per profiled step ({_clock_words(clock)}; attention is {_passes(backward)}; a layer's time "
            f"leaves out the collectives inside it)")


def heads_label(clock: str) -> str:
    """The layer × head map's figure: what a head's time holds (``_global_heads``)."""
    return (f"forward time per step by head (its own head scope when measured, else an even share of the "
            f"rank's forward time in the layer, less the collectives inside it), mean over the profiled steps "
            f"and over replicas ({_clock_words(clock)})")


def median_over_ranks(values: list[float]) -> float:
    """The view's one median (``MEDIAN_LABEL``): the lower median of every rank's value; 0 for none."""
    return median_low(values) if values else 0.0


def ranks(run: RunSummary, *, margin: float = DEFAULT_MARGIN) -> RankView:
    """The ranks view of ``run`` (every worker of it; one row per worker, spans averaged).
    ``ranks_total`` counts the rows; a caller that read only some ranks sets the run's own count."""
    if margin < 0:
        raise ValueError("margin must be >= 0")
    by_worker: dict[str, list[WorkerSummary]] = defaultdict(list)
    for w in run.workers:
        by_worker[w.worker].append(w)
    device = any(w.device == "cuda" for w in run.workers)
    rows = [_row(name, spans, device) for name, spans in by_worker.items()]
    rows.sort(key=lambda r: (r.rank is None, r.rank if r.rank is not None else 0, r.worker))
    stragglers = _stragglers(rows, margin)
    flagged = {s.worker for s in stragglers}
    for row in rows:
        row.straggler = row.worker in flagged
    heads, more = _global_heads(by_worker, device)
    per_layer: dict[int, set[int]] = defaultdict(set)
    owners: dict[tuple[int, int], int] = {}
    for h in heads:
        per_layer[h.layer].add(h.head)
        owners[(h.layer, h.head)] = h.replicas
    head_count = max((max(v) + 1 for v in per_layer.values()), default=0)
    claimed: dict[int, list[str]] = defaultdict(list)
    for row in rows:
        if row.rank is not None:
            claimed[row.rank].append(row.worker)
    warnings = [f"workers {', '.join(ws)} all report rank {r}: their traces may come from different jobs"
                for r, ws in sorted(claimed.items()) if len(ws) > 1]
    if more:
        warnings.append(f"the layer × head map shows its first {MAX_MAP_HEADS} heads; {more} more are left out")
    clock: Literal["cpu", "device"] = "device" if device else "cpu"
    backward = any(layer.backward_us > 0 for r in rows for layer in r.layers)
    return RankView(
        run=run.run, clock=clock, metric="attention_best", metric_label=metric_label(clock, backward=backward),
        means_label=means_label(clock, backward=backward), heads_label=heads_label(clock), median_label=MEDIAN_LABEL,
        margin=margin, min_gap_us=MIN_GAP_US, ranks=rows,
        columns=[_column(key, [(_column_value(r, key), r.rank) for r in rows]) for key in COLUMNS],
        all_ranks=_aggregate(rows, by_worker, device),
        stragglers=stragglers, heads=heads, head_count=head_count,
        heads_sharded=bool(owners) and len(rows) > 1 and all(n == 1 for n in owners.values()),
        heads_complete=bool(per_layer) and all(v == set(range(len(v))) for v in per_layer.values()),
        warnings=warnings, errors=run.errors, ranks_total=len(rows),
    )


def _time(device: bool, cpu_us: float, device_us: float) -> float:
    return device_us if device else cpu_us


def _mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else 0.0


def _row(worker: str, spans: list[WorkerSummary], device: bool) -> RankRow:
    # A layer's time leaves out its ``comm`` phase, as the straggler metric does: there every rank waits
    # for the slowest, so the fast ranks' layers would grow by the straggler's delay.
    layers: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for w in spans:
        for layer in w.layers:
            layers[layer.layer].append(_less_comm(layer, device))
    step = _mean([_time(device, w.step_cpu_us, w.step_device_us) for w in spans])
    attention = _mean([_time(device, w.attention_cpu_us, w.attention_device_us) for w in spans])
    # The straggler metric leaves out the collectives inside attention: there the ranks wait for
    # the slowest, so a fast rank's attention would grow by the straggler's delay.
    per_step = [_time(device, p.attention_cpu_us - p.attention_comm_cpu_us,
                      p.attention_device_us - p.attention_comm_device_us) for w in spans for p in w.per_step]
    if not per_step:  # no ProfilerStep (a serving engine's trace): the whole trace, less its comm phases
        per_step = [max(_time(device, w.attention_cpu_us, w.attention_device_us) - _comm(w, device), 0.0)
                    for w in spans]
    collectives = _merge_collectives([w.collectives for w in spans])
    collective = sum(_time(device, c.cpu_us, c.device_us) for c in collectives)
    # The collectives inside attention are attention's time too: "other" leaves them out once.
    inside = _mean([_comm(w, device) for w in spans])
    first = spans[0]
    return RankRow(
        rank=first.rank, worker=worker, files=[w.file for w in spans], world_size=first.world_size,
        step_us=step, attention_us=attention, attention_best_us=min(per_step, default=attention),
        collective_us=collective,
        other_us=max(step - attention - max(collective - inside, 0.0), 0.0),
        layers=[RankLayer(layer=k, forward_us=_mean([f for f, _ in v]), backward_us=_mean([b for _, b in v]),
                          time_us=_mean([f + b for f, b in v])) for k, v in sorted(layers.items())],
        heads=sorted({h.head for w in spans for layer in w.layers for h in layer.heads}),
        collectives=collectives, straggler=False, attention_spread=spread(per_step),
    )


def _merge_collectives(per_span: list[list[CollectiveStats]]) -> list[CollectiveStats]:
    n = len(per_span)
    merged: dict[str, list[float]] = {}
    for stats in per_span:
        for c in stats:
            acc = merged.setdefault(c.name, [0.0, 0.0, 0.0])
            acc[0] += c.calls / n
            acc[1] += c.cpu_us / n
            acc[2] += c.device_us / n
    out = [CollectiveStats(name=k, calls=v[0], cpu_us=v[1], device_us=v[2]) for k, v in merged.items()]
    return sorted(out, key=lambda c: (-(c.cpu_us + c.device_us), c.name))


def _column_value(r: RankRow, key: str) -> float:
    return {"attention_best": r.attention_best_us, "step": r.step_us, "attention": r.attention_us,
            "collectives": r.collective_us, "other": r.other_us}[key]


def _layer_time(r: RankRow, layer: int) -> float:
    return next((x.time_us for x in r.layers if x.layer == layer), 0.0)


def _column(key: str, values: list[tuple[float, int | None]]) -> RanksColumn:
    v = [t for t, _ in values]
    return RanksColumn(column=key, mean_us=_mean(v), median_us=median_over_ranks(v), min_us=min(v, default=0.0),
                       max_us=max(v, default=0.0),
                       max_rank=max(values, key=lambda tr: tr[0])[1] if values else None)


def _less_comm(layer: LayerStats, device: bool) -> tuple[float, float]:
    """A layer's forward and backward time per step less its ``comm`` phase's: a layer column's
    figure, and what a derived head takes an even share of."""
    comm = [p for p in layer.phases if p.phase == Phase.COMM]
    forward = _time(device, layer.cpu_us, layer.device_us) - sum(_time(device, p.cpu_us, p.device_us) for p in comm)
    backward = _time(device, layer.backward.cpu_us, layer.backward.device_us) - sum(
        _time(device, p.backward.cpu_us, p.backward.device_us) for p in comm)
    return max(forward, 0.0), max(backward, 0.0)


def _comm(w: WorkerSummary, device: bool) -> float:
    """A summary's time in its layers' ``comm`` phases, forward and backward."""
    return sum(_time(device, p.cpu_us + p.backward.cpu_us, p.device_us + p.backward.device_us)
               for layer in w.layers for p in layer.phases if p.phase == Phase.COMM)


def _stragglers(rows: list[RankRow], margin: float) -> list[Straggler]:
    """The ranks slower than the median over ranks: in attention's fastest step, and in each layer's
    column (its mean per step less its collectives, ``_row``)."""
    if len(rows) < 2:
        return []
    out: list[Straggler] = []
    best = {r.worker: r.attention_best_us for r in rows}
    out += _slower(rows, best, margin, "attention", "attention in the fastest step")
    for k in sorted({layer.layer for r in rows for layer in r.layers}):
        times = {r.worker: _layer_time(r, k) for r in rows}
        out += _slower(rows, times, margin, f"layer {k}", f"layer {k}, mean per step")
    return out


def _slower(rows: list[RankRow], value: dict[str, float], margin: float, metric: str, label: str) -> list[Straggler]:
    """The ranks whose ``value`` exceeds the median over ranks by the margin and gap."""
    median = median_over_ranks(list(value.values()))
    out = []
    for r in rows:
        t = value[r.worker]
        if median > 0 and t > median * (1 + margin) and t - median >= MIN_GAP_US:
            out.append(Straggler(rank=r.rank, worker=r.worker, metric=metric, label=label, value_us=t,
                                 median_us=median, ratio=t / median))
    return out


def _aggregate(rows: list[RankRow], by_worker: dict[str, list[WorkerSummary]], device: bool) -> list[RanksLayer]:
    layers = sorted({layer.layer for r in rows for layer in r.layers})
    out = []
    for k in layers:
        times = [(_layer_time(r, k), r.rank) for r in rows]
        column = _column(f"L{k}", times)
        phases: dict[str, list[float]] = defaultdict(list)
        for spans in by_worker.values():
            for w in spans:
                for layer in w.layers:
                    if layer.layer == k:
                        for p in layer.phases:
                            phases[p.phase].append(_time(device, p.cpu_us, p.device_us))
        n = max(1, sum(1 for spans in by_worker.values() for w in spans if any(x.layer == k for x in w.layers)))
        out.append(RanksLayer(
            layer=k, mean_us=column.mean_us, median_us=column.median_us, min_us=column.min_us,
            max_us=column.max_us, max_rank=column.max_rank, phases={p: sum(v) / n for p, v in phases.items()},
        ))
    return out


def _global_heads(by_worker: dict[str, list[WorkerSummary]], device: bool) -> tuple[list[GlobalHead], int]:
    """The map's cells, at most ``MAX_MAP_HEADS``, and how many more there were."""
    cells: dict[tuple[int, int], dict[str, list[tuple[float, float, bool, int | None]]]] = defaultdict(dict)
    for worker, spans in by_worker.items():
        for w in spans:
            for stats in w.layers:
                # A head without its own scope gets an even share of its rank's forward time in the
                # layer, less its collectives: the figure the rank's layer column is made of, so the map
                # never shows a slow rank's heads as fast (a straggler's delay sits outside the core phases).
                share = _less_comm(stats, device)[0] / max(len(stats.heads), 1)
                for h in stats.heads:
                    cells[(stats.layer, h.head)].setdefault(worker, []).append(
                        (share if h.derived else _time(device, h.cpu_us, h.device_us), h.flops, h.derived, w.rank))
    out = []
    for (layer, head), per_worker in sorted(cells.items())[:MAX_MAP_HEADS]:
        values = [(_mean([t for t, _, _, _ in v]), _mean([f for _, f, _, _ in v]), any(d for _, _, d, _ in v), v[0][3])
                  for v in per_worker.values()]
        out.append(GlobalHead(
            layer=layer, head=head, ranks=sorted(r for *_, r in values if r is not None), replicas=len(values),
            time_us=_mean([t for t, _, _, _ in values]), flops=_mean([f for _, f, _, _ in values]),
            derived=any(d for _, _, d, _ in values),
        ))
    return out, max(0, len(cells) - MAX_MAP_HEADS)
