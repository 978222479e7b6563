"""What an attention implementation changes in the output: one measured forward per run.

On one fixed batch, outside the profiled steps, the built-in model runs as configured, and every
attention block's input and output are kept. The same blocks then run as exact fp32 attention
(``sdpa``, same mask, fp32 weights copied from the model before any quantization) on those same
inputs, so each layer's error is its own and not the sum of the layers before it. SDPA in fp32 is
exact up to float rounding (its fused kernels sum in another order than naive attention: about
1e-7 apart) and keeps no (S, S) scores, so the reference fits in memory at any length the run
does; naive attention would need 8.6 GB per score tensor at 16k tokens and 8 heads. The model's
loss is computed both ways too: the loss difference is what the errors add up to.

Figures, per layer and for the run (the worst layer):

- ``max_abs``: max |y − y_ref| over every element;
- ``rel_l1``: Σ|y − y_ref| / Σ|y_ref|, the mean relative error (the relative L1 distance that
  SageAttention reports; an elementwise mean of |y − y_ref| / |y_ref| would blow up near 0);
- ``cosine``: the cosine similarity of y and y_ref, flattened;
- ``loss`` and ``loss_ref``: cross-entropy of the model's logits on the batch, as configured and
  exact in fp32; ``loss_diff`` = loss − loss_ref.

The cost is one forward of the model, one of the fp32 reference, and one fp32 attention block
per layer.
"""

from __future__ import annotations

import copy
import inspect
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from runner.attention_modules import attention_modules
from runner.config import ModelConfig
from runner.model import Transformer

__all__ = ["REFERENCE", "attention_errors", "measure_accuracy", "reference_copy", "reference_model"]

#: What the errors are measured against, as the metadata says it.
REFERENCE = "exact attention in float32 (sdpa, same mask), on each layer's own inputs"
#: The fixed batch's seed: the same tokens for every run of a configuration.
BATCH_SEED = 1234


def reference_model(model: Transformer) -> Transformer:
    """An fp32 copy of ``model`` with exact (SDPA) attention and no scopes, compilation or
    quantization. Call it before the model's projections are quantized."""
    cfg = model.cfg.replace(impl="sdpa", dtype="float32", compile=False, per_head=False, scopes=False,
                            quant=None, dropout=0.0, parallel="none", slow_rank=None, slow_ms=0.0,
                            slow_factor=0.0, jitter_ms=0.0)
    ref = Transformer(cfg, scoped=False)
    ref.load_state_dict({k: v.detach().float() for k, v in model.state_dict().items()})
    return ref.to(next(model.parameters()).device).eval()


def attention_errors(y: torch.Tensor, ref: torch.Tensor) -> dict[str, float]:
    """Max absolute error, relative L1 error and cosine similarity of ``y`` against ``ref``."""
    y, ref = y.detach().double().flatten(), ref.detach().double().flatten()
    diff = (y - ref).abs()
    denom = ref.abs().sum()
    return {
        "max_abs": float(diff.max()) if diff.numel() else 0.0,
        "rel_l1": float(diff.sum() / denom) if denom > 0 else 0.0,
        "cosine": float(F.cosine_similarity(y, ref, dim=0)) if y.numel() else 1.0,
    }


def _loss(logits: torch.Tensor, ids: torch.Tensor) -> float:
    return float(F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), ids.reshape(-1)))


def reference_copy(model: nn.Module) -> nn.Module:
    """An fp32 copy of a model we did not write, with exact attention: Hugging Face models switch
    to their SDPA path, ``nn.MultiheadAttention`` is exact either way. Call it before the model's
    projections are quantized."""
    ref = copy.deepcopy(model).float().eval()
    switch = getattr(ref, "set_attn_implementation", None)
    if callable(switch):
        switch("sdpa")
    return ref


def _first(out: Any) -> torch.Tensor:
    """An attention module's output: a tensor, or the first of a tuple (Hugging Face and
    ``nn.MultiheadAttention`` also return the weights)."""
    return out[0] if isinstance(out, tuple | list) else out


def _hidden(args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor | None:
    """An attention module's input: its first argument, or ``hidden_states`` (Hugging Face)."""
    x = args[0] if args else kwargs.get("hidden_states", kwargs.get("query"))
    return x if isinstance(x, torch.Tensor) else None


def measure_accuracy(model: nn.Module, ref: nn.Module, cfg: ModelConfig, *, hf: bool = False
                     ) -> dict[str, Any] | None:
    """The run metadata's ``accuracy``: ``model`` against ``ref`` (``reference_model``, or
    ``reference_copy``) on one fixed batch, per attention block (``instrument.attention_modules``)
    and worst over them, and the loss both ways. Each of ref's blocks reruns with the arguments it
    had in its own forward (masks, positions, in fp32) but the model's input to that block. None
    where no block ran as a module (``nn.TransformerEncoderLayer``'s fast path calls none)."""
    device = next(ref.parameters()).device
    ids = torch.randint(cfg.vocab, (cfg.batch, cfg.seq), generator=torch.Generator().manual_seed(BATCH_SEED))
    ids = ids.to(device)
    mods, ref_mods = attention_modules(model), attention_modules(ref)
    seen: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    calls: dict[int, tuple[tuple[Any, ...], dict[str, Any]]] = {}

    def keep(i: int) -> Any:
        def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
            x = _hidden(args, kwargs)
            if x is not None and i not in seen:
                seen[i] = (x.detach(), _first(out).detach())
        return hook

    def keep_call(i: int) -> Any:
        def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            calls.setdefault(i, (args, dict(kwargs)))
        return hook

    hooks = [m.register_forward_hook(keep(i), with_kwargs=True) for i, (_, m) in enumerate(mods)]
    hooks += [m.register_forward_pre_hook(keep_call(i), with_kwargs=True) for i, (_, m) in enumerate(ref_mods)]
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            loss = _loss(_logits(model, ids, hf), ids)
            loss_ref = _loss(_logits(ref, ids, hf), ids)
            for h in hooks:
                h.remove()
            layers = []
            for i, (x, y) in sorted(seen.items()):
                if i not in calls or i >= len(ref_mods):
                    continue
                args, kwargs = calls[i]
                h_ref = _hidden(args, kwargs)
                x32 = x.float()
                # The model's input wherever ref's block took its own (q, k and v alike for MHA).
                args = tuple(x32 if a is h_ref else a for a in args)
                kwargs = {k: x32 if v is h_ref else v for k, v in kwargs.items()}
                layers.append({"layer": i, **attention_errors(y.float(), _first(ref_mods[i][1](*args, **kwargs)))})
    finally:
        for h in hooks:
            h.remove()
        model.train(was_training)
    if not layers:
        return None
    return {
        "reference": REFERENCE,
        "batch": [cfg.batch, cfg.seq],
        "max_abs": max(e["max_abs"] for e in layers),
        "rel_l1": max(e["rel_l1"] for e in layers),
        "cosine": min(e["cosine"] for e in layers),
        "loss": loss,
        "loss_ref": loss_ref,
        "loss_diff": loss - loss_ref,
        "layers": layers,
    }


def _logits(model: nn.Module, ids: torch.Tensor, hf: bool) -> torch.Tensor:
    if not hf:
        return model(ids)
    # No KV cache: rerunning a block with its captured arguments would append to it a second time.
    cache = {"use_cache": False} if "use_cache" in inspect.signature(model.forward).parameters else {}
    return model(input_ids=ids, **cache).logits
