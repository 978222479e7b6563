"""Serving engines' cores in a trace with no module events.

vLLM and SGLang run attention as ops of their own (``serving.SERVING_CORE_OPS``, the KV-cache write,
RoPE), read through ``opnames.canonical``. ``serving_cores`` finds each core op in a trace with no
module events (vLLM's), from the KV-cache write the engine runs just before it.
"""

from __future__ import annotations

import numpy as np

from tb_attn_plugin.analysis.attribution.query import ancestors
from tb_attn_plugin.analysis.ops.opnames import is_serving_core, is_serving_kv_write
from tb_attn_plugin.trace.events import Events
from tb_attn_plugin.trace.kineto import Kind
from tb_attn_plugin.vocab.aten import LAYOUT_OPS, TENSOR_NEW_OPS
from tb_attn_plugin.vocab.serving import SERVING_BOOKKEEPING_OPS

__all__ = ["serving_cores"]

#: Events looked at before a core for its KV-cache write (its ops and their launches).
_MAX_BACK_EVENTS = 64
#: What may run between a serving engine's KV-cache write and its core: the output's allocation,
#: views, vLLM's weak references to graph outputs.
_BETWEEN_WRITE_AND_CORE = TENSOR_NEW_OPS | LAYOUT_OPS | SERVING_BOOKKEEPING_OPS


def serving_cores(events: Events, parent: np.ndarray, cpu: np.ndarray) -> list[tuple[int, int]]:
    """Each outermost serving-engine attention op (``serving.SERVING_CORE_OPS``), from the KV-cache
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
