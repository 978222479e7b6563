"""``runner.accuracy``: the error figures by their formulas, and a run's accuracy measured layer by
layer against exact fp32 attention: zero (to rounding) for an exact implementation, and the
approximation's own for an approximate one."""

from __future__ import annotations

import pytest
import torch

from runner.accuracy import REFERENCE, attention_errors, measure_accuracy, reference_model
from runner.config import ModelConfig
from runner.model import Transformer

CFG = ModelConfig(layers=2, heads=2, d_model=16, seq=16, batch=1, vocab=32, mode="inference")


def test_the_figures_by_their_formulas() -> None:
    ref = torch.tensor([1.0, -2.0, 3.0, 0.0])
    y = torch.tensor([1.5, -2.0, 2.0, 0.0])
    got = attention_errors(y, ref)
    assert got["max_abs"] == 1.0 and got["rel_l1"] == pytest.approx((0.5 + 1.0) / 6.0)
    assert got["cosine"] == pytest.approx((1.5 - -2.0 * 2.0 + 6.0) / (14.0**0.5 * (2.25 + 4 + 4) ** 0.5))
    assert attention_errors(ref, ref) == {"max_abs": 0.0, "rel_l1": 0.0, "cosine": pytest.approx(1.0)}
    assert attention_errors(ref, torch.zeros(4))["rel_l1"] == 0.0  # nothing to be relative to
    empty = torch.zeros(0)
    assert attention_errors(empty, empty) == {"max_abs": 0.0, "rel_l1": 0.0, "cosine": 1.0}


def test_the_reference_is_exact_fp32_attention_with_the_models_weights() -> None:
    torch.manual_seed(0)
    model = Transformer(CFG.replace(impl="naive", dtype="bfloat16", jitter_ms=1.0)).eval()
    ref = reference_model(model)
    assert (ref.cfg.impl, ref.cfg.dtype, ref.cfg.scopes, ref.cfg.jitter_ms) == ("sdpa", "float32", False, 0.0)
    for name, value in model.state_dict().items():
        assert torch.equal(ref.state_dict()[name], value.float()), name


@pytest.mark.parametrize(("impl", "exact"), [("naive", True), ("linear-elu", False)])
def test_a_runs_accuracy_per_layer(impl: str, exact: bool) -> None:
    torch.manual_seed(0)
    model = Transformer(CFG.replace(impl=impl)).eval()
    acc = measure_accuracy(model, reference_model(model), model.cfg)
    assert acc is not None and acc["reference"] == REFERENCE and acc["batch"] == [1, 16]
    assert [e["layer"] for e in acc["layers"]] == [0, 1]
    assert acc["rel_l1"] == max(e["rel_l1"] for e in acc["layers"])
    assert acc["cosine"] == min(e["cosine"] for e in acc["layers"])
    assert acc["loss_diff"] == acc["loss"] - acc["loss_ref"]
    if exact:  # naive against SDPA in fp32: float rounding only
        assert acc["max_abs"] < 1e-5 and abs(acc["loss_diff"]) < 1e-5
    else:  # linear attention is another function: an error far above rounding
        assert acc["rel_l1"] > 1e-2
