"""The machine's own ceilings, measured once per run where the analysis needs one.

``copy_bandwidth(device)``: the memory bandwidth a plain tensor copy reaches, bytes read plus
bytes written per second, the best of a few copies of a buffer much larger than the caches
(128 MiB read and 128 MiB written on a CPU, 1 GiB each on a GPU). The decode findings compare attention's
achieved bandwidth with it (``decode-memory-bound``). A copy is what a memory-bound kernel
does at best, so it is a fair ceiling for a decode step's reads; the device's datasheet peak
is higher (a copy reaches 80-90% of it on GPUs).

``gemm_flops(device, dtype)``: the FLOP/s of a square matrix multiply (``torch.mm``), best of a
few, in float32 and bfloat16 (on a CPU, a smaller product where a large one would take long:
``gemm``): the compute roof of the roofline on a CPU, where no datasheet table
applies (``tb_attn_plugin.analysis.measures.peaks``). ``op_overhead_us``: the time of one eager op on a
one-element tensor, the per-call floor of the latency-bound verdict.

All of them together take well under a second on a CPU (``bench/probes.py`` measures them and
their stability; figures in the README).
"""

from __future__ import annotations

import functools
import statistics
import time
from typing import Any

import torch

__all__ = ["COPY_PROBE", "GEMM_PROBE", "OP_PROBE", "copy_bandwidth", "gemm", "gemm_flops", "machine_peaks",
           "op_overhead_us"]

#: What the metadata says the figure is.
COPY_PROBE = "torch copy_ of a buffer larger than the caches: (bytes read + bytes written) / s, best of 7"


GEMM_PROBE = ("torch.mm of two N x N matrices (N = 1024 on a CPU, or 512 or 256 where a product 8 times smaller "
              "took over 50/8 ms; 8192 on a GPU): 2·N³ / s, best of 7")
OP_PROBE = "one eager torch.add on one-element tensors, no profiler: median of 5 batches of 200 calls"


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _best(fn: Any, device: torch.device, repeats: int) -> float:
    fn()  # warm-up: allocation, page faults, kernel selection stay out of the timing
    best = float("inf")
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        fn()
        _sync(device)
        best = min(best, time.perf_counter() - start)
    return best


#: The longest a probe's one product may take on a CPU. A CPU without a dtype's instructions (bf16 on
#: an AMD EPYC without AVX-512 BF16 runs about 1 GFLOP/s, 2.5 s a 1024² product) is measured on a
#: smaller product instead: 8 products of 1024² took 20 s of every run's start-up there.
_CPU_PRODUCT_S = 0.05
#: The sizes a CPU's product may take, largest first; the runner's roofline reads FLOP/s, not N.
_CPU_SIZES = (1024, 512, 256)


def gemm_flops(device: torch.device, dtype: torch.dtype, *, repeats: int = 7) -> float:
    """FLOP/s (2·N³ per product) of the best of ``repeats`` square matrix products on ``device``."""
    return gemm(device, dtype, repeats=repeats)[0]


def gemm(device: torch.device, dtype: torch.dtype, *, repeats: int = 7) -> tuple[float, int]:
    """(FLOP/s, N): the best of ``repeats`` N x N products; N = 8192 on a GPU, on a CPU the largest
    of ``_CPU_SIZES`` whose product is expected to take under ``_CPU_PRODUCT_S``."""
    n = 8192 if device.type == "cuda" else _cpu_size(device, dtype)
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    out = torch.empty(n, n, device=device, dtype=dtype)
    best = _best(lambda: torch.mm(a, b, out=out), device, repeats)
    return 2.0 * n**3 / best, n


def _cpu_size(device: torch.device, dtype: torch.dtype) -> int:
    """The largest of ``_CPU_SIZES`` whose product is expected within the budget: each size is timed
    once, smallest first, and the next one (8 times the work) tried only where that fits."""
    chosen = _CPU_SIZES[-1]
    for n in reversed(_CPU_SIZES):
        a = torch.randn(n, n, device=device).to(dtype)
        seconds = _best(lambda a=a: torch.mm(a, a), device, 1)
        chosen = n
        if seconds * 8 > _CPU_PRODUCT_S:
            break
    return chosen


def op_overhead_us(device: torch.device, *, calls: int = 200, batches: int = 5) -> float:
    """Microseconds per eager op on one-element tensors: the median of ``batches`` timings."""
    a = torch.ones(1, device=device)
    b = torch.ones(1, device=device)
    times = []
    for _ in range(batches + 1):  # the first batch warms up
        _sync(device)
        start = time.perf_counter()
        for _ in range(calls):
            torch.add(a, b)
        _sync(device)
        times.append((time.perf_counter() - start) / calls)
    return statistics.median(times[1:]) * 1e6


def copy_bandwidth(device: torch.device, *, repeats: int = 7) -> float:
    """Bytes per second (read + written) of the best of ``repeats`` copies on ``device``."""
    cuda = device.type == "cuda"
    nbytes = (1 << 30) if cuda else (128 << 20)
    src = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)  # first touch: page faults and allocation stay out of the timing
    best = float("inf")
    for _ in range(repeats):
        if cuda:
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        dst.copy_(src)
        if cuda:
            torch.cuda.synchronize(device)
        best = min(best, time.perf_counter() - start)
    del src, dst
    return 2 * nbytes / best


@functools.lru_cache(maxsize=4)
def machine_peaks(device: str) -> dict[str, Any]:
    """The run metadata's ``peaks``: what was measured and how, once per process and device (a
    sweep's runs share the machine). Callers must not change the dict."""
    dev = torch.device(device)
    fp32, bf16 = gemm(dev, torch.float32), gemm(dev, torch.bfloat16)
    return {"device": dev.type, "copy_bytes_per_s": copy_bandwidth(dev), "copy_probe": COPY_PROBE,
            "gemm_flops_per_s": {"fp32": fp32[0], "bf16": bf16[0]}, "gemm_n": {"fp32": fp32[1], "bf16": bf16[1]},
            "gemm_probe": GEMM_PROBE, "op_us": op_overhead_us(dev), "op_probe": OP_PROBE}
