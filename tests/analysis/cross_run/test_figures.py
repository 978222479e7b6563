"""The runs list's figures (``analysis/cross_run/figures.py``) on hand-made summaries, checked by hand."""

from __future__ import annotations

import msgspec

from tb_attn_plugin.analysis.common.spread import spread
from tb_attn_plugin.analysis.cross_run.compare import run_facts
from tb_attn_plugin.analysis.cross_run.figures import run_figures
from tb_attn_plugin.types.schema import Backward, FileError, LayerStats, RunSummary, StepStats, WorkerSummary


def _layer(layer: int, *, peak_bytes: int, backend: str = "naive") -> LayerStats:
    return LayerStats(layer=layer, module=None, backend=backend, backend_evidence=[], inferred=False, calls=1.0,
                      cpu_us=0.0, device_us=0.0, flops=0.0, flops_per_s=0.0, alloc_bytes=0.0, peak_bytes=peak_bytes,
                      sxs_bytes=0.0, heads_count=None, phases=[], heads=[], backward=Backward())


def _worker(name: str, *, cpu: list[float], device: list[float], step_cpu: float, step_device: float,
            peaks: list[int], backend: str = "naive") -> WorkerSummary:
    """A worker whose attention took ``cpu[i]`` / ``device[i]`` µs in step i; its means are what
    the summary's would be."""
    n = len(cpu)
    att_cpu, att_dev = sum(cpu) / n, sum(device) / n
    return WorkerSummary(
        file=f"{name}.1.pt.trace.json", worker=name, span="1", device="cuda" if att_dev else "cpu", inferred=False,
        backend=backend, steps=list(range(n)), step_count=n, step_cpu_us=step_cpu, step_device_us=step_device,
        attention_cpu_us=att_cpu, attention_device_us=att_dev,
        attention_share_cpu=att_cpu / step_cpu, attention_share_device=att_dev / step_device if step_device else None,
        layers=[_layer(i, peak_bytes=p, backend=backend) for i, p in enumerate(peaks)],
        per_step=[StepStats(step=i, cpu_us=step_cpu, device_us=step_device, attention_cpu_us=c,
                            attention_device_us=d) for i, (c, d) in enumerate(zip(cpu, device, strict=True))],
        diagnostics={}, notes=[],
        spread={k: v for k, v in (("attention_cpu_us", spread(cpu)), ("attention_device_us", spread(device)))
                if v is not None},
    )


def _run(*workers: WorkerSummary, errors: list[FileError] | None = None) -> RunSummary:
    return RunSummary(run="exp/r", metadata=None, workers=list(workers), errors=errors or [])


def test_cpu_run_figures() -> None:
    w = _worker("w", cpu=[900.0, 1100.0, 1300.0], device=[0.0, 0.0, 0.0], step_cpu=4000.0, step_device=0.0,
                peaks=[1 << 20, 3 << 20, 2 << 20])
    f = run_figures(_run(w))
    assert f is not None
    assert f.clock == "cpu"
    assert f.attention_us == 1100.0  # (900 + 1100 + 1300) / 3
    assert (f.attention_min_us, f.attention_max_us) == (900.0, 1300.0)
    assert f.attention_share == 1100.0 / 4000.0
    assert f.peak_bytes == 3 << 20  # the largest layer's
    assert (f.backend, f.steps, f.worker, f.workers, f.unreadable) == ("naive", 3, "w", 1, 0)


def test_device_clock_where_attention_launched_kernels() -> None:
    w = _worker("w", cpu=[5000.0, 5000.0], device=[200.0, 400.0], step_cpu=20000.0, step_device=1000.0,
                peaks=[100], backend="flash")
    f = run_figures(_run(w))
    assert f is not None and f.clock == "device"
    assert f.attention_us == 300.0 and (f.attention_min_us, f.attention_max_us) == (200.0, 400.0)
    assert f.attention_share == 0.3  # 300 of the 1000 µs device step, not of the CPU step
    assert f.backend == "flash"
    # The noisy mark's spread is the device clock's: 200 and 400 µs about a median of 300.
    assert f.attention_spread is not None and (f.attention_spread.lo, f.attention_spread.hi) == (200.0, 400.0)
    assert f.attention_spread.noisy and f.attention_spread == w.spread["attention_device_us"]


def test_several_workers_take_the_median_one_as_compare_does() -> None:
    fast = _worker("rank0", cpu=[100.0], device=[0.0], step_cpu=1000.0, step_device=0.0, peaks=[10])
    mid = _worker("rank1", cpu=[300.0], device=[0.0], step_cpu=1000.0, step_device=0.0, peaks=[30])
    slow = _worker("rank2", cpu=[900.0], device=[0.0], step_cpu=1000.0, step_device=0.0, peaks=[90])
    run = _run(slow, fast, mid, errors=[FileError(file="rank3.1.pt.trace.json", error="truncated")])
    f = run_figures(run)
    assert f is not None
    assert (f.worker, f.attention_us, f.peak_bytes, f.attention_share) == ("rank1", 300.0, 30, 0.3)
    assert (f.workers, f.unreadable) == (3, 1)
    facts = run_facts(run)  # Compare's figures of the same run
    assert (facts.attention_cpu_us, facts.peak_bytes, facts.backend, facts.steps) == \
        (f.attention_us, f.peak_bytes, f.backend, f.steps)


def test_no_figures_without_attention_or_steps() -> None:
    assert run_figures(_run()) is None
    empty = _worker("w", cpu=[0.0], device=[0.0], step_cpu=1000.0, step_device=0.0, peaks=[])
    assert run_figures(_run(empty)) is None
    # A trace without ProfilerStep: one whole-trace "step" and no per-step figures, so no spread.
    w = _worker("w", cpu=[700.0], device=[0.0], step_cpu=1000.0, step_device=0.0, peaks=[5])
    w = msgspec.structs.replace(w, per_step=[])
    f = run_figures(_run(w))
    assert f is not None and f.attention_us == 700.0 and f.attention_min_us is None and f.attention_max_us is None


def test_the_layers_found_by_their_core_alone_are_counted() -> None:
    w = _worker("a", cpu=[100.0, 120.0], device=[0.0, 0.0], step_cpu=400.0, step_device=0.0, peaks=[1, 2, 3])
    assert run_figures(_run(w)).core_only == 0  # type: ignore[union-attr]
    layers = [msgspec.structs.replace(x, core_only=True) if i in (0, 2) else x for i, x in enumerate(w.layers)]
    w = msgspec.structs.replace(w, layers=layers)
    assert run_figures(_run(w)).core_only == 2  # type: ignore[union-attr]
