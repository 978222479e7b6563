"""Models the engine was never tuned on, profiled as a user would: once with ``instrument()`` and
once plain (``torch.profiler`` around the model, nothing of ours). Inference must say of the plain
trace what the scopes say (issue 32): the same layers, backend, FLOPs per counted phase, score
tensors and findings.

The models, each built from its config class with random weights (nothing is downloaded):

- Mistral: grouped-query attention (2 KV heads for 4) with a sliding window (8 of 16 tokens);
- Qwen3: QK-norm (an RMSNorm of q and of k between their projections and the core);
- ViT: a vision encoder (17 tokens: 16 patches and the class token);
- T5: encoder-decoder with cross-attention and a learned relative position bias, computed in the
  first layer of each stack between its projections and q·kᵀ and shared by the others;
- DistilBERT: an encoder whose attention module holds its output projection.

What was read in the traces, so that a change of expectation is a change of reading:

- T5 numbers its blocks in order of first call: L0 and L1 the encoder's self-attention, L2 and
  L4 the decoder's, L3 and L5 its cross-attention. L0 and L2 compute the bias: ``arange``,
  ``gt``/``lt`` with a scalar, ``abs``, ``log``, ``min``, ``where``, then ``embedding`` of a (16,
  16) bucket index into a (32, 4) table. In SDPA attention, each decoder self-attention block
  (L2, L4) also builds a causal mask of its own (``arange``, ``arange``, ``ge``, ``where`` on the
  bias): a mask rebuilt per call. Before SDPA, L0, L2 and L4 make the permuted (1, 4, 16, 16)
  bias contiguous (``contiguous``: a copy of the bias, not of scores, which fused SDPA never
  stores). Eager T5 adds the bias in place and copies nothing.
- Timed findings (``dispatch-bound``, ``far-from-roof``, ``unplaced-time``) compare measured
  times with thresholds; ``instrument()``'s scopes add CPU time of their own around every phase, so
  these may differ between the two traces of one model, and are left out of the comparison.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

from runner.instrument import instrument
from tb_attn_plugin.analysis.attribution.analyze import analyze
from tb_attn_plugin.analysis.summary import summarize_trace
from tb_attn_plugin.engine.loader import load_events
from tb_attn_plugin.types.schema import WorkerSummary

transformers = pytest.importorskip("transformers")

B, S, D, H, L = 2, 16, 64, 4, 2
#: The phases whose FLOPs inference must count as the scopes do.
COUNTED = ("qkv_proj", "qk_matmul", "av_matmul", "sdpa", "out_proj")
#: Findings whose firing compares measured times with a threshold (see the module's docstring).
TIMED = frozenset({"dispatch-bound", "far-from-roof", "unplaced-time"})


def _mistral(impl: str) -> tuple[Any, dict[str, torch.Tensor]]:
    c = transformers.MistralConfig(vocab_size=64, hidden_size=D, num_hidden_layers=L, num_attention_heads=H,
                                   num_key_value_heads=2, intermediate_size=4 * D, sliding_window=8,
                                   attn_implementation=impl)
    return transformers.MistralForCausalLM(c), {"input_ids": torch.randint(64, (B, S))}


def _qwen3(impl: str) -> tuple[Any, dict[str, torch.Tensor]]:
    c = transformers.Qwen3Config(vocab_size=64, hidden_size=D, num_hidden_layers=L, num_attention_heads=H,
                                 num_key_value_heads=2, head_dim=D // H, intermediate_size=4 * D,
                                 attn_implementation=impl)
    return transformers.Qwen3ForCausalLM(c), {"input_ids": torch.randint(64, (B, S))}


def _vit(impl: str) -> tuple[Any, dict[str, torch.Tensor]]:
    c = transformers.ViTConfig(hidden_size=D, num_hidden_layers=L, num_attention_heads=H, intermediate_size=4 * D,
                               image_size=32, patch_size=8, attn_implementation=impl)
    return transformers.ViTForImageClassification(c), {"pixel_values": torch.randn(B, 3, 32, 32)}


def _t5(impl: str) -> tuple[Any, dict[str, torch.Tensor]]:
    c = transformers.T5Config(vocab_size=64, d_model=D, d_kv=D // H, d_ff=4 * D, num_layers=L, num_decoder_layers=L,
                              num_heads=H, attn_implementation=impl)
    return transformers.T5ForConditionalGeneration(c), {"input_ids": torch.randint(64, (B, S)),
                                                        "decoder_input_ids": torch.randint(64, (B, S))}


def _distilbert(impl: str) -> tuple[Any, dict[str, torch.Tensor]]:
    c = transformers.DistilBertConfig(vocab_size=64, dim=D, n_layers=L, n_heads=H, hidden_dim=4 * D,
                                      attn_implementation=impl)
    return transformers.DistilBertForMaskedLM(c), {"input_ids": torch.randint(64, (B, S))}


MODELS: dict[str, Callable[[str], tuple[Any, dict[str, torch.Tensor]]]] = {
    "mistral": _mistral, "qwen3": _qwen3, "vit": _vit, "t5": _t5, "distilbert": _distilbert}
CASES = [(model, impl, mode) for model in MODELS for impl in ("eager", "sdpa") for mode in ("infer", "train")]


def _profile(out: Path, model: str, impl: str, mode: str, scoped: bool) -> WorkerSummary:
    torch.manual_seed(0)
    net, inputs = MODELS[model](impl)
    net.train(mode == "train")
    logdir = out / f"{model}-{impl}-{mode}-{'scoped' if scoped else 'plain'}"

    def step() -> None:
        logits = net(**inputs).logits
        if mode == "train":
            logits.float().sum().backward()

    grad = contextlib.nullcontext() if mode == "train" else torch.inference_mode()
    with warnings.catch_warnings(), (instrument(net) if scoped else contextlib.nullcontext()), grad:
        warnings.simplefilter("ignore")
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True, acc_events=True,
                     schedule=schedule(wait=0, warmup=1, active=1),
                     on_trace_ready=tensorboard_trace_handler(str(logdir))) as prof:
            for _ in range(2):
                step()
                prof.step()
    (path,) = logdir.glob("*.json*")
    return summarize_trace(analyze(load_events(str(path))), file=path.name, worker="w", span=None)


@pytest.fixture(scope="module")
def pairs(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str, str], dict[bool, WorkerSummary]]:
    out = tmp_path_factory.mktemp("unscoped-models")
    return {case: {scoped: _profile(out, *case, scoped) for scoped in (True, False)} for case in CASES}


@pytest.mark.parametrize(("model", "impl", "mode"), CASES, ids=["-".join(c) for c in CASES])
def test_plain_says_what_the_scopes_say(pairs: dict[tuple[str, str, str], dict[bool, WorkerSummary]], model: str,
                                        impl: str, mode: str) -> None:
    scoped, plain = pairs[(model, impl, mode)][True], pairs[(model, impl, mode)][False]
    assert not scoped.inferred and plain.inferred
    assert [layer.layer for layer in plain.layers] == [layer.layer for layer in scoped.layers]
    assert [layer.backend for layer in plain.layers] == [layer.backend for layer in scoped.layers]
    for want, got in zip(scoped.layers, plain.layers, strict=True):
        flops = {p.phase: p.flops for p in got.phases if p.phase in COUNTED}
        assert flops == {p.phase: p.flops for p in want.phases if p.phase in COUNTED}, want.layer
        assert flops["qkv_proj"] > 0 and flops["out_proj"] > 0, want.layer
        assert got.sxs_bytes == want.sxs_bytes == 0
    assert {f.id for f in plain.findings} - TIMED == {f.id for f in scoped.findings} - TIMED


@pytest.mark.parametrize("mode", ["infer", "train"])
def test_the_core_flops_are_the_formula(pairs: dict[tuple[str, str, str], dict[bool, WorkerSummary]],
                                        mode: str) -> None:
    """q·kᵀ and attn·v are 2·B·H·Sq·Sk·Dh each, whatever the KV heads (grouped-query attention
    repeats K and V); fused SDPA counts both, less the masked half where it skips it (causal)."""
    full = 2 * B * H * S * S * (D // H)
    vit_tokens = (32 // 8) ** 2 + 1
    for model in ("mistral", "qwen3", "t5", "distilbert"):
        for layer in pairs[(model, "eager", mode)][False].layers:
            flops = {p.phase: p.flops for p in layer.phases}
            assert flops["qk_matmul"] == flops["av_matmul"] == full, (model, layer.layer)
    for layer in pairs[("vit", "eager", mode)][False].layers:
        flops = {p.phase: p.flops for p in layer.phases}
        assert flops["qk_matmul"] == 2 * B * H * vit_tokens ** 2 * (D // H)


def test_t5_names_its_position_bias_and_rebuilt_masks(
        pairs: dict[tuple[str, str, str], dict[bool, WorkerSummary]]) -> None:
    for scoped in (True, False):
        summary = pairs[("t5", "sdpa", "infer")][scoped]
        found = {f.id: f for f in summary.findings}
        copy = found["hidden-copy"]
        assert copy.title == "The relative position bias is copied before the core" and copy.severity == "low"
        assert copy.evidence.layers == [0, 2, 4] and copy.evidence.details["copied"] == "position_bias"
        assert "(1, 4, 16, 16) relative position bias" in copy.explanation and "scores" not in copy.title
        # 4·16·16 fp32 elements, once in each of three layers.
        assert copy.evidence.bytes == 3 * 4 * 16 * 16 * 4
        rebuilt = found["mask-rebuilt"]
        assert rebuilt.evidence.layers == [2, 4] and rebuilt.evidence.ops == ["aten::arange", "aten::ge"]
        eager = {f.id for f in pairs[("t5", "eager", "infer")][scoped].findings}
        assert not {"hidden-copy", "mask-rebuilt"} & eager


def _plain(net: torch.nn.Module, out: Path, *, with_stack: bool) -> WorkerSummary:
    """``net`` on a (B, S, D) batch under a plain profiler (one warm-up step, one active)."""
    x = torch.randn(B, S, D)
    with torch.inference_mode(), profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=with_stack,
                                         schedule=schedule(wait=0, warmup=1, active=1), acc_events=True,
                                         on_trace_ready=tensorboard_trace_handler(str(out))) as prof:
        for _ in range(2):
            net(x)
            prof.step()
    (path,) = out.glob("*.json*")
    return summarize_trace(analyze(load_events(str(path))), file=path.name, worker="w", span=None)


class _MHSA(torch.nn.Module):
    """Attention in a module whose name does not end in ``Attention``, its projections modules."""

    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.v, self.o = (torch.nn.Linear(D, D) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = (f(x).view(B, S, H, D // H).transpose(1, 2) for f in (self.q, self.k, self.v))
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(y.transpose(1, 2).reshape(B, S, D))


class _Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm, self.attn = torch.nn.LayerNorm(D), _MHSA()
        self.mlp = torch.nn.Sequential(torch.nn.Linear(D, 4 * D), torch.nn.GELU(), torch.nn.Linear(4 * D, D))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm(x))
        return x + self.mlp(x)


@pytest.mark.parametrize("with_stack", [False, True], ids=["plain", "with_stack"])
def test_module_events_do_not_hide_the_projections(tmp_path: Path, with_stack: bool) -> None:
    """``with_stack`` records an ``nn.Module`` event around each projection (``Linear_0``): the
    projections were no longer the core's siblings, and the block stayed its core."""
    torch.manual_seed(0)
    summary = _plain(torch.nn.Sequential(_Block(), _Block()).eval(), tmp_path, with_stack=with_stack)
    assert summary.inferred and [layer.layer for layer in summary.layers] == [0, 1]
    for layer in summary.layers:
        flops = {p.phase: p.flops for p in layer.phases}
        assert not layer.core_only
        assert flops["qkv_proj"] == 3 * 2 * B * S * D * D and flops["out_proj"] == 2 * B * S * D * D


class _CoreAttention(torch.nn.Module):
    """flash_attn's ``SelfAttention``: named like an attention module, it holds the core alone."""

    def forward(self, qkv: torch.Tensor) -> torch.Tensor:
        q, k, v = qkv.unbind(2)
        return torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                                                v.transpose(1, 2), is_causal=True)


class _MHA(torch.nn.Module):
    """flash_attn's ``MHA``: the projections around the core module, outside it."""

    def __init__(self) -> None:
        super().__init__()
        self.Wqkv, self.inner_attn, self.out_proj = torch.nn.Linear(D, 3 * D), _CoreAttention(), torch.nn.Linear(D, D)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.inner_attn(self.Wqkv(x).view(B, S, 3, H, D // H))
        return self.out_proj(y.transpose(1, 2).reshape(B, S, D))


def test_an_attention_module_that_holds_only_the_core_is_widened(tmp_path: Path) -> None:
    """Under ``with_stack`` the module named ``*Attention`` is found first; here it is the core, and
    its block is widened to the projections around it, as a core found by its ops is."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(*(torch.nn.Sequential(torch.nn.LayerNorm(D), _MHA()) for _ in range(2))).eval()
    summary = _plain(net, tmp_path, with_stack=True)
    assert summary.inferred and [layer.layer for layer in summary.layers] == [0, 1]
    for layer in summary.layers:
        flops = {p.phase: p.flops for p in layer.phases}
        assert layer.module and layer.module.startswith("_CoreAttention") and not layer.core_only
        assert flops["qkv_proj"] == 2 * B * S * D * 3 * D and flops["out_proj"] == 2 * B * S * D * D
