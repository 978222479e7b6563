"""``runner.attention_modules``: a model's attention blocks, outermost only, by the paths the model
gives them, wrapped or not."""

from __future__ import annotations

from torch import nn

from runner.attention_modules import attention_modules, module_path


class SelfAttention(nn.Module):  # found by its name
    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.MultiheadAttention(8, 2)  # inside a found block: not found again
        self.proj = nn.Linear(8, 8)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = SelfAttention()
        self.mlp = nn.Linear(8, 8)


def test_blocks_by_name_or_type_outermost_in_order() -> None:
    model = nn.ModuleDict({"layers": nn.ModuleList([Block(), Block()]), "cross": nn.MultiheadAttention(8, 2)})
    found = attention_modules(model)
    assert [name for name, _ in found] == ["layers.0.attn", "layers.1.attn", "cross"]
    assert [type(m).__name__ for _, m in found] == ["SelfAttention", "SelfAttention", "MultiheadAttention"]


def test_a_model_that_is_an_attention_block_is_found_at_the_root() -> None:
    (found,) = attention_modules(SelfAttention())
    assert found[0] == "" and isinstance(found[1], SelfAttention)
    assert attention_modules(nn.Linear(2, 2)) == []


def test_wrappers_parts_leave_the_path() -> None:
    assert module_path("model.layers.0._fsdp_wrapped_module.self_attn") == "model.layers.0.self_attn"
    assert module_path("_orig_mod.h.3._checkpoint_wrapped_module.attn") == "h.3.attn"
    assert module_path("encoder.layer.1") == "encoder.layer.1"
