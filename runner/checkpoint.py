"""``--checkpoint PATH``: a Hugging Face model saved in a local directory (``save_pretrained``),
loaded with ``from_pretrained(..., local_files_only=True)``: nothing is downloaded. It is how
``--attn-stats`` gets trained weights (random weights give meaningless statistics).

The directory is checked before anything is written: it must exist, hold a readable
``config.json`` of the model family asked for (``--model hf:gpt2`` and a GPT-2 checkpoint), and
its weights (``model.safetensors``, ``pytorch_model.bin`` or a sharded index). Otherwise one
line (``ConfigError``) and exit 2.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from torch import nn

from runner.config import ConfigError, ModelConfig

__all__ = ["WEIGHT_FILES", "checkpoint_config", "checkpoint_sizes", "load_checkpoint"]

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json",
                "pytorch_model.bin.index.json")


def checkpoint_config(config_cls_name: str, spec: str, path: str) -> Any:
    """The checkpoint's config, checked against the family of ``spec`` (its config class)."""
    d = Path(path)
    if not d.is_dir():
        raise ConfigError(f"--checkpoint {path}: no such directory")
    if not (d / "config.json").is_file():
        raise ConfigError(f"--checkpoint {path}: no config.json (save the model with save_pretrained)")
    if not any((d / name).is_file() for name in WEIGHT_FILES):
        raise ConfigError(f"--checkpoint {path}: no weights ({', '.join(WEIGHT_FILES[:2])})")
    transformers = importlib.import_module("transformers")
    try:
        config = transformers.AutoConfig.from_pretrained(str(d), local_files_only=True)
    except Exception as exc:  # whatever transformers raises for a bad config.json
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"--checkpoint {path}: config.json cannot be read: {first}") from None
    want = getattr(transformers, config_cls_name).model_type
    if getattr(config, "model_type", None) != want:
        raise ConfigError(f"--checkpoint {path} holds a {getattr(config, 'model_type', 'unknown')} model, "
                          f"not {spec} ({want})")
    return config


def checkpoint_sizes(config: Any, cfg: ModelConfig) -> ModelConfig:
    """``cfg`` with the checkpoint's own sizes (layers, heads, KV heads, width, vocabulary)."""
    heads = int(config.num_attention_heads)
    kv = getattr(config, "num_key_value_heads", None)
    return cfg.replace(layers=int(config.num_hidden_layers), heads=heads, d_model=int(config.hidden_size),
                       vocab=int(config.vocab_size), kv_heads=int(kv) if kv and int(kv) != heads else None)


def load_checkpoint(model_cls_name: str, path: str, config: Any, attn_impl: str) -> nn.Module:
    """The saved model, its weights as saved, with the attention implementation asked for."""
    transformers = importlib.import_module("transformers")
    model_cls = getattr(transformers, model_cls_name)
    model: nn.Module = model_cls.from_pretrained(path, config=config, local_files_only=True,
                                                 attn_implementation=attn_impl)
    return model
