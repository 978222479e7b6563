"""Cheap ``record_function`` scopes: free when no profiler is recording.

``record_function`` costs a dispatcher round trip even when nothing records it, so the runner asks
the profiler first: with the profiler off a scope is a shared no-op context. With it on, tb-attn's
own scopes (``tbattn.v1/...``) are written by PyTorch's fast record function
(``torch._C._profiler._RecordFunctionFast``, the one ``torch.compile`` annotates its kernels
with): about 1.4 µs a scope under the profiler against 7 µs for ``record_function``, which on a
decode step of 21 scopes is the difference between 6% and under 2% of its time
(``bench/README.md``, "Generation"). Kineto writes such an event as ``cpu_op`` rather than
``user_annotation``, and projects no ``gpu_user_annotation`` for it; the decoder reads every event
named by the scope grammar as an annotation, whatever its category (``trace/columns.py``), so the
analysis sees the same trace. Other names (the straggler's and jitter's) keep ``record_function``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import torch
from torch.autograd.profiler import record_function

from tb_attn_plugin.vocab.scopes import is_scope_name

__all__ = ["profiler_enabled", "scope"]

profiler_enabled = torch._C._autograd._profiler_enabled

_NULL: AbstractContextManager[None] = contextlib.nullcontext()
#: PyTorch's fast record function, where this build has it (torch >= 2.2).
_FAST: Callable[[str], Any] | None = getattr(torch._C._profiler, "_RecordFunctionFast", None)


def scope(name: str, enabled: bool = True) -> AbstractContextManager[object]:
    """A scope named ``name`` while a profiler records; otherwise a no-op."""
    if enabled and profiler_enabled():
        if _FAST is not None and is_scope_name(name):
            return _FAST(name)
        return record_function(name)
    return _NULL
