"""torch.distributed set-up for runs under ``torchrun``: one trace per rank, in the same run."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as torch_dist

from runner.traces import default_worker_name

if TYPE_CHECKING:
    from runner.config import ModelConfig

__all__ = ["DistContext", "barrier", "init_from_env", "rank_metadata", "shutdown"]


@dataclass(frozen=True)
class DistContext:
    rank: int
    world_size: int
    local_rank: int
    backend: str


def init_from_env(device: str) -> DistContext | None:
    """Join the process group that ``torchrun`` describes in the environment, if any.

    Uses gloo on CPU and nccl on CUDA, where each rank takes the GPU of its local rank.
    """
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return None
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = device.startswith("cuda")
    backend = "nccl" if cuda else "gloo"
    if cuda:
        torch.cuda.set_device(local_rank)
    if not torch_dist.is_initialized():
        torch_dist.init_process_group(backend=backend)
    return DistContext(rank=rank, world_size=world_size, local_rank=local_rank, backend=backend)


def barrier(ctx: DistContext | None) -> None:
    if ctx is not None:
        torch_dist.barrier()


def any_rank(ctx: DistContext | None, flag: bool) -> bool:
    """Whether ``flag`` is true on any rank (every rank gets the same answer)."""
    if ctx is None:
        return flag
    t = torch.tensor([1 if flag else 0], dtype=torch.int32)
    torch_dist.all_reduce(t, op=torch_dist.ReduceOp.MAX)
    return bool(t.item())


def shutdown(ctx: DistContext | None) -> None:
    if ctx is not None and torch_dist.is_initialized():
        torch_dist.destroy_process_group()


def rank_metadata(ctx: DistContext | None, cfg: ModelConfig) -> dict[str, Any]:
    """The run metadata's ``parallel``, ``world_size`` and ``ranks``: one entry per rank with
    its worker name (as in its trace files), host, global heads ``[first, last]`` under tensor
    parallelism (else null: every head) and straggler delay. A collective: every rank calls it."""
    rank, world_size = (ctx.rank, ctx.world_size) if ctx is not None else (0, 1)
    heads = None
    if cfg.parallel == "tp":
        per = cfg.heads // world_size
        heads = [rank * per, (rank + 1) * per - 1]
    mine = {
        "rank": rank,
        "worker": default_worker_name(rank if ctx is not None else None),
        "host": socket.gethostname(),
        "heads": heads,
        "delay_ms": cfg.delay_ms(rank),
    }
    ranks: list[Any] = [mine]
    if ctx is not None:
        ranks = [None] * world_size
        torch_dist.all_gather_object(ranks, mine)  # each rank knows only its own host
    return {"parallel": cfg.parallel, "world_size": world_size, "ranks": ranks}
