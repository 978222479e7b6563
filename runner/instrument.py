"""Scope the attention of models we did not write: ``instrument(model)``.

What counts as an attention block:

1. every ``nn.MultiheadAttention`` (which also covers ``nn.TransformerEncoderLayer``);
2. every module whose class name ends in ``Attention`` (the Hugging Face convention:
   ``BertAttention``, ``GPT2Attention``, ``LlamaAttention``...); the outermost one wins, so
   BERT's block includes its output projection;
3. any other module that calls ``F.scaled_dot_product_attention``, found when it first calls
   it while a profiler records (scopes are complete from its next call on).

Blocks are numbered in ``model.named_modules()`` order (discovered ones after), and the block
scope carries the module path. Phases come from two sources: child modules named like
projections (``q_proj``, ``query``, ``c_attn``, ``o_proj``...), and, while a block runs under
the profiler, wrappers around ``F.linear``, ``F.softmax``, ``F.dropout``,
``F.scaled_dot_product_attention``, ``torch.matmul``, ``torch.bmm`` and ``torch.baddbmm``
that classify each call by its order in the block (projection, q·kᵀ, softmax, dropout, attn·v,
output projection). Tensor operators (``a @ b``, ``x * s``) cannot be wrapped; their ops stay
in the block without a phase.

Everything is installed on ``__enter__`` and removed on ``__exit__``. With no profiler
recording, each hook returns after one C call, and no function is wrapped but
``F.scaled_dot_product_attention``. Wrapping swaps module attributes, so profile one
instrumented model per process at a time.
"""

from __future__ import annotations

import logging
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.profiler import record_function

from runner.attention_modules import attention_modules, module_path
from runner.attn_stats import capture, write_events
from runner.scoping import profiler_enabled
from tb_attn_plugin.vocab.scopes import MODEL_BLOCK_MASK, Phase, format_scope

__all__ = ["Block", "Instrumentation", "NoAttentionFoundWarning", "attention_modules", "instrument"]

log = logging.getLogger(__name__)

_QKV_NAMES = frozenset(
    "q k v query key value qkv q_proj k_proj v_proj qkv_proj kv_proj c_attn in_proj wq wk wv "
    "wqkv Wqkv query_key_value to_q to_k to_v to_qkv".split()
)
_OUT_NAMES = frozenset("o o_proj out_proj c_proj wo dense to_out".split())
_DROPOUT_NAMES = frozenset("attn_dropout attention_dropout".split())


class NoAttentionFoundWarning(UserWarning):
    """The instrumented model ran without any attention block being found."""


@dataclass
class Block:
    """One instrumented attention block."""

    layer: int
    name: str
    module: nn.Module
    discovered: bool = False  # found at run time through its SDPA call
    scope_name: str = ""
    phase_names: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.scope_name = format_scope(self.layer, module=self.name or None)
        self.phase_names = {p.value: format_scope(self.layer, phase=p) for p in Phase}


class _Active:
    """The state of one block while it runs under the profiler."""

    __slots__ = ("block", "core_seen", "phase_depth", "phase_scopes", "scope", "stage")

    def __init__(self, block: Block) -> None:
        self.block = block
        self.scope = record_function(block.scope_name)
        self.stage = "pre"  # pre -> scores -> probs -> done, per head for per-head loops
        self.core_seen = False
        self.phase_depth = 0
        self.phase_scopes: list[record_function] = []

    def classify(self, kind: str) -> str | None:
        if kind == "linear":
            return Phase.OUT_PROJ.value if self.core_seen else Phase.QKV_PROJ.value
        if kind == "matmul":
            if self.stage == "probs":
                self.stage, self.core_seen = "done", True
                return Phase.AV_MATMUL.value
            self.stage = "scores"
            return Phase.QK_MATMUL.value
        if kind == "softmax":
            self.stage = "probs"
            return Phase.SOFTMAX.value
        if kind == "dropout":
            return Phase.DROPOUT.value if self.stage == "probs" else None
        if kind in ("sdpa", "flex"):
            self.stage, self.core_seen = "done", True
            return Phase.SDPA.value if kind == "sdpa" else Phase.FLEX.value
        if kind == "block_mask":
            return Phase.BLOCK_MASK.value
        return None


# (namespace, attribute, kind) of the functions wrapped while a block runs.
_TRACED: tuple[tuple[ModuleType, str, str], ...] = (
    (F, "linear", "linear"),
    (F, "softmax", "softmax"),
    (F, "dropout", "dropout"),
    (torch, "matmul", "matmul"),
    (torch, "bmm", "matmul"),
    (torch, "baddbmm", "matmul"),
    (torch, "softmax", "softmax"),
)


class Instrumentation:
    """Hooks and wrappers that scope a model's attention. Use through ``instrument()``."""

    def __init__(self, model: nn.Module, *, attn_stats: bool = False) -> None:
        self.model = model
        self.attn_stats = attn_stats
        self.blocks: list[Block] = []
        self.sdpa_calls = 0
        self._by_module: dict[int, Block] = {}
        self._module_names: dict[int, str] = {}
        self._handles: list[Any] = []
        self._stack: list[_Active] = []
        self._originals: dict[tuple[int, str], Callable[..., Any]] = {}
        self._sdpa_original: Callable[..., Any] | None = None
        self._hf_patched: list[tuple[ModuleType, str, Callable[..., Any]]] = []
        self._fast_path_warned = False

    def record_attn_stats(self, forward: Callable[[], Any], *, log_dir: str, step: int = 0
                          ) -> dict[int, dict[str, list[float]]]:
        """Run ``forward`` once without gradients, record each attention block's head statistics
        (layer -> stat -> one value per head), and write them as TensorBoard summaries at ``step``
        into ``log_dir`` (the run's directory: the Attention tab reads them there). Do it outside
        the profiled steps: the statistics cost a forward and O(chunk x S) work per head."""

        if not self.attn_stats:
            raise ValueError("record_attn_stats needs instrument(model, attn_stats=True)")
        with torch.no_grad(), capture(self.model) as found:
            forward()
        layers = {layer: stats.means() for layer, stats in sorted(found.items())}
        if layers:
            write_events(log_dir, layers, step=step)
        return layers

    # -- set-up ---------------------------------------------------------------------------
    def __enter__(self) -> Instrumentation:
        self._module_names = {id(m): module_path(n) for n, m in self.model.named_modules()}
        for name, module in attention_modules(self.model):
            self._add_block(module_path(name), module, discovered=False)
        for module in self.model.modules():
            if isinstance(module, nn.TransformerEncoderLayer):
                self._watch_fast_path(module)
        self._sdpa_original = F.scaled_dot_product_attention
        F.scaled_dot_product_attention = self._wrap(self._sdpa_original, "sdpa")
        self._patch_hf_flex()
        if not self.blocks:
            log.info(
                "no attention module found by type or name in %s; modules that call "
                "F.scaled_dot_product_attention will be scoped when they run",
                type(self.model).__name__,
            )
        return self

    def __exit__(self, *exc: object) -> None:
        while self._stack:
            self._close(self._stack[-1])
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        if self._sdpa_original is not None:
            F.scaled_dot_product_attention = self._sdpa_original
            self._sdpa_original = None
        while self._hf_patched:
            namespace, attr, original = self._hf_patched.pop()
            setattr(namespace, attr, original)
        if not self.blocks and exc[0] is None:
            warnings.warn(
                f"no attention found in {type(self.model).__name__}: no nn.MultiheadAttention, "
                "no module named *Attention, and no call to F.scaled_dot_product_attention "
                "while a profiler was recording",
                NoAttentionFoundWarning,
                stacklevel=2,
            )

    def _add_block(self, name: str, module: nn.Module, *, discovered: bool) -> Block:
        block = Block(layer=len(self.blocks), name=name, module=module, discovered=discovered)
        self.blocks.append(block)
        self._by_module[id(module)] = block
        self._handles.append(module.register_forward_pre_hook(self._make_block_pre(block)))
        self._handles.append(module.register_forward_hook(self._make_block_post(block), always_call=True))
        for child_name, child in module.named_modules():
            leaf = child_name.rsplit(".", 1)[-1]
            if not child_name:
                continue
            if leaf in _QKV_NAMES:
                phase = Phase.QKV_PROJ.value
            elif leaf in _OUT_NAMES:
                phase = Phase.OUT_PROJ.value
            elif leaf in _DROPOUT_NAMES and isinstance(child, nn.Dropout):
                phase = Phase.DROPOUT.value
            else:
                continue
            self._handles.append(child.register_forward_pre_hook(self._make_phase_pre(block, phase)))
            self._handles.append(child.register_forward_hook(self._make_phase_post(block), always_call=True))
        return block

    # -- hooks ----------------------------------------------------------------------------
    def _make_block_pre(self, block: Block) -> Callable[..., None]:
        def pre(module: nn.Module, args: Any) -> None:
            if not profiler_enabled():
                return
            active = _Active(block)
            active.scope.__enter__()
            if not self._stack:
                self._patch()
            self._stack.append(active)

        return pre

    def _make_block_post(self, block: Block) -> Callable[..., None]:
        def post(module: nn.Module, args: Any, output: Any) -> None:
            if self._stack and self._stack[-1].block is block:
                self._close(self._stack[-1])

        return post

    def _close(self, active: _Active) -> None:
        while active.phase_scopes:
            active.phase_scopes.pop().__exit__(None, None, None)
        active.scope.__exit__(None, None, None)
        self._stack.pop()
        if not self._stack:
            self._unpatch()

    def _make_phase_pre(self, block: Block, phase: str) -> Callable[..., None]:
        def pre(module: nn.Module, args: Any) -> None:
            if not self._stack or self._stack[-1].block is not block:
                return
            active = self._stack[-1]
            if phase == Phase.OUT_PROJ.value:
                active.core_seen = True
            rf = record_function(block.phase_names[phase])
            rf.__enter__()
            active.phase_scopes.append(rf)
            active.phase_depth += 1

        return pre

    def _make_phase_post(self, block: Block) -> Callable[..., None]:
        def post(module: nn.Module, args: Any, output: Any) -> None:
            if not self._stack or self._stack[-1].block is not block:
                return
            active = self._stack[-1]
            if active.phase_scopes:
                active.phase_scopes.pop().__exit__(None, None, None)
                active.phase_depth -= 1

        return post

    def _watch_fast_path(self, layer: nn.TransformerEncoderLayer) -> None:
        # The encoder layer's native fast path (eval, no grad) fuses attention into one op and
        # never calls self_attn; say so once rather than leave the layer silently unscoped.
        seen = {"attn": False}

        def pre(module: nn.Module, args: Any) -> None:
            seen["attn"] = False

        def attn_pre(module: nn.Module, args: Any) -> None:
            seen["attn"] = True

        def post(module: nn.Module, args: Any, output: Any) -> None:
            if not seen["attn"] and profiler_enabled() and not self._fast_path_warned:
                self._fast_path_warned = True
                log.warning(
                    "nn.TransformerEncoderLayer ran PyTorch's fused fast path "
                    "(aten::_transformer_encoder_layer_fwd): its attention cannot be separated "
                    "from the rest of the layer; run in training mode or with grad enabled to see it"
                )

        self._handles.append(layer.register_forward_pre_hook(pre))
        self._handles.append(layer.self_attn.register_forward_pre_hook(attn_pre))
        self._handles.append(layer.register_forward_hook(post))

    # -- function wrappers ----------------------------------------------------------------
    def _wrap(self, fn: Callable[..., Any], kind: str) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if kind == "sdpa":
                self.sdpa_calls += 1
            if not profiler_enabled():
                return fn(*args, **kwargs)
            if not self._stack:
                if kind == "sdpa":
                    return self._discover_and_call(fn, args, kwargs)
                if kind == "block_mask":
                    with record_function(MODEL_BLOCK_MASK):
                        return fn(*args, **kwargs)
                return fn(*args, **kwargs)
            active = self._stack[-1]
            if active.phase_depth:
                return fn(*args, **kwargs)
            phase = active.classify(kind)
            if phase is None:
                return fn(*args, **kwargs)
            active.phase_depth += 1
            try:
                with record_function(active.block.phase_names[phase]):
                    return fn(*args, **kwargs)
            finally:
                active.phase_depth -= 1

        wrapper.__wrapped__ = fn  # type: ignore[attr-defined]
        return wrapper

    def _patch_hf_flex(self) -> None:
        """Hugging Face's flex path, where transformers is loaded: its flex_attention call (a
        ``flex`` phase in the block) and its ``create_block_mask``, which it calls in every
        forward before the layers (``MODEL_BLOCK_MASK``; the ``block_mask`` phase inside a
        block)."""
        flex_mod = sys.modules.get("transformers.integrations.flex_attention")
        masking = sys.modules.get("transformers.masking_utils")
        targets = [(flex_mod, "compile_friendly_flex_attention", "flex"), (masking, "create_block_mask", "block_mask")]
        for namespace, attr, kind in targets:
            original = getattr(namespace, attr, None) if namespace is not None else None
            if original is None or namespace is None:
                continue
            self._hf_patched.append((namespace, attr, original))
            setattr(namespace, attr, self._wrap(original, kind))

    def _patch(self) -> None:
        for namespace, attr, kind in _TRACED:
            original = getattr(namespace, attr)
            self._originals[(id(namespace), attr)] = original
            setattr(namespace, attr, self._wrap(original, kind))

    def _unpatch(self) -> None:
        for namespace, attr, _ in _TRACED:
            original = self._originals.pop((id(namespace), attr), None)
            if original is not None:
                setattr(namespace, attr, original)

    def _discover_and_call(self, fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        """An SDPA call outside any known block: make its calling module a block."""
        caller = self._calling_module()
        if caller is None:
            return fn(*args, **kwargs)
        name, module = caller
        block = self._by_module.get(id(module)) or self._add_block(name, module, discovered=True)
        with record_function(block.scope_name), record_function(block.phase_names[Phase.SDPA.value]):
            return fn(*args, **kwargs)

    def _calling_module(self) -> tuple[str, nn.Module] | None:
        frame = sys._getframe(2)
        while frame is not None:
            candidate = frame.f_locals.get("self")
            if isinstance(candidate, nn.Module) and id(candidate) in self._module_names:
                return self._module_names[id(candidate)], candidate
            frame = frame.f_back  # type: ignore[assignment]
        return None


def instrument(model: nn.Module, *, attn_stats: bool = False) -> Instrumentation:
    """Context manager that scopes ``model``'s attention for ``torch.profiler`` traces.

    >>> with instrument(model) as inst, torch.profiler.profile(...) as prof:
    ...     model(x)
    >>> [b.name for b in inst.blocks]

    ``attn_stats=True`` also lets it record each head's attention statistics with your weights
    (runner/attn_stats.py), outside the profiled steps, as TensorBoard summaries in a run directory:

    >>> with instrument(model, attn_stats=True) as inst:
    ...     inst.record_attn_stats(lambda: model(batch), log_dir="runs/mine", step=global_step)
    """
    return Instrumentation(model, attn_stats=attn_stats)
