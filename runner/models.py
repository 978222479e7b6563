"""Models the runner can profile, and one training or inference step of each.

Model specs:

- ``builtin``: our transformer (``runner.model``), with explicit scopes for every phase;
- ``hf:bert``, ``hf:gpt2``, ``hf:llama``, ``hf:gemma3``, ``hf:deepseek-v3`` (multi-head latent
  attention), ``hf:bart`` (encoder-decoder): Hugging Face transformers models built from their
  config classes with random weights (nothing is downloaded), scoped by ``instrument()``;
- ``torch:encoder``: ``nn.TransformerEncoder`` of ``nn.TransformerEncoderLayer``;
- ``torch:mha``: a stack of ``nn.MultiheadAttention`` blocks.

For models other than ``builtin`` the implementation maps onto what the model can do: ``naive``
is Hugging Face's ``eager`` attention or MHA's ``need_weights=True`` path (bmm + softmax), and
the ``sdpa*`` implementations run ``F.scaled_dot_product_attention`` pinned by the runner.

Under ``torchrun`` (``cfg.parallel``): ``ddp`` wraps the model in ``DistributedDataParallel``
and gives each rank its own batches; ``tp`` (builtin only) splits every attention block's heads
over the ranks, which then share their batches and their initial weights.
"""

from __future__ import annotations

import functools
import importlib
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from runner.accuracy import measure_accuracy, reference_copy, reference_model
from runner.attn_stats import collect_stats
from runner.checkpoint import checkpoint_config, checkpoint_sizes, load_checkpoint
from runner.config import ConfigError, ModelConfig, Unsupported, check_world
from runner.distributed import DistContext
from runner.generate import Generation, builtin_generation, hf_generation
from runner.hf_models import GEMMA_DEFAULT_WINDOW, HF_FAMILIES, hf_config, parse_hf_overrides
from runner.masks import MaskInfo, dense_mask, mask_info, mask_mod
from runner.model import TORCH_DTYPES, Transformer
from runner.quant import quantize_projections
from runner.tensor_parallel import TensorParallel, shard_state_dict
from runner.torch_models import MHAStack, TorchEncoder
from tb_attn_plugin.vocab.impls import APPROXIMATE_IMPLS
from tb_attn_plugin.vocab.masks import MaskSpec, parse_mask

__all__ = [
    "GENERATE_MODELS",
    "MODEL_SPECS",
    "SIZES",
    "Unsupported",
    "Workload",
    "build_workload",
    "check_model_spec",
    "is_out_of_memory",
    "parse_hf_overrides",
]

#: Named sizes: (layers, heads, d_model).
SIZES: dict[str, tuple[int, int, int]] = {
    "tiny": (2, 4, 128),
    "small": (4, 8, 256),
    "base": (12, 12, 768),
}

MODEL_SPECS: tuple[str, ...] = ("builtin", *(f"hf:{f}" for f in HF_FAMILIES), "torch:encoder", "torch:mha")
#: The models ``--mode generate`` runs: causal language models whose KV cache it drives.
GENERATE_MODELS: tuple[str, ...] = ("builtin", "hf:gpt2", "hf:llama")


@dataclass
class Workload:
    """A model on its device and the step that the profiler times."""

    spec: str
    model: nn.Module  # the model itself: instrument it, read its modules and parameters
    cfg: ModelConfig  # as actually run (e.g. causal is the model family's)
    step: Callable[[], None]
    needs_instrument: bool  # True when scopes come from runner.instrument()
    optimizer: torch.optim.Optimizer | None = None
    runnable: nn.Module | None = None  # what the step calls: the model, or its DDP wrapper
    mask: dict[str, Any] | None = None  # the run metadata's "mask" (runner.masks.MaskInfo), per layer where they differ
    #: The run metadata's "accuracy" (runner.accuracy), measured when called; None: not measured
    #: (tensor-parallel ranks and generation; the call's None: no attention module ran).
    accuracy: Callable[[], dict[str, Any] | None] | None = None
    generation: Generation | None = None  # --mode generate: step() is one step of it (prefill or decode)
    #: --attn-stats: each head's statistics (runner/attn_stats.py) on the exact copy, when called
    attn_stats: Callable[[], dict[int, dict[str, list[float]]]] | None = None


def check_model_spec(spec: str, cfg: ModelConfig, hf_overrides: dict[str, Any], *, world_size: int = 1) -> None:
    """Reject combinations that can never run, before anything is written."""
    if spec not in MODEL_SPECS:
        raise ConfigError(f"unknown model {spec!r}; choose from {', '.join(MODEL_SPECS)}")
    if spec != "builtin" and cfg.impl in APPROXIMATE_IMPLS:
        raise ConfigError(f"{cfg.impl} is the builtin model's attention (runner/variants.py): use --model builtin")
    if spec != "builtin" and cfg.per_head:
        raise ConfigError("--per-head needs the builtin model (other models compute heads batched)")
    if spec != "builtin" and cfg.parallel == "tp":
        raise ConfigError(f"--parallel tp (heads split over ranks) needs the builtin model, not {spec}")
    if spec != "builtin" and cfg.attn_mask:
        raise ConfigError(f"--attn-mask needs the builtin model, not {spec}")
    if spec != "builtin" and cfg.slow_rank is not None:
        raise ConfigError(f"--slow-rank needs the builtin model, not {spec}")
    if spec != "builtin" and cfg.jitter_ms:
        raise ConfigError(f"--jitter-ms needs the builtin model, not {spec}")
    check_world(cfg, world_size)
    if cfg.kv_heads not in (None, cfg.heads) and spec not in ("builtin", "hf:llama", "hf:gemma3"):
        raise ConfigError(f"kv_heads (grouped-query attention) is supported by builtin, hf:llama and hf:gemma3, "
                          f"not {spec}")
    if cfg.compile and spec != "builtin":
        raise ConfigError(f"--compile compiles the builtin model's blocks; {spec} is not supported")
    if spec == "torch:encoder" or spec == "torch:mha":
        if cfg.impl.startswith("flex") or cfg.mask not in (None, "causal"):
            raise ConfigError(f"{spec} runs nn.MultiheadAttention: no flex_attention and no --mask")
    if cfg.checkpoint is not None:
        if not spec.startswith("hf:"):
            raise ConfigError(f"--checkpoint loads a Hugging Face model: use --model hf:..., not {spec}")
        checkpoint_config(HF_FAMILIES[spec.split(":", 1)[1]][0], spec, cfg.checkpoint)
    if spec.startswith("hf:"):
        if cfg.impl == "flex-eager":
            raise ConfigError("Hugging Face's flex_attention path always compiles: use --impl flex")
        family = spec.split(":", 1)[1]
        if cfg.mask not in (None, "causal") and not (family == "gemma3" and str(cfg.mask).startswith("sliding:")):
            raise ConfigError(f"--mask {cfg.mask}: Hugging Face models take their masks from their config; "
                              "hf:gemma3 takes sliding:W (the window of its local layers)")
    if hf_overrides and not spec.startswith("hf:"):
        raise ConfigError("--hf-config applies to hf:* models only")
    if cfg.mode == "generate" and spec not in GENERATE_MODELS:
        raise ConfigError(f"--mode generate runs {', '.join(GENERATE_MODELS)} (causal language models with a KV "
                          f"cache), not {spec}")
    if spec.startswith("hf:"):
        config = hf_config(spec, cfg, hf_overrides)  # unknown keys raise here
        positions = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
        if cfg.mode == "generate" and positions and cfg.prompt_len + cfg.new_tokens > positions:
            raise ConfigError(f"the prompt ({cfg.prompt_len}) and the new tokens ({cfg.new_tokens}) need "
                              f"{cfg.prompt_len + cfg.new_tokens} positions; {spec} has {positions}")


def build_workload(
    spec: str,
    cfg: ModelConfig,
    *,
    hf_overrides: dict[str, Any] | None = None,
    wrap: Callable[[nn.Module], nn.Module] | None = None,
    dist: DistContext | None = None,
) -> Workload:
    """Build the model on ``cfg.device`` in ``cfg.dtype`` and the step that runs it.

    ``wrap`` wraps the model that the step calls; scopes and hooks stay on the inner model.
    ``dist``: this rank, under torchrun; ``cfg.parallel`` says what the ranks share. Weights
    come from the global seed, the same on every rank. Raises ``Unsupported`` when the model
    cannot run this implementation at all.
    """
    hf_overrides = hf_overrides or {}
    world_size, rank = (dist.world_size, dist.rank) if dist is not None else (1, 0)
    check_model_spec(spec, cfg, hf_overrides, world_size=world_size)
    device = torch.device(cfg.device)
    if cfg.impl.startswith("flex") and cfg.mode == "training":
        _check_flex_backward(device)
    dtype = TORCH_DTYPES[cfg.dtype]
    saved = None
    if cfg.checkpoint is not None:  # its sizes before anything is drawn (the batch's vocabulary)
        saved = checkpoint_config(HF_FAMILIES[spec.split(":", 1)[1]][0], spec, cfg.checkpoint)
        cfg = checkpoint_sizes(saved, cfg)
    seed = torch.initial_seed()
    # Data-parallel ranks train on different batches; tensor-parallel ranks share theirs.
    data = torch.Generator().manual_seed(seed + (rank if cfg.parallel == "ddp" else 0))
    ids = torch.randint(cfg.vocab, (cfg.batch, cfg.seq), generator=data).to(device)
    model: nn.Module
    if spec == "builtin":
        if cfg.parallel == "tp":
            tp = TensorParallel(rank, world_size)
            full = Transformer(cfg, scoped=False)  # the single-process weights, then this rank's share
            model = Transformer(cfg, scoped=cfg.scopes, tp=tp, delay_ms=cfg.delay_ms(rank),
                                delay_factor=cfg.delay_factor(rank))
            model.load_state_dict(shard_state_dict(full.state_dict(), cfg, tp))
            del full
        else:
            model = Transformer(cfg, scoped=cfg.scopes, delay_ms=cfg.delay_ms(rank),
                                delay_factor=cfg.delay_factor(rank))
        needs_instrument = False
    elif spec.startswith("hf:"):
        if cfg.impl == "naive-inplace":
            raise Unsupported("Hugging Face eager attention is fixed code; naive-inplace applies to builtin only")
        family = spec.split(":", 1)[1]
        config = hf_config(spec, cfg, hf_overrides)
        transformers = importlib.import_module("transformers")
        if saved is not None and cfg.checkpoint is not None:  # the saved weights, with the implementation asked for
            model = load_checkpoint(HF_FAMILIES[family][1], cfg.checkpoint, saved, config._attn_implementation)
        else:
            model = getattr(transformers, HF_FAMILIES[family][1])(config)
        causal = HF_FAMILIES[family][2]
        # The family decides causality (BERT is not causal): a default causal mask goes with it.
        mask = cfg.mask if cfg.mask != "causal" else ("causal" if causal else None)
        cfg = cfg.replace(causal=causal, vocab=config.vocab_size, mask=mask)
        needs_instrument = True
    else:
        if cfg.impl == "naive-inplace" or (spec == "torch:encoder" and cfg.impl == "naive"):
            raise Unsupported(
                f"{spec} has no {cfg.impl} path: nn.TransformerEncoderLayer always calls attention "
                "with need_weights=False (SDPA); use torch:mha with naive for the bmm + softmax path"
                if cfg.impl == "naive"
                else f"{spec} has no in-place masking path; naive-inplace applies to builtin only"
            )
        model = TorchEncoder(cfg) if spec == "torch:encoder" else MHAStack(cfg)
        needs_instrument = True
    model.to(device=device, dtype=dtype)
    accuracy = attn_stats = None
    if cfg.parallel != "tp" and cfg.mode != "generate":
        # Before any quantization: the exact weights. A copy that does not fit leaves the run
        # without an accuracy record, not without its profile.
        try:
            ref = reference_model(model) if isinstance(model, Transformer) else reference_copy(model)
            accuracy = functools.partial(measure_accuracy, model, ref, cfg, hf=spec.startswith("hf:"))
            if cfg.attn_stats:
                attn_stats = functools.partial(collect_stats, ref, cfg, hf=spec.startswith("hf:"))
        except RuntimeError as exc:  # torch.OutOfMemoryError is one
            if not is_out_of_memory(exc):
                raise
    if cfg.quant:
        quantize_projections(model, cfg.quant, device)
    runnable = model
    if cfg.parallel == "ddp":
        # No buffer broadcast before every forward: these models' buffers are constants (masks,
        # position ids), and the broadcast would add a collective to every profiled step.
        runnable = DistributedDataParallel(
            model, device_ids=[_cuda_index(device)] if device.type == "cuda" else None, forward_sync_buffers=False
        )
        torch.manual_seed(seed + rank)  # dropout differs between ranks as their data does
    if wrap is not None:
        runnable = wrap(runnable)
    hf = spec.startswith("hf:")
    # An encoder-decoder model's decoder reads its own tokens: the batch's first half, a target
    # shorter than its source, so that cross-attention's queries and keys differ in length.
    decoder_ids = ids[:, : max(cfg.seq // 2, 1)] if hf and getattr(model.config, "is_encoder_decoder", False) else None
    targets = ids if decoder_ids is None else decoder_ids

    def logits() -> torch.Tensor:
        if not hf:
            return runnable(ids)
        if decoder_ids is not None:
            return runnable(input_ids=ids, decoder_input_ids=decoder_ids).logits
        return runnable(input_ids=ids).logits
    optimizer = None
    generation = None
    if cfg.mode == "generate":
        model.eval()
        prompt = ids[:, : cfg.prompt_len]
        generation = (hf_generation if hf else builtin_generation)(model, cfg, prompt)
        step = generation.cycle()
    elif cfg.mode == "training":
        model.train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def step() -> None:
            out = logits()
            loss = F.cross_entropy(out.float().view(-1, out.size(-1)), targets.reshape(-1))
            loss.backward()
            assert optimizer is not None
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    else:
        model.eval()

        def step() -> None:
            with torch.inference_mode():
                logits()

    return Workload(spec=spec, model=model, cfg=cfg, step=step, needs_instrument=needs_instrument and cfg.scopes,
                    optimizer=optimizer, runnable=runnable, accuracy=accuracy, generation=generation,
                    attn_stats=attn_stats,
                    # A generation's causal mask is implied (a decode step's one query sees every key).
                    mask=None if generation is not None else _mask_metadata(spec, model, cfg))


def _mask_metadata(spec: str, model: nn.Module, cfg: ModelConfig) -> dict[str, Any] | None:
    """What the metadata says of the run's masks: the --mask's kept shares, and for models whose
    layers differ (hf:gemma3's global layers) each such layer's own."""
    if spec == "builtin":
        info = getattr(model, "mask_info", None)
        return info.to_dict() if info is not None else None
    layer_types = getattr(getattr(model, "config", None), "layer_types", None)
    if spec != "hf:gemma3" or not layer_types:
        # Other Hugging Face families: their own causal mask, recorded for flex (whose kernel's
        # work the analysis counts from it).
        return _info(parse_mask(cfg.mask), cfg.seq).to_dict() if cfg.mask == "causal" else None
    window = int(getattr(model.config, "sliding_window", GEMMA_DEFAULT_WINDOW))
    infos = {kind: _info(parse_mask(text), cfg.seq)
             for kind, text in (("sliding_attention", f"sliding:{window}"), ("full_attention", "causal"))}
    out = infos["sliding_attention"].to_dict()
    out["layers"] = {str(i): infos[t].to_dict() for i, t in enumerate(layer_types) if t != "sliding_attention"}
    return out


def _info(mask: MaskSpec, seq: int) -> MaskInfo:
    return mask_info(mask, dense_mask(mask_mod(mask, seq, causal=True), seq))


def is_out_of_memory(exc: BaseException) -> bool:
    """A device's out-of-memory error, or the CPU allocator's."""
    return isinstance(exc, torch.OutOfMemoryError) or "can't allocate memory" in str(exc)


def _check_flex_backward(device: torch.device) -> None:
    """Raise ``Unsupported`` with PyTorch's reason where flex_attention cannot train (its CPU path
    has no backward in PyTorch 2.13): a call on tiny tensors that need gradients, checked before
    anything compiles."""
    from torch.nn.attention.flex_attention import flex_attention

    q = torch.zeros(1, 1, 16, 16, device=device, requires_grad=True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "called without torch.compile": this is a probe
            flex_attention(q, q, q)
    except NotImplementedError as exc:
        raise Unsupported(f"flex on {device.type} in training: {str(exc).strip().splitlines()[0]}") from None


def _cuda_index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()
