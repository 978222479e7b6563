"""Multi-rank runs under torchrun (gloo on CPU): data parallel with a straggler, tensor-parallel
attention heads, and the tensor-parallel model's numbers against a single process.

Three torchrun invocations in all, each with two ranks, a tiny model, one thread per rank and a
timeout; the checks that need no process group run in-process.
"""

from __future__ import annotations

import json
import socket
import statistics
from pathlib import Path
from typing import Any

import pytest
from helpers import torchrun
from tracetools import Op, load_trace, ops_with_scopes, trace_files

from runner.cli import build_parser, main, plan_sweep
from runner.config import ModelConfig
from runner.metadata import METADATA_FILE
from runner.model import SLOW_RANK_SCOPE, Attention
from runner.tensor_parallel import TensorParallel
from tb_attn_plugin.vocab.scopes import parse_scope

LAYERS, HEADS, SEQ = 2, 4, 16
ACTIVE_STEPS = 2  # fewer than the runner's default of 5: each rank's runs stay short
TINY = ["--layers", str(LAYERS), "--heads", str(HEADS), "--d-model", "32", "--seq", str(SEQ), "--vocab", "64",
        "--active", str(ACTIVE_STEPS), "--no-progress"]
SLOW_MS = 40.0
ALLREDUCE = "c10d::allreduce_"  # the collective's op on the calling thread; gloo runs it on its own threads


def _meta(run_dir: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((run_dir / METADATA_FILE).read_text())
    return data


def _rank_traces(run_dir: Path) -> list[dict[str, Any]]:
    """The run's traces, one per rank, in rank order."""
    files = trace_files(run_dir)
    assert [f.name.split(".")[0].rsplit("_", 1)[1] for f in files] == ["rank0", "rank1"]
    traces = [load_trace(f) for f in files]
    assert [t["distributedInfo"]["rank"] for t in traces] == [0, 1]
    assert all(t["distributedInfo"]["world_size"] == 2 and t["distributedInfo"]["backend"] == "gloo" for t in traces)
    return traces


def _check_ranks_metadata(run_dir: Path, parallel: str, heads: list[Any], delay_ms: list[float]) -> None:
    meta = _meta(run_dir)
    assert meta["status"] == "ok", meta["error"]
    assert meta["parallel"] == parallel and meta["config"]["parallel"] == parallel and meta["world_size"] == 2
    workers = [f.name.split(".")[0] for f in trace_files(run_dir)]
    assert meta["ranks"] == [
        {"rank": r, "worker": workers[r], "host": socket.gethostname(), "heads": heads[r], "delay_ms": delay_ms[r]}
        for r in range(2)
    ]
    assert meta["traces"] == sorted(f.name for f in trace_files(run_dir))


def _allreduces(ops: list[Op], *, backward: bool) -> list[Op]:
    return [o for o in ops if o.name == ALLREDUCE and o.backward == backward]


def _spans(trace: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("name") == name]


def _block_scopes(scopes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted((s for s in scopes if (p := parse_scope(s["name"])) is not None and p.is_block),
                  key=lambda s: float(s["ts"]))


@pytest.mark.slow
def test_ddp_two_ranks_with_a_straggler(tmp_path: Path) -> None:
    """Under torchrun training defaults to DDP: every rank computes every head, gradients are
    all-reduced in backward, and --slow-rank makes rank 1's attention blocks longer by --slow-ms."""
    torchrun("-m", "runner", "--logdir", str(tmp_path), "--impl", "naive,sdpa", *TINY,
              "--slow-rank", "1", "--slow-ms", str(SLOW_MS))
    for impl in ("naive", "sdpa"):
        run_dir = tmp_path / "builtin" / impl / f"seq{SEQ}"
        _check_ranks_metadata(run_dir, "ddp", [None, None], [0.0, SLOW_MS])
        assert _meta(run_dir)["config"]["slow_rank"] == 1 and _meta(run_dir)["config"]["slow_ms"] == SLOW_MS
        block_ms = []
        for rank, trace in enumerate(_rank_traces(run_dir)):
            ops, scopes = ops_with_scopes(trace)
            assert all(parse_scope(s["name"]).heads is None for s in scopes)  # type: ignore[union-attr]
            assert len(_spans(trace, "DistributedDataParallel.forward")) == ACTIVE_STEPS
            # DDP's gradient all-reduce: launched from the autograd engine (an AccumulateGrad
            # hook), outside every attention scope, and run on a gloo thread.
            bwd = _allreduces(ops, backward=True)
            assert len(bwd) >= ACTIVE_STEPS and all(not o.scopes for o in bwd)
            assert not _allreduces(ops, backward=False)
            assert len(_spans(trace, "gloo:all_reduce")) == len(bwd)
            blocks = _block_scopes(scopes)
            assert len(blocks) == LAYERS * ACTIVE_STEPS
            block_ms.append(statistics.mean(float(b["dur"]) for b in blocks) / 1000)
            # The delay sits in the block, outside its phases, and only on the slow rank.
            slow = _spans(trace, SLOW_RANK_SCOPE)
            assert len(slow) == (LAYERS * ACTIVE_STEPS if rank == 1 else 0)
            for s in slow:
                start, end = float(s["ts"]), float(s["ts"]) + float(s["dur"])
                assert any(float(b["ts"]) <= start and end <= float(b["ts"]) + float(b["dur"]) for b in blocks)
                assert not any(o.phase_scope is not None and start <= o.ts < end for o in ops)
        assert 0.8 * SLOW_MS <= block_ms[1] - block_ms[0] <= 2 * SLOW_MS, block_ms


@pytest.mark.slow
def test_tensor_parallel_heads_and_all_reduce(tmp_path: Path) -> None:
    """--parallel tp: rank r computes global heads 2r and 2r+1 (grouped-query, one kv head
    each), and the block outputs are all-reduced once per layer in forward, at the end of the
    block in its comm phase (a row-parallel output projection's all-reduce, as Megatron runs it),
    and once in backward, outside the attention scopes."""
    impls = ("naive", "naive-inplace", "sdpa", "sdpa-math", "sdpa-flash")
    torchrun("-m", "runner", "--logdir", str(tmp_path), "--parallel", "tp", "--impl", ",".join(impls),
              "--kv-heads", "2", *TINY)
    for impl in impls:
        run_dir = tmp_path / "builtin" / f"{impl}-tp" / f"seq{SEQ}"
        _check_ranks_metadata(run_dir, "tp", [[0, 1], [2, 3]], [0.0, 0.0])
        covered: list[set[int]] = []
        for rank, trace in enumerate(_rank_traces(run_dir)):
            ops, scopes = ops_with_scopes(trace)
            parsed = [p for p in (parse_scope(s["name"]) for s in scopes) if p is not None]
            phases = [p for p in parsed if p.phase is not None]
            assert phases and all(p.heads == range(2 * rank, 2 * rank + 2) for p in phases), impl
            assert all(p.heads is None for p in parsed if p.phase is None)  # block scopes carry no heads
            assert {p.phase for p in phases} >= {"qkv_proj", "out_proj"}
            covered.append({h for p in phases for h in p.heads or ()})
            fwd, bwd = _allreduces(ops, backward=False), _allreduces(ops, backward=True)
            assert len(fwd) == len(bwd) == LAYERS * ACTIVE_STEPS, impl
            assert all(o.phase_scope is not None and o.phase_scope.phase == "comm" for o in fwd), impl
            assert all(not o.scopes for o in bwd)
            # Each block's output is reduced once, inside the block.
            blocks = _block_scopes(scopes)
            for b in blocks:
                start, end = float(b["ts"]), float(b["ts"]) + float(b["dur"])
                assert sum(start <= o.ts < end for o in fwd) == 1
        assert covered[0] | covered[1] == set(range(HEADS)) and not covered[0] & covered[1]


_TP_CHECK = '''
import json, sys
import torch
import torch.distributed as dist
from torch.nn.attention import sdpa_kernel
from runner.config import ModelConfig
from runner.model import Transformer
from runner.tensor_parallel import TensorParallel, shard_state_dict
from runner.session import SDPA_BACKENDS

dist.init_process_group("gloo")
tp = TensorParallel(dist.get_rank(), dist.get_world_size())
errors = {}
for impl in ("naive", "naive-inplace", "sdpa", "sdpa-math", "sdpa-flash"):
    for per_head in (False, True):
        for kv_heads in (None, 2):
            cfg = ModelConfig(layers=2, heads=4, kv_heads=kv_heads, d_model=32, seq=16, batch=2, vocab=64,
                              impl=impl, per_head=per_head)
            torch.manual_seed(0)
            full = Transformer(cfg)
            part = Transformer(cfg, tp=tp)
            part.load_state_dict(shard_state_dict(full.state_dict(), cfg, tp))
            ids = torch.randint(cfg.vocab, (cfg.batch, cfg.seq))
            backend = SDPA_BACKENDS.get(impl)
            with sdpa_kernel([backend]) if backend is not None else torch.enable_grad():
                want, got = full(ids), part(ids)
                want.square().mean().backward()
                got.square().mean().backward()
            grads = shard_state_dict({n: p.grad for n, p in full.named_parameters()}, cfg, tp)
            errors[f"{impl} per_head={per_head} kv_heads={kv_heads}"] = {
                "forward": (want - got).abs().max().item(),
                "grad": max(((grads[n] - p.grad).abs().max() / grads[n].abs().max()).item()
                            for n, p in part.named_parameters()),
            }
with open(f"{sys.argv[1]}/rank{tp.rank}.json", "w") as f:
    json.dump(errors, f)
dist.destroy_process_group()
'''


@pytest.mark.slow
def test_tensor_parallel_matches_single_process(tmp_path: Path) -> None:
    """Each rank's share of a seeded model's weights gives the single-process output and, after
    backward, the single-process gradients (every implementation, per-head and grouped-query):
    forward within 1e-5, gradients within 1e-5 of each parameter's largest gradient."""
    script = tmp_path / "tp_check.py"
    script.write_text(_TP_CHECK)
    torchrun(str(script), str(tmp_path))
    for rank in range(2):
        errors = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert len(errors) == 20
        bad = {k: v for k, v in errors.items() if not (v["forward"] < 1e-5 and v["grad"] < 1e-5)}
        assert not bad, bad


def test_tensor_parallel_scope_names_are_global() -> None:
    cfg = ModelConfig(layers=4, heads=8, kv_heads=4, d_model=64, seq=8, per_head=True)
    attn = Attention(cfg, 3, tp=TensorParallel(rank=2, size=4))
    assert (attn.n_head, attn.n_kv_head) == (2, 1)
    assert attn.names.block == "tbattn.v1/L3"
    assert attn.names.qkv_proj == "tbattn.v1/L3/H4-5/qkv_proj"
    assert attn.names.out_proj == "tbattn.v1/L3/H4-5/out_proj"
    assert [n.block for n in attn.head_names] == ["tbattn.v1/L3/H4", "tbattn.v1/L3/H5"]
    assert [n.softmax for n in attn.head_names] == ["tbattn.v1/L3/H4/softmax", "tbattn.v1/L3/H5/softmax"]
    single = Attention(cfg.replace(per_head=False), 3)
    assert single.names.qkv_proj == "tbattn.v1/L3/qkv_proj"  # without tensor parallelism: no heads


@pytest.mark.parametrize(
    ("args", "world", "message"),
    [
        (["--parallel", "ddp"], "1", "--parallel ddp needs 2 or more ranks"),
        (["--parallel", "tp"], "1", "--parallel tp needs 2 or more ranks"),
        (["--parallel", "tp", "--heads", "3", "--d-model", "48"], "2", "heads (3) must be divisible by the world"),
        (["--parallel", "tp", "--kv-heads", "1"], "2", "kv_heads (1) must be divisible by the world size (2)"),
        (["--parallel", "tp", "--model", "hf:gpt2"], "2", "--parallel tp (heads split over ranks) needs the builtin"),
        (["--slow-rank", "2", "--slow-ms", "5"], "2", "--slow-rank 2 is not a rank: the world size is 2"),
        (["--slow-rank", "0"], "1", "--slow-rank needs --slow-ms (the extra milliseconds per attention block, > 0) or "
                                    "--slow-factor"),
        (["--slow-rank", "0", "--slow-ms", "-3"], "1", "--slow-ms must be > 0"),
        (["--slow-ms", "5"], "1", "--slow-ms and --slow-factor need --slow-rank"),
        (["--slow-factor", "0.5"], "1", "--slow-ms and --slow-factor need --slow-rank"),
        (["--slow-rank", "0", "--slow-factor", "200"], "1", "--slow-factor must be in 0..100"),
    ],
)
def test_bad_parallel_options_exit_2_and_write_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    args: list[str], world: str, message: str,
) -> None:
    monkeypatch.setenv("WORLD_SIZE", world)  # validation reads it before joining any process group
    logdir = tmp_path / "runs"
    assert main(["--logdir", str(logdir), *TINY, *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tb-attn-run: error: ") and message in err and err.count("\n") == 1
    assert not logdir.exists()


def test_parallel_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    def parallel(*args: str, world: str) -> str:
        monkeypatch.setenv("WORLD_SIZE", world)
        return plan_sweep(build_parser().parse_args([*TINY, *args]))[0].cfg.parallel

    assert parallel(world="1") == "none"
    assert parallel(world="2") == "ddp"  # training under torchrun
    assert parallel("--mode", "inference", world="2") == "none"
    assert parallel("--parallel", "none", world="2") == "none"



def test_a_relative_straggler_sleeps_a_multiple_of_its_blocks_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--slow-factor 0.5``: after a block that took 10 ms (a stand-in clock), the slowed rank
    sleeps 5 ms, in its straggler annotation, whatever the machine's speed."""
    import runner.model as model

    clock = iter([100.0, 100.010])
    slept: list[float] = []
    monkeypatch.setattr(model.time, "perf_counter", lambda: next(clock))
    monkeypatch.setattr(model.time, "sleep", slept.append)
    cfg = ModelConfig(layers=1, heads=2, d_model=16, seq=8, batch=1, vocab=32, impl="sdpa")
    attn = Attention(cfg, 0, delay_factor=0.5)
    import torch
    attn(torch.randn(1, 8, 16))
    assert slept == [pytest.approx(0.005)]
