"""The built-in transformer: a small pre-LayerNorm decoder with pluggable attention.

Attention comes in several implementations (``tb_attn_plugin.vocab.impls.IMPLS``). Every phase of
every block runs inside a scope from ``tb_attn_plugin.vocab.scopes``, so traces show where attention spends
time and memory. Shapes in comments: B batch, T sequence, C d_model, H heads, Hkv kv heads,
D head dim; under tensor parallelism H and Hkv are this rank's heads (heads / world size).

Tensor parallelism: see ``runner.tensor_parallel``.
"""

from __future__ import annotations

import math
import time
import warnings
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from runner.config import ModelConfig
from runner.kv_cache import KVCache
from runner.masks import MaskInfo, build_block_mask, dense_mask, mask_info, mask_mod
from runner.scoping import scope
from runner.tensor_parallel import TensorParallel, TPInput, TPOutputSum
from runner.variants import feature_map, int8_qk_attention, linear_attention, orthogonal_features
from tb_attn_plugin.vocab.impls import LINEAR_IMPLS
from tb_attn_plugin.vocab.masks import parse_mask
from tb_attn_plugin.vocab.scopes import Phase, format_scope

__all__ = ["JITTER_SCOPE", "SLOW_RANK_SCOPE", "TORCH_DTYPES", "Attention", "Transformer"]

#: The ``record_function`` around the straggler knob's delay (``ModelConfig.slow_rank``): inside
#: the block scope, outside every phase scope, and not a tbattn scope itself.
SLOW_RANK_SCOPE = "tb_attn_run/slow_rank"
#: The same around the jitter knob's sleep (``ModelConfig.jitter_ms``), in every other call.
JITTER_SCOPE = "tb_attn_run/jitter"

TORCH_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}


class _PhaseNames:
    """Scope names for one (layer, head), formatted once instead of on every call. ``head``: one
    measured head, or the range of heads this rank computes together (tensor parallelism)."""

    def __init__(self, layer: int, head: int | range | None) -> None:
        self.block = format_scope(layer, head=head if isinstance(head, int) else None)
        for phase in Phase:
            setattr(self, phase.name.lower(), format_scope(layer, head=head, phase=phase))

    # Attributes set above, declared for type checkers.
    qkv_proj: str
    kv_cache: str
    kv_expand: str
    block_mask: str
    feature_map: str
    quantize: str
    qk_matmul: str
    dequantize: str
    scale: str
    mask: str
    softmax: str
    dropout: str
    av_matmul: str
    kv_state: str
    normalize: str
    sdpa: str
    flex: str
    compiled: str
    out_proj: str
    comm: str


class Attention(nn.Module):
    """Multi-head (or grouped-query) self-attention with a selectable implementation.

    ``tp``: compute only this rank's heads and sum the output over ranks. ``delay_ms``: spend
    that long in every call, inside the block scope (a simulated straggler); ``delay_factor``: spend
    that multiple of the block's own time after it, inside the block scope too.
    """

    def __init__(
        self,
        cfg: ModelConfig,
        layer: int,
        *,
        scoped: bool = True,
        tp: TensorParallel | None = None,
        delay_ms: float = 0.0,
        delay_factor: float = 0.0,
    ) -> None:
        super().__init__()
        self.cfg = cfg
        self.delay_factor = delay_factor
        self.layer = layer
        self.scoped = scoped
        self.tp = tp
        self.delay_s = delay_ms / 1000.0
        self.calls = 0  # forward calls: the jitter knob sleeps in every other one
        heads = tp.heads(cfg.heads) if tp is not None else range(cfg.heads)
        self.n_head = len(heads)
        self.n_kv_head = cfg.n_kv_heads // (tp.size if tp is not None else 1)
        self.head_dim = cfg.head_dim
        self.q_dim = self.n_head * self.head_dim
        self.kv_dim = self.n_kv_head * self.head_dim
        self.qkv = nn.Linear(cfg.d_model, self.q_dim + 2 * self.kv_dim)
        self.out_proj = nn.Linear(self.q_dim, cfg.d_model)
        self.scale = 1.0 / math.sqrt(self.head_dim)
        # True above the diagonal: the positions a causal query must not see. Built once, not
        # per call, so that the mask phase measures masking rather than mask construction.
        self.causal_mask: torch.Tensor
        self.register_buffer(
            "causal_mask", torch.ones(cfg.seq, cfg.seq, dtype=torch.bool).triu(1), persistent=False
        )
        # --mask: the same mask for every implementation. Dense ones get it as a tensor (True:
        # masked out for naive, True: attend for SDPA), built once; flex gets a BlockMask,
        # shared by the layers through ``masks`` (building one costs about a second on CPU).
        self.mask_spec = parse_mask(cfg.mask, causal=cfg.causal) if cfg.mask else None
        # naive fills the positions masked out (True: blocked), SDPA takes those kept (True: attend).
        self.blocked: torch.Tensor | None
        self.attend: torch.Tensor | None
        allowed = None
        if self.mask_spec is not None and not cfg.impl.startswith("flex"):
            allowed = dense_mask(mask_mod(self.mask_spec, cfg.seq, causal=cfg.causal, seed=cfg.mask_seed), cfg.seq)
        self.register_buffer("blocked", None if allowed is None else ~allowed, persistent=False)
        self.register_buffer("attend", allowed, persistent=False)
        self.block_mask: Any = None  # set by Transformer for flex
        # performer: the random projection, drawn once per layer from a fixed seed.
        self.omega: torch.Tensor | None
        self.register_buffer("omega", orthogonal_features(
            cfg.features, self.head_dim, torch.Generator().manual_seed(layer)) if cfg.impl == "performer" else None,
            persistent=False)
        self.cache: KVCache | None = None  # --mode generate: this layer's keys and values so far
        self._compiled: Any = torch.compile(self._body, dynamic=False) if cfg.compile else None
        # Scopes carry global head indices: under tensor parallelism the phases this rank runs on
        # its heads together name them as a range.
        self.names = _PhaseNames(layer, heads if tp is not None else None)
        self.head_names = [_PhaseNames(layer, h) for h in heads] if cfg.per_head else []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = self.names
        on = self.scoped
        tp = self.tp
        if tp is not None:
            x = TPInput.apply(x, tp.group)
        with scope(n.block, on):
            if self.delay_s:
                with scope(SLOW_RANK_SCOPE, on):
                    time.sleep(self.delay_s)
            self.calls += 1
            if self.cfg.jitter_ms and self.calls % 2 == 0:
                with scope(JITTER_SCOPE, on):
                    time.sleep(self.cfg.jitter_ms / 1000.0)
            started = time.perf_counter()
            if self._compiled is not None:
                # torch.compile ignores record_function inside what it compiles: the block's
                # work is one phase, its ops fused or called from the compiled code.
                with scope(n.compiled, on):
                    y = self._compiled(x, False)
            else:
                y = self._body(x, on)
            if self.delay_factor:
                with scope(SLOW_RANK_SCOPE, on):
                    time.sleep(self.delay_factor * (time.perf_counter() - started))
            if tp is not None:
                # Megatron's row-parallel output projection: the ranks' partial outputs are summed
                # inside the block, in its comm phase (where every rank waits for the slowest, which the
                # Ranks view's straggler metric leaves out), and the bias is added once, after the sum.
                with scope(n.comm, on):
                    y = TPOutputSum.apply(y, tp.group)
                with scope(n.out_proj, on):
                    y = y + self.out_proj.bias
        return y

    def _body(self, x: torch.Tensor, on: bool) -> torch.Tensor:
        """Projections, attention core and output projection, each phase in its scope when
        ``on``."""
        B, T, _ = x.shape
        n = self.names
        with scope(n.qkv_proj, on):
            q, k, v = self.qkv(x).split([self.q_dim, self.kv_dim, self.kv_dim], dim=-1)
            q = q.view(B, T, self.n_head, self.head_dim).transpose(1, 2)  # (B, H, T, D)
            k = k.view(B, T, self.n_kv_head, self.head_dim).transpose(1, 2)  # (B, Hkv, T, D)
            v = v.view(B, T, self.n_kv_head, self.head_dim).transpose(1, 2)  # (B, Hkv, T, D)
        offset = 0  # the query's first position: the keys cached before this call
        if self.cache is not None:
            offset = self.cache.length
            with scope(n.kv_cache, on):
                k, v = self.cache.append(k, v)  # (B, Hkv, offset + T, D)
        if self.cfg.per_head:
            y = self._per_head(q, k, v, offset)
        else:
            y = self._core(q, k, v, n, on, offset)  # (B, H, T, D)
        with scope(n.out_proj, on):
            y = y.transpose(1, 2).contiguous().view(B, T, self.q_dim)
            return self.out_proj(y) if self.tp is None else F.linear(y, self.out_proj.weight)

    def _per_head(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, offset: int) -> torch.Tensor:
        group = self.n_head // self.n_kv_head
        outs = []
        for h, names in enumerate(self.head_names):  # h: this rank's head, names: its global one
            g = h // group
            with scope(names.block, self.scoped):
                outs.append(self._core(q[:, h : h + 1], k[:, g : g + 1], v[:, g : g + 1], names, self.scoped, offset))
        return torch.cat(outs, dim=1)

    def _core(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, n: _PhaseNames, on: bool,
              offset: int = 0) -> torch.Tensor:
        """Attention of q (B, H, T, D) over k, v (B, Hkv, S, D). ``offset``: q's first position
        (a KV cache's length before this call), so that a causal mask keeps the last T rows of
        the (S, S) mask; one query (a decode step) sees every key and needs no mask."""
        impl = self.cfg.impl
        dropout_p = self.cfg.dropout if self.training else 0.0
        T, S = q.size(-2), k.size(-2)
        causal = self.cfg.causal and T > 1
        if impl.startswith("flex"):
            with scope(n.flex, on):
                return flex_call(impl)(q, k, v, block_mask=self.block_mask if causal or not self.cfg.causal else None,
                                       scale=self.scale, enable_gqa=q.size(1) != k.size(1))
        if impl.startswith("sdpa"):
            # --attn-mask or --mask: the mask as a tensor (True: attend), built outside the scope,
            # as models do; so is a causal mask whose queries do not start at 0 (is_causal aligns
            # it to the top left).
            rows = slice(offset, offset + T)
            mask = (self.attend[rows, :S] if self.attend is not None
                    else ~self.causal_mask[rows, :S] if causal and (self.cfg.attn_mask or offset) else None)
            with scope(n.sdpa, on):
                return F.scaled_dot_product_attention(
                    q,
                    k,
                    v,
                    attn_mask=mask,
                    dropout_p=dropout_p,
                    is_causal=causal and mask is None,
                    enable_gqa=q.size(1) != k.size(1),
                )
        if q.size(1) != k.size(1):
            with scope(n.kv_expand, on):
                rep = q.size(1) // k.size(1)
                k = k.repeat_interleave(rep, dim=1)  # (B, H, T, D)
                v = v.repeat_interleave(rep, dim=1)
        if impl in LINEAR_IMPLS:
            with scope(n.feature_map, on):
                fq, fk = feature_map(q, k, self.omega)
            return linear_attention(fq, fk, v, self.cfg.causal, n, on, above=self.causal_mask)
        rows = slice(offset, offset + T)
        if impl == "int8-qk":
            blocked = (self.blocked[:T, :T] if self.blocked is not None
                       else self.causal_mask[:T, :T] if self.cfg.causal else None)
            return int8_qk_attention(q, k, v, scale=self.scale, blocked=blocked, dropout_p=dropout_p, n=n, on=on)
        with scope(n.qk_matmul, on):
            att = q @ k.transpose(-2, -1)  # (B, H, T, T): the materialized scores
        with scope(n.scale, on):
            att = att * self.scale
        if causal or self.blocked is not None:
            with scope(n.mask, on):
                mask = self.blocked[rows, :S] if self.blocked is not None else self.causal_mask[rows, :S]
                if impl == "naive-inplace":
                    att.masked_fill_(mask, float("-inf"))
                else:
                    att = att.masked_fill(mask, float("-inf"))  # a full (B, H, T, T) copy
        with scope(n.softmax, on):
            att = F.softmax(att, dim=-1)
        if dropout_p > 0.0:
            with scope(n.dropout, on):
                att = F.dropout(att, p=dropout_p, training=True)
        with scope(n.av_matmul, on):
            return att @ v  # (B, H, T, D)


_FLEX_COMPILED: Any = None


def reset_compiled() -> None:
    """Forget every compiled function (ours and dynamo's caches), so that a run compiles its own."""
    global _FLEX_COMPILED
    _FLEX_COMPILED = None
    torch._dynamo.reset()


def flex_call(impl: str) -> Any:
    """``flex_attention`` as ``impl`` runs it: compiled once per process (``flex``; the first
    call compiles, in the warm-up step), or eager (``flex-eager``: PyTorch's unfused reference,
    which materializes the scores)."""
    global _FLEX_COMPILED
    from torch.nn.attention.flex_attention import flex_attention

    if impl == "flex-eager":
        # Its warning says to compile; running uncompiled is the point of this implementation.
        warnings.filterwarnings("ignore", message=r"flex_attention called without torch\.compile", category=UserWarning)
        return flex_attention
    if _FLEX_COMPILED is None:
        _FLEX_COMPILED = torch.compile(flex_attention, dynamic=False)
    return _FLEX_COMPILED


class _MLP(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(cfg.d_model, 4 * cfg.d_model)
        self.proj = nn.Linear(4 * cfg.d_model, cfg.d_model)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.proj(F.gelu(self.fc(x))))


class _Block(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int, scoped: bool, tp: TensorParallel | None, delay_ms: float,
                 delay_factor: float) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = Attention(cfg, layer, scoped=scoped, tp=tp, delay_ms=delay_ms, delay_factor=delay_factor)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.mlp = _MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Transformer(nn.Module):
    """Token and position embeddings, ``cfg.layers`` blocks, and a language-model head.

    ``tp``: tensor-parallel attention (everything else is replicated on every rank); load
    weights with ``shard_state_dict``. ``delay_ms``, ``delay_factor``: see ``Attention``.
    """

    def __init__(
        self, cfg: ModelConfig, *, scoped: bool = True, tp: TensorParallel | None = None, delay_ms: float = 0.0,
        delay_factor: float = 0.0,
    ) -> None:
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab, cfg.d_model)
        self.wpe = nn.Embedding(cfg.seq, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(_Block(cfg, i, scoped, tp, delay_ms, delay_factor) for i in range(cfg.layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab, bias=False)
        spec = parse_mask(cfg.mask, causal=cfg.causal) if cfg.mask else None
        self._mask_spec = spec
        self._mask_mod = mask_mod(spec, cfg.seq, causal=cfg.causal, seed=cfg.mask_seed) if spec else None
        #: The mask's kept shares, for the run metadata (None: no --mask).
        self.mask_info: MaskInfo | None = (mask_info(spec, dense_mask(self._mask_mod, cfg.seq))
                                           if spec and self._mask_mod else None)
        self._block_mask: Any = None

    def forward(self, idx: torch.Tensor, start: int = 0) -> torch.Tensor:
        """Token ids (B, T) -> logits (B, T, vocab). ``start``: the first token's position (the
        tokens already in the layers' KV caches, ``--mode generate``)."""
        T = idx.size(1)
        if self._mask_spec is not None and self.cfg.impl.startswith("flex") and self._block_mask is None:
            # Built once, on the first call's device (a BlockMask does not follow .to()): the
            # warm-up step, outside the profiled steps. The layers share it.
            mod = mask_mod(self._mask_spec, T, causal=self.cfg.causal, device=idx.device, seed=self.cfg.mask_seed)
            self._block_mask = build_block_mask(mod, T, idx.device)
            for module in self.modules():
                if isinstance(module, Attention):
                    module.block_mask = self._block_mask
        pos = torch.arange(start, start + T, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))
