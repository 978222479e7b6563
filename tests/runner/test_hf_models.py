"""``runner.hf_models``: ``--hf-config`` pairs parsed as Python literals, and each family's config
at a run's sizes with the attention implementation its ``--impl`` maps to."""

from __future__ import annotations

import pytest

from runner.config import ConfigError, ModelConfig
from runner.hf_models import GEMMA_DEFAULT_WINDOW, hf_config, parse_hf_overrides

CFG = ModelConfig(layers=2, heads=4, d_model=32, seq=64, vocab=100)


def test_overrides_are_literals_where_they_parse() -> None:
    assert parse_hf_overrides(["rope_theta=10000.0", " tie_word_embeddings =false", "act=gelu", "ids=[1, 2]",
                               "flag=True"]) == {"rope_theta": 10000.0, "tie_word_embeddings": False, "act": "gelu",
                                                 "ids": [1, 2], "flag": True}
    for bad in ("novalue", "=3"):
        with pytest.raises(ConfigError, match="--hf-config takes key=value"):
            parse_hf_overrides([bad])


@pytest.mark.parametrize(("impl", "attn"), [("naive", "eager"), ("sdpa", "sdpa"), ("flex", "flex_attention")])
def test_a_llama_at_the_runs_sizes(impl: str, attn: str) -> None:
    config = hf_config("hf:llama", CFG.replace(impl=impl, kv_heads=2), {"attention_bias": True})
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads, config.num_key_value_heads,
            config.intermediate_size, config.vocab_size) == (32, 2, 4, 2, 128, 100)
    assert config.attention_bias is True and config._attn_implementation == attn


def test_gemma_alternates_local_and_global_layers_at_the_masks_window() -> None:
    config = hf_config("hf:gemma3", CFG.replace(layers=4, mask="sliding:16"), {})
    assert config.sliding_window == 16 and config.head_dim == 8
    assert config.layer_types == ["sliding_attention", "full_attention"] * 2
    assert hf_config("hf:gemma3", CFG, {}).sliding_window == GEMMA_DEFAULT_WINDOW


def test_gpt2_positions_cover_the_sequence() -> None:
    config = hf_config("hf:gpt2", CFG.replace(seq=2048), {})
    assert (config.n_embd, config.n_layer, config.n_head, config.n_positions) == (32, 2, 4, 2048)


def test_unknown_keys_and_missing_flex_paths_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="unknown GPT2Config key\\(s\\) in --hf-config: bogus, nope"):
        hf_config("hf:gpt2", CFG, {"nope": 1, "bogus": 2})
    with pytest.raises(ConfigError, match="hf:gpt2 has no flex_attention path"):
        hf_config("hf:gpt2", CFG.replace(impl="flex"), {})
