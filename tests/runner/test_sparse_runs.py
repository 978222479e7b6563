"""flex_attention, masks and torch.compile in the runner: same numbers as the dense paths, the
mask's real density in the metadata, and clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from helpers import PROFILE, SPARSE, TINY, WINDOW

from runner.cli import main as runner_main
from runner.config import ConfigError, ModelConfig
from runner.masks import build_block_mask, dense_mask, mask_mod
from runner.model import Transformer, flex_call
from runner.session import RunSpec, run_one
from tb_attn_plugin.vocab.masks import kept_pairs, parse_mask

S = 256


def _qkv(seed: int = 0) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(1, 2, S, 16, generator=gen) for _ in range(3)]


def test_flex_causal_equals_sdpa_causal() -> None:
    q, k, v = _qkv()
    mod = mask_mod(parse_mask("causal"), S, causal=True)
    for impl in ("flex", "flex-eager"):
        out = flex_call(impl)(q, k, v, block_mask=build_block_mask(mod, S))
        torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(("spec", "impl"), [("sliding:64", "flex"), ("document:4", "flex-eager"),
                                           ("prefix:40", "flex-eager"), ("block:0.5", "flex-eager")])
def test_flex_equals_naive_with_the_same_explicit_mask(spec: str, impl: str) -> None:
    """The compiled kernel on the sliding window; the other masks' semantics through flex's own
    reference path (a compile per mask function would cost the suite 15 s each)."""
    q, k, v = _qkv(1)
    mod = mask_mod(parse_mask(spec), S, causal=True, seed=3)
    allowed = dense_mask(mod, S)
    scores = (q @ k.transpose(-2, -1)) / 4.0
    naive = scores.masked_fill(~allowed, float("-inf")).softmax(-1) @ v
    flex = flex_call(impl)(q, k, v, block_mask=build_block_mask(mod, S))
    torch.testing.assert_close(flex, naive, atol=1e-5, rtol=1e-5)


def test_the_model_gives_the_same_logits_with_flex_naive_and_sdpa() -> None:
    ids = torch.randint(64, (1, S), generator=torch.Generator().manual_seed(0))
    out = {}
    for impl in ("naive", "sdpa", "flex"):
        torch.manual_seed(0)
        cfg = ModelConfig(**{**SPARSE, "impl": impl, "mask": f"sliding:{WINDOW}"})  # type: ignore[arg-type]
        with torch.no_grad():
            out[impl] = Transformer(cfg).eval()(ids)
    torch.testing.assert_close(out["flex"], out["naive"], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(out["sdpa"], out["naive"], atol=1e-4, rtol=1e-4)


def test_metadata_records_the_mask(sparse_logdir: Path) -> None:
    n = SPARSE["seq"]  # 4 x 4 blocks: the window of 64 touches the diagonal and the one below it
    meta = json.loads((sparse_logdir / "flex-sliding" / "tb_attn_run.json").read_text())
    kept = kept_pairs(parse_mask(f"sliding:{WINDOW}"), n, n, causal=True)
    assert meta["mask"] == {"spec": f"sliding:{WINDOW}", "kept": kept / n**2, "blocks": 7 / 16, "block_size": 128}
    assert meta["config"]["mask"] == f"sliding:{WINDOW}" and meta["impl"] == "flex"
    gemma = json.loads((sparse_logdir / "gemma3-flex" / "tb_attn_run.json").read_text())
    assert gemma["mask"]["spec"] == f"sliding:{WINDOW}"
    assert gemma["mask"]["layers"] == {"1": {"spec": "causal", "kept": (n + 1) / (2 * n), "blocks": 10 / 16,
                                             "block_size": 128}}


def test_flex_training_on_cpu_is_unsupported_with_pytorchs_reason(sparse_logdir: Path) -> None:
    meta = json.loads((sparse_logdir / "flex-training" / "tb_attn_run.json").read_text())
    assert meta["status"] == "unsupported" and "backward" in meta["error"] and "\n" not in meta["error"]


def test_a_compile_failure_fails_the_run_with_the_first_line_and_the_sweep_goes_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import runner.model as model_module

    def broken(fn: object, **kwargs: object) -> object:
        def run(*args: object) -> object:
            raise RuntimeError("backend='inductor' raised:\nCppCompileError: C++ compile error\n  details")
        return run

    monkeypatch.setattr(model_module.torch, "compile", broken)
    bad = run_one(RunSpec("builtin", TINY.replace(compile=True), "compiled"), tmp_path, PROFILE)
    assert bad.status == "failed" and bad.error == "RuntimeError: backend='inductor' raised:"
    good = run_one(RunSpec("builtin", TINY, "plain"), tmp_path, PROFILE)
    assert good.status == "ok"


@pytest.mark.parametrize(("args", "message"), [
    (["--mask", "window:3"], "unknown mask"),
    (["--mask", "sliding:0"], "must be in 1..2147483647"),
    (["--mask", "sliding:-4"], "must be in 1..2147483647"),
    (["--mask", "sliding:99999999999999999999"], "must be in 1..2147483647"),
    (["--mask", "block:1.5"], "(0, 1]"),
    (["--mask", "block:0"], "(0, 1]"),
    (["--mask", "prefix:8", "--no-causal"], "causal"),
    (["--impl", "flex", "--dropout", "0.1"], "dropout"),
    (["--compile", "--per-head"], "--per-head"),
    (["--model", "hf:gpt2", "--mask", "sliding:8"], "hf:gemma3"),
    (["--model", "hf:gpt2", "--impl", "flex-eager"], "always compiles"),
    (["--model", "hf:gpt2", "--impl", "flex"], "no flex_attention path"),
])
def test_bad_mask_and_compile_options_exit_2_with_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str) -> None:
    code = runner_main(["--logdir", str(tmp_path), "--no-progress", *args])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0 and message in err, err
    assert not any(tmp_path.iterdir())


def test_mask_and_compile_show_in_run_names() -> None:
    from runner.cli import run_name

    cfg = ModelConfig(impl="flex", mask="sliding:256", seq=1024)
    assert run_name("builtin", cfg) == "builtin/flex-sliding256/seq1024"
    assert run_name("builtin", ModelConfig(impl="naive", compile=True)) == "builtin/naive-compiled/seq128"
    assert run_name("builtin", ModelConfig(impl="flex")) == "builtin/flex/seq128"  # causal: the default
    with pytest.raises(ConfigError, match="--mask"):
        ModelConfig(mask="sliding:x")
