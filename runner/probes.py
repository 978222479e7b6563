"""The machine's own ceilings, measured once per run where the analysis needs one.

``copy_bandwidth(device)``: the memory bandwidth a plain tensor copy reaches, bytes read plus
bytes written per second, the best of a few copies of a buffer much larger than the caches
(128 MiB read and 128 MiB written on a CPU, 1 GiB each on a GPU). The decode findings compare attention's
achieved bandwidth with it (``decode-memory-bound``). A copy is what a memory-bound kernel
does at best, so it is a fair ceiling for a decode step's reads; the device's datasheet peak
is higher (a copy reaches 80-90% of it on GPUs). It takes well under a second.
"""

from __future__ import annotations

import time
from typing import Any

import torch

__all__ = ["COPY_PROBE", "copy_bandwidth", "machine_peaks"]

#: What the metadata says the figure is.
COPY_PROBE = "torch copy_ of a buffer larger than the caches: (bytes read + bytes written) / s, best of 5"


def copy_bandwidth(device: torch.device, *, repeats: int = 5) -> float:
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


def machine_peaks(device: str) -> dict[str, Any]:
    """The run metadata's ``peaks``: what was measured and how."""
    return {"copy_bytes_per_s": copy_bandwidth(torch.device(device)), "copy_probe": COPY_PROBE}
