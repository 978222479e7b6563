"""Findings on how a batch reaches the attention kernel. Thresholds and reasons are in
``docs/findings.md``.

``per-sequence-attention``: a block that calls its attention core once per sequence, each call of
batch 1, where one batched call (a varlen or paged kernel) would take the whole batch. Serving
engines' fallback backends do this (SGLang's ``torch_native`` loops over the requests calling
SDPA on each; vLLM's ``TORCH_SDPA`` backend likewise), and so does a model that splits a ragged
batch in Python. The premise is checked on the ops themselves: each core call's q has batch 1, and
a block call makes more than one of them.
"""

from __future__ import annotations

import numpy as np

from tb_attn_plugin.analysis.attribution.query import RuleQuery
from tb_attn_plugin.analysis.common.finding import new_finding
from tb_attn_plugin.analysis.common.wording import count, duration, layer_list
from tb_attn_plugin.types.schema import Finding
from tb_attn_plugin.vocab.aten import SDPA_OP, SDPA_OPS
from tb_attn_plugin.vocab.libraries import ATTENTION_CORE_OPS

__all__ = ["PER_SEQUENCE_CALLS", "SERVING_RULES"]

#: Core calls per block call, each of batch 1, from which the block loops over its sequences.
PER_SEQUENCE_CALLS = 2


def _per_sequence(t: RuleQuery) -> list[Finding]:
    cores = t.ops(SDPA_OPS | ATTENTION_CORE_OPS, "sdpa")
    if cores.size == 0:
        return []
    a, ev = t.a, t.ev
    # Outermost cores only (an SDPA op's backend op is the same call).
    outer = np.array([not _inside(t, int(i), cores) for i in cores.tolist()], np.bool_)
    cores = cores[outer]
    rows = []
    for layer_no in sorted({int(x) for x in a.layer[cores].tolist()}):
        layer = t.layers.get(layer_no)
        mine = cores[a.layer[cores] == layer_no]
        if layer is None or layer.calls <= 0:
            continue
        batches = [_batch(t, int(i)) for i in mine.tolist()]
        per_block = mine.size / max(len(t.s.steps), 1) / layer.calls
        if per_block >= PER_SEQUENCE_CALLS and batches and all(b == 1 for b in batches):
            sdpa = next(p for p in layer.phases if p.phase == "sdpa")
            rows.append((layer_no, per_block, sdpa.device_us if t.cuda else sdpa.cpu_us,
                         sdpa.kernels / layer.calls if t.cuda else 0.0))
    if not rows:
        return []
    layers = [r[0] for r in rows]
    per_block = min(r[1] for r in rows)
    spent = sum(r[2] for r in rows)
    names = sorted({ev.names[int(ev.name[i])] for i in cores.tolist() if int(a.layer[i]) in layers})
    return [new_finding(
        "per-sequence-attention", "medium",
        "Attention runs once per sequence, not once per batch",
        f"In {layer_list(layers)}, each block call runs its attention core "
        f"{count(per_block, 'time', 'times')} or more, every call on a batch of 1 ({', '.join(names[:3])}): the "
        f"sequences of the batch go one by one through the kernel, each with its own dispatch and launch, "
        f"{duration(spent)} per step in all.",
        "Run the batch in one call: a varlen or paged kernel (flash_attn_varlen_func, FlashInfer's batch "
        "prefill and decode, the serving engine's paged backend instead of its torch-native fallback), or pad "
        f"the sequences and pass one {SDPA_OP} call a mask.",
        layers=layers, ops=names, kernels=[], time_us=spent,
        details={"calls_per_block": round(per_block, 2), "sdpa_us": spent})]


def _inside(t: RuleQuery, i: int, cores: np.ndarray) -> bool:
    """Whether core op ``i`` lies inside another of ``cores`` (its backend op inside SDPA)."""
    p = int(t.a.parent[i])
    marked = set(cores.tolist())
    while p >= 0:
        if p in marked:
            return True
        p = int(t.a.parent[p])
    return False


def _batch(t: RuleQuery, i: int) -> int | None:
    """q's batch (its first dimension, of a 4-D (B, H, S, D) q), if recorded."""
    sid = int(t.ev.shape[i])
    if sid < 0:
        return None
    dims = t.ev.shapes[sid].dims
    q = dims[0] if dims else None
    return int(q[0]) if isinstance(q, list) and len(q) == 4 else None


SERVING_RULES = (_per_sequence,)
