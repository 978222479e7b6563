"""Models the runner can profile, and one training or inference step of each.

Model specs:

- ``builtin``: our transformer (``runner.model``), with explicit scopes for every phase;
- ``hf:bert``, ``hf:gpt2``, ``hf:llama``: Hugging Face transformers models built from their
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

import ast
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
from runner.config import APPROXIMATE_IMPLS, ConfigError, ModelConfig, Unsupported, check_world
from runner.distributed import DistContext
from runner.generate import Generation, builtin_generation, hf_generation
from runner.masks import MaskInfo, dense_mask, mask_info, mask_mod
from runner.model import TORCH_DTYPES, Transformer
from runner.quant import quantize_projections
from runner.tensor_parallel import TensorParallel, shard_state_dict
from runner.torch_models import MHAStack, TorchEncoder
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

_HF_FAMILIES: dict[str, tuple[str, str, bool]] = {
    # family: (config class, model class, causal)
    "bert": ("BertConfig", "BertForMaskedLM", False),
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", True),
    "llama": ("LlamaConfig", "LlamaForCausalLM", True),
    # Gemma 3's architecture (q/k norms, GQA), its local (sliding-window) and global layers
    # alternating one to one as in Gemma 2 (Gemma 3 itself has five local per global: set
    # --hf-config layer_types=[...] for that). Gemma 2's own classes have no SDPA path.
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM", True),
}
#: The window of hf:gemma3's local layers when --mask gives none (Gemma 2 uses 4096).
GEMMA_DEFAULT_WINDOW = 4096
MODEL_SPECS: tuple[str, ...] = ("builtin", *(f"hf:{f}" for f in _HF_FAMILIES), "torch:encoder", "torch:mha")
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
        checkpoint_config(_HF_FAMILIES[spec.split(":", 1)[1]][0], spec, cfg.checkpoint)
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
        config = _hf_config(spec, cfg, hf_overrides)  # unknown keys raise here
        positions = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
        if cfg.mode == "generate" and positions and cfg.prompt_len + cfg.new_tokens > positions:
            raise ConfigError(f"the prompt ({cfg.prompt_len}) and the new tokens ({cfg.new_tokens}) need "
                              f"{cfg.prompt_len + cfg.new_tokens} positions; {spec} has {positions}")


def parse_hf_overrides(items: list[str]) -> dict[str, Any]:
    """Parse ``key=value`` pairs; values are Python literals where they parse, else strings."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--hf-config takes key=value, got {item!r}")
        try:
            value: Any = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            value = {"true": True, "false": False}.get(raw.lower(), raw)
        out[key.strip()] = value
    return out


def _hf_config(spec: str, cfg: ModelConfig, overrides: dict[str, Any]) -> Any:
    family = spec.split(":", 1)[1]
    config_cls_name, _, _ = _HF_FAMILIES[family]
    try:
        transformers = importlib.import_module("transformers")
    except ImportError as exc:  # pragma: no cover - transformers is a declared dependency
        raise ConfigError(f"{spec} needs the transformers package: {exc}") from exc
    config_cls = getattr(transformers, config_cls_name)
    d, L, H, p = cfg.d_model, cfg.layers, cfg.heads, cfg.dropout
    common: dict[str, Any] = {"vocab_size": cfg.vocab}
    kw: dict[str, Any]
    if family == "bert":
        kw = dict(hidden_size=d, num_hidden_layers=L, num_attention_heads=H, intermediate_size=4 * d,
                  max_position_embeddings=max(512, cfg.seq), attention_probs_dropout_prob=p,
                  hidden_dropout_prob=p)
    elif family == "gpt2":
        kw = dict(n_embd=d, n_layer=L, n_head=H, n_positions=max(1024, cfg.seq), attn_pdrop=p,
                  resid_pdrop=p, embd_pdrop=p, bos_token_id=cfg.vocab - 1, eos_token_id=cfg.vocab - 1)
    elif family == "gemma3":
        window = int(str(cfg.mask).split(":", 1)[1]) if str(cfg.mask).startswith("sliding:") else GEMMA_DEFAULT_WINDOW
        # No logit soft-capping and the standard 1/sqrt(head_dim) scale, so that eager, SDPA and
        # flex compute the same attention (SDPA has no soft-capping).
        kw = dict(hidden_size=d, num_hidden_layers=L, num_attention_heads=H, num_key_value_heads=cfg.n_kv_heads,
                  head_dim=d // H, intermediate_size=4 * d, max_position_embeddings=max(8192, cfg.seq),
                  attention_dropout=p, sliding_window=window, attn_logit_softcapping=None,
                  final_logit_softcapping=None, query_pre_attn_scalar=d // H,
                  layer_types=["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(L)])
    else:
        kw = dict(hidden_size=d, num_hidden_layers=L, num_attention_heads=H,
                  num_key_value_heads=cfg.n_kv_heads, intermediate_size=4 * d,
                  max_position_embeddings=max(2048, cfg.seq), attention_dropout=p)
    known = config_cls().to_dict()
    unknown = sorted(k for k in overrides if k not in known and not hasattr(config_cls(), k))
    if unknown:
        raise ConfigError(f"unknown {config_cls_name} key(s) in --hf-config: {', '.join(unknown)}")
    attn_impl = ("eager" if cfg.impl.startswith("naive") else "flex_attention" if cfg.impl.startswith("flex")
                 else "sdpa")
    model_cls = getattr(transformers, _HF_FAMILIES[family][1])
    if attn_impl == "flex_attention" and not getattr(model_cls, "_supports_flex_attn", False):
        raise ConfigError(f"{spec} has no flex_attention path in transformers {transformers.__version__}; "
                          "hf:llama, hf:bert and hf:gemma3 have one")
    return config_cls(**{**common, **kw, **overrides}, attn_implementation=attn_impl)


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
        saved = checkpoint_config(_HF_FAMILIES[spec.split(":", 1)[1]][0], spec, cfg.checkpoint)
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
        config = _hf_config(spec, cfg, hf_overrides)
        transformers = importlib.import_module("transformers")
        if saved is not None and cfg.checkpoint is not None:  # the saved weights, with the implementation asked for
            model = load_checkpoint(_HF_FAMILIES[family][1], cfg.checkpoint, saved, config._attn_implementation)
        else:
            model = getattr(transformers, _HF_FAMILIES[family][1])(config)
        causal = _HF_FAMILIES[family][2]
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

    def logits() -> torch.Tensor:
        return runnable(input_ids=ids).logits if hf else runnable(ids)
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
            loss = F.cross_entropy(out.float().view(-1, out.size(-1)), ids.view(-1))
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
