"""The hardware's peaks a roofline is drawn under: a table of accelerators' datasheet figures, found
from the trace's ``deviceProperties``; the runner's own probes of a CPU (run metadata ``peaks``);
or figures the user gives (``tb-attn summarize --peak-flops/--peak-bw``). Nothing is guessed: a
device the table does not know, or a CPU trace without probes, gets no peak and says so.

The table holds *dense* peaks (the datasheets' "with sparsity" figures halved) per peak class:
``fp32`` (no tensor cores: what an fp32 matmul runs at unless TF32 is allowed), ``tf32``,
``bf16`` (= fp16), ``fp8``, ``int8`` (operations per second), and the memory bandwidth. Each row
cites its source; ``docs/analysis.md`` ("Peaks") lists them too.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from tb_attn_plugin.analysis.common.bounds import MAX_LABEL_CHARS, clip

__all__ = [
    "CPU_LAUNCH_US",
    "DEVICE_LAUNCH_US",
    "PEAK_TABLE",
    "PeakRow",
    "Peaks",
    "cpu_op_floor",
    "device_name",
    "device_peaks",
    "find_row",
    "parse_rate",
    "peaks_for",
    "with_overrides",
]

T = 1e12
#: The per-call floor of a kernel on a GPU: a launch and the smallest kernel's run, about 4 µs
#: back to back in eager PyTorch (CUDA's own launch latency is 2-3 µs; the CPU-side dispatch of
#: an ATen op adds more). The latency-bound verdict compares launches times this with the roofs.
DEVICE_LAUNCH_US = 4.0
#: An eager op's floor on a CPU where the runner did not measure it (its probe: ``op_us``).
CPU_LAUNCH_US = 3.0


@dataclass(frozen=True)
class PeakRow:
    """One accelerator's dense peaks (FLOP/s per peak class) and memory bandwidth (bytes/s)."""

    name: str
    flops: Mapping[str, float]
    bytes_per_s: float
    source: str


def _nv(fp32: float, tf32_sparse: float, bf16_sparse: float, fp8_sparse: float | None, int8_sparse: float,
        ) -> dict[str, float]:
    """NVIDIA's datasheet figures (tensor core ones with sparsity, in TFLOP/s) as dense FLOP/s."""
    out = {"fp32": fp32 * T, "tf32": tf32_sparse / 2 * T, "bf16": bf16_sparse / 2 * T, "fp16": bf16_sparse / 2 * T,
           "int8": int8_sparse / 2 * T}
    if fp8_sparse is not None:
        out["fp8"] = fp8_sparse / 2 * T
    return out


def _amd(fp32: float, tf32: float | None, bf16: float, fp8: float | None, int8: float) -> dict[str, float]:
    """AMD's dense figures (TFLOP/s; fp32 the matrix-core figure, which fp32 GEMMs use)."""
    out = {"fp32": fp32 * T, "bf16": bf16 * T, "fp16": bf16 * T, "int8": int8 * T}
    if tf32 is not None:
        out["tf32"] = tf32 * T
    if fp8 is not None:
        out["fp8"] = fp8 * T
    return out


_A100 = "NVIDIA A100 datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf)"
_H100 = "NVIDIA H100 datasheet (resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet)"
_H200 = "NVIDIA H200 product page (nvidia.com/en-us/data-center/h200), specifications"
#: Dense peaks and bandwidth of common accelerators, dense (sparsity figures halved).
PEAK_TABLE: dict[str, PeakRow] = {row.name: row for row in (
    PeakRow("A100 SXM4 40GB", _nv(19.5, 312, 624, None, 1248), 1555e9, _A100),
    PeakRow("A100 SXM4 80GB", _nv(19.5, 312, 624, None, 1248), 2039e9, _A100),
    PeakRow("A100 PCIe 40GB", _nv(19.5, 312, 624, None, 1248), 1555e9, _A100),
    PeakRow("A100 PCIe 80GB", _nv(19.5, 312, 624, None, 1248), 1935e9, _A100),
    PeakRow("H100 SXM5", _nv(67, 989, 1979, 3958, 3958), 3.35e12, _H100),
    PeakRow("H100 PCIe", _nv(51, 756, 1513, 3026, 3026), 2.0e12, _H100),
    PeakRow("H100 NVL", _nv(60, 835, 1671, 3341, 3341), 3.9e12, _H100),
    PeakRow("H200 SXM", _nv(67, 989, 1979, 3958, 3958), 4.8e12, _H200),
    PeakRow("H200 NVL", _nv(60, 835, 1671, 3341, 3341), 4.8e12, _H200),
    PeakRow("B200", _nv(75, 2250, 4500, 9000, 9000), 8.0e12,
            "NVIDIA HGX B200 specifications (nvidia.com/en-us/data-center/hgx): the 8-GPU figures / 8"),
    PeakRow("L4", _nv(30.3, 120, 242, 485, 485), 300e9, "NVIDIA L4 product page (nvidia.com/en-us/data-center/l4)"),
    PeakRow("L40S", _nv(91.6, 366, 733, 1466, 1466), 864e9,
            "NVIDIA L40S product page (nvidia.com/en-us/data-center/l40s)"),
    PeakRow("MI250X", _amd(95.7, None, 383, None, 383), 3.2768e12,
            "AMD Instinct MI250X specifications (amd.com/en/products/accelerators/instinct/mi200/mi250x.html)"),
    PeakRow("MI300X", _amd(163.4, 653.7, 1307.4, 2614.9, 2614.9), 5.3e12,
            "AMD Instinct MI300X specifications (amd.com/en/products/accelerators/instinct/mi300/mi300x.html)"),
    PeakRow("MI325X", _amd(163.4, 653.7, 1307.4, 2614.9, 2614.9), 6.0e12,
            "AMD Instinct MI325X specifications (amd.com/en/products/accelerators/instinct/mi300/mi325x.html)"),
)}


@dataclass(frozen=True)
class Peaks:
    """The peaks one trace's roofline uses (``flops`` empty and ``bytes_per_s`` None: none known)."""

    device: str
    source: str
    flops: Mapping[str, float] = field(default_factory=dict)
    bytes_per_s: float | None = None
    launch_us: float = DEVICE_LAUNCH_US
    note: str = ""

    @property
    def known(self) -> bool:
        return bool(self.flops) and self.bytes_per_s is not None


#: The peak classes a table row or a probe may give.
_CLASSES = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8")


def _rate_ok(value: object) -> TypeGuard[float]:
    """A finite positive number (not a bool), and below 1e21 (a zetta-rate is no machine's)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
        and 0 < value < 1e21


def _words(name: str) -> set[str]:
    return set(re.split(r"[^a-z0-9]+", name.lower())) - {""}


def find_row(props: Mapping[str, Any]) -> tuple[PeakRow | None, str]:
    """The table's row for one ``deviceProperties`` entry, and "" or why none (an ambiguous or
    unknown device)."""
    name = clip(str(props.get("name", "")), MAX_LABEL_CHARS)
    words = _words(name)
    sms = props.get("numSms")
    memory = props.get("totalGlobalMem")
    if {"mi325x", "mi300x", "mi250x"} & words:
        return PEAK_TABLE[next(w for w in ("mi325x", "mi300x", "mi250x") if w in words).upper()], ""
    if "b200" in words:
        return PEAK_TABLE["B200"], ""
    if "h200" in words:
        return PEAK_TABLE["H200 NVL" if "nvl" in words else "H200 SXM"], ""
    if "h100" in words:
        if "pcie" in words or sms == 114:
            return PEAK_TABLE["H100 PCIe"], ""
        if "nvl" in words:
            return PEAK_TABLE["H100 NVL"], ""
        if "sxm" in words or "sxm5" in words or "hbm3" in words or sms == 132:
            return PEAK_TABLE["H100 SXM5"], ""
        return None, f"'{name}' is an H100 of a kind the name and SM count ({sms}) do not tell"
    if "a100" in words or any(w.startswith("a100") for w in words):
        big = "80gb" in words or (isinstance(memory, int) and memory > 60 * 2**30)
        form = "PCIe" if "pcie" in words else "SXM4"
        return PEAK_TABLE[f"A100 {form} {'80GB' if big else '40GB'}"], ""
    if "l40s" in words:
        return PEAK_TABLE["L40S"], ""
    if "l4" in words:
        return PEAK_TABLE["L4"], ""
    said = f"'{name}'" if name.strip() else "a device the trace does not name"
    return None, f"no peak known for {said}: give --peak-flops and --peak-bw"


def device_name(device_properties: Sequence[Mapping[str, Any]]) -> str:
    """The name of a GPU trace's first device (the one its kernels ran on, for a one-GPU
    process), clipped; "" where the trace lists no device or names none."""
    if not device_properties:
        return ""
    return clip(str(device_properties[0].get("name", "")), MAX_LABEL_CHARS)


def device_peaks(device_properties: Sequence[Mapping[str, Any]]) -> Peaks | None:
    """The peaks of a GPU trace's first device (``device_name``), or None where the trace lists
    no device."""
    if not device_properties:
        return None
    props = device_properties[0]
    name = device_name(device_properties) or "an unnamed device"
    row, why = find_row(props)
    if row is None:
        return Peaks(device=name, source="", note=why)
    return Peaks(device=name, source=f"table: {row.name}, {row.source}", flops=dict(row.flops),
                 bytes_per_s=row.bytes_per_s)


def cpu_op_floor(metadata: Mapping[str, Any] | None) -> float:
    """The CPU's cost of dispatching one op, in µs: the runner's probe of this machine (run metadata
    ``peaks.op_us``), else ``CPU_LAUNCH_US``."""
    peaks = metadata.get("peaks") if metadata else None
    op_us = peaks.get("op_us") if isinstance(peaks, Mapping) else None
    return float(op_us) if _rate_ok(op_us) and op_us < 1e6 else CPU_LAUNCH_US


def _probe_peaks(metadata: Mapping[str, Any] | None, device: str) -> Peaks | None:
    """The runner's probes of the machine (run metadata ``peaks``), for a trace of that device kind."""
    peaks = metadata.get("peaks") if metadata else None
    if not isinstance(peaks, Mapping) or peaks.get("device", "cpu") != device:
        return None
    gemm = peaks.get("gemm_flops_per_s")
    # Metadata is anyone's JSON: finite positive numbers only, for the peak classes we know.
    flops = {k: float(v) for k, v in gemm.items() if k in _CLASSES and _rate_ok(v)} if isinstance(gemm, Mapping) \
        else {}
    bw = peaks.get("copy_bytes_per_s")
    if not flops or not _rate_ok(bw):
        return None
    if "bf16" in flops:
        flops.setdefault("fp16", flops["bf16"])
    op_us = peaks.get("op_us")
    launch = float(op_us) if _rate_ok(op_us) else CPU_LAUNCH_US
    name = clip(str(metadata.get("device_name") or device), MAX_LABEL_CHARS) if metadata else device
    return Peaks(device=name, source="the runner's probes of this machine: matmul and copy",
                 flops=flops, bytes_per_s=float(bw), launch_us=launch,
                 note="measured ceilings, below the machine's theoretical peaks")


def peaks_for(device: str, device_properties: Sequence[Mapping[str, Any]],
              metadata: Mapping[str, Any] | None) -> Peaks:
    """A trace's peaks: a GPU's from the table (else the runner's probes of it), a CPU's from the
    runner's probes; else none, with the reason."""
    if device != "cpu":
        found = device_peaks(device_properties)
        if found is not None and found.known:
            return found
        probed = _probe_peaks(metadata, "cuda")
        if probed is not None:
            return probed
        return found or Peaks(device="the trace's device", source="",
                              note="the trace names no device: give --peak-flops and --peak-bw")
    probed = _probe_peaks(metadata, "cpu")
    if probed is not None:
        return probed
    return Peaks(device="cpu", source="", launch_us=CPU_LAUNCH_US,
                 note="no peak known for this CPU (the runner measures one; for other traces give --peak-flops "
                      "and --peak-bw)")


_SI = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_RATE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([kKMGTP]?)\s*(?:FLOP/s|FLOPS|B/s|bytes/s)?\s*$")


def parse_rate(text: str) -> float:
    """A peak rate the user gives (``--peak-flops``, ``--tb_attn_peak_bw``): a positive number,
    optionally with an SI prefix and unit ("312T", "2.0 TB/s", "1.9e12"). Raises ValueError with
    the sentence to show."""
    m = _RATE.match(text)
    value = float(m.group(1)) * _SI[m.group(2)] if m else 0.0
    if not m or not _rate_ok(value):
        raise ValueError(f"must be a positive rate such as 312T or 2.0e12, got {text!r}")
    return value


def with_overrides(peaks: Peaks, flops: float | None, bytes_per_s: float | None) -> Peaks:
    """``peaks`` with the user's figures: one FLOP/s for every peak class, and a bandwidth."""
    if flops is None and bytes_per_s is None:
        return peaks
    new_flops = dict(peaks.flops)
    if flops is not None:
        new_flops = dict.fromkeys(_CLASSES, flops)
    bw = bytes_per_s if bytes_per_s is not None else peaks.bytes_per_s
    given = " and ".join(x for x, v in (("--peak-flops", flops), ("--peak-bw", bytes_per_s)) if v is not None)
    source = f"given by {given}" + (f"; the rest from {peaks.source}" if peaks.source and (flops is None
                                                                                          or bytes_per_s is None)
                                    else "")
    note = "" if new_flops and bw is not None else \
        ("give --peak-bw too" if bw is None else "give --peak-flops too")
    return Peaks(device=peaks.device, source=source, flops=new_flops, bytes_per_s=bw, launch_us=peaks.launch_us,
                 note=note)
