"""Hugging Face's ``Trainer`` with ``AttentionProfilerCallback``: a real ``train()`` of the runner's
tiny Llama on the CPU (devtools/training.py), its traces next to the Trainer's TensorBoard scalars,
its summary held to the runner's for the same model, gradient accumulation, two processes, and what
happens when training fails, finds no attention, or meets another profiler."""

from __future__ import annotations

import json
import logging
import socket
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from helpers import torchrun
from integration_runs import TIMED_FINDINGS, only_worker, run_dir_of
from torch import nn

from devtools.training import BATCH, SEQ, hf_train, tiny_llama
from tb_attn.integrations import AttentionProfilerCallback, ProfilerBusyError
from tb_attn.integrations.hf import trainer_log_dir
from tb_attn_plugin.types.schema import WorkerSummary
from tb_attn_plugin.vocab.names import METADATA_FILE

pytestmark = pytest.mark.slow


def _meta(run_dir: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((run_dir / METADATA_FILE).read_text())
    return data


def _traces(run_dir: Path) -> list[Path]:
    return sorted(run_dir.glob("*.pt.trace.json*"))


def _phase_flops(w: WorkerSummary) -> dict[tuple[int, str], tuple[float, float]]:
    """(layer, phase) -> (forward FLOPs, backward FLOPs) per step."""
    return {(x.layer, p.phase): (p.flops, p.backward.flops) for x in w.layers for p in x.phases}


def _no_hooks(model: nn.Module) -> bool:
    return not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())


def test_the_trace_sits_beside_the_trainers_scalars(trainer_run: dict[str, Any]) -> None:
    run_dir = trainer_run["run_dir"]
    assert run_dir.parent == trainer_run["output_dir"] / "runs" and run_dir.name.endswith("_" + socket.gethostname())
    assert list(run_dir.glob("events.out.tfevents.*")), "the Trainer's TensorBoard scalars"
    (trace,) = _traces(run_dir)
    meta = _meta(run_dir)
    assert meta["status"] == "ok" and meta["error"] is None
    assert meta["traces"] == [trace.name]
    assert meta["model"] == "LlamaForCausalLM" and meta["attn_implementation"] == "sdpa" and meta["impl"] == "sdpa"
    assert meta["dtype"] == "float32" and meta["world_size"] == 1
    assert meta["integration"]["name"] == "transformers.Trainer"
    cfg = meta["config"]
    assert (cfg["seq"], cfg["batch"], cfg["layers"], cfg["heads"], cfg["kv_heads"], cfg["d_model"]) == \
        (SEQ, BATCH, 2, 4, 2, 128)
    assert cfg["mode"] == "training" and cfg["gradient_accumulation_steps"] == 1 and cfg["parallel"] == "none"
    assert meta["profile"].items() >= {"skip_first": 2, "wait": 0, "warmup": 1, "active": 5, "repeat": 1,
                                       "record_shapes": True, "profile_memory": True}.items()
    assert meta["steps"] == 8
    assert meta["blocks"] == [{"layer": i, "module": f"model.layers.{i}.self_attn"} for i in range(2)]
    assert meta["ranks"] == [{"rank": 0, "worker": trace.name.split(".")[0], "host": socket.gethostname()}]


def test_the_summary_is_the_runners(trainer_run: dict[str, Any], runner_twin: WorkerSummary) -> None:
    mine = only_worker(trainer_run["run_dir"])
    assert mine.step_count == 5  # the default schedule's active steps: 4 to 8
    assert not any(x.inferred for x in mine.layers), "scoped, not inferred"
    assert [(x.layer, x.module, x.backend, x.core_only) for x in mine.layers] == \
        [(x.layer, x.module, x.backend, x.core_only) for x in runner_twin.layers]
    assert [x.flops for x in mine.layers] == [x.flops for x in runner_twin.layers]
    assert _phase_flops(mine) == _phase_flops(runner_twin)
    # By hand: q·kᵀ and attn·V over the S(S+1)/2 causal pairs, 2·B·Hq·D each; the projections of
    # d = 128 to 4 query heads and 2 KV heads of 32.
    phases = {p.phase: p.flops for p in mine.layers[0].phases}
    assert phases["sdpa"] == 2 * 2 * BATCH * 4 * 32 * SEQ * (SEQ + 1) // 2
    assert phases["qkv_proj"] == 2 * BATCH * SEQ * 128 * (128 + 64 + 64)
    assert phases["out_proj"] == 2 * BATCH * SEQ * 128 * 128
    assert {f.id for f in mine.findings} - TIMED_FINDINGS == {f.id for f in runner_twin.findings} - TIMED_FINDINGS


def test_the_model_trains_as_without_the_callback(trainer_run: dict[str, Any], tmp_path: Path) -> None:
    model = tiny_llama()
    plain = hf_train(tmp_path / "plain", model=model, report_to=())
    assert trainer_run["losses"] == plain, "the callback changed what the model computes"
    assert len(plain) == 8


def test_scopes_and_profiler_are_gone_after_training(tmp_path: Path) -> None:
    model = tiny_llama()
    sdpa = F.scaled_dot_product_attention
    hf_train(tmp_path, model=model, steps=3, callbacks=[AttentionProfilerCallback(skip_first=0, active=1)])
    assert F.scaled_dot_product_attention is sdpa
    assert _no_hooks(model)
    assert not torch.autograd.profiler._is_profiler_enabled


def test_gradient_accumulation_puts_micro_batches_inside_a_step(trainer_run: dict[str, Any], tmp_path: Path) -> None:
    hf_train(tmp_path, grad_accum=2, steps=6, callbacks=[AttentionProfilerCallback(skip_first=1, active=3)])
    run_dir = run_dir_of(tmp_path)
    assert _meta(run_dir)["config"]["gradient_accumulation_steps"] == 2
    accumulated = only_worker(run_dir)
    single = only_worker(trainer_run["run_dir"])
    assert accumulated.step_count == 3
    assert [x.calls for x in accumulated.layers] == [2, 2], "two micro-batches' forward per optimizer step"
    assert [x.flops for x in accumulated.layers] == [2 * x.flops for x in single.layers]


def test_a_failed_training_writes_its_trace_and_says_why(tmp_path: Path) -> None:
    from transformers import TrainerCallback

    class Boom(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.global_step == 4:
                raise RuntimeError("disk on fire\nsecond line")

    model = tiny_llama()
    sdpa = F.scaled_dot_product_attention
    with pytest.raises(RuntimeError, match="disk on fire"):
        hf_train(tmp_path, model=model, steps=8, callbacks=[AttentionProfilerCallback(skip_first=0, active=5), Boom()])
    run_dir = run_dir_of(tmp_path)
    meta = _meta(run_dir)
    assert meta["status"] == "failed" and meta["error"] == "RuntimeError: disk on fire"
    (trace,) = _traces(run_dir)
    assert meta["traces"] == [trace.name]
    assert only_worker(run_dir).step_count == 3, "steps 2 to 4 recorded, flushed when training failed"
    assert F.scaled_dot_product_attention is sdpa and _no_hooks(model)
    assert not torch.autograd.profiler._is_profiler_enabled
    hf_train(tmp_path / "again", model=model, steps=2, callbacks=[AttentionProfilerCallback(skip_first=0, active=1)])


class _MLPOnly(nn.Module):
    """A language model with no attention at all: embeddings, an MLP, a head."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(1024, 32)
        self.mlp = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 1024))

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        logits = self.mlp(self.embed(input_ids))
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = F.cross_entropy(logits.view(-1, logits.size(-1)), labels.view(-1))
        return out


def test_a_model_without_attention_logs_one_warning_and_trains(tmp_path: Path,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="runner.capture"):
        losses = hf_train(tmp_path, model=_MLPOnly(), steps=4,
                          callbacks=[AttentionProfilerCallback(skip_first=0, active=2)])
    said = [r.getMessage() for r in caplog.records if r.name == "runner.capture"]
    assert len(said) == 1 and said[0].startswith("tb-attn: no attention found in _MLPOnly"), said
    assert len(losses) == 4
    run_dir = run_dir_of(tmp_path)
    assert _meta(run_dir)["status"] == "ok" and _meta(run_dir)["blocks"] == []
    assert only_worker(run_dir).layers == []


def test_another_profiler_running_is_a_clear_error(tmp_path: Path) -> None:
    model = tiny_llama()
    with torch.profiler.profile(), pytest.raises(ProfilerBusyError, match="already recording"):
        hf_train(tmp_path, model=model, steps=2, callbacks=[AttentionProfilerCallback()])
    assert _no_hooks(model), "nothing was changed"
    assert not list(tmp_path.rglob("*.pt.trace.json"))


def test_tensorboard_logging_dir_is_where_the_scalars_go(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "tb" / "exp-1"
    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(target))
    hf_train(tmp_path / "out", steps=2, callbacks=[AttentionProfilerCallback(skip_first=0, active=1)])
    assert list(target.glob("events.out.tfevents.*")) and len(_traces(target)) == 1
    assert not (tmp_path / "out" / "runs").exists()


def test_the_log_dir_is_found_as_transformers_finds_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers import TrainingArguments

    monkeypatch.delenv("TENSORBOARD_LOGGING_DIR", raising=False)
    args = TrainingArguments(output_dir="/o", report_to=[])
    assert trainer_log_dir(args, []).startswith("/o/runs/")

    class Tensorboard4:  # transformers 4's arguments carry the directory
        output_dir = "/o"
        logging_dir = "/logs/here"

    assert trainer_log_dir(Tensorboard4(), []) == "/logs/here"  # type: ignore[arg-type]
    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", "~/tb")
    assert trainer_log_dir(args, []) == str(Path.home() / "tb")
    from transformers.integrations import TensorBoardCallback

    scalars = TensorBoardCallback()
    scalars.logging_dir = "/where/the/scalars/went"  # as its on_train_begin leaves it
    assert trainer_log_dir(args, [object(), scalars]) == "/where/the/scalars/went"


def test_two_processes_write_one_trace_per_rank(tmp_path: Path) -> None:
    out = tmp_path / "ddp"
    torchrun("-m", "devtools.training", "hf", "--output-dir", str(out), "--steps", "5", "--callback",
             timeout=400)
    run_dir = run_dir_of(out)
    traces = _traces(run_dir)
    host = socket.gethostname().replace(".", "-")
    assert [t.name.split(".")[0] for t in traces] == [f"{host}_rank0", f"{host}_rank1"]
    meta = _meta(run_dir)
    assert meta["world_size"] == 2 and meta["config"]["parallel"] == "ddp"
    assert [r["worker"] for r in meta["ranks"]] == [f"{host}_rank0", f"{host}_rank1"]
    import tb_attn
    from tb_attn_plugin.analysis.cross_run.ranks import ranks

    (run,) = tb_attn.load(str(run_dir)).runs
    view = ranks(run)
    assert [r.rank for r in view.ranks] == [0, 1]
    assert all(len(w.layers) == 2 for w in run.workers)
