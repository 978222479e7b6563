"""Hugging Face Accelerate: ``profile_kwargs(run_dir)``, a ``ProfileKwargs`` for ``accelerator.profile()``.

    accelerator = Accelerator(log_with="tensorboard", project_dir="runs",
                              kwargs_handlers=[profile_kwargs("runs/my-run", model=model)])
    accelerator.init_trackers("my-run")                      # its scalars go to runs/my-run
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    with instrument(accelerator.unwrap_model(model)), accelerator.profile() as prof:
        for batch in loader:
            ...                                              # forward, backward, optimizer step
            prof.step()

Each process writes its traces into ``run_dir`` as the runner names them, the rank in the worker
(``host_rank3.<time_ns>.pt.trace.json``), one per cycle of the schedule, written atomically as each
cycle ends; rank 0 writes ``tb_attn_run.json``. Accelerate's own export (``output_trace_dir``) is
left unset: with a schedule it would write the last cycle again as ``profile_<rank>.json``.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from accelerate import __version__ as accelerate_version
from accelerate.utils import ProfileKwargs
from torch import nn

from runner.capture import KINETO_QUIET, RunRecord, Schedule, quiet_profiler

__all__ = ["profile_kwargs"]


class _Traces:
    """``on_trace_ready`` for Accelerate's profiler: the run's record is made at the first trace, in
    the process that writes it, when ``torch.distributed`` is set up (after ``Accelerator()``)."""

    def __init__(self, run_dir: str, schedule: Schedule, model: nn.Module | None, gzip: bool) -> None:
        self.run_dir, self.schedule, self.model, self.gzip = run_dir, schedule, model, gzip
        self.record: RunRecord | None = None

    def __call__(self, prof: torch.profiler.profile) -> None:
        if self.record is None:
            # No gather: a collective inside the profiler's callback would hang a rank whose schedule
            # ran differently; the workers are in the trace names.
            self.record = RunRecord(self.run_dir, integration={"name": "accelerate", "version": accelerate_version},
                                    schedule=self.schedule, model=self.model, gzip=self.gzip, gather=False)
        with quiet_profiler():
            self.record.handler(prof)
        self.record.write(status="ok")


def profile_kwargs(run_dir: str | os.PathLike[str], *, model: nn.Module | None = None, skip_first: int = 2,
                   wait: int = 0, warmup: int = 1, active: int = 5, repeat: int = 1, gzip: bool = False,
                   **options: Any) -> ProfileKwargs:
    """A ``ProfileKwargs`` that records shapes and memory on the CPU and, where there is one, the GPU,
    on tb-attn's schedule (``runner.capture.Schedule``; steps are what the loop's ``prof.step()``
    counts), and writes each cycle's trace into ``run_dir`` (where the run's TensorBoard scalars go:
    ``project_dir/<run name>`` for Accelerate's tracker). ``model`` only describes the run in its
    metadata (class, attention implementation, sizes). ``options`` go to ``ProfileKwargs`` as they are
    (``with_stack=True``...), but not ``output_trace_dir``, ``schedule_option`` or ``on_trace_ready``,
    which this sets."""
    taken = sorted(set(options) & {"output_trace_dir", "schedule_option", "on_trace_ready"})
    if taken:
        raise ValueError(f"profile_kwargs sets {', '.join(taken)} itself")
    schedule = Schedule(skip_first=skip_first, wait=wait, warmup=warmup, active=active, repeat=repeat)
    os.environ.setdefault("KINETO_LOG_LEVEL", KINETO_QUIET)  # Accelerate starts the profiler, not us
    options.setdefault("activities", ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"])
    options.setdefault("record_shapes", True)
    options.setdefault("profile_memory", True)
    return ProfileKwargs(schedule_option=schedule.to_dict(), on_trace_ready=_Traces(os.fspath(run_dir), schedule,
                                                                                    model, gzip), **options)
