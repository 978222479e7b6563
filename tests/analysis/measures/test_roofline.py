"""The roofline (analysis/measures/peaks.py, analysis/measures/roofline.py): peaks from the public GPU traces'
deviceProperties and the table, the CPU's probes from the runner's metadata, each roof's figures
against a hand computation, the verdicts, golden values on ``../shared/traces/gpu/``, and the
far-from-roof finding."""

from __future__ import annotations

import copy
import gzip
import json
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest
from helpers import SHARED_TRACES

from tb_attn_plugin.analysis.attribution.analyze import analyze
from tb_attn_plugin.analysis.measures.peaks import (
    CPU_LAUNCH_US,
    DEVICE_LAUNCH_US,
    PEAK_TABLE,
    Peaks,
    find_row,
    peaks_for,
    with_overrides,
)
from tb_attn_plugin.analysis.measures.roofline import far_from_roof, peaks_of, with_roofline
from tb_attn_plugin.analysis.summary import summarize_trace, under_peaks, with_peaks
from tb_attn_plugin.engine.loader import Loader, resolve_runs
from tb_attn_plugin.trace.decode import decode_bytes
from tb_attn_plugin.types.schema import PhaseStats, WorkerSummary

GPU = SHARED_TRACES / "gpu"
H100 = GPU / "tracelens_h100_bert-small_sdpa-flash.json.gz"
MI300X = GPU / "tracelens_mi300x_bert-small_sdpa-flash.json.gz"
A100 = GPU / "switchtransformers_a100_naive-bmm-softmax_fp32.json.gz"
T = 1e12


def _gpu_summary(path: Path) -> WorkerSummary:
    return summarize_trace(analyze(decode_bytes(gzip.decompress(path.read_bytes()))), file=path.name, worker="w",
                           span=None)


def _device_properties(path: Path) -> list[dict[str, object]]:
    props = json.loads(gzip.decompress(path.read_bytes()))["deviceProperties"]
    assert isinstance(props, list)
    return props


# -- peaks ------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("path", "name", "row"), [
    (H100, "NVIDIA H100 80GB HBM3", "H100 SXM5"),
    (MI300X, "AMD Instinct MI300X VF", "MI300X"),
    (A100, "NVIDIA A100 80GB PCIe", "A100 PCIe 80GB"),
])
def test_peaks_come_from_the_traces_device_properties(path: Path, name: str, row: str) -> None:
    props = _device_properties(path)
    assert props[0]["name"] == name
    found, why = find_row(props[0])
    assert found is PEAK_TABLE[row] and why == ""
    peaks = peaks_for("cuda", props, None)
    assert peaks.known and peaks.device == name and row in peaks.source
    assert "datasheet" in peaks.source or "specifications" in peaks.source  # the figures' source is cited


def test_the_table_holds_the_datasheets_dense_figures() -> None:
    h100 = PEAK_TABLE["H100 SXM5"]  # 989 TFLOP/s bf16 dense (1979 with sparsity), 67 fp32, 3.35 TB/s
    assert h100.flops["bf16"] == pytest.approx(989.5 * T) and h100.flops["fp32"] == pytest.approx(67 * T)
    assert h100.flops["fp8"] == pytest.approx(1979 * T) and h100.bytes_per_s == pytest.approx(3.35e12)
    a100 = PEAK_TABLE["A100 PCIe 80GB"]  # 312 bf16, 156 tf32, 19.5 fp32, 1935 GB/s
    assert (a100.flops["bf16"], a100.flops["tf32"], a100.flops["fp32"], a100.bytes_per_s) == pytest.approx(
        (312 * T, 156 * T, 19.5 * T, 1935e9))
    assert "fp8" not in a100.flops  # no fp8 on Ampere: no peak, not a guess
    mi300x = PEAK_TABLE["MI300X"]
    assert (mi300x.flops["bf16"], mi300x.bytes_per_s) == pytest.approx((1307.4 * T, 5.3e12))
    for name in ("A100 SXM4 80GB", "H100 PCIe", "H200 SXM", "B200", "L4", "L40S", "MI250X", "MI325X"):
        row = PEAK_TABLE[name]
        assert row.source and row.bytes_per_s > 0 and row.flops["fp32"] < row.flops["bf16"]


@pytest.mark.parametrize(("props", "row"), [
    ({"name": "NVIDIA H100 PCIe", "numSms": 114}, "H100 PCIe"),
    ({"name": "NVIDIA H100", "numSms": 132}, "H100 SXM5"),  # the SM count tells the SXM part
    ({"name": "NVIDIA H100 NVL"}, "H100 NVL"),
    ({"name": "NVIDIA H200"}, "H200 SXM"),
    ({"name": "NVIDIA A100-SXM4-40GB", "totalGlobalMem": 42_000_000_000}, "A100 SXM4 40GB"),
    ({"name": "NVIDIA L40S"}, "L40S"),
    ({"name": "NVIDIA L4"}, "L4"),
    ({"name": "AMD Instinct MI250X"}, "MI250X"),
])
def test_device_names_find_their_row(props: dict[str, object], row: str) -> None:
    assert find_row(props)[0] is PEAK_TABLE[row]


def test_unknown_and_ambiguous_devices_say_so() -> None:
    row, why = find_row({"name": "NVIDIA GeForce RTX 4090"})
    assert row is None and "no peak known for 'NVIDIA GeForce RTX 4090'" in why and "--peak-flops" in why
    row, why = find_row({"name": "NVIDIA H100", "numSms": 120})
    assert row is None and "do not tell" in why
    peaks = peaks_for("cuda", [{"name": "NVIDIA GeForce RTX 4090"}], None)
    assert not peaks.known and "no peak known" in peaks.note
    assert not peaks_for("cuda", [], None).known
    # A device the trace names "" is no device called '' (vLLM's MI300X trace names none).
    row, why = find_row({"name": ""})
    assert row is None and why == "no peak known for a device the trace does not name: give --peak-flops and --peak-bw"


def test_a_cpu_trace_uses_the_runners_probes_or_says_it_has_none() -> None:
    bare = peaks_for("cpu", [], None)
    assert not bare.known and "no peak known for this CPU" in bare.note and bare.launch_us == CPU_LAUNCH_US
    meta = {"device_name": "AMD EPYC", "peaks": {"device": "cpu", "copy_bytes_per_s": 30e9, "op_us": 1.5,
                                                 "gemm_flops_per_s": {"fp32": 200e9, "bf16": 400e9}}}
    probed = peaks_for("cpu", [], meta)
    assert probed.known and probed.device == "AMD EPYC" and "probes" in probed.source
    assert dict(probed.flops) == {"fp32": 200e9, "bf16": 400e9, "fp16": 400e9}
    assert (probed.bytes_per_s, probed.launch_us) == (30e9, 1.5)
    # the probes of a GPU run are not a CPU trace's (and a GPU in the table keeps the table's)
    assert not peaks_for("cpu", [], {"peaks": {**meta["peaks"], "device": "cuda"}}).known
    assert peaks_for("cuda", _device_properties(H100), {"peaks": {**meta["peaks"], "device": "cuda"}}).source \
        .startswith("table: H100 SXM5")


def test_the_users_figures_replace_the_peaks() -> None:
    bare = peaks_for("cpu", [], None)
    both = with_overrides(bare, 1e12, 50e9)
    assert both.known and set(both.flops) >= {"fp32", "bf16"} and both.bytes_per_s == 50e9
    assert both.source == "given by --peak-flops and --peak-bw" and not both.note
    half = with_overrides(bare, 1e12, None)
    assert not half.known and half.note == "give --peak-bw too"
    table = with_overrides(peaks_for("cuda", _device_properties(A100), None), None, 1e12)
    assert table.flops["fp32"] == 19.5 * T and table.bytes_per_s == 1e12 and "the rest from table" in table.source


# -- roofs against a hand computation -----------------------------------------------------------

def test_bert_flash_on_h100_by_hand() -> None:
    """q, k, v [1, 8, 141, 64] bf16, not causal: FLOPs 2·8·141·141·(64 + 64), bytes Q + K + V + O."""
    s = _gpu_summary(H100)
    flops, nbytes = 2 * 8 * 141 * 141 * 128, 4 * 8 * 141 * 64 * 2
    peak, bw = 989.5 * T, 3.35e12
    for layer in s.layers:
        (p,) = [p for p in layer.phases if p.phase == "sdpa"]
        r = p.roof
        assert r is not None and (p.flops, p.bytes, p.dtype) == (flops, nbytes, "bf16")
        assert r.intensity == pytest.approx(70.5) and r.time_us == p.device_us and r.launches == p.kernels == 1
        assert r.ceiling == pytest.approx(min(peak, 70.5 * bw))  # under the ridge (295 FLOP/B): the memory roof
        assert r.flops_per_s == pytest.approx(flops / (p.device_us * 1e-6))
        assert r.share == pytest.approx(max(flops / peak, nbytes / bw) / (p.device_us * 1e-6))
        assert r.share == pytest.approx(r.flops_per_s / r.ceiling)
        # 0.17 µs of memory traffic against one launch of about 4 µs: latency-bound
        assert nbytes / bw * 1e6 < DEVICE_LAUNCH_US and r.verdict == "latency-bound"


GOLDEN = {
    # BERT-small, flash SDPA, bf16: every phase is a few tiny kernels (about 0.2 µs of work each at
    # the roofs): latency-bound, a few percent of the ceiling.
    H100: {"attention": ("latency-bound", 0.0366), "qkv_proj": ("latency-bound", 0.0419),
           "sdpa": ("latency-bound", 0.0171), "out_proj": ("latency-bound", 0.0440)},
    MI300X: {"attention": ("latency-bound", 0.0157), "qkv_proj": ("latency-bound", 0.0302),
             "sdpa": ("latency-bound", 0.0034), "out_proj": ("latency-bound", 0.0242)},
    # SwitchTransformers, naive fp32 on an A100: the projections near the fp32 roof (sgemm, 80%),
    # q·kᵀ just under the ridge (9.1 FLOP/B against 10.1) and memory-bound, the softmax memory-bound;
    # scale reads scores the previous kernel left in the 40 MB L2: over 100% of the DRAM roof, so no
    # verdict (and the note says why).
    A100: {"attention": ("compute-bound", 0.597), "qkv_proj": ("compute-bound", 0.805),
           "qk_matmul": ("memory-bound", 0.303), "scale": ("above its ceiling", 1.084),
           "softmax": ("memory-bound", 0.434), "av_matmul": ("compute-bound", 0.362),
           "out_proj": ("compute-bound", 0.640)},
}


@pytest.mark.parametrize("path", sorted(GOLDEN), ids=lambda p: p.name.split("_")[1])
def test_golden_verdicts_on_public_gpu_traces(path: Path) -> None:
    s = _gpu_summary(path)
    assert s.roofline is not None and s.roofline.clock == "device" and s.roofline.attention is not None
    got = {"attention": (s.roofline.attention.verdict, s.roofline.attention.share)}
    layer0 = s.layers[0]
    for p in layer0.phases:
        if p.phase in GOLDEN[path] and p.roof is not None:
            got[p.phase] = (p.roof.verdict, p.roof.share)
    assert set(got) == set(GOLDEN[path])
    for key, (verdict, share) in GOLDEN[path].items():
        assert got[key][0] == verdict, key
        assert got[key][1] == pytest.approx(share, abs=5e-4), key


def test_bert_on_h100_is_far_from_roof_because_of_launches() -> None:
    s = _gpu_summary(H100)
    (f,) = [f for f in s.findings if f.id == "far-from-roof"]
    assert f.severity == "low" and f.evidence.details["cause"] == "latency"
    assert set(str(f.evidence.details["phases"]).split(",")) == {"qkv_proj", "sdpa", "out_proj"}
    assert "upper bound, not a prediction" in f.explanation and "latency-bound" in f.explanation
    assert "H100 SXM5" in f.explanation and "CUDA graphs" in f.suggestion
    assert not [f for f in _gpu_summary(A100).findings if f.id == "far-from-roof"]  # every share over 20%


def _edit_phases(w: WorkerSummary, change: Callable[[PhaseStats], dict[str, object]]) -> WorkerSummary:
    """The summary with every phase changed so (``change``: the new fields of a phase)."""
    replace = msgspec.structs.replace
    return replace(w, layers=[replace(x, phases=[replace(p, **change(p)) for p in x.phases]) for x in w.layers])


def _scaled(s: WorkerSummary, peaks: Peaks) -> WorkerSummary:
    """The summary's roofs, findings and headline under ``peaks``."""
    return under_peaks(s, peaks)


def test_verdicts_follow_the_roofs(builtin_logdir: Path) -> None:
    """The same naive CPU run under made-up peaks: the binding roof names the verdict."""
    (run,) = [r for r in resolve_runs(str(builtin_logdir)) if r.name == "naive-inference"]
    (w,) = Loader().summarize_run(run).workers

    def phase(s: WorkerSummary, name: str) -> PhaseStats:
        return next(p for p in s.layers[0].phases if p.phase == name)

    slow_memory = _scaled(w, Peaks("x", "test", {"fp32": 1e18}, 1e11, launch_us=0.0))
    fast_memory = _scaled(w, Peaks("x", "test", {"fp32": 1e11}, 1e18, launch_us=0.0))
    slow_launch = _scaled(w, Peaks("x", "test", {"fp32": 1e18}, 1e18, launch_us=1e3))
    for name in ("qkv_proj", "qk_matmul", "av_matmul"):
        p = phase(slow_memory, name)
        assert p.roof is not None and p.roof.verdict == "memory-bound"
        assert p.roof.ceiling == pytest.approx(p.flops / p.bytes * 1e11)  # intensity x bandwidth
        assert p.roof.share == pytest.approx(p.bytes / 1e11 / (p.cpu_self_us * 1e-6))  # CPU self time
        q = phase(fast_memory, name)
        assert q.roof is not None and q.roof.verdict == "compute-bound" and q.roof.ceiling == 1e11
        assert phase(slow_launch, name).roof.verdict == "latency-bound"  # type: ignore[union-attr]
    softmax = phase(slow_memory, "softmax")  # no FLOPs: no ceiling, a bandwidth share
    assert softmax.roof is not None and softmax.roof.intensity == 0 and softmax.roof.ceiling is None
    assert softmax.roof.verdict == "memory-bound" and softmax.roof.share is not None
    # the layer adds its phases' roof times: its share is theirs over its time
    layer = slow_memory.layers[0]
    assert layer.roof is not None and layer.roof.share == pytest.approx(
        sum(p.bytes / 1e11 for p in layer.phases) / (sum(p.cpu_self_us for p in layer.phases) * 1e-6))


def test_far_from_roof_names_the_score_traffic(builtin_logdir: Path) -> None:
    (run,) = [r for r in resolve_runs(str(builtin_logdir)) if r.name == "naive-inference"]
    (w,) = Loader().summarize_run(run).workers
    starved = _scaled(w, Peaks("x", "test", {"fp32": 1e18}, 1e15, launch_us=0.0))  # every phase far below W
    found = {str(f.evidence.details["cause"]): f for f in far_from_roof(starved)}
    scores = found["scores"]
    assert set(str(scores.evidence.details["phases"]).split(",")) <= {"qk_matmul", "scale", "mask", "softmax",
                                                                        "av_matmul"}
    assert "S×S scores" in scores.explanation and "--impl sdpa" in scores.suggestion
    roomy = _scaled(w, Peaks("x", "test", {"fp32": 1.0}, 1.0, launch_us=0.0))  # every share far over 20%
    assert not far_from_roof(roomy) and not [f for f in roomy.findings if f.id == "far-from-roof"]


def test_the_users_peaks_redo_roofs_findings_and_headline(builtin_logdir: Path) -> None:
    (run,) = [r for r in resolve_runs(str(builtin_logdir)) if r.name == "naive-inference"]
    (w,) = Loader().summarize_run(run).workers
    assert w.roofline is not None and "probes" in w.roofline.source  # the runner measured this machine
    before = copy.deepcopy(w)
    s = with_peaks(w, 1e18, 1e15)
    assert s.roofline is not None and s.roofline.source == "given by --peak-flops and --peak-bw"
    assert s.roofline.peak_flops["fp32"] == 1e18 and any(f.id == "far-from-roof" for f in s.findings)
    assert s.headline
    assert w == before and with_peaks(w, None, None) is w  # a copy: the summary itself is left as it was


def test_the_roofline_draws_the_roofs_alone(builtin_logdir: Path) -> None:
    """``with_roofline`` leaves the findings and the headline as they were: the summary's stages
    after the roofs (``analysis.summary``) draw them again."""
    (run,) = [r for r in resolve_runs(str(builtin_logdir)) if r.name == "naive-inference"]
    (w,) = Loader().summarize_run(run).workers
    s = with_roofline(w, Peaks("x", "test", {"fp32": 1e18}, 1e15, launch_us=0.0))
    assert s.findings == w.findings and s.headline == w.headline
    assert s.roofline is not None and s.roofline.peak_flops == {"fp32": 1e18} and s.layers[0].roof != w.layers[0].roof
    again = under_peaks(w, peaks_of(s.roofline))
    assert again.layers == s.layers and any(f.id == "far-from-roof" for f in again.findings)  # the same roofs


def test_runner_metadata_records_the_probes(builtin_logdir: Path) -> None:
    meta = json.loads((builtin_logdir / "naive" / "tb_attn_run.json").read_text())
    peaks = meta["peaks"]
    assert peaks["device"] == "cpu" and peaks["copy_bytes_per_s"] > 1e8 and peaks["op_us"] > 0
    assert peaks["gemm_flops_per_s"]["fp32"] > 1e8 and peaks["gemm_flops_per_s"]["bf16"] > 1e7
    assert "2·N³" in peaks["gemm_probe"] and "one-element" in peaks["op_probe"]


def test_fp32_compute_bound_names_the_faster_bf16_roof(builtin_logdir: Path) -> None:
    (run,) = [r for r in resolve_runs(str(builtin_logdir)) if r.name == "naive-inference"]
    (w,) = Loader().summarize_run(run).workers
    # Each phase's time from its FLOPs (1 TFLOP/s), not from a tiny model's noisy run, where a
    # loaded machine could leave every GEMM phase under the finding's 10% of attention time.
    w = _edit_phases(w, lambda p: {"cpu_self_us": 1.0 + p.flops / 1e6})
    # a CPU whose bf16 matmul probe is 8x its fp32 one, with bandwidth to spare: the GEMMs are
    # compute-bound in fp32, far below even that roof
    s = _scaled(w, Peaks("cpu", "probes", {"fp32": 1e13, "bf16": 8e13}, 1e18, launch_us=0.0))
    (f,) = [f for f in far_from_roof(s) if f.evidence.details["cause"] == "fp32"]
    assert "bf16 matrix units" in f.explanation and "8.0x higher" in f.explanation
    assert "tensor cores" not in f.explanation and "device_type='cpu'" in f.suggestion
    # the same phases on a device's clock
    gpu = _edit_phases(msgspec.structs.replace(s, device="cuda"),
                       lambda p: {"device_us": p.cpu_self_us, "kernels": p.op_count})
    gpu = _scaled(gpu, Peaks("gpu", "table", {"fp32": 1e13, "bf16": 8e13}, 1e18, launch_us=0.0))
    (g,) = [f for f in gpu.findings if f.id == "far-from-roof" and f.evidence.details["cause"] == "fp32"]
    assert "leaves the tensor cores unused" in g.explanation and "allow_tf32" in g.suggestion


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0, 0, True, "30e9", None, [1], 1e300])
def test_hostile_probe_figures_are_not_peaks(bad: object) -> None:
    """Run metadata is anyone's JSON: a probe figure that is not a finite positive rate is no peak."""
    good = {"device": "cpu", "copy_bytes_per_s": 30e9, "gemm_flops_per_s": {"fp32": 200e9}}
    assert peaks_for("cpu", [], {"peaks": good}).known
    assert not peaks_for("cpu", [], {"peaks": {**good, "copy_bytes_per_s": bad}}).known
    assert not peaks_for("cpu", [], {"peaks": {**good, "gemm_flops_per_s": {"fp32": bad}}}).known
    assert peaks_for("cpu", [], {"peaks": {**good, "op_us": bad}}).launch_us == CPU_LAUNCH_US
    assert not peaks_for("cpu", [], {"peaks": bad}).known


def test_a_hostile_device_name_is_clipped_and_unknown() -> None:
    peaks = peaks_for("cuda", [{"name": "H" * 100_000, "numSms": [1], "totalGlobalMem": "80GB"}], None)
    assert not peaks.known and len(peaks.device) <= 200 and len(peaks.note) < 400
    assert peaks_for("cuda", [{"name": 7}], None).device == "7"


def test_a_point_above_its_ceiling_draws_no_verdict(builtin_logdir: Path) -> None:
    """Peaks far below what the run achieved (a busy machine's probes): every point runs above its
    ceiling, says so instead of a verdict, the note says why and how to re-measure, and
    far-from-roof, whose premise is a point below its ceiling, does not fire."""
    (run,) = [r for r in resolve_runs(str(builtin_logdir)) if r.name == "naive-inference"]
    (w,) = Loader().summarize_run(run).workers
    low = _scaled(w, Peaks("x", "test", {"fp32": 1.0}, 1.0, launch_us=0.0))
    roofs = [r for x in low.layers for r in (x.roof, *(p.roof for p in x.phases)) if r is not None]
    assert roofs and all(r.verdict == "above its ceiling" and r.share is not None and r.share > 1.05 for r in roofs)
    assert low.roofline is not None and "some points run above their ceiling" in low.roofline.note
    assert "a cache rather than from memory" in low.roofline.note  # made-up peaks are no runner probe
    assert "--peak-flops" in low.roofline.note
    assert not [f for f in low.findings if f.id == "far-from-roof"]


def test_any_point_above_its_roof_is_above_its_ceiling() -> None:
    """101% of the roof is as much above it as 125%: both say "above its ceiling", neither
    "compute-bound" (one situation, one word). At 100% the roof holds it."""
    from tb_attn_plugin.analysis.measures.roofline import _roof, _Terms

    peaks = Peaks("x", "test", {"fp32": 1e12}, 1e12, launch_us=0.0)
    for share, verdict in ((1.0, "compute-bound"), (1.01, "above its ceiling"), (1.05, "above its ceiling"),
                           (1.25, "above its ceiling")):
        # 1e6 FLOPs at 1e12 FLOP/s take 1 µs at the roof; the point ran in 1/share µs.
        roof = _roof(_Terms(flops=1e6, nbytes=1e3, time_us=1.0 / share, compute_s=1e-6, memory_s=1e-9,
                            dtype_flops={"fp32": 1e6}), peaks)
        assert roof is not None and roof.share == pytest.approx(share) and roof.verdict == verdict
