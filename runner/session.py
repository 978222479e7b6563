"""Profile one configuration into one run directory.

A run is ``LOGDIR/<name>/``: one trace file per worker and profiler cycle, plus
``tb_attn_run.json``. A configuration the device cannot run is recorded as ``unsupported``
with PyTorch's reason; any other failure as ``failed`` with its error. Neither raises, so a
sweep goes on. Ctrl-C marks the run ``interrupted`` and propagates.

A file that cannot be written (a full disk, a file-size limit) fails the run with one line on
stderr, ``error: cannot write <file>: <reason>``, and leaves no partial or temporary file. If
even the final metadata cannot be written, the metadata that still says ``running`` is removed
rather than left to claim a run in progress.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import gc
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import profile, schedule

from runner.attn_stats import stat_names, write_events
from runner.capture import activities_for, describe_error, quiet_profiler
from runner.config import ModelConfig, ProfileConfig
from runner.distributed import DistContext, barrier, rank_metadata
from runner.generate import generation_metadata
from runner.instrument import instrument
from runner.metadata import METADATA_FILE, environment, now_iso, read_metadata, write_metadata
from runner.model import reset_compiled
from runner.models import Unsupported, Workload, build_workload, is_out_of_memory
from runner.probes import machine_peaks
from runner.traces import TRACE_FILE_RE, WriteError, default_worker_name, trace_handler
from tb_attn_plugin.vocab.impls import Impl

__all__ = ["SDPA_BACKENDS", "RunResult", "RunSpec", "run_one"]

SDPA_BACKENDS: dict[str, SDPBackend] = {
    Impl.SDPA_MATH: SDPBackend.MATH,
    Impl.SDPA_FLASH: SDPBackend.FLASH_ATTENTION,
    Impl.SDPA_EFFICIENT: SDPBackend.EFFICIENT_ATTENTION,
    Impl.SDPA_CUDNN: SDPBackend.CUDNN_ATTENTION,
}

_log = logging.getLogger(__name__)

# PyTorch's messages when a pinned SDPA backend cannot run these inputs on this device.
_UNSUPPORTED_MARKERS = ("No viable backend", "No available kernel")



@dataclass(frozen=True)
class RunSpec:
    """One point of a sweep: which model, configured how, written where."""

    model: str
    cfg: ModelConfig
    name: str  # the run's path relative to the logdir, as TensorBoard names runs
    hf_overrides: dict[str, Any] = field(default_factory=dict)
    repeats: int = 1  # profiled this many times, interleaved with the sweep's other runs (``run_sweep``)


@dataclass
class RunResult:
    name: str
    status: str  # ok | unsupported | failed | interrupted
    error: str | None = None
    traces: list[Path] = field(default_factory=list)
    seconds: float = 0.0
    write_failed: bool = False  # the logdir could not be written (a full disk, a size limit...)


def _is_unsupported(exc: BaseException) -> bool:
    # NotImplementedError: PyTorch has no such path on this device (flex_attention's backward
    # on CPU, for one).
    return isinstance(exc, NotImplementedError) or (
        isinstance(exc, RuntimeError) and any(m in str(exc) for m in _UNSUPPORTED_MARKERS))


def _describe(exc: BaseException) -> str:
    return describe_error(exc) or type(exc).__name__


def run_one(
    spec: RunSpec,
    logdir: Path,
    prof: ProfileConfig,
    *,
    dist: DistContext | None = None,
    seed: int = 0,
    append: bool = False,
) -> RunResult:
    """Profile ``spec`` into ``logdir / spec.name``; with ``append``, as one more repeat of the run
    there (its traces beside the earlier ones, its window in the metadata's ``repeats``). Never
    raises except on Ctrl-C."""
    run_dir = logdir / spec.name
    writer = dist is None or dist.rank == 0
    cfg = spec.cfg
    repeat = {"started_at": now_iso(), "started_ns": time.time_ns(), "status": "running"}
    earlier = _earlier_repeats(run_dir) if append else []
    meta: dict[str, Any] = {
        "run": spec.name,
        "model": spec.model,
        "impl": cfg.impl,
        "dtype": cfg.dtype,
        "config": cfg.to_dict(),
        "hf_config": spec.hf_overrides,
        "profile": prof.to_dict(),
        **rank_metadata(dist, cfg),  # parallel, world_size, ranks
        "started_at": earlier[0]["started_at"] if earlier else repeat["started_at"],
        "status": "running",
        "repeats": [*earlier, repeat],
        **environment(cfg.device),
    }
    result = RunResult(name=spec.name, status="running")
    start = time.perf_counter()
    write_failed = False
    try:
        if writer:
            write_metadata(run_dir, meta)
        _profile(spec, run_dir, prof, dist, seed, meta, result)
        result.status = "ok"
    except KeyboardInterrupt:
        result.status, result.error = "interrupted", "interrupted by the user (Ctrl-C)"
        raise
    except Unsupported as exc:
        result.status, result.error = "unsupported", str(exc)
    except WriteError as exc:
        result.status, result.error, write_failed = "failed", str(exc), True
    except Exception as exc:
        if _is_unsupported(exc):
            result.status, result.error = "unsupported", f"{cfg.impl} on {cfg.device}: {_describe(exc)}"
        else:
            result.status, result.error = "failed", _describe(exc)
    finally:
        result.seconds = time.perf_counter() - start
        if dist is not None and result.status != "interrupted":
            barrier(dist)  # every rank's traces are written before rank 0 lists them
        repeat.update(status=result.status, error=result.error, finished_ns=time.time_ns())
        worst = next((r for r in meta["repeats"] if r.get("status") not in ("ok", "running")), repeat)
        meta.update(status=worst["status"], error=worst.get("error"), finished_at=now_iso(),
                    traces=_trace_names(run_dir))
        if writer:
            write_failed = not _finish_metadata(run_dir, meta, result) or write_failed
        if write_failed:
            result.write_failed = True
            _log.error("error: %s", result.error)
    return result


def _earlier_repeats(run_dir: Path) -> list[dict[str, Any]]:
    """The repeats the run's metadata lists (a run written before repeats were recorded is one
    repeat, from its start to its end); none where there is no readable metadata."""
    meta = read_metadata(run_dir)
    if meta is None:
        return []
    listed = meta.get("repeats")
    if isinstance(listed, list) and all(isinstance(r, dict) for r in listed):
        return listed
    return [{"started_at": meta.get("started_at"), "status": meta.get("status"), "error": meta.get("error")}]


def _finish_metadata(run_dir: Path, meta: dict[str, Any], result: RunResult) -> bool:
    """Rewrite the metadata with the outcome. False if it could not be written: the run then
    failed, and the earlier metadata (which says "running") is removed."""
    try:
        write_metadata(run_dir, meta)
        return True
    except WriteError as exc:
        with contextlib.suppress(OSError):
            (run_dir / METADATA_FILE).unlink(missing_ok=True)
        if result.status == "failed" and result.error:
            result.error += f"; {exc}, so it was removed"
        else:
            note = f" (the run was {result.status}: {result.error})" if result.error else ""
            result.status, result.error = "failed", f"{exc}{note}"
        return False


def _measure_accuracy(work: Workload, meta: dict[str, Any]) -> None:
    """The metadata's ``accuracy``: one forward on a fixed batch, outside the profiled steps
    (runner/accuracy.py). Then the fp32 reference is dropped, so that its weights are not resident
    while the steps are profiled. Where it does not fit in memory the run goes on without it
    ("not measured"), with the reason in ``accuracy_error``."""
    assert work.accuracy is not None
    try:
        accuracy = work.accuracy()
    except RuntimeError as exc:  # torch.OutOfMemoryError is one
        if not is_out_of_memory(exc):
            raise
        meta["accuracy_error"] = _describe(exc)
        accuracy = None
    finally:
        work.accuracy = None
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    if accuracy is not None:
        meta["accuracy"] = accuracy


def _measure_attn_stats(work: Workload, run_dir: Path, meta: dict[str, Any], *, writer: bool) -> None:
    """The heads' statistics (runner/attn_stats.py) on the exact copy, before the profiler starts,
    written as a TensorBoard event file into the run (rank 0), and what was measured in the
    metadata's ``attn_stats``."""
    assert work.attn_stats is not None
    try:
        layers = work.attn_stats()
    finally:
        work.attn_stats = None
    cfg = work.cfg
    info: dict[str, Any] = {"batches": cfg.attn_stats, "batch": cfg.batch, "seq": cfg.seq, "layers": len(layers),
                            "stats": stat_names(cfg.seq), "weights": "checkpoint" if cfg.checkpoint else "random",
                            "event_file": None}
    if writer and layers:
        info["event_file"] = Path(write_events(str(run_dir), layers)).name
    meta["attn_stats"] = info


def _trace_names(run_dir: Path) -> list[str]:
    if not run_dir.is_dir():
        return []
    return sorted(p.name for p in run_dir.iterdir() if TRACE_FILE_RE.match(p.name))


def _profile(
    spec: RunSpec,
    run_dir: Path,
    prof_cfg: ProfileConfig,
    dist: DistContext | None,
    seed: int,
    meta: dict[str, Any],
    result: RunResult,
) -> None:
    torch.manual_seed(seed)
    if spec.cfg.impl.startswith("flex") or spec.cfg.compile:
        # Each run compiles afresh: dynamo keeps at most a few compiled versions per function
        # (its recompile limit, 8) and runs the rest eagerly, so a sweep's later runs, with masks
        # of their own, would silently measure flex_attention's eager path.
        reset_compiled()
    work = build_workload(spec.model, spec.cfg, hf_overrides=spec.hf_overrides, dist=dist)
    meta["config"] = work.cfg.to_dict()
    if work.mask is not None:
        meta["mask"] = work.mask
    if work.attn_stats is not None:
        _measure_attn_stats(work, run_dir, meta, writer=dist is None or dist.rank == 0)
    if work.accuracy is not None:
        _measure_accuracy(work, meta)
    if work.generation is not None:
        # One generation per cycle: a throw-away prefill as the profiler's warm-up step, then the
        # prefill and each decode step, one profiler step each.
        prof_cfg = dataclasses.replace(prof_cfg, wait=0, warmup=1, active=work.cfg.new_tokens + 1)
        meta["profile"] = prof_cfg.to_dict()
        meta["generation"] = generation_metadata(work.cfg)
    meta["peaks"] = copy.deepcopy(machine_peaks(work.cfg.device))
    cuda = torch.device(work.cfg.device).type == "cuda"
    worker = default_worker_name(dist.rank if dist else None)
    with contextlib.ExitStack() as stack:
        backend = SDPA_BACKENDS.get(spec.cfg.impl)
        if backend is not None:
            stack.enter_context(sdpa_kernel([backend]))
        inst = stack.enter_context(instrument(work.model)) if work.needs_instrument else None
        # One step outside the profiler (a whole generation, for one): fails fast on an
        # unsupported backend (before any trace is written) and keeps one-time allocations out of
        # the profiled steps.
        if work.generation is not None:
            work.generation.run()
        else:
            work.step()
        if inst is not None:
            meta["blocks"] = [{"layer": b.layer, "module": b.name} for b in inst.blocks]
        handler = trace_handler(
            run_dir,
            worker,
            use_gzip=prof_cfg.gzip,
            gzip_level=prof_cfg.gzip_level,
            on_written=result.traces.append,
        )
        stack.enter_context(quiet_profiler())
        with profile(
            activities=activities_for(torch.device(work.cfg.device)),
            schedule=schedule(
                wait=prof_cfg.wait, warmup=prof_cfg.warmup, active=prof_cfg.active, repeat=prof_cfg.repeat
            ),
            on_trace_ready=handler,
            record_shapes=prof_cfg.record_shapes,
            profile_memory=prof_cfg.profile_memory,
            with_stack=prof_cfg.with_stack,
        ) as prof:
            for _ in range(prof_cfg.steps):
                work.step()
                if cuda:
                    torch.cuda.synchronize()
                prof.step()
        if inst is not None:
            meta["blocks"] = [{"layer": b.layer, "module": b.name} for b in inst.blocks]
            if not inst.blocks:
                raise RuntimeError(f"no attention found in {spec.model}")
