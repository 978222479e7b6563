"""``runner.checkpoint``: a saved Hugging Face model's directory is checked before anything runs
(its config of the family asked for, and its weights), and its sizes become the run's."""

from __future__ import annotations

from pathlib import Path

import pytest
from transformers import GPT2Config, LlamaConfig

from runner.checkpoint import WEIGHT_FILES, checkpoint_config, checkpoint_sizes
from runner.config import ConfigError, ModelConfig


def _saved(path: Path, config: object, weights: str | None = "model.safetensors") -> str:
    config.save_pretrained(str(path))  # type: ignore[attr-defined]
    if weights:
        (path / weights).write_bytes(b"")  # only its presence is checked before loading
    return str(path)


def test_a_checkpoint_of_the_family_gives_its_config_and_sizes(tmp_path: Path) -> None:
    path = _saved(tmp_path, LlamaConfig(num_hidden_layers=3, num_attention_heads=8, num_key_value_heads=2,
                                        hidden_size=64, vocab_size=100), weights=WEIGHT_FILES[1])
    config = checkpoint_config("LlamaConfig", "hf:llama", path)
    assert (config.model_type, config.num_hidden_layers) == ("llama", 3)
    cfg = checkpoint_sizes(config, ModelConfig())
    assert (cfg.layers, cfg.heads, cfg.kv_heads, cfg.d_model, cfg.vocab) == (3, 8, 2, 64, 100)


def test_kv_heads_equal_to_heads_are_plain_attention(tmp_path: Path) -> None:
    config = checkpoint_config("GPT2Config", "hf:gpt2",
                               _saved(tmp_path, GPT2Config(n_layer=2, n_head=4, n_embd=32, vocab_size=64)))
    cfg = checkpoint_sizes(config, ModelConfig(seq=16))
    assert (cfg.layers, cfg.heads, cfg.kv_heads, cfg.d_model, cfg.vocab, cfg.seq) == (2, 4, None, 32, 64, 16)


def test_a_bad_directory_is_one_line(tmp_path: Path) -> None:
    gpt2 = GPT2Config(n_layer=1, n_head=2, n_embd=8)
    cases = [(tmp_path / "missing", "no such directory"),
             (tmp_path, "no config.json (save the model with save_pretrained)")]
    (tmp_path / "no-weights").mkdir()
    cases.append((Path(_saved(tmp_path / "no-weights", gpt2, weights=None)),
                  "no weights (model.safetensors, pytorch_model.bin)"))
    (tmp_path / "llama").mkdir()
    cases.append((Path(_saved(tmp_path / "llama", LlamaConfig(num_hidden_layers=1))),
                  "holds a llama model, not hf:gpt2 (gpt2)"))
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "config.json").write_text("{not json")
    (tmp_path / "broken" / "model.safetensors").write_bytes(b"")
    cases.append((tmp_path / "broken", "config.json cannot be read"))
    for path, message in cases:
        with pytest.raises(ConfigError) as info:
            checkpoint_config("GPT2Config", "hf:gpt2", str(path))
        assert str(info.value).startswith(f"--checkpoint {path}") and message in str(info.value), path
        assert "\n" not in str(info.value)
