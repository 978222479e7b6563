"""``analysis.gpu`` names a GPU trace's platform (ROCm by its header keys or HIP runtime calls, else CUDA) and its
first listed device; the tests decode tiny hand-built traces whose header and runtime calls say which by hand."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tb_attn_plugin.analysis.common.bounds import MAX_LABEL_CHARS
from tb_attn_plugin.analysis.measures.gpu import gpu_label, platform
from tb_attn_plugin.trace.decode import decode_bytes
from tb_attn_plugin.trace.events import Events
from tb_attn_plugin.trace.kineto import ROCM_KEYS

CPU = {"pid": 1, "tid": 1}
GPU = {"pid": 0, "tid": 7}


def _x(cat: str, name: str, ts: float, dur: float, where: dict[str, int] = CPU, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, **where, "args": args}


def _launch(runtime: str) -> list[dict[str, Any]]:
    """One op launching one kernel through ``runtime``."""
    return [_x("cpu_op", "aten::mm", 0, 20), _x("cuda_runtime", runtime, 2, 5, correlation=1),
            _x("kernel", "Cijk_Alik_Bljk_SB_MT64x64", 10, 8, GPU, correlation=1)]


def _events(events: list[dict[str, Any]], **header: Any) -> Events:
    return decode_bytes(json.dumps({"traceEvents": events, **header}).encode())


def test_cuda_launches_and_a_plain_header_are_cuda() -> None:
    ev = _events(_launch("cudaLaunchKernel"), deviceProperties=[])
    assert platform(ev) == "CUDA"
    assert gpu_label(ev) == "CUDA"  # no device listed: the platform alone


@pytest.mark.parametrize("key", ROCM_KEYS)
def test_each_rocm_header_key_alone_makes_it_rocm(key: str) -> None:
    # The launches are CUDA's by name: only the header says ROCm.
    ev = _events(_launch("cudaLaunchKernel"), **{key: "6.2.41133"})
    assert platform(ev) == "ROCm"


@pytest.mark.parametrize("runtime", ["hipLaunchKernel", "hipExtModuleLaunchKernel", "hipMemcpyAsync"])
def test_a_hip_runtime_call_makes_it_rocm_without_the_header_keys(runtime: str) -> None:
    assert platform(_events(_launch(runtime))) == "ROCm"


def test_hip_in_a_name_that_is_no_runtime_call_is_not_rocm() -> None:
    # An op and a kernel whose names begin with "hip" are not HIP's runtime: only runtime calls count.
    events = [_x("cpu_op", "hip_custom::fused", 0, 20), _x("cuda_runtime", "cudaLaunchKernel", 2, 5, correlation=1),
              _x("kernel", "hipblaslt_gemm", 10, 8, GPU, correlation=1)]
    assert platform(_events(events)) == "CUDA"


def test_a_cpu_only_trace_reads_cuda_by_default() -> None:
    # The documented fallback: neither a ROCm key nor a HIP call.
    assert platform(_events([_x("cpu_op", "aten::mm", 0, 5)])) == "CUDA"


def test_the_label_names_the_first_listed_device() -> None:
    props = [{"id": 0, "name": "AMD Instinct MI300X"}, {"id": 1, "name": "AMD Instinct MI250X"}]
    ev = _events(_launch("hipLaunchKernel"), deviceProperties=props)
    assert gpu_label(ev) == "ROCm · AMD Instinct MI300X"


def test_the_older_compute_properties_key_names_the_device_too() -> None:
    ev = _events(_launch("cudaLaunchKernel"), computeProperties=[{"name": "Tesla V100-SXM2-16GB"}])
    assert gpu_label(ev) == "CUDA · Tesla V100-SXM2-16GB"


@pytest.mark.parametrize("props", [[{"name": ""}], [{"name": "   "}], [{"id": 0}], []])
def test_a_device_without_a_name_leaves_the_platform_alone(props: list[dict[str, Any]]) -> None:
    # Blank names (vLLM's ROCm traces write "") must not leave a dangling " · ".
    assert gpu_label(_events(_launch("hipLaunchKernel"), deviceProperties=props)) == "ROCm"


def test_a_name_that_is_no_string_is_written_as_text() -> None:
    assert gpu_label(_events(_launch("cudaLaunchKernel"), deviceProperties=[{"name": 80}])) == "CUDA · 80"


def test_a_hostile_device_name_is_clipped_to_the_label_bound() -> None:
    ev = _events(_launch("cudaLaunchKernel"), deviceProperties=[{"name": "H" * 10_000}])
    label = gpu_label(ev)
    name = label.removeprefix("CUDA · ")
    # "CUDA · " (7 characters) and the name cut to MAX_LABEL_CHARS with its ellipsis.
    assert len(label) == len("CUDA · ") + MAX_LABEL_CHARS
    assert name == "H" * (MAX_LABEL_CHARS - 1) + "…"
