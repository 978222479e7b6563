"""``runner.probes``: the machine's ceilings that a CPU trace's roofline is drawn under, measured in
bounded time: a dtype the CPU has no instructions for is measured on a smaller product."""

from __future__ import annotations

import time

import pytest
import torch

from runner import probes


def test_a_cpu_gemm_is_measured_at_the_largest_size_the_budget_allows(monkeypatch: pytest.MonkeyPatch) -> None:
    flops, n = probes.gemm(torch.device("cpu"), torch.float32, repeats=2)
    assert n in probes._CPU_SIZES and flops > 0

    real_mm = torch.mm

    def slow_mm(a: torch.Tensor, b: torch.Tensor, **kwargs: object) -> torch.Tensor:
        time.sleep(probes._CPU_PRODUCT_S / 4 * (a.shape[0] / 256) ** 3)  # too slow to try 512 after 256
        return real_mm(a, b, **kwargs)  # type: ignore[call-overload, no-any-return]

    monkeypatch.setattr(torch, "mm", slow_mm)
    assert probes._cpu_size(torch.device("cpu"), torch.float32) == 256
    flops, n = probes.gemm(torch.device("cpu"), torch.float32, repeats=1)
    assert n == 256 and flops < 2 * 256**3 / (probes._CPU_PRODUCT_S / 4)


def test_machine_peaks_say_what_they_measured() -> None:
    peaks = probes.machine_peaks("cpu")
    assert set(peaks["gemm_n"]) == set(peaks["gemm_flops_per_s"]) == {"fp32", "bf16"}
    assert all(n in probes._CPU_SIZES for n in peaks["gemm_n"].values())
    assert peaks["gemm_probe"] == probes.GEMM_PROBE and "50/8 ms" in peaks["gemm_probe"]


def test_the_op_overhead_is_the_median_batch_after_the_warm_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """A clock that makes the batches last 1 s (the warm-up), then 0.5, 0.1, 0.9 and 0.3 s for 100
    calls each: the median of the four timed ones, (0.3 + 0.5) / 2 s over 100 calls, is 4000 µs a call."""
    ticks = iter([0.0, 1.0, 1.0, 1.5, 1.5, 1.6, 1.6, 2.5, 2.5, 2.8])
    monkeypatch.setattr(probes.time, "perf_counter", lambda: next(ticks))
    assert probes.op_overhead_us(torch.device("cpu"), calls=100, batches=4) == pytest.approx(4000.0)
