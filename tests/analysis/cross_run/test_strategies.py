"""Linear, random-feature and int8 attention in the analysis (backends, FLOPs, IOPs, S×S bytes,
quantization overhead) and the strategies view's engine (rows, fits, crossovers, Pareto front,
findings), on runner traces (``strategies_logdir``) and on synthetic runs with known curves."""

from __future__ import annotations

import csv
import io
import itertools
import json
from pathlib import Path

import msgspec
import pytest
from helpers import STRATEGIES, STRATEGY_IMPLS, STRATEGY_SEQS, profile_run
from webtools import get_json, plugin_client

from runner.variants import CHUNK
from tb_attn_plugin.analysis.common.spread import fit_power
from tb_attn_plugin.analysis.cross_run.strategies import accuracy_of, crossover, pareto_front, strategies
from tb_attn_plugin.analysis.findings import quant_findings
from tb_attn_plugin.cli.main import main
from tb_attn_plugin.engine.loader import Loader, resolve_runs
from tb_attn_plugin.types.results import Fit
from tb_attn_plugin.types.schema import LayerStats, RunSummary, Spread

B, H, D = STRATEGIES["batch"], STRATEGIES["heads"], STRATEGIES["d_model"] // STRATEGIES["heads"]
M = 256  # performer's default features


@pytest.fixture(scope="module")
def summaries(strategies_logdir: Path) -> dict[str, RunSummary]:
    loader = Loader()
    return {r.name: loader.summarize_run(r) for r in resolve_runs(str(strategies_logdir))}


def _layer(summaries: dict[str, RunSummary], impl: str, seq: int) -> LayerStats:
    return summaries[f"builtin/{impl}/seq{seq}"].workers[0].layers[0]


def _phase_flops(layer: LayerStats) -> dict[str, float]:
    return {p.phase: p.flops for p in layer.phases if p.flops}


@pytest.mark.parametrize("seq", STRATEGY_SEQS)
def test_linear_elu_flops_are_the_chunked_formulas(summaries: dict[str, RunSummary], seq: int) -> None:
    """Causal linear attention in chunks of C: the C×C products within each chunk (as many as
    S/C chunks), the per-chunk state φ(K)ᵀV and its read φ(Q)·state (S·D·Dv each), and the
    normalizer φ(Q)·z (S·D): one multiply-add is 2 FLOPs."""
    c = min(CHUNK, seq)
    bh = B * H
    assert _phase_flops(_layer(summaries, "linear-elu", seq)) == {
        "qkv_proj": 2 * seq * (H * D) * 3 * (H * D) * B,
        "qk_matmul": 2 * bh * seq * c * D,
        "av_matmul": 2 * bh * seq * c * D,
        "kv_state": 2 * bh * seq * D * D * 2 + 2 * bh * seq * D,
        "out_proj": 2 * B * seq * (H * D) * (H * D),
    }
    assert _layer(summaries, "linear-elu", seq).backend == "linear"


def test_performer_flops_add_the_random_features(summaries: dict[str, RunSummary]) -> None:
    """The feature map projects q and k on M random directions (S·D·M each); the state and the
    chunks then work on M features instead of D."""
    seq, bh = 256, B * H
    flops = _phase_flops(_layer(summaries, "performer", seq))
    assert flops["feature_map"] == 2 * (2 * bh * seq * D * M)
    assert flops["kv_state"] == 2 * bh * seq * M * D * 2 + 2 * bh * seq * M
    assert flops["qk_matmul"] == 2 * bh * seq * CHUNK * M
    assert flops["av_matmul"] == 2 * bh * seq * CHUNK * D
    assert _layer(summaries, "performer", seq).backend == "performer"


def test_linear_attention_work_grows_linearly(summaries: dict[str, RunSummary]) -> None:
    core = [sum(f for p, f in _phase_flops(_layer(summaries, "linear-elu", s)).items()
                if p not in ("qkv_proj", "out_proj")) for s in (128, 256)]
    assert core[1] == 2 * core[0]
    naive = [_phase_flops(_layer(summaries, "naive", s))["qk_matmul"] for s in (128, 256)]
    assert naive[1] == 4 * naive[0]


def test_int8_qk_counts_integer_ops_apart_from_flops(summaries: dict[str, RunSummary]) -> None:
    seq = 256
    layer = _layer(summaries, "int8-qk", seq)
    qk = next(p for p in layer.phases if p.phase == "qk_matmul")
    assert qk.iops == 2 * B * H * seq * seq * D and qk.flops == 0
    assert layer.iops == qk.iops
    assert _phase_flops(layer)["av_matmul"] == 2 * B * H * seq * seq * D
    assert layer.backend == "int8-qk" and "aten::_int_mm" in layer.backend_evidence
    assert _layer(summaries, "naive", seq).iops == 0


def test_sxs_bytes_none_for_linear_attention(summaries: dict[str, RunSummary]) -> None:
    for seq in STRATEGY_SEQS:
        for impl in ("linear-elu", "performer"):
            layer = _layer(summaries, impl, seq)
            assert layer.sxs_bytes == 0 and layer.score_tensor_bytes == 0, (impl, seq)
        # The int32 scores, three fp32 tensors in dequantize (the cast, the scales' outer product, their
        # product), then scale, mask and softmax: seven (B, H, S, S) tensors of 4 bytes per forward.
        assert _layer(summaries, "int8-qk", seq).sxs_bytes == 7 * B * H * seq * seq * 4


def test_unscoped_int8_qk_is_found_by_its_ops(tmp_path: Path) -> None:
    """_int_mm feeding a softmax: distinctive without our scopes."""
    profile_run(tmp_path, "r", **{**STRATEGIES, "impl": "int8-qk", "seq": 64, "scopes": False})
    (run,) = resolve_runs(str(tmp_path))
    w = Loader().summarize_run(run).workers[0]
    assert w.inferred and {x.backend for x in w.layers} == {"int8-qk"}
    assert all(x.iops == 2 * B * H * 64 * 64 * D for x in w.layers)


def test_quantization_share_and_its_finding(summaries: dict[str, RunSummary], monkeypatch: pytest.MonkeyPatch,
                                            strategies_logdir: Path) -> None:
    w = summaries["builtin/int8-qk/seq64"].workers[0]
    layer = w.layers[0]
    times = {p.phase: p.cpu_us for p in layer.phases}
    share = quant_findings.quant_share(times, layer.cpu_us)
    assert share == pytest.approx((times["quantize"] + times["dequantize"]) / layer.cpu_us)
    row = next(x for g in strategies(list(summaries.values())).groups for x in g.rows
               if x.run == "builtin/int8-qk/seq64")
    blocks = sum(x.cpu_us for x in w.layers)
    spent = sum(p.cpu_us for x in w.layers for p in x.phases if p.phase in ("quantize", "dequantize"))
    assert row.quant_share == pytest.approx(spent / blocks)
    assert quant_findings.quant_share({"qk_matmul": 1.0}, 2.0) is None
    # The rule fires over its threshold and only then: recomputed with the threshold on either side.
    for threshold, fires in ((share / 2, True), (1.0, False)):
        monkeypatch.setattr(quant_findings, "QUANT_SHARE", threshold)
        (run,) = [r for r in resolve_runs(str(strategies_logdir)) if r.name == "builtin/int8-qk/seq64"]
        found = [f for f in Loader().summarize_run(run).workers[0].findings if f.id == "quantization-overhead"]
        assert bool(found) == fires
        if fires:
            assert found[0].evidence.layers == [x.layer for x in w.layers if quant_findings.quant_share(
                {p.phase: p.cpu_us for p in x.phases}, x.cpu_us) > threshold]


# -- crossover, fits and the Pareto front, exact on known curves ---------------------------------

def _synthetic(summaries: dict[str, RunSummary], impl: str, seq: int, time_us: float, rel: float | None
               ) -> RunSummary:
    """The real run of ``impl`` at 64 tokens, as if at ``seq`` with attention taking ``time_us``."""
    base = summaries[f"builtin/{impl}/seq64"]
    meta = dict(base.metadata or {})
    meta["config"] = {**dict(meta["config"]), "impl": impl, "seq": seq}  # type: ignore[dict-item]
    meta["impl"] = impl
    if rel is None:
        meta.pop("accuracy", None)
    else:
        meta["accuracy"] = {"rel_l1": rel, "max_abs": rel, "cosine": 1 - rel, "loss_diff": rel / 10}
    # A made-up time has no steps: no spread, so no noise (the real run's steps are not these). Two
    # repeats each, in turns with every other synthetic run (run i starts at i and 1000 + i), so that
    # the times decide what they say rather than fall within the drift between runs.
    i = next(_RUN_ORDER)
    meta["repeats"] = [{"started_ns": i}, {"started_ns": 1000 + i}]
    workers = [msgspec.structs.replace(w, attention_cpu_us=time_us, attention_device_us=0.0, spread={}, per_step=[],
                                       span=str(start + 1))
               for w in base.workers[:1] for start in (i, 1000 + i)]
    return msgspec.structs.replace(base, run=f"{impl}/seq{seq}", metadata=meta, workers=workers)


_RUN_ORDER = itertools.count()


def test_crossover_is_exact_on_known_curves(summaries: dict[str, RunSummary]) -> None:
    """Baseline 0.001·L² µs against linear 2·L µs: equal at L = 2000 exactly."""
    seqs = (256, 512, 1024, 4096, 8192)
    runs = [_synthetic(summaries, "naive", s, 1e-3 * s * s, 0.0) for s in seqs]
    runs += [_synthetic(summaries, "linear-elu", s, 2.0 * s, 0.05) for s in seqs]
    (group,) = strategies(runs).groups
    assert group.baseline == "naive"
    lin = next(s for s in group.series if s.strategy == "linear-elu")
    assert lin.fit is not None and lin.fit.k == pytest.approx(1.0) and lin.fit.a == pytest.approx(2.0)
    assert lin.crossover is not None and lin.crossover.faster == "above" and not lin.crossover.extrapolated
    assert lin.crossover.seq == pytest.approx(2000.0, rel=1e-9)
    rows = {(x.strategy, x.seq): x for x in group.rows}
    assert rows[("linear-elu", 8192)].speedup == pytest.approx(1e-3 * 8192 / 2)
    assert rows[("naive", 8192)].speedup == 1.0


def test_crossover_directions_and_parallel_fits() -> None:
    a, b = Fit(a=1.0, k=2.0, r2=1.0, points=3), Fit(a=100.0, k=1.0, r2=1.0, points=3)
    c = crossover(a, b, [10, 1000], "x", "y")
    assert c.seq == pytest.approx(100.0) and c.faster == "below" and not c.extrapolated
    c = crossover(b, a, [10, 50], "y", "x")
    assert c.faster == "above" and c.extrapolated and "outside the measured 10–50" in c.text
    c = crossover(Fit(a=1.0, k=1.0, r2=None, points=2), Fit(a=2.0, k=1.01, r2=None, points=2), [10, 100], "p", "q")
    assert c.seq is None and c.faster == "always"
    # Fits that meet below one token: slower (or faster) at every length, not "below 0 tokens".
    c = crossover(Fit(a=10.0, k=1.0, r2=None, points=2), Fit(a=1.0, k=0.5, r2=None, points=2), [64, 256], "p", "q")
    assert c.seq is None and c.faster == "never" and "slower than q at every length" in c.text
    c = crossover(Fit(a=1.0, k=0.5, r2=None, points=2), Fit(a=10.0, k=1.0, r2=None, points=2), [64, 256], "p", "q")
    assert c.seq is None and c.faster == "always"


def test_fit_of_a_power_law_is_exact() -> None:
    fit = fit_power([64.0, 128.0, 256.0], [3 * x**1.5 for x in (64.0, 128.0, 256.0)])
    assert fit is not None and fit.k == pytest.approx(1.5) and fit.a == pytest.approx(3.0)


def test_pareto_front() -> None:
    # (speed-up, error): faster and more accurate wins; ties on both keep both.
    pts = [(1.0, 0.0), (2.0, 0.0), (3.0, 0.1), (2.5, 0.2), (3.0, 0.1), (0.5, 0.3)]
    assert pareto_front(pts) == [False, True, True, False, True, False]


def test_pareto_front_of_real_runs_treats_rounding_as_exact(summaries: dict[str, RunSummary]) -> None:
    (group,) = strategies(list(summaries.values())).groups
    for seq in STRATEGY_SEQS:
        at = [x for x in group.rows if x.seq == seq and x.accuracy is not None]
        fastest_exact = max((x for x in at if x.exact), key=lambda x: x.speedup or 0.0)
        assert fastest_exact.pareto
        for x in at:
            assert x.accuracy is not None
            if x.exact and x is not fastest_exact:
                assert not x.pareto  # rounding-level errors tie: the faster exact one dominates
            dominated = any((y.speedup or 0) > (x.speedup or 0) and y.accuracy and y.accuracy.rel_l1 < x.accuracy.rel_l1
                            for y in at)
            if dominated:
                assert not x.pareto


def test_not_measured_is_never_zero(summaries: dict[str, RunSummary]) -> None:
    (group,) = strategies(list(summaries.values())).groups
    row = next(x for x in group.rows if x.run == "builtin/sdpa-math/seq256")
    assert row.accuracy is None and not row.pareto
    for bad in ({"rel_l1": float("nan"), "max_abs": 0, "cosine": 1}, {"rel_l1": "0", "max_abs": 0, "cosine": 1},
                {"rel_l1": True, "max_abs": 0, "cosine": 1}, {"rel_l1": -1, "max_abs": 0, "cosine": 1},
                {"rel_l1": 0.1, "max_abs": 0, "cosine": 7}, {"rel_l1": 10**400, "max_abs": 0, "cosine": 1},
                [1, 2], "x", None):
        assert accuracy_of({"accuracy": bad}) is None, bad
    assert accuracy_of({"accuracy": {"rel_l1": 0.1, "max_abs": 1, "cosine": 0.9, "loss_diff": "x"}}) is not None


# -- findings -------------------------------------------------------------------------------------

def test_below_crossover_quotes_the_fitted_crossover(summaries: dict[str, RunSummary]) -> None:
    seqs = (512, 1024, 2048)
    runs = [_synthetic(summaries, "sdpa", s, 1e-3 * s * s, 0.0) for s in seqs]
    runs += [_synthetic(summaries, "performer", s, 8.0 * s, 0.05) for s in seqs]
    (group,) = strategies(runs).groups
    (f,) = [f for f in group.findings if f.id == "below-crossover"]
    # 8·L = 0.001·L² at L = 8000: slower at every measured length.
    assert f.evidence.details["crossover_seq"] == 8000
    assert f.evidence.details["exact"] == "sdpa" and f.evidence.details["seq"] == 2048
    assert "above about 8,000 tokens" in f.explanation
    # Once faster than the fastest exact implementation, no finding.
    runs += [_synthetic(summaries, "performer", 16384, 8.0 * 16384, 0.05),
             _synthetic(summaries, "sdpa", 16384, 1e-3 * 16384**2, 0.0)]
    (group,) = strategies(runs).groups
    (f,) = [f for f in group.findings if f.id == "below-crossover"]
    assert f.evidence.details["seq"] == 2048


def test_accuracy_cost_quotes_the_speedup_and_respects_tolerances(summaries: dict[str, RunSummary]) -> None:
    runs = [_synthetic(summaries, "sdpa", 1024, 1000.0, 0.0), _synthetic(summaries, "linear-elu", 1024, 400.0, 0.03)]
    (group,) = strategies(runs).groups
    (f,) = [f for f in group.findings if f.id == "accuracy-cost"]
    assert f.evidence.details["speedup"] == pytest.approx(2.5) and f.evidence.details["rel_l1"] == 0.03
    assert "2.50× as fast as sdpa" in f.explanation and f.severity == "medium"
    (group,) = strategies(runs, rel_tol=0.05, loss_tol=0.01).groups
    assert not [f for f in group.findings if f.id == "accuracy-cost"]
    (group,) = strategies(runs, rel_tol=0.05, loss_tol=0.001).groups  # loss_diff 0.003
    assert [f for f in group.findings if f.id == "accuracy-cost"]


def test_int8_scores_finding_points_to_a_fused_int8_kernel(summaries: dict[str, RunSummary]) -> None:
    w = summaries["builtin/int8-qk/seq256"].workers[0]
    (f,) = [f for f in w.findings if f.id == "sxs-materialized"]
    assert "fused int8 kernel" in f.suggestion
    assert f.evidence.bytes == pytest.approx(sum(x.sxs_bytes for x in w.layers))


def test_real_runs_have_both_findings(summaries: dict[str, RunSummary]) -> None:
    (group,) = strategies(list(summaries.values())).groups
    ids = {(f.id, f.title.split(" ")[0]) for f in group.findings}
    assert ("accuracy-cost", "linear-elu") in ids and ("accuracy-cost", "performer") in ids
    assert ("accuracy-cost", "int8-qk") not in ids  # 0.2% < 1%
    assert group.clock == "cpu" and group.strategies == sorted(group.strategies)
    assert {x.strategy for x in group.rows} >= {"naive", "sdpa", "linear-elu", "performer M=256", "int8-qk"}


# -- the CLI and the route ------------------------------------------------------------------------

def test_cli_strategies(strategies_logdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["strategies", str(strategies_logdir), "--baseline", "sdpa", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "tb-attn.strategies/1" and doc["groups"][0]["baseline"] == "sdpa"
    assert main(["strategies", str(strategies_logdir), "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert len(rows) == len(STRATEGY_IMPLS) * len(STRATEGY_SEQS) + 1
    math_row = next(r for r in rows if r["run"] == "builtin/sdpa-math/seq256")
    assert math_row["rel_l1"] == "" and math_row["speedup"] != ""
    assert main(["strategies", str(strategies_logdir)]) == 0
    out = capsys.readouterr().out
    assert "not measured" in out and "naive *" in out
    assert out.startswith("the error column: ")  # a legend, not an error
    # Linear attention is slower than exact at these short lengths, unless noisy steps (marked "~")
    # keep the finding from resting on them.
    assert "below-crossover" in out or " ~ " in out
    for bad in (["--rel-tol", "-1"], ["--loss-tol", "inf"], ["--baseline", "nope"], ["--runs", "nope"]):
        assert main(["strategies", str(strategies_logdir), *bad]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "error:" in err


def test_route(strategies_logdir: Path) -> None:
    client = plugin_client(strategies_logdir)
    runs = ",".join(f"builtin/{i}/seq{s}" for i in STRATEGY_IMPLS for s in STRATEGY_SEQS)
    url = f"/data/plugin/tb_attn/strategies?runs={runs}"
    body = get_json(client, url + "&baseline=sdpa&rel_tol=0.5")
    assert body["schema"] == "tb-attn.strategies/1" and body["rel_tol"] == 0.5
    assert body["groups"][0]["baseline"] == "sdpa"
    assert not [f for f in body["groups"][0]["findings"] if f["id"] == "accuracy-cost"]
    for bad in ("&rel_tol=nan", "&rel_tol=-2", "&loss_tol=x"):
        assert client.get(url + bad).status_code == 400
    assert client.get("/data/plugin/tb_attn/strategies").status_code == 400



def test_no_crossover_from_two_lengths_or_noisy_steps(summaries: dict[str, RunSummary]) -> None:
    """Two lengths fit any line: no crossover is claimed, and the series says why. A noisy run
    (steps spread over 20% of their median) makes neither a crossover nor a below-crossover finding."""
    runs = [_synthetic(summaries, "naive", s, 1e-3 * s * s, 0.0) for s in (256, 512)]
    runs += [_synthetic(summaries, "linear-elu", s, 2.0 * s, 0.05) for s in (256, 512)]
    (group,) = strategies(runs).groups
    lin = next(s for s in group.series if s.strategy == "linear-elu")
    assert lin.crossover is None and "fewer than 3 lengths" in lin.crossover_note
    seqs = (256, 512, 1024)
    noisy = Spread(median=1.0, lo=0.5, hi=2.0, kind="range", steps=5, noisy=True)
    runs = [_synthetic(summaries, "naive", s, 1e-3 * s * s, 0.0) for s in seqs]
    runs += [msgspec.structs.replace(r, workers=[msgspec.structs.replace(w, spread={"attention_cpu_us": noisy})
                                                 for w in r.workers])
             for r in (_synthetic(summaries, "linear-elu", s, 2.0 * s, 0.05) for s in seqs)]
    (group,) = strategies(runs).groups
    lin = next(s for s in group.series if s.strategy == "linear-elu")
    assert lin.crossover is None and "noisy" in lin.crossover_note
    assert all(x.noisy for x in group.rows if x.strategy == "linear-elu")
    assert not [f for f in group.findings if f.id == "below-crossover"]


def test_one_run_each_claims_no_winner_drift_could_make(summaries: dict[str, RunSummary]) -> None:
    """The same curves with one run a length (no repeats): 15x slower at 512 tokens is within what
    drift between runs makes (100x), so no below-crossover finding, no crossover claimed, and each
    speed-up says it is undecided."""
    seqs = (512, 1024, 2048)
    runs = [_synthetic(summaries, "sdpa", s, 1e-3 * s * s, 0.0) for s in seqs]
    runs += [_synthetic(summaries, "performer", s, 8.0 * s, 0.05) for s in seqs]
    alone = [msgspec.structs.replace(r, metadata={k: v for k, v in (r.metadata or {}).items() if k != "repeats"},
                                     workers=r.workers[:1]) for r in runs]
    (group,) = strategies(alone).groups
    assert not [f for f in group.findings if f.id == "below-crossover"]
    performer = next(s for s in group.series if s.strategy.startswith("performer"))
    assert performer.crossover is None and performer.crossover_note.startswith(
        "no crossover: at 512, 1024, 2048 the runs cannot tell")
    assert "one run each, not profiled in turns" in performer.crossover_note
    row = next(x for x in group.rows if x.strategy.startswith("performer") and x.seq == 512)
    assert row.speedup_verdict is not None and not row.speedup_verdict.decided
    assert row.speedup == pytest.approx(1e-3 * 512 * 512 / (8.0 * 512))
