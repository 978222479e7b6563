"""``runner.tensor_parallel``: each rank's share of the heads, and a single-process model's
weights sliced to it (q, k and v rows of its heads, the output projection's columns for them)."""

from __future__ import annotations

import pytest
import torch

from runner.config import ModelConfig
from runner.tensor_parallel import TensorParallel, shard_state_dict


def test_each_rank_computes_its_contiguous_share_of_the_heads() -> None:
    assert [TensorParallel(rank=r, size=4).heads(16) for r in range(4)] == [range(0, 4), range(4, 8), range(8, 12),
                                                                           range(12, 16)]
    assert TensorParallel(rank=1, size=2).heads(2) == range(1, 2)


@pytest.mark.parametrize(("kv_heads", "k_rows", "v_rows"), [
    (None, range(12, 16), range(20, 24)),  # MHA: 4 KV heads of 2 rows each after q's 8 rows; rank 1 has heads 2, 3
    (2, range(10, 12), range(14, 16)),  # GQA: 2 KV heads, rank 1 has KV head 1 (rows 2..3 of k's 4, of v's 4)
])
def test_the_state_dict_is_sliced_to_the_ranks_heads(kv_heads: int | None, k_rows: range, v_rows: range) -> None:
    cfg = ModelConfig(heads=4, kv_heads=kv_heads, d_model=8)  # head_dim 2
    qkv_rows = 8 + 2 * 2 * cfg.n_kv_heads
    full = {"blocks.0.attn.qkv.weight": torch.arange(float(qkv_rows)).unsqueeze(1).repeat(1, 8),
            "blocks.0.attn.qkv.bias": torch.arange(float(qkv_rows)),
            "blocks.0.attn.out_proj.weight": torch.arange(8.0).repeat(8, 1),
            "blocks.0.mlp.weight": torch.ones(3, 3)}
    mine = shard_state_dict(full, cfg, TensorParallel(rank=1, size=2))
    expected_rows = [*range(4, 8), *k_rows, *v_rows]  # q rows of heads 2 and 3, then k's and v's
    assert mine["blocks.0.attn.qkv.bias"].tolist() == expected_rows
    assert mine["blocks.0.attn.qkv.weight"][:, 0].tolist() == expected_rows
    out = mine["blocks.0.attn.out_proj.weight"]
    assert out.shape == (8, 4) and out[0].tolist() == [4.0, 5.0, 6.0, 7.0]  # the columns of heads 2 and 3
    assert torch.equal(mine["blocks.0.mlp.weight"], full["blocks.0.mlp.weight"])
    assert mine["blocks.0.mlp.weight"].data_ptr() != full["blocks.0.mlp.weight"].data_ptr()  # a copy of its own
