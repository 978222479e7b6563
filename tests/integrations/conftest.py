"""Real training loops (devtools/training.py) profiled once per session: Hugging Face's Trainer with
``AttentionProfilerCallback``, and the runner's twin of its model (``--model hf:llama --size tiny
--kv-heads 2``, no KV cache in training, as the Trainer runs it), which the summaries are held to."""

from __future__ import annotations

from typing import Any

import pytest
from integration_runs import only_worker, run_dir_of

from devtools.training import BATCH, SEQ, hf_train
from runner.config import ModelConfig, ProfileConfig
from runner.session import RunSpec, run_one
from tb_attn_plugin.types.schema import WorkerSummary


@pytest.fixture(scope="session")
def trainer_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """``Trainer.train()`` for 8 steps with the callback's defaults: its output_dir, run directory and losses."""
    from tb_attn.integrations import AttentionProfilerCallback

    out = tmp_path_factory.mktemp("trainer")
    losses = hf_train(out, callbacks=[AttentionProfilerCallback()])
    return {"output_dir": out, "run_dir": run_dir_of(out), "losses": losses}


@pytest.fixture(scope="session")
def runner_twin(tmp_path_factory: pytest.TempPathFactory) -> WorkerSummary:
    """The runner's trace of the same model, batch and length, training, summarized."""
    logdir = tmp_path_factory.mktemp("runner-twin")
    cfg = ModelConfig(layers=2, heads=4, d_model=128, kv_heads=2, seq=SEQ, batch=BATCH, vocab=1024, impl="sdpa",
                      mode="training", dropout=0.0)
    result = run_one(RunSpec(model="hf:llama", cfg=cfg, name="twin", hf_overrides={"use_cache": False}), logdir,
                     ProfileConfig(wait=0, warmup=1, active=2))
    assert result.status == "ok", result.error
    return only_worker(logdir / "twin")
