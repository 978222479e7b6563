"""What a GPU trace says of its device: the platform and the device's name, as the run overview
and the CLI show them ("ROCm · AMD Instinct MI300X", "CUDA · NVIDIA H100 80GB HBM3").

``WorkerSummary.device`` stays "cuda" for any trace with device kernels, ROCm's included (HIP
runs under torch's ``cuda`` device); this is the label beside it.
"""

from __future__ import annotations

import numpy as np

from tb_attn_plugin.analysis.measures.peaks import device_name
from tb_attn_plugin.trace.events import Events
from tb_attn_plugin.trace.kineto import HIP_RUNTIME_PREFIX, ROCM_KEYS, Kind

__all__ = ["gpu_label", "platform"]


def platform(events: Events) -> str:
    """"ROCm" where the trace's header has a ROCm build's keys or its runtime calls are HIP's,
    else "CUDA"."""
    if any(k in events.meta.extra for k in ROCM_KEYS):
        return "ROCm"
    runtime = np.unique(events.name[events.kind == int(Kind.RUNTIME)]).tolist()
    return "ROCm" if any(events.names[n].startswith(HIP_RUNTIME_PREFIX) for n in runtime) else "CUDA"


def gpu_label(events: Events) -> str:
    """The platform and, where ``deviceProperties`` names it, the first device (clipped as
    ``peaks.device_name`` clips it): "ROCm · AMD Instinct MI300X", or "ROCm" alone."""
    name = device_name(events.meta.device_properties)
    return f"{platform(events)} · {name}" if name.strip() else platform(events)
