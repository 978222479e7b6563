"""PyTorch Lightning: ``AttentionProfiler``, a Lightning profiler.

    trainer = Trainer(..., profiler=AttentionProfiler())

A profiler rather than a callback because that is where Lightning users choose how a fit is
profiled (``profiler="pytorch"``), because a Trainer runs one profiler and PyTorch runs one
``torch.profiler`` session at a time (a callback could start a second one beside
``PyTorchProfiler`` and fail), and because the profiler is told the Trainer's ``log_dir`` by
Lightning itself. It writes into ``trainer.log_dir``, where the ``TensorBoardLogger``'s scalars go.
Lightning tells profilers of no exception, so the profiler adds one callback of its own to the
Trainer when it is set up, whose ``on_exception`` writes what was recorded and marks the run failed.
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from runner.capture import Capture, Schedule

__all__ = ["AttentionProfiler"]

_log = logging.getLogger(__name__)

try:  # the Trainer does not check the profiler's type, but type checkers and LightningCLI do
    from pytorch_lightning.profilers import Profiler as _Base
except ImportError:  # pragma: no cover - only the unified ``lightning`` package is installed
    from lightning.pytorch.profilers import Profiler as _Base  # type: ignore[no-redef]


class AttentionProfiler(_Base):
    """Profiles a ``Trainer.fit``'s attention into ``dirpath`` (default: ``trainer.log_dir``).

    ``skip_first``, ``wait``, ``warmup``, ``active`` and ``repeat`` are ``torch.profiler.schedule``'s,
    counted in optimizer steps (``runner.capture.Schedule``: by default steps 4 to 8 are recorded),
    so that gradient accumulation's micro-batches are inside one step. The fit's training batches
    are profiled from ``on_train_start``, after the sanity check's validation batches; validation
    during training runs inside the step it follows. ``gzip`` compresses the traces.
    """

    def __init__(self, dirpath: str | os.PathLike[str] | None = None, *, skip_first: int = 2, wait: int = 0,
                 warmup: int = 1, active: int = 5, repeat: int = 1, gzip: bool = False) -> None:
        super().__init__(dirpath=os.fspath(dirpath) if dirpath is not None else None)
        self.schedule = Schedule(skip_first=skip_first, wait=wait, warmup=warmup, active=active, repeat=repeat)
        self.gzip = gzip
        self.capture: Capture | None = None
        self._lightning_module: Any = None  # set by the Trainer before ``setup``
        self._global_step = 0

    # -- Lightning's profiler interface -------------------------------------------------------
    def setup(self, stage: str, local_rank: int | None = None, log_dir: str | None = None) -> None:
        super().setup(stage=stage, local_rank=local_rank, log_dir=log_dir)
        trainer = self._trainer()
        if trainer is not None and not any(isinstance(cb, _ExceptionHook) for cb in trainer.callbacks):
            trainer.callbacks.append(_exception_hook(trainer, self))

    def start(self, action_name: str) -> None:
        if self._is_hook(action_name, "on_train_start") and self.capture is None:
            self._begin()
        elif self.capture is not None and self._is_hook(action_name, "on_train_batch_start"):
            step = int(getattr(self._trainer(), "global_step", 0))
            if step != self._global_step:  # the first micro-batch of an optimizer step
                self._global_step = step
                self.capture.begin_step()

    def stop(self, action_name: str) -> None:
        if self.capture is not None and self._is_hook(action_name, "on_train_end"):
            self.end()

    @contextmanager
    def profile(self, action_name: str) -> Iterator[str]:
        try:
            self.start(action_name)
            yield action_name
        finally:
            self.stop(action_name)

    def summary(self) -> str:
        if self.capture is None or not self.capture.traces:
            return ""
        return f"tb-attn: {len(self.capture.traces)} trace(s) in {self.capture.run_dir}"

    def teardown(self, stage: str | None) -> None:
        self.end()
        super().teardown(stage=stage)

    # -- the capture ----------------------------------------------------------------------
    def end(self, error: BaseException | None = None) -> None:
        """Stop profiling (``error``: the exception that stopped the fit); once, later calls do nothing."""
        capture, self.capture = self.capture, None
        if capture is not None:
            capture.finish(error)

    def _begin(self) -> None:
        module = self._lightning_module
        trainer = self._trainer()
        if module is None or trainer is None:
            _log.warning("tb-attn: the Trainer set no LightningModule on the profiler; the fit goes on without it")
            return
        self._global_step = -1  # the next batch begins a step
        version = getattr(importlib.import_module(type(trainer).__module__.split(".")[0]), "__version__", None)
        config = {"gradient_accumulation_steps": int(getattr(trainer, "accumulate_grad_batches", 1) or 1),
                  "parallel": "ddp" if int(getattr(trainer, "world_size", 1)) > 1 else "none"}
        self.capture = Capture(_unproxied(module), str(self.dirpath or trainer.log_dir or "."),
                               schedule=self.schedule, gzip=self.gzip, config=config,
                               integration={"name": "lightning.Trainer", "version": version})
        self.capture.start()

    def _trainer(self) -> Any:
        module = self._lightning_module
        try:
            return module.trainer if module is not None else None
        except RuntimeError:  # "not attached to a Trainer"
            return None

    def _is_hook(self, action_name: str, hook: str) -> bool:
        """Whether the action is the LightningModule's ``hook`` (``[LightningModule]MyModel.on_train_start``)."""
        return action_name.startswith("[LightningModule]") and action_name.endswith("." + hook)


class _ExceptionHook:
    """Marker base of the callback ``_exception_hook`` builds."""


def _exception_hook(trainer: Any, profiler: AttentionProfiler) -> Any:
    """A callback of the Trainer's own Lightning package (``pytorch_lightning`` or ``lightning.pytorch``)
    whose ``on_exception`` ends the profiler's capture with the exception."""
    package = type(trainer).__module__.split(".")[0]
    callbacks = importlib.import_module("lightning.pytorch.callbacks" if package == "lightning"
                                        else f"{package}.callbacks")

    class Hook(callbacks.Callback, _ExceptionHook):  # type: ignore[name-defined]
        @property
        def state_key(self) -> str:
            return "tb_attn.AttentionProfiler"

        def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
            profiler.end(exception)

    return Hook()


def _unproxied(module: Any) -> Any:
    """The LightningModule itself: the Trainer gives profilers a ``weakref.proxy`` of it, which hooks
    and ``named_modules`` see through but ``type()`` does not."""
    for child in module.modules():  # the first module is the module itself, unproxied
        return child
    return module
