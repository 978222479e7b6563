"""Tensors of the scores' size that are not scores (``analysis/attribution/scores.py``), on models whose key
length equals their head size (16 tokens, 4 heads of 16), under SDPA, scoped and plain.

What was read in the traces (torch 2.13, transformers 5.25; B batch, H heads, S tokens):

- Whisper scales q after its projection (``q_proj(x) * scaling``, a (B, S, H·D) ``mul`` placed in
  the scale phase) and makes q, k and v contiguous: all of B·H·S·S elements. Its SDPA call (the CPU
  flash kernel) stores no scores.
- T5 under ``instrument()`` holds its sublayer's RMS norm (``pow``, ``mul``) and residual ``add`` in
  the block, (B, S, H·D) each. At B = 1 its relative position bias (1, H, S, S) has the scores' size
  too: the encoder's and the decoder's first self-attention look it up (``embedding``) and copy it
  before the core (``contiguous``); the decoder's cross-attention, which has no bias of its own,
  builds a (1, H, S, S) one of zeros; the decoder's self-attention folds its causal mask in
  (``where``).
- Eager T5 at B = 1 computes the scores (``matmul``), scales, adds the bias and masks them: scores,
  beside the position bias it looks up.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from tiny import TIMED, Profiled, profile_step

from tb_attn_plugin.analysis.common.wording import size

transformers = pytest.importorskip("transformers")

S, D, H, L = 16, 64, 4, 2
BIAS = H * S * S * 4  # one (1, H, Sq, Sk) fp32 position bias


def _t5(impl: str, b: int) -> tuple[Any, dict[str, torch.Tensor]]:
    c = transformers.T5Config(vocab_size=64, d_model=D, d_kv=S, d_ff=4 * D, num_layers=L, num_decoder_layers=L,
                              num_heads=H, attn_implementation=impl)
    return transformers.T5ForConditionalGeneration(c), {"input_ids": torch.randint(64, (b, S)),
                                                        "decoder_input_ids": torch.randint(64, (b, S))}


def _whisper(impl: str, b: int) -> tuple[Any, dict[str, torch.Tensor]]:
    c = transformers.WhisperConfig(vocab_size=64, d_model=D, encoder_layers=L, decoder_layers=L,
                                   encoder_attention_heads=H, decoder_attention_heads=H, encoder_ffn_dim=4 * D,
                                   decoder_ffn_dim=4 * D, num_mel_bins=8, max_source_positions=S,
                                   max_target_positions=64, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                                   decoder_start_token_id=1, attn_implementation=impl)
    # 2·S frames: the encoder's second convolution halves them to S positions.
    return transformers.WhisperForConditionalGeneration(c), {"input_features": torch.randn(b, 8, 2 * S),
                                                             "decoder_input_ids": torch.randint(3, 64, (b, S))}


CASES = {"t5-sdpa-b2": (_t5, "sdpa", 2), "t5-sdpa-b1": (_t5, "sdpa", 1), "whisper-sdpa-b2": (_whisper, "sdpa", 2),
         "t5-eager-b1": (_t5, "eager", 1)}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, bool], Profiled]:
    out = {}
    for case, (build, impl, b) in CASES.items():
        for scoped in (True, False):
            torch.manual_seed(0)
            net, inputs = build(impl, b)

            def step(net: Any = net, inputs: dict[str, torch.Tensor] = inputs) -> None:
                net(**inputs)

            logdir = tmp_path_factory.mktemp(f"{case}-{'scoped' if scoped else 'plain'}")
            out[(case, scoped)] = profile_step(Path(logdir), net, step, scoped=scoped, train=False)
    return out


@pytest.mark.parametrize("scoped", [True, False], ids=["scoped", "plain"])
@pytest.mark.parametrize("case", ["t5-sdpa-b2", "t5-sdpa-b1", "whisper-sdpa-b2"])
def test_sdpa_stores_no_scores_whatever_has_their_size(runs: dict[tuple[str, bool], Profiled], case: str,
                                                       scoped: bool) -> None:
    _, summary = runs[(case, scoped)]
    assert len(summary.layers) == 3 * L and {x.backend for x in summary.layers} == {"cpu-flash"}
    assert all(x.sxs_bytes == 0 for x in summary.layers)
    assert "sxs-materialized" not in {f.id for f in summary.findings}


@pytest.mark.parametrize("scoped", [True, False], ids=["scoped", "plain"])
def test_t5s_position_bias_is_counted_as_a_mask(runs: dict[tuple[str, bool], Profiled], scoped: bool) -> None:
    """Layer 3, the decoder's first cross-attention, builds the one (1, H, S, S) bias of zeros and no
    other tensor of the scores' size."""
    _, summary = runs[("t5-sdpa-b1", scoped)]
    assert summary.layers[3].score_tensor_bytes == BIAS  # B = 1: a bias is as large as the scores
    assert summary.layers[3].sxs_mask_bytes == BIAS
    # The self-attentions' lookup and copy, and the decoder's with its causal mask folded in: beside
    # the smaller (Sq, Sk) tensors that bucket the positions.
    assert summary.layers[0].sxs_mask_bytes >= 2 * BIAS and summary.layers[2].sxs_mask_bytes >= 3 * BIAS
    copy = next(f for f in summary.findings if f.id == "hidden-copy")
    assert copy.evidence.details["copied"] == "position_bias"


@pytest.mark.parametrize("scoped", [True, False], ids=["scoped", "plain"])
def test_eager_t5s_scores_are_told_from_its_position_bias(runs: dict[tuple[str, bool], Profiled],
                                                          scoped: bool) -> None:
    """Layer 2 (the decoder's first self-attention) allocates the most per forward; beside its scores
    it looks up one position bias, named as one."""
    _, summary = runs[("t5-eager-b1", scoped)]
    f = next(f for f in summary.findings if f.id == "sxs-materialized")
    assert f.evidence.details["sxs_bias_allocs_per_forward"] == 1
    assert f.evidence.details["sxs_bias_bytes_per_layer"] == BIAS
    assert f"and 1 position bias ({size(BIAS)}) and " in f.explanation


@pytest.mark.parametrize("case", sorted(CASES))
def test_scoped_and_plain_say_the_same(runs: dict[tuple[str, bool], Profiled], case: str) -> None:
    (_, scoped), (_, plain) = runs[(case, True)], runs[(case, False)]
    assert [x.backend for x in scoped.layers] == [x.backend for x in plain.layers]
    assert [x.sxs_bytes for x in scoped.layers] == [x.sxs_bytes for x in plain.layers]
    assert {f.id for f in scoped.findings} - TIMED == {f.id for f in plain.findings} - TIMED
