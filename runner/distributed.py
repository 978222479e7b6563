"""torch.distributed set-up for runs under ``torchrun``: one trace per rank, in the same run."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as torch_dist

__all__ = ["DistContext", "barrier", "init_from_env", "shutdown"]


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


def shutdown(ctx: DistContext | None) -> None:
    if ctx is not None and torch_dist.is_initialized():
        torch_dist.destroy_process_group()
