"""The runner's attention implementations (``--impl``): each name once, with the groups the runner
checks and the backends each may run on.

An implementation is what the runner is asked to run (``docs/runner.md``); a backend
(``backends.py``) is what a trace shows ran. Some spellings are shared ("sdpa-math", "flex"), the
meanings are not: ``IMPL_BACKENDS`` maps one onto the other. The runner validates ``--impl`` and
picks its code by these names; the findings read a run's ``impl`` from its metadata and compare
the backend its trace shows with the ones it may end up on. ``Impl`` is a ``str`` enum: a member
equals its name, as configurations and metadata hold it.
"""

from __future__ import annotations

from enum import StrEnum

from tb_attn_plugin.vocab.backends import Backend

__all__ = ["APPROXIMATE_IMPLS", "GENERATE_IMPLS", "IMPLS", "IMPL_BACKENDS", "LINEAR_IMPLS", "Impl"]


class Impl(StrEnum):
    """Attention implementations of the runner's built-in transformer, in the order the demo shows them."""

    NAIVE = "naive"  # matmul, softmax, matmul by hand; the mask applied out of place
    NAIVE_INPLACE = "naive-inplace"  # the same, masked in place
    SDPA = "sdpa"  # F.scaled_dot_product_attention, PyTorch choosing its kernel
    SDPA_MATH = "sdpa-math"  # SDPA pinned to each of its backends
    SDPA_FLASH = "sdpa-flash"
    SDPA_EFFICIENT = "sdpa-efficient"
    SDPA_CUDNN = "sdpa-cudnn"
    FLEX = "flex"  # flex_attention, compiled
    FLEX_EAGER = "flex-eager"  # flex_attention, eager (its unfused reference path)
    LINEAR_ELU = "linear-elu"  # linear attention, elu feature map (runner/variants.py)
    PERFORMER = "performer"  # linear attention, random features
    INT8_QK = "int8-qk"  # q·kᵀ in integers


def _names(*impls: Impl) -> tuple[str, ...]:
    return tuple(i.value for i in impls)


#: Every implementation, in the order the demo shows them.
IMPLS: tuple[str, ...] = _names(*Impl)
#: Implementations that approximate softmax attention (runner/variants.py): their accuracy is
#: the point of measuring them.
APPROXIMATE_IMPLS: tuple[str, ...] = _names(Impl.LINEAR_ELU, Impl.PERFORMER, Impl.INT8_QK)
#: Linear attention: no (Sq, Sk) scores outside a chunk, so only a causal mask or none.
LINEAR_IMPLS: tuple[str, ...] = _names(Impl.LINEAR_ELU, Impl.PERFORMER)
#: ``--mode generate``'s implementations: the exact ones that take a query shorter than its keys.
#: Not flex_attention: compiled, its kernel is specialized to one key length, so every decode step
#: would compile anew (past dynamo's recompile limit, it runs eagerly); eager, it builds a whole
#: BlockMask and calls a compiled region on every call, which is not how anyone decodes with it.
GENERATE_IMPLS: tuple[str, ...] = _names(Impl.NAIVE, Impl.NAIVE_INPLACE, Impl.SDPA, Impl.SDPA_MATH, Impl.SDPA_FLASH,
                                         Impl.SDPA_EFFICIENT, Impl.SDPA_CUDNN)
#: Backends each implementation may legitimately end up on (``docs/runner.md``); "sdpa" lets
#: PyTorch choose, so it expects nothing.
IMPL_BACKENDS: dict[str, tuple[Backend, ...]] = {
    Impl.SDPA_FLASH: (Backend.FLASH, Backend.CPU_FLASH, Backend.ROCM_FLASH),
    Impl.SDPA_EFFICIENT: (Backend.EFFICIENT,),
    Impl.SDPA_CUDNN: (Backend.CUDNN,),
    Impl.SDPA_MATH: (Backend.SDPA_MATH,),
    Impl.NAIVE: (Backend.NAIVE,),
    Impl.NAIVE_INPLACE: (Backend.NAIVE,),
    Impl.FLEX: (Backend.FLEX,),
    Impl.FLEX_EAGER: (Backend.FLEX_EAGER,),
    Impl.LINEAR_ELU: (Backend.LINEAR,),
    Impl.PERFORMER: (Backend.PERFORMER,),
    Impl.INT8_QK: (Backend.INT8_QK,),
}
