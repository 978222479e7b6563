"""Compare on a runner sweep (the ``sweep`` fixture): ratios within like-for-like groups, baselines,
headlines that claim only what the runs can tell, the API, the CLI and the tab's routes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import msgspec
import pytest
from webtools import get_json, plugin_client

from tb_attn_plugin.analysis.common.configs import distinct_labels, group_label
from tb_attn_plugin.analysis.cross_run.compare import compare
from tb_attn_plugin.analysis.cross_run.repeats import DRIFT_BOUND
from tb_attn_plugin.cli.main import main
from tb_attn_plugin.engine.loader import Loader, resolve_runs

SEQS = (32, 64, 128)  # the sweep fixture's (conftest.SWEEP_SEQS)

def _summaries(logdir: Path) -> list:  # type: ignore[type-arg]
    loader = Loader()
    return [loader.summarize_run(r) for r in resolve_runs(str(logdir))]


def test_compare_ratios_and_groups(sweep: Path) -> None:
    result = msgspec.to_builtins(compare(_summaries(sweep), baseline="sdpa/seq128"))
    facts = {f["run"]: f for f in result["runs"]}
    assert result["baseline"] == "sdpa/seq128" and not result["errors"]
    base, naive = facts["sdpa/seq128"], facts["naive/seq128"]
    assert base["ratio"]["alloc_bytes"] == 1.0
    assert naive["impl"] == "naive" and naive["seq"] == 128 and naive["backend"] == "naive"
    assert naive["ratio"]["alloc_bytes"] > 1.5  # the S×S scores
    assert naive["sxs_bytes"] > 0 and base["sxs_bytes"] == 0
    assert naive["ops_per_forward"] > base["ops_per_forward"]  # matmul, mul, masked_fill, softmax, matmul vs SDPA
    assert set(naive["phases"]) >= {"qk_matmul", "softmax", "av_matmul"} and "sdpa" in base["phases"]
    assert "hidden-copy" in naive["findings"] and "hidden-copy" not in base["findings"]
    with pytest.raises(ValueError, match="baseline"):
        compare(_summaries(sweep), baseline="nope")


def test_ratios_within_groups_against_the_baselines_implementation(sweep: Path) -> None:
    """Ratios never cross a configuration: naive at 128 is against SDPA at 128 when SDPA at 32 is
    the baseline, and each group's baseline has ratios of 1."""
    summaries = _summaries(sweep)
    result = compare(summaries, baseline="sdpa/seq32")
    facts = {f.run: f for f in result.runs}
    for seq in SEQS:
        naive, sdpa = facts[f"naive/seq{seq}"], facts[f"sdpa/seq{seq}"]
        assert naive.baseline == sdpa.baseline == f"sdpa/seq{seq}"
        assert naive.group == sdpa.group == f"builtin, seq {seq}, float32, training"
        assert sdpa.ratio.attention_cpu_us == 1.0 and sdpa.ratio.alloc_bytes == 1.0
        assert naive.ratio.attention_cpu_us == pytest.approx(naive.attention_cpu_us / sdpa.attention_cpu_us)
        assert naive.ratio.alloc_bytes == pytest.approx(naive.alloc_bytes / sdpa.alloc_bytes)
        assert naive.ratio.peak_bytes == pytest.approx(naive.peak_bytes / sdpa.peak_bytes)
        assert sdpa.why_slower == []


def test_default_baseline_is_the_first_by_name_in_any_order(sweep: Path) -> None:
    """No baseline named: the first run by name, whatever order the runs came in (the CLI lists
    them sorted, the tab in the order they were picked), and its implementation in every group."""
    summaries = _summaries(sweep)
    forward = compare(summaries)
    backward = compare(list(reversed(summaries)))
    assert forward.baseline == backward.baseline == "naive/seq128"  # "naive/seq128" < "naive/seq32"
    assert {f.run: f.baseline for f in forward.runs} == {f.run: f.baseline for f in backward.runs} == {
        f"{impl}/seq{seq}": f"naive/seq{seq}" for impl in ("naive", "sdpa") for seq in SEQS}
    # Runs of different lengths are not like for like: each is alone.
    apart = compare([s for s in summaries if s.run in ("sdpa/seq32", "sdpa/seq64") or s.run.startswith("naive/seq1")])
    assert {f.run: f.baseline for f in apart.runs} == {"naive/seq128": None, "sdpa/seq32": None,
                                                       "sdpa/seq64": None}
    # Alone in its group (no other run of its model, sizes and configuration): no ratios, and why.
    (alone,) = [f for f in apart.runs if f.run == "sdpa/seq32"]
    assert alone.unpaired is not None and alone.unpaired.startswith("no ratios: no other run here has its model")
    assert all(v is None for v in msgspec.to_builtins(alone.ratio).values())


def test_default_baseline_is_an_exact_run(sweep: Path) -> None:
    """An approximate run first by name (int8 scores, as "int8-qk" sorts before "naive") is no
    yardstick: the default baseline is the first exact run by name."""
    summaries = _summaries(sweep)
    naive = next(s for s in summaries if s.run == "naive/seq32")
    approx = msgspec.structs.replace(
        naive, run="int8-qk/seq32", metadata={**(naive.metadata or {}), "config": {
            **dict((naive.metadata or {})["config"]), "impl": "int8-qk"}},  # type: ignore[dict-item]
        workers=[msgspec.structs.replace(w, backend="int8-qk", layers=[
            msgspec.structs.replace(x, backend="int8-qk") for x in w.layers]) for w in naive.workers])
    result = compare([approx, *summaries])
    assert result.baseline == "naive/seq128"
    assert compare([approx]).baseline == "int8-qk/seq32"  # no exact run: the first by name


def test_attention_spread_in_compare(sweep: Path) -> None:
    """Each run carries its attention time's spread over steps, the same as its summary's."""
    summaries = {s.run: s for s in _summaries(sweep)}
    for f in compare(list(summaries.values())).runs:
        w = summaries[f.run].workers[0]
        assert f.attention_spread == w.spread["attention_cpu_us"]
        assert f.attention_spread.lo <= f.attention_spread.median <= f.attention_spread.hi


def test_headline_per_configuration(sweep: Path) -> None:
    """One sentence per group of runs that differ only in their implementation, with the ratios
    of the fastest against the others computed from the same figures as the table."""
    result = compare(_summaries(sweep))
    assert [h.group for h in result.headlines] == [f"builtin, seq {s}, float32, training" for s in SEQS]
    facts = {f.run: f for f in result.runs}
    for h in result.headlines:
        (other,) = h.versus
        best, slow = facts[h.best], facts[other.run]
        assert h.clock == "CPU" and {best.impl, slow.impl} == {"naive", "sdpa"}
        assert best.attention_cpu_us <= slow.attention_cpu_us
        assert other.time == pytest.approx(slow.attention_cpu_us / best.attention_cpu_us)
        assert other.alloc == pytest.approx(slow.alloc_bytes / best.alloc_bytes)
        assert other.peak == pytest.approx(slow.peak_bytes / best.peak_bytes)
        assert other.time is not None
        if other.time <= DRIFT_BOUND:
            # One run each: the time ratio may be drift's (up to 100x between runs), so no winner is named.
            assert h.sentence.startswith(f"At {h.group}: no implementation is faster for sure (one run each, not "
                                         "profiled in turns: drift between runs makes up to 100x")
            assert f"as measured, {best.impl} spent the least attention CPU time: {other.time:.1f}× less time " \
                   f"than {slow.impl} (within drift), " in h.sentence
            assert not other.time_decided
        else:  # beyond what drift makes: a winner, even from one run each
            assert h.sentence.startswith(f"At {h.group}: {best.impl} spends the least attention CPU time: "
                                         f"{other.time:.1f}× less time than {slow.impl}, ")
            assert other.time_decided
    # At 128 the S×S scores make naive allocate far more than SDPA.
    (big,) = [h for h in result.headlines if h.group.startswith("builtin, seq 128")]
    if big.best_impl == "sdpa":
        assert big.versus[0].alloc is not None and big.versus[0].alloc > 1.5
        assert "× less memory allocated" in big.sentence
    # A single run per group says nothing.
    assert compare(_summaries(sweep)[:1]).headlines == []


def test_cli_compare(sweep: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", str(sweep), "--baseline", "sdpa/seq32"]) == 0
    out = capsys.readouterr().out
    assert "baseline: sdpa/seq32" in out and "naive/seq128" in out and "memory k=" in out
    assert main(["compare", str(sweep), "--runs", "naive/seq32,sdpa/seq32", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [f["run"] for f in doc["compare"]["runs"]] == ["naive/seq32", "sdpa/seq32"]
    assert main(["compare", str(sweep), "--runs", "nope"]) == 2
    assert main(["compare", str(sweep), "--baseline", "nope"]) == 2


def test_routes(sweep: Path) -> None:
    client = plugin_client(sweep)
    base = "/data/plugin/tb_attn"
    # get_json waits out 202s: how long parsing takes must not decide the test.
    body = get_json(client, f"{base}/compare?runs=naive/seq64,sdpa/seq64&baseline=sdpa/seq64")
    assert body["schema"] == "tb-attn.compare/1" and len(body["runs"]) == 2
    body = get_json(client, f"{base}/scaling?runs=" + ",".join(f"{i}/seq{s}" for i in ("naive", "sdpa") for s in SEQS))
    assert len(body["series"]) == 2
    assert client.get(f"{base}/compare").status_code == 400
    assert client.get(f"{base}/compare?runs=nope").status_code == 404
    assert client.get(f"{base}/compare?runs=naive/seq64&baseline=sdpa/seq64").status_code == 400


def test_groups_that_read_alike_are_told_apart() -> None:
    """Generation groups with a static and a dynamic cache had one header for two groups: the
    field that parts them is named, and groups that already read apart keep their labels."""
    base = {"model": "builtin", "mode": "generate", "prompt_len": 128, "new_tokens": 6, "dtype": "float32",
            "impl": "sdpa", "batch": 2}
    static, dynamic = {**base, "kv_cache": "static"}, {**base, "kv_cache": "dynamic"}
    label = group_label(base)
    assert distinct_labels([static, dynamic], but=("impl",)) == [f"{label}, kv_cache static",
                                                                f"{label}, kv_cache dynamic"]
    other = {**base, "dtype": "bfloat16"}
    assert distinct_labels([static, other], but=("impl",)) == [group_label(static), group_label(other)]


def test_a_finding_id_is_one_chip() -> None:
    """far-from-roof comes once per likely cause: Compare shows one chip for it, with the most severe
    one's title, how many more, and their times added."""
    from tb_attn_plugin.analysis.cross_run.compare import _chips
    from tb_attn_plugin.types.schema import Evidence, Finding, WorkerSummary

    def finding(fid: str, severity: str, title: str, us: float) -> Finding:
        return Finding(id=fid, severity=severity, title=title, explanation="", suggestion="",
                       evidence=Evidence(layers=[], ops=[], kernels=[], time_us=us, bytes=0.0, details={}))

    w = WorkerSummary(file="f", worker="w", span=None, device="cpu", inferred=False, backend="sdpa", steps=[1],
                      step_count=1, step_cpu_us=1, step_device_us=0, attention_cpu_us=1, attention_device_us=0,
                      attention_share_cpu=None, attention_share_device=None, layers=[], per_step=[], diagnostics={},
                      notes=[], findings=[finding("hidden-copy", "medium", "copy", 5.0),
                                          finding("far-from-roof", "low", "sdpa far", 10.0),
                                          finding("far-from-roof", "low", "softmax far", 4.0)])
    chips = _chips(w)
    assert [(c.id, c.title, c.time_us) for c in chips] == [("hidden-copy", "copy", 5.0),
                                                           ("far-from-roof", "sdpa far (and 1 more)", 14.0)]
    # The run's finding ids (the CLI's "findings" column) name each once too.
    from tb_attn_plugin.analysis.cross_run.compare import run_facts
    from tb_attn_plugin.types.schema import RunSummary

    run = RunSummary(run="r", metadata={}, workers=[w], errors=[])
    assert run_facts(run).findings == ["hidden-copy", "far-from-roof"]


def test_unrelated_models_are_listed_without_ratios(tmp_path: Path) -> None:
    """The issue's log directory: a Qwen3 decode trace and an SD 3.5 diffusion trace (no metadata)
    are different models, as their layers' shapes say: each is alone, with no ratio against the
    other; and a run of the same model (a copy) is set against it."""
    production = Path(__file__).resolve().parents[4] / "shared" / "production-traces"
    for name in ("tracelens_sglang_qwen3-8b_mi300_decode_bs32_graphs.json.gz",
                 "tracelens_xdit_sd3.5_mi300_diffusion.json.gz"):
        (tmp_path / name.split("_")[1]).mkdir()
        shutil.copy(production / name, tmp_path / name.split("_")[1] / "w.1.pt.trace.json.gz")
    shutil.copytree(tmp_path / "xdit", tmp_path / "xdit-again")
    result = compare(_summaries(tmp_path))
    facts = {f.run: f for f in result.runs}
    assert facts["sglang"].baseline is None and facts["sglang"].unpaired is not None
    assert all(v is None for v in msgspec.to_builtins(facts["sglang"].ratio).values())
    assert facts["xdit"].baseline == facts["xdit-again"].baseline == "xdit"
    assert facts["xdit-again"].group == "the same model as xdit (its layers' shapes)"
    assert facts["xdit-again"].ratio.attention_device_us == pytest.approx(1.0)
    assert result.headlines == []  # no metadata names their implementations


def test_a_measure_the_trace_lacks_is_null_never_zero(sweep: Path) -> None:
    """Memory not recorded (profile_memory=False) is null in the facts and in every ratio."""
    bare = [msgspec.structs.replace(r, workers=[msgspec.structs.replace(w, memory_recorded=False) for w in r.workers])
            for r in _summaries(sweep) if r.run.endswith("seq64")]
    for f in compare(bare).runs:
        assert f.alloc_bytes is None and f.peak_bytes is None
        assert f.ratio.alloc_bytes is None and f.ratio.peak_bytes is None
