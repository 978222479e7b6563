"""Linear, random-feature and int8 attention (runner/variants.py): each against exact attention
within the error it is known for, and the accuracy the runner records."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from helpers import PROFILE, TINY

from runner.accuracy import attention_errors
from runner.cli import main as runner_main
from runner.config import ConfigError, ModelConfig
from runner.model import Transformer
from runner.session import RunSpec, run_one
from runner.variants import (
    elu_features,
    int8_qk_attention,
    linear_attention,
    orthogonal_features,
    performer_features,
    quantize_blocks,
)
from tb_attn_plugin.vocab.scopes import PHASES

#: Phase names as attributes, scopes off: the functions' ``n`` and ``on``.
N = SimpleNamespace(**{p: p for p in PHASES})


def _qkv(b: int = 1, h: int = 2, t: int = 100, d: int = 16, seed: int = 0) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(b, h, t, d, generator=gen, dtype=torch.float64) for _ in range(3)]


def _exact(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def _kernel_quadratic(fq: torch.Tensor, fk: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """Linear attention's own O(S²) formulation: the (S, S) kernel matrix, masked, normalized."""
    a = fq @ fk.transpose(-2, -1)
    if causal:
        a = a.tril()
    return (a @ v) / a.sum(-1, keepdim=True)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize(("t", "chunk"), [(100, 64), (64, 64), (37, 8), (5, 64)])
def test_linear_elu_equals_its_quadratic_form(causal: bool, t: int, chunk: int) -> None:
    """Chunked (a prefix state between chunks, exact pairs within, a padded last chunk) or not,
    the result is the quadratic formula's to rounding."""
    q, k, v = _qkv(t=t)
    fq, fk = elu_features(q), elu_features(k)
    out = linear_attention(fq, fk, v, causal, N, False, chunk=chunk)
    torch.testing.assert_close(out, _kernel_quadratic(fq, fk, v, causal), rtol=1e-10, atol=1e-12)


def _performer_error(m: int, causal: bool, seeds: int = 4) -> float:
    errs = []
    for seed in range(seeds):
        q, k, v = (x.float() * 0.5 for x in _qkv(t=128, d=16, seed=seed))
        omega = orthogonal_features(m, 16, torch.Generator().manual_seed(seed))
        out = linear_attention(performer_features(q, omega, query=True), performer_features(k, omega, query=False),
                               v, causal, N, False)
        errs.append(attention_errors(out, _exact(q, k, v, causal))["rel_l1"])
    return sum(errs) / len(errs)


@pytest.mark.parametrize("causal", [True, False])
def test_performer_error_falls_as_features_grow(causal: bool) -> None:
    errors = [_performer_error(m, causal) for m in (16, 64, 256, 1024)]
    assert errors == sorted(errors, reverse=True), errors
    # Monte-Carlo error falls as 1/sqrt(M): 64 times the features, about 8 times less error.
    assert errors[-1] < errors[0] / 4, errors
    assert errors[-1] < 0.1, errors


def test_orthogonal_features_are_orthogonal_within_a_block() -> None:
    w = orthogonal_features(40, 16, torch.Generator().manual_seed(0))
    assert w.shape == (40, 16)
    block = w[:16] / w[:16].norm(dim=1, keepdim=True)
    torch.testing.assert_close(block @ block.T, torch.eye(16), atol=1e-5, rtol=0)


def test_quantize_blocks_round_trip_within_half_a_step() -> None:
    x = torch.randn(2, 3, 200, 16)
    q8, scale = quantize_blocks(x, 64)
    assert q8.dtype == torch.int8 and q8.shape == x.shape and scale.shape == x.shape[:-1]
    # One scale per block of 64 tokens: its amax / 127.
    first = x[0, 0, :64].abs().max() / 127
    assert torch.all(scale[0, 0, :64] == first)
    assert torch.all((q8.float() * scale.unsqueeze(-1) - x).abs() <= scale.unsqueeze(-1) / 2 + 1e-7)


@pytest.mark.parametrize("causal", [True, False])
def test_int8_qk_within_sageattention_tolerance(causal: bool) -> None:
    """SageAttention reports cosine similarity >= 99.9% and relative L1 of about 1e-2 or less
    for int8 Q·Kᵀ with smoothed K: on keys with a large common offset (what smoothing is for)."""
    q, k, v = (x.float() for x in _qkv(b=2, h=4, t=256, d=64))
    k = k + 3.0 * torch.randn(1, 1, 1, 64, generator=torch.Generator().manual_seed(9))  # channel-wise bias
    blocked = torch.ones(256, 256, dtype=torch.bool).triu(1) if causal else None
    out = int8_qk_attention(q, k, v, scale=1 / 8, blocked=blocked, dropout_p=0.0, n=N, on=False)
    err = attention_errors(out, _exact(q, k, v, causal))
    assert err["cosine"] > 0.999 and err["rel_l1"] < 0.02, err


def test_int8_qk_smoothing_is_what_keeps_biased_keys_accurate() -> None:
    """Without subtracting K's mean the same keys lose most of their resolution to the offset."""
    q, k, v = (x.float() for x in _qkv(b=1, h=2, t=256, d=64))
    k = k + 20.0
    smoothed = int8_qk_attention(q, k, v, scale=1 / 8, blocked=None, dropout_p=0.0, n=N, on=False)
    k8, sk = quantize_blocks(k, 64)
    q8, sq = quantize_blocks(q, 128)
    raw = ((q8.float() @ k8.float().transpose(-2, -1)) * sq.unsqueeze(-1) * sk.unsqueeze(-2) / 8).softmax(-1) @ v
    exact = _exact(q, k, v, False)
    assert attention_errors(smoothed, exact)["rel_l1"] * 3 < attention_errors(raw, exact)["rel_l1"]


def _model_out(impl: str, **changes: object) -> torch.Tensor:
    torch.manual_seed(0)
    cfg = TINY.replace(impl=impl, mode="inference", seq=48, **changes)
    ids = torch.randint(64, (2, 48), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        return Transformer(cfg).eval()(ids)


@pytest.mark.parametrize("causal", [True, False])
def test_model_variants_run_with_gqa_and_per_head(causal: bool) -> None:
    for impl in ("linear-elu", "performer", "int8-qk"):
        a = _model_out(impl, kv_heads=2, causal=causal)
        b = _model_out(impl, kv_heads=2, per_head=True, causal=causal)
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
        # Causal or not is a different computation: the first token sees only itself when causal.
        assert not torch.allclose(a, _model_out(impl, kv_heads=2, causal=not causal), atol=1e-4)


@pytest.mark.parametrize(("changes", "message"), [
    ({"features": 0}, "--features must be a positive integer"),
    ({"impl": "linear-elu", "mask": "sliding:8"}, "takes a causal mask or none"),
    ({"impl": "int8-qk", "mode": "training"}, "use --mode inference"),
    ({"quant": "int8", "mode": "training"}, "use --mode inference"),
    ({"quant": "fp4"}, "unknown --quant scheme 'fp4'"),
])
def test_bad_configurations_are_refused(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ModelConfig(**changes)  # type: ignore[arg-type]


@pytest.mark.parametrize("args", [["--features", "0"], ["--features", "-3"], ["--quant", "int4"],
                                  ["--impl", "performer", "--model", "hf:gpt2"]])
def test_cli_rejects_bad_options_in_one_line(args: list[str], tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert runner_main(["--logdir", str(tmp_path), "--mode", "inference", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error:" in err and "Traceback" not in err
    assert not any(tmp_path.iterdir())


def _run(tmp_path: Path, name: str, model: str = "builtin", **changes: object) -> dict[str, object]:
    cfg = TINY.replace(mode="inference", **changes)
    result = run_one(RunSpec(model=model, cfg=cfg, name=name), tmp_path, PROFILE)
    meta = json.loads((tmp_path / name / "tb_attn_run.json").read_text())
    assert meta["status"] == result.status
    return meta


@pytest.mark.parametrize(("impl", "dtype", "tol"), [("naive", "float32", 1e-6), ("sdpa", "float32", 1e-6),
                                                    ("sdpa", "bfloat16", 2e-2), ("naive", "bfloat16", 2e-2)])
def test_exact_implementations_record_an_error_of_rounding_only(tmp_path: Path, impl: str, dtype: str,
                                                                  tol: float) -> None:
    acc = _run(tmp_path, "r", impl=impl, dtype=dtype)["accuracy"]
    assert isinstance(acc, dict)
    assert acc["rel_l1"] <= tol and acc["cosine"] > 1 - tol
    assert len(acc["layers"]) == TINY.layers
    assert math.isclose(acc["loss_diff"], acc["loss"] - acc["loss_ref"], abs_tol=1e-12)
    if dtype == "float32" and impl == "sdpa":
        assert acc["max_abs"] == 0.0 and acc["loss_diff"] == 0.0  # the same computation


def test_approximations_record_their_error(tmp_path: Path) -> None:
    err = {impl: _run(tmp_path, impl, impl=impl)["accuracy"] for impl in ("linear-elu", "performer", "int8-qk")}
    for impl, acc in err.items():
        assert isinstance(acc, dict)
        assert acc["rel_l1"] > 1e-4, impl  # not exact
        assert acc["rel_l1"] == max(layer["rel_l1"] for layer in acc["layers"])
    assert err["int8-qk"]["rel_l1"] < err["linear-elu"]["rel_l1"]  # type: ignore[operator]


def test_quant_int8_runs_through_torchao_and_costs_accuracy(tmp_path: Path) -> None:
    pytest.importorskip("torchao")
    meta = _run(tmp_path, "q", impl="sdpa", quant="int8")
    assert meta["status"] == "ok", meta["error"]
    acc = meta["accuracy"]
    assert isinstance(acc, dict) and 1e-5 < acc["rel_l1"] < 0.1


def test_quant_without_torchao_is_unsupported_with_the_reason(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real = builtins.__import__

    def no_torchao(name: str, *args: object, **kwargs: object) -> object:
        if name.startswith("torchao"):
            raise ImportError("No module named 'torchao'")
        return real(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(builtins, "__import__", no_torchao)
    meta = _run(tmp_path, "q", impl="sdpa", quant="int8")
    assert meta["status"] == "unsupported"
    assert "needs torchao" in str(meta["error"])


@pytest.mark.parametrize(("model", "impl", "dtype", "quant", "lo", "hi"), [
    ("hf:llama", "sdpa", "float32", None, 0.0, 1e-6),
    ("hf:gpt2", "naive", "float32", None, 0.0, 1e-5),  # eager attention against SDPA: rounding
    ("torch:mha", "naive", "float32", None, 0.0, 1e-6),
    ("hf:llama", "sdpa", "bfloat16", None, 1e-4, 5e-2),
    ("hf:llama", "sdpa", "float32", "int8", 1e-4, 0.1),
    # A sliding window and a KV cache the model keeps by default: rerun without one.
    ("hf:gemma3", "naive", "float32", None, 1e-9, 1e-5),
])
def test_models_we_did_not_write_record_their_error_too(tmp_path: Path, model: str, impl: str, dtype: str,
                                                        quant: str | None, lo: float, hi: float) -> None:
    """Each attention module (instrument's) reruns in an fp32 SDPA copy of the model, with that
    copy's own masks and positions but the model's input to the block."""
    if quant:
        pytest.importorskip("torchao")
    mask = {"mask": "sliding:8"} if model == "hf:gemma3" else {}
    meta = _run(tmp_path, "r", model=model, impl=impl, dtype=dtype, quant=quant, **mask)
    assert meta["status"] == "ok", meta["error"]
    acc = meta["accuracy"]
    assert isinstance(acc, dict) and lo <= acc["rel_l1"] <= hi, acc
    assert [x["layer"] for x in acc["layers"]] == list(range(TINY.layers))


def test_an_accuracy_that_does_not_fit_leaves_the_run_profiled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    """Out of memory in the measurement: no record ("not measured"), the reason, and the traces."""
    import runner.models

    def oom(*args: object, **kwargs: object) -> None:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB")

    monkeypatch.setattr(runner.models, "measure_accuracy", oom)
    meta = _run(tmp_path, "r", impl="sdpa")
    assert meta["status"] == "ok" and "accuracy" not in meta
    assert "out of memory" in str(meta["accuracy_error"]) and meta["traces"]
