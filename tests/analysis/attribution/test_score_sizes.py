"""Score tensors at every size: CUDA's caching allocator records sizes rounded up (to 512 B, and
blocks over 1 MiB to 2 MiB), so a score tensor is matched with that rounding, and one score
tensor is its shape times its element size. Synthetic traces at both scales, with hand-computed
sizes: a 1.7 GB score tensor recorded as 824 × 2 MiB, and a 17 KiB one recorded as 35 × 512 B."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from tb_attn_plugin.analysis.attribution.analyze import analyze
from tb_attn_plugin.analysis.common.wording import pct
from tb_attn_plugin.analysis.findings.findings import find
from tb_attn_plugin.analysis.summary import summarize_analysis
from tb_attn_plugin.trace.decode import decode_bytes

MIB = 1 << 20


def _x(name: str, ts: float, dur: float, cat: str = "user_annotation", **args: Any) -> dict[str, Any]:
    event = {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur}
    return {**event, "args": args} if args else event


def _mem(ts: float, nbytes: int, device: int) -> dict[str, Any]:
    return {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": ts,
            "args": {"Bytes": nbytes, "Total Allocated": nbytes, "Total Reserved": nbytes, "Addr": 1,
                     "Device Type": device, "Device Id": 0 if device else -1}}


def _trace(shape: list[int], recorded: int, device: int, *, mask_bytes: int | None = None) -> bytes:
    """Layer 0's softmax of fp16 ``shape`` scores, allocating ``recorded`` bytes (and a mask)."""
    events = [_x("ProfilerStep#1", 0, 100), _x("tbattn.v1/L0", 1, 60), _x("tbattn.v1/L0/softmax", 2, 20),
              _x("aten::softmax", 3, 10, "cpu_op", **{"Input Dims": [shape, [], []],
                                                      "Input type": ["c10::Half", "Scalar", ""]}),
              _mem(4, recorded, device)]
    if mask_bytes is not None:
        events += [_x("tbattn.v1/L0/mask", 30, 20), _x("aten::tril", 31, 10, "cpu_op"), _mem(32, mask_bytes, device)]
    return json.dumps({"traceEvents": events}).encode()


def _layer0(data: bytes) -> tuple[Any, Any]:
    analysis = analyze(decode_bytes(data))
    summary = summarize_analysis(analysis, file="host.1.pt.trace.json", worker="host")
    summary = msgspec.structs.replace(summary, findings=find(analysis, summary))
    return summary.layers[0], summary


@pytest.mark.parametrize(("shape", "exact", "recorded"), [
    ([2, 12, 6000, 6000], 1_728_000_000, 824 * 2 * MIB),  # 823.97 MiB-pairs: the large pool's 2 MiB rounding
    ([2, 4, 33, 33], 17_424, 35 * 512),  # small: rounded up to 512 B
])
def test_rounded_cuda_allocations_are_score_tensors(shape: list[int], exact: int, recorded: int) -> None:
    assert exact == shape[0] * shape[1] * shape[2] * shape[3] * 2 and recorded > exact
    layer, summary = _layer0(_trace(shape, recorded, device=1))
    assert layer.score_tensor_bytes == exact and layer.score_shape == shape
    assert layer.sxs_bytes == recorded  # what the allocator holds for it
    (sxs,) = [f for f in summary.findings if f.id == "sxs-materialized"]
    assert sxs.evidence.details["sxs_tensor_bytes"] == exact and sxs.evidence.ops == ["aten::softmax"]
    assert f"({', '.join(map(str, shape))})" in sxs.explanation


def test_cpu_allocations_are_exact() -> None:
    """The CPU allocator does not round: a size off by the rounding is another tensor."""
    assert _layer0(_trace([2, 4, 33, 33], 35 * 512, device=0))[0].sxs_bytes == 0
    assert _layer0(_trace([2, 4, 33, 33], 17_424, device=0))[0].sxs_bytes == 17_424


def test_masks_are_counted_apart() -> None:
    """A bool mask of the scores' shape (B·H·Sq·Sk bytes) from tril is a mask, not a score."""
    layer, summary = _layer0(_trace([2, 4, 33, 33], 17_424, device=0, mask_bytes=2 * 4 * 33 * 33))
    assert layer.sxs_bytes == 17_424 and layer.sxs_mask_bytes == 2 * 4 * 33 * 33
    (sxs,) = [f for f in summary.findings if f.id == "sxs-materialized"]
    assert sxs.evidence.bytes == 17_424 and "1 mask (8.5 KiB, counted apart from the scores)" in sxs.explanation


def test_ops_no_phase_holds_get_a_note() -> None:
    """unplaced-time: an op of a name no role knows, taking half of its block (CPU), while the
    gaps between ops (the module's Python) never count."""
    events = [_x("ProfilerStep#1", 0, 200), _x("tbattn.v1/L0", 1, 100), _x("tbattn.v1/L0/softmax", 2, 20),
              _x("aten::softmax", 3, 10, "cpu_op"), _x("aten::mystery_op", 30, 50, "cpu_op"),
              _x("tbattn.v1/L1", 110, 80), _x("tbattn.v1/L1/softmax", 111, 20), _x("aten::softmax", 112, 10, "cpu_op")]
    _, summary = _layer0(json.dumps({"traceEvents": events}).encode())
    (note,) = [f for f in summary.findings if f.id == "unplaced-time"]
    assert note.evidence.layers == [0] and note.evidence.ops == ["aten::mystery_op"]
    # The share quoted is the layer table's "other" (the block's 100 µs but its softmax phase's 20),
    # and of it the ops' own time: the SDPA op of an inferred block quoted its whole span as 100%
    # where the table had "other" at 0.4% (issue 32).
    (other,) = [p for p in summary.layers[0].phases if p.phase == "other"]
    in_table = other.cpu_us / summary.layers[0].cpu_us
    assert in_table == pytest.approx(79 / 100, abs=0.01)
    assert note.evidence.details["other_share"] == pytest.approx(in_table, abs=0.005)
    assert note.evidence.details["unplaced_ops_share"] == pytest.approx(50 / 100)
    assert f"{pct(in_table)} of the attention block's CPU time is in no phase" in note.explanation
    assert "50% of the block in ops" in note.explanation
