"""Hugging Face's ``Trainer``: ``AttentionProfilerCallback``, added with one line.

    trainer = Trainer(..., callbacks=[AttentionProfilerCallback()])

It profiles a few optimizer steps of ``trainer.train()`` with the attention scopes of
``instrument()`` into the directory where the Trainer's TensorBoard scalars go, so that
``tensorboard --logdir`` shows the scalars and the Attention tab side by side (docs/integrations.md).
"""

from __future__ import annotations

import functools
import logging
import os
import sys
from typing import Any

import torch.distributed as torch_dist
from torch import nn
from transformers import Trainer, TrainerCallback, TrainerControl, TrainerState, TrainingArguments
from transformers import __version__ as transformers_version
from transformers.integrations.integration_utils import TensorBoardCallback

try:  # transformers 5
    from transformers.integrations.integration_utils import default_logdir
except ImportError:  # transformers 4
    from transformers.training_args import default_logdir  # type: ignore[attr-defined,no-redef]

from runner.capture import Capture, Schedule

__all__ = ["AttentionProfilerCallback", "trainer_log_dir"]

_log = logging.getLogger(__name__)
#: How far up the stack ``on_init_end`` looks for the Trainer that calls it (its ``__init__`` is three
#: frames up in transformers 4.48 to 5.25: the callback handler's ``call_event`` and ``on_init_end``).
_TRAINER_FRAMES = 8


def trainer_log_dir(args: TrainingArguments, callbacks: list[Any]) -> str:
    """Where the Trainer's TensorBoard scalars go, found as its ``TensorBoardCallback`` finds it: that
    callback's own directory once its ``on_train_begin`` has run (it runs before a user's callbacks;
    transformers 5); else ``args.logging_dir`` (transformers 4, which always sets it); else
    ``$TENSORBOARD_LOGGING_DIR``, else ``output_dir/runs/<time>_<host>`` (transformers 5)."""
    for cb in callbacks:
        if isinstance(cb, TensorBoardCallback) and getattr(cb, "logging_dir", None):
            return str(cb.logging_dir)
    logging_dir = getattr(args, "logging_dir", None)  # transformers 4 only
    if isinstance(logging_dir, str) and logging_dir:
        return logging_dir
    env = os.getenv("TENSORBOARD_LOGGING_DIR")
    if env:
        return os.path.expanduser(env)
    return os.path.join(args.output_dir or ".", default_logdir())


class AttentionProfilerCallback(TrainerCallback):
    """Profiles ``trainer.train()``'s attention into the Trainer's TensorBoard directory.

    ``skip_first``, ``wait``, ``warmup``, ``active`` and ``repeat`` are ``torch.profiler.schedule``'s,
    counted in optimizer steps (``runner.capture.Schedule``: by default steps 4 to 8 are recorded, 3
    warming up). ``log_dir`` overrides the directory; ``gzip`` compresses the traces.

    At ``on_train_begin`` it scopes the model's attention blocks (``instrument()``, on the model the
    Trainer wraps for DDP, FSDP or Accelerate) and starts ``torch.profiler`` with shapes and memory
    recorded, on the CPU and the device the model is on; each ``on_step_begin`` (an optimizer step
    begins, its gradient-accumulation micro-batches inside it) steps it; ``on_train_end`` stops it, flushes the trace
    and removes the scopes. An exception out of ``train()`` does the same, with the run's metadata
    marked ``failed``: for that the callback wraps ``train`` on the Trainer it was given to. One trace
    per process per cycle; ``tb_attn_run.json`` from rank 0.
    """

    def __init__(self, *, skip_first: int = 2, wait: int = 0, warmup: int = 1, active: int = 5, repeat: int = 1,
                 log_dir: str | os.PathLike[str] | None = None, gzip: bool = False) -> None:
        self.schedule = Schedule(skip_first=skip_first, wait=wait, warmup=warmup, active=active, repeat=repeat)
        self.log_dir = os.fspath(log_dir) if log_dir is not None else None
        self.gzip = gzip
        self.capture: Capture | None = None
        self._wrapped: set[int] = set()

    # -- the Trainer's events -------------------------------------------------------------
    def on_init_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                    **kwargs: Any) -> None:
        trainer = _calling_trainer()
        if trainer is not None and id(trainer) not in self._wrapped:
            self._wrapped.add(id(trainer))
            setattr(trainer, "train", self._guarded(trainer.train))  # noqa: B010 (mypy: no assigning to a method)

    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                       model: nn.Module | None = None, **kwargs: Any) -> None:
        if self.capture is not None and self.capture.running:
            # Training began again without ending (auto_find_batch_size retries after running out of memory)
            self.capture.finish(RuntimeError("training restarted before it ended"))
        if model is None:
            _log.warning("tb-attn: the Trainer gave no model to profile; training goes on without tb-attn")
            return
        run_dir = self.log_dir or _shared(trainer_log_dir(args, _handler_callbacks()))
        config = {"gradient_accumulation_steps": args.gradient_accumulation_steps,
                  "parallel": _parallel(args)}
        self.capture = Capture(
            _unwrapped(model), run_dir, schedule=self.schedule, gzip=self.gzip, config=config,
            integration={"name": "transformers.Trainer", "version": transformers_version})
        self.capture.start()

    def on_step_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                      **kwargs: Any) -> None:
        if self.capture is not None:
            self.capture.begin_step()

    def on_train_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                     **kwargs: Any) -> None:
        if self.capture is not None:
            self.capture.finish()

    # -- exceptions -----------------------------------------------------------------------
    def _guarded(self, train: Any) -> Any:
        @functools.wraps(train)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            try:
                return train(*args, **kwargs)
            except BaseException as exc:
                if self.capture is not None:
                    self.capture.finish(exc)
                raise

        return guarded


def _calling_trainer() -> Trainer | None:
    """The ``Trainer`` whose ``__init__`` is calling ``on_init_end``, from the stack (it passes none)."""
    frame = sys._getframe(1)
    for _ in range(_TRAINER_FRAMES):
        if frame is None:
            break
        candidate = frame.f_locals.get("self")
        if isinstance(candidate, Trainer):
            return candidate
        frame = frame.f_back  # type: ignore[assignment]
    return None


def _handler_callbacks() -> list[Any]:
    """The callbacks of the handler calling this event (its ``call_event`` passes no handler)."""
    frame = sys._getframe(1)
    for _ in range(_TRAINER_FRAMES):
        if frame is None:
            break
        callbacks = getattr(frame.f_locals.get("self"), "callbacks", None)
        if isinstance(callbacks, list):
            return callbacks
        frame = frame.f_back  # type: ignore[assignment]
    return []


def _shared(path: str) -> str:
    """Rank 0's directory on every rank: the default one holds the time, which ranks read apart."""
    if not (torch_dist.is_available() and torch_dist.is_initialized() and torch_dist.get_world_size() > 1):
        return path
    box: list[Any] = [path]
    torch_dist.broadcast_object_list(box, src=0)
    return str(box[0])


def _unwrapped(model: nn.Module) -> nn.Module:
    """The model inside DDP's or DataParallel's ``module`` and ``torch.compile``'s ``_orig_mod``."""
    while True:
        inner = getattr(model, "module", None) if isinstance(
            model, (nn.parallel.DistributedDataParallel, nn.DataParallel)) else getattr(model, "_orig_mod", None)
        if not isinstance(inner, nn.Module):
            return model
        model = inner


def _parallel(args: TrainingArguments) -> str:
    if getattr(args, "fsdp", None):
        return "fsdp"
    if getattr(args, "deepspeed", None):
        return "deepspeed"
    return "ddp" if getattr(args, "world_size", 1) > 1 else "none"
