"""Spread over steps: the rule on hand-picked values, and the summary's spreads on a hand-written
trace of three steps whose layer, phase and attention times are known."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest

from tb_attn_plugin.analysis.attribution.analyze import analyze
from tb_attn_plugin.analysis.common.spread import (
    IQR_MIN_STEPS,
    NOISY,
    lower_middle,
    median,
    median_low,
    percentiles,
    quantile,
    spread,
)
from tb_attn_plugin.analysis.summary import summarize_analysis
from tb_attn_plugin.trace.decode import decode_bytes
from tb_attn_plugin.types.schema import SPREAD_KEYS

CPU = {"pid": 1, "tid": 1}


def test_range_below_eight_steps_and_iqr_from_eight() -> None:
    s = spread([10.0, 12.0, 11.0, 30.0])
    assert s is not None and s.kind == "range" and (s.lo, s.median, s.hi) == (10.0, 11.5, 30.0)
    assert s.steps == 4 and s.noisy  # (30 - 10) / 11.5 is 174 %
    values = [10.0, 10.0, 10.0, 10.0, 11.0, 11.0, 11.0, 100.0]  # one outlier among eight
    s = spread(values)
    assert len(values) == IQR_MIN_STEPS and s is not None and s.kind == "iqr"
    assert (s.lo, s.median, s.hi) == (10.0, 10.5, 11.0)  # numpy's linear percentiles, by hand
    assert not s.noisy  # 1 / 10.5 < 20 %: the outlier does not make the figure noisy


def test_noisy_threshold_and_degenerate_inputs() -> None:
    under = spread([100.0, 100.0 + 100 * NOISY])  # 20 apart, the median 110: 18 %
    assert under is not None and not under.noisy
    over = spread([100.0, 125.0])  # 25 over a median of 112.5: 22 %
    assert over is not None and over.noisy
    assert spread([5.0]) is None and spread([]) is None
    zero = spread([0.0, 0.0])
    assert zero is not None and not zero.noisy
    sometimes = spread([0.0, 0.0, 4.0])  # median 0, a step with some: noisy
    assert sometimes is not None and sometimes.noisy


def _x(cat: str, name: str, ts: float, dur: float, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, **CPU, "args": args}


def _step(n: int, t0: float, block: float, qk: float) -> list[dict[str, Any]]:
    """A step with layer 0's block of ``block`` µs holding a qk_matmul scope of ``qk`` µs."""
    return [
        _x("user_annotation", f"ProfilerStep#{n}", t0, 1000),
        _x("user_annotation", "tbattn.v1/L0", t0 + 10, block),
        _x("user_annotation", "tbattn.v1/L0/qk_matmul", t0 + 11, qk),
        _x("cpu_op", "aten::bmm", t0 + 12, qk - 2),
    ]


@pytest.fixture(scope="module")
def worker() -> Any:
    # Block 100/120/200 µs, qk_matmul 40/40/44 µs: "other" (block minus qk_matmul) 60/80/156 µs.
    events = _step(1, 0, 100, 40) + _step(2, 1000, 120, 40) + _step(3, 2000, 200, 44)
    trace = json.dumps({"schemaVersion": 1, "traceEvents": events}).encode()
    return summarize_analysis(analyze(decode_bytes(trace)))


def test_summary_spreads_by_hand(worker: Any) -> None:
    (layer,) = worker.layers
    assert set(layer.spread) == {"cpu_us", "bwd_cpu_us"}  # no device in this trace: no device keys
    s = layer.spread["cpu_us"]
    assert (s.lo, s.median, s.hi, s.kind, s.steps) == (100, 120, 200, "range", 3)
    assert s.noisy and layer.cpu_us == pytest.approx(140)  # the figure stays the mean
    phases = {p.phase: p for p in layer.phases}
    qk = phases["qk_matmul"].spread["cpu_us"]
    assert (qk.lo, qk.median, qk.hi) == (40, 40, 44) and not qk.noisy  # 4 / 40 = 10 %
    other = phases["other"].spread["cpu_us"]
    assert (other.lo, other.median, other.hi) == (60, 80, 156) and other.noisy
    assert layer.spread["bwd_cpu_us"].hi == 0  # no backward: zero in every step
    attention = worker.spread["attention_cpu_us"]
    assert (attention.lo, attention.median, attention.hi) == (100, 120, 200)
    step = worker.spread["step_cpu_us"]
    assert (step.lo, step.hi) == (1000, 1000) and not step.noisy
    assert set(worker.spread) <= set(SPREAD_KEYS) and set(layer.spread) <= set(SPREAD_KEYS)


def test_one_step_has_no_spread() -> None:
    trace = json.dumps({"schemaVersion": 1, "traceEvents": _step(1, 0, 100, 40)}).encode()
    w = summarize_analysis(analyze(decode_bytes(trace)))
    assert w.spread == {} and w.layers[0].spread == {} and all(p.spread == {} for p in w.layers[0].phases)


def test_cli_table_marks_noisy_figures(worker: Any) -> None:
    from tb_attn_plugin.cli.report import summary_table
    from tb_attn_plugin.types.schema import RunSummary

    text = summary_table([RunSummary(run="r", metadata=None, workers=[worker], errors=[])])
    assert "steps 100.000-200.000 ms" not in text  # in ms: the times are µs
    assert "attention cpu time per step: mean 0.140 ms, steps 0.100-0.200 ms over 3 (noisy" in text
    row = {name: next(line for line in text.splitlines() if f" {name} " in line)
           for name in ("qk_matmul", "other", "= unknown")}
    assert "~0.140" in row["= unknown"]  # the block: 100-200 µs about a median of 120
    assert "~0.099" in row["other"]  # 60-156 µs, mean 98.667 µs
    assert " 0.041 " in row["qk_matmul"] and "~0.041" not in row["qk_matmul"]  # 40-44 µs: 10 %


def test_measured_heads_carry_their_spread() -> None:
    """Two heads per block: H0 takes 30 µs in every step, H1 20 then 50 µs."""
    events = []
    for n, (t0, h1) in enumerate(((0, 20), (1000, 50)), start=1):
        events += [_x("user_annotation", f"ProfilerStep#{n}", t0, 1000),
                   _x("user_annotation", "tbattn.v1/L0", t0 + 10, 200),
                   _x("user_annotation", "tbattn.v1/L0/H0", t0 + 20, 30),
                   _x("cpu_op", "aten::bmm", t0 + 21, 20),
                   _x("user_annotation", "tbattn.v1/L0/H1", t0 + 60, h1),
                   _x("cpu_op", "aten::bmm", t0 + 61, 10)]
    w = summarize_analysis(analyze(decode_bytes(json.dumps({"schemaVersion": 1, "traceEvents": events}).encode())))
    heads = {hd.head: hd for hd in w.layers[0].heads}
    assert not heads[0].derived and set(heads[0].spread) == {"cpu_us"}
    h0, h1 = heads[0].spread["cpu_us"], heads[1].spread["cpu_us"]
    assert (h0.lo, h0.hi, h0.noisy) == (30, 30, False)
    assert (h1.lo, h1.median, h1.hi, h1.noisy) == (20, 35, 50, True) and heads[1].cpu_us == 35


def test_quantiles_equal_numpys_bit_for_bit() -> None:
    """``quantile`` replaces np.median and np.percentile (100x slower on a few values): every
    figure must be the same float, for any count of steps and any values, ties and zeros too."""
    rng = np.random.default_rng(7)
    for trial in range(3000):
        n = int(rng.integers(2, 60))
        if trial % 3 == 0:
            v = rng.integers(0, 5, n).astype(np.float64) * 0.1  # ties
        elif trial % 3 == 1:
            v = rng.lognormal(3, 2, n)  # wide, like step times
        else:
            v = rng.uniform(-1e6, 1e6, n)
        ordered = sorted(v.tolist())
        assert quantile(ordered, 0.5) == float(np.median(v))
        lo, hi = (float(x) for x in np.percentile(v, [25, 75]))
        assert (quantile(ordered, 0.25), quantile(ordered, 0.75)) == (lo, hi), (n, v)
        s = spread(v)
        assert s is not None and s.median == float(np.median(v))


def test_the_two_medians_on_odd_even_and_empty_inputs() -> None:
    """``median`` is the ordinary one (the mean of the two middle values), ``median_low`` always one
    of the values (the lower middle one); neither has a value for no values."""
    assert median([3.0, 1.0, 2.0]) == 2.0 and median_low([3.0, 1.0, 2.0]) == 2.0  # odd: the middle value
    assert median([4.0, 1.0, 3.0, 2.0]) == 2.5  # even: (2 + 3) / 2
    assert median_low([4.0, 1.0, 3.0, 2.0]) == 2.0  # even: the lower of 2 and 3
    assert median([30.0, 20.0]) == 25.0 and median_low([30.0, 20.0]) == 20.0
    assert median([7.0]) == median_low([7.0]) == 7.0
    assert median(x for x in (5.0, 1.0, 9.0)) == 5.0  # any iterable, a generator too
    assert lower_middle(["a", "b", "c", "d"]) == "b" and lower_middle(["a", "b", "c"]) == "b"
    for empty in (median, median_low):
        with pytest.raises(ValueError, match="no values"):
            empty([])
    with pytest.raises(ValueError, match="no values"):
        lower_middle([])
    with pytest.raises(ValueError, match="no values"):
        quantile([], 0.5)


def test_percentiles_are_numpys_linear_quantiles() -> None:
    """``percentiles`` (the gate's bootstrap interval) and ``quantile`` give the same figures."""
    v = np.array([5.0, 1.0, 4.0, 2.0, 3.0, 10.0, 0.5])
    assert percentiles(v, (2.5, 50.0, 97.5)) == [quantile(sorted(v.tolist()), q) for q in (0.025, 0.5, 0.975)]
    assert percentiles(v, [50]) == [median(v.tolist())] == [3.0]


def test_power_fit() -> None:
    from tb_attn_plugin.analysis.common.spread import fit_power

    fit = fit_power([1, 2, 4, 8], [3.0, 12.0, 48.0, 192.0])
    assert fit is not None and fit.k == pytest.approx(2.0) and fit.a == pytest.approx(3.0)
    assert fit.r2 == pytest.approx(1.0) and fit.points == 4
    noisy = fit_power([1, 2, 4], [3.0, 20.0, 30.0])
    assert noisy is not None and noisy.r2 is not None and noisy.r2 < 0.95
    # Two points: any line passes through them; the fit reports no quality rather than R² 1.00.
    two = fit_power([256, 512], [1.0, 3.7])
    assert two is not None and two.r2 is None and two.points == 2 and two.k == pytest.approx(math.log2(3.7))
    assert fit_power([4, 4], [1.0, 2.0]) is None
