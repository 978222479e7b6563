"""One rank stands for a run of several (``spread.representative_worker``): the one at the lower
median by attention time, so with two ranks the faster one. The runs list, Compare, the Ranks
view's median row, Strategies, why-slower and the gate all show that rank's figures, on hand-made
rank summaries whose figures are written out below."""

from __future__ import annotations

import msgspec

from tb_attn_plugin.analysis.common.spread import representative_worker
from tb_attn_plugin.analysis.common.wording import duration
from tb_attn_plugin.analysis.cross_run.compare import compare
from tb_attn_plugin.analysis.cross_run.figures import run_figures
from tb_attn_plugin.analysis.cross_run.gate import gate
from tb_attn_plugin.analysis.cross_run.ranks import ranks
from tb_attn_plugin.analysis.cross_run.strategies import strategies
from tb_attn_plugin.analysis.cross_run.why_slower import why_slower
from tb_attn_plugin.types.schema import Backward, LayerStats, RunSummary, StepStats, WorkerSummary

FAST_STEPS = [9_000.0, 11_000.0]  # attention per step (CPU clock): mean 10 ms
SLOW_STEPS = [14_000.0, 16_000.0]  # mean 15 ms


def _config(impl: str) -> dict[str, object]:
    return {"config": {"model": "toy", "impl": impl, "seq": 128, "dtype": "float32", "mode": "training"}}


def _rank(rank: int, steps_us: list[float], *, alloc: float, peak: int, device: bool = False) -> WorkerSummary:
    """Rank ``rank`` whose attention took ``steps_us`` in its profiled steps, all of it in its one
    layer (40% forward, 60% backward), on the device clock when ``device`` (its CPU time then a
    tenth of it)."""
    mean = sum(steps_us) / len(steps_us)
    cpu, dev = (0.1 * mean, mean) if device else (mean, 0.0)
    layer = LayerStats(
        layer=0, module=None, backend="naive", backend_evidence=[], inferred=False, calls=1.0,
        cpu_us=0.4 * cpu, device_us=0.4 * dev, flops=1e9, flops_per_s=0.0, alloc_bytes=alloc, peak_bytes=peak,
        sxs_bytes=0.0, heads_count=None, phases=[], heads=[],
        backward=Backward(cpu_us=0.6 * cpu, device_us=0.6 * dev),
    )
    return WorkerSummary(
        file=f"host_rank{rank}.1.pt.trace.json", worker=f"host_rank{rank}", span=None,
        device="cuda" if device else "cpu", inferred=False, backend="naive",
        steps=list(range(len(steps_us))), step_count=len(steps_us), step_cpu_us=100_000.0, step_device_us=0.0,
        attention_cpu_us=cpu, attention_device_us=dev, attention_share_cpu=None, attention_share_device=None,
        layers=[layer],
        per_step=[StepStats(step=i, cpu_us=100_000.0, device_us=0.0,
                            attention_cpu_us=0.1 * t if device else t, attention_device_us=t if device else 0.0)
                  for i, t in enumerate(steps_us)],
        diagnostics={}, notes=[], rank=rank, world_size=2,
    )


def _two_ranks(name: str = "ddp", impl: str = "naive") -> RunSummary:
    """The slower rank listed first, as a worker sorted by name could be."""
    return RunSummary(run=name, metadata=_config(impl), errors=[], workers=[
        _rank(1, SLOW_STEPS, alloc=2_000.0, peak=800), _rank(0, FAST_STEPS, alloc=1_000.0, peak=500)])


def test_two_ranks_every_view_shows_the_faster_rank() -> None:
    run = _two_ranks()
    fast = run.workers[1]
    assert representative_worker(run) is fast

    figures = run_figures(run)  # the runs list's row
    assert figures is not None and figures.worker == "host_rank0" and figures.attention_us == 10_000.0
    assert (figures.attention_min_us, figures.attention_max_us, figures.peak_bytes) == (9_000.0, 11_000.0, 500)

    facts = compare([run]).runs[0]
    assert (facts.attention_cpu_us, facts.alloc_bytes, facts.peak_bytes) == (10_000.0, 1_000.0, 500)

    view = ranks(run)  # the "median" row of the same metric (attention, mean per step) is that rank's
    attention = next(c for c in view.columns if c.column == "attention")
    assert attention.median_us == figures.attention_us == 10_000.0
    assert view.all_ranks[0].median_us == 10_000.0  # layer 0: the whole of attention

    row = strategies([run]).groups[0].rows[0]
    assert (row.time_us, row.alloc_bytes, row.peak_bytes) == (10_000.0, 1_000.0, 500)


def test_the_gate_compares_the_representative_ranks_not_an_average() -> None:
    """Each run by its faster rank: its steps (mean and bootstrap as before), memory and layers."""
    report = gate(_two_ranks("base"), _two_ranks("cand"), max_time=0.5, max_memory=0.1)
    time, alloc, peak = report.checks
    assert (time.baseline, time.candidate) == (10_000.0, 10_000.0)  # not 12.5 ms, the mean over both ranks
    assert "mean of 2 step(s), min 9.000 ms, max 11.000 ms" in time.detail
    assert (alloc.baseline, peak.baseline) == (1_000.0, 500.0)  # not 1500 (the mean) nor 800 (the max)
    assert report.layers == [(0, 10_000.0, 10_000.0)]
    # One run a side: equal times are within what drift between runs can make, so no verdict.
    assert (time.verdict, alloc.verdict, peak.verdict) == ("undecided", "ok", "ok")


def test_why_slower_reads_the_representative_ranks() -> None:
    base = RunSummary(run="sdpa", metadata=_config("sdpa"), errors=[],
                      workers=[_rank(0, [5_000.0, 5_000.0], alloc=0.0, peak=0),
                               _rank(1, [7_000.0, 7_000.0], alloc=0.0, peak=0)])
    first = why_slower(_two_ranks(), base)[0]
    assert f"spends {duration(10_000.0)} of CPU time per step in attention against {duration(5_000.0)}" in first


def test_the_lower_median_of_more_ranks_and_on_the_device_clock() -> None:
    times = {0: 30.0, 1: 10.0, 2: 20.0, 3: 40.0}
    workers = [_rank(r, [t * 1000, t * 1000], alloc=0.0, peak=0, device=True) for r, t in times.items()]
    run = RunSummary(run="r", metadata=None, errors=[], workers=workers)
    assert representative_worker(run).rank == 2  # 10 20 | 30 40: the lower middle
    assert ranks(run).columns[2].median_us == representative_worker(run).attention_device_us == 20_000.0
    three = RunSummary(run="r", metadata=None, errors=[], workers=[workers[0], workers[1], workers[3]])
    assert representative_worker(three).rank == 0  # 10 30 40: the middle, by device time


def test_a_trace_without_attention_does_not_stand_for_the_run() -> None:
    empty = msgspec.structs.replace(_rank(1, [1.0], alloc=0.0, peak=0), layers=[])
    run = RunSummary(run="r", metadata=None, errors=[], workers=[empty, _rank(0, FAST_STEPS, alloc=0.0, peak=0)])
    assert representative_worker(run).rank == 0
    only = RunSummary(run="r", metadata=None, errors=[], workers=[empty])
    assert representative_worker(only) is empty
