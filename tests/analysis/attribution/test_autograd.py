"""Backward work and the forward op that created its autograd node (``analysis/attribution/autograd.py``).

A hand-written training step of one block, as torch 2.13 writes it (read in ModernBERT's and
Falcon's traces, ``tests/models/test_backward_owner.py``): ops that create no autograd node carry
the number of the next node that is created. A no-op ``aten::to`` before the SDPA call shares
the SDPA call's number, a no-op ``to`` at the block's end shares the residual ``add`` after the
block, and ``aten::linear`` shares ``aten::t``'s.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from tb_attn_plugin.analysis.attribution.attribute import attribute
from tb_attn_plugin.analysis.attribution.autograd import node_owners
from tb_attn_plugin.trace.decode import decode_bytes
from tb_attn_plugin.vocab.scopes import PHASES

ENGINE = "autograd::engine::evaluate_function: "
B, H, S, D = 2, 4, 16, 16
QKV = [B, H, S, D]
SDPA_BWD = "aten::_scaled_dot_product_flash_attention_for_cpu_backward"


def _x(name: str, ts: float, dur: float, seq: int | None = None, cat: str = "cpu_op", **args: Any) -> dict[str, Any]:
    if seq is not None:
        args["Sequence number"] = seq
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": args}


def _scope(name: str, ts: float, dur: float) -> dict[str, Any]:
    return _x(name, ts, dur, cat="user_annotation")


def _trace() -> list[dict[str, Any]]:
    # grad_out, q, k, v, out, logsumexp, dropout_p, is_causal: the CPU flash kernel's backward.
    bwd = {"Input Dims": [QKV, QKV, QKV, QKV, QKV, [B, H, S], [], []],
           "Input type": ["float"] * 6 + ["Scalar", "Scalar"], "Concrete Inputs": [""] * 6 + ["0.", "False"]}
    return [
        _scope("ProfilerStep#1", 0, 400),
        _scope("tbattn.v1/L0", 10, 190),
        _scope("tbattn.v1/L0/qkv_proj", 12, 30),
        _x("aten::linear", 13, 28, 4), _x("aten::t", 14, 2, 4), _x("aten::addmm", 17, 20, 5),
        _x("aten::to", 50, 2, 7),  # a no-op conversion before SDPA, in no phase
        _scope("tbattn.v1/L0/sdpa", 60, 60),
        _x("aten::scaled_dot_product_attention", 61, 58, 7),
        _x("aten::_scaled_dot_product_flash_attention_for_cpu", 62, 56, 7),
        _x("aten::empty", 63, 1),  # below autograd: no number
        _x("aten::to", 130, 1, 8),  # a no-op at the block's end...
        _x("aten::add", 210, 5, 8),  # ...and the residual add after it, which creates AddBackward0
        _x(ENGINE + "AddBackward0", 250, 10, 8), _x("AddBackward0", 251, 8),
        _x(ENGINE + "ScaledDotProductFlashAttentionForCpuBackward0", 270, 60, 7),
        _x("ScaledDotProductFlashAttentionForCpuBackward0", 271, 58),
        _x(SDPA_BWD, 272, 56, **bwd),
        _x(ENGINE + "TBackward0", 340, 10, 4), _x("TBackward0", 341, 8),
        _x(ENGINE + "AddmmBackward0", 355, 25, 5), _x("AddmmBackward0", 356, 23),
    ]


def _rows() -> dict[tuple[str, float], tuple[int, str, bool, float]]:
    ev = decode_bytes(json.dumps({"traceEvents": _trace()}).encode())
    a = attribute(ev)
    return {(ev.names[ev.name[i]], float(ev.ts[i])): (
        int(a.layer[i]), PHASES[a.phase[i]] if a.phase[i] >= 0 else "other", bool(a.backward[i]), float(a.flops[i]))
        for i in range(len(ev))}


def test_the_sdpa_calls_backward_is_the_sdpa_phases() -> None:
    rows = _rows()
    # Its number is also the no-op `to`'s before the call (in no phase) and the composite SDPA op's:
    # the kernel op started last, and created the node.
    assert rows[(ENGINE + "ScaledDotProductFlashAttentionForCpuBackward0", 270.0)][:3] == (0, "sdpa", True)
    # The fused backward's FLOPs: 2.5 × the forward's 2·B·H·Sq·Sk·(D + Dv), counted in the sdpa phase.
    assert rows[(SDPA_BWD, 272.0)] == (0, "sdpa", True, 2.5 * 2 * B * H * S * S * (D + D))
    assert rows[("aten::to", 50.0)][:3] == (0, "other", False)


def test_an_op_outside_the_block_owns_its_backward() -> None:
    rows = _rows()
    # The residual add after the block shares the number of the block's last no-op: its backward
    # is not attention's.
    assert rows[(ENGINE + "AddBackward0", 250.0)][:3] == (-1, "other", True)
    assert rows[("AddBackward0", 251.0)][:3] == (-1, "other", True)


def test_a_composite_ops_backward_is_its_inner_ops() -> None:
    rows = _rows()
    assert rows[(ENGINE + "TBackward0", 340.0)][:3] == (0, "qkv_proj", True)  # aten::t's, inside aten::linear
    assert rows[(ENGINE + "AddmmBackward0", 355.0)][:3] == (0, "qkv_proj", True)


def test_node_owners_are_the_last_ops_to_start_with_each_number() -> None:
    seq = np.array([4, 4, 5, 7, 7, 7, -1, 8], np.int64)
    numbers, owner = node_owners(seq, np.array([0, 1, 2, 3, 4, 5, 7], np.int64))
    assert numbers.tolist() == [4, 5, 7, 8] and owner.tolist() == [1, 2, 5, 7]
