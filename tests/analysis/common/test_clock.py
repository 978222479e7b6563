"""The clock a trace is judged by, partial device data and one word per quantity (issue 47, items 3 to 5).

The vLLM trace in ``shared/production-traces`` was recorded while 25 piecewise graphs were captured:
every layer's projections and RoPE launched kernels into a graph that never ran in the trace, while
its KV write and core ran eagerly. Its attention's device time (0.83 ms) is a fraction of the work
its FLOPs count (the projections' GEMMs), so it is judged by CPU time, marked partial wherever its
device figures show, and no rate divides the captured kernels' work by the others' time.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import msgspec
import pytest
from helpers import SHARED_TRACES

from tb_attn_plugin.analysis.common.clock import PARTIAL_DEVICE, attention_flops, attention_rate, attention_us, clock_of
from tb_attn_plugin.analysis.common.wording import duration, spread_words
from tb_attn_plugin.analysis.cross_run.compare import run_facts
from tb_attn_plugin.analysis.cross_run.figures import run_figures
from tb_attn_plugin.analysis.measures.overview import top_finding
from tb_attn_plugin.cli.report import summary_table
from tb_attn_plugin.engine.loader import Loader, resolve_runs
from tb_attn_plugin.types.schema import (
    Backward,
    Finding,
    LayerStats,
    PhaseStats,
    RunSummary,
    WorkerSummary,
    finding_order,
)

PRODUCTION = SHARED_TRACES.parent / "production-traces"
VLLM = PRODUCTION / "tracelens_vllm_mi300_prefilldecode_piecewise_graphs.pt.trace.json.gz"
SGLANG = PRODUCTION / "tracelens_sglang_qwen3-8b_mi300_prefilldecode.json.gz"
SD35 = PRODUCTION / "tracelens_xdit_sd3.5_mi300_diffusion.json.gz"


def _run_of(path: Path, logdir: Path) -> RunSummary:
    if not path.exists():
        pytest.skip(f"{path} is not here")
    (logdir / "run").mkdir()
    shutil.copy(path, logdir / "run" / path.name)
    return Loader().summarize_run(resolve_runs(str(logdir))[0])


@pytest.fixture(scope="module")
def vllm(tmp_path_factory: pytest.TempPathFactory) -> RunSummary:
    return _run_of(VLLM, tmp_path_factory.mktemp("vllm"))


def test_a_capture_trace_is_partial_and_judged_by_cpu_time(vllm: RunSummary) -> None:
    w = vllm.workers[0]
    assert w.device_partial and w.attention_device_us > 0
    captured = {p.phase for layer in w.layers for p in layer.phases if p.captured}
    assert captured == {"qkv_proj", "rope", "out_proj"}
    assert clock_of(w) == "cpu" and attention_us(w) == w.attention_cpu_us
    # The runs list: CPU time, marked partial; steps are the profiled steps.
    f = run_figures(vllm)
    assert f is not None and f.clock == "cpu" and f.device_partial and f.attention_us == w.attention_cpu_us
    # The headline: CPU time, and why the device time is partial, with the device figure it has.
    assert w.headline.startswith(f"Attention is {w.attention_cpu_us / w.step_cpu_us:.0%} of the CPU step time")
    assert f"Its device time is partial: {duration(w.attention_device_us)} of attention's kernels ran" in w.headline
    # The roofline's point leaves the captured phases out, and says so.
    assert w.roofline is not None and w.roofline.partial


def test_no_rate_divides_captured_work_by_the_time_of_other_kernels(vllm: RunSummary) -> None:
    w = vllm.workers[0]
    f = run_facts(vllm)
    assert f.clock == "cpu" and f.device_partial
    # The kernels that ran are the KV writes and the cores, whose shapes give no FLOPs (a serving core's
    # lengths are tensor values): no rate, where every FLOP over the 0.83 ms of kernels that ran made
    # 12.6 PFLOP/s on an MI300X (its peak is 1.3).
    assert attention_flops(w) == 0.0 and f.flops_per_s is None
    forward = sum(p.flops for layer in w.layers for p in layer.phases)
    assert forward / (w.attention_device_us * 1e-6) > 5e15
    # No layer's rate either: its captured phases' FLOPs have no device time.
    for layer in w.layers:
        ran = sum(p.flops for p in layer.phases if p.device_us > 0)
        assert layer.flops_per_s == pytest.approx(ran / (layer.device_us * 1e-6) if layer.device_us > 0 else 0.0)


def test_the_cli_marks_partial_figures(vllm: RunSummary) -> None:
    text = summary_table([vllm])
    assert PARTIAL_DEVICE in text
    assert "* = partial: phases captured into a CUDA/HIP graph ran no kernel here" in text
    block = next(line for line in text.splitlines() if line.strip().startswith("= vllm-unified"))
    assert "*" in block.split()[4]  # the block's device time leaves its captured phases out
    rl = vllm.workers[0].roofline
    assert rl is not None and rl.partial
    if rl.attention is not None:
        assert "partial: phases captured into a CUDA/HIP graph ran no kernel here and are left out" in text


def _phase(name: str, *, flops: float, device_us: float, captured: bool = False) -> PhaseStats:
    return PhaseStats(phase=name, calls=1.0, cpu_us=10.0, cpu_self_us=10.0, device_us=device_us, kernels=1.0,
                      kernel_names=[], ops=[], flops=flops, flops_per_s=0.0, alloc_bytes=0.0, freed_bytes=0.0,
                      peak_bytes=0, sxs_bytes=0.0, sxs_allocs=0.0, backward=Backward(), captured=captured)


def _worker(phases: list[PhaseStats], *, partial: bool = False, backward: Backward | None = None) -> WorkerSummary:
    bwd = backward or Backward()
    layer = LayerStats(layer=0, module=None, backend="sdpa", backend_evidence=[], inferred=False, calls=1.0,
                       cpu_us=sum(p.cpu_us for p in phases), device_us=sum(p.device_us for p in phases),
                       flops=sum(p.flops for p in phases), flops_per_s=0.0, alloc_bytes=0.0, peak_bytes=0,
                       sxs_bytes=0.0, heads_count=None, phases=phases, heads=[], backward=bwd)
    return WorkerSummary(file="f", worker="w", span=None, device="cuda", inferred=False, backend="sdpa", steps=[1],
                         step_count=1, step_cpu_us=100.0, step_device_us=100.0, attention_cpu_us=40.0,
                         attention_device_us=layer.device_us + bwd.device_us, attention_share_cpu=0.4,
                         attention_share_device=None, layers=[layer], per_step=[], diagnostics={}, notes=[],
                         device_partial=partial)


def test_attention_rate_counts_the_work_of_the_kernels_it_times() -> None:
    # 2 GFLOP forward in 1 ms of device time, 4 GFLOP backward in 2 ms: 6 GFLOP over 3 ms.
    w = _worker([_phase("qkv_proj", flops=1e9, device_us=500.0), _phase("sdpa", flops=1e9, device_us=500.0)],
                backward=Backward(calls=1.0, cpu_us=50.0, device_us=2000.0, flops=4e9))
    assert clock_of(w) == "device" and attention_us(w) == 3000.0
    assert attention_rate(w) == pytest.approx(6e9 / 3e-3)
    # A phase that ran no kernel (captured) keeps its FLOPs out of the rate; the run is judged by CPU time.
    w = _worker([_phase("qkv_proj", flops=1e9, device_us=0.0, captured=True),
                 _phase("sdpa", flops=3e9, device_us=500.0)], partial=True)
    assert clock_of(w) == "cpu" and attention_us(w) == 40.0
    assert attention_flops(w) == 3e9 and attention_rate(w) == pytest.approx(3e9 / 500e-6)
    # Without kernels, every FLOP over CPU time.
    w = msgspec.structs.replace(w, device="cpu", attention_device_us=0.0, device_partial=False)
    assert attention_rate(w) == pytest.approx(4e9 / 40e-6)


def _finding(fid: str, severity: str, time_us: float) -> Finding:
    return msgspec.convert({"id": fid, "severity": severity, "title": fid, "explanation": "", "suggestion": "",
                            "evidence": {"layers": [0], "ops": [], "kernels": [], "time_us": time_us, "bytes": 0.0,
                                         "details": {}}}, Finding)


def test_the_top_finding_is_the_first_that_asks_for_a_change_in_the_list() -> None:
    found = sorted([_finding("b", "medium", 5.0), _finding("a", "medium", 1.0), _finding("z", "info", 99.0),
                    _finding("c", "high", 0.5)], key=finding_order)
    assert [f.id for f in found] == ["c", "b", "a", "z"]
    assert top_finding(found) is found[0]
    two = sorted([_finding("b", "medium", 1.0), _finding("a", "medium", 5.0)], key=finding_order)
    assert top_finding(two) is two[0] and two[0].id == "a"
    assert top_finding([_finding("z", "info", 1.0)]) is None


@pytest.mark.parametrize("path", [SGLANG, SD35])
def test_a_real_trace_lists_its_top_finding_first(path: Path, tmp_path: Path) -> None:
    w = _run_of(path, tmp_path).workers[0]
    actionable = [f for f in w.findings if f.severity != "info"]
    assert actionable and top_finding(w.findings) is actionable[0]
    assert f"Top finding ({actionable[0].severity}): {actionable[0].title.rstrip('.')}" in w.headline
    # The sentence's figures are the table's: attention's time and the finding's time.
    t = actionable[0].evidence.time_us
    assert f"in {duration(t)} per step" in w.headline
    assert duration(attention_us(w)) in w.headline.split(". ")[0]


def test_share_of_step_names_the_passes_the_trace_ran(vllm: RunSummary) -> None:
    share = next(f for f in vllm.workers[0].findings if f.id == "share-of-step")
    assert "forward over 24 layers" in share.explanation and "backward" not in share.explanation


def test_a_spread_says_which_spread_it_is() -> None:
    assert spread_words(1000.0, 2000.0, "range", 6) == "ranged 1.00 ms to 2.00 ms over 6 steps"
    assert spread_words(1000.0, 2000.0, "iqr", 12) == "had an interquartile range of 1.00 ms to 2.00 ms over 12 steps"
