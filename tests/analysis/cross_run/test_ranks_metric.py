"""The ranks view's one metric and one median (analysis/cross_run/ranks.py), on hand-made rank summaries
whose figures are worked out by hand below."""

from __future__ import annotations

import msgspec
import pytest

from tb_attn_plugin.analysis.cross_run.ranks import MEDIAN_LABEL, median_over_ranks, ranks
from tb_attn_plugin.types.results import RankView
from tb_attn_plugin.types.schema import Backward, LayerStats, RunSummary, StepStats, WorkerSummary


def _layer(layer: int, forward_us: float, backward_us: float) -> LayerStats:
    return LayerStats(
        layer=layer, module=None, backend="naive", backend_evidence=[], inferred=False, calls=1.0,
        cpu_us=forward_us, device_us=0.0, flops=0.0, flops_per_s=0.0, alloc_bytes=0.0, peak_bytes=0,
        sxs_bytes=0.0, heads_count=None, phases=[], heads=[], backward=Backward(cpu_us=backward_us),
    )


def _rank(rank: int, steps_us: list[float], *, layer_us: float = 10_000.0) -> WorkerSummary:
    """Rank ``rank`` whose attention took ``steps_us`` in its profiled steps (CPU clock); its
    one layer takes ``layer_us`` per step, split 40/60 between forward and backward."""
    return WorkerSummary(
        file=f"host_rank{rank}.1.pt.trace.json", worker=f"host_rank{rank}", span=None, device="cpu",
        inferred=False, backend="naive", steps=list(range(len(steps_us))), step_count=len(steps_us),
        step_cpu_us=100_000.0, step_device_us=0.0,
        attention_cpu_us=sum(steps_us) / len(steps_us), attention_device_us=0.0,
        attention_share_cpu=None, attention_share_device=None,
        layers=[_layer(0, 0.4 * layer_us, 0.6 * layer_us)],
        per_step=[StepStats(step=i, cpu_us=100_000.0, device_us=0.0, attention_cpu_us=t, attention_device_us=0.0)
                  for i, t in enumerate(steps_us)],
        diagnostics={}, notes=[], rank=rank, world_size=4,
    )


def _view(workers: list[WorkerSummary], margin: float = 0.2) -> RankView:
    return ranks(RunSummary(run="r", metadata=None, workers=workers, errors=[]), margin=margin)


def test_the_median_over_ranks_includes_each_rank_and_takes_the_lower_middle() -> None:
    assert median_over_ranks([40.0, 10.0, 20.0]) == 20.0  # odd: the middle value
    assert median_over_ranks([30.0, 20.0]) == 20.0  # even: the lower middle, not the mean 25
    assert median_over_ranks([22.0, 30.0, 20.0, 21.0]) == 21.0  # 20 21 | 22 30
    assert median_over_ranks([]) == 0.0
    assert "itself included" in MEDIAN_LABEL and "lower of the two middle values" in MEDIAN_LABEL


def test_stragglers_table_and_banner_share_one_metric_and_one_median() -> None:
    # Fastest steps: 20, 21, 30, 22 ms; means: 23, 30.5, 30.5, 22 ms. Rank 1 has one slow step
    # (40 ms) and is no straggler; rank 2 is slow in both. Rank 3's layer takes 16 ms, the
    # others' 10 ms.
    view = _view([
        _rank(0, [20_000.0, 26_000.0]),
        _rank(1, [21_000.0, 40_000.0]),
        _rank(2, [30_000.0, 31_000.0]),
        _rank(3, [22_000.0, 22_000.0], layer_us=16_000.0),
    ])
    assert view.metric == "attention_best"
    assert view.metric_label == ("attention time in each rank's fastest step (forward + backward, less the collectives "
                                 "inside it, CPU clock)")
    assert view.median_label == MEDIAN_LABEL and "CPU clock" in view.means_label and "CPU clock" in view.heads_label
    assert [r.attention_best_us for r in view.ranks] == [20_000.0, 21_000.0, 30_000.0, 22_000.0]
    assert [r.attention_us for r in view.ranks] == [23_000.0, 30_500.0, 30_500.0, 22_000.0]
    cols = {c.column: c for c in view.columns}
    assert [c.column for c in view.columns] == ["attention_best", "step", "attention", "collectives", "other"]
    best = cols["attention_best"]
    # 20 21 22 30: lower middle 21; mean (20 + 21 + 30 + 22) / 4 = 23.25; the slowest is rank 2.
    assert (best.median_us, best.mean_us, best.min_us, best.max_us, best.max_rank) == (
        21_000.0, 23_250.0, 20_000.0, 30_000.0, 2)
    # The means column has a median of its own, computed the same way: 22 23 | 30.5 30.5.
    assert cols["attention"].median_us == 23_000.0 and cols["attention"].max_rank == 1
    assert cols["step"].median_us == 100_000.0
    # other = step - attention - collectives: 77, 69.5, 69.5, 78 ms.
    assert cols["other"].median_us == 69_500.0 and cols["other"].max_us == 78_000.0

    flagged = {(s.rank, s.metric): s for s in view.stragglers}
    assert set(flagged) == {(2, "attention"), (3, "layer 0")}
    attention = flagged[(2, "attention")]
    assert attention.label == "attention in the fastest step"
    # The banner's median is the table's median of the same column: 21 ms; 30 / 21.
    assert attention.median_us == best.median_us == 21_000.0
    assert attention.value_us == 30_000.0 and attention.ratio == pytest.approx(30 / 21)
    layer = flagged[(3, "layer 0")]
    # Layer 0 per step (forward + backward): 10 10 10 16 ms; median 10, 16 / 10.
    assert layer.label == "layer 0, mean per step"
    (agg,) = view.all_ranks
    assert layer.median_us == agg.median_us == 10_000.0 and layer.value_us == 16_000.0 and layer.ratio == 1.6
    assert (agg.mean_us, agg.max_us, agg.max_rank) == (11_500.0, 16_000.0, 3)
    assert [r.straggler for r in view.ranks] == [False, False, True, True]


def test_two_ranks_compare_the_slower_with_the_faster() -> None:
    # 20 and 30 ms: the median over both is 20 (the lower middle), so the ratio is 1.5, not 30 / 25.
    workers = [_rank(0, [20_000.0]), _rank(1, [30_000.0])]
    (s,) = [s for s in _view(workers).stragglers if s.metric == "attention"]
    assert (s.rank, s.median_us, s.ratio) == (1, 20_000.0, 1.5)
    assert not [s for s in _view(workers, margin=0.5).stragglers if s.metric == "attention"]  # 30 > 20 x 1.5: no
    assert [s.rank for s in _view(workers, margin=0.49).stragglers if s.metric == "attention"] == [1]


def test_a_gap_under_the_minimum_is_no_straggler() -> None:
    # 1.0 and 1.4 ms: 40% over the median, but only 400 us (MIN_GAP_US is 500).
    view = _view([_rank(0, [1_000.0]), _rank(1, [1_400.0])], margin=0.1)
    assert not [s for s in view.stragglers if s.metric == "attention"]


def test_a_device_run_names_the_device_clock() -> None:
    w = msgspec.structs.replace(_rank(0, [1.0]), device="cuda")
    view = _view([w, _rank(1, [1.0])])
    assert view.clock == "device" and "device clock" in view.metric_label and "device clock" in view.heads_label


def test_each_rank_carries_its_steps_spread() -> None:
    """The noisy mark of a rank: its attention time over its steps, 40 and 60 ms about a median
    of 50 (40 % of it: noisy), 50 and 52 ms (4 %: quiet)."""
    view = _view([_rank(0, [40_000.0, 60_000.0]), _rank(1, [50_000.0, 52_000.0])])
    noisy, quiet = (r.attention_spread for r in view.ranks)
    assert noisy is not None and (noisy.lo, noisy.median, noisy.hi, noisy.noisy) == (40_000, 50_000, 60_000, True)
    assert quiet is not None and (quiet.lo, quiet.hi, quiet.noisy) == (50_000, 52_000, False)


def test_derived_heads_share_their_ranks_layer_time_so_a_slow_rank_never_has_fast_heads() -> None:
    # Tensor parallel, 2 ranks, 2 heads each, no head scopes. Rank 1 computes its core faster
    # (its heads' core share is 1 ms against rank 0's 3 ms) but spends 9 ms more in the block
    # outside every phase (a straggler's delay): its layer forward is 13 ms against rank 0's 8 ms.
    from tb_attn_plugin.types.schema import HeadStats

    def tp_rank(rank: int, forward_us: float, core_share_us: float) -> WorkerSummary:
        w = _rank(rank, [forward_us], layer_us=forward_us / 0.4)
        heads = [HeadStats(head=2 * rank + i, derived=True, cpu_us=core_share_us, device_us=0.0, flops=5.0,
                           alloc_bytes=0.0, sxs_bytes=0.0) for i in range(2)]
        layers = [msgspec.structs.replace(w.layers[0], heads=heads), *w.layers[1:]]
        return msgspec.structs.replace(w, world_size=2, layers=layers)

    view = _view([tp_rank(0, 8_000.0, 3_000.0), tp_rank(1, 13_000.0, 1_000.0)])
    times = {h.head: h.time_us for h in view.heads}
    assert times == {0: 4_000.0, 1: 4_000.0, 2: 6_500.0, 3: 6_500.0}  # 8/2 and 13/2 ms
    assert all(h.derived and h.flops == 5.0 for h in view.heads)  # FLOPs stay the head's own
    assert "even share of the rank's forward time in the layer" in view.heads_label


def test_an_inference_run_says_its_attention_is_forward_alone() -> None:
    training = _view([_rank(0, [20_000.0]), _rank(1, [21_000.0])])
    assert "(forward + backward, less" in training.metric_label and "forward + backward;" in training.means_label
    inference = [msgspec.structs.replace(_rank(r, [t]), layers=[_layer(0, 20_000.0, 0.0)])
                 for r, t in ((0, 20_000.0), (1, 21_000.0))]
    view = _view(inference)
    assert "backward" not in view.metric_label.replace("the trace has no backward", "")
    assert "(forward: the trace has no backward, less the collectives" in view.metric_label
    assert "attention is forward: the trace has no backward;" in view.means_label
    assert view.means_label.endswith("a layer's time leaves out the collectives inside it)")
