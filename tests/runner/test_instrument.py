"""instrument(): scopes for real models (Hugging Face, nn.MultiheadAttention, any SDPA caller)."""

from __future__ import annotations

import warnings
from collections import Counter
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from helpers import ACTIVE_STEPS, TINY, profile_run
from torch import nn
from torch.profiler import ProfilerActivity, profile
from tracetools import load_trace, ops_with_scopes, trace_files

from runner import NoAttentionFoundWarning, instrument
from tb_attn_plugin.vocab.scopes import parse_scope


def _block_scopes(run_dir: Path) -> Counter[tuple[int, str | None]]:
    trace = load_trace(trace_files(run_dir)[0])
    counts: Counter[tuple[int, str | None]] = Counter()
    for e in trace["traceEvents"]:
        scope = parse_scope(e.get("name", "")) if e.get("cat") == "user_annotation" else None
        if scope is not None and scope.is_block:
            counts[(scope.layer, scope.module)] += 1
    return counts


@pytest.mark.parametrize(
    ("model", "module_of", "impl", "core"),
    [
        ("hf:bert", "bert.encoder.layer.{}.attention", "sdpa", "aten::scaled_dot_product_attention"),
        ("hf:gpt2", "transformer.h.{}.attn", "sdpa", "aten::scaled_dot_product_attention"),
        ("hf:llama", "model.layers.{}.self_attn", "sdpa", "aten::scaled_dot_product_attention"),
        ("hf:gpt2", "transformer.h.{}.attn", "naive", "aten::softmax"),
        ("hf:llama", "model.layers.{}.self_attn", "naive", "aten::softmax"),
        ("torch:mha", "blocks.{}.attn", "naive", "aten::softmax"),
        ("torch:mha", "blocks.{}.attn", "sdpa", "aten::scaled_dot_product_attention"),
        ("torch:encoder", "encoder.layers.{}.self_attn", "sdpa", "aten::scaled_dot_product_attention"),
    ],
)
def test_one_attention_scope_per_layer_per_forward(
    tmp_path: Path, model: str, module_of: str, impl: str, core: str
) -> None:
    result = profile_run(tmp_path, "run", model=model, impl=impl)
    assert result.status == "ok", result.error
    blocks = _block_scopes(tmp_path / "run")
    assert blocks == {(layer, module_of.format(layer)): ACTIVE_STEPS for layer in range(TINY.layers)}
    ops, scope_events = ops_with_scopes(load_trace(trace_files(tmp_path / "run")[0]))
    phases = Counter((o.phase_scope.layer, o.phase_scope.phase) for o in ops if o.name == core and o.phase_scope)
    phase = "sdpa" if "scaled_dot_product" in core else "softmax"
    assert phases == {(layer, phase): ACTIVE_STEPS for layer in range(TINY.layers)}
    projections = Counter(parse_scope(e["name"]).phase for e in scope_events)  # type: ignore[union-attr]
    assert projections["qkv_proj"] >= TINY.layers * ACTIVE_STEPS  # fused qkv, or one scope each
    assert projections["out_proj"] == TINY.layers * ACTIVE_STEPS


def test_llama_grouped_query_attention(tmp_path: Path) -> None:
    result = profile_run(tmp_path, "gqa", model="hf:llama", impl="sdpa", kv_heads=2)
    assert result.status == "ok", result.error
    assert len(_block_scopes(tmp_path / "gqa")) == TINY.layers


class _Mixer(nn.Module):
    """Calls SDPA but is not named like an attention module."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.o = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).unsqueeze(1).chunk(3, dim=-1)
        return self.o(F.scaled_dot_product_attention(q, k, v).squeeze(1))


def _profile_names(fn: object, steps: int) -> list[str]:
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            fn()  # type: ignore[operator]
    return [e.name for e in prof.events()]


def test_sdpa_callers_are_discovered_and_scoped() -> None:
    model = nn.Sequential(_Mixer(16), nn.ReLU(), _Mixer(16))
    x = torch.randn(2, 8, 16)
    with instrument(model) as inst:
        names = _profile_names(lambda: model(x), steps=2)
    assert [b.name for b in inst.blocks] == ["0", "2"]
    assert all(b.discovered for b in inst.blocks)
    counts = Counter(n for n in names if n.startswith("tbattn"))
    # The first call of each module is scoped from the SDPA call itself; later ones fully.
    assert counts["tbattn.v1/L0 0"] == 2 and counts["tbattn.v1/L1 2"] == 2
    assert counts["tbattn.v1/L0/sdpa"] == 2 and counts["tbattn.v1/L0/qkv_proj"] == 1
    assert counts["tbattn.v1/L0/out_proj"] == 1


def test_wrappers_leave_the_block_names_alone() -> None:
    """FSDP, activation checkpointing and torch.compile wrap modules in modules of their own; a
    block's name is the path the model gives it, wrapper or not."""

    class Wrapper(nn.Module):
        def __init__(self, attr: str, inner: nn.Module) -> None:
            super().__init__()
            setattr(self, attr, inner)
            self.attr = attr

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = getattr(self, self.attr)(x)
            return out

    model = nn.ModuleDict({"layers": nn.ModuleList([
        Wrapper("_fsdp_wrapped_module", nn.ModuleDict({"self_attn": nn.MultiheadAttention(16, 2)})),
        Wrapper("_checkpoint_wrapped_module", Wrapper("_orig_mod", nn.MultiheadAttention(16, 2)))])})
    with instrument(model) as inst:
        assert [b.name for b in inst.blocks] == ["layers.0.self_attn", "layers.1"]


def test_hooks_and_wrappers_are_removed_on_exit() -> None:
    model = nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 2, 32, batch_first=True), 2,
                                  enable_nested_tensor=False)
    originals = (F.scaled_dot_product_attention, F.linear, F.softmax, torch.matmul, torch.bmm)
    x = torch.randn(2, 8, 16)
    with instrument(model) as inst:
        assert len(inst.blocks) == 2
        names = _profile_names(lambda: model(x), steps=1)
        assert (F.linear, F.softmax, torch.matmul, torch.bmm) == originals[1:]  # unwrapped between blocks
    assert any(n.startswith("tbattn.v1/L1") for n in names)
    assert (F.scaled_dot_product_attention, F.linear, F.softmax, torch.matmul, torch.bmm) == originals
    for module in model.modules():
        assert not module._forward_hooks and not module._forward_pre_hooks


def test_no_scopes_and_same_results_without_profiler() -> None:
    torch.manual_seed(0)
    model = nn.MultiheadAttention(16, 2, batch_first=True)
    x = torch.randn(2, 8, 16)
    expected = model(x, x, x)[0]
    with instrument(model):
        got = model(x, x, x)[0]
    torch.testing.assert_close(got, expected)


def test_model_without_attention_warns() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    with pytest.warns(NoAttentionFoundWarning, match="no attention found in Sequential"):
        with instrument(model):
            _profile_names(lambda: model(torch.randn(2, 4)), steps=1)


def test_model_with_attention_does_not_warn() -> None:
    model = nn.MultiheadAttention(8, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with instrument(model) as inst:
            pass
    assert [b.name for b in inst.blocks] == [""]
