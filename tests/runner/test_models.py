"""``runner.models``: combinations that can never run are refused before anything is written, and
a workload is its model on its device with the step the profiler times."""

from __future__ import annotations

import pytest
import torch

from runner.config import ConfigError, ModelConfig
from runner.models import build_workload, check_model_spec, is_out_of_memory

CFG = ModelConfig(layers=2, heads=2, d_model=16, seq=16, batch=1, vocab=32)


@pytest.mark.parametrize(("spec", "changes", "overrides", "message"), [
    ("hf:nope", {}, {}, "unknown model 'hf:nope'; choose from builtin, hf:bert"),
    ("hf:gpt2", {"impl": "performer"}, {}, "performer is the builtin model's attention"),
    ("torch:mha", {"per_head": True}, {}, "--per-head needs the builtin model"),
    ("hf:gpt2", {"kv_heads": 1}, {}, "kv_heads (grouped-query attention) is supported by builtin, hf:llama and "
                                     "hf:gemma3, not hf:gpt2"),
    ("hf:llama", {"compile": True}, {}, "--compile compiles the builtin model's blocks"),
    ("torch:encoder", {"impl": "flex"}, {}, "torch:encoder runs nn.MultiheadAttention: no flex_attention"),
    ("hf:llama", {"impl": "flex-eager"}, {}, "Hugging Face's flex_attention path always compiles"),
    ("hf:llama", {"mask": "sliding:8"}, {}, "--mask sliding:8: Hugging Face models take their masks from their config"),
    ("builtin", {}, {"n_layer": 1}, "--hf-config applies to hf:* models only"),
    ("hf:bert", {"mode": "generate", "prompt_len": 4, "new_tokens": 2}, {}, "--mode generate runs"),
    ("builtin", {"checkpoint": "/nowhere"}, {}, "--checkpoint loads a Hugging Face model"),
])
def test_impossible_combinations_are_refused(spec: str, changes: dict[str, object], overrides: dict[str, object],
                                             message: str) -> None:
    with pytest.raises(ConfigError) as info:
        check_model_spec(spec, CFG.replace(**changes), overrides)
    assert message in str(info.value)


def test_possible_combinations_pass() -> None:
    check_model_spec("hf:gemma3", CFG.replace(mask="sliding:8", kv_heads=1), {})
    check_model_spec("hf:llama", CFG.replace(mode="generate", prompt_len=4, new_tokens=2), {"attention_bias": True})


def test_a_builtin_workload_runs_its_training_step() -> None:
    torch.manual_seed(0)
    work = build_workload("builtin", CFG.replace(mode="training"))
    assert work.spec == "builtin" and not work.needs_instrument and work.optimizer is not None
    before = [p.detach().clone() for p in work.model.parameters()]
    work.step()
    assert any(not torch.equal(a, b) for a, b in zip(before, work.model.parameters(), strict=True))  # it trained
    assert work.mask is None and work.accuracy is not None and work.generation is None


def test_models_we_did_not_write_are_instrumented() -> None:
    work = build_workload("torch:mha", CFG.replace(mode="inference"))
    assert work.needs_instrument and work.optimizer is None
    work.step()


def test_out_of_memory_is_told_from_other_errors() -> None:
    assert is_out_of_memory(torch.OutOfMemoryError("CUDA out of memory"))
    assert is_out_of_memory(RuntimeError("[enforce fail at alloc_cpu.cpp:118] DefaultCPUAllocator: can't allocate "
                                         "memory: you tried to allocate 1099511627776 bytes"))
    assert not is_out_of_memory(RuntimeError("shape mismatch"))
