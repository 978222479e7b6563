"""Per-head attention statistics next to their cost (analysis/measures/heads.py): the local and sink verdicts,
the window chosen, the join with a worker's head costs, the share of S² pairs a sliding window keeps
and the local-heads finding's saving, each worked by hand on small hand-built summaries, and
``with_attn_stats``/``with_window`` returning new structs that leave the given ones unchanged."""

from __future__ import annotations

import msgspec
import pytest

from tb_attn_plugin.analysis.measures.heads import (
    LOCAL_THRESHOLD,
    SINK_MASS,
    attn_stats,
    head_rows,
    local_heads,
    window_keeps,
    with_attn_stats,
    with_window,
)
from tb_attn_plugin.analysis.ops.flops import causal_fraction
from tb_attn_plugin.types.schema import (
    AttnStats,
    Backward,
    Evidence,
    Finding,
    HeadStats,
    LayerStats,
    PhaseStats,
    RunSummary,
    WorkerSummary,
)

#: A finding's figures are rounded to 4 decimals (``finding.new_finding``).
ROUNDED = 1e-4


def _phase(phase: str, cpu_us: float, device_us: float = 0.0) -> PhaseStats:
    return PhaseStats(phase=phase, calls=1.0, cpu_us=cpu_us, cpu_self_us=cpu_us, device_us=device_us, kernels=0.0,
                      kernel_names=[], ops=[], flops=0.0, flops_per_s=0.0, alloc_bytes=0.0, freed_bytes=0.0,
                      peak_bytes=0, sxs_bytes=0.0, sxs_allocs=0.0, backward=Backward())


def _head(head: int, cpu_us: float, *, derived: bool = False, device_us: float = 0.0, flops: float = 0.0
          ) -> HeadStats:
    return HeadStats(head=head, derived=derived, cpu_us=cpu_us, device_us=device_us, flops=flops, alloc_bytes=0.0,
                     sxs_bytes=0.0)


def _layer(layer: int, backend: str, phases: list[PhaseStats], heads: list[HeadStats]) -> LayerStats:
    return LayerStats(layer=layer, module=None, backend=backend, backend_evidence=[], inferred=False, calls=1.0,
                      cpu_us=sum(p.cpu_us for p in phases), device_us=sum(p.device_us for p in phases), flops=0.0,
                      flops_per_s=0.0, alloc_bytes=0.0, peak_bytes=0, sxs_bytes=0.0, heads_count=len(heads),
                      phases=phases, heads=heads, backward=Backward())


def _worker(layers: list[LayerStats], *, device: str = "cpu", findings: list[Finding] | None = None
            ) -> WorkerSummary:
    cpu = sum(x.cpu_us for x in layers)
    dev = sum(x.device_us for x in layers)
    return WorkerSummary(file="w.1.pt.trace.json", worker="w", span=None, device=device, inferred=False,
                         backend="mixed", steps=[1], step_count=1, step_cpu_us=1000.0, step_device_us=0.0,
                         attention_cpu_us=cpu, attention_device_us=dev, attention_share_cpu=None,
                         attention_share_device=None, layers=layers, per_step=[], diagnostics={}, notes=[],
                         findings=findings or [])


def _two_layers() -> WorkerSummary:
    """Layer 0: fused (flash), heads measured 60 µs each, its block 200 µs (sdpa 120). Layer 1:
    naive, heads split evenly (derived), its core 30 + 20 + 30 = 80 µs of a 100 µs block.
    Attention: 300 µs."""
    l0 = _layer(0, "flash", [_phase("qkv_proj", 40), _phase("sdpa", 120), _phase("out_proj", 40)],
                [_head(0, 60), _head(1, 60)])
    l1 = _layer(1, "naive", [_phase("qkv_proj", 20), _phase("qk_matmul", 30), _phase("softmax", 20),
                             _phase("av_matmul", 30)],
                [_head(0, 40, derived=True), _head(1, 40, derived=True)])
    return _worker([l0, l1])


def _stats(window: int = 2, *, weights: str = "checkpoint", values: dict[tuple[int, int], dict[str, float]] | None
           = None) -> AttnStats:
    """L0H0 and L1H0 local at W=2 (L1H0 also a sink); L0H1 and L1H1 not."""
    table = values or {(0, 0): {"window_2": 1.0, "sink_4": 0.1}, (0, 1): {"window_2": 0.5, "sink_4": 0.1},
                       (1, 0): {"window_2": 0.995, "sink_4": 0.6}, (1, 1): {"window_2": 0.2, "sink_4": 0.0}}
    nested: dict[int, dict[int, dict[str, float]]] = {}
    for (layer, head), v in table.items():
        nested.setdefault(layer, {})[head] = v
    stats = attn_stats(nested, 7, weights=weights, files=["events.out"], window=window)
    assert stats is not None
    return stats


# -- attn_stats -----------------------------------------------------------------------------------

def test_local_and_sink_verdicts_at_their_thresholds() -> None:
    table = {0: {0: {"window_8": LOCAL_THRESHOLD, "sink_4": SINK_MASS},  # both exactly at the threshold
                 1: {"window_8": 0.9899, "sink_4": 0.4999}}}
    stats = attn_stats(table, 3, weights="checkpoint", files=["a", "b"])
    assert stats is not None and stats.window == 8 and stats.step == 3 and stats.files == ["a", "b"]
    assert [(h.head, h.local, h.sink) for h in stats.heads] == [(0, True, True), (1, False, False)]
    assert stats.threshold == LOCAL_THRESHOLD and stats.sink_mass == SINK_MASS and stats.note == ""


@pytest.mark.parametrize(("recorded", "window"), [
    ({"window_64", "window_256", "window_512"}, 256),  # the largest up to 256
    ({"window_8", "window_64"}, 64),
    ({"window_512", "window_1024"}, 512),  # none up to 256: the smallest recorded
    ({"entropy", "window_x", "sink_4"}, None),  # no window recorded: no local verdict
])
def test_the_default_window_is_the_largest_recorded_up_to_256(recorded: set[str], window: int | None) -> None:
    stats = attn_stats({0: {0: dict.fromkeys(recorded, 1.0)}}, 0, weights="unknown", files=[])
    assert stats is not None and stats.window == window
    assert stats.heads[0].local is (window is not None)


def test_a_window_asked_for_is_used_only_where_recorded() -> None:
    table = {0: {0: {"window_8": 1.0, "window_64": 0.5}}}
    at_64 = attn_stats(table, 0, weights="checkpoint", files=[], window=64)
    assert at_64 is not None and at_64.window == 64 and not at_64.heads[0].local
    assert attn_stats(table, 0, weights="checkpoint", files=[], window=16) is None
    at_half = attn_stats(table, 0, weights="checkpoint", files=[], window=64, threshold=0.5)
    assert at_half is not None and at_half.heads[0].local  # 0.5 >= 0.5


def test_no_statistics_give_none() -> None:
    assert attn_stats({}, 0, weights="checkpoint", files=[]) is None
    assert attn_stats({0: {}}, 0, weights="checkpoint", files=[]) is None
    assert attn_stats({0: {0: {}}}, 0, weights="checkpoint", files=[]) is None


def test_statistics_are_listed_in_their_order_and_heads_sorted() -> None:
    names = ["distance", "top_32", "window_64", "window_8", "sink_4", "sink_1", "entropy", "zeta"]
    table = {2: {1: dict.fromkeys(names, 0.0)}, 0: {3: dict.fromkeys(names, 0.0), 0: dict.fromkeys(names, 0.0)}}
    stats = attn_stats(table, 0, weights="random", files=[])
    assert stats is not None
    # entropy, sink, window, top, distance, then the rest; numbers in numeric order (8 before 64).
    assert stats.stats == ["entropy", "sink_1", "sink_4", "window_8", "window_64", "top_32", "distance", "zeta"]
    assert [(h.layer, h.head) for h in stats.heads] == [(0, 0), (0, 3), (2, 1)]
    assert stats.note.startswith("Random weights")


# -- head_rows ------------------------------------------------------------------------------------

def test_head_rows_join_each_heads_cost_and_share() -> None:
    w = _two_layers()
    stats = _stats(values={(0, 1): {"window_2": 1.0}, (1, 0): {"window_2": 0.0}, (5, 0): {"window_2": 1.0}})
    rows = head_rows(w, stats)
    assert [(r.layer, r.head) for r in rows] == [(0, 1), (1, 0), (5, 0)]
    l0h1, l1h0, missing = rows
    assert (l0h1.time_us, l0h1.time_share, l0h1.derived, l0h1.local) == (60.0, 60 / 300, False, True)
    assert (l1h0.time_us, l1h0.time_share, l1h0.derived, l1h0.local) == (40.0, 40 / 300, True, False)
    # A head the summary does not list: no cost, counted as derived.
    assert (missing.time_us, missing.time_share, missing.flops, missing.derived) == (0.0, 0.0, 0.0, True)


def test_head_rows_read_the_device_clock_on_a_device_trace() -> None:
    layer = _layer(0, "flash", [_phase("sdpa", 50, device_us=20)], [_head(0, 50, device_us=5, flops=1e6)])
    (row,) = head_rows(_worker([layer], device="cuda"), _stats(values={(0, 0): {"window_2": 1.0}}))
    assert (row.time_us, row.time_share, row.flops) == (5.0, 5 / 20, 1e6)
    assert head_rows(_worker([], device="cuda"), _stats(values={(0, 0): {"window_2": 1.0}}))[0].time_share == 0.0


# -- window_keeps ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("seq", "window", "causal", "kept"), [
    # causal, W = 3 over 8 tokens: rows keep 1, 2, 3, 3, 3, 3, 3, 3 keys = 21 of 64
    (8, 3, True, 21),
    # two-sided, W = 3: keys i-2..i+2 clipped: rows keep 3, 4, 5, 5, 5, 5, 4, 3 = 34 of 64
    (8, 3, False, 34),
    # W = 1: the diagonal alone, either way
    (8, 1, True, 8),
    (8, 1, False, 8),
    # a window past the sequence keeps every causal pair, (8 · 9) / 2 = 36, or all 64
    (8, 100, True, 36),
    (8, 100, False, 64),
    (1, 5, True, 1),
])
def test_window_keeps_the_share_of_s_squared_worked_by_hand(seq: int, window: int, causal: bool, kept: int) -> None:
    assert window_keeps(seq, window, causal=causal) == kept / seq**2


@pytest.mark.parametrize(("seq", "window"), [(0, 4), (-3, 4), (8, 0), (8, -1)])
def test_window_keeps_nothing_without_tokens_or_window(seq: int, window: int) -> None:
    assert window_keeps(seq, window, causal=True) == 0.0


# -- local_heads ----------------------------------------------------------------------------------

def test_local_heads_saving_worked_by_hand() -> None:
    f = local_heads(_two_layers(), _stats(), seq=8, causal=True)
    assert f is not None and f.id == "local-heads" and f.severity == "medium"
    # W = 2 causal over 8: rows keep 1 + 2·7 = 15 of 64 pairs.
    keep = 15 / 64
    # L0H0 (fused, causal): computes the causal half, 36/64; its own 60 µs: 60 · (1 - 15/36) = 35 µs.
    assert causal_fraction(8, 8) == 36 / 64
    l0 = 60 * (1 - keep / (36 / 64))
    # L1H0 (naive, derived): every pair computed; an even share of its core (30 + 20 + 30) / 2 = 40 µs.
    l1 = 40 * (1 - keep)
    assert (l0, l1) == pytest.approx((35.0, 30.625))
    d = f.evidence.details
    assert d["saving_us"] == pytest.approx(l0 + l1, abs=ROUNDED)
    assert d["heads"] == 2 and d["sinks"] == 1 and d["window"] == 2
    assert d["time_share"] == pytest.approx(round(100 / 300, 4)) and d["heads_list"] == "L0H0,L1H0"
    assert d["weights"] == "checkpoint" and d["threshold"] == 0.99
    assert f.evidence.layers == [0, 1] and f.evidence.time_us == 100.0  # 60 + 40
    assert f.title == "2 heads keep 99% of their attention within 2 tokens"
    assert "(layer 0 head 0; layer 1 head 0)" in f.explanation and "33% of attention's forward time" in f.explanation
    # 65.625 µs of 300: 22 % of attention's forward time.
    assert "save about 65.6 µs per step" in f.explanation and "(22% of attention's forward time)" in f.explanation
    assert "1 of them also put at least half their mass on the first 4 tokens" in f.explanation
    assert "sliding window of 2 plus the first 4 tokens" in f.suggestion and "--mask sliding:2" in f.suggestion


def test_local_heads_not_causal_compute_every_pair() -> None:
    f = local_heads(_two_layers(), _stats(), seq=8, causal=False)
    assert f is not None
    # Two-sided W = 2 over 8: rows keep 2, 3, 3, 3, 3, 3, 3, 2 = 22 of 64, against every pair for both heads.
    keep = 22 / 64
    assert f.evidence.details["saving_us"] == pytest.approx((60 + 40) * (1 - keep), abs=ROUNDED)


def test_local_heads_on_the_device_clock() -> None:
    layer = _layer(0, "flash", [_phase("sdpa", 500, device_us=80)], [_head(0, 250, device_us=40),
                                                                    _head(1, 250, device_us=40)])
    f = local_heads(_worker([layer], device="cuda"), _stats(values={(0, 0): {"window_2": 1.0}}), seq=8, causal=True)
    assert f is not None
    assert f.evidence.time_us == 40.0 and f.evidence.details["time_share"] == 0.5  # 40 of 80 µs, not the CPU's
    assert f.evidence.details["saving_us"] == pytest.approx(40 * (1 - 15 / 36), abs=ROUNDED)


def test_a_window_past_the_sequence_saves_nothing() -> None:
    # W = 100 over 8 causal tokens keeps every pair the fused kernel computes now: 1 - 36/36 = 0.
    stats = _stats(window=100, values={(0, 0): {"window_100": 1.0}})
    f = local_heads(_two_layers(), stats, seq=8, causal=True)
    assert f is not None and f.evidence.details["saving_us"] == 0.0 and f.evidence.details["window"] == 100


def test_a_small_share_is_low_and_without_sinks_the_window_keeps_no_first_tokens() -> None:
    g = local_heads(_two_layers(), _stats(values={(1, 0): {"window_2": 1.0}}), seq=8, causal=True)
    assert g is not None and g.severity == "low"  # 40 of 300 µs: 13 %, under a fifth
    assert g.title.startswith("1 head ") and "(layer 1 head 0)" in g.explanation
    assert "plus the first 4 tokens" not in g.suggestion and "attention sinks" not in g.explanation


def test_the_severity_bound_is_a_fifth_of_attention() -> None:
    # L0H0 60 µs of 300 is exactly 20%: medium.
    f = local_heads(_two_layers(), _stats(values={(0, 0): {"window_2": 1.0}}), seq=8, causal=True)
    assert f is not None and f.evidence.details["time_share"] == 0.2 and f.severity == "medium"


def test_random_weights_are_low_and_say_so() -> None:
    f = local_heads(_two_layers(), _stats(weights="random"), seq=8, causal=True)
    assert f is not None and f.severity == "low"  # a third of attention, but random weights
    assert "random weights and say nothing about a trained model" in f.explanation


def test_without_a_length_or_local_heads_there_is_no_saving_or_no_finding() -> None:
    w = _two_layers()
    f = local_heads(w, _stats(), seq=None, causal=True)
    assert f is not None and f.evidence.details["saving_us"] == 0.0 and f.evidence.details["heads"] == 2
    none_local = _stats(values={(0, 0): {"window_2": 0.1}})
    assert local_heads(w, none_local, seq=8, causal=True) is None
    no_window = attn_stats({0: {0: {"entropy": 1.0}}}, 0, weights="checkpoint", files=[])
    assert no_window is not None and local_heads(w, no_window, seq=8, causal=True) is None


# -- with_window ----------------------------------------------------------------------------------

def test_with_window_redoes_the_verdict_and_leaves_the_stats_given() -> None:
    table = {0: {0: {"window_2": 0.5, "window_4": 0.995}, 1: {"window_2": 0.2, "window_4": 0.6}}}
    stats = attn_stats(table, 0, weights="checkpoint", files=[])
    assert stats is not None and stats.window == 4 and [h.local for h in stats.heads] == [True, False]
    at_2 = with_window(stats, 2, None)
    assert at_2 is not None and at_2.window == 2 and [h.local for h in at_2.heads] == [False, False]
    lower = with_window(stats, None, 0.5)  # the window kept, the threshold lowered
    assert lower is not None and (lower.window, lower.threshold) == (4, 0.5)
    assert [h.local for h in lower.heads] == [True, True]
    assert with_window(stats, 3, 0.5) is None  # window 3 was not recorded
    assert stats.window == 4 and stats.threshold == 0.99 and [h.local for h in stats.heads] == [True, False]


# -- with_attn_stats ------------------------------------------------------------------------------

def _finding(fid: str, severity: str, layers: list[int]) -> Finding:
    return Finding(id=fid, severity=severity, title=fid, explanation="", suggestion="",
                   evidence=Evidence(layers=layers, ops=[], kernels=[], time_us=0.0, bytes=0.0, details={}))


def _run(metadata: dict[str, object] | None, *workers: WorkerSummary) -> RunSummary:
    return RunSummary(run="r", metadata=metadata, workers=list(workers), errors=[])


def test_with_attn_stats_redoes_each_workers_finding_in_a_new_summary() -> None:
    stale = _finding("local-heads", "low", [9])
    others = [_finding("sxs-materialized", "high", [0]), _finding("dispatch-bound", "low", [1])]
    w = msgspec.structs.replace(_two_layers(), findings=[others[0], stale, others[1]])
    run = _run({"config": {"seq": 8, "causal": True}}, w)
    before = msgspec.json.encode(run)
    new = with_attn_stats(run, _stats())
    assert msgspec.json.encode(run) == before and run.attn_stats is None  # the given summary is unchanged
    assert new.attn_stats == _stats()
    (nw,) = new.workers
    # The stale finding replaced; order: severity (high, medium, low), then id.
    assert [(f.id, f.severity) for f in nw.findings] == [
        ("sxs-materialized", "high"), ("local-heads", "medium"), ("dispatch-bound", "low")]
    (found,) = [f for f in nw.findings if f.id == "local-heads"]
    # seq 8 and causal, from the config: the saving worked in test_local_heads_saving_worked_by_hand
    assert found.evidence.details["saving_us"] == pytest.approx(35.0 + 30.625, abs=ROUNDED)


def test_with_attn_stats_drops_a_stale_finding_and_keeps_untouched_workers() -> None:
    plain = _two_layers()
    stale = msgspec.structs.replace(_two_layers(), worker="w2", findings=[_finding("local-heads", "low", [0])])
    none_local = _stats(values={(0, 0): {"window_2": 0.1}})
    new = with_attn_stats(_run(None, plain, stale), none_local)
    assert new.workers[0] is plain  # no finding before or after: the same worker
    assert new.workers[1].findings == [] and stale.findings[0].id == "local-heads"
    assert new.attn_stats is none_local


@pytest.mark.parametrize(("config", "saving"), [
    ({"seq": 8, "causal": False}, (60 + 40) * (1 - 22 / 64)),  # two-sided window, every pair computed
    ({"seq": "8"}, 0.0),  # a length that is not an int: no saving estimated
    ({"seq": True}, 0.0),  # a bool is no length
    ({"seq": -8}, 0.0),
    ("not a config", 0.0),
])
def test_with_attn_stats_reads_length_and_causality_from_the_config(config: object, saving: float) -> None:
    new = with_attn_stats(_run({"config": config}, _two_layers()), _stats())
    (f,) = [f for f in new.workers[0].findings if f.id == "local-heads"]
    assert f.evidence.details["saving_us"] == pytest.approx(saving, abs=ROUNDED)
