"""Cheap ``record_function`` scopes: free when no profiler is recording.

``record_function`` costs a dispatcher round trip even when nothing records it, so the
runner asks the profiler first. With the profiler off a scope is a shared no-op context.
"""

from __future__ import annotations

import contextlib
from contextlib import AbstractContextManager

import torch
from torch.autograd.profiler import record_function

__all__ = ["profiler_enabled", "scope"]

profiler_enabled = torch._C._autograd._profiler_enabled

_NULL: AbstractContextManager[None] = contextlib.nullcontext()


def scope(name: str, enabled: bool = True) -> AbstractContextManager[object]:
    """A ``record_function(name)`` while a profiler records; otherwise a no-op."""
    if enabled and profiler_enabled():
        return record_function(name)
    return _NULL
