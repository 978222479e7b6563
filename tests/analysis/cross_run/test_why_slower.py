"""Why a run is slower than its like-for-like baseline (analysis/cross_run/why_slower.py): which runs compare
(``same_but_impl``), and each sentence of ``why_slower`` on hand-built run summaries whose per-phase
times are chosen so that the totals, ratios, grown parts, noise and dispatch counts can be worked by
hand."""

from __future__ import annotations

import msgspec
import pytest

from tb_attn_plugin.analysis.cross_run.why_slower import SLOWER_BY, same_but_impl, why_slower
from tb_attn_plugin.types.schema import (
    Backward,
    Evidence,
    Finding,
    LayerStats,
    PhaseStats,
    RunSummary,
    WorkerSummary,
)


def _phase(phase: str, us: float, *, bwd_us: float = 0.0, ops: float = 0.0, device: bool = False) -> PhaseStats:
    """A phase of ``us`` forward (and ``bwd_us`` backward) per step, on the device clock when ``device``
    (its CPU time then a tenth of it)."""
    cpu, dev = (us / 10, us) if device else (us, 0.0)
    bcpu, bdev = (bwd_us / 10, bwd_us) if device else (bwd_us, 0.0)
    return PhaseStats(phase=phase, calls=1.0, cpu_us=cpu, cpu_self_us=cpu, device_us=dev, kernels=0.0,
                      kernel_names=[], ops=[], op_count=ops, flops=0.0, flops_per_s=0.0, alloc_bytes=0.0,
                      freed_bytes=0.0, peak_bytes=0, sxs_bytes=0.0, sxs_allocs=0.0,
                      backward=Backward(calls=1.0 if bwd_us else 0.0, cpu_us=bcpu, device_us=bdev))


def _worker(backend: str, phases: list[PhaseStats], *, findings: list[Finding] | None = None) -> WorkerSummary:
    """One layer holding ``phases``, its times their sums."""
    layer = LayerStats(layer=0, module=None, backend=backend, backend_evidence=[], inferred=False, calls=1.0,
                       cpu_us=sum(p.cpu_us for p in phases), device_us=sum(p.device_us for p in phases), flops=0.0,
                       flops_per_s=0.0, alloc_bytes=0.0, peak_bytes=0, sxs_bytes=0.0, heads_count=None,
                       phases=phases, heads=[],
                       backward=Backward(cpu_us=sum(p.backward.cpu_us for p in phases),
                                         device_us=sum(p.backward.device_us for p in phases)))
    device = any(p.device_us for p in phases)
    return WorkerSummary(file="w.1.pt.trace.json", worker="w", span=None, device="cuda" if device else "cpu",
                         inferred=False, backend=backend, steps=[1], step_count=1, step_cpu_us=10_000.0,
                         step_device_us=0.0, attention_cpu_us=layer.cpu_us + layer.backward.cpu_us,
                         attention_device_us=layer.device_us + layer.backward.device_us, attention_share_cpu=None,
                         attention_share_device=None, layers=[layer], per_step=[], diagnostics={}, notes=[],
                         findings=findings or [])


def _run(name: str, impl: str, worker: WorkerSummary, **config: object) -> RunSummary:
    return RunSummary(run=name, metadata={"config": {"model": "toy", "impl": impl, "seq": 128, **config}},
                      workers=[worker], errors=[])


def _naive(**extra: float) -> WorkerSummary:
    """Naive inference: projections 50 + 50 µs, the core 40 + 30 + 30 = 100 µs: 200 µs, 12 ops."""
    return _worker("naive", [_phase("qkv_proj", 50, ops=3), _phase("qk_matmul", 40, ops=2),
                             _phase("softmax", 30, ops=2), _phase("av_matmul", 30, ops=2),
                             _phase("out_proj", 50, ops=3),
                             *(_phase(k, v) for k, v in extra.items())])


def _flash(qkv: float = 50, sdpa: float = 40) -> WorkerSummary:
    """SDPA's flash kernel: projections 50 + 50 µs, one sdpa call of 40 µs: 140 µs, 5 ops."""
    return _worker("flash", [_phase("qkv_proj", qkv, ops=2), _phase("sdpa", sdpa, ops=1),
                             _phase("out_proj", 50, ops=2)])


# -- same_but_impl --------------------------------------------------------------------------------

def test_runs_compare_when_all_but_the_implementation_matches() -> None:
    naive, sdpa = _run("a", "naive", _naive()), _run("b", "sdpa", _flash())
    assert same_but_impl(naive, sdpa) and same_but_impl(sdpa, naive)
    assert not same_but_impl(naive, _run("c", "naive", _flash()))  # the same implementation
    assert not same_but_impl(naive, _run("d", "sdpa", _flash(), seq=256))  # another length
    anonymous = RunSummary(run="e", metadata={"config": {"impl": "naive"}}, workers=[_naive()], errors=[])
    assert not same_but_impl(anonymous, RunSummary(run="f", metadata={"config": {"impl": "sdpa"}},
                                                   workers=[_flash()], errors=[]))  # no model named
    no_meta = RunSummary(run="g", metadata=None, workers=[_naive()], errors=[])
    assert not same_but_impl(no_meta, no_meta)


def test_the_model_and_implementation_may_sit_beside_the_config() -> None:
    a = RunSummary(run="a", metadata={"model": "toy", "impl": "naive", "config": {"seq": 64}}, workers=[_naive()],
                   errors=[])
    b = RunSummary(run="b", metadata={"model": "toy", "impl": "sdpa", "config": {"seq": 64}}, workers=[_flash()],
                   errors=[])
    assert same_but_impl(a, b)


# -- why_slower -----------------------------------------------------------------------------------

def test_an_unfused_run_against_a_fused_one_worked_by_hand() -> None:
    why = why_slower(_run("naive-run", "naive", _naive()), _run("sdpa-run", "sdpa", _flash()))
    # 200 µs against 140 µs: 200 / 140 = 1.43×; inference: no backward clause.
    assert why[0] == ("naive-run spends 200.0 µs of CPU time per step in attention against 140.0 µs (1.43×): "
                      "forward only, no backward.")
    assert why[1] == "It ran naive where the baseline ran flash."
    # The core: 40 + 30 + 30 = 100 µs unfused against the 40 µs call: +60 µs, +150 %; projections equal.
    assert why[2] == "Where (forward): the attention core (q·kᵀ to attn·V) +60.0 µs (100.0 µs, +150%)."
    # Ops per forward: 3 + 2 + 2 + 2 + 3 = 12 against 2 + 1 + 2 = 5.
    assert why[3] == "It dispatches more: 12 top-level ops per forward against 5."
    assert len(why) == 4


def test_a_run_that_is_not_slower_gets_nothing() -> None:
    naive, sdpa = _run("a", "naive", _naive()), _run("b", "sdpa", _flash())
    assert why_slower(sdpa, naive) == []  # faster
    assert why_slower(naive, naive) == []  # the same
    # 140 µs · 1.02 = 142.8 µs: 142.7 is within the noise bound, 143 is past it.
    assert 140 * SLOWER_BY == pytest.approx(142.8)
    assert why_slower(_run("a", "x", _flash(sdpa=42.7)), sdpa) == []
    assert why_slower(_run("a", "x", _flash(sdpa=43.0)), sdpa) != []


def test_a_baseline_without_attention_time_explains_nothing() -> None:
    empty = _worker("flash", [])
    assert why_slower(_run("a", "naive", _naive()), _run("b", "sdpa", empty)) == []


def test_math_fallback_on_the_device_in_training_worked_by_hand() -> None:
    math = Finding(id="math-fallback", severity="high", title="", explanation="", suggestion="",
                   evidence=Evidence(layers=[0], ops=[], kernels=[], time_us=0.0, bytes=0.0,
                                     details={"causes": "dropout,attn_mask"}))
    slow = _worker("sdpa-math", [_phase("qkv_proj", 20, bwd_us=30, device=True),
                                 _phase("sdpa", 100, bwd_us=150, device=True)], findings=[math])
    fast = _worker("flash", [_phase("qkv_proj", 20, bwd_us=30, device=True),
                             _phase("sdpa", 40, bwd_us=60, device=True)])
    why = why_slower(_run("math", "sdpa-math", slow), _run("flash", "sdpa", fast))
    # Device clock: forward 120 against 60, backward 180 against 90: 300 / 150 = 2.00×.
    assert why[0] == ("math spends 300.0 µs of device time per step in attention against 150.0 µs (2.00×): "
                      "forward +60.0 µs (120.0 µs, +100%), backward +90.0 µs (180.0 µs, +100%).")
    assert why[1] == ("Its SDPA ran the math backend, not a fused kernel (math-fallback: dropout, attn_mask): the "
                      "same unfused arithmetic as flash, with the ops SDPA adds around it.")
    # The SDPA call, forward and backward: 100 + 150 = 250 µs against 40 + 60 = 100 µs.
    assert why[2] == "Where (forward and backward): the SDPA call +150.0 µs (250.0 µs, +150%)."
    assert len(why) == 3  # no op was counted in either run: no dispatch sentence


def test_math_fallback_without_causes_says_only_its_name() -> None:
    math = Finding(id="math-fallback", severity="high", title="", explanation="", suggestion="",
                   evidence=Evidence(layers=[0], ops=[], kernels=[], time_us=0.0, bytes=0.0, details={}))
    slow = msgspec.structs.replace(_flash(sdpa=100), backend="sdpa-math", findings=[math])
    why = why_slower(_run("a", "sdpa-math", slow), _run("b", "sdpa", _flash()))
    assert why[1].startswith("Its SDPA ran the math backend, not a fused kernel (math-fallback): ")


def test_the_cpu_clock_is_used_unless_both_runs_have_device_time() -> None:
    on_device = _worker("flash", [_phase("sdpa", 400, device=True)])  # 400 µs device, 40 µs CPU
    why = why_slower(_run("a", "naive", _naive()), _run("b", "sdpa", on_device))
    # The baseline's CPU time, 40 µs, against the run's 200: the device clock is not the run's.
    assert why[0].startswith("a spends 200.0 µs of CPU time per step in attention against 40.0 µs (5.00×)")


def test_growth_in_parts_both_runs_share_is_called_noise() -> None:
    # qkv_proj 100 against 50 (+50), the call 45 against 40 (+5): of the 55 µs, 50 in the projections.
    why = why_slower(_run("a", "sdpa", _flash(qkv=100, sdpa=45)), _run("b", "flash", _flash()))
    assert len(why) == 3  # the same backend: no backend sentence; the same op count: no dispatch one
    # +5 µs in the call is under a tenth of the 55 µs grown (5.5): not listed.
    assert why[1] == "Where (forward): qkv_proj +50.0 µs (100.0 µs, +100%)."
    assert why[2] == ("Of the 55.0 µs, 50.0 µs is in parts that run the same ops in both runs (projections, RoPE, "
                      "the KV cache): measurement noise, which more profiled steps narrow; the implementation's own "
                      "part is +5.0 µs.")


def test_the_implementations_own_part_can_be_negative() -> None:
    # qkv_proj +50, the call -5: 45 µs slower, all of it noise, its own part -5 µs.
    why = why_slower(_run("a", "sdpa", _flash(qkv=100, sdpa=35)), _run("b", "flash", _flash()))
    assert why[-1].endswith("the implementation's own part is −5.0 µs.") and why[-1].startswith("Of the 45.0 µs")


def test_parts_the_baseline_lacks_and_only_the_three_largest_are_named() -> None:
    # Over the naive baseline (200 µs): kv_expand 12, mask 30 and dropout 20 are in the unfused core,
    # 100 + 62 = 162 µs; rope 30, kv_cache 25 and feature_map 20 are parts of their own. 137 µs grown,
    # each part past a tenth of it (13.7): the three largest are named.
    slow = _naive(kv_expand=12, mask=30, dropout=20, rope=30, kv_cache=25, feature_map=20)
    why = why_slower(_run("a", "naive-x", slow), _run("b", "naive", _naive()))
    (where,) = [line for line in why if line.startswith("Where")]
    assert where == ("Where (forward): the attention core (q·kᵀ to attn·V) +62.0 µs (162.0 µs, +62%); "
                     "rope +30.0 µs (30.0 µs) (not in the baseline); kv_cache +25.0 µs (25.0 µs) (not in the "
                     "baseline).")
    # rope and kv_cache (55 µs) run the same ops in both: less than the other 82 µs, so no noise sentence.
    assert not any(line.startswith("Of the") for line in why)


def test_the_mask_of_a_fused_run_and_other_fused_calls_are_named_by_their_call() -> None:
    # A fused run's mask phase: the mask built for SDPA, a part the baseline has none of.
    slow = _worker("flash", [_phase("qkv_proj", 50), _phase("mask", 60), _phase("sdpa", 40), _phase("out_proj", 50)])
    why = why_slower(_run("a", "sdpa-mask", slow), _run("b", "sdpa", _flash()))
    assert "Where (forward): the mask built for SDPA +60.0 µs (60.0 µs) (not in the baseline)." in why
    for phase, label in (("flex", "the flex_attention call"), ("compiled", "the compiled block")):
        run = _worker(phase, [_phase("qkv_proj", 50), _phase(phase, 100), _phase("out_proj", 50)])
        lines = why_slower(_run("a", phase, run), _run("b", "sdpa", _flash()))
        assert f"Where (forward): {label} +60.0 µs (100.0 µs, +150%)." in lines


@pytest.mark.parametrize("ops", [5.5, 5.6])
def test_dispatch_is_named_past_a_tenth_more_ops(ops: float) -> None:
    # The baseline's 5 ops per forward: 5.5 is a tenth more (not past it), 5.6 is.
    slow = _worker("flash", [_phase("qkv_proj", 50, ops=2), _phase("sdpa", 80, ops=ops - 4),
                             _phase("out_proj", 50, ops=2)])
    why = why_slower(_run("a", "x", slow), _run("b", "sdpa", _flash()))
    assert any(line.startswith("It dispatches more") for line in why) is (ops > 5.5)
