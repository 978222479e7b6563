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

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from runner.config import ModelConfig
from runner.model import Attention, Transformer

__all__ = ["REFERENCE", "attention_errors", "measure_accuracy", "reference_model"]

#: What the errors are measured against, as the metadata says it.
REFERENCE = "exact attention in float32 (sdpa, same mask), on each layer's own inputs"
#: The fixed batch's seed: the same tokens for every run of a configuration.
BATCH_SEED = 1234


def reference_model(model: Transformer) -> Transformer:
    """An fp32 copy of ``model`` with exact (SDPA) attention and no scopes, compilation or
    quantization. Call it before the model's projections are quantized."""
    cfg = model.cfg.replace(impl="sdpa", dtype="float32", compile=False, per_head=False, scopes=False,
                            quant=None, dropout=0.0, parallel="none", slow_rank=None, slow_ms=0.0, jitter_ms=0.0)
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


def measure_accuracy(model: Transformer, ref: Transformer, cfg: ModelConfig) -> dict[str, Any]:
    """The run metadata's ``accuracy``: ``model`` against ``ref`` (``reference_model``) on one
    fixed batch, per layer and worst over layers, and the loss both ways."""
    device = next(ref.parameters()).device
    ids = torch.randint(cfg.vocab, (cfg.batch, cfg.seq), generator=torch.Generator().manual_seed(BATCH_SEED))
    ids = ids.to(device)
    seen: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def keep(module: nn.Module, args: tuple[Any, ...], out: torch.Tensor) -> None:
        assert isinstance(module, Attention)
        seen[module.layer] = (args[0].detach(), out.detach())

    attention = [m for m in model.modules() if isinstance(m, Attention)]
    hooks = [m.register_forward_hook(keep) for m in attention]
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            loss = _loss(model(ids), ids)
            loss_ref = _loss(ref(ids), ids)
            ref_attn = {m.layer: m for m in ref.modules() if isinstance(m, Attention)}
            layers = []
            for layer, (x, y) in sorted(seen.items()):
                errors = attention_errors(y.float(), ref_attn[layer](x.float()))
                layers.append({"layer": layer, **errors})
    finally:
        for h in hooks:
            h.remove()
        model.train(was_training)
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
