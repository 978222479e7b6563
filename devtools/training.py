"""Real training loops on a tiny model, for the integrations' tests and benchmark (not shipped).

The model is ``tb-attn-run --model hf:llama --size tiny --kv-heads 2``'s (runner/models.py): Llama
with 2 layers, 4 query heads and 2 KV heads of 32, hidden 128, vocabulary 1024, random weights from
the seed, and no KV cache in training (``use_cache=False``, as the Trainer sets it). Each loop trains
on token batches drawn from a fixed generator, so two runs see the same data:

- ``hf_train``: Hugging Face's ``Trainer`` (CPU, no checkpoints, TensorBoard scalars every step);
- ``lightning_fit``: a ``LightningModule`` around the model, ``Trainer.fit`` on the CPU;
- ``accelerate_loop``: a plain loop under ``Accelerator`` with ``accelerator.profile()``.

``python -m devtools.training hf --output-dir D [--steps 8] [--grad-accum 2] [--callback]`` runs
``hf_train`` in a process of its own, under ``torchrun`` too (gloo on the CPU, one trace per rank).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import torch
from torch import nn

__all__ = ["BATCH", "SEQ", "TokenData", "accelerate_loop", "hf_train", "lightning_fit", "main", "tiny_llama"]

SEQ = 48
BATCH = 2
VOCAB = 1024


def tiny_llama(attn: str = "sdpa", *, seed: int = 0) -> nn.Module:
    """The runner's ``hf:llama`` at ``--size tiny --kv-heads 2``, built from its config (no download)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         intermediate_size=512, vocab_size=VOCAB, max_position_embeddings=2048, attention_dropout=0.0,
                         use_cache=False, attn_implementation=attn)
    model: nn.Module = LlamaForCausalLM(config)
    return model


class TokenData(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    """``n`` sequences of ``seq`` random tokens, item ``i`` always the same: ``input_ids`` and ``labels``."""

    def __init__(self, n: int = 256, seq: int = SEQ) -> None:
        self.n, self.seq = n, seq

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        ids = torch.randint(VOCAB, (self.seq,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids}


def hf_train(output_dir: str | Path, *, callbacks: list[Any] | None = None, steps: int = 8, batch: int = BATCH,
             grad_accum: int = 1, model: nn.Module | None = None, report_to: tuple[str, ...] = ("tensorboard",),
             **args: Any) -> list[float]:
    """``Trainer.train()`` for ``steps`` optimizer steps; the loss logged at each step."""
    from transformers import PrinterCallback, Trainer, TrainerCallback, TrainingArguments

    losses: list[float] = []

    class Losses(TrainerCallback):
        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None,
                   **kwargs: Any) -> None:
            if logs and "loss" in logs:
                losses.append(float(logs["loss"]))

    training = TrainingArguments(output_dir=str(output_dir), max_steps=steps, per_device_train_batch_size=batch,
                                 gradient_accumulation_steps=grad_accum, report_to=list(report_to), logging_steps=1,
                                 use_cpu=True, save_strategy="no", disable_tqdm=True, dataloader_num_workers=0,
                                 seed=0, data_seed=0, **args)
    trainer = Trainer(model=model if model is not None else tiny_llama(), args=training, train_dataset=TokenData(),
                      callbacks=[*(callbacks or []), Losses()])
    trainer.remove_callback(PrinterCallback)  # the logs on stdout, every step (disable_tqdm adds it)
    trainer.train()
    return losses


def lightning_fit(root: str | Path, *, profiler: Any = None, steps: int = 8, model: nn.Module | None = None,
                  grad_accum: int = 1, callbacks: list[Any] | None = None) -> Any:
    """``pytorch_lightning.Trainer.fit`` of a LightningModule around the model, logging to TensorBoard
    under ``root``; the Trainer."""
    import pytorch_lightning as pl

    inner = model if model is not None else tiny_llama()

    class Lit(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = inner

        def training_step(self, batch: dict[str, torch.Tensor], index: int) -> torch.Tensor:
            loss: torch.Tensor = self.model(**batch).loss
            self.log("train/loss", loss)
            return loss

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.AdamW(self.parameters(), lr=1e-4)

    loader = torch.utils.data.DataLoader(TokenData(), batch_size=BATCH)
    trainer = pl.Trainer(max_steps=steps, accelerator="cpu", devices=1, default_root_dir=str(root), profiler=profiler,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         log_every_n_steps=1, accumulate_grad_batches=grad_accum, callbacks=callbacks or [])
    trainer.fit(Lit(), loader)
    return trainer


def accelerate_loop(project_dir: str | Path, run: str, *, kwargs_handlers: list[Any] | None = None, steps: int = 8,
                    model: nn.Module | None = None,
                    scopes: Callable[[nn.Module], AbstractContextManager[Any]] | None = None) -> list[float]:
    """A plain training loop under ``Accelerator`` (CPU, TensorBoard tracker ``run`` under
    ``project_dir``), inside ``accelerator.profile()`` stepped once per optimizer step, and inside
    ``scopes(model)`` where given (``instrument``); the losses."""
    from accelerate import Accelerator

    model = model if model is not None else tiny_llama()
    accelerator = Accelerator(cpu=True, log_with="tensorboard", project_dir=str(project_dir),
                              kwargs_handlers=kwargs_handlers or [])
    accelerator.init_trackers(run)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    loader = torch.utils.data.DataLoader(TokenData(), batch_size=BATCH)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    losses: list[float] = []
    scoped = scopes(accelerator.unwrap_model(model)) if scopes is not None else contextlib.nullcontext()
    with scoped, accelerator.profile() as prof:
        for step, batch in zip(range(steps), loader, strict=False):
            loss = model(**batch).loss
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            losses.append(float(loss.detach()))
            accelerator.log({"train/loss": losses[-1]}, step=step)
            prof.step()
    accelerator.end_training()
    return losses


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("loop", choices=["hf"])
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--grad-accum", type=int, default=1)
    parser.add_argument("--callback", action="store_true", help="add tb-attn's AttentionProfilerCallback")
    args = parser.parse_args(argv)
    callbacks = []
    if args.callback:
        from tb_attn.integrations import AttentionProfilerCallback

        callbacks.append(AttentionProfilerCallback())
    distributed: dict[str, Any] = {"ddp_backend": "gloo"} if "WORLD_SIZE" in os.environ else {}
    losses = hf_train(args.output_dir, callbacks=callbacks, steps=args.steps, grad_accum=args.grad_accum, **distributed)
    print(" ".join(f"{x:.6f}" for x in losses))
    return 0


if __name__ == "__main__":
    sys.exit(main())
