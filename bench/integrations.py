"""What ``AttentionProfilerCallback`` costs a Hugging Face ``Trainer`` step, against the plain
ten-line recipe and against no profiling.

Three arms train the same tiny Llama (devtools/training.py: the runner's ``hf:llama --size tiny
--kv-heads 2``, batch 2, 48 tokens, on the CPU) for the same optimizer steps, with the same
schedule: the callback's default skip_first 2 and warmup 1, and ``--active`` recorded steps (20 by
default, four times the callback's 5, so that a median over them stands up to a noisy machine):

- ``none``: no profiler;
- ``recipe``: the callback users copy, ``torch.profiler.profile(schedule, on_trace_ready=
  tensorboard_trace_handler(dir), record_shapes=True, profile_memory=True)`` started in
  ``on_train_begin``, stepped in ``on_step_end``, stopped in ``on_train_end``; no scopes;
- ``tb-attn``: ``AttentionProfilerCallback()`` (scopes, its own trace writer, the metadata).

A step's time is the period from one ``on_step_begin`` to the next, so every callback's own work is
inside it, wherever the arm does it. The last step's period and the callbacks' ``on_train_end`` are
timed together ("end"): the recipe writes its trace at the end of the last step, where its cycle
ends, and tb-attn when training ends (stopping the profiler, writing the trace and the metadata).
Each round trains every arm once, in a random order, on a fresh model of the same weights; a figure
is the median over rounds of the arm's median over its recorded steps (all but the last) or its
unrecorded ones (the first three, the warm-up's included), or its end, and each ratio the median
over rounds of the two arms' ratio in that round, with its min-max over rounds.

Run from the repository root: ``python bench/integrations.py [--rounds 7] [--active 20] [--json OUT]``.
"""

from __future__ import annotations

import os

os.environ.setdefault("KINETO_LOG_LEVEL", "6")  # Kineto logs two lines per profiler start and stop

import argparse
import json
import logging
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch
from transformers import TrainerCallback

from devtools.training import hf_train
from tb_attn.integrations import AttentionProfilerCallback

ARMS = ("none", "recipe", "tb-attn")
SKIP_FIRST, WARMUP = 2, 1  # the callback's defaults
UNRECORDED = slice(0, SKIP_FIRST + WARMUP)  # the periods of steps 1 to 3


class Recipe(TrainerCallback):
    """The ten-line callback users copy (same schedule, shapes and memory as tb-attn's)."""

    def __init__(self, out: str, active: int) -> None:
        self.out, self.active = out, active
        self.prof: torch.profiler.profile | None = None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.prof = torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU],
            schedule=torch.profiler.schedule(skip_first=SKIP_FIRST, wait=0, warmup=WARMUP, active=self.active,
                                             repeat=1),
            on_trace_ready=torch.profiler.tensorboard_trace_handler(self.out), record_shapes=True,
            profile_memory=True)
        self.prof.start()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        assert self.prof is not None
        self.prof.step()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        assert self.prof is not None
        self.prof.stop()


class Timer(TrainerCallback):
    """Step periods (``on_step_begin`` to the next, the last to ``on_train_end``) and the time the
    callbacks after it take in ``on_train_end`` (stopping the profiler, writing the trace)."""

    def __init__(self) -> None:
        self.marks: list[float] = []
        self.finish_s = 0.0

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.marks.append(time.perf_counter())

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.marks.append(time.perf_counter())

    @property
    def periods_ms(self) -> list[float]:
        return [(b - a) * 1e3 for a, b in zip(self.marks, self.marks[1:], strict=False)]


class FinishTimer(TrainerCallback):
    """Last in the list: the end of every callback's ``on_train_end``."""

    def __init__(self, timer: Timer) -> None:
        self.timer = timer

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.timer.finish_s = time.perf_counter() - self.timer.marks[-1]


def train(arm: str, out: Path, active: int) -> Timer:
    timer = Timer()
    profiler: list[Any] = {"none": [], "recipe": [Recipe(str(out / "recipe"), active)],
                           "tb-attn": [AttentionProfilerCallback(log_dir=out / "tb-attn", active=active)]}[arm]
    hf_train(out / "trainer", steps=SKIP_FIRST + WARMUP + active, callbacks=[timer, *profiler, FinishTimer(timer)],
             report_to=())
    return timer


def _ratio(rows: list[dict[str, Any]], a: str, b: str, key: str) -> dict[str, float]:
    values = [r[a][key] / r[b][key] for r in rows]
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--active", type=int, default=20, help="recorded steps per run")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    logging.getLogger("transformers").setLevel(logging.ERROR)
    random.seed(0)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="tb-attn-bench-") as tmp:
        train("tb-attn", Path(tmp) / "warm-up", 2)  # imports, first compiles, the allocator's first blocks
        recorded = slice(SKIP_FIRST + WARMUP, SKIP_FIRST + WARMUP + args.active - 1)
        for r in range(args.rounds):
            order = random.sample(ARMS, len(ARMS))
            row: dict[str, Any] = {}
            for arm in order:
                timer = train(arm, Path(tmp) / f"r{r}-{arm}", args.active)
                periods = timer.periods_ms
                row[arm] = {"recorded_ms": statistics.median(periods[recorded]),
                            "unrecorded_ms": statistics.median(periods[UNRECORDED]),
                            "end_ms": periods[-1] + timer.finish_s * 1e3}
            rows.append(row)
            print(f"round {r + 1}/{args.rounds} ({' '.join(order)}): " + ", ".join(
                f"{a} {row[a]['recorded_ms']:.1f}/{row[a]['unrecorded_ms']:.1f} ms" for a in ARMS), file=sys.stderr)
    result: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__},
        "rounds": args.rounds, "schedule": {"skip_first": SKIP_FIRST, "warmup": WARMUP, "active": args.active},
        "medians_ms": {arm: {key: statistics.median(r[arm][key] for r in rows)
                             for key in ("recorded_ms", "unrecorded_ms", "end_ms")} for arm in ARMS},
        "ratios": {f"{a}/{b} {key}": _ratio(rows, a, b, key)
                   for a, b in (("tb-attn", "recipe"), ("tb-attn", "none"), ("recipe", "none"))
                   for key in ("recorded_ms", "unrecorded_ms", "end_ms")},
    }
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
