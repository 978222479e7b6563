"""Every corpus run twice: with our scopes and plain (``--no-scopes``, the trace a user brings).
Inference must say of the plain trace what the scopes say of its twin (issue 32): layers, backend,
FLOPs of every counted phase, score tensors, findings, and the phases it can place.

Where the two legitimately differ, ``PLACED_APART`` says why (read from the traces):

- ``nn.MultiheadAttention`` turns its bool mask into a float one (``zeros_like``,
  ``masked_fill_``) before its projections; its module scope holds that as the mask phase, but
  inference takes nothing before a block's first projection, which nothing tells from the
  previous sublayer's tail.

``RAN_APART`` lists twins that ran different code:

- ``instrument()`` hooks the attention modules, and ``nn.TransformerEncoderLayer`` leaves its
  inference fast path when any module under it has hooks ("forward pre-/hooks are attached to
  the module"): the scoped twin ran SDPA (the CPU flash kernel), the plain one
  ``_native_multi_head_attention`` (``bmm``, ``_masked_softmax``, ``bmm``, and the scores).
  Inference reads that op as one whole block, as it reads ``torch-mha-infer``'s.

Timed findings (``dispatch-bound``, ``far-from-roof``, ``unplaced-time``) compare measured times
with thresholds; the scopes add CPU time of their own, and the plain twins were written later
(their metadata holds measured peaks, which ``far-from-roof`` needs), so they are left out.
"""

from __future__ import annotations

from functools import cache

import pytest

from devtools.corpus import CORPUS, PLAIN, TRACES
from tb_attn_plugin.engine.loader import Loader, resolve_runs
from tb_attn_plugin.types.schema import WorkerSummary

COUNTED = ("qkv_proj", "qk_matmul", "av_matmul", "sdpa", "out_proj")
TIMED = frozenset({"dispatch-bound", "far-from-roof", "unplaced-time"})
#: Corpus entry -> phases its scopes place that inference cannot (see the module's docstring).
PLACED_APART: dict[str, set[str]] = {name: {"mask"}
                                     for name in ("torch-mha-train", "torch-mha-infer", "torch-mha-weights-infer")}
#: Corpus entry -> the plain twin's backend, where the scopes changed what ran.
RAN_APART: dict[str, str] = {"torch-encoder-infer": "naive"}


@cache
def _summary(name: str) -> WorkerSummary:
    (run,) = resolve_runs(str(TRACES / name))
    summary = Loader().summarize_run(run)
    assert not summary.errors and len(summary.workers) == 1
    return summary.workers[0]


def test_every_entry_has_a_plain_twin() -> None:
    assert set(PLAIN) == {f"{name}-plain" for name in CORPUS}
    assert all((TRACES / name).is_dir() for name in PLAIN), "run python -m devtools.corpus"


@pytest.mark.parametrize("name", sorted(set(CORPUS) - set(RAN_APART)))
def test_the_plain_twin_says_what_the_scopes_say(name: str) -> None:
    scoped, plain = _summary(name), _summary(f"{name}-plain")
    assert not scoped.inferred and plain.inferred
    assert [layer.layer for layer in plain.layers] == [layer.layer for layer in scoped.layers]
    assert plain.backend == scoped.backend
    for want, got in zip(scoped.layers, plain.layers, strict=True):
        assert got.backend == want.backend
        flops = {p.phase: p.flops for p in got.phases if p.phase in COUNTED}
        assert flops == {p.phase: p.flops for p in want.phases if p.phase in COUNTED}, want.layer
        assert got.sxs_bytes == want.sxs_bytes
        assert not got.core_only
        placed = {p.phase for p in got.phases if p.ops}
        assert placed == {p.phase for p in want.phases if p.ops} - PLACED_APART.get(name, set()), want.layer
    assert {f.id for f in plain.findings} - TIMED == {f.id for f in scoped.findings} - TIMED
    scores = [f.evidence.details for s in (scoped, plain) for f in s.findings if f.id == "sxs-materialized"]
    if scores:
        want_d, got_d = scores
        keys = ("sxs_allocs_per_forward", "score_shape", "sxs_bytes_per_layer",
                *(() if "mask" in PLACED_APART.get(name, set()) else ("sxs_mask_allocs_per_forward",)))
        assert {k: got_d[k] for k in keys} == {k: want_d[k] for k in keys}


@pytest.mark.parametrize("name", sorted(RAN_APART))
def test_a_twin_that_ran_other_code_is_read_as_its_own(name: str) -> None:
    """The plain twin's fused block op is one whole block: its projections counted as the scoped
    twin's, its core unfused (``mha-unfused``), nothing marked core only."""
    scoped, plain = _summary(name), _summary(f"{name}-plain")
    assert [layer.layer for layer in plain.layers] == [layer.layer for layer in scoped.layers]
    assert plain.backend == RAN_APART[name] != scoped.backend
    for want, got in zip(scoped.layers, plain.layers, strict=True):
        for phase in ("qkv_proj", "out_proj"):
            assert {p.phase: p.flops for p in got.phases}[phase] == {p.phase: p.flops for p in want.phases}[phase]
        assert not got.core_only
    assert "mha-unfused" in {f.id for f in plain.findings}
