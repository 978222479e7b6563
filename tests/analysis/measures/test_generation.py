"""Generation in the analysis (analysis/measures/generation.py, generation_findings.py): roles per step, the
KV cache's bytes against 2·B·H_kv·L·D·elem, decode FLOPs against 4·B·H·L·D, the memory check, the
fit, the four findings, compare's decode column and scaling series, and the CLI's output."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from helpers import GENERATION, profile_run

from tb_attn_plugin.analysis.attribution.analyze import analyze
from tb_attn_plugin.analysis.cross_run.compare import compare
from tb_attn_plugin.analysis.cross_run.scaling import scaling
from tb_attn_plugin.analysis.findings.generation_findings import SMALL_OP_FLOORS
from tb_attn_plugin.analysis.measures.peaks import cpu_op_floor
from tb_attn_plugin.analysis.ops.flops import causal_fraction, op_flops
from tb_attn_plugin.analysis.summary import summarize_trace
from tb_attn_plugin.cli.main import main
from tb_attn_plugin.engine.loader import Loader, load_events, resolve_runs
from tb_attn_plugin.trace.events import OpShapes
from tb_attn_plugin.types.schema import Generation, RunSummary, WorkerSummary

B, H, LAYERS, NEW = GENERATION["batch"], GENERATION["heads"], GENERATION["layers"], GENERATION["new_tokens"]
D = GENERATION["d_model"] // H
ELEM = 4  # float32


@pytest.fixture(scope="module")
def runs(generation_logdir: Path) -> dict[str, RunSummary]:
    loader = Loader()
    return {r.name: loader.summarize_run(r) for r in resolve_runs(str(generation_logdir))}


def _gen(runs: dict[str, RunSummary], name: str) -> Generation:
    g = runs[name].workers[0].generation
    assert g is not None, name
    return g


def _ids(runs: dict[str, RunSummary], name: str) -> list[str]:
    return [f.id for f in runs[name].workers[0].findings]


@pytest.mark.parametrize(("name", "kv_heads", "prompt"), [
    ("builtin/sdpa/gen-p128-n6-dynamic", H, 128), ("builtin/sdpa/gen-p128-n6-static", H, 128),
    ("builtin/sdpa/gen-p128-n6-dynamic-kv1", 1, 128), ("builtin/naive/gen-p128-n6-dynamic", H, 128),
    ("builtin/sdpa/gen-p256-n6-dynamic", H, 256)])
def test_kv_cache_bytes_from_shapes(runs: dict[str, RunSummary], name: str, kv_heads: int, prompt: int) -> None:
    """Every step's K and V are 2·B·H_kv·L·D·elem per layer, L the step's context; the cache
    grows by 2·B·H_kv·D·elem per layer and token."""
    g = _gen(runs, name)
    assert [t.role for t in g.tokens] == ["prefill"] + ["decode"] * NEW
    assert [t.context for t in g.tokens] == list(range(prompt, prompt + NEW + 1))
    assert [t.queries for t in g.tokens] == [prompt] + [1] * NEW
    for t in g.tokens:
        assert t.kv_bytes == LAYERS * 2 * B * kv_heads * t.context * D * ELEM
    last = prompt + NEW
    assert g.kv_bytes_per_layer == 2 * B * kv_heads * last * D * ELEM
    assert g.kv_bytes_per_head == 2 * B * last * D * ELEM
    assert g.kv_bytes_per_token == pytest.approx(LAYERS * 2 * B * kv_heads * D * ELEM)
    assert (g.batch, g.kv_heads, g.heads, g.head_dim, g.kv_dtype) == (B, kv_heads, H, D, "float32")
    assert g.source == "scopes" and g.clock == "cpu" and g.prompt_len == prompt


def test_gqa_divides_the_cache_by_the_group(runs: dict[str, RunSummary]) -> None:
    mha, mqa = _gen(runs, "builtin/sdpa/gen-p128-n6-dynamic"), _gen(runs, "builtin/sdpa/gen-p128-n6-dynamic-kv1")
    assert mha.read_bytes_per_token == H * mqa.read_bytes_per_token
    assert mha.kv_bytes_per_layer == H * mqa.kv_bytes_per_layer


def test_decode_flops_are_four_b_h_l_d(runs: dict[str, RunSummary]) -> None:
    """One query against L keys: q·kᵀ and p·v, 2·B·H·L·D FLOPs each, in the fused call and in naive
    attention's two matmuls alike (the per-layer table over the decode steps: a mean over them)."""
    for name in ("builtin/sdpa/gen-p128-n6-dynamic", "builtin/naive/gen-p128-n6-dynamic"):
        g = _gen(runs, name)
        assert g.decode is not None
        mean_context = sum(t.context for t in g.tokens if t.role == "decode") / NEW
        for layer in g.decode.layers:
            core = sum(p.flops for p in layer.phases if p.phase in ("sdpa", "qk_matmul", "av_matmul"))
            assert core == pytest.approx(4 * B * H * mean_context * D), name


def test_causal_fraction_aligned_to_the_bottom_right() -> None:
    """Hand counts: 4 queries against 10 keys keep 1+2+3+4 = 10 pairs aligned top left (PyTorch's
    is_causal), 7+8+9+10 = 34 aligned bottom right (a KV cache's last 4 positions)."""
    assert causal_fraction(4, 10) == 10 / 40
    assert causal_fraction(4, 10, bottom_right=True) == 34 / 40
    assert causal_fraction(1, 513, bottom_right=True) == 1.0
    assert causal_fraction(10, 4, bottom_right=True) == (0 * 6 + 1 + 2 + 3 + 4) / 40  # the first 6 see no key
    assert causal_fraction(6000, 8000, bottom_right=True) == pytest.approx(
        sum(min(i + 2001, 8000) for i in range(6000)) / (6000 * 8000))
    # _efficient_attention_forward alone (causal_lower_right): (B, S, H, D), custom_mask_type 2.
    shapes = OpShapes(dims=([2, 4, 8, 16], [2, 10, 8, 16], [2, 10, 8, 16]), types=("float",) * 3,
                      concrete=("", "", "", "", "", "", "", "", "", "2"))
    assert op_flops("aten::_efficient_attention_forward", shapes) == 2 * 2 * 8 * 4 * 10 * 32 * 34 / 40


def test_prefill_and_decode_layer_tables(runs: dict[str, RunSummary]) -> None:
    g = _gen(runs, "builtin/sdpa/gen-p128-n6-dynamic")
    assert g.prefill is not None and g.decode is not None
    assert g.prefill.steps == 1 and g.decode.steps == NEW
    assert [layer.layer for layer in g.prefill.layers] == [layer.layer for layer in g.decode.layers] == [0, 1]
    prefill_flops = sum(p.flops for p in g.prefill.layers[0].phases if p.phase == "sdpa")
    assert prefill_flops == pytest.approx(4 * B * H * 128 * 128 * D * causal_fraction(128, 128))
    # The whole run's table is their mean over all steps.
    whole = runs["builtin/sdpa/gen-p128-n6-dynamic"].workers[0].layers[0]
    assert whole.flops == pytest.approx((g.prefill.layers[0].flops + NEW * g.decode.layers[0].flops) / (NEW + 1))


def test_memory_events_agree_with_shapes(runs: dict[str, RunSummary]) -> None:
    dynamic = _gen(runs, "builtin/sdpa/gen-p128-n6-dynamic")
    assert dynamic.kv_memory.startswith("agrees: each decode step allocates the whole cache")
    assert [t.kv_alloc_bytes for t in dynamic.tokens[1:]] == [t.kv_bytes for t in dynamic.tokens[1:]]
    assert dynamic.realloc_bytes_per_token == dynamic.read_bytes_per_token
    static = _gen(runs, "builtin/sdpa/gen-p128-n6-static")
    assert static.kv_memory.startswith("agrees: decode steps allocate nothing")
    assert static.realloc_bytes_per_token == 0 and static.kv_cache == "static"


def test_no_fit_over_a_narrow_range_of_contexts(runs: dict[str, RunSummary]) -> None:
    g = _gen(runs, "builtin/sdpa/gen-p128-n6-dynamic")
    assert g.fit is None and g.per_key_us is None
    assert g.fit_note.startswith("no fit: the decode steps' contexts span 129 to 134 keys")


def test_fit_over_a_wide_range(tmp_path: Path) -> None:
    result = profile_run(tmp_path, "wide", **{**GENERATION, "impl": "sdpa", "prompt_len": 8, "new_tokens": 24,
                                               "seq": 32})
    assert result.status == "ok", result.error
    (run,) = resolve_runs(str(tmp_path / "wide"))
    g = Loader().summarize_run(run).workers[0].generation
    assert g is not None and g.fit is not None and g.fit.points == 24 and g.fit.r2 is not None
    assert (g.fit_note == "") == (g.fit.r2 >= 0.5)  # a poor fit says so
    assert g.per_key_us is not None and g.fixed_us is not None


def test_findings(runs: dict[str, RunSummary]) -> None:
    # What a real run shows whatever the machine's speed: the bytes. The dynamic cache copies itself
    # whole every step, the static one never; the rule's threshold on the copies' share of decode
    # attention time, which a loaded machine moves, is tested on generations whose times the test
    # sets (test_generation_findings.py: test_realloc_thresholds).
    g = _gen(runs, "builtin/sdpa/gen-p128-n6-dynamic")
    assert g.decode is not None and g.realloc_bytes_per_token >= 0.5 * g.decode.kv_bytes > 0
    assert _gen(runs, "builtin/sdpa/gen-p128-n6-static").realloc_bytes_per_token < 0.5 * g.decode.kv_bytes
    assert "kv-cache-realloc" not in _ids(runs, "builtin/sdpa/gen-p128-n6-static")  # no premise, whatever the times
    # 4 KV heads read the cache, where 1 would read a quarter of it: bytes again.
    assert "gqa-opportunity" not in _ids(runs, "builtin/sdpa/gen-p128-n6-dynamic-kv1")
    gqa = next(f for f in runs["builtin/sdpa/gen-p128-n6-dynamic"].workers[0].findings if f.id == "gqa-opportunity")
    assert "1 KV head (multi-query) would read" in gqa.explanation and "75% less" in gqa.explanation


def _with_peak(run_dir: Path, share: float) -> tuple[list[str], WorkerSummary]:
    """The findings of a run's trace with the metadata's copy bandwidth set so that decode's
    achieved bandwidth is ``share`` of it (the measured one depends on the machine's load)."""
    meta = json.loads((run_dir / "tb_attn_run.json").read_text())
    (trace,) = sorted(run_dir.glob("*.pt.trace.json"))
    analysis = analyze(load_events(str(trace)))
    base = summarize_trace(analysis, file=trace.name, worker="w", span=None, metadata=meta).generation
    assert base is not None and base.achieved_bytes_per_s > 0
    meta["peaks"]["copy_bytes_per_s"] = base.achieved_bytes_per_s / share
    summary = summarize_trace(analysis, file=trace.name, worker="w", span=None, metadata=meta)
    return [f.id for f in summary.findings], summary


def test_decode_memory_bound_against_the_reference(generation_logdir: Path) -> None:
    ids, summary = _with_peak(generation_logdir / "builtin/sdpa/gen-p256-n6-dynamic", 0.8)
    found = next(f for f in summary.findings if f.id == "decode-memory-bound")
    assert found.evidence.details["share_of_reference"] == pytest.approx(0.8)
    assert "80% of the copy bandwidth" in found.explanation
    assert "decode-dispatch-bound" not in ids  # the bytes at the copy bandwidth take most of the core's time
    ids, _ = _with_peak(generation_logdir / "builtin/sdpa/gen-p256-n6-dynamic", 0.4)
    assert "decode-memory-bound" not in ids


def test_decode_dispatch_bound(generation_logdir: Path) -> None:
    """A tiny model decoding one token: at 1% of the copy bandwidth the time is per-op cost, and
    the decode rule replaces the generic one."""
    ids, summary = _with_peak(generation_logdir / "builtin/naive/gen-p128-n6-dynamic", 0.01)
    g = summary.generation
    assert g is not None and g.decode is not None
    # Small ops are the premise: an op near the dispatch floor. A loaded machine makes every op slow,
    # and then the rule, rightly, says nothing; it says it exactly when its premise holds.
    meta = json.loads((generation_logdir / "builtin/naive/gen-p128-n6-dynamic" / "tb_attn_run.json").read_text())
    small = g.decode.attention_us / g.decode.launches < SMALL_OP_FLOORS * cpu_op_floor(meta)
    assert ("decode-dispatch-bound" in ids) == small and "dispatch-bound" not in ids
    if not small:
        return
    found = next(f for f in summary.findings if f.id == "decode-dispatch-bound")
    assert found.evidence.details["launches_per_step"] == g.decode.launches
    assert f"{g.decode.launches:.0f} ops of attention" in found.explanation


def test_roles_from_shapes_without_scopes(tmp_path: Path) -> None:
    """No scopes at all (anyone's own loop): a step whose attention calls have one query each is a
    decode step against K's length, one with as many queries as keys is the prefill."""
    result = profile_run(tmp_path, "unscoped", **{**GENERATION, "impl": "sdpa", "prompt_len": 32, "seq": 38,
                                                   "scopes": False})
    assert result.status == "ok", result.error
    (run,) = resolve_runs(str(tmp_path / "unscoped"))
    g = Loader().summarize_run(run).workers[0].generation
    assert g is not None and g.source == "shapes"
    assert [(t.role, t.context) for t in g.tokens] == [("prefill", 32)] + [("decode", 32 + i) for i in range(1, 7)]
    assert g.read_bytes_per_token == LAYERS * 2 * B * H * D * ELEM * sum(range(33, 39)) / 6


def test_compare_decode_column_and_scaling(runs: dict[str, RunSummary]) -> None:
    result = compare(list(runs.values()), baseline="builtin/sdpa/gen-p128-n6-dynamic")
    by = {f.run: f for f in result.runs}
    static = by["builtin/sdpa/gen-p128-n6-static"]
    assert static.decode is not None and static.decode.kv_cache == "static"
    assert static.baseline == "builtin/sdpa/gen-p128-n6-dynamic"  # one group: cache, heads and impl compared
    assert static.ratio.decode_us_per_step == pytest.approx(
        static.decode.us_per_step / by["builtin/sdpa/gen-p128-n6-dynamic"].decode.us_per_step)  # type: ignore[union-attr]
    assert by["builtin/sdpa/gen-p128-n6-dynamic-kv1"].decode.kv_heads == 1  # type: ignore[union-attr]
    series = [s for s in scaling(list(runs.values())).series if s.x == "context"]
    dynamic = next(s for s in series if s.label.startswith("builtin sdpa dynamic cache") and len(s.points) == 3)
    assert [p.seq for p in dynamic.points] == [round(c + 3.5) for c in (64, 128, 256)]
    assert dynamic.memory_fit is not None and dynamic.memory_fit.k == pytest.approx(1.0, abs=0.02)


def test_cli_summarize_and_tokens_csv(generation_logdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = str(generation_logdir / "builtin/sdpa/gen-p128-n6-dynamic")
    assert main(["summarize", run]) == 0
    out = capsys.readouterr().out
    assert "generation (cpu time; steps from scopes): prompt 128 tokens, 6 decode steps" in out
    assert "    prefill step" in out and "    decode  step" in out and "KV cache: 134.0 KiB per layer" in out
    assert main(["summarize", str(generation_logdir), "--format", "csv", "--tokens"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert len(rows) == 6 * (NEW + 1)
    first = [r for r in rows if r["run"] == "builtin/sdpa/gen-p128-n6-dynamic"]
    assert [int(r["context"]) for r in first] == list(range(128, 135))
    assert main(["summarize", run, "--tokens"]) == 2
    assert "--tokens writes CSV" in capsys.readouterr().err
    assert main(["summarize", run, "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data["runs"][0]["workers"][0]["generation"]["tokens"]) == NEW + 1
    assert main(["compare", str(generation_logdir)]) == 0
    out = capsys.readouterr().out
    assert "decode, per step" in out and "ctx " in out


def test_odd_generation_traces_and_metadata() -> None:
    """Decode-like shapes with K of 0 keys, step scopes with contexts out of range and metadata of
    the wrong types: no step without keys, no scope out of bounds, nothing taken from bad metadata."""
    from tb_attn_plugin.trace.decode import decode_bytes

    events: list[dict[str, object]] = []
    for step in range(1, 4):
        t = 200 * step
        keys = 0 if step == 2 else step
        events += [
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 1, "tid": 1, "ts": t,
             "dur": 100},
            {"ph": "X", "cat": "user_annotation", "name": "tbattn.v1/L0", "pid": 1, "tid": 1, "ts": t + 1, "dur": 90},
            {"ph": "X", "cat": "cpu_op", "name": "tbattn.v1/L0/sdpa", "pid": 1, "tid": 1, "ts": t + 2, "dur": 80},
            {"ph": "X", "cat": "cpu_op", "name": "aten::scaled_dot_product_attention", "pid": 1, "tid": 1,
             "ts": t + 3, "dur": 70, "args": {"Input Dims": [[1, 1, 1, 8], [1, 1, keys, 8], [1, 1, keys, 8]],
                                              "Input type": ["float", "float", "float"]}}]
    for name in ("tbattn.v1/decode/C" + "9" * 30, "tbattn.v1/decode/C0"):
        events.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": 205, "dur": 1})
    meta: dict[str, object] = {"peaks": {"copy_bytes_per_s": "fast"}, "generation": {"prompt_len": -3, "kv_cache": 5}}
    data = json.dumps({"traceEvents": events}).encode()
    summary = summarize_trace(analyze(decode_bytes(data)), file="f", worker="w", span=None, metadata=meta)
    g = summary.generation
    assert g is not None and g.source == "shapes"
    assert [(t.role, t.context) for t in g.tokens] == [("decode", 1), ("decode", 3)]
    assert g.prompt_len is None and g.kv_cache is None and g.reference_bytes_per_s is None
    assert g.kv_memory.startswith("not checked")
    # The scope written as cpu_op (the runner's fast record function) is read as a scope.
    assert summary.layers[0].phases[0].phase == "sdpa"


def test_kv_expanded_on_naive_grouped_query_decode(tmp_path: Path) -> None:
    """Naive attention repeats K and V to every query head on each decode step: the core reads
    H/H_kv times the cache, in a kv_expand phase of its own. SDPA with enable_gqa reads the cache
    as it is."""
    for impl in ("naive", "sdpa"):
        result = profile_run(tmp_path, impl, **{**GENERATION, "impl": impl, "prompt_len": 32, "seq": 38,
                                                "kv_heads": 1})
        assert result.status == "ok", result.error
    loader = Loader()
    naive, sdpa = (loader.summarize_run(r).workers[0] for r in resolve_runs(str(tmp_path)))
    g = naive.generation
    assert g is not None and g.decode is not None
    assert g.read_bytes_per_token == H * g.decode.kv_bytes  # 4 query heads read one KV head's cache each
    found = next(f for f in naive.findings if f.id == "kv-expanded")
    assert found.evidence.details["ratio"] == pytest.approx(H)
    assert found.evidence.details["kv_expand_us"] > 0
    assert "kv-expanded" not in {f.id for f in sdpa.findings}
