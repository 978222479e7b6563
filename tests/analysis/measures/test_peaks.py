"""The peaks a roofline is drawn under (analysis/measures/peaks.py): the datasheet table's dense figures
(sparsity figures halved), the device-name matching, the runner's probes from metadata, the user's
rates and overrides; each figure is checked against the datasheet number worked by hand, and hostile
metadata or names give no peak with a reason, never an error. ``tests/analysis/measures/test_roofline.py``
covers the public traces' devices; this module covers the rest of the module's functions."""

from __future__ import annotations

import math
from typing import Any

import pytest

from tb_attn_plugin.analysis.measures.peaks import (
    CPU_LAUNCH_US,
    DEVICE_LAUNCH_US,
    PEAK_TABLE,
    Peaks,
    cpu_op_floor,
    device_name,
    device_peaks,
    find_row,
    parse_rate,
    peaks_for,
    with_overrides,
)

T = 1e12
CLASSES = {"fp32", "tf32", "bf16", "fp16", "fp8", "int8"}


# -- the table ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("row", "fp32", "tf32", "bf16", "fp8", "int8", "bw"), [
    # NVIDIA quotes tensor-core figures with sparsity: the dense peak is half of each.
    ("H200 SXM", 67, 989 / 2, 1979 / 2, 3958 / 2, 3958 / 2, 4.8e12),
    ("H100 PCIe", 51, 756 / 2, 1513 / 2, 3026 / 2, 3026 / 2, 2.0e12),
    ("B200", 75, 2250 / 2, 4500 / 2, 9000 / 2, 9000 / 2, 8.0e12),
    ("L4", 30.3, 120 / 2, 242 / 2, 485 / 2, 485 / 2, 300e9),
    # AMD quotes dense figures: taken as they are.
    ("MI325X", 163.4, 653.7, 1307.4, 2614.9, 2614.9, 6.0e12),
])
def test_table_rows_hold_dense_peaks_worked_from_the_datasheets(row: str, fp32: float, tf32: float, bf16: float,
                                                                 fp8: float, int8: float, bw: float) -> None:
    r = PEAK_TABLE[row]
    assert r.name == row and r.source
    assert r.flops["fp32"] == pytest.approx(fp32 * T) and r.flops["tf32"] == pytest.approx(tf32 * T)
    assert r.flops["bf16"] == pytest.approx(bf16 * T) and r.flops["fp16"] == r.flops["bf16"]  # fp16 = bf16
    assert r.flops["fp8"] == pytest.approx(fp8 * T) and r.flops["int8"] == pytest.approx(int8 * T)
    assert r.bytes_per_s == pytest.approx(bw)


def test_classes_a_device_lacks_are_left_out_not_guessed() -> None:
    # MI250X: no TF32 and no FP8 in its datasheet.
    mi250x = PEAK_TABLE["MI250X"]
    assert set(mi250x.flops) == {"fp32", "bf16", "fp16", "int8"}
    assert mi250x.flops["bf16"] == pytest.approx(383 * T)
    # Every row's classes are among the six a roofline knows.
    assert all(set(r.flops) <= CLASSES for r in PEAK_TABLE.values())


# -- device names ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("props", "row"), [
    ({"name": "NVIDIA H200 NVL"}, "H200 NVL"),
    ({"name": "NVIDIA B200"}, "B200"),
    ({"name": "AMD Instinct MI325X"}, "MI325X"),
    ({"name": "NVIDIA H100 SXM5 80GB"}, "H100 SXM5"),
    ({"name": "NVIDIA A100-SXM4-80GB"}, "A100 SXM4 80GB"),  # the name says 80 GB
    ({"name": "NVIDIA A100-PCIE-40GB"}, "A100 PCIe 40GB"),
    # No size in the name: 80 GiB of memory (over 60 GiB) tells the 80 GB part.
    ({"name": "NVIDIA A100-SXM4", "totalGlobalMem": 80 * 2**30}, "A100 SXM4 80GB"),
    ({"name": "NVIDIA A100-SXM4", "totalGlobalMem": 40 * 2**30}, "A100 SXM4 40GB"),
    ({"name": "nvidia h100 pcie"}, "H100 PCIe"),  # case does not matter
])
def test_more_device_names_find_their_row(props: dict[str, Any], row: str) -> None:
    found, why = find_row(props)
    assert found is PEAK_TABLE[row] and why == ""


@pytest.mark.parametrize("props", [
    {"name": "NVIDIA L40"},  # not an L40S, and "l40" is not the word "l4"
    {"name": "NVIDIA GeForce RTX 3090"},
    {},  # no name at all
    {"name": None, "numSms": "132", "totalGlobalMem": [1]},
])
def test_devices_the_table_does_not_know_get_no_row_and_a_reason(props: dict[str, Any]) -> None:
    found, why = find_row(props)
    assert found is None and "no peak known" in why and "--peak-bw" in why


def test_an_h100_named_without_its_form_and_with_a_string_sm_count_is_ambiguous() -> None:
    # "132" as a string is not the SM count 132: nothing tells the form.
    found, why = find_row({"name": "NVIDIA H100", "numSms": "132"})
    assert found is None and "do not tell" in why and "'NVIDIA H100'" in why


def test_device_name_is_the_first_devices_clipped_or_empty() -> None:
    assert device_name([]) == ""
    assert device_name([{}]) == ""
    assert device_name([{"name": "NVIDIA L4"}, {"name": "NVIDIA H100"}]) == "NVIDIA L4"
    long = device_name([{"name": "x" * 10_000}])
    assert 0 < len(long) < 10_000  # clipped to the label bound


def test_device_peaks_copy_the_row_and_cite_it() -> None:
    assert device_peaks([]) is None  # a trace that lists no device
    peaks = device_peaks([{"name": "NVIDIA L40S"}])
    assert peaks is not None and peaks.known and peaks.device == "NVIDIA L40S"
    assert peaks.source.startswith("table: L40S, ") and PEAK_TABLE["L40S"].source in peaks.source
    assert peaks.flops["bf16"] == pytest.approx(733 / 2 * T) and peaks.bytes_per_s == 864e9
    assert peaks.launch_us == DEVICE_LAUNCH_US
    assert peaks.flops is not PEAK_TABLE["L40S"].flops  # a copy: the table cannot be changed through it
    unnamed = device_peaks([{"numSms": 10}])
    assert unnamed is not None and unnamed.device == "an unnamed device" and not unnamed.known
    assert unnamed.note.startswith("no peak known")


# -- the runner's probes --------------------------------------------------------------------------

@pytest.mark.parametrize(("metadata", "expected"), [
    (None, CPU_LAUNCH_US),
    ({}, CPU_LAUNCH_US),
    ({"peaks": {"op_us": 1.5}}, 1.5),
    ({"peaks": {"op_us": 7}}, 7.0),  # an int is a rate too
    ({"peaks": {"op_us": 999_999.0}}, 999_999.0),  # just under a second: still believed
    ({"peaks": {"op_us": 1e6}}, CPU_LAUNCH_US),  # a second per op is no machine's dispatch
    ({"peaks": {"op_us": 0}}, CPU_LAUNCH_US),
    ({"peaks": {"op_us": -2.0}}, CPU_LAUNCH_US),
    ({"peaks": {"op_us": math.nan}}, CPU_LAUNCH_US),
    ({"peaks": {"op_us": True}}, CPU_LAUNCH_US),  # a bool is not a number here
    ({"peaks": {"op_us": "1.5"}}, CPU_LAUNCH_US),
    ({"peaks": [1.5]}, CPU_LAUNCH_US),
])
def test_cpu_op_floor_is_the_probe_when_plausible(metadata: dict[str, Any] | None, expected: float) -> None:
    assert cpu_op_floor(metadata) == expected


def test_probes_keep_known_classes_and_give_fp16_the_bf16_figure() -> None:
    meta = {"peaks": {"copy_bytes_per_s": 20e9, "gemm_flops_per_s": {"fp32": 1e11, "bf16": 3e11, "fp64": 5e10,
                                                                    "int8": -1}}}
    probed = peaks_for("cpu", [], meta)
    # "device" absent reads as a CPU's probes; fp64 is no peak class, a negative int8 no rate.
    assert dict(probed.flops) == {"fp32": 1e11, "bf16": 3e11, "fp16": 3e11}
    assert probed.bytes_per_s == 20e9 and probed.device == "cpu" and probed.launch_us == CPU_LAUNCH_US
    assert "below the machine's theoretical peaks" in probed.note
    # A measured fp16 stays its own figure.
    meta["peaks"]["gemm_flops_per_s"] = {"bf16": 3e11, "fp16": 2e11}
    assert dict(peaks_for("cpu", [], meta).flops) == {"bf16": 3e11, "fp16": 2e11}


def test_a_gpu_the_table_does_not_know_uses_the_runners_probes_of_it() -> None:
    meta = {"device_name": "NVIDIA RTX 3090", "peaks": {"device": "cuda", "copy_bytes_per_s": 900e9, "op_us": 5.0,
                                                        "gemm_flops_per_s": {"fp32": 30e12}}}
    peaks = peaks_for("cuda", [{"name": "NVIDIA GeForce RTX 3090"}], meta)
    assert peaks.known and peaks.device == "NVIDIA RTX 3090" and "probes" in peaks.source
    assert (dict(peaks.flops), peaks.bytes_per_s, peaks.launch_us) == ({"fp32": 30e12}, 900e9, 5.0)
    # Without probes the unknown device keeps its own reason.
    alone = peaks_for("cuda", [{"name": "NVIDIA GeForce RTX 3090"}], None)
    assert not alone.known and alone.device == "NVIDIA GeForce RTX 3090" and "no peak known" in alone.note
    # No device listed and no probes: the reason says so.
    nothing = peaks_for("cuda", [], {"peaks": {"device": "cpu", "copy_bytes_per_s": 1e9,
                                               "gemm_flops_per_s": {"fp32": 1e9}}})
    assert not nothing.known and nothing.device == "the trace's device" and "names no device" in nothing.note


@pytest.mark.parametrize("peaks", [
    {"copy_bytes_per_s": 1e9},  # no FLOPs
    {"gemm_flops_per_s": {"fp32": 1e9}},  # no bandwidth
    {"gemm_flops_per_s": [1e9], "copy_bytes_per_s": 1e9},  # FLOPs not a mapping
    {"gemm_flops_per_s": {"fp32": 1e9}, "copy_bytes_per_s": 1e21},  # past any machine (the bound is < 1e21)
])
def test_incomplete_probes_are_no_peaks(peaks: dict[str, Any]) -> None:
    assert not peaks_for("cpu", [], {"peaks": peaks}).known


# -- the user's figures ---------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "value"), [
    ("312T", 312e12),
    ("2.0 TB/s", 2.0e12),
    ("1.9e12", 1.9e12),
    (" 5 G FLOP/s ", 5e9),
    ("1.5k", 1.5e3),
    ("1.5K", 1.5e3),
    (".5T", 0.5e12),
    ("100 MFLOPS", 100e6),
    ("3 P", 3e15),
    ("64 bytes/s", 64.0),
    ("7", 7.0),
])
def test_parse_rate_reads_si_prefixes_and_units(text: str, value: float) -> None:
    assert parse_rate(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["", "T", "0", "0.0T", "-1T", "abc", "2 TiB/s", "1e400", "nan", "inf",
                                  "1e6P", "12 W", "3TT"])
def test_parse_rate_refuses_what_is_no_positive_rate(text: str) -> None:
    # 1e6P is 1e21: at the bound, no machine's rate.
    with pytest.raises(ValueError, match="must be a positive rate such as 312T") as err:
        parse_rate(text)
    assert repr(text) in str(err.value)


def test_no_override_returns_the_peaks_themselves() -> None:
    peaks = Peaks(device="d", source="s", flops={"fp32": 1.0}, bytes_per_s=2.0)
    assert with_overrides(peaks, None, None) is peaks


def test_a_flops_override_sets_every_class_and_keeps_the_rest() -> None:
    table = device_peaks([{"name": "NVIDIA L4"}])
    assert table is not None
    over = with_overrides(table, 100e12, None)
    assert dict(over.flops) == dict.fromkeys(CLASSES, 100e12)
    assert over.bytes_per_s == 300e9  # the L4's bandwidth, from the table
    assert over.source == f"given by --peak-flops; the rest from {table.source}"
    assert over.device == "NVIDIA L4" and over.launch_us == table.launch_us and over.note == ""
    assert table.flops["fp32"] == pytest.approx(30.3 * T)  # the given peaks are left as they were


def test_half_an_override_on_no_peaks_says_what_is_missing() -> None:
    bare = Peaks(device="cpu", source="", launch_us=CPU_LAUNCH_US)
    bw_only = with_overrides(bare, None, 5e10)
    assert not bw_only.known and bw_only.note == "give --peak-flops too"
    assert bw_only.source == "given by --peak-bw" and bw_only.launch_us == CPU_LAUNCH_US
    both = with_overrides(bare, 1e12, 5e10)
    assert both.known and both.source == "given by --peak-flops and --peak-bw"  # nothing left from elsewhere


def test_known_needs_both_flops_and_bandwidth() -> None:
    assert not Peaks(device="d", source="").known
    assert not Peaks(device="d", source="", flops={"fp32": 1.0}).known
    assert not Peaks(device="d", source="", bytes_per_s=1.0).known
    assert Peaks(device="d", source="", flops={"fp32": 1.0}, bytes_per_s=1.0).known
