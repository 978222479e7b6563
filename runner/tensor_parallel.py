"""Tensor-parallel attention heads for the built-in transformer (``--parallel tp``).

It follows Megatron-LM: each rank holds the q/k/v rows of its own heads (column-parallel) and
the matching input columns of the output projection (row-parallel); the block's partial outputs
are summed over ranks at the end of the block, in its ``comm`` phase scope, and the output
projection's bias is added once, after that sum.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as torch_dist

if TYPE_CHECKING:
    from runner.config import ModelConfig

__all__ = ["TPInput", "TPOutputSum", "TensorParallel", "shard_state_dict"]


@dataclass(frozen=True)
class TensorParallel:
    """This rank's place in a tensor-parallel group: it computes heads/size of the heads."""

    rank: int
    size: int
    group: Any = None  # the process group; None is the default (world) group

    def heads(self, n: int) -> range:
        """The global indices of this rank's share of ``n`` heads."""
        per = n // self.size
        return range(self.rank * per, (self.rank + 1) * per)


class TPInput(torch.autograd.Function):
    """Megatron's "f": identity forward; backward sums the input gradient over the ranks, since
    each rank's heads contribute only their part of it."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any) -> torch.Tensor:
        ctx.group = group
        return x

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        grad = grad.contiguous().clone()
        torch_dist.all_reduce(grad, group=ctx.group)
        return grad, None


class TPOutputSum(torch.autograd.Function):
    """Megatron's "g": forward sums the partial outputs over the ranks; backward is the identity
    (every rank already holds the whole output gradient). Unlike
    ``torch.distributed.nn.functional.all_reduce`` (deprecated), whose backward sums the
    gradient again and so scales it by the world size."""

    @staticmethod
    def forward(ctx: Any, y: torch.Tensor, group: Any) -> torch.Tensor:
        # In place, as Megatron does (no copy of the block output): the linear that made ``y``
        # does not keep it for its backward.
        if y.is_contiguous():
            ctx.mark_dirty(y)
        else:
            y = y.contiguous()
        torch_dist.all_reduce(y, group=group)
        return y

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad, None


def shard_state_dict(full: dict[str, torch.Tensor], cfg: ModelConfig, tp: TensorParallel) -> dict[str, torch.Tensor]:
    """Slice a single-process ``Transformer``'s state dict into rank ``tp.rank``'s share: the q,
    k and v rows of its heads, and the output projection's columns for them."""
    D = cfg.head_dim
    q_rows = tp.heads(cfg.heads)
    kv_rows = tp.heads(cfg.n_kv_heads)
    q = slice(q_rows.start * D, q_rows.stop * D)
    k = slice(cfg.d_model + kv_rows.start * D, cfg.d_model + kv_rows.stop * D)
    kv_dim = cfg.n_kv_heads * D
    v = slice(k.start + kv_dim, k.stop + kv_dim)
    out: dict[str, torch.Tensor] = {}
    for name, value in full.items():
        if name.endswith("attn.qkv.weight") or name.endswith("attn.qkv.bias"):
            value = torch.cat([value[q], value[k], value[v]])
        elif name.endswith("attn.out_proj.weight"):
            value = value[:, q]
        out[name] = value.clone()
    return out
