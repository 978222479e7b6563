"""The roofline in the CLI (``cli/report_roofline.py``): the peaks line, the summary's roofline table, its CSV
cells and compare's three columns, from hand-built ``Roofline``/``Roof`` structs whose figures are worked out
by hand (binary units for bytes, SI prefixes for FLOP/s, three significant digits for intensities)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from tb_attn_plugin.cli.report_roofline import (
    ROOF_CSV_FIELDS,
    compare_roof_cells,
    peaks_line,
    roof_csv_cells,
    roofline_lines,
)
from tb_attn_plugin.types.results import CompareRatio, CompareRun
from tb_attn_plugin.types.schema import Backward, LayerStats, PhaseStats, Roof, Roofline, WorkerSummary

MIB = 1 << 20
TIB = 1 << 40

# 200e9 B/s is 186.26 GiB/s; 2.5e12 FLOP/s is 2.50T; a share of 0.042 is under 10%: one decimal.
ROOF = Roof(dtype="fp32", time_us=100.0, launches=2.0, intensity=12.5, flops_per_s=2.5e12, bytes_per_s=200e9,
            ceiling=25e12, share=0.042, verdict="memory-bound")
PEAKS = Roofline(device="H100", source="table: H100 SXM", clock="device",
                 peak_flops={"fp32": 50e12, "fp16": 400e12, "bf16": 400e12, "int8": 800e12},
                 peak_bytes_per_s=2.0 * TIB, launch_us=4.5, attention=msgspec.structs.replace(ROOF, dtype="bf16"))


def _phase(name: str, nbytes: float, roof: Roof | None, unmodeled: float = 0.0) -> PhaseStats:
    return PhaseStats(phase=name, calls=1.0, cpu_us=0.0, cpu_self_us=0.0, device_us=0.0, kernels=0.0,
                      kernel_names=[], ops=[], flops=0.0, flops_per_s=0.0, alloc_bytes=0.0, freed_bytes=0.0,
                      peak_bytes=0, sxs_bytes=0.0, sxs_allocs=0.0, backward=Backward(), bytes=nbytes,
                      unmodeled_ops=unmodeled, roof=roof)


def _layer(n: int, phases: list[PhaseStats], nbytes: float, roof: Roof | None) -> LayerStats:
    return LayerStats(layer=n, module=None, backend="sdpa", backend_evidence=[], inferred=False, calls=1.0,
                      cpu_us=0.0, device_us=0.0, flops=0.0, flops_per_s=0.0, alloc_bytes=0.0, peak_bytes=0,
                      sxs_bytes=0.0, heads_count=None, phases=phases, heads=[], backward=Backward(), bytes=nbytes,
                      roof=roof)


def _worker(layers: list[LayerStats], roofline: Roofline | None) -> WorkerSummary:
    return WorkerSummary(file="w.json", worker="w", span=None, device="cuda", inferred=False, backend="sdpa",
                         steps=[1], step_count=1, step_cpu_us=0.0, step_device_us=0.0, attention_cpu_us=0.0,
                         attention_device_us=0.0, attention_share_cpu=None, attention_share_device=None,
                         layers=layers, per_step=[], diagnostics={}, notes=[], roofline=roofline)


def _compare_run(roofline: Roofline | None) -> CompareRun:
    fields: dict[str, Any] = dict(
        run="r", impl=None, seq=None, dtype=None, model=None, backend="sdpa", steps=1, attention_cpu_us=0.0,
        attention_device_us=0.0, step_cpu_us=0.0, attention_share_cpu=None, alloc_bytes=0.0, peak_bytes=0,
        sxs_bytes=0.0, flops=0.0, flops_per_s=0.0, ops_per_forward=0.0, kernels_per_forward=0.0, phases={},
        layers=[], findings=[], ratio=CompareRatio(attention_cpu_us=None, attention_device_us=None, alloc_bytes=None,
                                                   peak_bytes=None, flops_per_s=None), roofline=roofline)
    return CompareRun(**fields)


# -- the peaks line --------------------------------------------------------------------------------


def test_peaks_line_lists_the_shown_classes_and_the_ridge_of_attentions_dtype() -> None:
    # fp16 is left out of the list (bf16's twin); 2 TiB/s is 2048 GiB/s; the bf16 ridge is
    # 400e12 / 2**41 = 181.9 FLOP/B, three significant digits: 182
    assert peaks_line(PEAKS) == ("H100 (table: H100 SXM): fp32 50.00T, bf16 400.00T, int8 800.00T FLOP/s, "
                                 "2048.0 GiB/s; ridge (bf16) 182 FLOP/B; launch floor 4.5 µs")


@pytest.mark.parametrize(("dtype", "ridge"), [
    (None, "ridge (fp32) 22.7 FLOP/B"),  # no FLOPs: fp32's, 50e12 / 2**41 = 22.74
    ("fp8", "ridge (fp32) 22.7 FLOP/B"),  # a class without a peak: fp32's
    ("fp16", "ridge (fp16) 182 FLOP/B"),  # a class with a peak, though not listed
])
def test_the_ridge_falls_back_to_fp32(dtype: str | None, ridge: str) -> None:
    rl = msgspec.structs.replace(PEAKS, attention=msgspec.structs.replace(ROOF, dtype=dtype))
    assert ridge in peaks_line(rl)


def test_without_attention_the_ridge_is_fp32s() -> None:
    assert "ridge (fp32) 22.7 FLOP/B" in peaks_line(msgspec.structs.replace(PEAKS, attention=None))


@pytest.mark.parametrize("change", [{"peak_flops": {}}, {"peak_bytes_per_s": None}])
def test_no_peak_known_says_why_escaped(change: dict[str, Any]) -> None:
    rl = msgspec.structs.replace(PEAKS, **change)
    assert peaks_line(rl) == "no peak known"
    assert peaks_line(msgspec.structs.replace(rl, note="device \x1b[2J not in the table")) == \
        r"no peak known (device \x1b[2J not in the table)"


def test_the_device_name_from_the_trace_is_escaped() -> None:
    assert peaks_line(msgspec.structs.replace(PEAKS, device="GPU\u202e", source="s\x07")).startswith(
        r"GPU\u202e (s\x07): ")


# -- the summary's roofline --------------------------------------------------------------------------


def _table_worker() -> WorkerSummary:
    lower = msgspec.structs.replace(ROOF, lower_bound=True, intensity=None, share=None, ceiling=None,
                                    verdict="no bytes modeled")
    return _worker([
        _layer(0, [_phase("qkv_proj", 3 * MIB, ROOF), _phase("softmax", 512.0, lower),
                   _phase("mask", 2048.0, None, unmodeled=1.0)], 3 * MIB + 2560.0, None),
    ], PEAKS)


def test_no_roofline_or_no_layers_give_no_lines() -> None:
    assert roofline_lines(_worker([], PEAKS)) == []
    assert roofline_lines(msgspec.structs.replace(_table_worker(), roofline=None)) == []


def test_the_roofline_heading_and_attention_point() -> None:
    lines = roofline_lines(_table_worker())
    assert lines[0] == ""
    assert lines[1] == "  roofline (device time, forward; an upper bound, not a prediction): peaks " + peaks_line(PEAKS)
    assert lines[2] == ("  attention: 12.5 FLOP/B, 2.50TFLOP/s, 186.3 GiB/s, 4.2% of its ceiling (25.00TFLOP/s): "
                        "memory-bound")


def test_the_table_has_one_row_per_phase_and_one_per_layer_in_column_order() -> None:
    lines = roofline_lines(_table_worker())
    header, *rows, legend = lines[3:]
    assert header.split() == ["layer", "phase", "bytes", "FLOP/B", "FLOP/s", "B/s", "ceiling", "%", "roof", "bound"]
    assert [r.split() for r in rows] == [
        # 3 MiB; 12.5 FLOP/B; 2.50T FLOP/s; 200e9 B/s = 186.3 GiB/s; ceiling 25.00T; 4.2%; "memory"
        ["L0", "qkv_proj", "3.0", "MiB", "12.5", "2.50T", "186.3", "GiB/s", "25.00T", "4.2%", "memory"],
        # bytes a lower bound (roof's flag); no intensity, ceiling or share
        ["softmax", ">=512", "B", "-", "2.50T", "186.3", "GiB/s", "-", "-", "no", "bytes"],
        # no roof, an op without a bytes formula: the bytes alone, not marked (no roof to mark)
        ["mask", "2.0", "KiB", "-", "-", "-", "-", "-", "-"],
        ["=", "layer", "3.0", "MiB", "-", "-", "-", "-", "-", "-"],
    ]
    assert legend.startswith("  (bytes: the least its ops move")
    # Every line of the table is as wide as the header: the columns line up.
    assert {len(r) for r in rows} == {len(header)}
    # bytes is right-aligned: each row's bytes cell ends where the header's "bytes" does
    end = header.index("bytes") + len("bytes")
    assert all(r[:end].endswith(("MiB", " B", "KiB")) for r in rows)


def test_a_phase_with_unmodeled_ops_and_a_roof_marks_its_bytes() -> None:
    w = _worker([_layer(1, [_phase("av_matmul", 4096.0, ROOF, unmodeled=2.0)], 4096.0, ROOF)], PEAKS)
    rows = roofline_lines(w)[4:-1]
    assert rows[0].split()[:4] == ["L1", "av_matmul", ">=4.0", "KiB"]
    assert rows[1].split()[:4] == ["=", "layer", "4.0", "KiB"]  # the layer's own roof is not a lower bound


def test_cpu_clock_and_a_note_under_known_peaks() -> None:
    rl = msgspec.structs.replace(PEAKS, clock="cpu", note="probes \x1b of this machine", attention=None)
    lines = roofline_lines(msgspec.structs.replace(_table_worker(), roofline=rl))
    assert lines[1].startswith("  roofline (CPU self time, forward;")
    assert lines[2] == r"  note: probes \x1b of this machine"
    assert lines[3].split()[0] == "layer"  # no attention point


def test_a_note_without_peaks_is_in_the_peaks_line_only() -> None:
    rl = Roofline(device="cpu", source="", clock="cpu", peak_flops={}, peak_bytes_per_s=None, launch_us=1.0,
                  note="no probes")
    lines = roofline_lines(msgspec.structs.replace(_table_worker(), roofline=rl))
    assert lines[1].endswith("peaks no peak known (no probes)")
    assert not any(line.startswith("  note:") for line in lines)


@pytest.mark.parametrize(("verdict", "short"), [
    ("compute-bound", "compute"), ("memory-bound", "memory"), ("latency-bound", "latency"),
    ("no peak known", "no peak"), ("no bytes modeled", "no bytes"), ("above its ceiling", "above ceiling"),
    ("a new verdict", "a new verdict"),  # one this table does not know: as it is
])
def test_verdicts_are_shortened_in_the_table_and_compare(verdict: str, short: str) -> None:
    roof = msgspec.structs.replace(ROOF, verdict=verdict)
    w = _worker([_layer(0, [_phase("softmax", 1.0, roof)], 1.0, None)], PEAKS)
    assert roofline_lines(w)[4].endswith(short)
    att = msgspec.structs.replace(PEAKS, attention=roof)
    assert compare_roof_cells(_compare_run(att)) == ("12.5", "4.2%", short)


def test_the_attention_point_without_bytes_or_share() -> None:
    roof = msgspec.structs.replace(ROOF, intensity=None, share=None, flops_per_s=0.0, lower_bound=True,
                                   verdict="no bytes modeled")
    w = _worker(_table_worker().layers, msgspec.structs.replace(PEAKS, attention=roof))
    # si_text(0) is "-": no FLOP/s achieved
    assert roofline_lines(w)[2] == "  attention: no bytes, -FLOP/s, 186.3 GiB/s: no bytes modeled (bytes a lower bound)"


def test_a_share_without_a_ceiling_has_no_ceiling_in_brackets() -> None:
    roof = msgspec.structs.replace(ROOF, ceiling=None, share=0.5)
    w = _worker(_table_worker().layers, msgspec.structs.replace(PEAKS, attention=roof))
    assert roofline_lines(w)[2].endswith("186.3 GiB/s, 50% of its ceiling: memory-bound")


# -- CSV cells and compare's columns ------------------------------------------------------------------


def test_csv_cells_follow_the_fields_with_six_significant_digits() -> None:
    cells = roof_csv_cells(_phase("qkv_proj", 3 * MIB, ROOF))
    assert len(cells) == len(ROOF_CSV_FIELDS) == 6
    # 3 MiB = 3145728 B; the verdict in full, as the JSON has it
    assert dict(zip(ROOF_CSV_FIELDS, cells, strict=True)) == {
        "bytes": "3.14573e+06", "intensity": "12.5", "bytes_per_s": "2e+11", "ceiling_flops_per_s": "2.5e+13",
        "roof_share": "0.042", "verdict": "memory-bound"}


def test_csv_cells_are_empty_where_there_is_no_figure() -> None:
    assert roof_csv_cells(_phase("mask", 2048.0, None)) == ("2048", "", "", "", "", "")
    bare = msgspec.structs.replace(ROOF, intensity=None, ceiling=None, share=None, verdict="no peak known")
    assert roof_csv_cells(_phase("mask", 0.0, bare)) == ("0", "", "2e+11", "", "", "no peak known")


def test_compare_cells_are_dashes_without_a_point() -> None:
    assert compare_roof_cells(_compare_run(None)) == ("-", "-", "-")
    assert compare_roof_cells(_compare_run(msgspec.structs.replace(PEAKS, attention=None))) == ("-", "-", "-")
    bare = msgspec.structs.replace(ROOF, intensity=None, share=None, verdict="no bytes modeled")
    assert compare_roof_cells(_compare_run(msgspec.structs.replace(PEAKS, attention=bare))) == ("-", "-", "no bytes")


def test_compare_cells_round_the_intensity_and_share() -> None:
    # 1234.5 FLOP/B to three digits is 1.23e+03; a share of 0.456 is whole: 46%
    roof = msgspec.structs.replace(ROOF, intensity=1234.5, share=0.456, verdict="compute-bound")
    assert compare_roof_cells(_compare_run(msgspec.structs.replace(PEAKS, attention=roof))) == (
        "1.23e+03", "46%", "compute")
