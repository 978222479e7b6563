"""``runner.scoping``: a scope is a ``record_function`` only while a profiler records, and ours
take PyTorch's fast path; names are kept as they are."""

from __future__ import annotations

import torch
from torch.profiler import ProfilerActivity, profile

from runner.scoping import profiler_enabled, scope


def _names(prof: profile) -> list[str]:
    return [e.name for e in prof.events()]


def test_no_profiler_no_scope() -> None:
    assert not profiler_enabled()
    first, second = scope("tbattn.v1/L0/softmax"), scope("anything")
    assert first is second  # the one shared no-op
    with first:
        pass


def test_scopes_are_recorded_under_a_profiler_unless_disabled() -> None:
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        assert profiler_enabled()
        with scope("tbattn.v1/L0/qk_matmul"):
            torch.ones(2) + 1
        with scope("my label"):
            torch.ones(2) + 1
        with scope("tbattn.v1/L1/softmax", enabled=False):
            torch.ones(2) + 1
    names = _names(prof)
    assert names.count("tbattn.v1/L0/qk_matmul") == 1 and names.count("my label") == 1
    assert "tbattn.v1/L1/softmax" not in names
