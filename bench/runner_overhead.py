"""Measure what the runner costs: scopes and instrumentation per training step, and gzip trace writing.

Part A times training steps, interleaved in random order within each round, for:

- the built-in transformer without scopes and with scopes, each with no profiler and under
  ``torch.profiler`` (``record_shapes`` and ``profile_memory`` on, as the runner profiles);
- Hugging Face GPT-2 (``build_workload("hf:gpt2")``) plain and inside ``runner.instrument()``,
  with no profiler and under the profiler.

Every arm runs one block per round: one untimed step, then ``--steps`` timed steps. A profiled
block starts and stops its own profiler, so events never pile up and no trace is written.
Comparisons are paired by round (the ratio of the two blocks' median step times), summarised by
the median over rounds with a bootstrap 95% interval.

Part B profiles ``--trace-steps`` steps once, exports the trace once (a profiler can export only
once: a second ``export_chrome_trace`` raises "Trace is already saved"), and then replays those
exact bytes through the profiler's export call, so that ``torch.profiler.tensorboard_trace_handler``
and ``runner.traces.trace_handler``, with and without gzip, write the same content. Each output is
checked against the exported bytes.

Run from the repository root: ``python bench/runner_overhead.py [--quick] [--json OUT]``.
"""

from __future__ import annotations

import os

# Kineto logs two lines per profiler start and stop; a block-per-round benchmark starts hundreds.
os.environ.setdefault("KINETO_LOG_LEVEL", "6")

import argparse
import contextlib
import gc
import gzip
import json
import platform
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import ProfilerActivity, profile, tensorboard_trace_handler

from runner.config import ModelConfig, ProfileConfig
from runner.instrument import Instrumentation, instrument
from runner.model import Transformer
from runner.models import build_workload
from runner.traces import TMP_SUFFIX, TRACE_FILE_RE, trace_handler

Step = Callable[[], None]

MODEL = ModelConfig(layers=4, heads=8, d_model=256, seq=128, batch=4, impl="naive")
HF_IMPL = "sdpa"  # Hugging Face's default attention: the path that crosses instrument()'s SDPA wrapper
PROFILE = ProfileConfig()  # the runner's defaults: record_shapes and profile_memory on
WORKER = "bench_0"


@dataclass(frozen=True)
class Sizes:
    rounds: int
    steps: int  # timed steps per block
    trace_steps: int  # profiled steps in the trace that part B writes
    write_reps: int  # repetitions of each trace write


QUICK = Sizes(rounds=3, steps=2, trace_steps=4, write_reps=1)
FULL = Sizes(rounds=40, steps=4, trace_steps=45, write_reps=3)


@dataclass(frozen=True)
class Arm:
    name: str
    what: str
    step: Step
    context: Callable[[], contextlib.AbstractContextManager[Any]]
    profiled: bool


@dataclass(frozen=True)
class Comparison:
    name: str
    num: str
    den: str
    target: float | None  # None: reported for information


COMPARISONS = (
    Comparison("scopes, profiler on", "builtin+scopes@prof", "builtin@prof", 1.05),
    Comparison("scopes, profiler off", "builtin+scopes", "builtin", 1.01),
    Comparison("instrument(), profiler off", "gpt2+instrument", "gpt2", 1.01),
    Comparison("instrument(), profiler on", "gpt2+instrument@prof", "gpt2@prof", None),
    Comparison("profiler, builtin unscoped", "builtin@prof", "builtin", None),
    Comparison("profiler, gpt2 plain", "gpt2@prof", "gpt2", None),
)


# -- part A: step time ---------------------------------------------------------------------------
def _train_step(model: nn.Module, ids: torch.Tensor) -> Step:
    """The runner's training step (``runner.models.build_workload``) for a model we build here."""
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step() -> None:
        out = model(ids)
        loss = F.cross_entropy(out.float().view(-1, out.size(-1)), ids.view(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def _profiler() -> profile:
    return profile(
        activities=[ProfilerActivity.CPU],
        record_shapes=PROFILE.record_shapes,
        profile_memory=PROFILE.profile_memory,
    )


def build_arms() -> list[Arm]:
    torch.manual_seed(0)
    ids = torch.randint(MODEL.vocab, (MODEL.batch, MODEL.seq))
    scoped = Transformer(MODEL, scoped=True)
    plain = Transformer(MODEL, scoped=False)
    plain.load_state_dict(scoped.state_dict())
    plain_step, scoped_step = _train_step(plain, ids), _train_step(scoped, ids)
    hf = build_workload("hf:gpt2", MODEL.replace(impl=HF_IMPL))
    none = contextlib.nullcontext

    def instrumented() -> contextlib.AbstractContextManager[Any]:
        return instrument(hf.model)

    @contextlib.contextmanager
    def instrumented_profiler() -> Iterator[profile]:
        with instrument(hf.model), _profiler() as prof:
            yield prof

    return [
        Arm("builtin", "Transformer(scoped=False), no profiler", plain_step, none, False),
        Arm("builtin+scopes", "Transformer(scoped=True), no profiler", scoped_step, none, False),
        Arm("builtin@prof", "Transformer(scoped=False), profiler on", plain_step, _profiler, True),
        Arm("builtin+scopes@prof", "Transformer(scoped=True), profiler on", scoped_step, _profiler, True),
        Arm("gpt2", "hf:gpt2, no profiler", hf.step, none, False),
        Arm("gpt2+instrument", "hf:gpt2 in instrument(), no profiler", hf.step, instrumented, False),
        Arm("gpt2@prof", "hf:gpt2, profiler on", hf.step, _profiler, True),
        Arm("gpt2+instrument@prof", "hf:gpt2 in instrument(), profiler on", hf.step, instrumented_profiler, True),
    ]


def run_block(arm: Arm, steps: int) -> list[float]:
    """One untimed step, then ``steps`` timed ones (seconds), inside the arm's context."""
    gc.collect()
    times = []
    with arm.context() as ctx:
        prof = ctx if arm.profiled else None
        arm.step()
        if prof is not None:
            prof.step()
        for _ in range(steps):
            t0 = time.perf_counter()
            arm.step()
            if prof is not None:
                prof.step()  # the runner's loop calls it after every step
            times.append(time.perf_counter() - t0)
        if isinstance(ctx, Instrumentation):  # its inactive path must really have been crossed
            assert ctx.sdpa_calls > 0, "instrument()'s SDPA wrapper was never called"
    return times


def bootstrap_median_ci(values: list[float], rng: random.Random, n: int = 2000) -> tuple[float, float]:
    """A percentile bootstrap 95% interval for the median of ``values``."""
    meds = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(n))
    return meds[int(0.025 * n)], meds[int(0.975 * n) - 1]


def measure_steps(sizes: Sizes, rng: random.Random, log: Callable[[str], None]) -> dict[str, Any]:
    arms = build_arms()
    for arm in arms:  # warm every path once: allocator, lazy init, first profiler start
        run_block(arm, 1)
    blocks: dict[str, list[float]] = {a.name: [] for a in arms}  # median step time per round
    start = time.perf_counter()
    for r in range(sizes.rounds):
        order = arms[:]
        rng.shuffle(order)
        for arm in order:
            blocks[arm.name].append(statistics.median(run_block(arm, sizes.steps)))
        if r == 0 or (r + 1) % 10 == 0:
            log(f"  round {r + 1}/{sizes.rounds}, {time.perf_counter() - start:.0f} s")
    comparisons = []
    for c in COMPARISONS:
        ratios = [n / d for n, d in zip(blocks[c.num], blocks[c.den], strict=True)]
        ratio = statistics.median(ratios)
        lo, hi = bootstrap_median_ci(ratios, rng)
        if c.target is None:
            verdict = "info"
        elif hi <= c.target:
            verdict = "met"
        elif ratio <= c.target:
            verdict = "met, not resolved"
        else:
            verdict = "MISSED"
        comparisons.append({**asdict(c), "ratio": ratio, "ci95": [lo, hi], "verdict": verdict})
    return {
        "arms": {
            a.name: {"what": a.what, "median_ms": 1e3 * statistics.median(blocks[a.name]),
                     "block_medians_ms": [1e3 * t for t in blocks[a.name]]}
            for a in arms
        },
        "comparisons": comparisons,
        "seconds": time.perf_counter() - start,
    }


# -- part B: trace writing -----------------------------------------------------------------------
class _Replay:
    """Stands in for the profiler's kineto result: ``save(path)`` writes the bytes it exported."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def save(self, path: str) -> None:
        with open(path, "wb") as f:
            f.write(self.data)


def record_trace(steps: int) -> profile:
    torch.manual_seed(0)
    work = build_workload("builtin", MODEL)
    work.step()
    with _profiler() as prof:
        for _ in range(steps):
            work.step()
            prof.step()
    return prof


def _output(directory: Path) -> Path:
    files = sorted(directory.iterdir())
    assert len(files) == 1, f"expected one trace file in {directory}, found {[f.name for f in files]}"
    assert TRACE_FILE_RE.match(files[0].name) and not files[0].name.endswith(TMP_SUFFIX), files[0].name
    return files[0]


def measure_writes(sizes: Sizes, rng: random.Random, log: Callable[[str], None]) -> dict[str, Any]:
    prof = record_trace(sizes.trace_steps)
    with tempfile.TemporaryDirectory(prefix="tb-attn-bench-") as tmp:
        root = Path(tmp)
        t0 = time.perf_counter()
        prof.export_chrome_trace(str(root / "export.json"))
        export_s = time.perf_counter() - t0
        data = (root / "export.json").read_bytes()
        (root / "export.json").unlink()
        log(f"  trace: {sizes.trace_steps} steps, {len(data) / 1e6:.0f} MB, kineto export {export_s:.2f} s")
        inner = prof.profiler
        assert inner is not None
        inner.kineto_results = _Replay(data)  # type: ignore[assignment]
        writers: dict[str, Callable[[str], Callable[[profile], None]]] = {
            "replay only": lambda d: lambda p: _Replay(data).save(str(Path(d) / f"{WORKER}.1.pt.trace.json")),
            "tensorboard_trace_handler": lambda d: tensorboard_trace_handler(d, WORKER),
            "trace_handler": lambda d: trace_handler(d, WORKER),
            "tensorboard_trace_handler gzip": lambda d: tensorboard_trace_handler(d, WORKER, use_gzip=True),
            "trace_handler gzip (level 1)": lambda d: trace_handler(d, WORKER, use_gzip=True, gzip_level=1),
        }
        times: dict[str, list[float]] = {name: [] for name in writers}
        sizes_b: dict[str, int] = {}
        for rep in range(sizes.write_reps):
            order = list(writers)
            rng.shuffle(order)
            for name in order:
                out_dir = root / f"{rep}-{len(times[name])}-{name.replace(' ', '_')}"
                handler = writers[name](str(out_dir))
                out_dir.mkdir()
                gc.collect()
                t0 = time.perf_counter()
                handler(prof)
                times[name].append(time.perf_counter() - t0)
                path = _output(out_dir)
                raw = path.read_bytes()
                sizes_b[name] = len(raw)
                content = gzip.decompress(raw) if path.name.endswith(".gz") else raw
                assert content == data, f"{name}: written content differs from the export"
                path.unlink()
                out_dir.rmdir()
            log(f"  writes: rep {rep + 1}/{sizes.write_reps} done")
    med = {name: statistics.median(ts) for name, ts in times.items()}
    replay = med["replay only"]
    theirs, ours = med["tensorboard_trace_handler gzip"], med["trace_handler gzip (level 1)"]
    return {
        "trace_steps": sizes.trace_steps,
        "json_bytes": len(data),
        "kineto_export_s": export_s,
        "writes": {name: {"median_s": med[name], "runs_s": times[name], "bytes": sizes_b[name]} for name in writers},
        "gzip_ratio": theirs / ours,
        # Each handler's own work, without the export that both share.
        "gzip_ratio_excluding_export": (theirs - replay) / (ours - replay),
        # The same with the real kineto export in place of the replayed bytes.
        "gzip_ratio_with_real_export": (theirs - replay + export_s) / (ours - replay + export_s),
        "contents_identical": True,  # asserted above for every file
    }


# -- report --------------------------------------------------------------------------------------
def machine() -> dict[str, Any]:
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    import transformers

    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpus": os.cpu_count(),
        "memory_gib": round(mem / 2**30, 1),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
    }


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return "\n".join([*lines, *("| " + " | ".join(r) + " |" for r in rows)])


def render(result: dict[str, Any]) -> str:
    steps, writes = result["steps"], result["writes"]
    arms = steps["arms"]
    out = [
        f"{result['machine']['date']}; {result['machine']['cpus']} CPUs, torch {result['machine']['torch']}, "
        f"{result['sizes']['rounds']} rounds x {result['sizes']['steps']} steps per arm; model {result['model']}",
        "",
        _table(["arm", "what", "median step ms"],
               [[f"`{n}`", a["what"], f"{a['median_ms']:.1f}"] for n, a in arms.items()]),
        "",
        _table(
            ["comparison", "ratio", "95% CI", "target", "verdict"],
            [[c["name"] + f" (`{c['num']}` / `{c['den']}`)", f"{c['ratio']:.3f}",
              f"{c['ci95'][0]:.3f}-{c['ci95'][1]:.3f}", "-" if c["target"] is None else f"<= {c['target']:.2f}",
              c["verdict"]] for c in steps["comparisons"]],
        ),
        "",
        f"trace: {writes['trace_steps']} steps, {writes['json_bytes'] / 1e6:.1f} MB of JSON; "
        f"kineto export (once) {writes['kineto_export_s']:.2f} s",
        "",
        _table(["writer", "median s", "MB written"],
               [[n, f"{w['median_s']:.2f}", f"{w['bytes'] / 1e6:.1f}"] for n, w in writes["writes"].items()]),
        "",
        f"gzip, tensorboard_trace_handler / trace_handler: {writes['gzip_ratio']:.1f}x "
        f"(excluding the shared export: {writes['gzip_ratio_excluding_export']:.1f}x; "
        f"with the real kineto export: {writes['gzip_ratio_with_real_export']:.1f}x); target >= 5x",
    ]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: few rounds, a small trace (< 60 s)")
    parser.add_argument("--rounds", type=int, help="rounds of part A (overrides the mode's default)")
    parser.add_argument("--trace-steps", type=int, help="profiled steps in part B's trace")
    parser.add_argument("--json", type=Path, metavar="OUT", help="write the results as JSON")
    parser.add_argument("--seed", type=int, default=0, help="seed of the block order and the bootstrap")
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    sizes = Sizes(
        rounds=args.rounds or sizes.rounds,
        steps=sizes.steps,
        trace_steps=args.trace_steps or sizes.trace_steps,
        write_reps=sizes.write_reps,
    )
    rng = random.Random(args.seed)

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    start = time.perf_counter()
    log("part A: step time")
    steps = measure_steps(sizes, rng, log)
    log("part B: trace writing")
    writes = measure_writes(sizes, rng, log)
    result = {
        "machine": machine(),
        "sizes": asdict(sizes),
        "model": f"layers={MODEL.layers} heads={MODEL.heads} d_model={MODEL.d_model} seq={MODEL.seq} "
        f"batch={MODEL.batch} impl={MODEL.impl} (gpt2: impl={HF_IMPL})",
        "steps": steps,
        "writes": writes,
        "seconds": time.perf_counter() - start,
    }
    print(render(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
