"""The run overview's headline sentence, on summaries whose figures are set by hand, and on a real
trace of the corpus, where its figures must be the summary's."""

from __future__ import annotations

import re
from pathlib import Path

import msgspec
import pytest

from tb_attn_plugin.analysis.measures.overview import headline, top_finding
from tb_attn_plugin.engine.loader import Loader, resolve_runs
from tb_attn_plugin.types.schema import Backward, Evidence, Finding, LayerStats, PhaseStats, Spread, WorkerSummary

CORPUS = Path(__file__).parents[2] / "models" / "traces"


def _phase(name: str, cpu: float, bwd: float = 0.0) -> PhaseStats:
    return PhaseStats(phase=name, calls=1, cpu_us=cpu, cpu_self_us=cpu, device_us=0, kernels=0, kernel_names=[],
                      ops=[], flops=0, flops_per_s=0, alloc_bytes=0, freed_bytes=0, peak_bytes=0, sxs_bytes=0,
                      sxs_allocs=0, backward=Backward(cpu_us=bwd))


def _finding(fid: str, severity: str, time_us: float) -> Finding:
    return Finding(id=fid, severity=severity, title=f"{fid} title.", explanation="", suggestion="",
                   evidence=Evidence(layers=[0], ops=[], kernels=[], time_us=time_us, bytes=0, details={}))


def _worker(**changes: object) -> WorkerSummary:
    # One layer: forward 600 µs (qkv_proj 300, softmax 200, other 100), backward 400 µs (qkv_proj
    # 300, softmax 100): attention 1000 µs of a 4000 µs step.
    phases = [_phase("qkv_proj", 300, 300), _phase("softmax", 200, 100), _phase("other", 100)]
    layer = LayerStats(layer=0, module=None, backend="naive", backend_evidence=[], inferred=False, calls=1,
                       cpu_us=600, device_us=0, flops=0, flops_per_s=0, alloc_bytes=0, peak_bytes=0, sxs_bytes=0,
                       heads_count=None, phases=phases, heads=[], backward=Backward(cpu_us=400))
    w = WorkerSummary(file="f", worker="w", span=None, device="cpu", inferred=False, backend="naive", steps=[1, 2],
                      step_count=2, step_cpu_us=4000, step_device_us=0, attention_cpu_us=1000,
                      attention_device_us=0, attention_share_cpu=0.25, attention_share_device=None, layers=[layer],
                      per_step=[], diagnostics={}, notes=[])
    return msgspec.structs.replace(w, **changes)


def test_headline_by_hand() -> None:
    w = _worker(findings=[_finding("share-of-step", "info", 1000), _finding("mask-rebuilt", "low", 50),
                          _finding("hidden-copy", "medium", 120)])
    assert headline(w) == (
        "Attention is 25% of the CPU step time (1.00 ms of 4.00 ms per step, 1 layer): forward 60%, backward "
        "40%; by phase (forward and backward), qkv_proj 60%, softmax 30%, other 10%. Top finding (medium): "
        "hidden-copy title, in 120.0 µs per step (12% of attention's forward and backward time): the most a fix "
        "can save.")


def test_headline_names_the_attention_core_where_only_it_was_found() -> None:
    """Every layer found by its core alone (``core_only``): its figures are the core's, and the
    headline says so, twice; where some layers are, it says how many."""
    w = _worker(findings=[_finding("hidden-copy", "medium", 120)])
    w = msgspec.structs.replace(w, layers=[msgspec.structs.replace(w.layers[0], core_only=True)])
    assert headline(w) == (
        "The attention core is 25% of the CPU step time (1.00 ms of 4.00 ms per step, 1 layer): forward 60%, "
        "backward 40%; by phase (forward and backward), qkv_proj 60%, softmax 30%, other 10%. Top finding "
        "(medium): hidden-copy title, in 120.0 µs per step (12% of the attention core's forward and backward time): "
        "the most a fix can save.")
    w = msgspec.structs.replace(w, layers=[*w.layers, msgspec.structs.replace(w.layers[0], layer=1, core_only=False)])
    text = headline(w)
    assert text.startswith("Attention is 25% of the CPU step time (1.00 ms of 4.00 ms per step, 1 of 2 layers: "
                           "the core only)") and "(12% of attention)" in text  # two layers' forward: no backward here


def test_headline_says_noisy_and_skips_info_findings() -> None:
    noisy = Spread(median=1000, lo=700, hi=1500, kind="range", steps=5, noisy=True)
    w = _worker(spread={"attention_cpu_us": noisy}, findings=[_finding("share-of-step", "info", 1000)])
    text = headline(w)
    assert "Its steps ranged 700.0 µs to 1.50 ms over 5 steps: noisy" in text and "Top finding" not in text
    iqr = Spread(median=1000, lo=700, hi=1500, kind="iqr", steps=12, noisy=True)  # from 8 steps: the middle half
    assert "Its steps had an interquartile range of 700.0 µs to 1.50 ms over 12 steps: noisy" in headline(
        _worker(spread={"attention_cpu_us": iqr}))
    quiet = Spread(median=1000, lo=950, hi=1050, kind="range", steps=5, noisy=False)
    assert "steps ranged" not in headline(_worker(spread={"attention_cpu_us": quiet}))
    assert headline(_worker(layers=[])) == ""


def test_top_finding_is_most_severe_then_most_time() -> None:
    fs = [_finding("a", "low", 900), _finding("b", "medium", 10), _finding("c", "medium", 30),
          _finding("d", "info", 5000)]
    assert top_finding(fs).id == "c"  # type: ignore[union-attr]
    assert top_finding([_finding("d", "info", 1)]) is None


@pytest.mark.parametrize("name", ["builtin-naive-infer", "hf-llama-eager-train"])
def test_headline_on_real_traces_states_the_summarys_figures(name: str) -> None:
    (run,) = resolve_runs(str(CORPUS / name))
    (w,) = Loader().summarize_run(run).workers
    text = w.headline
    share = re.search(r"Attention is (\d+)% of the CPU step time", text)
    assert share and int(share.group(1)) == round(100 * w.attention_cpu_us / w.step_cpu_us)
    top = top_finding(w.findings)
    assert top is not None and top.title.rstrip(".") in text
