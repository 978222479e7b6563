"""``tb-attn heads`` (``cli/report_heads.py``): each head's cost beside its attention statistics, as views
(``heads_runs``), a table and CSV. Built from a hand-made summary whose head times, shares and statistics are
known, so every cell is checked against its figure (shares of 500 µs, three decimals, distances one)."""

from __future__ import annotations

import csv
import io
import re
from typing import Any

import msgspec
import pytest

from tb_attn_plugin.cli.report_heads import HEADS_SCHEMA, HeadsRun, heads_csv, heads_runs, heads_table
from tb_attn_plugin.types.schema import (
    AttnStats,
    Backward,
    Evidence,
    Finding,
    HeadAttention,
    HeadStats,
    LayerStats,
    RunSummary,
    WorkerSummary,
)

STATS = ["entropy", "sink_4", "window_64", "distance"]


def _head(head: int, us: float, flops: float, derived: bool) -> HeadStats:
    return HeadStats(head=head, derived=derived, cpu_us=us, device_us=us / 10, flops=flops, alloc_bytes=0.0,
                     sxs_bytes=0.0)


def _layer(n: int, us: float, heads: list[HeadStats]) -> LayerStats:
    return LayerStats(layer=n, module=None, backend="sdpa", backend_evidence=[], inferred=False, calls=1.0,
                      cpu_us=us, device_us=us / 10, flops=0.0, flops_per_s=0.0, alloc_bytes=0.0, peak_bytes=0,
                      sxs_bytes=0.0, heads_count=len(heads), phases=[], heads=heads, backward=Backward())


def _finding(fid: str, title: str = "t") -> Finding:
    return Finding(id=fid, severity="low", title=title, explanation="e", suggestion="s",
                   evidence=Evidence(layers=[0], ops=[], kernels=[], time_us=0.0, bytes=0.0, details={}))


def _worker(**changes: Any) -> WorkerSummary:
    # Attention takes 500 µs on the CPU: L0 400 (head 0 measured at 300, head 1 an even share of 100),
    # L1 100 (head 0). The device clock is a tenth of each.
    fields: dict[str, Any] = dict(
        file="w.json", worker="w", span=None, device="cpu", inferred=False, backend="sdpa", steps=[1], step_count=1,
        step_cpu_us=1000.0, step_device_us=0.0, attention_cpu_us=500.0, attention_device_us=50.0,
        attention_share_cpu=0.5, attention_share_device=None,
        layers=[_layer(0, 400.0, [_head(0, 300.0, 2e6, False), _head(1, 100.0, 2e6, True)]),
                _layer(1, 100.0, [_head(0, 100.0, 1e6, True)])],
        per_step=[], diagnostics={}, notes=[], findings=[_finding("hidden-copy"), _finding("local-heads", "old")])
    return WorkerSummary(**(fields | changes))


def _stats(**changes: Any) -> AttnStats:
    heads = [
        HeadAttention(layer=0, head=0, values={"entropy": 1.23456, "sink_4": 0.7, "window_64": 0.995,
                                               "distance": 3.21}, local=True, sink=True),
        HeadAttention(layer=0, head=1, values={"entropy": 2.0, "sink_4": 0.1, "window_64": 0.5}, local=False,
                      sink=False),
        HeadAttention(layer=1, head=0, values={"entropy": 0.5, "sink_4": 0.0, "window_64": 0.999, "distance": 10.0},
                      local=True, sink=False),
        HeadAttention(layer=1, head=5, values={}, local=False, sink=False),  # no cost in the summary
    ]
    fields: dict[str, Any] = dict(step=7, weights="checkpoint", stats=STATS, window=64, threshold=0.99, heads=heads)
    return AttnStats(**(fields | changes))


def _run(stats: AttnStats | None = None, run: str = "r", **worker: Any) -> RunSummary:
    return RunSummary(run=run, metadata=None, workers=[_worker(**worker)], errors=[], attn_stats=stats)


def _columns(line: str) -> list[str]:
    # Two spaces at least between columns; a cell holds no two spaces running.
    return re.split(r" {2,}", line.strip())


# -- heads_runs ---------------------------------------------------------------------------------------


def test_a_run_without_statistics_has_no_workers() -> None:
    (view,) = heads_runs([_run(None)])
    assert (view.schema, view.run, view.attn_stats, view.workers) == (HEADS_SCHEMA, "r", None, [])


def test_each_head_with_statistics_gets_its_cost_and_share() -> None:
    (view,) = heads_runs([_run(_stats())])
    (w,) = view.workers
    assert (w.worker, w.span, w.clock) == ("w", None, "cpu")
    # shares of the layers' 500 µs: 300 / 500, 100 / 500, 100 / 500; a head the summary lacks costs 0
    assert [(h.layer, h.head, h.derived, h.time_us, h.time_share, h.flops) for h in w.heads] == [
        (0, 0, False, 300.0, 0.6, 2e6), (0, 1, True, 100.0, 0.2, 2e6), (1, 0, True, 100.0, 0.2, 1e6),
        (1, 5, True, 0.0, 0.0, 0.0)]
    assert [f.title for f in w.findings] == ["old"]  # the local-heads finding alone


def test_a_gpu_worker_is_on_the_device_clock() -> None:
    (view,) = heads_runs([_run(_stats(), device="cuda", span="s")])
    (w,) = view.workers
    assert (w.clock, w.span) == ("device", "s")
    assert [h.time_us for h in w.heads[:3]] == [30.0, 10.0, 10.0]  # the device times, a tenth


def test_a_threshold_redoes_the_verdicts_and_the_finding() -> None:
    """At 0.999, L0 H0 (0.995 within 64 tokens) is no longer local; L1 H0 (0.999) still is."""
    (view,) = heads_runs([_run(_stats())], threshold=0.999)
    assert view.attn_stats is not None and view.attn_stats.threshold == 0.999
    assert [(h.layer, h.head) for h in view.attn_stats.heads if h.local] == [(1, 0)]
    (w,) = view.workers
    assert [(h.layer, h.head) for h in w.heads if h.local] == [(1, 0)]
    (finding,) = w.findings
    assert finding.id == "local-heads" and finding.title == "1 head keep 100% of their attention within 64 tokens"


def test_a_threshold_that_leaves_no_local_head_drops_the_finding() -> None:
    (view,) = heads_runs([_run(_stats())], threshold=1.0)
    assert view.workers[0].findings == []


def test_a_window_not_recorded_is_an_error_naming_those_that_were() -> None:
    with pytest.raises(ValueError, match=r"^r: no window of 128 recorded \(recorded: window_64\)$"):
        heads_runs([_run(_stats())], window=128)
    bare = _stats(stats=["entropy"], window=None)
    with pytest.raises(ValueError, match=r"^r: no window of 64 recorded \(recorded: none\)$"):
        heads_runs([_run(bare)], window=64)


def test_a_window_or_threshold_leaves_a_run_without_statistics_alone() -> None:
    (view,) = heads_runs([_run(None)], window=128, threshold=0.5)
    assert view.attn_stats is None and view.workers == []


def test_the_summaries_given_are_not_changed() -> None:
    run = _run(_stats())
    before = msgspec.json.encode(run)
    heads_runs([run], threshold=0.999)
    assert msgspec.json.encode(run) == before


# -- heads_table --------------------------------------------------------------------------------------


def test_a_run_without_statistics_says_how_to_record_them() -> None:
    assert heads_table(heads_runs([_run(None, run="r\x1b")])) == (
        r"run r\x1b: no attention statistics (record them with tb-attn-run --attn-stats, or "
        "runner.instrument(model, attn_stats=True))\n\n")


def test_the_table_lists_each_head_in_column_order() -> None:
    lines = heads_table(heads_runs([_run(_stats())])).splitlines()
    assert lines[0] == ("run r: attention statistics at step 7 (checkpoint weights); local: at least 99% of the mass "
                        "within 64 tokens; sink: at least half on the first 4 tokens")
    assert lines[1] == "  worker w (cpu time)"
    assert _columns(lines[2]) == ["layer", "head", "time", "share", "FLOPs", *STATS, "local", "sink"]
    assert [_columns(x) for x in lines[3:7]] == [
        # 300 µs, 60%, 2e6 FLOPs; statistics to three decimals (1.23456: 1.235), the distance to one
        ["L0", "0", "300.0 µs", "60%", "2.00M", "1.235", "0.700", "0.995", "3.2", "local", "sink"],
        # an even share: "~"; no distance recorded for it: "-"
        ["L0", "1", "~100.0 µs", "20%", "2.00M", "2.000", "0.100", "0.500", "-"],
        ["L1", "0", "~100.0 µs", "20%", "1.00M", "0.500", "0.000", "0.999", "10.0", "local"],
        ["L1", "5", "~0.0 µs", "0%", "-", "-", "-", "-", "-"],
    ]
    assert lines[7] == "    (~: the head's time is an even share of its layer's core: no head scopes)"
    assert lines[8:] == ["    [low] local-heads: old", "      e", "      -> s", ""]  # a blank line after the run


def test_a_random_weights_note_and_no_window() -> None:
    note = "Random weights: " + "these statistics say nothing " * 5
    lines = heads_table(heads_runs([_run(_stats(weights="random", window=None, note=note), span="s1")])).splitlines()
    assert lines[0] == ("run r: attention statistics at step 7 (random weights); no window shorter than the sequence "
                        "was recorded: no local verdict; sink: at least half on the first 4 tokens")
    # 161 characters of note: two lines of at most 100, under a two-space indent
    assert lines[1].startswith("  Random weights: ") and lines[2].startswith("  nothing")
    assert all(len(x) <= 100 for x in lines[1:3])
    assert " ".join(x.strip() for x in lines[1:3]) == note.strip()
    assert lines[3] == "  worker w  span s1 (cpu time)"


def test_hostile_worker_names_and_finding_titles_are_escaped() -> None:
    out = heads_table(heads_runs([_run(_stats(), worker="w\x1b[2J",
                                       findings=[_finding("local-heads", "t\u202e")])]))
    assert "\x1b" not in out and "\u202e" not in out
    assert r"  worker w\x1b[2J (cpu time)" in out and r"    [low] local-heads: t\u202e" in out


# -- heads_csv ----------------------------------------------------------------------------------------


def test_csv_without_runs_is_the_header() -> None:
    assert heads_csv([]) == "run,worker,span,clock,layer,head,derived,time_us,time_share,flops,local,sink\n"


def test_csv_rows_have_six_significant_digits_and_empty_missing_values() -> None:
    rows = list(csv.reader(io.StringIO(heads_csv(heads_runs([_run(_stats())])))))
    assert rows[0] == ["run", "worker", "span", "clock", "layer", "head", "derived", "time_us", "time_share", "flops",
                       *STATS, "local", "sink"]
    assert rows[1:] == [
        ["r", "w", "", "cpu", "0", "0", "False", "300", "0.6", "2e+06", "1.23456", "0.7", "0.995", "3.21", "True",
         "True"],
        ["r", "w", "", "cpu", "0", "1", "True", "100", "0.2", "2e+06", "2", "0.1", "0.5", "", "False", "False"],
        ["r", "w", "", "cpu", "1", "0", "True", "100", "0.2", "1e+06", "0.5", "0", "0.999", "10", "True", "False"],
        ["r", "w", "", "cpu", "1", "5", "True", "0", "0", "0", "", "", "", "", "False", "False"],
    ]


def test_csv_columns_are_every_runs_statistics_in_first_seen_order() -> None:
    a = _stats(stats=["entropy", "window_64"], heads=[HeadAttention(layer=0, head=0, values={"entropy": 1.0},
                                                                    local=False, sink=False)])
    b = _stats(stats=["entropy", "sink_4", "top_32"], heads=[HeadAttention(layer=0, head=0, values={"top_32": 0.25},
                                                                           local=False, sink=False)])
    views = heads_runs([_run(a, run="a"), _run(b, run="b"), _run(None, run="c")])
    rows = list(csv.DictReader(io.StringIO(heads_csv(views))))
    assert list(rows[0])[10:14] == ["entropy", "window_64", "sink_4", "top_32"]
    assert [(r["run"], r["entropy"], r["top_32"]) for r in rows] == [("a", "1", ""), ("b", "", "0.25")]


def test_csv_escapes_names() -> None:
    views: list[HeadsRun] = heads_runs([_run(_stats(), run="r\x07", worker="w\udcff", span="s\u2028")])
    text = heads_csv(views)
    assert text.isascii()
    row = next(csv.DictReader(io.StringIO(text)))
    assert (row["run"], row["worker"], row["span"]) == (r"r\x07", r"w\xff", r"s\u2028")
