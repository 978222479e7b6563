"""One name per op as the analysis reads it, whatever spelling the trace gives it.

SGLang's kernel-shape profiler names its ranges ``sglang_profiler::<module>_<function>_<n>`` with a
counter ``n`` that changes from run to run; serving engines wrap their GEMMs in ops of their own
(``serving.SERVING_GEMM_OPS``); torch.compile's Triton kernels are named by what they were generated
from (``analysis.inductor``). ``canonical`` drops the counter, reads a GEMM wrapper as the
``aten::linear`` it wraps and an Inductor kernel as the op it stands for, so that roles, the block's
extent, the backend rules and the FLOPs match names, not run-dependent spellings.
"""

from __future__ import annotations

import re
from functools import lru_cache

from tb_attn_plugin.analysis.ops.inductor import representative
from tb_attn_plugin.vocab.aten import LINEAR_OP
from tb_attn_plugin.vocab.serving import (
    SERVING_CORE_OPS,
    SERVING_GEMM_OPS,
    SERVING_KV_WRITE_OPS,
    SGLANG_PROFILER_COUNTER,
    SGLANG_PROFILER_PREFIX,
)

__all__ = ["canonical", "is_serving_core", "is_serving_kv_write"]

_COUNTER = re.compile(SGLANG_PROFILER_COUNTER)


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
    """Whether op ``name`` is a serving engine's attention core (``serving.SERVING_CORE_OPS``)."""
    return canonical(name) in SERVING_CORE_OPS


def is_serving_kv_write(name: str) -> bool:
    """Whether op ``name`` writes k and v into a serving engine's paged cache."""
    return canonical(name) in SERVING_KV_WRITE_OPS
