"""The scope grammar: how a ``record_function`` name encodes attention layer, head and phase.

This module is the contract between the runner, which writes scopes, and the plugin, which
reads them. It imports nothing heavy so that both sides (and TensorBoard's plugin loader) can
use it freely. The grammar is documented in ``docs/scopes.md``; bump ``GRAMMAR_VERSION`` on
any change that an older reader would misread.

Grammar (version 1)::

    scope  := PREFIX "/L" layer [ "/H" heads ] [ "/" phase ] [ " " module ]
    PREFIX := "tbattn.v1"
    heads  := head [ "-" head ]
    layer  := decimal integer in [0, MAX_LAYERS)
    head   := decimal integer in [0, MAX_HEADS)
    phase  := one of PHASES
    module := dotted module path (no spaces), only on block scopes

Examples: ``tbattn.v1/L3`` (the whole attention block of layer 3),
``tbattn.v1/L3/softmax``, ``tbattn.v1/L3/H5/qk_matmul``,
``tbattn.v1/L0 encoder.layer.0.attention``.

Generation steps (``--mode generate``) have their own scope around the whole step, outside any
layer: ``tbattn.v1/prefill/C512`` (the prompt, 512 keys) and ``tbattn.v1/decode/C513`` (one
token, against 513 keys: the cache with its own key appended). ``STEP_ROLES``,
``format_step_scope``, ``parse_step_scope``. A reader that predates them reads them as no scope
(they name no layer), so the version stays 1.

The phases' named groups (``CORE_PHASES``, ``SCORE_PHASES``...) live here too, beside the names
they group, with ``OTHER``, the pseudo-phase of work in no phase scope.

Phases added since the first readers (``rope``, ``kv_cache``, then ``block_mask``, ``flex`` and
``compiled``, then ``feature_map``, ``quantize``, ``dequantize``, ``kv_state`` and ``normalize``,
then ``copy`` and ``comm``) keep the version: a reader that predates a phase reads its scope as no scope, so
its work stays in the block, which is not a misreading. ``MODEL_BLOCK_MASK`` (no layer) is not a
layer scope at all.

Head indices are global: under tensor parallelism, where each rank computes a slice of the
heads, the rank with heads 4..7 of 16 writes ``tbattn.v1/L3/H4-7/softmax`` for work done on
that slice together, and ``tbattn.v1/L3/H5/softmax`` for head 5 measured on its own. A head
range always names a phase, and it is never a measured head: the plugin splits the range's
work evenly over its heads, as it does for a whole layer, and marks them derived.

Bounds: a layer or head number must be below ``MAX_LAYERS`` / ``MAX_HEADS`` (4096 each, more
than any model has). ``format_scope`` refuses larger ones; a reader treats a name that carries
one as no scope at all (``read_scope`` says so, and the summary counts it in its diagnostics),
so that a trace claiming head 2**31, or heads 0 to 10**7, costs nothing in proportion.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "CORE_PHASES",
    "CORE_PHASES_BUT_PASSES",
    "FUSED_PHASES",
    "GRAMMAR_VERSION",
    "IMPL_NEUTRAL_PHASES",
    "MAX_CONTEXT",
    "MAX_HEADS",
    "MAX_LAYERS",
    "MODEL_BLOCK_MASK",
    "OTHER",
    "OUT_OF_RANGE",
    "PHASES",
    "PREFIX",
    "PROJECTION_PHASES",
    "QUANT_PHASES",
    "SCORE_PASS_PHASES",
    "SCORE_PHASES",
    "STEP_ROLES",
    "UNFUSED_CORE_PHASES",
    "UNSPLIT_PHASES",
    "Phase",
    "Scope",
    "StepScope",
    "format_scope",
    "format_step_scope",
    "in_order",
    "is_scope_name",
    "parse_scope",
    "parse_step_scope",
    "read_scope",
]

GRAMMAR_VERSION = 1
PREFIX = f"tbattn.v{GRAMMAR_VERSION}"
#: Layers are numbered 0..MAX_LAYERS-1 and heads 0..MAX_HEADS-1 (both global indices).
MAX_LAYERS = 4096
MAX_HEADS = 4096
_MAX_VERSION = 1 << 16
#: What ``read_scope`` says of a name with a number out of bounds (a diagnostics label).
OUT_OF_RANGE = f"scopes with a number out of range (layers and heads over {MAX_LAYERS - 1}), ignored"


class Phase(StrEnum):
    """Phases of one attention block, in execution order."""

    QKV_PROJ = "qkv_proj"  # q, k and v projections, their bias and QK-norm, and the split into heads
    ROPE = "rope"  # rotary position embeddings applied to q and k
    KV_CACHE = "kv_cache"  # appending this call's k and v to a KV cache
    KV_EXPAND = "kv_expand"  # repeating k/v heads for grouped-query attention (naive only)
    COPY = "copy"  # layout copies of q, k and v before the core (``.contiguous()`` of a transposed view)
    BLOCK_MASK = "block_mask"  # building a flex_attention BlockMask (create_block_mask)
    FEATURE_MAP = "feature_map"  # linear attention: q and k mapped to features φ(q), φ(k)
    QUANTIZE = "quantize"  # q and k smoothed and quantized (int8 attention)
    QK_MATMUL = "qk_matmul"  # q @ k^T -> (B, H, Sq, Sk) scores (linear attention: within a chunk)
    DEQUANTIZE = "dequantize"  # integer scores back to floating point (int8 attention)
    SCALE = "scale"  # scores * 1/sqrt(head_dim)
    MASK = "mask"  # causal or padding mask applied to the scores
    SOFTMAX = "softmax"
    DROPOUT = "dropout"  # attention-probability dropout (training with p > 0)
    AV_MATMUL = "av_matmul"  # probs @ v
    KV_STATE = "kv_state"  # linear attention: the keys' state φ(K)ᵀV (per chunk, prefix-summed) and φ(q) times it
    NORMALIZE = "normalize"  # linear attention: the output divided by φ(q)·Σφ(k)
    SDPA = "sdpa"  # a fused F.scaled_dot_product_attention call (all of the above)
    FLEX = "flex"  # a flex_attention call, compiled (fused) or eager (the unfused reference)
    COMPILED = "compiled"  # a torch.compile'd region of the block: its phases fused, no scopes inside
    OUT_PROJ = "out_proj"  # merging heads and the output projection
    COMM = "comm"  # communication inside the block: collectives (tensor parallelism's all-reduce) and their copies


PHASES: tuple[str, ...] = tuple(p.value for p in Phase)
#: Building a ``flex_attention`` BlockMask outside any block: a model that builds the mask its
#: layers share once per forward (Hugging Face's flex path does). Not a layer's scope (no
#: ``/L``): the findings read it by name.
MODEL_BLOCK_MASK = f"{PREFIX}/{Phase.BLOCK_MASK.value}"
#: The pseudo-phase of a layer's events that no phase scope encloses. Not in the grammar (no scope
#: names it): the summary reports it beside the phases.
OTHER = "other"


def _group(*phases: Phase) -> frozenset[str]:
    return frozenset(p.value for p in phases)


# Groups of phases, named for what their members share. A module that needs a group that differs
# builds it from these with set operations, and says why. ``tests/vocab/test_vocabulary.py`` keeps
# literal groups of phase names out of every other module.
#: The projections into heads and out of them.
PROJECTION_PHASES = _group(Phase.QKV_PROJ, Phase.OUT_PROJ)
#: Element-wise passes over the (Sq, Sk) scores, which change them in place.
SCORE_PASS_PHASES = _group(Phase.SCALE, Phase.MASK, Phase.DROPOUT)
#: The attention core op by op, q·kᵀ to attn·V, as a hand-written block runs it.
UNFUSED_CORE_PHASES = _group(Phase.QK_MATMUL, Phase.SOFTMAX, Phase.AV_MATMUL) | SCORE_PASS_PHASES
#: Phases that run the whole core as one call: SDPA, flex_attention, a compiled block.
FUSED_PHASES = _group(Phase.SDPA, Phase.FLEX, Phase.COMPILED)
#: The attention core, q·kᵀ to attn·V, fused or not: what a mask thins and what heads split.
CORE_PHASES = UNFUSED_CORE_PHASES | FUSED_PHASES
#: The core without the element-wise passes over its scores: the ops that mark where a call's core
#: stands (before q·kᵀ, after it, after attn·V), which a pass in between (a mask's copy) is read against.
CORE_PHASES_BUT_PASSES = CORE_PHASES - SCORE_PASS_PHASES
#: Phases that hold (Sq, Sk) scores or probabilities: q·kᵀ to dropout, int8's dequantized scores,
#: and the SDPA and flex calls (whose unfused paths materialize them). Not attn·V: its output is (Sq, D).
SCORE_PHASES = _group(Phase.QK_MATMUL, Phase.DEQUANTIZE, Phase.SCALE, Phase.MASK, Phase.SOFTMAX, Phase.DROPOUT,
                      Phase.SDPA, Phase.FLEX)
#: int8 attention's conversions: q and k to integers, the integer scores back to floating point.
QUANT_PHASES = _group(Phase.QUANTIZE, Phase.DEQUANTIZE)
#: Phases that run the same ops whatever the attention implementation: projections, RoPE, the KV cache.
IMPL_NEUTRAL_PHASES = PROJECTION_PHASES | _group(Phase.ROPE, Phase.KV_CACHE)
#: What a derived head (no head scopes) gets no share of: the projections, communication and ``OTHER``.
UNSPLIT_PHASES = PROJECTION_PHASES | _group(Phase.COMM) | {OTHER}


def in_order(phases: frozenset[str]) -> tuple[str, ...]:
    """A group's phases in execution order (``PHASES``, then ``OTHER``): a set's own order changes
    from one process to the next."""
    return tuple(p for p in (*PHASES, OTHER) if p in phases)


#: What a generation step is (``--mode generate``): the prompt's forward, or one decode token.
STEP_ROLES: tuple[str, ...] = ("prefill", "decode")
#: A context length must be below this (2**31: the analysis keeps them in int32 columns).
MAX_CONTEXT = 1 << 31
_STEP_RE = re.compile(r"^tbattn\.v(?P<version>\d+)/(?P<role>prefill|decode)/C(?P<context>\d+)$")

_SCOPE_RE = re.compile(
    r"^tbattn\.v(?P<version>\d+)/L(?P<layer>\d+)"
    r"(?:/H(?P<head>\d+)(?:-(?P<head_last>\d+))?)?"
    r"(?:/(?P<phase>[a-z_]+))?"
    r"(?: (?P<module>\S+))?$"
)


@dataclass(frozen=True, slots=True)
class Scope:
    """One parsed scope name. ``phase`` is None for a block (or head) scope. ``head`` is the
    measured head, or with ``head_last`` the first head of a range computed together."""

    layer: int
    head: int | None = None
    phase: str | None = None
    module: str | None = None
    version: int = GRAMMAR_VERSION
    head_last: int | None = None

    @property
    def is_block(self) -> bool:
        return self.head is None and self.phase is None

    @property
    def measured_head(self) -> int | None:
        """The one head this scope measures, or None (no head, or a range of them)."""
        return self.head if self.head_last is None else None

    @property
    def heads(self) -> range | None:
        """The global heads this scope covers, when it names any."""
        if self.head is None:
            return None
        return range(self.head, (self.head if self.head_last is None else self.head_last) + 1)


def format_scope(
    layer: int, *, head: int | range | None = None, phase: Phase | str | None = None, module: str | None = None
) -> str:
    """Build the ``record_function`` name for a scope. ``head``: one global head, or a range of
    heads computed together (tensor parallelism). Raises ValueError on bad parts."""
    if isinstance(head, range):
        if len(head) == 0 or head.step != 1 or head.start < 0:
            raise ValueError(f"a head range must be non-empty, ascending by 1 and >= 0, got {head}")
        if len(head) == 1:
            head = head.start
    if layer < 0 or (isinstance(head, int) and head < 0):
        raise ValueError(f"layer and head must be >= 0, got layer={layer} head={head}")
    last = head[-1] if isinstance(head, range) else head
    if layer >= MAX_LAYERS or (last is not None and last >= MAX_HEADS):
        raise ValueError(f"layer must be < {MAX_LAYERS} and head < {MAX_HEADS}, got layer={layer} head={head}")
    name = f"{PREFIX}/L{layer}"
    if isinstance(head, range):
        if phase is None:
            raise ValueError("a head range belongs on phase scopes only")
        name += f"/H{head.start}-{head[-1]}"
    elif head is not None:
        name += f"/H{head}"
    if phase is not None:
        value = Phase(phase).value
        name += f"/{value}"
    if module:
        if phase is not None or head is not None:
            raise ValueError("a module path belongs on block scopes only")
        if any(c.isspace() for c in module):
            raise ValueError(f"module path must not contain whitespace: {module!r}")
        name += f" {module}"
    return name


@dataclass(frozen=True, slots=True)
class StepScope:
    """One generation step's scope: its role and the keys it attends (the KV cache's length after
    its own tokens are appended)."""

    role: str  # one of STEP_ROLES
    context: int
    version: int = GRAMMAR_VERSION


def format_step_scope(role: str, context: int) -> str:
    """``tbattn.v1/decode/C513``: the scope around one generation step. Raises ValueError on bad
    parts."""
    if role not in STEP_ROLES:
        raise ValueError(f"a step's role is one of {', '.join(STEP_ROLES)}, got {role!r}")
    if not 0 < context < MAX_CONTEXT:
        raise ValueError(f"a context length must be in 1..{MAX_CONTEXT - 1}, got {context}")
    return f"{PREFIX}/{role}/C{context}"


def parse_step_scope(name: str) -> StepScope | None:
    """The generation step a name scopes, or None (not a step scope, or a number out of bounds)."""
    m = _STEP_RE.match(name)
    if m is None:
        return None
    version, context = _bounded(m.group("version"), _MAX_VERSION), _bounded(m.group("context"), MAX_CONTEXT)
    if version is None or context is None or context == 0:
        return None
    return StepScope(role=m.group("role"), context=context, version=version)


def is_scope_name(name: str) -> bool:
    """Cheap prefix test, for filtering many event names before parsing."""
    return name.startswith("tbattn.v")


def parse_scope(name: str) -> Scope | None:
    """Parse a scope name; None if it is not one of ours, uses an unknown phase or carries a
    number out of bounds (see ``read_scope``).

    Names written by a newer grammar version are still parsed when they fit this pattern;
    readers should check ``Scope.version`` if they depend on newer semantics.
    """
    scope = read_scope(name)
    return scope if isinstance(scope, Scope) else None


def read_scope(name: str) -> Scope | str | None:
    """Like ``parse_scope``, but a name that fits the grammar with a number out of bounds gives
    the reason (a short text) instead of None, for the reader's diagnostics."""
    m = _SCOPE_RE.match(name)
    if m is None:
        return None
    phase = m.group("phase")
    if phase is not None and phase not in PHASES:
        return None
    head_text, last_text = m.group("head"), m.group("head_last")
    if last_text is not None and phase is None:
        return None  # a range always names a phase
    version = _bounded(m.group("version"), _MAX_VERSION)
    layer = _bounded(m.group("layer"), MAX_LAYERS)
    head = _bounded(head_text, MAX_HEADS)
    head_last = _bounded(last_text, MAX_HEADS)
    if version is None or layer is None or (head_text and head is None) or (last_text and head_last is None):
        return OUT_OF_RANGE
    if head is not None and head_last is not None and head_last <= head:
        return None  # a range is ascending
    return Scope(layer=layer, head=head, phase=phase, module=m.group("module"), version=version,
                 head_last=head_last)


def _bounded(digits: str | None, limit: int) -> int | None:
    """The number ``digits`` spell if it is below ``limit``, else None. The length is checked
    first: ``int()`` of thousands of digits is slow, and refused past 4300 of them."""
    if digits is None or len(digits) > len(str(limit)):
        return None
    value = int(digits)
    return value if value < limit else None
