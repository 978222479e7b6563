"""Many ranks: a 64-rank logdir summarized serially, in a pool of processes, on Dask, and by HTA.

The logdir: one trace written by our runner, as ``analysis_speed.py`` writes its traces (the
built-in 12-layer transformer, d_model 384, 12 heads, seq 128, batch 2, naive attention, training,
scopes on, uncompressed ``.pt.trace.json``), with 3 profiled steps: about 20 MB. It is copied into
one run directory as ``host_rank{r}.{span}.pt.trace.json`` for r = 0..63, each copy with
``"distributedInfo": {"rank": r, "world_size": 64, "backend": "nccl"}`` inserted as text right
after the opening brace (the 20 MB are not re-serialized; every copy is then parsed once to check
that it is valid JSON). HTA takes every ``*.json`` of its directory as a rank's trace, and the run
directory also holds ``tb_attn_run.json``, so HTA gets a directory of its own holding hard links to
the 64 files. Everything is cached under ``--traces-dir`` (outside the repository). The 64 files
are identical but for the rank: the cost of each is the same, as in a real data-parallel job.

Every job is a whole, fresh process, timed from spawn to exit, on the same 64 files (all in the OS
file cache: 1.3 GB on a 24 GiB machine). Peak RSS and CPU time are GNU ``time``'s: the CPU time of
the job and of every process it reaped (so a pool's workers count), the peak RSS of the largest of
them (not their sum). A Dask job's figures cover the client process only; the CPU the cluster
(scheduler, nannies, workers) used meanwhile is measured apart, from ``/proc``. The jobs:

- ``ours_jN``: ``tb-attn summarize RUN --format json --jobs N --no-progress`` for N = 1..4 (1 is
  the serial path: one file after another in this process);
- ``dask_W``: ``tb-attn summarize RUN --format json --executor dask://HOST:PORT --no-progress`` on a
  ``LocalCluster`` of W worker processes, one thread each (W = 2 and 1), started once, outside the
  timing, in a process of its own. A worker keeps the summaries it made in memory, so a second run
  on the same cluster would find them all there: before every timed run the workers' loaders are
  dropped (``fanout._WORKER_LOADERS``), which keeps their imports warm, as on a long-lived cluster.
  The first run on the fresh cluster (imports included) and a repeat run that finds the summaries
  in the workers' memory are measured once each, for information. Between its jobs a cluster is
  stopped (SIGSTOP), so that its idle work does not run beside other jobs. ``dask_2-notrim`` is a
  cluster with Dask's default worker environment less ``MALLOC_TRIM_THRESHOLD_=65536``
  (``distributed.nanny.pre-spawn-environ``), which makes our workers spend about 45% more CPU;
- ``hta``: ``TraceAnalysis(trace_dir=D)`` from Holistic Trace Analysis (its own venv,
  ``--hta-python``). It parses ranks in a ``fork`` pool of ``min(cpu_count, ranks, memory)``
  processes; with more than 8 ranks it first parses rank 0 once more under ``tracemalloc`` to size
  the pool. ``TraceAnalysis`` has no knob for it (``Trace.load_traces(use_multiprocessing=...,
  use_memory_profiling=...)`` has two switches, no process count). A log handler keeps its
  warnings and the INFO line naming its pool, with timestamps that split its time into phases;
- ``ours_one``: ``tb-attn summarize`` of rank 0's file alone (the fixed cost of a job);
- ``per_file``: one process that summarizes the 64 files one after another with
  ``fanout.summarize_task``, exactly what a pool or Dask worker runs per task, timing each
  (wall and CPU): the worker-side cost of a file;
- ``dask_connect``: import ``distributed`` and connect a client, nothing else (a Dask job's fixed
  cost beside ours' imports).

Rounds: each runs every job once, in an order that rotates from round to round; figures are
medians over rounds. Other people's processes share the machine: before each job the bench waits
(``--quiet-cores``, ``--quiet-max-s``) until they use at most half a core, and records the CPU
they used during the job. The report ends with a paper estimate for 1,000 ranks on 100 Dask
workers reading from S3 against HTA on one machine, every assumption an option. Check: every
summary of every job and round (serial, pools, Dask) must be byte for byte the first serial one,
and that one must list 64 workers with ranks 0..63, world size 64, no error, 12 naive layers and
3 steps each.

Run from the repository root::

    .venv/bin/python bench/fanout.py [--quick] [--rounds 3] [--json OUT] [--traces-dir DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
TB_ATTN = str(Path(PY).with_name("tb-attn"))
TIME = "/usr/bin/time"  # GNU time
HTA_PY = "/tmp/hta-venv/bin/python"
MB = 1_000_000
DEFAULT_TRACES_DIR = "/tmp/tb-attn-bench-traces/fanout"
#: Dask's own figure for its scheduler: "Each task suffers about 1ms of overhead"
#: (https://distributed.dask.org/en/latest/, "Motivation").
DASK_TASK_OVERHEAD_S = 0.001
Log = Callable[[str], None]


@dataclass(frozen=True)
class Setup:
    name: str
    ranks: int
    layers: int
    active: int  # profiled steps of the runner's trace: 3 at 12 layers is about 20 MB
    rounds: int
    d_model: int = 384
    heads: int = 12
    seq: int = 128
    batch: int = 2

    @property
    def key(self) -> str:
        return f"l{self.layers}-d{self.d_model}-h{self.heads}-s{self.seq}-b{self.batch}-a{self.active}"


FULL = Setup("full", ranks=64, layers=12, active=3, rounds=3)
QUICK = Setup("quick", ranks=8, layers=4, active=1, rounds=1)  # about 2.3 MB a rank
RUN_NAME = "builtin/naive/seq128"


@dataclass(frozen=True)
class Logdir:
    run_dir: str  # the 64 rank files and tb_attn_run.json
    hta_dir: str  # hard links to the rank files only
    rank0: str
    ranks: int
    file_bytes: int
    total_bytes: int
    layers: int
    active: int


@dataclass(frozen=True)
class Sample:
    wall_s: float
    peak_mib: float
    cpu_s: float  # user + system of the process and its reaped descendants
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Result:
    job: str
    samples: list[Sample] = field(default_factory=list)

    def median(self, what: str = "wall_s") -> float:
        return statistics.median(getattr(s, what) for s in self.samples)


class JobError(RuntimeError):
    pass


# --- the logdir -------------------------------------------------------------------------------

def write_trace(setup: Setup, traces_dir: Path, log: Log) -> Path:
    """The runner's run directory for this setup's model (written once, cached)."""
    final = traces_dir / "source" / setup.key
    run_dir = final / "logdir" / RUN_NAME
    if list(run_dir.glob("*.pt.trace.json")):
        return run_dir
    tmp = final.with_name(f".{final.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    cmd = [PY, "-m", "runner", "--model", "builtin", "--layers", str(setup.layers), "--d-model", str(setup.d_model),
           "--heads", str(setup.heads), "--seq", str(setup.seq), "--batch", str(setup.batch), "--impl", "naive",
           "--wait", "0", "--warmup", "1", "--active", str(setup.active), "--logdir", str(tmp / "logdir"),
           "--no-progress"]
    log(f"writing a trace: {' '.join(cmd[1:])}")
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "KINETO_LOG_LEVEL": "6"})
    if proc.returncode != 0:
        raise JobError(f"the runner failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    files = list((tmp / "logdir" / RUN_NAME).glob("*.pt.trace.json"))
    if len(files) != 1:
        raise JobError(f"expected one trace file from the runner, found {len(files)}")
    nbytes = files[0].stat().st_size
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    log(f"  {nbytes / MB:.1f} MB in {time.perf_counter() - t0:.0f} s")
    return run_dir


def with_rank(src: Path, dest: Path, rank: int, world: int) -> None:
    """A copy of src with distributedInfo inserted as text after the top-level object's brace."""
    with open(src, "rb") as f, open(dest, "wb") as out:
        head = f.read(1 << 16)
        brace = head.index(b"{")
        if b'"distributedInfo"' in head:
            raise JobError(f"{src} already declares distributedInfo")
        info = b'\n  "distributedInfo": {"rank": %d, "world_size": %d, "backend": "nccl"},' % (rank, world)
        out.write(head[:brace + 1] + info + head[brace + 1:])
        shutil.copyfileobj(f, out, 16 << 20)


def build_logdir(setup: Setup, traces_dir: Path, log: Log) -> Logdir:
    source_dir = write_trace(setup, traces_dir, log)
    (source,) = source_dir.glob("*.pt.trace.json")
    span = source.name.split(".")[1]
    base = traces_dir / f"{setup.key}-x{setup.ranks}"
    run_dir, hta_dir = base / "run", base / "hta"
    names = [f"host_rank{r}.{span}.pt.trace.json" for r in range(setup.ranks)]
    if not (base / "complete").exists():
        shutil.rmtree(base, ignore_errors=True)
        run_dir.mkdir(parents=True)
        hta_dir.mkdir()
        shutil.copyfile(source_dir / "tb_attn_run.json", run_dir / "tb_attn_run.json")
        t0 = time.perf_counter()
        for rank, name in enumerate(names):
            with_rank(source, run_dir / name, rank, setup.ranks)
            check_json(run_dir / name, rank, setup.ranks)
            try:
                os.link(run_dir / name, hta_dir / name)
            except OSError:
                shutil.copyfile(run_dir / name, hta_dir / name)
        (base / "complete").write_text(f"{source}\n")
        log(f"wrote {setup.ranks} rank files (each parsed once as JSON) in {time.perf_counter() - t0:.0f} s: "
            f"{base}")
    sizes = [(run_dir / n).stat().st_size for n in names]
    return Logdir(run_dir=str(run_dir), hta_dir=str(hta_dir), rank0=str(run_dir / names[0]), ranks=setup.ranks,
                  file_bytes=sizes[0], total_bytes=sum(sizes), layers=setup.layers, active=setup.active)


def check_json(path: Path, rank: int, world: int) -> None:
    try:
        import orjson

        doc = orjson.loads(path.read_bytes())
    except ImportError:
        doc = json.loads(path.read_bytes())
    info = doc.get("distributedInfo") if isinstance(doc, dict) else None
    if info != {"rank": rank, "world_size": world, "backend": "nccl"} or not doc.get("traceEvents"):
        raise JobError(f"{path}: not the trace with rank {rank} it should be ({info})")


# --- the Dask cluster -------------------------------------------------------------------------

_CLUSTER = """\
import os, sys, time
import dask
from distributed import Client, LocalCluster

def drop_loaders():
    from tb_attn_plugin.engine import fanout
    n = len(fanout._WORKER_LOADERS)
    fanout._WORKER_LOADERS.clear()
    return n

def trim_threshold():
    return os.environ.get("MALLOC_TRIM_THRESHOLD_", "unset")

if __name__ == "__main__":
    t0 = time.perf_counter()
    workers = int(sys.argv[1])
    if sys.argv[2] == "notrim":  # Dask's default environment for workers, less MALLOC_TRIM_THRESHOLD_
        environ = dict(dask.config.get("distributed.nanny.pre-spawn-environ"))
        environ.pop("MALLOC_TRIM_THRESHOLD_", None)
        dask.config.set({"distributed.nanny.pre-spawn-environ": environ})
    cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                           dashboard_address=None)
    client = Client(cluster)
    client.wait_for_workers(workers)
    trim = ",".join(sorted(set(client.run(trim_threshold).values())))
    print(cluster.scheduler_address, time.perf_counter() - t0, trim, flush=True)
    for line in sys.stdin:
        if line.strip() == "drop":
            print(sum(client.run(drop_loaders).values()), flush=True)
    client.close()
    cluster.close()
"""


class Cluster:
    """A LocalCluster in a process of its own, with Dask's default worker environment (``trim``)
    or that less ``MALLOC_TRIM_THRESHOLD_``. ``drop()`` clears the workers' loaders; between its
    jobs the cluster is stopped (SIGSTOP), so that its idle work (heartbeats, the workers'
    monitors and profiler: about 0.05 core a cluster here) does not run beside other jobs."""

    def __init__(self, workers: int, *, trim: bool, log: Log) -> None:
        self.workers, self.trim = workers, trim
        self.key = f"{workers}" if trim else f"{workers}-notrim"
        t0 = time.perf_counter()
        self.proc = subprocess.Popen([PY, "-c", _CLUSTER, str(workers), "trim" if trim else "notrim"], cwd=ROOT,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True, bufsize=1)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().split()
        if len(line) != 3:
            self.close()
            raise JobError(f"the LocalCluster of {workers} workers did not start")
        self.address, self.start_s, self.trim_seen = line[0], time.perf_counter() - t0, line[2]
        self.stopped = False
        log(f"LocalCluster of {workers} workers at {self.address}: ready {self.start_s:.1f} s after spawn; "
            f"MALLOC_TRIM_THRESHOLD_ in its workers: {self.trim_seen}")

    @property
    def url(self) -> str:
        return "dask://" + self.address.removeprefix("tcp://")

    def drop(self) -> int:
        """Drop the workers' loaders (and the summaries they hold in memory)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.cont()
        self.proc.stdin.write("drop\n")
        self.proc.stdin.flush()
        return int(self.proc.stdout.readline())

    def _signal(self, sig: signal.Signals) -> None:
        procs = _processes()
        for pid in own_pids(procs, root=self.proc.pid):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    def stop(self) -> None:
        if not self.stopped and self.proc.poll() is None:
            self._signal(signal.SIGSTOP)
            self.stopped = True

    def cont(self) -> None:
        if self.stopped:
            self._signal(signal.SIGCONT)
            self.stopped = False
            time.sleep(1.0)  # its periodic callbacks catch up before anything is timed

    def close(self) -> None:
        self.cont()
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# --- jobs -------------------------------------------------------------------------------------

_HTA = """\
import time
T0 = time.perf_counter()
import logging, sys
from hta.trace_analysis import TraceAnalysis

def say(msg):
    print(f"@{time.perf_counter() - T0:.3f} {msg}", file=sys.stderr, flush=True)

class Said(logging.Handler):  # HTA's warnings, as without a handler, and the INFO line naming its pool
    def emit(self, record):
        msg = record.getMessage()
        if record.levelno >= logging.WARNING or "processes for parsing" in msg:
            say(msg)

logging.getLogger("hta").addHandler(Said())
logging.getLogger("hta").setLevel(logging.INFO)
say("start")
analysis = TraceAnalysis(trace_dir=sys.argv[1])
say("loaded")
traces = analysis.t.traces
if len(traces) != int(sys.argv[2]) or any(len(df) == 0 for df in traces.values()):
    sys.exit(f"HTA loaded {len(traces)} ranks, some empty")
"""
# What a pool or Dask worker runs per file (fanout.summarize_task), timed file by file.
_PER_FILE = """\
import json, sys, time
import msgspec
from tb_attn_plugin.engine.fanout import Task, summarize_task
from tb_attn_plugin.engine.loader import Loader, resolve_runs
(run,) = resolve_runs(sys.argv[1])
loader = Loader()
meta = loader.metadata(run)
out = []
for t in run.files:
    task = msgspec.msgpack.encode(Task(t.path, t.name, t.worker, t.span, t.size, t.mtime, t.etag, meta,
                                       loader.max_trace_bytes, None, None))
    w0, c0 = time.perf_counter(), time.process_time()
    summarize_task(task)
    out.append([time.perf_counter() - w0, time.process_time() - c0])
print(json.dumps(out))
"""
_CONNECT = """\
import sys
from distributed import Client
Client(sys.argv[1], timeout=10, set_as_default=False).close()
"""


@dataclass(frozen=True)
class Job:
    key: str
    label: str
    argv: Callable[[Logdir], list[str]]
    summary: bool = False  # writes the run's summary (JSON) to stdout: checked against the serial one
    cluster: str = ""  # the key of the Dask cluster it runs on


def jobs_for(curve: Sequence[int], clusters: dict[str, Cluster], *, hta_python: str | None) -> list[Job]:
    out: list[Job] = []
    for n in curve:
        label = "ours, serial (`--jobs 1`)" if n == 1 else f"ours, `--jobs {n}`"
        out.append(Job(f"ours_j{n}", label, lambda d, n=n: [TB_ATTN, "summarize", d.run_dir, "--format", "json",
                                                          "--jobs", str(n), "--no-progress"], summary=True))
    for key, c in clusters.items():
        label = f"ours on Dask, {c.workers} worker{'s' if c.workers > 1 else ''} (`--executor dask://…`)"
        if not c.trim:
            label += ", workers without Dask's `MALLOC_TRIM_THRESHOLD_=65536`"
        out.append(Job(f"dask_{key}", label, lambda d, c=c: [TB_ATTN, "summarize", d.run_dir, "--format", "json",
                                                              "--executor", c.url, "--no-progress"],
                       summary=True, cluster=key))
    if hta_python is not None:
        out.append(Job("hta", "HTA 0.5.0 `TraceAnalysis(trace_dir=D)`",
                       lambda d: [hta_python, "-c", _HTA, d.hta_dir, str(d.ranks)]))
    out.append(Job("ours_one", "ours, rank 0's file alone", lambda d: [TB_ATTN, "summarize", d.rank0, "--format",
                                                                        "json", "--no-progress"]))
    out.append(Job("per_file", "`fanout.summarize_task` per file, one process (worker-side)",
                   lambda d: [PY, "-c", _PER_FILE, d.run_dir]))
    if clusters:
        c = next(iter(clusters.values()))
        out.append(Job("dask_connect", "import `distributed`, connect a client (nothing else)",
                       lambda d, c=c: [PY, "-c", _CONNECT, c.address], cluster=c.key))
    return out


def measure(argv: Sequence[str], stdout: str) -> Sample:
    """Run argv as a fresh process under GNU time: wall time from spawn to exit, the CPU time and
    the peak RSS (of the largest process) of its tree, as ``wait4`` reports them. Its stderr is
    kept beside stdout (``.err``)."""
    with open(stdout, "wb") as out, open(stdout + ".err", "w+b") as err, \
            tempfile.NamedTemporaryFile("r") as usage:
        t0 = time.perf_counter()
        proc = subprocess.run([TIME, "-q", "-f", "%M %U %S", "-o", usage.name, *argv], stdout=out, stderr=err,
                              cwd=ROOT, check=False)
        wall = time.perf_counter() - t0
        err.seek(0)
        tail = err.read()[-3000:].decode(errors="replace")
        if proc.returncode != 0:
            raise JobError(f"{' '.join(argv)[:300]} exited with {proc.returncode}:\n{tail}")
        peak_kib, user_s, sys_s = usage.read().split()[-3:]
    warnings = [line for line in tail.splitlines() if line.startswith("tb-attn: warning")]
    extra = {"warnings": warnings} if warnings else {}
    return Sample(wall_s=wall, peak_mib=int(peak_kib) / 1024, cpu_s=float(user_s) + float(sys_s), extra=extra)


_HTA_PROCS = re.compile(r"using (\d+) processes for parsing")
_HTA_FILE = re.compile(r"Overall parsing of .* in ([0-9.]+) seconds")
_HTA_AT = re.compile(r"^@([0-9.]+) (start|using \d+ processes|leaving parse_multiple_ranks|loaded)", re.MULTILINE)


def job_extra(job: Job, out_path: str) -> dict[str, Any]:
    """What a job says beyond its time: HTA's pool, phases and per-file parse times (its log),
    per_file's file times."""
    text = Path(out_path).read_text(errors="replace")
    if job.key == "hta":
        log = Path(out_path + ".err").read_text(errors="replace")
        procs = _HTA_PROCS.search(log)
        files = [float(x) for x in _HTA_FILE.findall(log)]
        at = {what.split()[0]: float(t) for t, what in _HTA_AT.findall(log)}
        phases = {}
        if len(at) == 4:  # from spawn: imports; rank 0 parsed alone; the pool; after it, in the parent
            phases = {"imports": at["start"], "list_and_rank0_alone": at["using"] - at["start"],
                      "pool_and_merge": at["leaving"] - at["using"], "align_and_index": at["loaded"] - at["leaving"]}
        return {"processes": int(procs.group(1)) if procs else None, "phases_s": phases,
                "files_parsed": len(files), "median_file_s": statistics.median(files) if files else None}
    if job.key == "per_file":
        times = json.loads(text.strip().splitlines()[-1])
        walls, cpus = [t[0] for t in times], [t[1] for t in times]
        return {"first_wall_s": walls[0], "median_wall_s": statistics.median(walls[1:] or walls),
                "median_cpu_s": statistics.median(cpus[1:] or cpus), "sum_wall_s": sum(walls)}
    return {}


def check_summary(path: str, logdir: Logdir) -> str:
    """The serial summary: one run, a worker per rank, ranks 0..N-1 from distributedInfo."""
    doc = json.loads(Path(path).read_bytes())
    runs = doc.get("runs") or [{}]
    workers = runs[0].get("workers") or []
    problems: list[str] = []
    if len(runs) != 1 or runs[0].get("errors"):
        problems.append(f"{len(runs)} runs, errors {runs[0].get('errors')}")
    ranks = sorted(w.get("rank") for w in workers if isinstance(w.get("rank"), int))
    if ranks != list(range(logdir.ranks)) or len(workers) != logdir.ranks:
        problems.append(f"{len(workers)} workers, ranks {ranks[:5]}…")
    for w in workers:
        want = f"host_rank{w.get('rank')}"
        if w.get("worker") != want or w.get("world_size") != logdir.ranks:
            problems.append(f"{w.get('worker')}: rank {w.get('rank')}, world size {w.get('world_size')}")
            break
        backends = {layer.get("backend") for layer in w.get("layers") or []}
        if len(w.get("layers") or []) != logdir.layers or backends != {"naive"} or w.get("step_count") != \
                logdir.active:
            problems.append(f"{w.get('worker')}: {len(w.get('layers') or [])} layers, {backends}, "
                            f"{w.get('step_count')} steps")
            break
    if problems:
        return "WRONG: " + "; ".join(problems)
    return (f"ok: {len(workers)} workers, ranks 0..{logdir.ranks - 1} (world size {logdir.ranks}), "
            f"{logdir.layers} naive layers and {logdir.active} steps each")


def digest(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


_TICK = os.sysconf("SC_CLK_TCK")


def busy_cpu_s() -> float:
    """CPU seconds the machine has been busy since boot, every process counted (``/proc/stat``:
    all but idle and iowait; steal, the hypervisor's, counts as busy)."""
    with open("/proc/stat") as f:
        user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in f.readline().split()[1:9])
    return (user + nice + system + irq + softirq + steal) / _TICK


def _processes() -> dict[int, tuple[int, float]]:
    """pid -> (parent pid, CPU seconds so far) of every live process."""
    out: dict[int, tuple[int, float]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[int(entry.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / _TICK)
    return out


def own_cpu_s() -> float:
    """CPU seconds of this process and its live descendants (the Dask clusters): what the bench
    itself uses between jobs, apart from a job's process tree (reaped, and counted by GNU time)."""
    procs = _processes()
    return sum(procs[pid][1] for pid in own_pids(procs) if pid in procs)


class Quiet:
    """Before each job, wait until the machine is quiet: at most ``cores`` busy over 2 s (other
    people's tests share it), for ``max_wait_s`` in all the bench; then measure regardless."""

    def __init__(self, cores: float, max_wait_s: float, log: Log) -> None:
        self.cores, self.max_wait_s, self.log = cores, max_wait_s, log
        self.waited_s = 0.0
        self.gave_up = 0

    def wait(self) -> None:
        t0 = time.monotonic()
        said = False
        while True:
            b0, o0 = busy_cpu_s(), own_cpu_s()
            time.sleep(2.0)
            load = (busy_cpu_s() - b0 - (own_cpu_s() - o0)) / 2.0  # others' processes only
            if load <= self.cores:
                break
            if self.waited_s + time.monotonic() - t0 >= self.max_wait_s:
                self.gave_up += 1
                break
            if not said:
                self.log(f"  waiting: {load:.1f} cores busy (others' processes: "
                         f"{', '.join(busiest()) or '?'})")
                said = True
            time.sleep(8.0)
        self.waited_s += time.monotonic() - t0


def busiest(n: int = 3) -> list[str]:
    """Others' processes with the most CPU over 1 s, for the log."""
    before = _processes()
    time.sleep(1.0)
    after = _processes()
    mine = own_pids(after)
    used = sorted(((cpu - before[pid][1], pid) for pid, (_, cpu) in after.items()
                   if pid in before and pid not in mine), reverse=True)[:n]
    names = []
    for cpu, pid in used:
        if cpu > 0.05:
            try:
                args = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            names.append(f"{args[:60].strip()} ({cpu:.1f})")
    return names


def own_pids(procs: dict[int, tuple[int, float]], root: int | None = None) -> set[int]:
    """``root`` (default: this process) and its descendants."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = set(), [os.getpid() if root is None else root]
    while todo:
        pid = todo.pop()
        out.add(pid)
        todo += children.get(pid, [])
    return out


def run_rounds(logdir: Logdir, jobs: Sequence[Job], rounds: int, clusters: dict[str, Cluster], out_dir: Path,
               quiet: Quiet, log: Log) -> tuple[dict[str, Result], dict[str, set[str]]]:
    """Every job once a round, in rotating order. Beside its own figures, each sample records
    the CPU the Dask clusters used meanwhile (``cluster_cpu_s``) and what every other process of
    the machine did (``others_cpu_s``: the machine's busy time less the job's and the clusters')."""
    results = {job.key: Result(job.key) for job in jobs}
    digests: dict[str, set[str]] = {}
    for rnd in range(rounds):
        log(f"round {rnd + 1}/{rounds}: load average {os.getloadavg()[0]:.2f}")
        shift = rnd % len(jobs)
        for job in [*jobs[shift:], *jobs[:shift]]:
            if job.cluster:
                clusters[job.cluster].drop()  # the summaries of the last run leave the workers' memory
            quiet.wait()
            out = str(out_dir / f"{job.key}.out")
            o0, b0 = own_cpu_s(), busy_cpu_s()
            sample = measure(job.argv(logdir), out)
            busy, cluster = busy_cpu_s() - b0, own_cpu_s() - o0
            if job.cluster:
                clusters[job.cluster].stop()
            accounting = {"cluster_cpu_s": round(cluster, 2), "others_cpu_s": round(busy - sample.cpu_s - cluster, 2)}
            sample = Sample(sample.wall_s, sample.peak_mib, sample.cpu_s,
                            {**sample.extra, **accounting, **job_extra(job, out)})
            results[job.key].samples.append(sample)
            if job.summary:
                digests.setdefault(job.key, set()).add(digest(out))
                if job.key == "ours_j1" and rnd == 0:
                    shutil.copyfile(out, out_dir / "serial.json")
            log(f"round {rnd + 1}/{rounds} {job.key:12} {sample.wall_s:7.2f} s {sample.cpu_s:7.2f} s CPU "
                f"{sample.peak_mib:6.0f} MiB {json.dumps(sample.extra) if sample.extra else ''}")
    return results, digests


# --- report -----------------------------------------------------------------------------------

def med(results: dict[str, Result], key: str, what: str = "wall_s") -> float | None:
    r = results.get(key)
    return r.median(what) if r is not None and r.samples else None


def med_extra(results: dict[str, Result], key: str, what: str) -> float | None:
    r = results.get(key)
    values = [s.extra[what] for s in r.samples if s.extra.get(what) is not None] if r is not None else []
    return statistics.median(values) if values else None


def estimate(results: dict[str, Result], logdir: Logdir, args: argparse.Namespace) -> dict[str, Any] | None:
    """A paper estimate: ``args.target_ranks`` files of this size on ``args.target_workers`` Dask
    workers reading from S3, against HTA on one machine. Every input is named in the result."""
    dask = next((k for k in ("dask_2", "dask_1") if med(results, k) is not None), None)
    in_process = med_extra(results, "per_file", "median_wall_s")
    cluster_cpu = med_extra(results, dask, "cluster_cpu_s") if dask is not None else None
    # A task's cost on a worker: what the Dask workers spent per file (CPU, Dask's default worker
    # environment, nannies and scheduler included), else the in-process time of one file.
    per_file = cluster_cpu / logdir.ranks if cluster_cpu is not None else in_process
    if per_file is None:
        return None
    n, w = args.target_ranks, args.target_workers
    mb = logdir.file_bytes / MB
    s3_s = mb / args.s3_mb_s
    waves = math.ceil(n / w)
    compute = waves * (per_file + s3_s)
    scheduler = n * DASK_TASK_OVERHEAD_S
    # The client's fixed cost: importing distributed and connecting, plus ours' start-up and output
    # (one file's job less the file's own work); its cost per file: the rest of its CPU time on Dask.
    one_wall, one_cpu = med(results, "ours_one"), med(results, "ours_one", "cpu_s")
    file_wall = in_process or 0.0
    file_cpu = med_extra(results, "per_file", "median_cpu_s") or 0.0
    client_fixed = (med(results, "dask_connect") or 0.0) + (max(0.0, one_wall - file_wall) if one_wall else 0.0)
    fixed_cpu = (med(results, "dask_connect", "cpu_s") or 0.0) + (max(0.0, one_cpu - file_cpu) if one_cpu else 0.0)
    client_per_file = 0.0
    if dask is not None:
        client_per_file = max(0.0, ((med(results, dask, "cpu_s") or 0.0) - fixed_cpu) / logdir.ranks)
    ours = client_fixed + compute + scheduler + n * client_per_file
    out: dict[str, Any] = {
        "ranks": n, "workers": w, "file_mb": mb, "s3_mb_s_per_worker": args.s3_mb_s, "s3_read_s": s3_s,
        "per_file_s": per_file, "per_file_from": "Dask workers' CPU per file" if cluster_cpu is not None
        else "one process, per file", "waves": waves, "compute_s": compute, "scheduler_s": scheduler,
        "client_fixed_s": client_fixed, "client_per_file_s": client_per_file, "client_s": n * client_per_file,
        "ours_total_s": ours,
    }
    hta = results.get("hta")
    if hta is not None and hta.samples:
        phases = [s.extra.get("phases_s") or {} for s in hta.samples]
        procs = statistics.median(s.extra.get("processes") or 1 for s in hta.samples)

        def phase(name: str) -> float:
            return statistics.median(p.get(name, 0.0) for p in phases)

        wall, peak, r, cores = hta.median(), hta.median("peak_mib"), logdir.ranks, args.hta_cores
        fixed = phase("imports") + phase("list_and_rank0_alone")
        pool_core_s = phase("pool_and_merge") * procs / r  # per rank, as core-seconds
        serial = (wall - fixed - phase("pool_and_merge")) / r  # per rank: align, index, exit, in one process
        out.update({
            "hta_cores": cores, "hta_processes_here": procs, "hta_fixed_s": fixed,
            "hta_pool_core_s_per_rank": pool_core_s, "hta_pool_s": n * pool_core_s / cores,
            "hta_serial_s_per_rank": serial, "hta_serial_s": n * serial,
            "hta_download_s": n * mb / args.s3_machine_mb_s, "s3_machine_mb_s": args.s3_machine_mb_s,
            "hta_peak_mib_per_rank": peak / r, "hta_peak_gib": peak / r * n / 1024,
        })
        out["hta_total_s"] = fixed + out["hta_pool_s"] + out["hta_serial_s"] + out["hta_download_s"]
    return out


def markdown(logdir: Logdir, jobs: Sequence[Job], results: dict[str, Result], check: str, same: str,
             extras: dict[str, Any], est: dict[str, Any] | None) -> str:
    n = logdir.ranks
    lines = [f"{n} rank files of {logdir.file_bytes / MB:.1f} MB ({logdir.total_bytes / MB:.0f} MB in all); "
             f"serial summary {check}; {same}", ""]
    lines += ["| job | wall s | files/s | CPU s, job | CPU s, Dask cluster | others' CPU s meanwhile | "
              "peak MiB (largest process) |", "|---|---|---|---|---|---|---|"]
    for job in jobs:
        r = results[job.key]
        if not r.samples:
            continue
        wall = r.median()
        rate = f"{n / wall:.1f}" if job.summary or job.key == "hta" else ""
        cluster = f"{med_extra(results, job.key, 'cluster_cpu_s') or 0.0:.2f}" if job.cluster else ""
        lines.append(f"| {job.label} | {wall:.2f} | {rate} | {r.median('cpu_s'):.2f} | {cluster} | "
                     f"{med_extra(results, job.key, 'others_cpu_s') or 0.0:.2f} | {r.median('peak_mib'):.0f} |")
    lines.append("")

    def ratio(label: str, num: str, den: str) -> None:
        a, b = med(results, num), med(results, den)
        if a is not None and b is not None:
            lines.append(f"| {label} | {a:.2f} / {b:.2f} | **{a / b:.2f}x** |")

    lines += ["| ratio (one run, medians) | seconds | ratio |", "|---|---|---|"]
    ratio("serial / `--jobs 2`", "ours_j1", "ours_j2")
    ratio("serial / Dask, 2 workers", "ours_j1", "dask_2")
    ratio("HTA / ours `--jobs 2`", "hta", "ours_j2")
    ratio("HTA / ours serial", "hta", "ours_j1")
    ratio("HTA / ours on Dask, 2 workers", "hta", "dask_2")
    lines.append("")

    base = med(results, "ours_j1")
    curve = [j for j in jobs if j.summary]
    if base is not None and curve:
        lines += ["| scaling | wall s | speed-up vs serial | CPU s |", "|---|---|---|---|"]
        for job in curve:
            wall, cpu = med(results, job.key), med(results, job.key, "cpu_s")
            if wall is not None and cpu is not None:
                lines.append(f"| {job.label} | {wall:.2f} | {base / wall:.2f}x | {cpu:.2f} |")
        lines.append("")

    lines += ["| per file | seconds |", "|---|---|"]
    if base is not None:
        lines.append(f"| serial wall / {n} | {base / n:.3f} |")
        one = med(results, "ours_one")
        if one is not None and n > 1:
            lines.append(f"| marginal: (serial - one file) / {n - 1} | {(base - one) / (n - 1):.3f} |")
        lines.append(f"| serial CPU / {n} | {(med(results, 'ours_j1', 'cpu_s') or 0) / n:.3f} |")
    for what, label in (("median_wall_s", "worker-side `summarize_task`, wall (median file)"),
                        ("median_cpu_s", "worker-side `summarize_task`, CPU (median file)"),
                        ("first_wall_s", "worker-side, the first file of a process (lazy imports)")):
        v = med_extra(results, "per_file", what)
        if v is not None:
            lines.append(f"| {label} | {v:.3f} |")
    for job in jobs:
        cluster = med_extra(results, job.key, "cluster_cpu_s") if job.cluster and job.summary else None
        if cluster is not None:
            lines.append(f"| {job.label}: the cluster's CPU / {n} (workers, nannies, scheduler) | "
                         f"{cluster / n:.3f} |")
    hta_cpu = med(results, "hta", "cpu_s")
    if hta_cpu is not None:
        lines.append(f"| HTA CPU / {n} | {hta_cpu / n:.3f} |")
    hta_file = med_extra(results, "hta", "median_file_s")
    if hta_file is not None:
        lines.append(f"| HTA's own per-file parse time in its pool (its log, median file) | {hta_file:.3f} |")
    lines.append("")

    for key, value in extras.items():
        lines.append(f"- {key}: {value}")
    if est is not None:
        lines += ["", f"Paper estimate, {est['ranks']:,} ranks of {est['file_mb']:.1f} MB on {est['workers']} Dask "
                      f"workers reading S3 at {est['s3_mb_s_per_worker']:.0f} MB/s each (assumed):", "",
                  "| term | seconds |", "|---|---|",
                  f"| {est['waves']} waves x (per file {est['per_file_s']:.3f}, {est['per_file_from']}, + S3 read "
                  f"{est['s3_read_s']:.3f}) | {est['compute_s']:.1f} |",
                  f"| scheduler: {est['ranks']:,} tasks x 1 ms (Dask's figure) | {est['scheduler_s']:.1f} |",
                  f"| client: start, import `distributed`, connect, write the output (measured) | "
                  f"{est['client_fixed_s']:.1f} |",
                  f"| client: {est['ranks']:,} x {est['client_per_file_s'] * 1000:.1f} ms of CPU per file "
                  f"(submit, receive, assemble; measured on Dask) | {est['client_s']:.1f} |",
                  f"| **ours on {est['workers']} workers** | **{est['ours_total_s']:.0f}** |"]
        if "hta_total_s" in est:
            lines += [f"| HTA: imports and rank 0 parsed alone to size its pool (measured) | "
                      f"{est['hta_fixed_s']:.0f} |",
                      f"| HTA: its pool, {est['ranks']:,} x {est['hta_pool_core_s_per_rank']:.2f} core-s per rank "
                      f"(measured) / {est['hta_cores']} cores (assumed, perfect scaling) | {est['hta_pool_s']:.0f} |",
                      f"| HTA: after the pool, in one process, {est['ranks']:,} x "
                      f"{est['hta_serial_s_per_rank']:.3f} s per rank (measured) | {est['hta_serial_s']:.0f} |",
                      f"| HTA: download {est['ranks'] * est['file_mb'] / 1000:.0f} GB at "
                      f"{est['s3_machine_mb_s']:.0f} MB/s (assumed) | {est['hta_download_s']:.0f} |",
                      f"| **HTA, one {est['hta_cores']}-core machine** (holding about {est['hta_peak_gib']:.0f} GiB: "
                      f"{est['hta_peak_mib_per_rank']:.0f} MiB per rank, measured) | **{est['hta_total_s']:.0f}** |"]
    return "\n".join(lines) + "\n"


def environment(hta_py: str) -> dict[str, Any]:
    """The machine as ``analysis_speed`` records it, with this bench's versions and HTA's venv."""
    from analysis_speed import _version
    from analysis_speed import environment as machine

    hta = subprocess.run([hta_py, "-c", "import importlib.metadata as m, platform; "
                                        "print(m.version('HolisticTraceAnalysis'), m.version('pandas'), "
                                        "platform.python_version())"], capture_output=True, text=True)
    hta_v = hta.stdout.split() if hta.returncode == 0 else ["not installed"] * 3
    env = machine()
    env["versions"] = {**{d: _version(d) for d in ("tb-attn", "dask", "distributed", "msgspec", "numpy")},
                       "HolisticTraceAnalysis": hta_v[0], "pandas (HTA's venv)": hta_v[1] if len(hta_v) > 1 else "",
                       "python (HTA's venv)": hta_v[2] if len(hta_v) > 2 else ""}
    return env


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--quick", action="store_true", help="8 ranks of about 2.3 MB (4 layers, 1 step), one round")
    p.add_argument("--rounds", type=int, default=None, help=f"rounds (default {FULL.rounds}; 1 with --quick)")
    p.add_argument("--ranks", type=int, default=None, help=f"rank files (default {FULL.ranks}; {QUICK.ranks} quick)")
    p.add_argument("--curve", default="1,2,3,4", help="--jobs values to time (default 1,2,3,4; 1 is the serial path)")
    p.add_argument("--dask-workers", default="2,1", help="Dask LocalCluster sizes to time (default 2,1; '' for none)")
    p.add_argument("--dask-notrim", default="2",
                   help="LocalCluster sizes to time also without Dask's MALLOC_TRIM_THRESHOLD_ for its workers "
                        "(default 2; '' for none)")
    p.add_argument("--no-hta", action="store_true", help="do not run HTA")
    p.add_argument("--hta-python", default=HTA_PY, help=f"the Python of HTA's venv (default {HTA_PY})")
    p.add_argument("--traces-dir", default=DEFAULT_TRACES_DIR, help=f"trace cache (default {DEFAULT_TRACES_DIR})")
    p.add_argument("--json", dest="json_out", help="write every sample, the checks and the estimate here")
    p.add_argument("--quiet-cores", type=float, default=0.5,
                   help="before each job, wait until at most this many cores are busy (default 0.5)")
    p.add_argument("--quiet-max-s", type=float, default=1800.0,
                   help="wait so at most this long in all, then measure regardless (default 1800)")
    est = p.add_argument_group("the paper estimate")
    est.add_argument("--target-ranks", type=int, default=1000)
    est.add_argument("--target-workers", type=int, default=100)
    est.add_argument("--s3-mb-s", type=float, default=100.0, help="assumed S3 read rate of one worker (MB/s)")
    est.add_argument("--hta-cores", type=int, default=32, help="assumed cores of HTA's one machine")
    est.add_argument("--s3-machine-mb-s", type=float, default=1000.0,
                     help="assumed S3 download rate of HTA's one machine (MB/s)")
    args = p.parse_args(argv)

    def log(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    setup = QUICK if args.quick else FULL
    if args.ranks is not None:
        setup = Setup(setup.name, args.ranks, setup.layers, setup.active, setup.rounds)
    rounds = args.rounds or setup.rounds
    hta = not args.no_hta and Path(args.hta_python).exists()
    if not args.no_hta and not hta:
        log(f"no HTA at {args.hta_python}: HTA is left out")
    subprocess.run([PY, "-m", "compileall", "-q", str(ROOT / "tb_attn_plugin")], check=True,
                   stdout=subprocess.DEVNULL)  # as an install does (see analysis_speed.py)
    env = environment(args.hta_python)
    traces_dir = Path(args.traces_dir)
    traces_dir.mkdir(parents=True, exist_ok=True)
    logdir = build_logdir(setup, traces_dir, log)
    log(f"{logdir.ranks} ranks x {logdir.file_bytes / MB:.1f} MB in {logdir.run_dir}")

    clusters: dict[str, Cluster] = {}
    extras: dict[str, Any] = {}
    load_at_start = os.getloadavg()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tb-attn-fanout-") as tmp:
        out_dir = Path(tmp)
        quiet = Quiet(args.quiet_cores, args.quiet_max_s, log)
        try:
            for w, trim in [(w, True) for w in _ints(args.dask_workers)] + \
                    [(w, False) for w in _ints(args.dask_notrim)]:
                c = Cluster(w, trim=trim, log=log)
                clusters[c.key] = c
                quiet.wait()
                extras[f"Dask {c.key}: LocalCluster ready after spawn, s"] = round(c.start_s, 2)
                extras[f"Dask {c.key}: MALLOC_TRIM_THRESHOLD_ in its workers"] = c.trim_seen
                first = measure([TB_ATTN, "summarize", logdir.run_dir, "--format", "json", "--executor", c.url,
                                 "--no-progress"], str(out_dir / "first.out"))
                c.stop()
                extras[f"Dask {c.key}: first run on the fresh cluster (workers import), s"] = round(first.wall_s, 2)
                log(f"Dask {c.key}: first run on the fresh cluster {first.wall_s:.2f} s")
            jobs = jobs_for(_ints(args.curve), clusters, hta_python=args.hta_python if hta else None)
            results, digests = run_rounds(logdir, jobs, rounds, clusters, out_dir, quiet, log)
            extras["waiting for a quiet machine, s"] = round(quiet.waited_s)
            if quiet.gave_up:
                extras["jobs measured on a busy machine (the wait ran out)"] = quiet.gave_up
            for key, cluster in clusters.items():  # summaries still in the workers' memory from the last round
                cluster.cont()
                quiet.wait()
                again = measure([TB_ATTN, "summarize", logdir.run_dir, "--format", "json", "--executor",
                                 cluster.url, "--no-progress"], str(out_dir / "again.out"))
                cluster.stop()
                extras[f"Dask {key}: a repeat run, summaries in the workers' memory, s"] = round(again.wall_s, 2)
                digests.setdefault(f"dask_{key}_repeat", set()).add(digest(str(out_dir / "again.out")))
        finally:
            for cluster in clusters.values():
                cluster.close()
        serial = out_dir / "serial.json"
        check = check_summary(str(serial), logdir) if serial.exists() else "WRONG: no serial run"
        all_digests = set().union(*digests.values()) if digests else set()
        count = sum(len(results[k].samples) if k in results else 1 for k in digests)
        same = (f"all {count} summaries of "
                f"{', '.join(sorted(digests))} byte-identical" if len(all_digests) == 1
                else "DIFFERENT summaries: " + "; ".join(f"{k}: {sorted(d)}" for k, d in digests.items()))
    elapsed = time.monotonic() - started
    procs = [s.extra.get("processes") for s in results.get("hta", Result("hta")).samples]
    if procs:
        extras["HTA's parsing pool (its log: 'using N processes for parsing')"] = sorted(set(procs))
        phases = [smp.extra.get("phases_s") or {} for smp in results["hta"].samples]
        extras["HTA's phases from spawn, medians (its log, timestamped), s"] = {
            name: round(statistics.median(p.get(name, 0.0) for p in phases), 2) for name in phases[0]}
    est = estimate(results, logdir, args)
    report = markdown(logdir, jobs, results, check, same, extras, est)
    print(f"{env['date']}, {env['cpus']} CPUs ({env['cpu']}), {env['memory_gib']} GiB, Python {env['python']}, "
          f"git {env['git']}; load average at start {load_at_start[0]:.2f}; {rounds} round(s), "
          f"measuring took {elapsed:.0f} s\n")
    print("versions: " + ", ".join(f"{k} {v}" for k, v in env["versions"].items()) + "\n")
    print(report)
    if args.json_out:
        doc = {
            "environment": env, "load_average_at_start": load_at_start, "measure_s": elapsed, "rounds": rounds,
            "logdir": asdict(logdir), "check": check, "identical": same, "extras": extras, "estimate": est,
            "samples": {k: [asdict(s) for s in r.samples] for k, r in results.items()},
            "medians": {k: {"wall_s": r.median(), "cpu_s": r.median("cpu_s"), "peak_mib": r.median("peak_mib")}
                        for k, r in results.items() if r.samples},
        }
        Path(args.json_out).write_text(json.dumps(doc, indent=2) + "\n")
    return 0 if check.startswith("ok") and len(all_digests) == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
