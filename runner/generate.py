"""``--mode generate``: a prompt (prefill), then one token at a time against a KV cache (decode).

One generation is ``1 + new_tokens`` profiler steps: the prefill of ``prompt_len`` tokens, then
``new_tokens`` decode steps of one token each, fed back greedily (argmax; the weights are random,
so the tokens mean nothing, and the work is the same for any token). Each step runs inside a step
scope of the grammar (``tbattn.v1/prefill/C512``, ``tbattn.v1/decode/C513``: the keys the step
attends after its own tokens are appended), which is how the trace says what each step was; the
metadata's ``generation`` says the same.

The built-in model keeps one ``KVCache`` per layer: ``static`` preallocates (B, Hkv, P+N, D) for K
and V once and writes each step's keys into it; ``dynamic`` grows by ``torch.cat``, which copies
the whole cache on every token (as Hugging Face's ``DynamicCache`` does). Hugging Face models run
the same loop with their own ``DynamicCache`` or ``StaticCache``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from runner.config import ModelConfig
from runner.kv_cache import KVCache
from runner.model import Attention
from runner.scoping import scope
from tb_attn_plugin.vocab.scopes import format_step_scope

__all__ = ["Generation", "generation_metadata"]


@dataclass
class Generation:
    """The steps of one generation, called one per profiler step: ``schedule()`` lists them."""

    cfg: ModelConfig
    prefill_fn: Callable[[], torch.Tensor]  # the prompt's forward: next token's logits (B, vocab)
    decode_fn: Callable[[torch.Tensor, int], torch.Tensor]  # (token (B, 1), position) -> logits
    reset_fn: Callable[[], None]
    scoped: bool = True
    _token: torch.Tensor | None = None

    @property
    def contexts(self) -> list[int]:
        """The keys each step attends, in order: the prompt's, then one more per decode step."""
        p = self.cfg.prompt_len
        return [p + i for i in range(self.cfg.new_tokens + 1)]

    def step(self, index: int) -> torch.Tensor:
        """Step ``index`` of a generation: 0 the prefill (with a fresh cache), i the i-th decode.
        Returns the logits of the next token (B, vocab); the token fed to the next step is their
        argmax."""
        context = self.contexts[index]
        with torch.inference_mode():
            if index == 0:
                self.reset_fn()
                with scope(format_step_scope("prefill", context), self.scoped):
                    logits = self.prefill_fn()
            else:
                assert self._token is not None, "decode before prefill"
                with scope(format_step_scope("decode", context), self.scoped):
                    logits = self.decode_fn(self._token, context - 1)
            self._token = logits.argmax(dim=-1, keepdim=True)  # greedy: (B, 1)
        return logits

    def run(self) -> None:
        """One whole generation, after which its cache and tokens are let go: freeing them inside
        the profiled steps would free memory that the profiler never saw allocated."""
        for i in range(len(self.contexts)):
            self.step(i)
        self._release()

    def _release(self) -> None:
        """Let go of the cache's tokens and the next token (a static cache keeps its buffers)."""
        with torch.inference_mode():  # a static cache's buffers are inference tensors
            self.reset_fn()
        self._token = None

    def cycle(self) -> Callable[[], None]:
        """The profiled steps of ``generation_schedule``: a throw-away prefill (the profiler's
        warm-up step), then the generation's steps, over and over. The warm-up lets go of what
        it made before it ends: the profiler records no memory in its warm-up, and freeing those
        blocks in the first active step made c10's CPUAllocator warn of blocks it never saw
        allocated (and left their frees out of the trace)."""
        order = [0, *range(len(self.contexts))]
        state = {"i": 0}

        def step() -> None:
            k = state["i"] % len(order)
            self.step(order[k])
            if k == 0:
                self._release()
            state["i"] += 1

        return step


def builtin_generation(model: nn.Module, cfg: ModelConfig, prompt: torch.Tensor) -> Generation:
    """The built-in transformer with one ``KVCache`` per attention layer."""
    caches = []
    for module in model.modules():
        if isinstance(module, Attention):
            module.cache = KVCache(cfg.kv_cache, cfg.prompt_len + cfg.new_tokens)
            caches.append(module.cache)

    def reset() -> None:
        for c in caches:
            c.reset()

    def prefill() -> torch.Tensor:
        return model(prompt, start=0)[:, -1]

    def decode(token: torch.Tensor, position: int) -> torch.Tensor:
        return model(token, start=position)[:, -1]

    return Generation(cfg, prefill, decode, reset, scoped=cfg.scopes)


def hf_generation(model: nn.Module, cfg: ModelConfig, prompt: torch.Tensor) -> Generation:
    """A Hugging Face causal LM with its ``DynamicCache`` or ``StaticCache``, stepped as
    ``generate()`` does (``cache_position`` given, so that a static cache writes in place)."""
    from transformers import DynamicCache, StaticCache

    config: Any = model.config
    state: dict[str, Any] = {}
    static = StaticCache(config=config, max_cache_len=cfg.prompt_len + cfg.new_tokens) if cfg.kv_cache == "static" \
        else None
    device = prompt.device

    def reset() -> None:
        if static is not None:
            static.reset()
            state["cache"] = static
        else:
            state["cache"] = DynamicCache(config=config)

    # transformers renamed past_key_values to cache (5.2x), and warns on the old name.
    cache_arg = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"

    def forward(ids: torch.Tensor, start: int) -> torch.Tensor:
        positions = torch.arange(start, start + ids.size(1), device=device)
        out = model(input_ids=ids, **{cache_arg: state["cache"]}, use_cache=True, cache_position=positions)
        return out.logits[:, -1]

    return Generation(cfg, lambda: forward(prompt, 0), forward, reset, scoped=cfg.scopes)


def generation_metadata(cfg: ModelConfig) -> dict[str, Any]:
    """The run metadata's ``generation``: what each profiled step of a generation is."""
    contexts = [cfg.prompt_len + i for i in range(cfg.new_tokens + 1)]
    return {
        "prompt_len": cfg.prompt_len,
        "new_tokens": cfg.new_tokens,
        "batch": cfg.batch,
        "kv_cache": cfg.kv_cache,
        "kv_heads": cfg.n_kv_heads,
        "steps": [{"role": "prefill" if i == 0 else "decode", "context": c} for i, c in enumerate(contexts)],
    }
