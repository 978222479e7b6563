"""The trace-file grammar: which files in a logdir the plugin reads as traces, and how the runner
names the ones it writes.

Like the scope grammar (``scopes.py``), this is a contract between the runner, which writes the
files, and the plugin, which lists them: both import it, and it imports nothing heavy. A run is
a directory holding trace files and, optionally, the runner's metadata file::

    trace     := worker [ "." span ] ".pt.trace.json" [ ".gz" ]
    candidate := worker [ "." span ] ".json" [ ".gz" ]   (not a trace name, not the metadata file)
    worker    := any name that does not start with "." (hidden files are never traces)
    span      := decimal digits (``tensorboard_trace_handler`` writes time.time_ns())
    metadata  := "tb_attn_run.json"

A file named as a trace is one by its name. A candidate is a trace only if its content says so:
its head shows a Chrome trace written by torch.profiler (``trace.kineto.is_kineto_head``, read by
``trace.sniff``). Other tools name their traces so: Hugging Face Accelerate's
``ProfileKwargs(output_trace_dir=...)`` writes ``profile_<process index>.json``, and
``prof.export_chrome_trace(path)`` writes whatever name it is given. Other JSON files in a logdir
(``config.json``, ``trainer_state.json``, another tool's Chrome trace) are candidates whose
content says no.

The runner always writes a span; a file without one (``worker.pt.trace.json``, as other tools
write) is still a trace. The worker is the shortest prefix that leaves a valid rest, so a worker
may hold dots: ``a.b.12.pt.trace.json`` is worker ``a.b``, span ``12``; a candidate's worker and
span are read the same way: ``profile_0.json`` is worker ``profile_0`` with no span,
``rank3.1700000000.json.gz`` worker ``rank3``, span ``1700000000``. The runner's temporary
files (``.{name}.tmp``) are hidden and end in ``.tmp``: no reader ever takes them for traces.
"""

from __future__ import annotations

import re

__all__ = ["CANDIDATE_NAME_RE", "CANDIDATE_SUFFIX", "GZIP_SUFFIX", "METADATA_FILE", "TRACE_NAME_RE", "TRACE_PATTERNS",
           "TRACE_SUFFIX", "display_name", "encodable", "parse_candidate_name", "parse_trace_name", "trace_file_name"]

TRACE_SUFFIX = ".pt.trace.json"
GZIP_SUFFIX = ".gz"
#: The runner's description of a run (``docs/runner.md``), next to its traces.
METADATA_FILE = "tb_attn_run.json"
#: A trace file's name; groups ``worker``, ``span`` (None when absent) and ``gz``.
TRACE_NAME_RE = re.compile(
    rf"^(?P<worker>[^.\n].*?)(?:\.(?P<span>\d+))?{re.escape(TRACE_SUFFIX)}(?P<gz>{re.escape(GZIP_SUFFIX)})?$")
CANDIDATE_SUFFIX = ".json"
#: A name whose file is a trace if its content says so (``parse_candidate_name`` also rules out the
#: trace names and the metadata file); groups as ``TRACE_NAME_RE``'s.
CANDIDATE_NAME_RE = re.compile(
    rf"^(?P<worker>[^.\n].*?)(?:\.(?P<span>\d+))?{re.escape(CANDIDATE_SUFFIX)}(?P<gz>{re.escape(GZIP_SUFFIX)})?$")
#: The trace files a logdir is searched for, in words (the message when none is found).
TRACE_PATTERNS = (f"*{TRACE_SUFFIX}[{GZIP_SUFFIX}], or *{CANDIDATE_SUFFIX}[{GZIP_SUFFIX}] "
                  "written by torch.profiler")


def parse_trace_name(name: str) -> tuple[str, str | None] | None:
    """(worker, span) of a trace file name, or None if it is not a trace file."""
    m = TRACE_NAME_RE.match(name)
    return None if m is None else (m.group("worker"), m.group("span"))


def parse_candidate_name(name: str) -> tuple[str, str | None] | None:
    """(worker, span) of a file that is a trace only if its content says so (``*.json[.gz]``, not
    hidden, neither a trace name nor the metadata file), or None for any other name."""
    if name == METADATA_FILE or TRACE_NAME_RE.match(name):
        return None
    m = CANDIDATE_NAME_RE.match(name)
    return None if m is None else (m.group("worker"), m.group("span"))


def trace_file_name(worker: str, span: int | str, *, gz: bool = False) -> str:
    """The file name of one span of ``worker``'s trace; ``parse_trace_name`` reads it back.
    Raises ValueError for a worker the plugin would not read back as written."""
    name = f"{worker}.{span}{TRACE_SUFFIX}" + (GZIP_SUFFIX if gz else "")
    if not str(span).isdigit() or parse_trace_name(name) != (worker, str(span)):
        raise ValueError(f"cannot name a trace for worker {worker!r} and span {span!r}")
    return name


# A backslash that would read as the start of an escape: before another backslash, before what
# ``encodable`` turns into an escape (a lone surrogate), or before the text of one (xNN, uNNNN).
_AMBIGUOUS = re.compile(r"\\(?=[\\\ud800-\udfff]|x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4})")


def display_name(name: str) -> str:
    """How a run, worker or file name is shown and asked for: ``encodable``, with each backslash
    that would read as the start of an escape doubled, so that two names never show alike (the byte
    0xFF is ``r\\xff``, the four characters ``\\xff`` are ``r\\\\xff``). Other names, a backslash
    in ``exp/a\\b`` included, come back unchanged."""
    if "\\" in name:
        name = _AMBIGUOUS.sub(r"\\\\", name)
    return encodable(name)


def encodable(name: str) -> str:
    """``name`` with each undecodable byte written ``\\xNN`` (and any other lone surrogate
    ``\\udXXX``): a string that every encoder takes. Valid text comes back unchanged."""
    try:
        name.encode("utf-8")
        return name
    except UnicodeEncodeError:
        pass
    if _only_escapes(name):  # as listed: back to the bytes, then each undecodable byte as \xNN
        return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return name.encode("utf-8", "backslashreplace").decode("utf-8")


def _only_escapes(name: str) -> bool:
    """Whether every surrogate in ``name`` is one that ``surrogateescape`` makes (U+DC80..U+DCFF)."""
    return all(not 0xD800 <= ord(c) <= 0xDFFF or 0xDC80 <= ord(c) <= 0xDCFF for c in name)
