"""One ``torch.profiler`` session that writes a tb-attn run from a training loop we do not own.

The integrations (``tb_attn.integrations``: Hugging Face's ``Trainer`` and Lightning) drive a
``Capture`` from their loops' events: ``start()`` when training begins, ``begin_step()`` as each
optimizer step begins, ``finish()`` when training ends or stops on an exception (Accelerate's loop
steps its own profiler: it takes only ``RunRecord``, the run directory's writer). It writes what
``tb-attn-run`` writes into a run directory: one trace per process and profiler cycle, named
``{worker}.{time_ns}.pt.trace.json`` with the rank in the worker (``host_rank3``) under
``torch.distributed``, written atomically (``runner.traces``), every attention block in the scopes
of ``instrument()``, and ``tb_attn_run.json`` (rank 0) with the model, its attention implementation,
the dtype, the first batch's sequence length and size, the world size and the schedule.

What it changes in the process, and undoes in ``finish()``: ``instrument()``'s hooks on the model
(they compute nothing, so the model computes exactly what it does without them) and the profiler.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import socket
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as torch_dist
from torch import nn
from torch.profiler import ProfilerAction, ProfilerActivity, profile, schedule

from runner.attention_modules import attention_modules
from runner.instrument import Instrumentation, NoAttentionFoundWarning
from runner.metadata import environment, now_iso, write_metadata
from runner.scoping import profiler_enabled
from runner.traces import WriteError, default_worker_name, trace_handler

__all__ = ["KINETO_QUIET", "Capture", "ProfilerBusyError", "RunRecord", "Schedule", "activities_for", "describe_error",
           "model_device", "model_facts", "quiet_profiler"]

_log = logging.getLogger(__name__)

# Kineto's console log is noise in a run's output: "profiler_start"/"profiler_stop" at its
# highest level (USDT, 5) on every cycle, and "gpuGetDeviceCount failed" (ERROR) on a machine
# without a GPU. 6 is above every level. Traces are checked as they are written (runner.traces).
KINETO_QUIET = "6"

# The profiler's advice when a schedule ends a cycle: one trace per cycle is what we want, and
# under ``-W error`` its warning would be an exception in the middle of a training step.
_PROFILER_NOISE = (".*Profiler clears events at the end of each cycle.*", ".*Profiler won't be using warmup.*")


@contextlib.contextmanager
def quiet_profiler() -> Iterator[None]:
    """The profiler's calls without its advice on cycles (``_PROFILER_NOISE``), and Kineto's console
    log quiet where the user set no level (Kineto reads it when the profiler first starts)."""
    os.environ.setdefault("KINETO_LOG_LEVEL", KINETO_QUIET)
    with warnings.catch_warnings():
        for message in _PROFILER_NOISE:
            warnings.filterwarnings("ignore", message=message)
        yield


class ProfilerBusyError(RuntimeError):
    """Another profiler already records in this process: PyTorch runs one at a time."""


@dataclass(frozen=True)
class Schedule:
    """Which training steps are profiled: ``skip_first`` steps are never recorded (the first steps
    compile, autotune and fill the allocator's caches), then each cycle waits ``wait`` steps, warms up
    for ``warmup`` (recorded, then dropped: the profiler's own start-up) and records ``active``;
    ``repeat`` cycles (0: until training ends), one trace each. A step is one optimizer step, with the
    micro-batches of gradient accumulation inside it. The defaults record steps 4 to 8 (of 1..8): five
    steps, enough for each figure's spread across steps to mean something (docs/integrations.md)."""

    skip_first: int = 2
    wait: int = 0
    warmup: int = 1
    active: int = 5
    repeat: int = 1

    def __post_init__(self) -> None:
        for name in ("skip_first", "wait", "warmup", "repeat"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
        if not isinstance(self.active, int) or isinstance(self.active, bool) or self.active < 1:
            raise ValueError(f"active must be an integer >= 1, got {self.active!r}")

    @property
    def first_recorded(self) -> int:
        """The number of steps before the first one recorded."""
        return self.skip_first + self.wait + self.warmup

    @property
    def steps(self) -> int | None:
        """Steps after which every cycle is written (None: ``repeat=0`` cycles until training ends)."""
        return self.skip_first + (self.wait + self.warmup + self.active) * self.repeat if self.repeat else None

    def torch_schedule(self) -> Callable[[int], ProfilerAction]:
        return schedule(skip_first=self.skip_first, wait=self.wait, warmup=self.warmup, active=self.active,
                        repeat=self.repeat)

    def to_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


def activities_for(device: torch.device) -> list[ProfilerActivity]:
    """What the profiler records on ``device``: the CPU, and the GPU's kernels where it runs on one (a
    ROCm build's GPUs are ``cuda`` devices to PyTorch and record as CUDA activity)."""
    out = [ProfilerActivity.CPU]
    if device.type == "cuda":
        out.append(ProfilerActivity.CUDA)
    elif device.type == "xpu" and hasattr(ProfilerActivity, "XPU"):
        out.append(ProfilerActivity.XPU)
    return out


def _distributed() -> tuple[int, int] | None:
    """(rank, world size) where ``torch.distributed`` is initialized with more than one process."""
    if torch_dist.is_available() and torch_dist.is_initialized() and torch_dist.get_world_size() > 1:
        return torch_dist.get_rank(), torch_dist.get_world_size()
    return None


def model_device(model: nn.Module) -> torch.device:
    for p in model.parameters():
        return p.device
    return torch.device("cpu")


def model_facts(model: nn.Module) -> dict[str, Any]:
    """What the model says of itself, for the metadata: its class, and where it holds a Hugging Face
    model (itself, or inside a LightningModule), that model's class, sizes and attention
    implementation (``eager`` is ``naive`` here, as the runner names it)."""
    cls = type(model)
    facts: dict[str, Any] = {"model": cls.__name__, "model_class": f"{cls.__module__}.{cls.__qualname__}"}
    hf = next((m for m in model.modules() if _hf_config(m) is not None), None)
    if hf is not None:
        config = _hf_config(hf)
        facts["model"] = type(hf).__name__
        attn = getattr(config, "_attn_implementation", None)
        if isinstance(attn, str):
            facts["attn_implementation"] = attn
            facts["impl"] = _HF_IMPLS.get(attn, attn)
        sizes = {key: getattr(config, name, None) for key, name in _HF_SIZES}
        facts["sizes"] = {k: v for k, v in sizes.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    params = [p for p in model.parameters() if p.is_floating_point()]
    if params:
        facts["param_dtype"] = str(params[0].dtype).removeprefix("torch.")
    return facts


def _hf_config(module: nn.Module) -> Any:
    config = getattr(module, "config", None)
    return config if hasattr(config, "_attn_implementation") and hasattr(config, "num_hidden_layers") else None


#: Hugging Face's attention implementations in the runner's words, where it has one.
_HF_IMPLS = {"eager": "naive", "sdpa": "sdpa", "flex_attention": "flex"}
#: The metadata's config keys (the runner's) and the Hugging Face config attributes that give them.
_HF_SIZES = (("layers", "num_hidden_layers"), ("heads", "num_attention_heads"), ("kv_heads", "num_key_value_heads"),
             ("d_model", "hidden_size"), ("vocab", "vocab_size"), ("dropout", "attention_dropout"))


class _FirstBatch:
    """The first call of the first attention block: batch size, sequence length and the dtype its
    work runs in (autocast's, where autocast is on), from the hidden states it is given."""

    def __init__(self, model: nn.Module) -> None:
        self.found: dict[str, Any] = {}
        blocks = attention_modules(model)
        self._handle = blocks[0][1].register_forward_pre_hook(self._seen, with_kwargs=True) if blocks else None

    def _seen(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        hidden = kwargs.get("hidden_states", kwargs.get("query"))
        if not isinstance(hidden, torch.Tensor):
            hidden = next((a for a in args if isinstance(a, torch.Tensor)), None)
        if isinstance(hidden, torch.Tensor) and hidden.dim() >= 2:
            batch_first = getattr(module, "batch_first", True)  # nn.MultiheadAttention's is (S, B, E) unless set
            batch, seq = (hidden.shape[0], hidden.shape[1]) if batch_first or hidden.dim() < 3 else \
                (hidden.shape[1], hidden.shape[0])
            device_type = hidden.device.type
            dtype = torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else hidden.dtype
            self.found = {"batch": int(batch), "seq": int(seq), "dtype": str(dtype).removeprefix("torch.")}
        self.remove()

    def remove(self) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None


class RunRecord:
    """A run directory that this process writes traces into: its worker (with the rank in it under
    ``torch.distributed``), ``handler`` (the profiler's ``on_trace_ready``: one trace per cycle,
    written atomically), the traces written, and the metadata, which rank 0 writes (``write``).
    ``gather``: the ranks' workers and hosts are gathered into the metadata (a collective: every
    rank makes its record at the same point)."""

    def __init__(self, run_dir: str | os.PathLike[str], *, integration: dict[str, Any], schedule: Schedule,
                 model: nn.Module | None = None, config: dict[str, Any] | None = None, gzip: bool = False,
                 with_stack: bool = False, gather: bool = True) -> None:
        self.run_dir = Path(run_dir)
        dist = _distributed()
        rank, world_size = dist if dist is not None else (0, 1)
        self.writer = rank == 0
        self.worker = default_worker_name(rank if dist is not None else None)
        self.traces: list[Path] = []
        mine = {"rank": rank, "worker": self.worker, "host": socket.gethostname()}
        ranks: list[Any] = [mine]
        if dist is not None and gather:
            ranks = [None] * world_size
            torch_dist.all_gather_object(ranks, mine)  # each rank knows only its own host
        facts = model_facts(model) if model is not None else {}
        sizes = facts.pop("sizes", {})
        impl = facts.pop("impl", "unknown")
        device = model_device(model) if model is not None else torch.device("cuda" if torch.cuda.is_available()
                                                                             else "cpu")
        self.meta: dict[str, Any] = {
            "run": str(self.run_dir),
            "model": facts.pop("model", None),
            "impl": impl,
            "dtype": facts.get("param_dtype"),
            **facts,
            "config": {**sizes, "mode": "training", "device": str(device), **(config or {}), "impl": impl},
            "integration": integration,
            "profile": {**schedule.to_dict(), "record_shapes": True, "profile_memory": True, "with_stack": with_stack,
                        "gzip": gzip},
            "world_size": world_size,
            **({"ranks": ranks} if dist is None or gather else {}),
            "started_at": now_iso(),
            "status": "running",
            **environment(str(device)),
        }
        self.handler = trace_handler(self.run_dir, self.worker, use_gzip=gzip, on_written=self.traces.append)

    def write(self, **changes: Any) -> None:
        """The metadata with ``changes``, written by rank 0 (``traces``: this process's)."""
        self.meta.update(changes, traces=sorted(p.name for p in self.traces))
        if self.writer:
            write_metadata(self.run_dir, self.meta)


class Capture:
    """Profiles ``model``'s training into ``run_dir``: ``start()``, ``begin_step()`` as each optimizer
    step begins, ``finish(error)`` once (later calls do nothing). ``integration`` names the loop for the
    metadata (``{"name": "transformers.Trainer", "version": ...}``); ``config`` adds what the loop
    knows (``gradient_accumulation_steps``, ``parallel``). Under ``torch.distributed``, every rank
    calls ``start()`` at the same point (it gathers the ranks' workers) and writes its own trace; rank
    0 writes the metadata."""

    def __init__(self, model: nn.Module, run_dir: str | os.PathLike[str], *, schedule: Schedule | None = None,
                 integration: dict[str, Any] | None = None, config: dict[str, Any] | None = None,
                 gzip: bool = False, with_stack: bool = False) -> None:
        self.model = model
        self.run_dir = Path(run_dir)
        self.schedule = schedule or Schedule()
        self.integration = integration or {}
        self.config = config or {}
        self.gzip = gzip
        self.with_stack = with_stack
        self.record: RunRecord | None = None
        self.steps_done = 0
        self.finished = False
        self._prof: profile | None = None
        self._inst: Instrumentation | None = None
        self._first: _FirstBatch | None = None
        self._warned_no_attention = False

    @property
    def running(self) -> bool:
        return self._prof is not None

    @property
    def traces(self) -> list[Path]:
        return self.record.traces if self.record is not None else []

    def start(self) -> None:
        """Scope the model and start the profiler. Raises ``ProfilerBusyError`` (nothing changed)
        where another profiler records in this process."""
        if self._prof is not None or self.finished:
            raise RuntimeError("a Capture starts once")
        if profiler_enabled():
            raise ProfilerBusyError(
                "tb-attn: another torch.profiler session is already recording in this process, and PyTorch runs "
                "one at a time; stop it, or remove tb-attn's profiler from this run")
        self.record = record = RunRecord(self.run_dir, schedule=self.schedule, model=self.model,
                                         integration=self.integration, config=self.config, gzip=self.gzip,
                                         with_stack=self.with_stack)
        record.write()
        self._first = _FirstBatch(self.model)
        self._inst = Instrumentation(self.model)
        self._inst.__enter__()
        # The profiler's step 0 runs from here to the first step's begin_step: one more to skip.
        skip = dataclasses.replace(self.schedule, skip_first=self.schedule.skip_first + 1)
        try:
            with quiet_profiler():
                prof = profile(activities=activities_for(model_device(self.model)), schedule=skip.torch_schedule(),
                               on_trace_ready=record.handler, record_shapes=True, profile_memory=True,
                               with_stack=self.with_stack)
                prof.start()
        except BaseException:
            self._undo_scopes()
            raise
        self._prof = prof

    def begin_step(self) -> None:
        """An optimizer step begins (its first micro-batch): the profiler moves on, and writes a trace
        where a cycle ended with the step before. Steps begin rather than end the profiler's steps so
        that the last one recorded is whole when training ends: the profiler's step from the last
        ``begin_step`` to ``finish`` holds the last training step, not the nothing after it."""
        if self._prof is None:
            return
        with quiet_profiler():
            self._prof.step()
        self.steps_done += 1
        if self.steps_done == self.schedule.first_recorded + 2:  # the first recorded step is done
            self._check_attention()

    def finish(self, error: BaseException | None = None) -> None:
        """Stop the profiler (a cycle in the middle of its active steps is written as it is), remove the
        scopes and write the outcome into the metadata: ``ok``, or ``failed`` (``interrupted`` for
        Ctrl-C) with ``error``'s first line. Once; later calls do nothing. Raises only a trace that
        could not be written (``runner.traces.WriteError``), after all of this is done."""
        if self.finished or self._prof is None or self.record is None:
            return
        self.finished = True
        prof, self._prof = self._prof, None
        failure: WriteError | None = None
        try:
            with quiet_profiler():
                prof.stop()
        except WriteError as exc:
            failure = exc
        finally:
            self._check_attention()
            self._undo_scopes()
        record = self.record
        status = "ok" if error is None and failure is None else \
            "interrupted" if isinstance(error, KeyboardInterrupt) else "failed"
        config = {**record.meta["config"], **(self._first.found if self._first is not None else {})}
        blocks = [{"layer": b.layer, "module": b.name} for b in self._inst.blocks] if self._inst is not None else []
        if not record.traces and failure is None:
            _log.warning("tb-attn: no trace was written: training ran %d steps and the profiler records from step %d "
                         "(skip_first=%d + wait=%d + warmup=%d); lower them or train longer", self.steps_done,
                         self.schedule.first_recorded + 1, self.schedule.skip_first, self.schedule.wait,
                         self.schedule.warmup)
        try:
            record.write(status=status, error=describe_error(error or failure), finished_at=now_iso(),
                         steps=self.steps_done, config=config, dtype=config.get("dtype", record.meta["dtype"]),
                         blocks=blocks)
        except WriteError as exc:
            _log.error("tb-attn: %s", exc)
        if failure is not None:
            raise failure

    def _check_attention(self) -> None:
        if self._inst is None or self._inst.blocks or self._warned_no_attention:
            return
        self._warned_no_attention = True
        _log.warning("tb-attn: no attention found in %s (no nn.MultiheadAttention, no module named *Attention, no "
                     "call to F.scaled_dot_product_attention): its trace has no attention scopes; training goes on",
                     type(self.model).__name__)

    def _undo_scopes(self) -> None:
        if self._first is not None:
            self._first.remove()
        if self._inst is not None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", NoAttentionFoundWarning)  # said once, in _check_attention
                self._inst.__exit__(None, None, None)


def describe_error(exc: BaseException | None) -> str | None:
    """An error in one line for the metadata and the terminal: its type and first line, and "out of
    memory" said plainly for a device's or the CPU allocator's."""
    if exc is None:
        return None
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    if isinstance(exc, torch.OutOfMemoryError) or "can't allocate memory" in first:
        return f"out of memory: {first}"
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__
