"""Multi-rank runs: ranks, collectives, stragglers and global heads (analysis/cross_run/ranks.py,
analysis/attribution/collectives.py), on public multi-rank traces and on runner traces made into ranks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import SHARED_TRACES, accelerate_run
from tracetools import as_ranks

from tb_attn_plugin.analysis.attribution.analyze import analyze
from tb_attn_plugin.analysis.attribution.collectives import collective_name
from tb_attn_plugin.analysis.cross_run.ranks import ranks
from tb_attn_plugin.analysis.summary import summarize_trace
from tb_attn_plugin.engine.loader import Loader, resolve_runs
from tb_attn_plugin.trace.decode import decode_bytes
from tb_attn_plugin.types.results import RankView
from tb_attn_plugin.types.schema import RunSummary

OTHER = SHARED_TRACES / "other"


@pytest.mark.parametrize(("name", "expected"), [
    ("nccl:all_reduce", "all_reduce"), ("gloo:all_reduce", "all_reduce"), ("c10d::allreduce_", "all_reduce"),
    ("c10d::allgather_into_tensor_coalesced_", "all_gather"), ("c10d::_allgather_base_", "all_gather"),
    ("c10d::reduce_scatter_tensor_coalesced_", "reduce_scatter"), ("c10d::alltoall_base_", "all_to_all"),
    ("c10d::broadcast_", "broadcast"), ("nccl:all_to_all", "all_to_all"), ("record_param_comms", "collective"),
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", "all_reduce"),
    ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "all_gather"),
    ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", "send_recv"),
    ("aten::broadcast_tensors", None), ("aten::all", None), ("ProfilerStep#3", None),
])
def test_collective_names(name: str, expected: str | None) -> None:
    assert collective_name(name) == expected


def test_accelerates_traces_are_ranks_by_their_process_index(tmp_path: Path, builtin_logdir: Path) -> None:
    (trace,) = (builtin_logdir / "naive").glob("*.pt.trace.json")
    accelerate_run(tmp_path / "logdir" / "run", trace)
    view = _view(tmp_path / "logdir" / "run")
    assert [(r.rank, r.worker) for r in view.ranks] == [(i, f"profile_{i}") for i in range(4)]


def _worker(path: Path):  # type: ignore[no-untyped-def]
    (run,) = resolve_runs(str(path))
    (worker,) = Loader().summarize_run(run).workers
    return worker


def test_public_traces_ranks_and_collectives() -> None:
    """Rank from distributedInfo; collectives of NCCL (CPU and kernels) and Gloo traces."""
    nccl = _worker(OTHER / "hta_nccl_parser_config_nccl_data.json.gz")
    assert (nccl.rank, nccl.world_size) == (0, 2)
    by_name = {c.name: c for c in nccl.collectives}
    assert by_name["all_reduce"].calls == 5.0 and by_name["all_reduce"].device_us > 0
    assert by_name["broadcast"].calls == 2.0
    gloo = _worker(OTHER / "hta_cpu_only_rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")
    assert (gloo.rank, gloo.world_size) == (34, 300)
    (all_reduce,) = gloo.collectives
    # Two all_reduce calls (on two gloo threads) start inside the one profiled step.
    assert all_reduce.name == "all_reduce" and all_reduce.calls == 2.0 and all_reduce.device_us == 0
    assert _worker(OTHER / "kineto_resnet50_v100_worker0.1623143089861.pt.trace.json.gz").collectives == []


def _view(run_dir: Path, **kwargs: float) -> RankView:
    (run,) = resolve_runs(str(run_dir.parent))
    return ranks(Loader().summarize_run(run), **kwargs)


def test_a_slowed_rank_is_a_straggler(tmp_path: Path, builtin_logdir: Path) -> None:
    as_ranks(builtin_logdir / "naive", tmp_path / "logdir" / "run", slow_rank=1, slow_us=100_000.0)
    view = _view(tmp_path / "logdir" / "run")
    assert [(r.rank, r.worker) for r in view.ranks] == [(0, "host_rank0"), (1, "host_rank1")]
    r0, r1 = view.ranks
    layers = len(r0.layers)
    # Each of rank 1's block scopes is 0.1 s longer: once per layer per forward. (A longer scope
    # also swallows the ops after it, whose backward then counts too: hence >= in total.)
    for a, b in zip(r0.layers, r1.layers, strict=True):
        assert b.forward_us - a.forward_us == pytest.approx(100_000.0, rel=1e-6)
    assert r1.attention_us - r0.attention_us >= 100_000.0 * layers - 1.0
    assert r1.straggler and not r0.straggler
    flagged = {(s.rank, s.metric) for s in view.stragglers}
    assert (1, "attention") in flagged and all(rank == 1 for rank, _ in flagged)
    assert {a.layer: a.max_rank for a in view.all_ranks} == {k: 1 for k in range(layers)}
    for a in view.all_ranks:
        times = [next(x.time_us for x in r.layers if x.layer == a.layer) for r in view.ranks]
        assert a.mean_us == pytest.approx(sum(times) / 2) and a.max_us == max(times) and a.min_us == min(times)
    # Replicas (data parallel): every rank computes every head.
    assert not view.heads_sharded and view.heads_complete and view.head_count == 4
    assert all(h.ranks == [0, 1] and h.replicas == 2 for h in view.heads)
    # A margin above the slowed rank's ratio clears it (against the lower median over both ranks:
    # the other rank's, not a mean that half includes the straggler); a negative margin is refused.
    (attention,) = [s for s in view.stragglers if s.metric == "attention"]
    assert attention.ratio == pytest.approx(attention.value_us / attention.median_us)
    assert attention.median_us == r0.attention_best_us and attention.value_us == r1.attention_best_us
    wider = _view(tmp_path / "logdir" / "run", margin=attention.ratio - 1 + 1e-3)
    assert "attention" not in {s.metric for s in wider.stragglers}
    with pytest.raises(ValueError, match="margin"):
        _view(tmp_path / "logdir" / "run", margin=-1.0)


def test_identical_ranks_have_no_straggler(tmp_path: Path, builtin_logdir: Path) -> None:
    as_ranks(builtin_logdir / "naive", tmp_path / "logdir" / "run")
    view = _view(tmp_path / "logdir" / "run", margin=0.0)
    assert view.stragglers == [] and not any(r.straggler for r in view.ranks)


def test_tensor_parallel_heads_form_one_global_map(tmp_path: Path, builtin_logdir: Path) -> None:
    as_ranks(builtin_logdir / "naive", tmp_path / "logdir" / "run", heads_per_rank=2)
    view = _view(tmp_path / "logdir" / "run")
    assert [r.heads for r in view.ranks] == [[0, 1], [2, 3]]
    layers = {h.layer for h in view.heads}
    for layer in layers:
        cells = [h for h in view.heads if h.layer == layer]
        assert [h.head for h in cells] == [0, 1, 2, 3]
        assert [h.ranks for h in cells] == [[0], [0], [1], [1]] and all(h.derived for h in cells)
    assert view.heads_sharded and view.heads_complete and view.head_count == 4


def test_a_gap_in_the_heads_is_reported(tmp_path: Path, builtin_logdir: Path) -> None:
    as_ranks(builtin_logdir / "naive", tmp_path / "logdir" / "run", heads_per_rank=2)
    (rank1,) = (tmp_path / "logdir" / "run").glob("host_rank1.*")
    rank1.write_text(rank1.read_text().replace("/H2-3/", "/H4-5/"))
    view = _view(tmp_path / "logdir" / "run")
    assert not view.heads_complete and view.heads_sharded
    assert sorted({h.head for h in view.heads}) == [0, 1, 4, 5]


def test_torchrun_runs(torchrun_logdir: Path) -> None:
    """The runner's own multi-rank runs: tensor-parallel heads 0..3 split 0-1 / 2-3 with no gap
    or overlap, rank 1 (slowed) flagged, one forward and one backward all_reduce per layer per
    step on each rank, the waiting done by the fast rank; data parallel: every head on both."""
    loader = Loader()
    by_name = {r.name: r for r in resolve_runs(str(torchrun_logdir))}
    tp = ranks(loader.summarize_run(by_name["builtin/naive-tp/seq16"]))
    assert [(r.rank, r.heads) for r in tp.ranks] == [(0, [0, 1]), (1, [2, 3])]
    assert tp.heads_sharded and tp.heads_complete and tp.head_count == 4
    assert sorted((h.layer, h.head) for h in tp.heads) == [(k, h) for k in (0, 1) for h in range(4)]
    assert [h.ranks for h in tp.heads if h.layer == 0] == [[0], [0], [1], [1]]
    assert [r.straggler for r in tp.ranks] == [False, True]
    (attention,) = [s for s in tp.stragglers if s.metric == "attention"]
    assert attention.rank == 1 and attention.value_us - attention.median_us > 10_000  # 20 ms x 2 layers, halved
    for r in tp.ranks:
        (all_reduce,) = r.collectives
        assert all_reduce.name == "all_reduce" and all_reduce.calls == 4.0  # 2 layers x (forward + backward)
    fast, slow = tp.ranks
    assert fast.collective_us > slow.collective_us  # rank 0 waits for rank 1 in the all-reduce
    ddp = ranks(loader.summarize_run(by_name["builtin/sdpa/seq16"]))
    assert not ddp.heads_sharded and ddp.heads_complete and all(h.replicas == 2 for h in ddp.heads)
    assert all(r.collectives and r.collectives[0].name == "all_reduce" for r in ddp.ranks)


def _row_parallel_rank(rank: int, wait_us: float, compute_us: float) -> bytes:
    """One rank's step: a scoped block whose out_proj all-reduces (a row-parallel projection, as
    Megatron's), waiting ``wait_us`` there for the other rank, after ``compute_us`` of core work."""
    cpu = {"pid": 1, "tid": 1}
    t = 10.0
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0, "dur": 20_000, **cpu,
               "args": {}},
              {"ph": "X", "cat": "user_annotation", "name": "tbattn.v1/L0", "ts": t, "dur": compute_us + wait_us + 20,
               **cpu, "args": {}},
              {"ph": "X", "cat": "user_annotation", "name": "tbattn.v1/L0/sdpa", "ts": t + 1, "dur": compute_us, **cpu,
               "args": {}},
              {"ph": "X", "cat": "user_annotation", "name": "tbattn.v1/L0/out_proj", "ts": t + compute_us + 2,
               "dur": wait_us + 10, **cpu, "args": {}},
              {"ph": "X", "cat": "cpu_op", "name": "RowParallelLinear", "ts": t + compute_us + 3, "dur": wait_us + 5,
               **cpu, "args": {}},
              {"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "ts": t + compute_us + 4, "dur": 2, **cpu,
               "args": {}}]
    return json.dumps({"traceEvents": events, "distributedInfo": {"rank": rank, "world_size": 2}}).encode()


def test_collectives_inside_attention_are_not_the_straggler_metric() -> None:
    """Rank 1 computes 3 ms more; rank 0 waits for it in the row-parallel all-reduce inside its
    out_proj. Its attention time holds the wait (the ranks look alike by it), but the collective's
    op is left out of the straggler metric, which finds rank 1."""
    workers = []
    for rank, wait, compute in ((0, 3000.0, 10_000.0), (1, 0.0, 13_000.0)):
        w = summarize_trace(analyze(decode_bytes(_row_parallel_rank(rank, wait, compute))), file=f"r{rank}.json",
                            worker=f"host_rank{rank}", span=None)
        (step,) = w.per_step
        assert step.attention_comm_cpu_us == pytest.approx(wait + 5)  # the all-reducing op, wait included
        workers.append(w)
    view = ranks(RunSummary(run="tp", metadata=None, workers=workers, errors=[]))
    r0, r1 = view.ranks
    # 10000 + 3000 + 20 - 3005 against 13000 + 20 - 5: the 3 ms rank 1 computes more.
    assert r1.attention_best_us - r0.attention_best_us == pytest.approx(3000.0)
    assert r0.attention_us == pytest.approx(r1.attention_us)  # by attention time the two look alike
    assert [(s.rank, s.metric) for s in view.stragglers if s.metric == "attention"] == [(1, "attention")]
