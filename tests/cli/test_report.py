"""The terminal renderings of summarize, compare and ranks (``cli/report.py``): tables, JSON and CSV from
hand-built summaries, comparisons and rank views, each cell checked against its figure worked out by hand, in
its column, and names escaped; the end-to-end runs in test_main.py check the same functions on real traces."""

from __future__ import annotations

import csv
import io
import json
import re
from typing import Any

import msgspec
import pytest

from tb_attn_plugin.cli.report import (
    CSV_FIELDS,
    compare_table,
    ranks_table,
    spread_text,
    summary_csv,
    summary_json,
    summary_table,
)
from tb_attn_plugin.cli.report_roofline import ROOF_CSV_FIELDS
from tb_attn_plugin.types.results import (
    CompareError,
    CompareRatio,
    CompareRun,
    Comparison,
    GlobalHead,
    Headline,
    RankLayer,
    RankRow,
    RanksColumn,
    RanksLayer,
    RankView,
    ScalingFits,
    ScalingPoint,
    ScalingSeries,
    Straggler,
)
from tb_attn_plugin.types.schema import (
    Backward,
    CollectiveStats,
    Evidence,
    FileError,
    Finding,
    Fit,
    LayerStats,
    PhaseStats,
    RunSummary,
    Spread,
    WorkerSummary,
)

MIB = 1 << 20


def _columns(line: str) -> list[str]:
    # Columns are two spaces apart at least; no cell here holds two spaces running.
    return re.split(r" {2,}", line.strip())


def _ends_under(header: str, name: str, row: str, value: str) -> bool:
    """A right-aligned ``value`` ends where its column's header ``name`` ends."""
    end = header.index(name) + len(name)
    return row[:end].endswith(value) and (len(row) == end or row[end] == " ")


# -- spread_text ------------------------------------------------------------------------------------


def test_spread_text() -> None:
    noisy = Spread(median=120.0, lo=100.0, hi=200.0, kind="range", steps=3, noisy=True)
    assert spread_text(None) == "-"
    assert spread_text(noisy) == "~0.100-0.200 ms over 3"  # 100 and 200 µs
    assert spread_text(noisy, mark=False) == "0.100-0.200 ms over 3"
    quiet = Spread(median=1500.0, lo=1400.0, hi=1600.0, kind="iqr", steps=8, noisy=False)
    assert spread_text(quiet) == "IQR 1.400-1.600 ms over 8"


# -- summaries --------------------------------------------------------------------------------------


def _phase(name: str, **changes: Any) -> PhaseStats:
    fields: dict[str, Any] = dict(
        phase=name, calls=2.0, cpu_us=500.0, cpu_self_us=400.0, device_us=250.0, kernels=3.0, kernel_names=[],
        ops=[], flops=4e9, flops_per_s=1.6e13, alloc_bytes=2.0 * MIB, freed_bytes=2e6, peak_bytes=3 * MIB,
        sxs_bytes=float(MIB), sxs_allocs=1.0, backward=Backward(calls=1.0, cpu_us=1000.0, device_us=0.0, flops=8e9))
    return PhaseStats(**(fields | changes))


def _layer(n: int, phases: list[PhaseStats], **changes: Any) -> LayerStats:
    # The layer's own figures are given, not summed: the table prints what the summary says.
    fields: dict[str, Any] = dict(
        layer=n, module="model.layers.0.attn", backend="flash", backend_evidence=[], inferred=False, calls=2.0,
        cpu_us=1000.0, device_us=400.0, flops=8e9, flops_per_s=2e13, alloc_bytes=4.0 * MIB, peak_bytes=3 * MIB,
        sxs_bytes=2.0 * MIB, heads_count=None, phases=phases, heads=[],
        backward=Backward(calls=1.0, cpu_us=2000.0, device_us=0.0, flops=1.6e10))
    return LayerStats(**(fields | changes))


def _finding() -> Finding:
    return Finding(id="hidden-copy", severity="high", title="t", explanation="e", suggestion="s",
                   evidence=Evidence(layers=[0], ops=[], kernels=[], time_us=0.0, bytes=0.0, details={}))


def _worker(**changes: Any) -> WorkerSummary:
    fields: dict[str, Any] = dict(
        file="w.1.pt.trace.json", worker="w", span="s1", device="cuda", inferred=False, backend="flash",
        steps=[1, 2], step_count=2, step_cpu_us=5000.0, step_device_us=1000.0, attention_cpu_us=1000.0,
        attention_device_us=400.0, attention_share_cpu=0.2, attention_share_device=0.4567,
        layers=[_layer(0, [_phase("qk_matmul"), _phase("softmax", device_us=0.0, flops=0.0, flops_per_s=0.0,
                                                            alloc_bytes=0.0, peak_bytes=0, sxs_bytes=0.0)])],
        per_step=[], diagnostics={}, notes=[], gpu="CUDA · NVIDIA H100")
    return WorkerSummary(**(fields | changes))


def _run(*workers: WorkerSummary, run: str = "r", errors: list[FileError] | None = None) -> RunSummary:
    return RunSummary(run=run, metadata={"config": {"seq": 128}}, workers=list(workers), errors=errors or [])


def test_summary_header_lines() -> None:
    lines = summary_table([_run(_worker())]).splitlines()
    assert lines[0] == "run r  worker w  span s1  [w.1.pt.trace.json]"
    # the device share, 0.4567, to one decimal of a percent
    assert lines[1] == "  device CUDA · NVIDIA H100, backend flash, 2 step(s), attention 45.7% of device step time"


@pytest.mark.parametrize(("changes", "line"), [
    # no device share: the CPU's
    ({"attention_share_device": None, "device": "cpu", "gpu": None},
     "  device cpu, backend flash, 2 step(s), attention 20.0% of CPU step time"),
    # no share at all, inferred, no memory events
    ({"attention_share_device": None, "attention_share_cpu": None, "inferred": True, "memory_recorded": False},
     "  device CUDA · NVIDIA H100, backend flash, 2 step(s), inferred (no tb-attn scopes), memory not recorded "
     "(profile_memory=False)"),
])
def test_summary_header_variants(changes: dict[str, Any], line: str) -> None:
    assert summary_table([_run(_worker(**changes))]).splitlines()[1] == line


def test_every_layer_its_core_alone_is_the_attention_core() -> None:
    w = _worker(layers=[_layer(0, [_phase("qk_matmul")], core_only=True)], attention_share_device=0.5)
    assert summary_table([_run(w)]).splitlines()[1].endswith(", attention core 50.0% of device step time")


def test_the_table_rows_in_column_order() -> None:
    lines = summary_table([_run(_worker())]).splitlines()
    i = next(n for n, x in enumerate(lines) if x.startswith("  layer"))
    header = lines[i]
    assert _columns(header) == ["layer", "phase", "calls", "cpu ms", "dev ms", "FLOPs", "FLOP/s", "alloc MiB",
                                "peak MiB", "SxS MiB", "bwd cpu ms", "bwd dev ms"]
    qk, softmax, layer, total = lines[i + 1:i + 5]
    # 500 µs = 0.500 ms, 250 µs = 0.250 ms; 4e9 FLOPs = 4.00G at 1.6e13 = 16.00T FLOP/s; 2, 3 and 1 MiB;
    # backward 1000 µs on the CPU, none on the device: "-"
    assert _columns(qk) == ["L0 model.layers.0.attn", "qk_matmul", "2", "0.500", "0.250", "4.00G", "16.00T", "2.00",
                            "3.00", "1.00", "1.000", "-"]
    # the layer's label only on its first phase; no device time, FLOPs or memory: dashes
    assert _columns(softmax) == ["softmax", "2", "0.500", "-", "-", "-", "-", "-", "-", "1.000", "-"]
    assert softmax.startswith(" " * 10)
    assert _columns(layer) == ["= flash", "2", "1.000", "0.400", "8.00G", "20.00T", "4.00", "3.00", "2.00", "2.000",
                               "-"]
    # total over layers: no calls, FLOP/s or peak (they do not add up)
    assert total.split() == ["total", "1.000", "0.400", "8.00G", "4.00", "2.00", "2.000", "-"]
    for name, value in (("cpu ms", "1.000"), ("FLOPs", "8.00G"), ("alloc MiB", "4.00"), ("SxS MiB", "2.00"),
                        ("bwd dev ms", "-")):
        assert _ends_under(header, name, total, value), name
    assert lines[i + 5].startswith("  (means per step over 2 step(s); ~ = the steps spread over 20% of their median;")


def test_totals_add_up_over_layers() -> None:
    w = _worker(layers=[_layer(0, [_phase("qk_matmul")]), _layer(1, [_phase("qk_matmul")], cpu_us=3000.0,
                                                                 alloc_bytes=MIB / 2, flops=2e9)])
    total = next(x for x in summary_table([_run(w)]).splitlines() if x.startswith("  total"))
    # cpu 1000 + 3000 µs; device 400 + 400; FLOPs 8e9 + 2e9; alloc 4 + 0.5 MiB; S×S 2 + 2 MiB; bwd 2 + 2 ms
    assert total.split() == ["total", "4.000", "0.800", "10.00G", "4.50", "4.00", "4.000", "-"]


def test_headline_spread_notes_and_findings() -> None:
    spread = {"attention_device_us": Spread(median=400.0, lo=300.0, hi=500.0, kind="range", steps=2, noisy=True),
              "attention_cpu_us": Spread(median=1.0, lo=1.0, hi=1.0, kind="range", steps=2, noisy=False)}
    headline = "Attention takes 46% of the step \x1b[2J; " + "the softmax is the largest phase " * 3
    w = _worker(spread=spread, headline=headline, notes=["graph replay \x07"], findings=[_finding()])
    lines = summary_table([_run(w)]).splitlines()
    head = lines[2:4]  # about 140 characters of headline: two lines
    assert all(x.startswith("  ") and len(x) <= 100 for x in head)
    assert " ".join(x.strip() for x in head) == headline.replace("\x1b", "\\x1b").strip()
    # the device clock's spread where there is one; 400 µs mean, 300-500 µs steps
    assert lines[4] == ("  attention device time per step: mean 0.400 ms, steps 0.300-0.500 ms over 2 "
                        "(noisy: over 20% of the median)")
    assert lines[5] == r"  note: graph replay \x07"
    assert lines[-6:] == ["", "  findings (1):", "  [high] hidden-copy: t", "      e", "      -> s", ""]


def test_noisy_phase_times_are_marked() -> None:
    noisy = {"cpu_us": Spread(median=1.0, lo=0.0, hi=9.0, kind="range", steps=2, noisy=True),
             "device_us": Spread(median=1.0, lo=1.0, hi=1.0, kind="range", steps=2, noisy=False),
             "bwd_device_us": Spread(median=0.0, lo=0.0, hi=1.0, kind="range", steps=2, noisy=True)}
    w = _worker(layers=[_layer(0, [_phase("qk_matmul", spread=noisy)])])
    row = next(x for x in summary_table([_run(w)]).splitlines() if "qk_matmul" in x)
    # cpu noisy: "~"; device quiet: none; backward device noisy but 0: "-" with no "~"
    assert _columns(row)[3:5] == ["~0.500", "0.250"] and _columns(row)[-1] == "-"


def test_a_worker_without_layers_has_no_table_and_errors_follow_the_run() -> None:
    run = _run(_worker(layers=[]), errors=[FileError(file="bad\x1b.json", error="not JSON")])
    assert summary_table([run]).splitlines() == [
        "run r  worker w  span s1  [w.1.pt.trace.json]",
        "  device CUDA · NVIDIA H100, backend flash, 2 step(s), attention 45.7% of device step time",
        "",
        r"run r  file bad\x1b.json: error: not JSON",
        "",
    ]


def test_summary_table_of_nothing_is_empty() -> None:
    assert summary_table([]) == ""


def test_summary_json_round_trips_to_the_same_summaries() -> None:
    runs = [_run(_worker()), _run(_worker(worker="v\udcff"), run="q")]
    out = summary_json(runs)
    assert out.isascii()
    doc = json.loads(out)
    assert doc["schema"] == "tb-attn.summary/1"
    # A lone surrogate that slipped past discovery is written as the tab writes it: its \\xNN text.
    assert msgspec.convert(doc["runs"], list[RunSummary]) == [runs[0], _run(_worker(worker="v\\xff"), run="q")]


def test_summary_json_writes_non_finite_figures_as_null() -> None:
    doc = json.loads(summary_json([_run(_worker(attention_cpu_us=float("nan")))]))
    assert doc["runs"][0]["workers"][0]["attention_cpu_us"] is None


def test_summary_csv_has_a_row_per_phase_with_every_field() -> None:
    rows = list(csv.DictReader(io.StringIO(summary_csv([_run(_worker())]))))
    assert CSV_FIELDS[-len(ROOF_CSV_FIELDS):] == ROOF_CSV_FIELDS
    assert [r["phase"] for r in rows] == ["qk_matmul", "softmax"]
    # six significant digits, except peak_bytes, a whole number of bytes written as it is
    assert rows[0] == {
        "run": "r", "worker": "w", "span": "s1", "step_count": "2", "layer": "0", "module": "model.layers.0.attn",
        "backend": "flash", "inferred": "False", "core_only": "False", "phase": "qk_matmul", "calls": "2",
        "cpu_us": "500", "cpu_self_us": "400", "device_us": "250", "kernels": "3", "flops": "4e+09",
        "flops_per_s": "1.6e+13", "alloc_bytes": "2.09715e+06", "freed_bytes": "2e+06", "peak_bytes": str(3 * MIB),
        "sxs_bytes": "1.04858e+06", "bwd_calls": "1", "bwd_cpu_us": "1000", "bwd_device_us": "0", "bwd_flops": "8e+09",
        "bytes": "0", "intensity": "", "bytes_per_s": "", "ceiling_flops_per_s": "", "roof_share": "", "verdict": ""}


def test_summary_csv_leaves_a_captured_phases_device_figures_empty() -> None:
    w = _worker(layers=[_layer(0, [_phase("qk_matmul", captured=True)], module=None)], span=None)
    (row,) = csv.DictReader(io.StringIO(summary_csv([_run(w)])))
    assert (row["device_us"], row["flops_per_s"], row["module"], row["span"]) == ("", "", "", "")
    assert row["cpu_us"] == "500"  # the CPU side was recorded


def test_summary_csv_escapes_names_and_a_run_of_no_layers_is_the_header() -> None:
    assert summary_csv([_run(_worker(layers=[]))]) == ",".join(CSV_FIELDS) + "\n"
    w = _worker(worker="w\x1b[2J", layers=[_layer(0, [_phase("qk_matmul")], module="m\u202e")])
    text = summary_csv([_run(w, run="r\udcff")])
    assert text.isascii()
    (row,) = csv.DictReader(io.StringIO(text))
    assert (row["run"], row["worker"], row["module"]) == (r"r\xff", r"w\x1b[2J", r"m\u202e")


# -- ranks --------------------------------------------------------------------------------------------


def _rank(rank: int | None, worker: str, best: float, attention: float, layers: list[float], heads: list[int],
          straggler: bool = False, collectives: list[CollectiveStats] | None = None) -> RankRow:
    return RankRow(rank=rank, worker=worker, files=[], world_size=2, step_us=10_000.0, attention_us=attention,
                   attention_best_us=best, collective_us=1000.0, other_us=5000.0,
                   layers=[RankLayer(layer=k, time_us=t, forward_us=t, backward_us=0.0)
                           for k, t in enumerate(layers) if t],
                   heads=heads, collectives=collectives or [], straggler=straggler)


def _column(name: str, mean: float, median: float, top: float) -> RanksColumn:
    return RanksColumn(column=name, mean_us=mean, median_us=median, min_us=0.0, max_us=top, max_rank=None)


def _view(**changes: Any) -> RankView:
    ranks = [
        _rank(0, "host_rank0", 3500.0, 4000.0, [2000.0, 2000.0], [0, 1, 2, 3],
              collectives=[CollectiveStats(name="all_reduce", calls=2.0, cpu_us=100.0, device_us=300.0)]),
        _rank(1, "host_rank1", 5500.0, 6000.0, [3000.0, 3000.0], [4, 5, 6, 7], straggler=True),
        _rank(None, "host_x", 4500.0, 5000.0, [5000.0, 0.0], [0, 2]),  # no layer 1: "-"
    ]
    fields: dict[str, Any] = dict(
        run="r", clock="device", metric="attention_best", metric_label="attention in the fastest step (device)",
        means_label="means per step", heads_label="forward core time", median_label="median over ranks",
        margin=0.2, min_gap_us=100.0, ranks=ranks,
        columns=[_column("attention_best", 4500.0, 4500.0, 5500.0), _column("step", 10_000.0, 10_000.0, 10_000.0),
                 _column("attention", 5000.0, 5000.0, 6000.0), _column("collectives", 1000.0, 1000.0, 1000.0),
                 _column("other", 5000.0, 5000.0, 5000.0)],
        all_ranks=[RanksLayer(layer=0, mean_us=3333.0, median_us=3000.0, min_us=2000.0, max_us=5000.0, max_rank=None,
                              phases={}),
                   RanksLayer(layer=1, mean_us=2500.0, median_us=2500.0, min_us=2000.0, max_us=3000.0, max_rank=1,
                              phases={})],
        stragglers=[Straggler(rank=1, worker="host_rank1", metric="attention", label="attention in the fastest step",
                              value_us=5500.0, median_us=4500.0, ratio=5500.0 / 4500.0)],
        heads=[GlobalHead(layer=0, head=h, ranks=[0], replicas=1, time_us=1.0, flops=0.0, derived=False)
               for h in range(8)],
        head_count=8, heads_sharded=True, heads_complete=True, warnings=[], errors=[])
    return RankView(**(fields | changes))


def test_ranks_table_header_lines() -> None:
    lines = ranks_table(_view()).splitlines()
    assert lines[:4] == ["r: 3 ranks", "fastest: attention in the fastest step (device) (the straggler metric)",
                         "other columns: means per step", "median: median over ranks"]
    assert ranks_table(_view(ranks_total=512, ranks_selected="0-1,7")).splitlines()[0] == \
        "r: 3 ranks of 512 (--ranks 0-1,7)"


def test_ranks_table_rows_in_column_order() -> None:
    lines = ranks_table(_view()).splitlines()
    header, *rows = lines[4:11]
    assert _columns(header) == ["rank", "worker", "fastest ms", "step ms", "attn ms", "coll ms", "other ms", "L0 ms",
                                "L1 ms", "heads"]
    assert [_columns(r) for r in rows] == [
        ["0", "host_rank0", "3.500", "10.000", "4.000", "1.000", "5.000", "2.000", "2.000", "0-3"],
        ["1", "host_rank1", "5.500", "10.000", "6.000", "1.000", "5.000", "3.000", "3.000", "4-7", "STRAGGLER"],
        # no rank: "-"; no layer 1 on it: "-"; heads 0 and 2 are not a range
        ["-", "host_x", "4.500", "10.000", "5.000", "1.000", "5.000", "5.000", "-", "0,2"],
        # the columns in order (fastest, step, attention, collectives, other), then the layers
        ["all", "mean", "4.500", "10.000", "5.000", "1.000", "5.000", "3.333", "2.500"],
        ["all", "median", "4.500", "10.000", "5.000", "1.000", "5.000", "3.000", "2.500"],
        ["all", "max", "5.500", "10.000", "6.000", "1.000", "5.000", "5.000", "3.000"],
    ]
    assert all(x == x.rstrip() for x in lines)  # no trailing blanks from the empty last column


def test_ranks_table_stragglers_collectives_and_heads() -> None:
    lines = ranks_table(_view()).splitlines()
    # 5500 / 4500 = 1.22x; the margin 0.2 as 20%
    assert lines[11] == ("straggler: rank 1 (host_rank1): attention in the fastest step: 5.500 ms against the median "
                         "over ranks 4.500 ms (1.22x, margin 20%)")
    # device clock: the collective kernels' 300 µs, calls as :g
    assert lines[12] == "collectives per step: rank 0: all_reduce x2 0.300 ms"
    assert lines[13] == "heads: 8 per layer, sharded across ranks (tensor parallel); the map shows forward core time"
    assert len(lines) == 14


def test_ranks_table_cpu_collectives_and_replicated_heads_with_gaps() -> None:
    ranks = [_rank(None, "w0", 1.0, 1.0, [1.0], [0],
                   collectives=[CollectiveStats(name="broadcast", calls=1.5, cpu_us=100.0, device_us=300.0)])]
    view = _view(clock="cpu", ranks=ranks, stragglers=[], all_ranks=[], heads_sharded=False, heads_complete=False)
    lines = ranks_table(view).splitlines()
    # a rank without a number is named by its worker; CPU clock: the calls' own 100 µs
    assert "collectives per step: rank w0: broadcast x1.5 0.100 ms" in lines
    assert lines[-1] == ("heads: 8 per layer, on every rank (with gaps: some heads were not seen); the map shows "
                         "forward core time")


def test_ranks_table_without_heads_or_collectives_or_stragglers() -> None:
    view = _view(heads=[], stragglers=[], ranks=[_rank(0, "w", 1.0, 1.0, [1.0, 1.0], [])])
    lines = ranks_table(view).splitlines()
    assert not any(x.startswith(("straggler", "collectives", "heads:")) for x in lines)
    assert _columns(lines[5])[-1] == "-"  # no heads on the rank


def test_ranks_table_escapes_names() -> None:
    view = _view(run="r\x1b]0;x\x07", ranks=[_rank(0, "w\u202e", 1.0, 1.0, [1.0, 1.0], [0])], stragglers=[
        Straggler(rank=None, worker="w\u202e", metric="m", label="l\x1b", value_us=1.0, median_us=1.0, ratio=1.0)])
    out = ranks_table(view)
    assert "\x1b" not in out and "\u202e" not in out and "\x07" not in out
    assert r"r\x1b]0;x\x07: 1 ranks" in out and r"straggler: rank - (w\u202e): l\x1b: " in out


# -- compare ------------------------------------------------------------------------------------------


def _ratio(x: float | None) -> CompareRatio:
    return CompareRatio(attention_cpu_us=x, attention_device_us=x, alloc_bytes=x, peak_bytes=x, flops_per_s=x)


def _compare_run(run: str, **changes: Any) -> CompareRun:
    fields: dict[str, Any] = dict(
        run=run, impl="naive", seq=128, dtype="float32", model="builtin", backend="naive", steps=3,
        attention_cpu_us=2000.0, attention_device_us=0.0, step_cpu_us=5000.0, attention_share_cpu=0.4,
        alloc_bytes=4.0 * MIB, peak_bytes=2 * MIB, sxs_bytes=0.0, flops=1e9, flops_per_s=1e10, ops_per_forward=12.345,
        kernels_per_forward=0.0, phases={}, layers=[], findings=[], ratio=_ratio(1.0), baseline="naive")
    return CompareRun(**(fields | changes))


def _series(label: str, **changes: Any) -> ScalingSeries:
    points = [ScalingPoint(seq=s, run=f"r{s}", time_us=1.0, alloc_bytes=1.0, peak_bytes=1) for s in (64, 128, 256)]
    fields: dict[str, Any] = dict(label=label, impl="naive", dtype="float32", model="builtin", points=points,
                                  time_fit=Fit(a=1.0, k=1.996, r2=0.9949, points=3),
                                  memory_fit=Fit(a=1.0, k=1.0, r2=None, points=2))
    return ScalingSeries(**(fields | changes))


def _compare(*runs: CompareRun, **changes: Any) -> Comparison:
    fields: dict[str, Any] = dict(baseline="naive", runs=list(runs), errors=[])
    return Comparison(**(fields | changes))


def test_compare_rows_in_column_order() -> None:
    spread = Spread(median=2000.0, lo=1000.0, hi=3000.0, kind="range", steps=3, noisy=True)
    sdpa = _compare_run("sdpa", impl="sdpa", backend="cpu-flash", attention_device_us=500.0, attention_cpu_us=9e9,
                        clock="device",
                        ratio=CompareRatio(attention_cpu_us=99.0, attention_device_us=0.25, alloc_bytes=0.5,
                                           peak_bytes=None, flops_per_s=4.0),
                        alloc_bytes=2.0 * MIB, findings=["hidden-copy", "math-fallback"], attention_spread=spread)
    lines = compare_table(_compare(_compare_run("naive"), sdpa), ScalingFits(series=[])).splitlines()
    assert lines[0].startswith("baseline: naive; ratios only within groups of like-for-like runs")
    assert lines[1].startswith("time is device time where all of attention's kernels ran in the trace, else CPU")
    assert _columns(lines[2]) == [
        "run", "impl", "seq", "dtype", "backend", "attn ms", "steps' spread", "ratio", "alloc MiB", "ratio", "peak MiB",
        "ratio", "FLOP/s", "ratio", "FLOP/B", "% roof", "bound", "ops/fwd", "kernels/fwd", "findings"]
    assert [_columns(x) for x in lines[3:5]] == [
        # the baseline marked *; CPU time (no device time) 2 ms; 4 and 2 MiB; 1e10 FLOP/s = 10.00G; no roofline
        ["naive *", "naive", "128", "float32", "naive", "2.000", "-", "1.00x", "4.00", "1.00x", "2.00", "1.00x",
         "10.00G", "1.00x", "-", "-", "-", "12.3", "0.0", "-"],
        # device time where there is some (500 µs) and its ratio, not the CPU's; no peak ratio: "-"
        ["sdpa", "sdpa", "128", "float32", "cpu-flash", "0.500", "~1.000-3.000 ms over 3", "0.25x", "2.00", "0.50x",
         "2.00", "-", "10.00G", "4.00x", "-", "-", "-", "12.3", "0.0", "hidden-copy,math-fallback"],
    ]
    assert len(lines) == 5


def test_compare_headlines_come_first_and_errors_follow_the_table() -> None:
    headline = Headline(group="g", best="sdpa", best_impl="sdpa", clock="CPU", versus=[],
                        sentence="sdpa is fastest \x1b[2J")
    result = _compare(_compare_run("naive", impl=None, seq=None, dtype=None),
                      headlines=[headline], errors=[CompareError(run="bad", error="not JSON\x07")])
    lines = compare_table(result, ScalingFits(series=[])).splitlines()
    assert lines[:2] == [r"sdpa is fastest \x1b[2J", ""]
    assert _columns(lines[5])[:4] == ["naive *", "-", "-", "-"]  # unknown impl, seq and dtype
    assert lines[6] == r"error: bad: not JSON\x07"


def test_compare_why_slower_is_wrapped_under_its_run() -> None:
    reason = "the naive run materializes the scores \x1b " + "and reads them back " * 6
    result = _compare(_compare_run("sdpa", baseline="sdpa"),
                      _compare_run("naive\u202e", baseline="sdpa", why_slower=[reason, "short"]))
    lines = compare_table(result, ScalingFits(series=[])).splitlines()
    i = lines.index(r"why naive\u202e is slower than sdpa (same model and configuration):")
    assert lines[i - 1] == ""
    body = lines[i + 1:]
    assert body[0].startswith(r"  - the naive run materializes the scores \x1b and")
    assert all(len(x) <= 100 for x in body) and body[1].startswith("    ") and body[-1] == "  - short"


def test_compare_scaling_fits() -> None:
    series = [
        _series("naive float32"),
        _series("sdpa decode", x="context", time_fit=None, expect="k near 1: linear in the context\x1b",
                points=[ScalingPoint(seq=s, run="r", time_us=1.0, alloc_bytes=1.0, peak_bytes=1) for s in (65, 66)]),
        _series("unfitted", time_fit=None, memory_fit=None),
    ]
    lines = compare_table(_compare(_compare_run("naive")), ScalingFits(series=series)).splitlines()
    i = lines.index("scaling with sequence length (cost ~ a * S^k; decode series: time per decode step and KV cache "
                    "against the context):")
    assert lines[i - 1] == ""
    # the label padded to 32, the lengths to 16; k and R2 to two decimals (1.996: 2.00, 0.9949: 0.99)
    assert lines[i + 1:] == [
        "  naive float32                    seq 64,128,256       time k=2.00 (R2 0.99, 3 points)  memory k=1.00 "
        "(2 points: no fit quality)",
        "  sdpa decode                      seq ctx 65,66        time -  memory k=1.00 (2 points: no fit quality)",
        r"                                   expected: k near 1: linear in the context\x1b",
    ]


def test_compare_without_fits_has_no_scaling_block() -> None:
    out = compare_table(_compare(_compare_run("naive")), ScalingFits(series=[_series("s", time_fit=None,
                                                                                     memory_fit=None)]))
    assert "scaling with sequence length" not in out


def test_compare_escapes_names_in_the_table() -> None:
    out = compare_table(_compare(_compare_run("r\x1b[2J", impl="i\u202e", baseline=None)), ScalingFits(series=[]))
    assert "\x1b" not in out and "\u202e" not in out
    assert _columns(out.splitlines()[3])[:2] == [r"r\x1b[2J", r"i\u202e"]
