"""Serving engines' ops as the analysis reads them: one canonical name per op, and their cores.

vLLM and SGLang run attention as ops of their own (``ops.SERVING_CORE_OPS``, the KV-cache write,
RoPE), and SGLang's kernel-shape profiler names its ranges ``sglang_profiler::<module>_<function>_<n>``
with a counter ``n`` that changes from run to run. ``canonical`` drops that counter and reads a
serving engine's GEMM wrapper (``ops.SERVING_GEMM_OPS``) as the ``aten::linear`` it wraps, so that
roles, the block's extent and the backend rules match names, not run-dependent spellings.
``serving_cores`` finds each core op in a trace with no module events (vLLM's), from the KV-cache
write the engine runs just before it.
"""

from __future__ import annotations

import re
from functools import lru_cache

import numpy as np

from tb_attn_plugin.analysis.inductor import representative
from tb_attn_plugin.analysis.query import ancestors
from tb_attn_plugin.ops import (
    LAYOUT_OPS,
    LINEAR_OP,
    SERVING_BOOKKEEPING_OPS,
    SERVING_CORE_OPS,
    SERVING_GEMM_OPS,
    SERVING_KV_WRITE_OPS,
    SGLANG_PROFILER_PREFIX,
    TENSOR_NEW_OPS,
)
from tb_attn_plugin.trace.events import Events
from tb_attn_plugin.trace.kineto import Kind

__all__ = ["canonical", "is_serving_core", "is_serving_kv_write", "serving_cores"]

_COUNTER = re.compile(r"_\d+$")


@lru_cache(maxsize=4096)
def canonical(name: str) -> str:
    """``name`` without SGLang's profiler counter; a serving GEMM wrapper as ``aten::linear``; an
    Inductor kernel as the op it stands for (``inductor.representative``)."""
    if name.startswith(SGLANG_PROFILER_PREFIX):
        return _COUNTER.sub("", name)
    if name in SERVING_GEMM_OPS:
        return LINEAR_OP
    return representative(name) or name


def is_serving_core(name: str) -> bool:
    """Whether op ``name`` is a serving engine's attention core (``ops.SERVING_CORE_OPS``)."""
    return canonical(name) in SERVING_CORE_OPS


def is_serving_kv_write(name: str) -> bool:
    """Whether op ``name`` writes k and v into a serving engine's paged cache."""
    return canonical(name) in SERVING_KV_WRITE_OPS


#: Events looked at before a core for its KV-cache write (its ops and their launches).
_MAX_BACK_EVENTS = 64
#: What may run between a serving engine's KV-cache write and its core: the output's allocation,
#: views, vLLM's weak references to graph outputs.
_BETWEEN_WRITE_AND_CORE = TENSOR_NEW_OPS | LAYOUT_OPS | SERVING_BOOKKEEPING_OPS


def serving_cores(events: Events, parent: np.ndarray, cpu: np.ndarray) -> list[tuple[int, int]]:
    """Each outermost serving-engine attention op (``ops.SERVING_CORE_OPS``), from the KV-cache
    write just before it where there is one: vLLM calls ``unified_kv_cache_update`` and then
    ``unified_attention_with_output`` as siblings, the write being the layer's own (its cache)."""
    names, name = events.names, events.name
    ids = [i for i, n in enumerate(names) if is_serving_core(n)]
    if not ids:
        return []
    out = []
    for i in np.flatnonzero(cpu & np.isin(name, ids)).tolist():
        if any(is_serving_core(names[name[p]]) for p in ancestors(parent, i)):
            continue
        first = i
        j = i - 1
        while j >= 0 and i - j <= _MAX_BACK_EVENTS and events.track[j] == events.track[i]:
            if parent[j] == parent[i] and cpu[j]:
                op = names[name[j]]
                if is_serving_kv_write(op):
                    first = j
                elif op not in _BETWEEN_WRITE_AND_CORE:
                    break
            elif parent[j] == parent[i] and events.kind[j] != Kind.RUNTIME:
                break  # an annotation (a compiled graph piece): what precedes it is not this core's
            j -= 1
        out.append((first, i))
    return out
