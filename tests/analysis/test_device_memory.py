"""What a summary says of its GPU and of memory it could not see (issue 36, item 6).

``WorkerSummary.gpu`` names the platform and the device the trace lists ("ROCm · AMD Instinct
MI300X"), beside ``device``, which stays "cuda" for any trace with kernels. ``memory_recorded``
tells a trace without memory events (profile_memory off), whose peaks read 0 for want of data,
from one whose peaks are a measured 0. Expectations read from the traces' headers by hand
(``shared/traces/README.md``, ``shared/production-traces/README.md``).
"""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest
from helpers import HAND_TRACES, SHARED_TRACES

from tb_attn_plugin.analysis.attribution.analyze import analyze
from tb_attn_plugin.analysis.common.bounds import MAX_LABEL_CHARS
from tb_attn_plugin.analysis.cross_run.figures import run_figures
from tb_attn_plugin.analysis.summary import summarize_trace
from tb_attn_plugin.engine.loader import load_events
from tb_attn_plugin.trace.decode import decode_bytes
from tb_attn_plugin.types.schema import RunSummary, WorkerSummary

PRODUCTION = SHARED_TRACES.parent / "production-traces"
MI300X = SHARED_TRACES / "gpu" / "tracelens_mi300x_bert-small_sdpa-flash.json.gz"
H100 = SHARED_TRACES / "gpu" / "tracelens_h100_bert-small_sdpa-flash.json.gz"
#: No roctracer keys in its header: ROCm only by its HIP runtime calls.
MI250 = SHARED_TRACES / "other" / "hta_amd_trace_mi250_minitoy_train_ROCm6_2_kineto.json.gz"
CPU_ONLY = SHARED_TRACES / "other" / "hta_cpu_only_rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
#: No [memory] events and no profile_memory key.
SD35 = PRODUCTION / "tracelens_xdit_sd3.5_mi300_diffusion.json.gz"
#: profile_memory on, memory events, but every deviceProperties name is "".
VLLM = PRODUCTION / "tracelens_vllm_mi300_prefilldecode_piecewise_graphs.pt.trace.json.gz"

_cache: dict[Path, WorkerSummary] = {}


def _summary(path: Path) -> WorkerSummary:
    if not path.exists():
        pytest.skip(f"{path} is not here")
    if path not in _cache:
        _cache[path] = summarize_trace(analyze(load_events(str(path))), file=path.name, worker="w", span=None)
    return _cache[path]


def _peak(s: WorkerSummary) -> int:
    return max(layer.peak_bytes for layer in s.layers)


@pytest.mark.parametrize(("path", "gpu"), [
    (MI300X, "ROCm · AMD Instinct MI300X VF"),
    (SD35, "ROCm · AMD Instinct MI300X"),
    (MI250, "ROCm · AMD Radeon Graphics"),
    (H100, "CUDA · NVIDIA H100 80GB HBM3"),
    (VLLM, "ROCm"),  # names its devices "": the platform alone
])
def test_a_gpu_trace_names_its_platform_and_device(path: Path, gpu: str) -> None:
    s = _summary(path)
    assert s.device == "cuda"
    assert s.gpu == gpu


def test_a_cpu_trace_has_no_gpu() -> None:
    s = _summary(CPU_ONLY)
    assert (s.device, s.gpu) == ("cpu", None)


def _gpu_trace(**changes: object) -> WorkerSummary:
    """The hand-written GPU trace with ``changes`` to its header, its launches HIP's where
    ``hip`` is true."""
    doc = json.loads((HAND_TRACES / "gpu.json").read_text())
    hip = bool(changes.pop("hip", False))
    doc.update(changes)
    for e in doc["traceEvents"]:
        if hip and e["name"] == "cudaLaunchKernel":
            e["name"] = "hipLaunchKernel"
    return summarize_trace(analyze(decode_bytes(json.dumps(doc).encode())), file="t", worker="w", span=None)


def test_the_platform_comes_from_the_header_or_the_runtime_calls() -> None:
    assert _gpu_trace().gpu == "CUDA"  # deviceProperties: []
    assert _gpu_trace(hip=True).gpu == "ROCm"
    assert _gpu_trace(roctracer_version=4.1).gpu == "ROCm"
    assert _gpu_trace(hip_runtime_version=70253211, deviceProperties=[{"name": "AMD Instinct MI300X"}]).gpu \
        == "ROCm · AMD Instinct MI300X"


def test_a_hostile_device_name_is_clipped() -> None:
    s = _gpu_trace(deviceProperties=[{"name": "G" * 100_000}])
    assert s.gpu is not None
    name = s.gpu.removeprefix("CUDA · ")
    assert len(name) == MAX_LABEL_CHARS and name.endswith("…")


def test_without_memory_events_memory_is_not_recorded() -> None:
    s = _summary(SD35)
    assert not s.memory_recorded
    assert s.layers and _peak(s) == 0  # the figure the tab and the CLI no longer show as "0 B"
    assert not _gpu_trace().memory_recorded  # gpu.json: no [memory] events


@pytest.mark.parametrize("path", [MI300X, H100])
def test_with_memory_events_memory_is_recorded(path: Path) -> None:
    s = _summary(path)
    assert s.memory_recorded and _peak(s) > 0


def test_a_recorded_zero_stays_a_zero() -> None:
    """A trace that records memory (an allocation before the block) and a block that allocates
    nothing: a measured 0."""
    cpu = {"pid": 1, "tid": 1}
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0, "dur": 100, **cpu, "args": {}},
        {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "ts": 5, **cpu,
         "args": {"Addr": 1, "Bytes": 1024, "Total Allocated": 1024, "Total Reserved": 2048, "Device Type": 0,
                  "Device Id": -1}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::scaled_dot_product_attention", "ts": 10, "dur": 20, **cpu,
         "args": {}},
    ]
    s = summarize_trace(analyze(decode_bytes(json.dumps({"traceEvents": events}).encode())), file="z.json",
                        worker="w", span=None)
    assert s.memory_recorded and len(s.layers) == 1 and _peak(s) == 0
    assert sum(layer.alloc_bytes for layer in s.layers) == 0


def test_the_runs_list_figures_carry_it() -> None:
    for path, recorded in ((SD35, False), (H100, True)):
        figures = run_figures(RunSummary(run="r", metadata=None, workers=[_summary(path)], errors=[]))
        assert figures is not None and figures.memory_recorded is recorded


def test_a_summary_stored_before_the_fields_loads_with_their_defaults() -> None:
    stored = msgspec.to_builtins(_summary(H100))
    del stored["gpu"], stored["memory_recorded"]
    old = msgspec.msgpack.decode(msgspec.msgpack.encode(stored), type=WorkerSummary)
    assert old.gpu is None and old.memory_recorded
