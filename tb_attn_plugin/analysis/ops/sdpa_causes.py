"""Why SDPA ran its math backend: the causes a trace shows, each with its evidence and its fix.

``causes(calls, cuda=...)`` reads the arguments of the ``aten::scaled_dot_product_attention``
calls that dispatched to ``_scaled_dot_product_attention_math`` (``Input Dims``, ``Input type``
and ``Concrete Inputs``: q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa) and says
which properties ruled out which fused kernel. The rules follow PyTorch's own checks
(``sdp_utils_cpp.cpp`` for the CPU, ``cuda/sdp_utils.cpp``), as of PyTorch 2.4 to 2.13:

- CPU, whose one fused kernel is the CPU flash kernel: dropout_p > 0; inputs that are not
  4-D (B, H, S, D); a value head dimension that differs from the query's. Masks, grouped-query
  attention, any head dimension and every float dtype run on it.
- CUDA, with flash, memory-efficient and cuDNN kernels (math runs when all three refuse):
  fp32 or fp64 inputs rule out flash and cuDNN; an explicit attn_mask rules out flash;
  enable_gqa (fewer k/v heads) rules out the efficient kernel; a head dimension above 256 rules
  out flash and cuDNN, and one that is not a multiple of 8 rules out all three; a value head
  dimension that differs rules out flash.

A run pinned to the math backend (``impl`` sdpa-math) is a cause of its own. Nested (jagged)
inputs and non-contiguous last dimensions are not visible in a trace's shapes; the finding names
them among what to check when it finds no cause.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Cause", "SdpaCall", "causes"]

_FP32 = frozenset({"float", "double"})


@dataclass(frozen=True, slots=True)
class SdpaCall:
    """What one SDPA call's recorded arguments say (None: not recorded)."""

    q: list[int] | None
    k: list[int] | None
    v: list[int] | None
    mask: list[int] | None
    dtype: str | None  # the query's ``Input type`` ("float", "c10::BFloat16"...)
    dropout_p: float | None
    enable_gqa: bool | None


@dataclass(frozen=True, slots=True)
class Cause:
    key: str  # stable: "dropout", "mask", "fp32", "gqa", "head-dim", "value-dim", "rank", "pinned"
    text: str  # what the trace shows and which kernel it rules out
    fix: str


def causes(calls: list[SdpaCall], *, cuda: bool, pinned: bool = False) -> list[Cause]:
    """The causes shown by these calls (each kind once, in a fixed order)."""
    out: list[Cause] = []
    if pinned:
        out.append(Cause("pinned", "the run pinned the math backend (impl sdpa-math)",
                         "drop the sdpa_kernel(SDPBackend.MATH) pin"))
    dropout = sorted({c.dropout_p for c in calls if c.dropout_p is not None and c.dropout_p > 0})
    ranks = sorted({len(d) for c in calls for d in (c.q, c.k, c.v) if d is not None and len(d) != 4})
    value_dims = sorted({(c.q[-1], c.v[-1]) for c in calls if c.q and c.v and c.q[-1] != c.v[-1]})
    if not cuda:
        if dropout:
            out.append(Cause(
                "dropout", f"dropout_p {_floats(dropout)} (training): the CPU flash kernel takes no dropout",
                "on CPU only the math backend applies attention dropout: train with attention dropout 0 (most "
                "LLMs do) or accept the math path in training; inference (dropout 0) runs the CPU flash kernel, "
                "and on CUDA flash and efficient apply dropout inside the kernel"))
        if ranks:
            out.append(Cause("rank", f"{_ints(ranks)}-D inputs: the CPU flash kernel needs 4-D (B, H, S, D)",
                             "pass q, k and v as (B, H, S, D), with a batch and a head dimension"))
        if value_dims:
            out.append(Cause("value-dim", f"value head dimension {_pairs(value_dims)}: the CPU flash kernel "
                             "needs one head dimension for q, k and v", "give v the head dimension of q and k"))
        return out
    fp32 = sorted({c.dtype for c in calls if c.dtype in _FP32})
    masks = sorted({str(c.mask) for c in calls if c.mask})
    gqa = any(c.enable_gqa or (c.q and c.k and len(c.q) >= 3 and len(c.k) >= 3 and c.q[-3] != c.k[-3])
              for c in calls)
    heads = sorted({c.q[-1] for c in calls if c.q})
    big = [h for h in heads if h > 256]
    odd = [h for h in heads if h % 8]
    if fp32:
        out.append(Cause("fp32", f"the inputs are {' and '.join(fp32)}: flash and cuDNN need fp16 or bf16",
                         "run attention in bf16 or fp16 (torch.autocast, or cast q, k and v)"))
    if masks:
        out.append(Cause("mask", f"an explicit attn_mask {', '.join(masks)} is passed: flash takes none",
                         "for a causal mask pass is_causal=True and no attn_mask; other masks run on the efficient "
                         "and cuDNN kernels"))
    if gqa:
        out.append(Cause("gqa", "grouped-query attention (enable_gqa, fewer k/v heads than q heads): the efficient "
                         "kernel takes none", "run flash or cuDNN (bf16/fp16, no attn_mask), or repeat k and v to "
                         "all heads before the call"))
    if big or odd:
        what = (f"head dimension {_ints(big)} is above 256 (flash and cuDNN)" if big else "") + \
               (" and " if big and odd else "") + \
               (f"head dimension {_ints(odd)} is not a multiple of 8 (every fused kernel)" if odd else "")
        out.append(Cause("head-dim", what, "keep the head dimension a multiple of 8, at most 256 (pad it if you "
                         "must)"))
    if value_dims:
        out.append(Cause("value-dim", f"value head dimension {_pairs(value_dims)}: flash needs one head dimension "
                         "for q, k and v", "give v the head dimension of q and k"))
    return out


def _floats(values: list[float]) -> str:
    return ", ".join(f"{v:g}" for v in values)


def _ints(values: list[int]) -> str:
    return ", ".join(str(v) for v in values)


def _pairs(pairs: list[tuple[int, int]]) -> str:
    return ", ".join(f"{v} against q's {q}" for q, v in pairs)
