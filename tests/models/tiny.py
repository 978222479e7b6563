"""Tiny Hugging Face models, built from their config classes with random weights (nothing is
downloaded), profiled on the CPU for one step as a user would: with ``instrument()`` around the
model, or plain (``torch.profiler`` alone). Shared by the tests of this folder that profile models
of their own; the corpus's traces are written by ``devtools/corpus.py`` instead."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

from runner.instrument import instrument
from tb_attn_plugin.analysis.attribution.analyze import Analysis, analyze
from tb_attn_plugin.analysis.summary import summarize_trace
from tb_attn_plugin.engine.loader import load_events
from tb_attn_plugin.types.schema import WorkerSummary

__all__ = ["TIMED", "Profiled", "profile_step"]

#: Findings whose firing compares measured times with a threshold: ``instrument()``'s scopes add CPU
#: time of their own, so these may differ between a model's scoped and plain traces.
TIMED = frozenset({"dispatch-bound", "far-from-roof", "unplaced-time"})

Profiled = tuple[Analysis, WorkerSummary]


def profile_step(logdir: Path, net: nn.Module, step: Callable[[], None], *, scoped: bool, train: bool,
                 with_stack: bool = False) -> Profiled:
    """``step`` profiled once after a warm-up step, with shapes and memory, into ``logdir``; its
    analysis and summary (findings included)."""
    net.train(train)
    grad = contextlib.nullcontext() if train else torch.inference_mode()
    with warnings.catch_warnings(), (instrument(net) if scoped else contextlib.nullcontext()), grad:
        warnings.simplefilter("ignore")
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True, profile_memory=True,
                     with_stack=with_stack, acc_events=True, schedule=schedule(wait=0, warmup=1, active=1),
                     on_trace_ready=tensorboard_trace_handler(str(logdir))) as prof:
            for _ in range(2):
                step()
                prof.step()
    (path,) = logdir.glob("*.json*")
    analysis = analyze(load_events(str(path)))
    return analysis, summarize_trace(analysis, file=path.name, worker="w", span=None)
