"""PyTorch Lightning with ``Trainer(profiler=AttentionProfiler())``: a real ``fit`` of the runner's
tiny Llama inside a LightningModule on the CPU, its trace in ``trainer.log_dir`` beside the
TensorBoardLogger's scalars, its figures the runner's, gradient accumulation, and a failing fit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from integration_runs import only_worker

from devtools.training import lightning_fit, tiny_llama
from tb_attn.integrations import AttentionProfiler
from tb_attn_plugin.types.schema import WorkerSummary
from tb_attn_plugin.vocab.names import METADATA_FILE

pytestmark = pytest.mark.slow


def _phases(w: WorkerSummary) -> dict[tuple[int, str], tuple[float, float]]:
    return {(x.layer, p.phase): (p.flops, p.backward.flops) for x in w.layers for p in x.phases}


@pytest.fixture(scope="module")
def fitted(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return lightning_fit(tmp_path_factory.mktemp("lightning"), profiler=AttentionProfiler())


def test_the_trace_goes_to_the_trainers_log_dir(fitted: Any) -> None:
    log_dir = Path(fitted.log_dir)
    assert log_dir.name == "version_0" and log_dir.parent.name == "lightning_logs"
    assert list(log_dir.glob("events.out.tfevents.*")), "the TensorBoardLogger's scalars"
    (trace,) = log_dir.glob("*.pt.trace.json")
    meta = json.loads((log_dir / METADATA_FILE).read_text())
    assert meta["status"] == "ok" and meta["traces"] == [trace.name] and meta["steps"] == 8
    assert meta["integration"]["name"] == "lightning.Trainer"
    assert meta["model"] == "LlamaForCausalLM" and meta["model_class"].endswith(".Lit")
    assert meta["impl"] == "sdpa" and meta["config"]["seq"] == 48 and meta["config"]["batch"] == 2
    assert meta["blocks"] == [{"layer": i, "module": f"model.model.layers.{i}.self_attn"} for i in range(2)]


def test_its_figures_are_the_runners(fitted: Any, runner_twin: WorkerSummary) -> None:
    mine = only_worker(Path(fitted.log_dir))
    assert mine.step_count == 5 and not any(x.inferred for x in mine.layers)
    assert [(x.layer, x.backend, x.flops) for x in mine.layers] == \
        [(x.layer, x.backend, x.flops) for x in runner_twin.layers]
    assert _phases(mine) == _phases(runner_twin)


def test_gradient_accumulation_puts_micro_batches_inside_a_step(fitted: Any, tmp_path: Path) -> None:
    trainer = lightning_fit(tmp_path, profiler=AttentionProfiler(skip_first=1, active=3), steps=6, grad_accum=2)
    accumulated = only_worker(Path(trainer.log_dir))
    assert accumulated.step_count == 3
    assert [x.calls for x in accumulated.layers] == [2, 2]
    assert [x.flops for x in accumulated.layers] == [2 * x.flops for x in only_worker(Path(fitted.log_dir)).layers]


def test_a_failing_fit_writes_its_trace_and_says_why(tmp_path: Path) -> None:
    import pytorch_lightning as pl

    class Boom(pl.Callback):
        def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
            if trainer.global_step == 4:
                raise ValueError("loss is nan")

    model = tiny_llama()
    sdpa = F.scaled_dot_product_attention
    with pytest.raises(ValueError, match="loss is nan"):
        lightning_fit(tmp_path, profiler=AttentionProfiler(skip_first=0, active=5), model=model, callbacks=[Boom()])
    log_dir = tmp_path / "lightning_logs" / "version_0"
    meta = json.loads((log_dir / METADATA_FILE).read_text())
    assert meta["status"] == "failed" and meta["error"] == "ValueError: loss is nan"
    assert len(list(log_dir.glob("*.pt.trace.json"))) == 1
    assert only_worker(log_dir).step_count == 3  # steps 2 to 4; step 1 warms the profiler up
    assert F.scaled_dot_product_attention is sdpa
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())
    assert not torch.autograd.profiler._is_profiler_enabled
