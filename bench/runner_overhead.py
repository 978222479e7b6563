"""Measure what the runner costs: scopes and instrumentation per training step, and gzip trace writing.

Part A times training steps in pairs of arms, each pair answering one question:

- scopes in the built-in transformer, under ``torch.profiler`` (``record_shapes`` and
  ``profile_memory`` on, as the runner profiles) and with no profiler. The main comparisons toggle
  ``Attention.scoped`` on one model, so both arms run the same tensors; a second pair compares
  ``Transformer(scoped=False)`` with ``Transformer(scoped=True)``, two models with equal weights;
- ``runner.instrument()`` around Hugging Face GPT-2 (``build_workload("hf:gpt2")``), entered
  and left around each step, with no profiler and under the profiler;
- the profiler itself (profiler off, then on, for the same model), for reference.

Each round runs one block per pair, pairs in random order. In a block the two arms alternate
step by step (A B B A A B ...) after one untimed step each, inside one profiler session where the
pair is profiled, so both arms see the same machine; profiler sessions last one block, so events
never pile up, and no trace is written. Every model trains at learning rate 0, so hundreds of
steps on one batch neither drift nor change cost (the optimizer still does all of its work). A
pair's result is the median over rounds of the ratio of its two block medians, with a bootstrap
95% interval. Blocks run while the machine was disturbed (a block median over 1.5x the pair's
usual one) are dropped and counted.

Part B profiles ``--trace-steps`` steps once and exports the trace once (a profiler exports only
once: a second ``export_chrome_trace`` raises "Trace is already saved"). It then replays those
exact bytes through the profiler's export call, so ``torch.profiler.tensorboard_trace_handler``
and ``runner.traces.trace_handler``, with and without gzip, write the same content; each file is
checked against the exported bytes. Last, each gzip handler writes freshly profiled traces end to
end, with kineto's real export.

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
from runner.model import Attention, Transformer
from runner.models import build_workload
from runner.traces import TMP_SUFFIX, TRACE_FILE_RE, trace_handler

Step = Callable[[], None]
Around = Callable[[], contextlib.AbstractContextManager[Any]]
Log = Callable[[str], None]

MODEL = ModelConfig(layers=4, heads=8, d_model=256, seq=128, batch=4, impl="naive")
HF_IMPL = "sdpa"  # Hugging Face's default attention: the path that crosses instrument()'s SDPA wrapper
PROFILE = ProfileConfig()  # the runner's defaults: record_shapes and profile_memory on
WORKER = "bench_0"
DISTURBED = 1.5


@dataclass(frozen=True)
class Sizes:
    rounds: int
    pairs: int  # timed steps of each arm per block
    trace_steps: int  # profiled steps in the traces that part B writes
    write_reps: int  # repetitions of each replayed write
    fresh_reps: int  # freshly profiled traces written end to end by each gzip handler


QUICK = Sizes(rounds=3, pairs=2, trace_steps=4, write_reps=1, fresh_reps=1)
FULL = Sizes(rounds=36, pairs=4, trace_steps=45, write_reps=3, fresh_reps=2)


@dataclass(frozen=True)
class Arm:
    name: str
    step: Step
    around: Around  # entered before and left after each step, outside the timing


@dataclass(frozen=True)
class Pair:
    name: str
    den: Arm
    num: Arm
    # "off": no profiler; "on": both arms in one profiler session; "blocks": den's block without
    # the profiler, then num's block in its own profiler session (in random order).
    profiler: str
    target: float | None  # the highest acceptable num / den; None: for information


# -- part A: step time ---------------------------------------------------------------------------
def _train_step(model: nn.Module, ids: torch.Tensor) -> Step:
    """The runner's training step (``runner.models.build_workload``), at learning rate 0."""
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.0)

    def step() -> None:
        out = model(ids)
        loss = F.cross_entropy(out.float().view(-1, out.size(-1)), ids.view(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def _scopes(model: nn.Module, on: bool) -> Around:
    attentions = [m for m in model.modules() if isinstance(m, Attention)]

    @contextlib.contextmanager
    def around() -> Iterator[None]:
        for attention in attentions:
            attention.scoped = on
        yield

    return around


def _profiler() -> profile:
    return profile(
        activities=[ProfilerActivity.CPU],
        record_shapes=PROFILE.record_shapes,
        profile_memory=PROFILE.profile_memory,
    )


def build_pairs() -> list[Pair]:
    torch.manual_seed(0)
    ids = torch.randint(MODEL.vocab, (MODEL.batch, MODEL.seq))
    model = Transformer(MODEL, scoped=True)
    scoped = Transformer(MODEL, scoped=True)
    unscoped = Transformer(MODEL, scoped=False)
    scoped.load_state_dict(model.state_dict())
    unscoped.load_state_dict(model.state_dict())
    hf = build_workload("hf:gpt2", MODEL.replace(impl=HF_IMPL))
    assert hf.optimizer is not None
    for group in hf.optimizer.param_groups:
        group["lr"] = 0.0
    step, none = _train_step(model, ids), contextlib.nullcontext
    off = Arm("builtin, scopes off", step, _scopes(model, False))
    on = Arm("builtin, scopes on", step, _scopes(model, True))
    gpt2 = Arm("gpt2", hf.step, none)
    gpt2_inst = Arm("gpt2 in instrument()", hf.step, lambda: instrument(hf.model))
    return [
        Pair("scopes, profiler on", off, on, "on", 1.05),
        Pair("scopes, profiler off", off, on, "off", 1.01),
        Pair(
            "scopes, profiler off, two models",
            Arm("Transformer(scoped=False)", _train_step(unscoped, ids), none),
            Arm("Transformer(scoped=True)", _train_step(scoped, ids), none),
            "off",
            None,
        ),
        Pair("instrument(), profiler off", gpt2, gpt2_inst, "off", 1.01),
        Pair("instrument(), profiler on", gpt2, gpt2_inst, "on", None),
        Pair("profiler on / off", off, off, "blocks", None),
    ]


def _timed(arm: Arm, prof: profile | None) -> float:
    with arm.around() as ctx:
        t0 = time.perf_counter()
        arm.step()
        if prof is not None:
            prof.step()  # the runner's loop calls it after every step
        dt = time.perf_counter() - t0
    if isinstance(ctx, Instrumentation):  # its inactive path must really have been crossed
        assert ctx.sdpa_calls > 0, "instrument()'s SDPA wrapper was never called"
    return dt


def run_pair(pair: Pair, n: int, rng: random.Random) -> tuple[list[float], list[float]]:
    """Step times (seconds) of den and num: one untimed step of each, then ``n`` timed ones."""
    gc.collect()
    arms = (pair.den, pair.num)
    out: tuple[list[float], list[float]] = ([], [])
    if pair.profiler == "blocks":
        for i in rng.sample([0, 1], 2):
            with _profiler() if i else contextlib.nullcontext() as prof:
                _timed(arms[i], prof)
                out[i].extend(_timed(arms[i], prof) for _ in range(n))
        return out
    order = rng.sample([0, 1], 2)
    with _profiler() if pair.profiler == "on" else contextlib.nullcontext() as prof:
        for i in order:
            _timed(arms[i], prof)
        for _ in range(n):
            for i in order:
                out[i].append(_timed(arms[i], prof))
            order.reverse()  # A B B A A B ...: a steady drift cancels out
    return out


def bootstrap_median_ci(values: list[float], rng: random.Random, n: int = 2000) -> tuple[float, float]:
    """A percentile bootstrap 95% interval for the median of ``values``."""
    meds = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(n))
    return meds[int(0.025 * n)], meds[int(0.975 * n) - 1]


def summarize_pair(pair: Pair, den: list[float], num: list[float], rng: random.Random) -> dict[str, Any]:
    """Paired ratios of block medians, without the blocks run while the machine was disturbed."""
    usual_den, usual_num = statistics.median(den), statistics.median(num)
    kept = [(d, m) for d, m in zip(den, num, strict=True) if d <= DISTURBED * usual_den and m <= DISTURBED * usual_num]
    ratios = [m / d for d, m in kept]
    ratio = statistics.median(ratios)
    lo, hi = bootstrap_median_ci(ratios, rng)
    if pair.target is None:
        verdict = "info"
    elif hi <= pair.target:
        verdict = "met"
    elif ratio <= pair.target:
        verdict = "met, not resolved"
    else:
        verdict = "MISSED"
    blocks = pair.profiler == "blocks"
    return {
        "name": pair.name,
        "den": pair.den.name + (", profiler off" if blocks else ""),
        "num": pair.num.name + (", profiler on" if blocks else ""),
        "profiler": pair.profiler,
        "den_ms": 1e3 * statistics.median(d for d, _ in kept),
        "num_ms": 1e3 * statistics.median(m for _, m in kept),
        "ratio": ratio,
        "ci95": [lo, hi],
        "target": pair.target,
        "verdict": verdict,
        "blocks_kept": len(kept),
        "blocks": len(den),
        "den_block_medians_ms": [1e3 * d for d in den],
        "num_block_medians_ms": [1e3 * m for m in num],
    }


def measure_steps(sizes: Sizes, rng: random.Random, log: Log) -> dict[str, Any]:
    pairs = build_pairs()
    for pair in pairs:  # warm every path once: allocator, lazy init, the first profiler start
        run_pair(pair, 1, rng)
    blocks: list[tuple[list[float], list[float]]] = [([], []) for _ in pairs]  # block medians
    start = time.perf_counter()
    for r in range(sizes.rounds):
        for k in rng.sample(range(len(pairs)), len(pairs)):
            den, num = run_pair(pairs[k], sizes.pairs, rng)
            blocks[k][0].append(statistics.median(den))
            blocks[k][1].append(statistics.median(num))
        if r == 0 or (r + 1) % 10 == 0:
            log(f"  round {r + 1}/{sizes.rounds}, {time.perf_counter() - start:.0f} s")
    return {
        "pairs": [summarize_pair(p, den, num, rng) for p, (den, num) in zip(pairs, blocks, strict=True)],
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


def _record(step: Step, steps: int) -> profile:
    with _profiler() as prof:
        for _ in range(steps):
            step()
            prof.step()
    return prof


def _written(directory: Path) -> bytes:
    """The one trace file a handler wrote into ``directory``, decompressed, and then removed."""
    files = sorted(directory.iterdir())
    assert len(files) == 1, f"expected one trace file in {directory}, found {[f.name for f in files]}"
    path = files[0]
    assert TRACE_FILE_RE.match(path.name) and not path.name.endswith(TMP_SUFFIX), path.name
    raw = path.read_bytes()
    path.unlink()
    directory.rmdir()
    return gzip.decompress(raw) if path.name.endswith(".gz") else raw


def _timed_write(handler: Callable[[profile], None], prof: profile, directory: Path) -> tuple[float, int, bytes]:
    """Seconds, bytes on disk and the (decompressed) content of one handler call."""
    directory.mkdir()
    gc.collect()
    t0 = time.perf_counter()
    handler(prof)
    seconds = time.perf_counter() - t0
    size = next(directory.iterdir()).stat().st_size
    return seconds, size, _written(directory)


GZIP_HANDLERS: dict[str, Callable[[str], Callable[[profile], None]]] = {
    "tensorboard_trace_handler gzip": lambda d: tensorboard_trace_handler(d, WORKER, use_gzip=True),
    "trace_handler gzip (level 1)": lambda d: trace_handler(d, WORKER, use_gzip=True, gzip_level=1),
}


def measure_writes(sizes: Sizes, rng: random.Random, log: Log) -> dict[str, Any]:
    torch.manual_seed(0)
    work = build_workload("builtin", MODEL)  # the runner's own workload, scoped, as it profiles
    work.step()
    with tempfile.TemporaryDirectory(prefix="tb-attn-bench-") as tmp:
        root = Path(tmp)
        prof = _record(work.step, sizes.trace_steps)
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
            **GZIP_HANDLERS,
        }
        times: dict[str, list[float]] = {name: [] for name in writers}
        sizes_b: dict[str, int] = {}
        for rep in range(sizes.write_reps):
            for name in rng.sample(list(writers), len(writers)):
                seconds, size, content = _timed_write(writers[name](str(root / "out")), prof, root / "out")
                assert content == data, f"{name}: the written trace differs from the export"
                times[name].append(seconds)
                sizes_b[name] = size
            log(f"  replayed writes: rep {rep + 1}/{sizes.write_reps}")
        del prof, inner
        fresh: dict[str, list[dict[str, float]]] = {name: [] for name in GZIP_HANDLERS}
        for rep in range(sizes.fresh_reps):
            for name in rng.sample(list(GZIP_HANDLERS), len(GZIP_HANDLERS)):
                prof = _record(work.step, sizes.trace_steps)
                seconds, size, content = _timed_write(GZIP_HANDLERS[name](str(root / "out")), prof, root / "out")
                body = content.strip()  # too big to parse here; a whole gzip stream of one JSON object
                assert body.startswith(b"{") and body.endswith(b"}") and b'"traceEvents"' in body[:4096], name
                fresh[name].append({"seconds": seconds, "bytes": size, "json_bytes": len(content)})
                del prof
            log(f"  fresh writes: rep {rep + 1}/{sizes.fresh_reps}")
    med = {name: statistics.median(ts) for name, ts in times.items()}
    replay = med["replay only"]
    theirs, ours = (med[name] for name in GZIP_HANDLERS)
    fresh_theirs, fresh_ours = (statistics.median(r["seconds"] for r in fresh[name]) for name in GZIP_HANDLERS)
    return {
        "trace_steps": sizes.trace_steps,
        "json_bytes": len(data),
        "kineto_export_s": export_s,
        "writes": {name: {"median_s": med[name], "runs_s": times[name], "bytes": sizes_b[name]} for name in writers},
        "contents_identical": True,  # asserted above for every replayed write
        "gzip_ratio": theirs / ours,
        "gzip_ratio_excluding_export": (theirs - replay) / (ours - replay),  # each handler's own work
        "fresh": {name: {"median_s": statistics.median(r["seconds"] for r in runs), "runs": runs}
                  for name, runs in fresh.items()},
        "gzip_ratio_fresh": fresh_theirs / fresh_ours,
    }


# -- report --------------------------------------------------------------------------------------
def machine() -> dict[str, Any]:
    import transformers

    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpus": os.cpu_count(),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
    }


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return "\n".join([*lines, *("| " + " | ".join(r) + " |" for r in rows)])


def render(result: dict[str, Any]) -> str:
    steps, writes, m = result["steps"], result["writes"], result["machine"]
    pair_rows = [
        [p["name"], f"{p['num']} / {p['den']}", f"{p['den_ms']:.1f}", f"{p['num_ms']:.1f}", f"{p['ratio']:.3f}",
         f"{p['ci95'][0]:.3f}-{p['ci95'][1]:.3f}", "-" if p["target"] is None else f"<= {p['target']:.2f}",
         p["verdict"], f"{p['blocks_kept']}/{p['blocks']}"]
        for p in steps["pairs"]
    ]
    write_rows = [[n, f"{w['median_s']:.2f}", f"{w['bytes'] / 1e6:.1f}"] for n, w in writes["writes"].items()]
    write_rows += [
        [f"{n}, fresh trace", f"{w['median_s']:.2f}", f"{statistics.median(r['bytes'] for r in w['runs']) / 1e6:.1f}"]
        for n, w in writes["fresh"].items()
    ]
    return "\n".join([
        f"{m['date']}; {m['cpus']} CPUs, {m['memory_gib']} GiB, torch {m['torch']} ({m['torch_threads']} threads), "
        f"transformers {m['transformers']}",
        f"model: {result['model']}; {result['sizes']['rounds']} rounds of {result['sizes']['pairs']} steps per arm",
        "",
        _table(["comparison", "arms: B / A", "A ms", "B ms", "ratio B / A", "95% CI", "target", "verdict",
                "blocks kept"], pair_rows),
        "",
        f"trace: {writes['trace_steps']} steps, {writes['json_bytes'] / 1e6:.1f} MB of JSON; "
        f"kineto export (once) {writes['kineto_export_s']:.2f} s; replayed contents identical: "
        f"{writes['contents_identical']}",
        "",
        _table(["writer", "median s", "MB on disk"], write_rows),
        "",
        f"gzip, tensorboard_trace_handler / trace_handler (target >= 5x): {writes['gzip_ratio']:.1f}x on the "
        f"same bytes, {writes['gzip_ratio_excluding_export']:.1f}x without the shared export, "
        f"{writes['gzip_ratio_fresh']:.1f}x end to end on fresh traces",
    ])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: few rounds, a small trace (< 60 s)")
    parser.add_argument("--rounds", type=int, help="rounds of part A (overrides the mode's default)")
    parser.add_argument("--trace-steps", type=int, help="profiled steps per trace in part B")
    parser.add_argument("--json", type=Path, metavar="OUT", help="write the results as JSON")
    parser.add_argument("--seed", type=int, default=0, help="seed of the block order and the bootstrap")
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    sizes = Sizes(
        rounds=args.rounds or sizes.rounds,
        pairs=sizes.pairs,
        trace_steps=args.trace_steps or sizes.trace_steps,
        write_reps=sizes.write_reps,
        fresh_reps=sizes.fresh_reps,
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
