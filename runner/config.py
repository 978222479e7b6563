"""Run configuration: the model, the attention implementation and the profiling schedule.

Every value a user can pass is validated here, before anything runs or is written, so that
bad input fails with one clear ``ConfigError`` message.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

from tb_attn_plugin.vocab.impls import GENERATE_IMPLS, IMPLS, LINEAR_IMPLS
from tb_attn_plugin.vocab.masks import parse_mask

__all__ = [
    "DTYPES",
    "KV_CACHES",
    "MODES",
    "PARALLEL",
    "QUANT_SCHEMES",
    "ConfigError",
    "ModelConfig",
    "ProfileConfig",
    "Unsupported",
    "check_world",
]


class ConfigError(ValueError):
    """Invalid user input. The message is shown to the user as is."""


class Unsupported(Exception):
    """This model, implementation and device cannot run together; the message says why
    (``runner.models`` re-exports it, where it is raised most)."""


#: ``--quant``: the q/k/v and output projections' weight and activation quantization (torchao).
QUANT_SCHEMES: tuple[str, ...] = ("int8",)
DTYPES: tuple[str, ...] = ("float32", "bfloat16", "float16")
MODES: tuple[str, ...] = ("training", "inference", "generate")
#: ``--kv-cache``: preallocated to the whole generation (static), or grown by ``torch.cat`` per
#: token (dynamic: every append copies the whole cache).
KV_CACHES: tuple[str, ...] = ("dynamic", "static")
#: Multi-rank modes under torchrun: none (each rank runs the whole model on its own), ddp (data
#: parallel: gradients all-reduced in backward), tp (tensor parallel: each rank computes heads/N
#: heads of every attention block, and the blocks' outputs are all-reduced).
PARALLEL: tuple[str, ...] = ("none", "ddp", "tp")

Mode = Literal["training", "inference", "generate"]


@dataclass(frozen=True)
class ModelConfig:
    """The built-in transformer and how one run drives it (nanoGPT-like, pre-LayerNorm)."""

    layers: int = 2
    heads: int = 4
    kv_heads: int | None = None  # None: same as heads (MHA); 1: MQA; in between: GQA
    d_model: int = 128
    seq: int = 128
    batch: int = 2
    vocab: int = 1024
    dtype: str = "float32"
    causal: bool = True
    dropout: float = 0.0
    attn_mask: bool = False  # builtin SDPA: the causal mask as a tensor (attn_mask=) instead of is_causal=True
    device: str = "cpu"
    mode: Mode = "training"
    impl: str = "naive"
    per_head: bool = False
    scopes: bool = True  # False: no tb-attn scopes, as anyone's own training script writes traces
    parallel: str = "none"
    slow_rank: int | None = None  # this rank spends slow_ms, and slow_factor x its block's time, extra in every block
    slow_ms: float = 0.0
    slow_factor: float = 0.0  # relative: survives a slow machine, where a fixed delay is diluted
    jitter_ms: float = 0.0  # every attention block spends this much more in every other call: noisy on purpose
    mask: str | None = None  # --mask spec (tb_attn_plugin.vocab.masks); flex defaults to "causal" when causal
    mask_seed: int = 0  # the block-sparse mask's draw
    compile: bool = False  # torch.compile each attention block (its phases then fuse into one)
    features: int = 256  # performer: random features M per head
    quant: str | None = None  # --quant: the projections quantized (QUANT_SCHEMES), None: not
    # --mode generate: a prompt of prompt_len tokens (prefill), then new_tokens decode steps of one
    # token each against a KV cache of kind kv_cache; seq is the model's positions (>= both summed).
    prompt_len: int = 0
    new_tokens: int = 0
    kv_cache: str = "dynamic"
    # --attn-stats: attention statistics per head on attn_stats batches, outside the profiled steps
    # (runner/attn_stats.py), written as TensorBoard event files into the run; 0: not measured.
    attn_stats: int = 0
    checkpoint: str | None = None  # --checkpoint: a Hugging Face model saved in this local directory

    def __post_init__(self) -> None:
        for name in ("layers", "heads", "d_model", "seq", "batch", "vocab"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")
        if self.per_head and not self.scopes:
            raise ConfigError("--per-head measures each head in its own scope: it needs scopes (drop --no-scopes)")
        if self.d_model % self.heads:
            raise ConfigError(f"heads ({self.heads}) must divide d_model ({self.d_model})")
        if self.kv_heads is not None:
            if self.kv_heads <= 0:
                raise ConfigError(f"kv_heads must be a positive integer, got {self.kv_heads}")
            if self.heads % self.kv_heads:
                raise ConfigError(f"kv_heads ({self.kv_heads}) must divide heads ({self.heads})")
        if self.dtype not in DTYPES:
            raise ConfigError(f"unknown dtype {self.dtype!r}; choose from {', '.join(DTYPES)}")
        if self.mode not in MODES:
            raise ConfigError(f"unknown mode {self.mode!r}; choose from {', '.join(MODES)}")
        if self.impl not in IMPLS:
            raise ConfigError(f"unknown implementation {self.impl!r}; choose from {', '.join(IMPLS)}")
        if self.mask is not None:
            try:
                object.__setattr__(self, "mask", str(parse_mask(self.mask, causal=self.causal)))
            except ValueError as exc:
                raise ConfigError(f"--mask: {exc}") from None
        elif self.impl.startswith("flex") and self.causal:
            object.__setattr__(self, "mask", "causal")
        if isinstance(self.features, bool) or not isinstance(self.features, int) or self.features <= 0:
            raise ConfigError(f"--features must be a positive integer, got {self.features!r}")
        if self.quant is not None and self.quant not in QUANT_SCHEMES:
            raise ConfigError(f"unknown --quant scheme {self.quant!r}; choose from {', '.join(QUANT_SCHEMES)}")
        if self.impl in LINEAR_IMPLS:
            if self.mask not in (None, "causal"):
                raise ConfigError(f"{self.impl} is linear attention: it takes a causal mask or none, not --mask "
                                  f"{self.mask}")
            if self.dropout:
                raise ConfigError(f"{self.impl} has no attention probabilities to drop: use --dropout 0")
        if self.mode == "training" and (self.impl == "int8-qk" or self.quant):
            what = "int8-qk's integer Q·Kᵀ" if self.impl == "int8-qk" else "--quant's int8 weights"
            raise ConfigError(f"{what} has no gradient: it is for inference, use --mode inference")
        if self.impl.startswith("flex") and self.dropout:
            raise ConfigError("flex_attention has no attention dropout: use --dropout 0 with flex")
        if self.compile and (self.per_head or self.parallel == "tp"):
            raise ConfigError("--compile fuses a whole block: it does not go with --per-head or --parallel tp")
        if self.mode == "generate":
            self._check_generate()
        if isinstance(self.attn_stats, bool) or not isinstance(self.attn_stats, int) or not 0 <= self.attn_stats <= 64:
            raise ConfigError(f"--attn-stats takes 1 to 64 batches, got {self.attn_stats!r}")
        if self.attn_stats and self.mode == "generate":
            raise ConfigError("--attn-stats measures whole sequences: use --mode training or inference")
        if self.attn_stats and self.parallel == "tp":
            raise ConfigError("--attn-stats needs every head on one rank: not with --parallel tp")
        if self.mask is not None and self.attn_mask:
            raise ConfigError("--attn-mask passes the causal mask as a tensor; --mask already passes its own")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.device not in ("cpu", "cuda") and not self.device.startswith("cuda:"):
            raise ConfigError(f"unknown device {self.device!r}; use cpu or cuda")
        if self.parallel not in PARALLEL:
            raise ConfigError(f"unknown parallel mode {self.parallel!r}; choose from {', '.join(PARALLEL)}")
        if self.slow_rank is not None and self.slow_rank < 0:
            raise ConfigError(f"slow rank must be >= 0, got {self.slow_rank}")
        if not 0.0 <= self.slow_ms < float("inf"):
            raise ConfigError(f"--slow-ms must be > 0, got {self.slow_ms}")
        if self.attn_mask and not (self.causal and self.impl.startswith("sdpa")):
            raise ConfigError("--attn-mask passes the causal mask to SDPA as a tensor: it needs --causal and an sdpa "
                              "implementation")
        if not 0.0 <= self.jitter_ms < 60_000.0:
            raise ConfigError(f"--jitter-ms must be in 0..60000, got {self.jitter_ms}")
        if not 0.0 <= self.slow_factor <= 100.0:
            raise ConfigError(f"--slow-factor must be in 0..100, got {self.slow_factor}")
        if self.slow_rank is not None and self.slow_ms == 0.0 and self.slow_factor == 0.0:
            raise ConfigError("--slow-rank needs --slow-ms (the extra milliseconds per attention block, > 0) or "
                              "--slow-factor (the extra time as a multiple of the block's own)")
        if self.slow_rank is None and (self.slow_ms or self.slow_factor):
            raise ConfigError("--slow-ms and --slow-factor need --slow-rank (the rank to slow down)")

    def _check_generate(self) -> None:
        if isinstance(self.prompt_len, bool) or not isinstance(self.prompt_len, int) or self.prompt_len <= 0:
            raise ConfigError(f"--mode generate needs --prompt-len P, a positive number of tokens, got "
                              f"{self.prompt_len!r}")
        if isinstance(self.new_tokens, bool) or not isinstance(self.new_tokens, int) or self.new_tokens <= 0:
            raise ConfigError(f"--new-tokens must be at least 1 (the decode steps after the prompt), got "
                              f"{self.new_tokens!r}")
        if self.kv_cache not in KV_CACHES:
            raise ConfigError(f"unknown --kv-cache {self.kv_cache!r}; choose from {', '.join(KV_CACHES)}")
        if self.prompt_len + self.new_tokens > self.seq:
            raise ConfigError(f"the prompt ({self.prompt_len}) and the new tokens ({self.new_tokens}) need "
                              f"{self.prompt_len + self.new_tokens} positions; the model has {self.seq} (--seq)")
        if self.impl not in GENERATE_IMPLS:
            why = ("flex_attention's compiled kernel is specialized to one key length, and its eager path builds a "
                   "whole BlockMask on every call" if self.impl.startswith("flex")
                   else "it is not exact softmax attention over a KV cache")
            raise ConfigError(f"--mode generate does not run {self.impl}: {why}; choose from "
                              f"{', '.join(GENERATE_IMPLS)}")
        unsupported = [flag for flag, on in (("--compile", self.compile), ("--parallel", self.parallel != "none"),
                                             ("--mask", self.mask not in (None, "causal")),
                                             ("--attn-mask", self.attn_mask), ("--no-causal", not self.causal),
                                             ("--dropout", bool(self.dropout)))
                       if on]
        if unsupported:
            raise ConfigError(f"--mode generate (a causal decoder with a KV cache) does not take "
                              f"{', '.join(unsupported)}")

    @property
    def n_kv_heads(self) -> int:
        return self.kv_heads if self.kv_heads is not None else self.heads

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads

    def delay_ms(self, rank: int) -> float:
        """Extra milliseconds per attention block on ``rank`` (the straggler knob)."""
        return self.slow_ms if rank == self.slow_rank else 0.0

    def delay_factor(self, rank: int) -> float:
        """Extra time per attention block on ``rank``, as a multiple of the block's own."""
        return self.slow_factor if rank == self.slow_rank else 0.0

    def replace(self, **changes: Any) -> ModelConfig:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def check_world(cfg: ModelConfig, world_size: int) -> None:
    """Reject parallel settings that this number of ranks cannot run."""
    if cfg.parallel != "none" and world_size < 2:
        raise ConfigError(f"--parallel {cfg.parallel} needs 2 or more ranks (run under torchrun "
                          f"--nproc_per_node N); the world size is {world_size}")
    if cfg.parallel == "tp":
        for name, n in (("heads", cfg.heads), ("kv_heads", cfg.n_kv_heads)):
            if n % world_size:
                raise ConfigError(f"--parallel tp splits heads over ranks: {name} ({n}) must be divisible "
                                  f"by the world size ({world_size})")
    if cfg.slow_rank is not None and cfg.slow_rank >= world_size:
        raise ConfigError(f"--slow-rank {cfg.slow_rank} is not a rank: the world size is {world_size}")


@dataclass(frozen=True)
class ProfileConfig:
    """The ``torch.profiler`` session: schedule, what to record, and how traces are written."""

    wait: int = 1
    warmup: int = 1
    active: int = 5  # enough steps for a spread that means something (docs/runner.md, "Steps")
    repeat: int = 1
    record_shapes: bool = True
    profile_memory: bool = True
    with_stack: bool = False
    gzip: bool = False
    gzip_level: int = 1

    def __post_init__(self) -> None:
        for name in ("wait", "warmup"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be >= 0, got {getattr(self, name)}")
        for name in ("active", "repeat"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be a positive integer, got {getattr(self, name)}")
        if not 0 <= self.gzip_level <= 9:
            raise ConfigError(f"gzip level must be in 0..9, got {self.gzip_level}")

    @property
    def steps(self) -> int:
        """Steps to run so that every cycle of the schedule completes and is written."""
        return (self.wait + self.warmup + self.active) * self.repeat

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
