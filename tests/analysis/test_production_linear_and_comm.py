"""Serving engines' linear attention and communication inside attention (fidelity round 3), on the
hand-written traces ``tests/traces/vllm_gdn.json`` and ``tests/traces/vllm_tp_comm.json``, and the
device share of a trace whose graph replays ran no attention.

- vLLM serving a hybrid model (Qwen3.5): Gated DeltaNet layers run ``vllm::gdn_attention_core``
  (vllm/model_executor/layers/mamba/gdn_linear_attn.py) with the gated delta rule's kernels
  (vllm/model_executor/layers/fla/ops/), beside full-attention layers whose ``unified_attention_with_output``
  runs FlashInfer's paged prefill (include/flashinfer/attention/prefill.cuh).
- vLLM at tensor parallelism 2 on a B200, recorded with ``with_stack`` (``nn.Module: Qwen3Attention_0``):
  the core is TensorRT-LLM's FMHA (a cubin FlashInfer ships, flashinfer tests/test_artifacts.py), and
  the row-parallel output projection all-reduces inside the block (``vllm::all_reduce``,
  vllm/distributed/parallel_state.py), copying in and out of its buffer (two device-to-device memcpys)
  around NCCL's kernel (src/device/generate.py names it ``ncclDevKernel_AllReduce_Sum_bf16_RING_LL``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from analysis_rows import attribution_rows
from msgspec.structs import replace

from tb_attn_plugin.analysis.attribution.analyze import analyze
from tb_attn_plugin.analysis.attribution.batch import batch_flops
from tb_attn_plugin.analysis.cross_run.ranks import ranks
from tb_attn_plugin.analysis.summary import summarize_trace
from tb_attn_plugin.trace.decode import decode_bytes
from tb_attn_plugin.trace.events import Events
from tb_attn_plugin.types.schema import LayerStats, RunSummary, WorkerSummary

Golden = Callable[[str, Any], None]


def _summary(trace_events: Callable[[str], Events], name: str, golden: Golden | None = None) -> WorkerSummary:
    analysis = analyze(trace_events(name))
    if golden is not None:
        golden(name, attribution_rows(analysis.events, analysis.attr))
    return summarize_trace(analysis, file=f"{name}.json", worker="w", span=None)


def _device(layer: LayerStats) -> dict[str, float]:
    return {p.phase: p.device_us for p in layer.phases if p.device_us}


# -- linear attention: Gated DeltaNet -------------------------------------------------------------

def test_gated_deltanet_layers_are_attention_layers_of_a_linear_kind(trace_events: Callable[[str], Events],
                                                                    golden: Golden) -> None:
    """Two ``gdn_attention_core`` calls and one full-attention call in one prefill: three layers in the
    order they ran. Each GDN layer's device time is its two kernels (the conv1d 12 µs, the delta rule's
    state 60 µs); the full layer's the FlashInfer kernel's 45 µs, named for FlashInfer, not vLLM's op."""
    s = _summary(trace_events, "vllm_gdn", golden)
    assert [(x.layer, x.backend) for x in s.layers] == [(0, "gated-deltanet"), (1, "gated-deltanet"), (2, "flashinfer")]
    assert [_device(x) for x in s.layers] == [{"sdpa": 12 + 60}, {"sdpa": 12 + 60}, {"sdpa": 45}]
    assert s.layers[0].backend_evidence == ["chunk_gated_delta_rule_fwd_kernel_h_blockdim64"]  # the kernel first
    assert s.backend == "mixed" and s.attention_device_us == 2 * 72 + 45


def test_a_gated_deltanet_core_is_given_no_pairs_of_a_batch() -> None:
    """vLLM's batch annotation gives a softmax core the work of its (query, key) pairs; linear attention
    has none, so its core's FLOPs stay uncounted (0) where the full-attention core's are given."""
    q = [64, 16, 128]
    batch = "execute_64_context_1(sq64sk64sqsq4096sqsk4096)_generation_0(sq0sk0sqsq0sqsk0)"
    events = [{"ph": "X", "cat": "user_annotation", "name": batch, "pid": 1, "tid": 1, "ts": 0, "dur": 100, "args": {}},
              {"ph": "X", "cat": "cpu_op", "name": "vllm::gdn_attention_core", "pid": 1, "tid": 1, "ts": 10, "dur": 20,
               "args": {"Input Dims": [q, [64, 16], [64, 16], q, []], "Input type": ["c10::BFloat16"] * 4 + ["string"],
                        "Concrete Inputs": [""] * 5}},
              {"ph": "X", "cat": "cpu_op", "name": "vllm::unified_attention_with_output", "pid": 1, "tid": 1, "ts": 40,
               "dur": 20, "args": {"Input Dims": [q, [64, 4, 128], [64, 4, 128], q],
                                   "Input type": ["c10::BFloat16"] * 4, "Concrete Inputs": [""] * 4}}]
    ev = decode_bytes(json.dumps({"traceEvents": events}).encode())
    counted = np.zeros(len(ev))
    assert batch_flops(ev, counted) == 1
    by_name = {ev.names[ev.name[i]]: counted[i] for i in range(len(ev))}
    pairs = 64 * 64 - 64 * 63 // 2  # causal: 64 queries over 64 keys
    assert by_name["vllm::gdn_attention_core"] == 0
    assert by_name["vllm::unified_attention_with_output"] == 4 * 16 * 128 * pairs


# -- communication inside attention ----------------------------------------------------------------

@pytest.fixture
def tp(trace_events: Callable[[str], Events], golden: Golden) -> WorkerSummary:
    return _summary(trace_events, "vllm_tp_comm", golden)


def test_the_all_reduce_inside_the_block_and_its_copies_are_its_comm_phase(tp: WorkerSummary) -> None:
    """The block is the ``Qwen3Attention`` module's call: qkv GEMM 12 µs, KV write 4, FMHA 20, output GEMM 10,
    and the all-reduce's NCCL kernel 120 µs with its two 3 µs copies: ``comm``, 126 µs, not "other"."""
    (layer,) = tp.layers
    assert _device(layer) == {"qkv_proj": 12, "kv_cache": 4, "sdpa": 20, "out_proj": 10, "comm": 120 + 3 + 3}
    assert [p.phase for p in layer.phases if p.phase != "other"] == ["qkv_proj", "kv_cache", "sdpa", "out_proj", "comm"]
    comm = next(p for p in layer.phases if p.phase == "comm")
    assert comm.kernels == 3 and comm.ops == ["vllm::all_reduce"]
    assert tp.attention_device_us == 172 and tp.attention_share_device == 1.0


def test_the_core_is_named_for_the_fmha_kernel_it_ran(tp: WorkerSummary) -> None:
    (layer,) = tp.layers
    assert layer.backend == "trtllm-fmha"
    assert layer.backend_evidence == [
        "fmhaSm100aKernel_QE4m3KvE2m1OE4m3H128PagedKvCausalP64VarSeqQ128Kv128PersistentContext"]


def test_the_collectives_list_holds_the_all_reduce(tp: WorkerSummary) -> None:
    """One call of ``vllm::all_reduce`` (its CPU time 200 µs), NCCL's kernel 120 µs."""
    assert [(c.name, c.calls, c.cpu_us, c.device_us) for c in tp.collectives] == [("all_reduce", 1, 200, 120)]


def test_a_stragglers_attention_leaves_the_comm_phase_out(tp: WorkerSummary) -> None:
    """Rank 1's core is 500 µs slower; rank 0 waits those 500 µs in the all-reduce. Their attention is then
    equal (772 µs), but less the comm phase rank 1's is 646 µs against rank 0's 46: rank 1 is the straggler,
    on attention and on layer 0. The trace has no ProfilerStep, so the whole trace is the step the metric
    reads."""
    def shifted(core: float, comm: float, rank: int) -> WorkerSummary:
        (layer,) = tp.layers
        phases = [replace(p, device_us=core if p.phase == "sdpa" else comm if p.phase == "comm" else p.device_us)
                  for p in layer.phases]
        total = sum(p.device_us for p in phases)
        return replace(tp, layers=[replace(layer, phases=phases, device_us=total)], attention_device_us=total,
                       worker=f"w{rank}", rank=rank)

    rank0, rank1 = shifted(20, 226 + 500, 0), shifted(120 + 500, 126, 1)
    assert rank0.attention_device_us == rank1.attention_device_us == 772
    view = ranks(RunSummary(run="tp", metadata=None, workers=[rank0, rank1], errors=[]), margin=0.2)
    assert [r.attention_best_us for r in view.ranks] == [46, 646]
    assert {(s.rank, s.metric) for s in view.stragglers} == {(1, "attention"), (1, "layer 0")}


def test_collectives_inside_attention_count_once_in_the_ranks_other_time(tp: WorkerSummary) -> None:
    """A step of 1000 µs: attention 172 µs, its comm phase 126 of them (the all-reduce's kernel is 120 µs
    of the collectives column): the rest of the step is 1000 - 172 = 828 µs, the all-reduce not taken
    out a second time."""
    view = ranks(RunSummary(run="tp", metadata=None, workers=[replace(tp, step_device_us=1000.0)], errors=[]))
    (row,) = view.ranks
    assert (row.step_us, row.attention_us, row.collective_us, row.other_us) == (1000, 172, 120, 828)


# -- the device share where replays ran no attention -------------------------------------------------

def test_replays_without_attention_leave_the_device_share_and_the_headline_on_the_device() -> None:
    """vLLM's piecewise pieces (GEMMs, norms) replayed around an eager attention op whose kernel ran
    outside them: every attention kernel is in the trace, so the share of the device step is given
    (30 of 30 + 2 · 50 µs) and the headline speaks of the device."""
    cpu, gpu = {"pid": 1, "tid": 1}, {"pid": 0, "tid": 7}
    events: list[dict[str, Any]] = [
        {"ph": "X", "cat": "cpu_op", "name": "vllm::unified_attention_with_output", "ts": 200, "dur": 50, **cpu,
         "args": {"External id": 5}},
        {"ph": "X", "cat": "cuda_driver", "name": "cuLaunchKernel", "ts": 210, "dur": 5, **cpu,
         "args": {"External id": 5, "correlation": 20}},
        {"ph": "X", "cat": "kernel", "name": "kernel_unified_attention_2d", "ts": 300, "dur": 30, **gpu,
         "args": {"External id": 5, "correlation": 20}}]
    for k, t in enumerate((0, 500)):
        events += [{"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "ts": t, "dur": 10, **cpu,
                    "args": {"correlation": 30 + k}},
                   {"ph": "X", "cat": "kernel", "name": "nvjet_tst_64x8_64x16_4x1_v_bz_TNN", "ts": t + 20, "dur": 50,
                    **gpu, "args": {"correlation": 30 + k}}]
    s = summarize_trace(analyze(decode_bytes(json.dumps({"traceEvents": events}).encode())), file="t", worker="w",
                        span=None)
    assert s.attention_share_device == pytest.approx(30 / 130)
    assert s.headline.startswith("The attention core is 23% of the device step time")
