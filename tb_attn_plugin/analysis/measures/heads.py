"""Which heads could go sparse: each head's attention statistics next to its cost.

``attn_stats(table, ...)`` turns the statistics read from a run's event files
(``head_events.parse_head_stats``) into the summary's ``AttnStats``, marking heads ``local`` (mass
within W tokens at least the threshold) and ``sink`` (mass on the first 4 tokens at least 0.5).
``head_rows`` joins them with a worker's per-head cost; ``local_heads`` is the finding.

A sliding window of W saves, of a head's core work, 1 − w / r: w the share of (query, key) pairs
the window keeps (causal: Σ_i min(i + 1, W) / S²), r the share the head computes now, read from
the FLOPs model (``analysis.flops``): naive, the math backend and eager flex compute every pair
(r = 1), a fused kernel the causal half ((S + 1) / 2S) when causal. The time saved is that share
of the head's core time: an estimate at the head's own rate, not a measurement; the finding names
the runner command that measures it.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from tb_attn_plugin.analysis.common.configs import checked_metadata
from tb_attn_plugin.analysis.common.finding import new_finding
from tb_attn_plugin.analysis.common.wording import duration, pct
from tb_attn_plugin.analysis.ops.flops import causal_fraction
from tb_attn_plugin.types.schema import AttnStats, Finding, HeadAttention, RunSummary, WorkerSummary, finding_order
from tb_attn_plugin.vocab.backends import UNFUSED_BACKENDS
from tb_attn_plugin.vocab.masks import MaskSpec, kept_pairs
from tb_attn_plugin.vocab.scopes import CORE_PHASES

__all__ = ["LOCAL_THRESHOLD", "LOCAL_WINDOW", "SINK_MASS", "HeadRow", "attn_stats", "head_rows", "local_heads",
           "window_keeps", "with_attn_stats", "with_window"]

#: A head keeping at least this share of its mass within W tokens is local...
LOCAL_THRESHOLD = 0.99
#: ...for this W by default (the largest recorded window up to it).
LOCAL_WINDOW = 256
#: A head with at least this mass on the first 4 tokens is an attention sink.
SINK_MASS = 0.5

Table = Mapping[int, Mapping[int, Mapping[str, float]]]


def _window(stats: set[str], wanted: int | None) -> int | None:
    windows = sorted(int(s.split("_", 1)[1]) for s in stats if s.startswith("window_") and s[7:].isdigit())
    if not windows:
        return None
    if wanted is not None:
        return wanted if wanted in windows else None
    below = [w for w in windows if w <= LOCAL_WINDOW]
    return below[-1] if below else windows[0]


def attn_stats(table: Table, step: int, *, weights: str, files: list[str], window: int | None = None,
               threshold: float = LOCAL_THRESHOLD) -> AttnStats | None:
    """The run's ``AttnStats``; None without statistics, or when ``window`` was not recorded."""
    names = {name for heads in table.values() for values in heads.values() for name in values}
    w = _window(names, window)
    if not names or (window is not None and w is None):
        return None
    rows = []
    for layer in sorted(table):
        for head in sorted(table[layer]):
            values = dict(table[layer][head])
            rows.append(HeadAttention(layer=layer, head=head, values=values,
                                      local=w is not None and values.get(f"window_{w}", 0.0) >= threshold,
                                      sink=values.get("sink_4", 0.0) >= SINK_MASS))
    note = ("Random weights: these statistics say nothing about a trained model. Record them with your own "
            "weights (runner --checkpoint, or runner.instrument(model, attn_stats=True)).") \
        if weights == "random" else ""
    return AttnStats(step=step, weights=weights, stats=sorted(names, key=_stat_order), window=w, threshold=threshold,
                     sink_mass=SINK_MASS, heads=rows, files=files, note=note)


def _stat_order(name: str) -> tuple[int, int, str]:
    kind = name.split("_", 1)[0]
    rank = {"entropy": 0, "sink": 1, "window": 2, "top": 3, "distance": 4}.get(kind, 5)
    tail = name.split("_", 1)[1] if "_" in name else ""
    return rank, int(tail) if tail.isdigit() else 0, name


class HeadRow(msgspec.Struct, kw_only=True):
    """One head: its cost in the worker's summary and its statistics."""

    layer: int
    head: int
    derived: bool  # its time is an even share of the layer's core (no head scopes)
    time_us: float  # forward, on the worker's clock
    time_share: float  # of attention's forward time
    flops: float
    values: dict[str, float]
    local: bool
    sink: bool


def head_rows(worker: WorkerSummary, stats: AttnStats) -> list[HeadRow]:
    """Every head with statistics, with its cost (0 where the summary lists no such head)."""
    device = worker.device != "cpu"
    total = sum(layer.device_us if device else layer.cpu_us for layer in worker.layers) or 0.0
    cost = {(layer.layer, h.head): h for layer in worker.layers for h in layer.heads}
    rows = []
    for a in stats.heads:
        h = cost.get((a.layer, a.head))
        t = (h.device_us if device else h.cpu_us) if h is not None else 0.0
        rows.append(HeadRow(layer=a.layer, head=a.head, derived=h.derived if h is not None else True, time_us=t,
                            time_share=t / total if total > 0 else 0.0, flops=h.flops if h is not None else 0.0,
                            values=a.values, local=a.local, sink=a.sink))
    return rows


def window_keeps(seq: int, window: int, *, causal: bool) -> float:
    """The share of all S² (query, key) pairs a sliding window of ``window`` keys keeps."""
    if seq <= 0 or window <= 0:
        return 0.0
    # Constant time: ``seq`` is the run metadata's, which anyone can write.
    kept = kept_pairs(MaskSpec("sliding", window), seq, seq, causal=causal) or 0
    return kept / (seq * seq)


def local_heads(worker: WorkerSummary, stats: AttnStats, *, seq: int | None, causal: bool) -> Finding | None:
    """``local-heads``: the heads whose mass within W is at least the threshold, their share of
    attention time, and what a sliding window of W would save (``window_keeps`` against the
    share of pairs each head computes now)."""
    rows = [r for r in head_rows(worker, stats) if r.local]
    w, device = stats.window, worker.device != "cpu"
    if not rows or w is None:
        return None
    by_layer = {layer.layer: layer for layer in worker.layers}
    keep = window_keeps(seq, w, causal=causal) if seq else None
    saved = 0.0
    for r in rows:
        layer = by_layer.get(r.layer)
        if layer is None or not layer.heads or keep is None or seq is None:
            continue
        # The head's own time where its scope measured it, else an even share of the layer's core.
        core_us = r.time_us if not r.derived else \
            sum(p.device_us if device else p.cpu_us for p in layer.phases if p.phase in CORE_PHASES) / len(layer.heads)
        # The pairs it computes now, as the FLOPs count them: every one unfused, the causal half fused.
        now = 1.0 if layer.backend in UNFUSED_BACKENDS or not causal else causal_fraction(seq, seq)
        saved += core_us * max(0.0, 1.0 - keep / now)
    total = sum(layer.device_us if device else layer.cpu_us for layer in worker.layers)
    share = sum(r.time_share for r in rows)
    sinks = [r for r in rows if r.sink]
    groups: dict[int, list[int]] = {}
    for r in rows:
        groups.setdefault(r.layer, []).append(r.head)
    where = "; ".join(f"layer {layer} head{'s' if len(hs) > 1 else ''} {', '.join(map(str, hs))}"
                      for layer, hs in sorted(groups.items()))
    plural = "s" if len(rows) != 1 else ""
    of_attention = pct(saved / total) if total > 0 else "0%"
    text = (f"{len(rows)} head{plural} keep at least {pct(stats.threshold)} of their attention mass within {w} tokens "
            f"({where}), and they take {pct(share)} of attention's forward time "
            f"({duration(sum(r.time_us for r in rows))} per step). A sliding window of {w} would save about "
            f"{duration(saved)} per step of their core work ({of_attention} of attention's forward time), estimated "
            "from the share of (query, key) pairs they compute now: an estimate, to be measured.")
    if sinks:
        text += (f" {len(sinks)} of them also put at least half their mass on the first 4 tokens (attention sinks): "
                 "a window must keep those tokens for them, as StreamingLLM does.")
    if stats.weights == "random":
        text += " These statistics come from random weights and say nothing about a trained model."
    keep_first = " plus the first 4 tokens (a sink window)" if sinks else ""
    suggestion = (f"Give these heads (or their layers) a sliding window of {w}{keep_first}, and measure it: "
                  f"tb-attn-run --impl flex --mask sliding:{w} (or naive/sdpa with --mask sliding:{w}) with the same "
                  "model and length, then tb-attn compare.")
    return new_finding(
        "local-heads", "medium" if share >= 0.2 and stats.weights != "random" else "low",
        f"{len(rows)} head{plural} keep {pct(stats.threshold)} of their attention within {w} tokens", text, suggestion,
        layers=sorted(groups), ops=[], kernels=[], time_us=sum(r.time_us for r in rows), nbytes=0.0,
        details={"window": w, "threshold": stats.threshold, "heads": len(rows), "sinks": len(sinks),
                 "time_share": share, "saving_us": saved, "weights": stats.weights,
                 "heads_list": ",".join(f"L{r.layer}H{r.head}" for r in rows)[:2000]})


def with_window(stats: AttnStats, window: int | None, threshold: float | None) -> AttnStats | None:
    """The statistics with the local verdict for another W or threshold (the CLI's ``--window``,
    ``--threshold``); None when that window was not recorded."""
    names = set(stats.stats)
    w = _window(names, window if window is not None else stats.window)
    if w is None and window is not None:
        return None
    t = stats.threshold if threshold is None else threshold
    heads = [msgspec.structs.replace(h, local=w is not None and h.values.get(f"window_{w}", 0.0) >= t)
             for h in stats.heads]
    return msgspec.structs.replace(stats, window=w, threshold=t, heads=heads)


def with_attn_stats(summary: RunSummary, stats: AttnStats) -> RunSummary:
    """The run summary with ``attn_stats`` set to ``stats`` and each worker's ``local-heads``
    finding redone for them (new worker summaries where it changes; the run's config gives the
    sequence length and whether it is causal)."""
    metadata = checked_metadata(summary.metadata)[0]
    config = metadata.get("config") if metadata else None
    seq = config.get("seq") if isinstance(config, Mapping) else None
    causal = config.get("causal", True) if isinstance(config, Mapping) else True
    workers = []
    for w in summary.workers:
        found = local_heads(w, stats, seq=seq if type(seq) is int and seq > 0 else None, causal=bool(causal))
        kept = [f for f in w.findings if f.id != "local-heads"]
        if found is not None or len(kept) != len(w.findings):
            findings = sorted(kept + ([found] if found is not None else []),
                              key=finding_order)
            w = msgspec.structs.replace(w, findings=findings)
        workers.append(w)
    return msgspec.structs.replace(summary, attn_stats=stats, workers=workers)
