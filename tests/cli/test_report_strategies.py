"""``tb-attn strategies`` as text and CSV, and the summary's lines on masks, integer ops and accuracy
(``cli/report_strategies.py``), from hand-built ``StrategyTable`` and summary structs: each cell is checked
against its figure worked out by hand, in column order, with hostile names escaped."""

from __future__ import annotations

import csv
import io
import re
from typing import Any

import msgspec
import pytest

from tb_attn_plugin.cli.report_strategies import STRATEGY_CSV_FIELDS, strategies_csv, strategies_table, variant_lines
from tb_attn_plugin.types.schema import (
    Backward,
    Evidence,
    Finding,
    Fit,
    LayerMask,
    LayerStats,
    RunSummary,
    WorkerSummary,
)
from tb_attn_plugin.types.strategies import (
    Accuracy,
    Crossover,
    StrategyGroup,
    StrategyRow,
    StrategySeries,
    StrategyTable,
)

MIB = 1 << 20


def _layer(n: int, mask: LayerMask | None = None, iops: float = 0.0) -> LayerStats:
    return LayerStats(layer=n, module=None, backend="naive", backend_evidence=[], inferred=False, calls=1.0,
                      cpu_us=0.0, device_us=0.0, flops=0.0, flops_per_s=0.0, iops=iops, alloc_bytes=0.0,
                      peak_bytes=0, sxs_bytes=0.0, heads_count=None, phases=[], heads=[], backward=Backward(),
                      mask=mask)


def _worker(layers: list[LayerStats], backend: str = "naive") -> WorkerSummary:
    return WorkerSummary(file="w.json", worker="w", span=None, device="cpu", inferred=False, backend=backend,
                         steps=[1], step_count=1, step_cpu_us=0.0, step_device_us=0.0, attention_cpu_us=0.0,
                         attention_device_us=0.0, attention_share_cpu=None, attention_share_device=None,
                         layers=layers, per_step=[], diagnostics={}, notes=[])


def _run(metadata: dict[str, object] | None = None) -> RunSummary:
    return RunSummary(run="r", metadata=metadata, workers=[], errors=[])


# A window keeping a quarter of the scores, half the 128x128 blocks; compiled flex: 1 GFLOP asked and done
# of 4 dense, the core 1 ms where the dense work would take 3 ms.
SLIDING = LayerMask(spec="sliding:64", kept=0.25, blocks=0.5, dense_flops=4e9, mask_flops=1e9, work_flops=1e9,
                    dense_work=False, core_us=1000.0, dense_equiv_us=3000.0)
# A causal mask over every score (naive): the dense work done, nothing saved.
CAUSAL = LayerMask(spec="causal", kept=0.5, blocks=None, dense_flops=4e9, mask_flops=2e9, work_flops=4e9,
                   dense_work=True, core_us=1000.0, dense_equiv_us=1000.0)


# -- variant_lines ----------------------------------------------------------------------------------


def test_a_plain_exact_run_has_no_variant_lines() -> None:
    assert variant_lines(_run(), _worker([_layer(0), _layer(1)])) == []


def test_one_line_per_mask_with_what_its_sparsity_saved() -> None:
    lines = variant_lines(_run(), _worker([_layer(0, SLIDING), _layer(1, SLIDING), _layer(2, CAUSAL), _layer(3)]))
    assert lines == [
        # saved: 2 layers x (3000 - 1000) µs = 4 ms
        "  mask sliding:64 in layers 0-1: keeps 25.0% of scores, 50.0% of 128x128 blocks; core FLOPs per call "
        "1.00G asked, 1.00G done, 4.00G dense; sparsity saved 4.000 ms per step (the dense work at the layers' "
        "own FLOP rate)",
        "  mask causal in layer 2: keeps 50.0% of scores; core FLOPs per call 2.00G asked, 4.00G done, 4.00G dense; "
        "dense work (every score computed, then masked): nothing saved",
    ]


def test_a_mask_spec_from_the_metadata_is_escaped() -> None:
    mask = msgspec.structs.replace(SLIDING, spec="sliding:64\x1b[2J")
    (line,) = variant_lines(_run(), _worker([_layer(0, mask)]))
    assert line.startswith(r"  mask sliding:64\x1b[2J in layer 0: ")


def test_integer_ops_are_summed_over_layers() -> None:
    # 1e9 + 2e9 int8 ops
    lines = variant_lines(_run(), _worker([_layer(0, iops=1e9), _layer(1, iops=2e9)], backend="int8-qk"))
    assert lines[0] == "  integer ops: 3.00G per step (int8 GEMMs), apart from the FLOPs"


def test_the_measured_error_is_given_with_its_loss() -> None:
    meta = {"accuracy": {"rel_l1": 0.01234, "max_abs": 0.5, "cosine": 0.999876, "loss_diff": 0.00123}}
    (line,) = variant_lines(_run(meta), _worker([_layer(0)], backend="performer"))
    # 1.234%; max to 3 digits; cosine to 5 decimals (0.99988); loss signed, 4 decimals (+0.0012)
    assert line == ("  error against exact fp32 attention (worst layer): relative 1.234%, max 0.5, cosine 0.99988, "
                    "loss +0.0012")


def test_the_error_without_a_loss_leaves_the_loss_out() -> None:
    meta = {"accuracy": {"rel_l1": 0.5, "max_abs": 2.0, "cosine": -0.25}}
    (line,) = variant_lines(_run(meta), _worker([_layer(0)]))
    assert line.endswith("relative 50.000%, max 2, cosine -0.25000")


@pytest.mark.parametrize("accuracy", [None, "high", {"rel_l1": -1.0, "max_abs": 0.1, "cosine": 1.0},
                                      {"rel_l1": 0.1, "max_abs": 0.1, "cosine": 2.0}, {"rel_l1": "x"}])
def test_an_approximate_run_without_a_usable_record_is_not_measured(accuracy: object) -> None:
    meta = None if accuracy is None else {"accuracy": accuracy}
    assert variant_lines(_run(meta), _worker([_layer(0)], backend="performer")) == [
        "  error against exact attention: not measured (no accuracy record in the run's metadata)"]
    # An exact backend says nothing of an error it does not have.
    assert variant_lines(_run(meta), _worker([_layer(0)], backend="sdpa")) == []


# -- strategies_table -------------------------------------------------------------------------------


def _row(strategy: str, time_us: float, **changes: Any) -> StrategyRow:
    fields: dict[str, Any] = dict(run=f"builtin/{strategy}/seq64", strategy=strategy, backend=strategy.split()[0],
                                  exact=True, seq=64, time_us=time_us, peak_bytes=2 * MIB, alloc_bytes=3 * MIB,
                                  sxs_bytes=float(MIB), flops=1e9, iops=0.0, quant_share=None, accuracy=None,
                                  speedup=None, pareto=False)
    return StrategyRow(**(fields | changes))


NAIVE = _row("naive", 2000.0, speedup=1.0, pareto=True,
             accuracy=Accuracy(rel_l1=0.0, max_abs=0.0, cosine=1.0, loss_diff=0.0))
PERFORMER = _row("performer M=64", 1000.0, exact=False, noisy=True, speedup=2.0, peak_bytes=MIB, sxs_bytes=0.0,
                 flops=5e8, accuracy=Accuracy(rel_l1=0.0512, max_abs=0.3, cosine=0.99, loss_diff=None))
INT8 = _row("int8-qk", 1500.0, exact=False, speedup=2000.0 / 1500.0, iops=2e9, quant_share=0.25)


def _finding() -> Finding:
    return Finding(id="accuracy-cost", severity="medium", title="t", explanation="e", suggestion="s",
                   evidence=Evidence(layers=[], ops=[], kernels=[], time_us=0.0, bytes=0.0, details={}))


def _group(**changes: Any) -> StrategyGroup:
    fields: dict[str, Any] = dict(label="builtin, float32, inference", clock="cpu", baseline="naive",
                                  strategies=["naive", "performer M=64", "int8-qk"], rows=[NAIVE, PERFORMER, INT8],
                                  series=[], findings=[])
    return StrategyGroup(**(fields | changes))


def _table(*groups: StrategyGroup) -> StrategyTable:
    return StrategyTable(rel_tol=0.01, loss_tol=0.005, groups=list(groups))


def _columns(line: str) -> list[str]:
    # Columns are two spaces apart at least; a cell holds one space at most ("naive *", "1.000 ~").
    return re.split(r" {2,}", line.strip())


def test_without_groups_the_table_says_there_are_no_runs() -> None:
    assert strategies_table(_table()).splitlines() == [
        "the error column: relative L1 of the attention output against exact fp32 attention (worst layer); "
        "accuracy-cost over 1.0% or a loss moved by more than 0.005; ~ = the steps spread over 20% of their median "
        "(noisy: no crossover or finding rests on it); ≈ = a speed-up the two runs cannot tell from drift between "
        "runs (profile with --repeats 3)",
        "no runs with attention and a sequence length in their metadata"]


def test_a_groups_rows_in_column_order() -> None:
    lines = strategies_table(_table(_group())).splitlines()
    assert lines[1] == ""
    assert lines[2] == ("builtin, float32, inference: attention cpu time per step; speed-up against naive (*) at the "
                        "same length")
    assert _columns(lines[3]) == ["strategy", "seq", "backend", "attn ms", "speed-up", "error", "loss diff",
                                  "peak MiB", "SxS MiB", "FLOPs", "IOPs", "quant", "pareto"]
    assert [_columns(x) for x in lines[4:7]] == [
        # 2 ms; relative error 0 as 0.00%; loss +0.0000; 2 MiB peak; 1 MiB of scores; 1e9 FLOPs
        ["naive *", "64", "naive", "2.000", "1.00x", "0.00%", "+0.0000", "2.00", "1.00", "1.00G", "-", "-", "yes"],
        # noisy: " ~"; no loss measured: "-"; no scores: "-"; not on the front: an empty cell
        ["performer M=64", "64", "performer", "1.000 ~", "2.00x", "5.12%", "-", "1.00", "-", "500.00M", "-", "-"],
        # 2000 / 1500 = 1.33x; no record: "not measured" twice; a quarter in quantization: 25%
        ["int8-qk", "64", "int8-qk", "1.500", "1.33x", "not measured", "not measured", "2.00", "1.00", "1.00G",
         "2.00G", "25%"],
    ]
    assert len(lines) == 7  # no series fitted, no findings
    assert len({len(x) for x in lines[3:7]}) == 1  # aligned: every row as wide as the header


def test_fitted_series_with_their_crossover_or_its_note() -> None:
    fit = Fit(a=1.0, k=1.016, r2=0.99, points=3)
    series = [
        StrategySeries(strategy="naive", exact=True, seqs=[64, 128, 256], time_us=[1, 2, 3], fit=fit, crossover=None),
        StrategySeries(strategy="performer M=64", exact=False, seqs=[64, 128, 256], time_us=[1, 2, 3],
                       fit=Fit(a=1.0, k=0.5, r2=None, points=2),
                       crossover=Crossover(seq=100.0, faster="above", extrapolated=False, text="faster above 100")),
        StrategySeries(strategy="int8-qk", exact=False, seqs=[64], time_us=[1], fit=None, crossover=None),
        StrategySeries(strategy="linear\x1b", exact=False, seqs=[64, 128], time_us=[1, 2], fit=fit, crossover=None,
                       crossover_note="two lengths: no crossover"),
    ]
    lines = strategies_table(_table(_group(series=series))).splitlines()
    i = lines.index("  time ~ a * S^k, and where each crosses the baseline:")
    assert lines[i - 1] == ""
    # each name padded to 24 columns; k to two decimals; an unfitted series not listed
    assert lines[i + 1:] == [
        "  naive                    k=1.02",
        "  performer M=64           k=0.50  faster above 100",
        r"  linear\x1b               k=1.02  two lengths: no crossover",
    ]


def test_findings_follow_the_group() -> None:
    lines = strategies_table(_table(_group(findings=[_finding()]))).splitlines()
    assert lines[-5:] == ["", "  findings (1):", "  [medium] accuracy-cost: t", "      e", "      -> s"]


def test_groups_and_names_from_the_metadata_are_escaped() -> None:
    row = _row("naive\x1b[2J", 1.0)
    group = _group(label="model \u202e", baseline=None, rows=[row], strategies=[row.strategy])
    out = strategies_table(_table(group))
    assert "\x1b" not in out and "\u202e" not in out
    assert r"model \u202e: attention cpu time per step; speed-up against - (*) at the same length" in out
    assert _columns(out.splitlines()[4])[0] == r"naive\x1b[2J"  # no baseline: no "*"


# -- strategies_csv ---------------------------------------------------------------------------------


def _csv(table: StrategyTable) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(strategies_csv(table))))


def test_csv_header_alone_without_groups() -> None:
    assert strategies_csv(_table()) == ",".join(STRATEGY_CSV_FIELDS) + "\n"


def test_csv_has_one_row_per_run_with_raw_figures() -> None:
    naive, performer, int8 = _csv(_table(_group()))
    assert naive == {
        "group": "builtin, float32, inference", "strategy": "naive", "seq": "64", "run": "builtin/naive/seq64",
        "backend": "naive", "exact": "True", "clock": "cpu", "time_us": "2000.0", "peak_bytes": str(2 * MIB),
        "alloc_bytes": str(3 * MIB), "sxs_bytes": str(float(MIB)), "flops": "1000000000.0", "iops": "0.0",
        "quant_share": "", "rel_l1": "0.0", "max_abs": "0.0", "cosine": "1.0", "loss_diff": "0.0",
        "baseline": "naive", "speedup": "1.0", "pareto": "True"}
    # A loss not measured is an empty cell, not 0; so is an error not measured, and no quantization.
    assert (performer["rel_l1"], performer["loss_diff"], performer["quant_share"]) == ("0.0512", "", "")
    assert [int8[k] for k in ("rel_l1", "max_abs", "cosine", "loss_diff", "quant_share", "iops")] == [
        "", "", "", "", "0.25", "2000000000.0"]
    assert float(int8["speedup"]) == 2000.0 / 1500.0  # the full float, not rounded


def test_csv_without_a_baseline_or_speedup_has_empty_cells() -> None:
    (row,) = _csv(_table(_group(baseline=None, rows=[_row("naive", 1.0)])))
    assert (row["baseline"], row["speedup"], row["pareto"]) == ("", "", "False")


def test_csv_escapes_names_from_the_metadata() -> None:
    row = _row("s\x1b", 1.0, run="run\u202e", backend="naive")  # backends are tb-attn's own names
    text = strategies_csv(_table(_group(label="g\x07", baseline="b\x00", rows=[row])))
    assert "\x1b" not in text and "\u202e" not in text and "\x07" not in text and "\x00" not in text
    (parsed,) = list(csv.DictReader(io.StringIO(text)))
    assert [parsed[k] for k in ("group", "strategy", "run", "baseline")] == [r"g\x07", r"s\x1b", r"run\u202e", r"b\x00"]
