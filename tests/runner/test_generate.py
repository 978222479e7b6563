"""--mode generate (runner/generate.py): cached decode equals uncached attention, the step scopes
and metadata say what each step was, and bad options fail before anything is written."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
import torch
from helpers import GENERATION_RUNS
from tracetools import load_trace

from runner.cli import main as runner_main
from runner.config import ModelConfig
from runner.generate import builtin_generation, hf_generation
from runner.hf_models import hf_config
from runner.model import Attention, Transformer
from runner.session import SDPA_BACKENDS
from tb_attn_plugin.vocab.impls import GENERATE_IMPLS
from tb_attn_plugin.vocab.scopes import format_step_scope, parse_step_scope

#: The exact implementations that run on a CPU (efficient and cuDNN SDPA are CUDA kernels).
CPU_IMPLS = tuple(i for i in GENERATE_IMPLS if i not in ("sdpa-efficient", "sdpa-cudnn"))
P, N = 12, 5


def _backend(impl: str) -> contextlib.AbstractContextManager[object]:
    backend = SDPA_BACKENDS.get(impl)
    return torch.nn.attention.sdpa_kernel([backend]) if backend is not None else contextlib.nullcontext()


def _cached_and_full(impl: str, kv_cache: str, kv_heads: int | None, per_head: bool = False
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """The last decode step's logits through the KV cache, and the logits at the same position of
    one uncached forward over the whole sequence (the prompt and every token fed back)."""
    torch.manual_seed(0)
    cfg = ModelConfig(layers=2, heads=4, kv_heads=kv_heads, d_model=32, seq=P + N, batch=2, vocab=64, impl=impl,
                      mode="generate", prompt_len=P, new_tokens=N, kv_cache=kv_cache, per_head=per_head)
    model = Transformer(cfg, scoped=False).eval()
    prompt = torch.randint(cfg.vocab, (cfg.batch, P), generator=torch.Generator().manual_seed(1))
    gen = builtin_generation(model, cfg, prompt)
    fed = [prompt]
    with _backend(impl), torch.inference_mode():
        for i in range(N + 1):
            if i:
                assert gen._token is not None
                fed.append(gen._token)
            cached = gen.step(i)
        for module in model.modules():
            if isinstance(module, Attention):
                module.cache = None
        full = model(torch.cat(fed, dim=1))[:, -1]
    assert torch.cat(fed, dim=1).shape == (2, P + N)
    return cached, full


@pytest.mark.parametrize("impl", CPU_IMPLS)
@pytest.mark.parametrize("kv_cache", ["dynamic", "static"])
@pytest.mark.parametrize("kv_heads", [None, 2, 1])
def test_cached_decode_equals_uncached_attention(impl: str, kv_cache: str, kv_heads: int | None) -> None:
    cached, full = _cached_and_full(impl, kv_cache, kv_heads)
    torch.testing.assert_close(cached, full, atol=2e-5, rtol=1e-5)


def test_cached_decode_per_head() -> None:
    cached, full = _cached_and_full("naive", "static", 2, per_head=True)
    torch.testing.assert_close(cached, full, atol=2e-5, rtol=1e-5)


def test_a_wrong_cache_would_be_caught() -> None:
    """The comparison above can fail: a decode step that forgets the cache attends only itself."""
    cached, full = _cached_and_full("sdpa", "dynamic", None)
    cfg = ModelConfig(layers=2, heads=4, d_model=32, seq=P + N, batch=2, vocab=64, impl="sdpa")
    torch.manual_seed(0)
    model = Transformer(cfg, scoped=False).eval()
    with torch.inference_mode():
        alone = model(torch.zeros(2, 1, dtype=torch.long), start=P + N - 1)[:, -1]
    assert not torch.allclose(alone, full, atol=1e-3)
    torch.testing.assert_close(cached, full, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
@pytest.mark.parametrize("kv_cache", ["dynamic", "static"])
def test_hugging_face_cached_decode_equals_uncached(family: str, kv_cache: str) -> None:
    transformers = pytest.importorskip("transformers")
    cfg = ModelConfig(layers=2, heads=4, kv_heads=2 if family == "llama" else None, d_model=32, seq=P + N, batch=2,
                      vocab=64, impl="sdpa", mode="generate", prompt_len=P, new_tokens=N, kv_cache=kv_cache)
    torch.manual_seed(0)
    config = hf_config(f"hf:{family}", cfg, {})
    model = getattr(transformers, {"gpt2": "GPT2LMHeadModel", "llama": "LlamaForCausalLM"}[family])(config).eval()
    prompt = torch.randint(cfg.vocab, (cfg.batch, P), generator=torch.Generator().manual_seed(1))
    gen = hf_generation(model, cfg, prompt)
    fed = [prompt]
    with torch.inference_mode():
        for i in range(N + 1):
            if i:
                assert gen._token is not None
                fed.append(gen._token)
            cached = gen.step(i)
        full = model(input_ids=torch.cat(fed, dim=1), use_cache=False).logits[:, -1]
    torch.testing.assert_close(cached, full, atol=2e-5, rtol=1e-5)


def test_step_scopes_and_metadata(generation_logdir: Path) -> None:
    """One trace per generation: the prefill of P tokens and one decode step per new token, each
    profiler step holding exactly one step scope that names its context, as the metadata does."""
    for name, changes in GENERATION_RUNS:
        run = generation_logdir / name
        meta = json.loads((run / "tb_attn_run.json").read_text())
        gen = meta["generation"]
        p, n = changes["prompt_len"], gen["new_tokens"]
        assert gen["prompt_len"] == p and gen["kv_cache"] == changes.get("kv_cache", "dynamic")
        assert gen["steps"] == [{"role": "prefill", "context": p}] + [
            {"role": "decode", "context": p + i} for i in range(1, n + 1)]
        assert meta["profile"]["active"] == n + 1 and meta["peaks"]["copy_bytes_per_s"] > 1e8
        assert "mask" not in meta and "accuracy" not in meta
        (trace,) = sorted(run.glob("*.pt.trace.json"))
        events = load_trace(trace)["traceEvents"]
        steps = sorted((e for e in events if e.get("name", "").startswith("ProfilerStep#")), key=lambda e: e["ts"])
        scopes = [e for e in events if parse_step_scope(e.get("name", "")) is not None and e.get("ph") == "X"]
        assert len(steps) == n + 1
        found = []
        for s in steps:
            inside = [e for e in scopes if s["ts"] <= e["ts"] and e["ts"] + e["dur"] <= s["ts"] + s["dur"]
                      and e.get("cat") in ("cpu_op", "user_annotation")]
            assert len(inside) == 1, (name, s["name"])
            scope = parse_step_scope(inside[0]["name"])
            assert scope is not None
            found.append({"role": scope.role, "context": scope.context})
        assert found == gen["steps"]


def test_step_scope_grammar() -> None:
    assert format_step_scope("decode", 513) == "tbattn.v1/decode/C513"
    assert parse_step_scope("tbattn.v1/prefill/C512") is not None
    for bad in ("tbattn.v1/decode/C0", "tbattn.v1/decode/C" + "9" * 40, "tbattn.v1/verify/C3", "tbattn.v1/L3/decode"):
        assert parse_step_scope(bad) is None
    with pytest.raises(ValueError):
        format_step_scope("decode", 0)


@pytest.mark.parametrize(("args", "message"), [
    (["--prompt-len", "8", "--new-tokens", "0"], "--new-tokens must be at least 1"),
    (["--new-tokens", "4"], "--mode generate needs --prompt-len"),
    (["--prompt-len", "64", "--new-tokens", "8", "--seq", "32"], "need 72 positions; the model has 32"),
    (["--prompt-len", "64", "--model", "hf:gpt2", "--hf-config", "n_positions=50", "--new-tokens", "4"],
     "need 68 positions; hf:gpt2 has 50"),
    (["--prompt-len", "8", "--impl", "flex"], "--mode generate does not run flex"),
    (["--prompt-len", "8", "--impl", "linear-elu"], "does not run linear-elu"),
    (["--prompt-len", "8", "--compile"], "does not take --compile"),
    (["--prompt-len", "8", "--no-causal"], "does not take --no-causal"),
    (["--prompt-len", "8", "--mask", "sliding:4"], "does not take --mask"),
    (["--prompt-len", "8", "--model", "hf:bert"], "--mode generate runs builtin, hf:gpt2, hf:llama"),
    (["--prompt-len", "8", "--model", "torch:mha"], "--mode generate runs builtin"),
    (["--prompt-len", "8", "--kv-cache", "paged"], "unknown --kv-cache 'paged'"),
    (["--prompt-len", "8", "--seq", "64,128"], "takes one --seq"),
])
def test_bad_generate_options_fail_before_writing(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  args: list[str], message: str) -> None:
    logdir = tmp_path / "runs"
    assert runner_main(["--logdir", str(logdir), "--mode", "generate", "--no-progress", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err
    assert not logdir.exists()


def test_generation_options_need_generate_mode(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert runner_main(["--logdir", str(tmp_path / "r"), "--prompt-len", "8"]) == 2
    assert "belong to --mode generate" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_run_names_say_cache_and_kv_heads(tmp_path: Path) -> None:
    args = ["--logdir", str(tmp_path), "--mode", "generate", "--prompt-len", "8", "--new-tokens", "2",
            "--kv-cache", "dynamic,static", "--kv-heads", "2", "--layers", "1", "--heads", "4", "--d-model", "16",
            "--no-progress", "--wait", "0", "--warmup", "0", "--active", "1"]
    assert runner_main(args) == 0
    names = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.glob("*/*/*"))
    assert names == ["builtin/naive/gen-p8-n2-dynamic-kv2", "builtin/naive/gen-p8-n2-static-kv2"]


def test_a_generation_run_prints_no_allocator_warning(tmp_path: Path) -> None:
    """The profiler records no memory in its warm-up step; the throw-away prefill's cache and token
    must not outlive it, or the first active step frees blocks c10 never saw allocated and prints
    "[W ... CPUAllocator.cpp] Memory block of unknown size ..." (once per process: a fresh one)."""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "runner", "--logdir", str(tmp_path), "--mode", "generate", "--kv-cache", "dynamic",
         "--impl", "sdpa", "--layers", "1", "--heads", "2", "--d-model", "16", "--prompt-len", "8",
         "--new-tokens", "2", "--no-progress"],
        capture_output=True, text=True, timeout=300, check=True,
    )
    assert "CPUAllocator" not in out.stderr and "Memory block of unknown size" not in out.stderr, out.stderr
    assert "wrote 1 trace file(s)" in out.stdout + out.stderr
