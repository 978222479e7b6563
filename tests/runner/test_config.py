"""``runner.config``: every value a user can pass is checked before anything runs, with one line
that says what to change; the derived sizes and the schedule's step count."""

from __future__ import annotations

import pytest

from runner.config import ConfigError, ModelConfig, ProfileConfig, check_world


def test_derived_sizes_and_the_straggler_knob() -> None:
    cfg = ModelConfig(heads=8, kv_heads=2, d_model=64, slow_rank=1, slow_ms=3.0, slow_factor=0.5)
    assert (cfg.n_kv_heads, cfg.head_dim) == (2, 8) and ModelConfig(heads=8).n_kv_heads == 8
    assert (cfg.delay_ms(1), cfg.delay_ms(0), cfg.delay_factor(1), cfg.delay_factor(2)) == (3.0, 0.0, 0.5, 0.0)
    assert cfg.replace(seq=64).to_dict() == {**cfg.to_dict(), "seq": 64}


def test_flex_defaults_to_the_causal_mask_and_a_mask_is_normalized() -> None:
    assert ModelConfig(impl="flex").mask == "causal" and ModelConfig(impl="flex", causal=False).mask is None
    assert ModelConfig(impl="naive").mask is None
    assert ModelConfig(impl="naive", mask="sliding:64").mask == "sliding:64"


@pytest.mark.parametrize(("changes", "message"), [
    ({"heads": 3}, "heads (3) must divide d_model (128)"),
    ({"kv_heads": 3}, "kv_heads (3) must divide heads (4)"),
    ({"seq": 0}, "seq must be a positive integer, got 0"),
    ({"impl": "fast"}, "unknown implementation 'fast'; choose from naive, naive-inplace, sdpa"),
    ({"dtype": "int4"}, "unknown dtype 'int4'; choose from float32, bfloat16, float16"),
    ({"impl": "flex", "dropout": 0.1}, "flex_attention has no attention dropout"),
    ({"per_head": True, "scopes": False}, "--per-head measures each head in its own scope"),
    ({"mode": "generate", "prompt_len": 60, "new_tokens": 10, "seq": 64},
     "the prompt (60) and the new tokens (10) need 70 positions; the model has 64 (--seq)"),
    ({"mode": "generate", "prompt_len": 8, "new_tokens": 2, "impl": "flex"}, "--mode generate does not run flex"),
    ({"mode": "generate", "prompt_len": 8, "new_tokens": 2, "compile": True},
     "--mode generate (a causal decoder with a KV cache) does not take --compile"),
    ({"slow_rank": 1}, "--slow-rank needs --slow-ms"),
    ({"slow_ms": 2.0}, "--slow-ms and --slow-factor need --slow-rank"),
    ({"attn_mask": True, "impl": "naive"}, "--attn-mask passes the causal mask to SDPA as a tensor"),
    ({"device": "tpu"}, "unknown device 'tpu'; use cpu or cuda"),
])
def test_bad_values_are_one_line(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        ModelConfig(**changes)  # type: ignore[arg-type]
    assert message in str(info.value) and "\n" not in str(info.value)


def test_the_world_must_fit_the_parallel_layout() -> None:
    check_world(ModelConfig(parallel="tp", heads=4), 2)  # 2 heads a rank
    for cfg, world, message in [(ModelConfig(parallel="ddp"), 1, "--parallel ddp needs 2 or more ranks"),
                                (ModelConfig(parallel="tp", heads=4), 3, "heads (4) must be divisible"),
                                (ModelConfig(parallel="tp", heads=4, kv_heads=1), 2, "kv_heads (1) must be divisible"),
                                (ModelConfig(slow_rank=2, slow_ms=1.0), 2, "--slow-rank 2 is not a rank")]:
        with pytest.raises(ConfigError) as info:
            check_world(cfg, world)
        assert message in str(info.value)


def test_the_schedule_runs_whole_cycles() -> None:
    assert ProfileConfig(wait=1, warmup=2, active=3, repeat=2).steps == 12
    for changes, message in [({"wait": -1}, "wait must be >= 0"), ({"active": 0}, "active must be a positive integer"),
                             ({"gzip_level": 10}, "gzip level must be in 0..9")]:
        with pytest.raises(ConfigError) as info:
            ProfileConfig(**changes)  # type: ignore[arg-type]
        assert message in str(info.value)
