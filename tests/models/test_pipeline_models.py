"""Two models' attention in one trace, as a diffusion pipeline runs its text encoders: a tiny CLIP
text model in eager attention, then a tiny T5 encoder under SDPA, in one profiled step. The findings
that compare layers compare a model's layers (``numbering.layer_models``): CLIP's hand-written
attention is no odd layer of T5's fused one.

Scoped, ``instrument()`` is given both models in one container (``text_encoder``, ``text_encoder_3``,
as a pipeline names them), and the scopes' paths start with those names. Plain, the trace is
profiled ``with_stack`` for its ``nn.Module`` events (``CLIPTextModel_0``, ``T5EncoderModel_0``);
without them nothing in a trace tells one model's layers from the other's.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tiny import TIMED, Profiled, profile_step
from torch import nn

from tb_attn_plugin.analysis.attribution.inference.numbering import layer_models

transformers = pytest.importorskip("transformers")

B, S, D, H, L = 2, 16, 64, 4, 2


def _pipeline() -> nn.ModuleDict:
    torch.manual_seed(0)
    clip = transformers.CLIPTextModel(transformers.CLIPTextConfig(
        vocab_size=64, hidden_size=D, intermediate_size=4 * D, num_hidden_layers=L, num_attention_heads=H,
        max_position_embeddings=S, attn_implementation="eager"))
    t5 = transformers.T5EncoderModel(transformers.T5Config(
        vocab_size=64, d_model=D, d_kv=D // H, d_ff=4 * D, num_layers=L, num_heads=H, attn_implementation="sdpa"))
    return nn.ModuleDict({"text_encoder": clip, "text_encoder_3": t5})


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[bool, Profiled]:
    out = {}
    for scoped in (True, False):
        pipe = _pipeline()
        ids = torch.randint(64, (B, S))

        def step(pipe: nn.ModuleDict = pipe, ids: torch.Tensor = ids) -> None:
            pipe["text_encoder"](input_ids=ids)
            pipe["text_encoder_3"](input_ids=ids)

        logdir = tmp_path_factory.mktemp("pipeline-scoped" if scoped else "pipeline-plain")
        out[scoped] = profile_step(Path(logdir), pipe, step, scoped=scoped, train=False, with_stack=not scoped)
    return out


@pytest.mark.parametrize(("scoped", "models"), [(True, ["text_encoder"] * L + ["text_encoder_3"] * L),
                                                (False, ["CLIPTextModel_0"] * L + ["T5EncoderModel_0"] * L)],
                         ids=["scoped", "plain"])
def test_each_models_layers_are_compared_among_themselves(runs: dict[bool, Profiled], scoped: bool,
                                                          models: list[str]) -> None:
    analysis, summary = runs[scoped]
    assert [x.backend for x in summary.layers] == ["naive"] * L + ["cpu-flash"] * L
    assert list(layer_models(analysis.events, analysis.attr).values()) == models
    assert "backend-mismatch" not in {f.id for f in summary.findings}


def test_scoped_and_plain_say_the_same(runs: dict[bool, Profiled]) -> None:
    (_, scoped), (_, plain) = runs[True], runs[False]
    assert [(x.backend, x.flops, x.sxs_bytes) for x in scoped.layers] == \
        [(x.backend, x.flops, x.sxs_bytes) for x in plain.layers]
    assert {f.id for f in scoped.findings} - TIMED == {f.id for f in plain.findings} - TIMED
