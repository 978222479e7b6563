"""What each attention head does: statistics of its attention probabilities, per layer and head.

For queries i and keys j of one head, with p_ij its softmax probabilities (the mask applied):

- ``entropy``: -Σ_j p_ij log p_ij over log(n_i), n_i the keys query i may attend (i + 1 when
  causal); 1 is uniform over them, 0 all on one key. Queries with a single key are left out.
- ``sink_k`` (k = 1, 4): Σ_{j < k} p_ij, the mass on the first k tokens (an attention sink).
- ``window_W`` (W = 64, 128, 256, 512, 1024, those below S): Σ_{|i - j| < W} p_ij, the mass a
  sliding window of W keys would keep (causal: keys i - W + 1 ... i).
- ``top_k`` (k = 32): the mass of query i's k largest probabilities.
- ``distance``: Σ_j p_ij |i - j|, the mean attention distance in tokens.

Each is averaged over queries and sequences. Queries are taken ``chunk`` at a time, so memory
stays O(B·H·chunk·S) and never O(S²) per head: at S = 8192, 8 heads and chunk 256 that is 64 MiB
of fp32 scores per sequence. q and k are the ones the model attends with (after rotary
embeddings); grouped-query k heads are repeated to the query heads.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from runner.attention_modules import attention_modules

__all__ = ["CHUNK", "SINKS", "STAT_NAMES", "TOP_K", "WINDOWS", "HeadStats", "capture", "collect", "collect_stats",
           "head_stats", "stat_names", "write_events"]

WINDOWS = (64, 128, 256, 512, 1024)
SINKS = (1, 4)
TOP_K = 32
CHUNK = 256


def stat_names(seq: int, *, windows: Sequence[int] = WINDOWS, sinks: Sequence[int] = SINKS,
               top_k: int = TOP_K) -> list[str]:
    """The statistics measured at sequence length ``seq``, in order (windows below ``seq`` only)."""
    return (["entropy"] + [f"sink_{k}" for k in sinks] + [f"window_{w}" for w in windows if w < seq]
            + [f"top_{top_k}", "distance"])


#: The statistics at the largest length, for documentation and readers.
STAT_NAMES = tuple(stat_names(1 << 30))


@dataclass
class HeadStats:
    """Sums over queries of each statistic, per head, and how many queries each sum holds."""

    heads: int
    sums: dict[str, torch.Tensor] = field(default_factory=dict)  # name -> (H,) float64
    counts: dict[str, torch.Tensor] = field(default_factory=dict)  # name -> (H,) queries summed

    def add(self, name: str, values: torch.Tensor, count: torch.Tensor | float) -> None:
        v = values.detach().double().cpu()
        c = count.detach().double().cpu() if isinstance(count, torch.Tensor) else torch.full_like(v, float(count))
        self.sums[name] = self.sums[name] + v if name in self.sums else v
        self.counts[name] = self.counts[name] + c if name in self.counts else c

    def means(self) -> dict[str, list[float]]:
        """Each statistic's mean per head (NaN for a head with no query counted)."""
        return {name: torch.where(self.counts[name] > 0, s / self.counts[name].clamp_min(1),
                                  torch.full_like(s, math.nan)).tolist()
                for name, s in self.sums.items()}


@torch.no_grad()
def head_stats(q: torch.Tensor, k: torch.Tensor, *, causal: bool, mask: torch.Tensor | None = None,
               scale: float | None = None, chunk: int = CHUNK, windows: Sequence[int] = WINDOWS,
               sinks: Sequence[int] = SINKS, top_k: int = TOP_K, into: HeadStats | None = None) -> HeadStats:
    """The statistics of softmax(q·kᵀ·scale + mask) per head, for q (B, H, S, D) and k
    (B, Hkv, S, D) of the same length, accumulated into ``into`` (a new one by default). ``mask``:
    a bool (True: attend) or additive float mask broadcastable to (B, H, S, S)."""
    b, h, s, d = q.shape
    if k.shape[1] != h:
        k = k.repeat_interleave(h // k.shape[1], dim=1)
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    out = into if into is not None else HeadStats(h)
    keys = torch.arange(s, device=q.device)
    kt = k.float().transpose(-1, -2)
    for i0 in range(0, s, chunk):
        i1 = min(s, i0 + chunk)
        rows = torch.arange(i0, i1, device=q.device)
        scores = (q[:, :, i0:i1].float() @ kt) * scale  # (B, H, C, S)
        allowed = torch.ones(i1 - i0, s, dtype=torch.bool, device=q.device)
        if causal:
            allowed = keys[None, :] <= rows[:, None]
        if mask is not None:
            m = mask[..., i0:i1, :] if mask.shape[-2] != 1 else mask
            if m.dtype == torch.bool:
                allowed = allowed & m
            else:
                scores = scores + m.float()
        scores = scores.masked_fill(~allowed, -math.inf)
        p = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # a row with no key allowed: all zeros
        n_keys = allowed.expand_as(p).sum(-1).double()  # (B, H, C)
        several = n_keys > 1
        ent = -(p * torch.log(p.clamp_min(1e-30))).sum(-1).double()
        norm = torch.where(several, ent / torch.log(n_keys.clamp_min(2)), torch.zeros_like(ent))
        out.add("entropy", (norm * several).sum((0, 2)), several.expand(b, h, -1).sum((0, 2)))
        queries = float(b * (i1 - i0))
        for kk in sinks:
            out.add(f"sink_{kk}", p[..., :kk].sum(-1).double().sum((0, 2)), queries)
        gap = (rows[:, None] - keys[None, :]).abs()  # (C, S)
        for w in windows:
            if w < s:
                out.add(f"window_{w}", (p * (gap < w)).sum(-1).double().sum((0, 2)), queries)
        out.add(f"top_{top_k}", p.topk(min(top_k, s), dim=-1).values.sum(-1).double().sum((0, 2)), queries)
        out.add("distance", (p * gap).sum(-1).double().sum((0, 2)), queries)
    return out


#: Event-file tags: ``attn_stats.<stat>/L<layer>.H<head>`` scalars (TensorBoard's Scalars tab groups
#: them by statistic) and ``attn_stats.histograms/<stat>`` across every head of the model.
TAG_PREFIX = "attn_stats."
HISTOGRAM_GROUP = "attn_stats.histograms"
#: The statistics drawn as histograms across heads.
HISTOGRAMS = ("entropy", *(f"window_{w}" for w in WINDOWS), "sink_1")


def scalar_tag(stat: str, layer: int, head: int) -> str:
    return f"{TAG_PREFIX}{stat}/L{layer}.H{head}"


def write_events(run_dir: str, layers: dict[int, dict[str, list[float]]], *, step: int = 0) -> str:
    """Write the statistics (layer -> stat -> one value per head) as TensorBoard summaries with
    TensorBoard's own writer, into a new event file in ``run_dir``; returns its path. Other event
    files there are left as they are."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(log_dir=run_dir, filename_suffix=".attn_stats")
    try:
        across: dict[str, list[float]] = {}
        for layer, stats in sorted(layers.items()):
            for stat, values in stats.items():
                for head, value in enumerate(values):
                    if math.isfinite(value):
                        writer.add_scalar(scalar_tag(stat, layer, head), value, global_step=step)
                        across.setdefault(stat, []).append(value)
        for stat in HISTOGRAMS:
            if across.get(stat):
                writer.add_histogram(f"{HISTOGRAM_GROUP}/{stat}", torch.tensor(across[stat]), global_step=step,
                                     bins="auto")
        path = str(writer.file_writer.event_writer._file_name)  # type: ignore[attr-defined]
    finally:
        writer.close()
    return path


def _float_allowed(mask: torch.Tensor) -> torch.Tensor:
    """Where an additive float mask lets attention through (masked: -inf or the dtype's lowest)."""
    return mask > torch.finfo(mask.dtype).min / 2


class capture:
    """While entered, every ``F.scaled_dot_product_attention`` call inside one of ``model``'s
    attention modules (``instrument.attention_modules``, numbered as the scopes number them) adds
    the statistics of its q and k, under its mask, to that module's layer: ``with capture(model)
    as found: model(x)``, then ``found`` maps layer -> ``HeadStats``. Calls of other shapes (a KV
    cache's decode) are left alone. A Hugging Face model on its eager path is switched to its SDPA
    path while entered (the same weights: the same probabilities), and back."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.found: dict[int, HeadStats] = {}
        self._hooks: list[Any] = []
        self._real: Any = None
        self._eager = False

    def __enter__(self) -> dict[int, HeadStats]:
        import torch.nn.functional as F


        config = getattr(self.model, "config", None)
        switch = getattr(self.model, "set_attn_implementation", None)
        self._eager = getattr(config, "_attn_implementation", None) == "eager" and callable(switch)
        if self._eager:
            switch("sdpa")  # type: ignore[misc]
        current: list[int | None] = [None]

        def enter(i: int) -> Any:
            def hook(module: torch.nn.Module, args: Any) -> None:
                current[0] = i
            return hook

        def leave(module: torch.nn.Module, args: Any, out: Any) -> None:
            current[0] = None

        real = self._real = F.scaled_dot_product_attention
        found = self.found

        def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None = None,
                 dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None, **kw: Any
                 ) -> torch.Tensor:
            layer = current[0]
            if layer is not None and q.dim() == 4 and k.dim() == 4 and q.shape[-2] == k.shape[-2]:
                mask = attn_mask
                if mask is not None and mask.dtype != torch.bool:
                    mask = _float_allowed(mask)
                head_stats(q.detach(), k.detach(), causal=is_causal, mask=mask, scale=scale,
                           into=found.setdefault(layer, HeadStats(q.shape[1])))
            return real(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale, **kw)

        modules = attention_modules(self.model)
        self._hooks = [m.register_forward_pre_hook(enter(i)) for i, (_, m) in enumerate(modules)]
        self._hooks += [m.register_forward_hook(leave) for _, m in modules]
        setattr(F, "scaled_dot_product_attention", sdpa)  # noqa: B010 - torch's own signature is typed narrower
        return found

    def __exit__(self, *exc: object) -> None:
        import torch.nn.functional as F

        setattr(F, "scaled_dot_product_attention", self._real)  # noqa: B010
        for h in self._hooks:
            h.remove()
        if self._eager:
            self.model.set_attn_implementation("eager")  # type: ignore[operator]


@torch.no_grad()
def collect(model: torch.nn.Module, batches: Sequence[torch.Tensor], *, hf: bool) -> dict[int, dict[str, list[float]]]:
    """Each attention block's statistics per head (layer -> stat -> one value per head) over the
    batches of token ids, which ``model`` (an exact SDPA copy: ``accuracy.reference_model`` or
    ``reference_copy``) runs in eval mode under ``capture``."""
    was_training = model.training
    model.eval()
    try:
        with capture(model) as found:
            for ids in batches:
                if hf:
                    model(input_ids=ids, use_cache=False)
                else:
                    model(ids)
    finally:
        model.train(was_training)
    return {layer: stats.means() for layer, stats in sorted(found.items())}


#: The batches' seed: the same tokens for every run of a configuration (not the profiled batch).
STATS_SEED = 4321


def collect_stats(model: torch.nn.Module, cfg: Any, *, hf: bool) -> dict[int, dict[str, list[float]]]:
    """``collect`` over ``cfg.attn_stats`` batches of random token ids (cfg: the run's
    ``ModelConfig``: batch, seq, vocab), on the model's device."""
    device = next(model.parameters()).device
    gen = torch.Generator().manual_seed(STATS_SEED)
    batches = [torch.randint(cfg.vocab, (cfg.batch, cfg.seq), generator=gen).to(device)
               for _ in range(cfg.attn_stats)]
    return collect(model, batches, hf=hf)
