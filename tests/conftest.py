"""Shared fixtures: traces written by our own runner, once per test session."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # helpers, tracetools, webtools
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))  # the repository root: devtools

from collections.abc import Callable

from helpers import (
    GENERATION,
    GENERATION_RUNS,
    HAND_TRACES,
    SPARSE,
    STRATEGIES,
    STRATEGY_IMPLS,
    STRATEGY_SEQS,
    WINDOW,
    profile_run,
    torchrun,
)

from tb_attn_plugin.engine import loader as loader_module
from tb_attn_plugin.server import plugin as plugin_module
from tb_attn_plugin.trace.decode import decode_bytes
from tb_attn_plugin.trace.events import Events


@pytest.fixture(autouse=True)
def _no_parsing_ahead(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plugins built in this process parse no run ahead of clicks unless a test asks for it (a
    ``prefetch_files`` option or flag): the daemon thread that does would outlive its test and
    meet the next test's monkeypatches. A real ``tensorboard`` (browser tests) parses ahead."""
    monkeypatch.setattr(plugin_module, "DEFAULT_PREFETCH_FILES", 0)


@pytest.fixture
def trace_bytes() -> Callable[[str], bytes]:
    """The bytes of a hand-written trace, by name (``tests/traces/NAME.json``)."""
    def read(name: str) -> bytes:
        return (HAND_TRACES / f"{name}.json").read_bytes()

    return read


@pytest.fixture
def trace_events(trace_bytes: Callable[[str], bytes]) -> Callable[[str], Events]:
    """A hand-written trace, decoded."""
    def load(name: str) -> Events:
        return decode_bytes(trace_bytes(name))

    return load


@pytest.fixture
def decodes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The trace paths the loader reads and decodes (``loader.load_events``), in order."""
    seen: list[str] = []
    real = loader_module.load_events

    def counting(path: str, **kwargs: object) -> object:
        seen.append(path)
        return real(path, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(loader_module, "load_events", counting)
    return seen


@pytest.fixture(scope="session")
def builtin_logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One training run per implementation of the built-in transformer (efficient/cudnn skip on CPU)."""
    logdir = tmp_path_factory.mktemp("builtin")
    for impl in ("naive", "naive-inplace", "sdpa", "sdpa-math", "sdpa-flash", "sdpa-efficient", "sdpa-cudnn"):
        profile_run(logdir, impl, impl=impl)
    profile_run(logdir, "naive-per-head", impl="naive", per_head=True)
    profile_run(logdir, "sdpa-per-head", impl="sdpa", per_head=True)
    profile_run(logdir, "naive-gqa", impl="naive", kv_heads=2)
    profile_run(logdir, "naive-dropout", impl="naive", dropout=0.1)
    profile_run(logdir, "naive-inference", impl="naive", mode="inference")
    return logdir


@pytest.fixture(scope="session")
def torchrun_logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two 2-rank runs under torchrun (gloo): tensor-parallel heads with rank 1 slowed by 20 ms
    per attention block (``builtin/naive-tp/seq16``), and data parallel (``builtin/sdpa/seq16``)."""
    logdir = tmp_path_factory.mktemp("torchrun")
    for args in (["--parallel", "tp", "--impl", "naive", "--slow-rank", "1", "--slow-ms", "20"],
                 ["--parallel", "ddp", "--impl", "sdpa"]):
        out = torchrun("-m", "runner", "--logdir", str(logdir), "--layers", "2", "--heads", "4", "--d-model", "32",
                       "--seq", "16", "--active", "2", "--no-progress", *args)
        assert f"wrote 2 trace file(s) into {logdir}" in out, out[-2000:]  # every rank's, not the lead's alone
        # ...and the run's row counts them too
        assert re.search(r"^builtin/\S+/seq16\s+ok\s+[\d.]+\s+2\s*$", out, re.M), out[-2000:]
    return logdir



@pytest.fixture(scope="session")
def sparse_logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Runs of one mask through every implementation, compiled ones included; flex_attention
    compiles once for the session (same shapes), the compiled block once more."""
    logdir = tmp_path_factory.mktemp("sparse")
    sliding = f"sliding:{WINDOW}"
    for name, changes in {
        "flex-sliding": dict(impl="flex", mask=sliding),
        "flex-causal": dict(impl="flex"),
        "flex-document": dict(impl="flex", mask="document:4"),
        "flex-eager-sliding": dict(impl="flex-eager", mask=sliding),
        "naive-sliding": dict(impl="naive", mask=sliding),
        "sdpa-sliding": dict(impl="sdpa", mask=sliding),
        "sdpa-causal": dict(impl="sdpa"),
        "naive-compiled": dict(impl="naive", compile=True),
        "naive-compiled-unscoped": dict(impl="naive", compile=True, scopes=False),
        "flex-training": dict(impl="flex", mode="training"),
    }.items():
        result = profile_run(logdir, name, **{**SPARSE, **changes})
        assert result.status == ("unsupported" if name == "flex-training" else "ok"), (name, result.error)
    for impl in ("flex", "sdpa"):
        result = profile_run(logdir, f"gemma3-{impl}", model="hf:gemma3", **{**SPARSE, "impl": impl, "mask": sliding})
        assert result.status == "ok", (impl, result.error)
    result = profile_run(logdir, "llama-flex", model="hf:llama", **{**SPARSE, "impl": "flex"})
    assert result.status == "ok", result.error
    return logdir


@pytest.fixture(scope="session")
def generation_logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Generation runs (``GENERATION_RUNS``): a prompt of 64 to 256 tokens, then six decode steps,
    with a dynamic or static KV cache, MHA or MQA, fused or naive attention."""
    logdir = tmp_path_factory.mktemp("generation")
    for name, changes in GENERATION_RUNS:
        prompt = int(changes["prompt_len"])
        cfg = {**GENERATION, **changes, "seq": prompt + int(GENERATION["new_tokens"])}
        result = profile_run(logdir, name, **cfg)
        assert result.status == "ok", (name, result.error)
    return logdir


@pytest.fixture(scope="session")
def strategies_logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Exact and approximate attention at three lengths, in inference, as the runner names them
    (``builtin/<impl>/seq<S>``): the strategies view's input. Plus one run without an accuracy
    record (as an older runner wrote): ``builtin/sdpa-math/seq256``."""
    logdir = tmp_path_factory.mktemp("strategies")
    for impl in STRATEGY_IMPLS:
        for seq in STRATEGY_SEQS:
            result = profile_run(logdir, f"builtin/{impl}/seq{seq}", **{**STRATEGIES, "impl": impl, "seq": seq})
            assert result.status == "ok", (impl, seq, result.error)
    profile_run(logdir, "builtin/sdpa-math/seq256", **{**STRATEGIES, "impl": "sdpa-math", "seq": 256})
    meta = logdir / "builtin/sdpa-math/seq256" / "tb_attn_run.json"
    data = json.loads(meta.read_text())
    del data["accuracy"]
    meta.write_text(json.dumps(data))
    return logdir
