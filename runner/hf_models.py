"""The Hugging Face families the runner builds, and each one's config at a run's sizes.

``HF_FAMILIES`` names each family's config and model classes and whether it is causal;
``hf_config`` builds the config from the run's sizes (layers, heads, width, dropout, KV heads), tiny
enough to profile on a CPU, with random weights (nothing is downloaded), and ``--hf-config``'s
overrides (``parse_hf_overrides``) over it.
"""

from __future__ import annotations

import ast
import importlib
from typing import Any

from runner.config import ConfigError, ModelConfig

__all__ = ["GEMMA_DEFAULT_WINDOW", "HF_FAMILIES", "hf_config", "parse_hf_overrides"]

HF_FAMILIES: dict[str, tuple[str, str, bool]] = {
    # family: (config class, model class, causal)
    "bert": ("BertConfig", "BertForMaskedLM", False),
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", True),
    "llama": ("LlamaConfig", "LlamaForCausalLM", True),
    # Gemma 3's architecture (q/k norms, GQA), its local (sliding-window) and global layers
    # alternating one to one as in Gemma 2 (Gemma 3 itself has five local per global: set
    # --hf-config layer_types=[...] for that). Gemma 2's own classes have no SDPA path.
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM", True),
    # DeepSeek-V3's multi-head latent attention (MLA): q through a low-rank pair (q_a_proj, a
    # norm, q_b_proj), k and v from one compressed latent (kv_a_proj_with_mqa, a norm, kv_b_proj
    # after the cache), a rotary part of each head apart. Dense MLPs only: no MoE layer.
    "deepseek-v3": ("DeepseekV3Config", "DeepseekV3ForCausalLM", True),
    # BART: an encoder (self-attention) and a decoder (causal self-attention, then
    # cross-attention over the encoder's output). Not causal as a whole.
    "bart": ("BartConfig", "BartForConditionalGeneration", False),
}
#: The window of hf:gemma3's local layers when --mask gives none (Gemma 2 uses 4096).
GEMMA_DEFAULT_WINDOW = 4096


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


def hf_config(spec: str, cfg: ModelConfig, overrides: dict[str, Any]) -> Any:
    """The config of ``spec``'s family at ``cfg``'s sizes, with ``overrides`` (``--hf-config``) over
    them and the attention implementation ``cfg.impl`` maps to; ``ConfigError`` for an unknown key, or
    flex where the family has no flex path."""
    family = spec.split(":", 1)[1]
    config_cls_name, _, _ = HF_FAMILIES[family]
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
    elif family == "deepseek-v3":
        # The ranks and head parts at Hugging Face's proportions, sized down; none of their
        # products is a score tensor's B·H·S·S at the corpus's sizes.
        kw = dict(hidden_size=d, num_hidden_layers=L, num_attention_heads=H, num_key_value_heads=H,
                  q_lora_rank=d // 2, kv_lora_rank=d // 4, qk_rope_head_dim=max(d // H // 4, 2),
                  qk_nope_head_dim=d // H - max(d // H // 4, 2), v_head_dim=d // H, intermediate_size=4 * d,
                  first_k_dense_replace=L, n_routed_experts=4, num_experts_per_tok=2, n_group=1, topk_group=1,
                  moe_intermediate_size=d, max_position_embeddings=max(2048, cfg.seq), attention_dropout=p)
    elif family == "bart":
        kw = dict(d_model=d, encoder_layers=L, decoder_layers=L, encoder_attention_heads=H,
                  decoder_attention_heads=H, encoder_ffn_dim=4 * d, decoder_ffn_dim=4 * d,
                  max_position_embeddings=max(1024, cfg.seq), dropout=p, attention_dropout=p)
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
    model_cls = getattr(transformers, HF_FAMILIES[family][1])
    if attn_impl == "flex_attention" and not getattr(model_cls, "_supports_flex_attn", False):
        raise ConfigError(f"{spec} has no flex_attention path in transformers {transformers.__version__}; "
                          "hf:llama, hf:bert and hf:gemma3 have one")
    return config_cls(**{**common, **kw, **overrides}, attn_implementation=attn_impl)
