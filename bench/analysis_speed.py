"""Time to summary and peak memory of the analysis engine, against its peers, on the same traces.

The traces are written by our runner, as the peers' were (``shared/PEERS.md``): the built-in
12-layer transformer (d_model 384, 12 heads, seq 128, batch 2), naive attention, training,
scopes on, uncompressed ``.pt.trace.json``. S has 4 layers. The number of profiled steps is
computed from the size of one step, measured first (a trace of 1 and of 2 active steps), to reach
about 10 MB (S), 100 MB (M) and 500 MB (L). SU, MU and LU are the same without our scopes
(``--no-scopes``: what anyone's training script writes; the analysis infers attention), and
BERT and SWITCH are the public GPU traces of ``shared/traces/gpu/`` (gzipped, unscoped, written by
others). Traces are cached under ``--traces-dir``, outside the repository.

Every job is a whole, fresh process, timed from spawn to exit. Its peak RSS is the ``wait4``
``ru_maxrss`` that GNU time reports, which on Linux covers the child and every descendant it
reaped, so the worker processes that torch-tb-profiler spawns are counted. Jobs run in rounds
(5 for S and M, 3 for L), one run of each job per round in a rotating order, so slow drift of the
machine hits all of them alike; a job's figure is the median over rounds. RunLoader and HTA get
no more rounds once the bench would run past ``--budget-s``. The jobs:

- ``ours``: ``tb-attn summarize FILE --format json > /dev/null`` (no cache directory);
- ``orjson``: read the bytes (gunzipped with zlib where the trace is gzipped) and ``orjson.loads``
  them, with the default GC, and with GC off (the floor of a full parse, and the target: ours
  takes at most half its time from M up, at most 1.5x on small traces);
- ``runloader``: torch-tb-profiler's ``RunLoader(name, run_dir, caches=io.Cache()).load()``, what
  its TensorBoard plugin runs (it parses in a spawned process);
- ``hta``: Holistic Trace Analysis ``TraceAnalysis(trace_dir=...)``. HTA takes every ``.json`` in
  the directory as a trace and looks for ``"rank": N`` line by line, so it gets a directory of its
  own holding a copy of the trace with ``"distributedInfo": {"rank": 0}`` added, as it asks;
- ``startup``, ``ours_imports`` and ``read``: Python start-up, the modules ``tb-attn summarize``
  imports, and reading the bytes, for scale.

Before measuring, the bench compiles our package's bytecode, as pip does at install (the peers are
installed so; an editable checkout under PYTHONDONTWRITEBYTECODE would compile ours from source in
every job), and records whether the compiled scanner is built. An untimed run of ``ours`` checks
its summary: one worker, as many layers as the model has, each with the expected backend, and the
profiled step count. Unless ``--quick`` or ``--no-wait``, the bench first waits until no
``runner_overhead.py`` benchmark runs on the machine.

Run from the repository root::

    python bench/analysis_speed.py [--quick] [--sizes S,M,L,SU,MU,LU,BERT,SWITCH] [--json OUT] [--traces-dir DIR]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
TB_ATTN = str(Path(PY).with_name("tb-attn"))
TIME = "/usr/bin/time"  # GNU time
MB = 1_000_000
MIB = 1 << 20
DEFAULT_TRACES_DIR = "/tmp/tb-attn-bench-traces"
BUSY_PATTERN = "runner_overhead.py"
#: The public traces measured beside ours (``shared/traces/``): what others' GPU runs write.
SHARED = ROOT.parent / "shared" / "traces"
EVENT_START = b"\n  {"


@dataclass(frozen=True)
class Model:
    layers: int
    d_model: int = 384
    heads: int = 12
    seq: int = 128
    batch: int = 2
    scopes: bool = True  # False: --no-scopes, a trace as anyone's script writes it (inferred)

    @property
    def key(self) -> str:
        return f"l{self.layers}-d{self.d_model}-h{self.heads}-s{self.seq}-b{self.batch}" + (
            "" if self.scopes else "-unscoped")

    @property
    def run_name(self) -> str:
        return "builtin/naive/seq128" if self.scopes else "builtin/naive-unscoped/seq128"


@dataclass(frozen=True)
class Size:
    name: str
    model: Model
    target_bytes: int
    reps: int  # rounds; every job runs once per round (RunLoader and HTA: see --budget-s)


SIZES: dict[str, Size] = {
    "S": Size("S", Model(layers=4), 10 * MB, reps=5),
    "M": Size("M", Model(layers=12), 100 * MB, reps=5),
    "L": Size("L", Model(layers=12), 500 * MB, reps=3),
    # The same model and sizes without our scopes: attention is inferred.
    "SU": Size("SU", Model(layers=4, scopes=False), 10 * MB, reps=5),
    "MU": Size("MU", Model(layers=12, scopes=False), 100 * MB, reps=5),
    "LU": Size("LU", Model(layers=12, scopes=False), 500 * MB, reps=3),
}
#: Public traces (gzipped, unscoped): name -> (file under shared/traces, layers, backend).
PUBLIC: dict[str, tuple[str, int, str]] = {
    "BERT": ("gpu/tracelens_h100_bert-small_sdpa-flash.json.gz", 4, "flash"),
    "SWITCH": ("gpu/switchtransformers_a100_naive-bmm-softmax_fp32.json.gz", 10, "naive"),
}
QUICK = Size("Q", Model(layers=2, d_model=64, heads=4), 2 * MB, reps=1)


@dataclass(frozen=True)
class Trace:
    size: str
    layers: int  # expected in ours' summary, as are the backend and the step count
    backend: str
    active: int
    file: str  # the runner's .pt.trace.json, or a public .pt.trace.json.gz
    run_dir: str  # the run directory holding it (and tb_attn_run.json)
    run_name: str  # its path under the logdir
    hta_dir: str  # a directory holding only the copy HTA asks for
    nbytes: int
    events: int


@dataclass(frozen=True)
class Sample:
    wall_s: float
    peak_mib: float
    cpu_s: float  # user + system, of the process and its reaped descendants


@dataclass
class Result:
    job: str
    samples: list[Sample] = field(default_factory=list)

    @property
    def wall_s(self) -> float:
        return statistics.median(s.wall_s for s in self.samples)

    @property
    def peak_mib(self) -> float:
        return statistics.median(s.peak_mib for s in self.samples)


class JobError(RuntimeError):
    pass


# --- jobs -------------------------------------------------------------------------------------

# The bytes of the trace; a gzipped (public) one decompressed with zlib, which ours also does.
_BYTES = ("data = open(sys.argv[1], 'rb').read()\n"
          "if sys.argv[1].endswith('.gz'):\n    data = zlib.decompress(data, 31)\n")
_READ = "import sys, zlib\n" + _BYTES
_IMPORTS = """\
import msgspec
from tb_attn_plugin.engine.loader import Loader, resolve_runs
from tb_attn_plugin.types.schema import SUMMARY_SCHEMA
from tb_attn_plugin.trace.events import TraceError
"""
_ORJSON = "import sys, zlib\nimport orjson\n" + _BYTES + "orjson.loads(data)\n"
_ORJSON_NOGC = "import gc, sys, zlib\nimport orjson\ngc.disable()\n" + _BYTES + "orjson.loads(data)\n"
_RUNLOADER = """\
import sys
from torch_tb_profiler import io
from torch_tb_profiler.profiler import RunLoader
if __name__ == "__main__":
    run = RunLoader(sys.argv[2], sys.argv[1], caches=io.Cache()).load()
    if not run.profiles:
        sys.exit("RunLoader loaded no profile")
"""
_HTA = """\
import sys
from hta.trace_analysis import TraceAnalysis
analysis = TraceAnalysis(trace_dir=sys.argv[1])
if len(analysis.t.traces.get(0, ())) == 0:
    sys.exit("HTA loaded no events")
"""


@dataclass(frozen=True)
class Job:
    key: str
    label: str
    argv: Callable[[Trace], list[str]]
    peer: bool = False  # RunLoader or HTA: may get fewer rounds (--budget-s)


JOBS: tuple[Job, ...] = (
    Job("startup", "Python start-up only", lambda t: [PY, "-c", "pass"]),
    Job("read", "read the bytes", lambda t: [PY, "-c", _READ, t.file]),
    Job("ours_imports", "ours' imports only (what `tb-attn summarize` imports)", lambda t: [PY, "-c", _IMPORTS]),
    Job("ours", "**ours**: `tb-attn summarize FILE --format json`",
        lambda t: [TB_ATTN, "summarize", t.file, "--format", "json"]),
    Job("orjson", "`orjson.loads` (default GC)", lambda t: [PY, "-c", _ORJSON, t.file]),
    Job("orjson_nogc", "`orjson.loads`, GC off", lambda t: [PY, "-c", _ORJSON_NOGC, t.file]),
    Job("hta", "HTA 0.5.0 `TraceAnalysis` load", lambda t: [PY, "-c", _HTA, t.hta_dir], peer=True),
    Job("runloader", "torch-tb-profiler 0.4.3 `RunLoader` (what the plugin runs)",
        lambda t: [PY, "-c", _RUNLOADER, t.run_dir, t.run_name], peer=True),
)


def measure(argv: Sequence[str], *, stdout: str = os.devnull) -> Sample:
    """Run argv as a fresh process: wall time from spawn to exit, peak RSS of its whole process tree.

    The job runs under GNU time, which reports the ``wait4`` usage of its child: on Linux the peak
    RSS of the child and of every descendant it reaped. A child of this process would not do: a
    process inherits its parent's high-water RSS at fork-and-exec, and this one is bigger than a
    fresh interpreter.
    """
    with open(stdout, "wb") as out, tempfile.TemporaryFile() as err, tempfile.NamedTemporaryFile("r") as usage:
        t0 = time.perf_counter()
        proc = subprocess.run([TIME, "-q", "-f", "%M %U %S", "-o", usage.name, *argv], stdout=out, stderr=err,
                              cwd=ROOT, check=False)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            err.seek(0)
            tail = err.read()[-3000:].decode(errors="replace")
            raise JobError(f"{' '.join(argv)[:300]} exited with {proc.returncode}:\n{tail}")
        peak_kib, user_s, sys_s = usage.read().split()[-3:]
    return Sample(wall_s=wall, peak_mib=int(peak_kib) / 1024, cpu_s=float(user_s) + float(sys_s))


# --- traces -----------------------------------------------------------------------------------

def write_trace(model: Model, active: int, traces_dir: Path, log: Callable[[str], None]) -> Path:
    """The run directory of a runner trace with `active` profiled steps, written once and cached."""
    final = traces_dir / f"{model.key}-a{active}"
    run_dir = final / "logdir" / model.run_name
    if list(run_dir.glob("*.pt.trace.json")):
        return run_dir
    tmp = traces_dir / f".{final.name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    cmd = [PY, "-m", "runner", "--model", "builtin", "--layers", str(model.layers), "--d-model", str(model.d_model),
           "--heads", str(model.heads), "--seq", str(model.seq), "--batch", str(model.batch), "--impl", "naive",
           "--wait", "0", "--warmup", "1", "--active", str(active), "--logdir", str(tmp / "logdir"), "--no-progress",
           *([] if model.scopes else ["--no-scopes"])]
    log(f"writing a trace: {' '.join(cmd[1:])}")
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "KINETO_LOG_LEVEL": "6"})
    if proc.returncode != 0:
        raise JobError(f"the runner failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    files = list((tmp / "logdir" / model.run_name).glob("*.pt.trace.json"))
    if len(files) != 1:
        raise JobError(f"expected one trace file from the runner, found {len(files)}")
    nbytes = files[0].stat().st_size
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    log(f"  {nbytes / MB:.1f} MB in {time.perf_counter() - t0:.0f} s")
    return run_dir


def trace_file(run_dir: Path) -> Path:
    (file,) = run_dir.glob("*.pt.trace.json")
    return file


def steps_for(size: Size, traces_dir: Path, log: Callable[[str], None]) -> int:
    """Active steps that reach the size's target, from the sizes of 1- and 2-step traces."""
    one = trace_file(write_trace(size.model, 1, traces_dir, log)).stat().st_size
    two = trace_file(write_trace(size.model, 2, traces_dir, log)).stat().st_size
    per_step = max(two - one, 1)
    fixed = one - per_step
    active = max(1, round((size.target_bytes - fixed) / per_step))
    log(f"{size.name}: {per_step / MB:.2f} MB per step + {fixed / MB:.2f} MB fixed -> --active {active}")
    return active


def hta_copy(file: Path, run_dir: Path) -> Path:
    """A directory with only the trace, rank 0 declared the way HTA looks for it (cached);
    uncompressed, since the rank goes into its text."""
    hta_dir = run_dir.parent.parent.parent.parent / "hta"
    dest = hta_dir / "rank-0.pt.trace.json"
    if dest.exists() and dest.stat().st_size > file.stat().st_size:
        return hta_dir
    hta_dir.mkdir(exist_ok=True)
    tmp = hta_dir / ".rank-0.tmp"
    with (gzip.open(file, "rb") if file.suffix == ".gz" else open(file, "rb")) as src, open(tmp, "wb") as dst:
        head = src.read(1 << 16)
        brace = head.index(b"{")
        dst.write(head[:brace + 1] + b'\n  "distributedInfo": {"rank": 0},' + head[brace + 1:])
        shutil.copyfileobj(src, dst, 16 << 20)
    tmp.rename(dest)
    return hta_dir


def prepare(size: Size, traces_dir: Path, log: Callable[[str], None]) -> Trace:
    active = steps_for(size, traces_dir, log)
    run_dir = write_trace(size.model, active, traces_dir, log)
    file = trace_file(run_dir)
    return Trace(size=size.name, layers=size.model.layers, backend="naive", active=active, file=str(file),
                 run_dir=str(run_dir), run_name=size.model.run_name, hta_dir=str(hta_copy(file, run_dir)),
                 nbytes=file.stat().st_size, events=_count_events(file))


def prepare_public(name: str, traces_dir: Path) -> Trace:
    """A public trace, copied into a run directory of its own (cached), as it is: gzipped."""
    rel, layers, backend = PUBLIC[name]
    src = SHARED / rel
    run_dir = traces_dir / f"public-{name.lower()}" / "logdir" / "public" / "run"
    file = run_dir / "worker0.1.pt.trace.json.gz"
    if not file.exists():
        run_dir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, file)
    return Trace(size=name, layers=layers, backend=backend, active=1, file=str(file), run_dir=str(run_dir),
                 run_name="public/run", hta_dir=str(hta_copy(file, run_dir)), nbytes=_uncompressed_size(file),
                 events=_count_events(file))


def _uncompressed_size(file: Path) -> int:
    with gzip.open(file, "rb") as f:
        return sum(len(chunk) for chunk in iter(lambda: f.read(16 << 20), b""))


def _count_events(file: Path) -> int:
    events = 0
    with (gzip.open(file, "rb") if file.suffix == ".gz" else open(file, "rb")) as f:
        tail = b""
        while chunk := f.read(16 << 20):
            buf = tail + chunk
            events += buf.count(EVENT_START)
            tail = buf[-(len(EVENT_START) - 1):]  # too short to hold a marker: none is counted twice
    return events


# --- checks and measurement -------------------------------------------------------------------

def check_ours(trace: Trace) -> str:
    """Run ours once (untimed) and check that its summary looks right; returns a one-line verdict."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        measure([TB_ATTN, "summarize", trace.file, "--format", "json"], stdout=out.name)
        doc = json.loads(Path(out.name).read_bytes())
    problems: list[str] = []
    runs = doc.get("runs") or [{}]
    workers = runs[0].get("workers") or [{}]
    worker = workers[0]
    layers = worker.get("layers") or []
    backends = sorted({layer.get("backend") for layer in layers})
    if len(runs) != 1 or len(workers) != 1 or runs[0].get("errors"):
        problems.append(f"{len(runs)} runs, {len(workers)} workers, errors {runs[0].get('errors')}")
    if len(layers) != trace.layers:
        problems.append(f"{len(layers)} layers, expected {trace.layers}")
    if backends != [trace.backend]:
        problems.append(f"backends {backends}, expected {trace.backend}")
    if worker.get("step_count") != trace.active:
        problems.append(f"{worker.get('step_count')} steps, expected {trace.active}")
    if problems:
        return "WRONG: " + "; ".join(problems)
    how = "inferred" if worker.get("inferred") else "scoped"
    return f"ok: {len(layers)} layers, backend {trace.backend}, {trace.active} steps, {how}"


def run_size(trace: Trace, reps: int, jobs: Sequence[Job], log: Callable[[str], None], *, started: float,
             budget_s: float) -> dict[str, Result]:
    """Rounds of every job. After the first round, RunLoader and HTA are dropped from the remaining
    rounds when running them all would end the bench more than budget_s after `started`."""
    results = {job.key: Result(job.key) for job in jobs}
    peers = True
    for rnd in range(reps):
        if rnd and peers:
            per_round = sum(r.wall_s for r in results.values() if r.samples)
            projected = time.monotonic() - started + per_round * (reps - rnd)
            if projected > budget_s:
                peers = False
                log(f"{trace.size}: {reps - rnd} more rounds with RunLoader and HTA would end the bench at "
                    f"{projected:.0f} s, over --budget-s {budget_s:.0f}: they stop at {rnd} round(s)")
        log(f"{trace.size} round {rnd + 1}/{reps}: load average {os.getloadavg()[0]:.2f}")
        shift = rnd % len(jobs)
        order = [*jobs[shift:], *jobs[:shift]]
        for job in order:
            if job.peer and not peers:
                continue
            sample = measure(job.argv(trace))
            results[job.key].samples.append(sample)
            log(f"{trace.size} round {rnd + 1}/{reps} {job.key:12} {sample.wall_s:8.2f} s "
                f"{sample.peak_mib:8.0f} MiB")
    return results


# --- verdicts and report ----------------------------------------------------------------------

@dataclass(frozen=True)
class Verdict:
    size: str
    what: str
    value: float
    target: str
    ok: bool | None  # None: for reference, no target


def verdicts(trace: Trace, results: dict[str, Result]) -> list[Verdict]:
    out: list[Verdict] = []
    ours = results.get("ours")
    if ours is None or not ours.samples:
        return out

    def wall(key: str) -> float | None:
        r = results.get(key)
        return r.wall_s if r is not None and r.samples else None

    t = ours.wall_s
    small = trace.nbytes < 50 * MB  # S-sized: bound by start-up
    if (rl := wall("runloader")) is not None:
        out.append(Verdict(trace.size, "speed-up vs RunLoader (its time / ours)", rl / t, ">= 20x",
                           rl / t >= 20 if not small else None))
    if (hta := wall("hta")) is not None:
        out.append(Verdict(trace.size, "speed-up vs HTA (its time / ours)", hta / t, ">= 10x",
                           hta / t >= 10 if not small else None))
    if (oj := wall("orjson")) is not None:
        out.append(Verdict(trace.size, "ours / bare orjson.loads (time)", t / oj, "reference", None))
    if (nogc := wall("orjson_nogc")) is not None:
        bound = 1.5 if small else 0.5
        out.append(Verdict(trace.size, "ours / orjson.loads with GC off (time)", t / nogc, f"<= {bound}",
                           t / nogc <= bound))
    if trace.nbytes >= 300 * MB:
        peak = ours.peak_mib * MIB / trace.nbytes
        out.append(Verdict(trace.size, "ours peak RSS / trace size", peak, "<= 0.5x", peak <= 0.5))
    else:
        out.append(Verdict(trace.size, "ours peak RSS (MiB)", ours.peak_mib, "<= 100",
                           ours.peak_mib <= 100 if not small else None))
    imports = results.get("ours_imports")
    if imports is not None and imports.samples:
        extra = (ours.peak_mib - imports.peak_mib) * MIB / trace.nbytes
        out.append(Verdict(trace.size, "(ours peak RSS - its imports' peak) / trace size", extra, "reference", None))
    return out


def markdown(traces: Sequence[Trace], all_results: dict[str, dict[str, Result]], jobs: Sequence[Job],
             checks: dict[str, str], all_verdicts: Sequence[Verdict]) -> str:
    lines = ["| trace | layers | active steps | size MB | events | ours' summary |", "|---|---|---|---|---|---|"]
    for t in traces:
        events = f"{t.events:,}" if t.events else "(not one per line)"
        lines.append(f"| {t.size} | {t.layers} | {t.active} | {t.nbytes / MB:.1f} | {events} | "
                     f"{checks[t.size]} |")
    lines.append("")
    head = "| job | " + " | ".join(f"{t.size} wall s | {t.size} peak MiB" for t in traces) + " |"
    lines += [head, "|---|" + "---|---|" * len(traces)]
    rounds = {t.size: max((len(r.samples) for r in all_results[t.size].values()), default=0) for t in traces}
    for job in jobs:
        cells: list[str] = []
        for t in traces:
            r = all_results[t.size].get(job.key)
            if r is None or not r.samples:
                cells += ["", ""]
                continue
            n = f" (n={len(r.samples)})" if len(r.samples) < rounds[t.size] else ""
            cells += [f"{r.wall_s:.2f}{n}", f"{r.peak_mib:.0f}"]
        lines.append(f"| {job.label} | " + " | ".join(cells) + " |")
    lines += ["", "| trace | ratio | measured | target | verdict |", "|---|---|---|---|---|"]
    for v in all_verdicts:
        verdict = "PASS" if v.ok else ("MISS" if v.ok is False else "-")
        lines.append(f"| {v.size} | {v.what} | {v.value:.2f} | {v.target} | {verdict} |")
    return "\n".join(lines) + "\n"


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def environment() -> dict[str, Any]:
    mem_kib = 0
    cpu = platform.processor()
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True)
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpus": os.cpu_count(), "memory_gib": round(mem_kib / (1 << 20), 1), "cpu": cpu,
        "python": platform.python_version(), "platform": platform.platform(),
        "git": commit.stdout.strip() + ("-dirty" if dirty.stdout.strip() else ""),
        "scanner": scanner_built(),
        "versions": {d: _version(d) for d in ("tb-attn", "torch", "orjson", "msgspec", "numpy", "torch-tb-profiler",
                                                "HolisticTraceAnalysis", "pandas")},
    }


def compile_package() -> None:
    """Compile our package's bytecode, as an install does (pip compiles every module it installs,
    and the peers were installed so). Where PYTHONDONTWRITEBYTECODE is set and the package is an
    editable checkout, every job would otherwise compile ours from source (about 0.09 s)."""
    subprocess.run([PY, "-m", "compileall", "-q", str(ROOT / "tb_attn_plugin")], check=True,
                   stdout=subprocess.DEVNULL)


def scanner_built() -> bool:
    probe = subprocess.run([PY, "-c", "from tb_attn_plugin.trace import scanned; print(scanned.available())"],
                           capture_output=True, text=True, cwd="/")
    return probe.stdout.strip() == "True"


def wait_until_idle(max_s: float, log: Callable[[str], None]) -> None:
    """Wait while another benchmark (runner_overhead.py) runs, so that neither disturbs the other."""
    deadline = time.monotonic() + max_s
    while True:
        busy = subprocess.run(["pgrep", "-f", BUSY_PATTERN], capture_output=True, text=True).stdout.split()
        busy = [pid for pid in busy if int(pid) != os.getpid()]
        if not busy:
            return
        if time.monotonic() > deadline:
            log(f"still busy after {max_s:.0f} s ({BUSY_PATTERN}: {', '.join(busy)}); measuring anyway")
            return
        log(f"waiting: {BUSY_PATTERN} is running (pid {', '.join(busy)})")
        time.sleep(20)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--quick", action="store_true", help="one tiny trace (2 layers, d_model 64), one round (< 60 s)")
    p.add_argument("--sizes", default="S,M,L,SU,MU,LU,BERT,SWITCH",
                   help="comma-separated, of S, M, L, their unscoped SU, MU, LU, and the public BERT, SWITCH "
                        "(default: all)")
    p.add_argument("--jobs", default=",".join(j.key for j in JOBS), help="comma-separated subset of the jobs")
    p.add_argument("--traces-dir", default=DEFAULT_TRACES_DIR, help=f"trace cache (default {DEFAULT_TRACES_DIR})")
    p.add_argument("--json", dest="json_out", help="write every sample and the verdicts here")
    p.add_argument("--no-wait", action="store_true", help=f"do not wait for {BUSY_PATTERN} to finish")
    p.add_argument("--wait-max", type=float, default=2400.0, help="seconds to wait at most (default 2400)")
    p.add_argument("--budget-s", type=float, default=900.0,
                   help="measuring time after which RunLoader and HTA get no more rounds (default 900)")
    args = p.parse_args(argv)

    def log(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    names = [s.strip().upper() for s in args.sizes.split(",") if s.strip()]
    wrong = [n for n in names if n not in SIZES and n not in PUBLIC]
    if wrong:
        p.error(f"unknown sizes: {', '.join(wrong)}")
    keys = {k.strip() for k in args.jobs.split(",")}
    unknown = keys - {j.key for j in JOBS}
    if unknown:
        p.error(f"unknown jobs: {', '.join(sorted(unknown))}")
    jobs = [j for j in JOBS if j.key in keys]
    traces_dir = Path(args.traces_dir)
    traces_dir.mkdir(parents=True, exist_ok=True)
    if not (args.quick or args.no_wait):
        wait_until_idle(args.wait_max, log)

    compile_package()
    env = environment()
    load_at_start = os.getloadavg()
    if args.quick:
        traces, reps = [prepare(QUICK, traces_dir, log)], [QUICK.reps]
    else:
        traces = [prepare(SIZES[n], traces_dir, log) if n in SIZES else prepare_public(n, traces_dir) for n in names]
        reps = [SIZES[n].reps if n in SIZES else 5 for n in names]
    checks = {t.size: check_ours(t) for t in traces}
    for t in traces:
        log(f"{t.size}: {t.nbytes / MB:.1f} MB, {t.events:,} events, ours: {checks[t.size]}")

    started = time.monotonic()
    all_results: dict[str, dict[str, Result]] = {}
    all_verdicts: list[Verdict] = []
    for trace, n in zip(traces, reps, strict=True):
        all_results[trace.size] = run_size(trace, n, jobs, log, started=started, budget_s=args.budget_s)
        all_verdicts += verdicts(trace, all_results[trace.size])
    elapsed = time.monotonic() - started

    report = markdown(traces, all_results, jobs, checks, all_verdicts)
    print(f"{env['date']}, {env['cpus']} CPUs ({env['cpu']}), {env['memory_gib']} GiB, Python {env['python']}, "
          f"git {env['git']}, scanner {'built' if env['scanner'] else 'NOT built (pure path)'}; "
          f"load average at start {load_at_start[0]:.2f}; measuring took {elapsed:.0f} s\n")
    print("versions: " + ", ".join(f"{k} {v}" for k, v in env["versions"].items()) + "\n")
    print(report)
    if args.json_out:
        doc = {
            "environment": env, "load_average_at_start": load_at_start, "measure_s": elapsed,
            "traces": [asdict(t) for t in traces], "checks": checks,
            "results": {s: {k: [asdict(x) for x in r.samples] for k, r in res.items()}
                        for s, res in all_results.items()},
            "medians": {s: {k: {"wall_s": r.wall_s, "peak_mib": r.peak_mib} for k, r in res.items() if r.samples}
                        for s, res in all_results.items()},
            "verdicts": [asdict(v) for v in all_verdicts],
        }
        Path(args.json_out).write_text(json.dumps(doc, indent=2) + "\n")
    wrong = [s for s, c in checks.items() if not c.startswith("ok")]
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
