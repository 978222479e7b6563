"""The names torch-tb-profiler's "PyTorch Profiler" tab lists a trace under, for the drill-down's
link to it.

That tab (torch-tb-profiler 0.4.3, ``torch_tb_profiler/profiler/loader.py`` and ``plugin.py``)
names things its own way:

- run: the directory's path relative to the logdir, as ours is, except the logdir itself, which
  it names by its last component (``os.path.basename`` of the absolute path) where we say ".";
- worker: the file name up to the optional ``.<digits>`` before ``.pt.trace.json[.gz]``, as
  ours is (``names.parse_trace_name``);
- span: not the digits of the file name but their rank among the worker's files, counted from 1
  after sorting the digits as strings ("1", "2"...; a file without digits is "default"). Its
  Spans list appears only when the worker has two or more.

It lists only files named ``*.pt.trace.json[.gz]``: a trace found by its content
(``profile_0.json``, ``names.parse_candidate_name``) is not in that tab, and gets no link.
"""

from __future__ import annotations

import bisect
import os

from tb_attn_plugin.trace.discover import Run, TraceFile
from tb_attn_plugin.types.views import ProfilerLink
from tb_attn_plugin.vocab.names import parse_trace_name

__all__ = ["PLUGIN_NAME", "profiler_link", "profiler_run_name", "profiler_span"]

PLUGIN_NAME = "pytorch_profiler"
NO_SPAN = "default"


def profiler_run_name(run: str, logdir: str) -> str:
    """The run's name in that tab: ours, but the logdir itself is named by its last component."""
    if run != ".":
        return run
    root = logdir.rstrip("/")
    if "://" in root:  # its remote paths are "/"-separated and already absolute
        return root.split("/")[-1]
    return os.path.basename(os.path.abspath(os.path.expanduser(os.path.expandvars(root))))


def profiler_span(files: tuple[TraceFile, ...] | list[TraceFile], trace: TraceFile) -> tuple[str, int]:
    """(the span's name in that tab, how many spans the worker has there) for one trace file."""
    mine = [f for f in files if f.worker == trace.worker and _listed(f)]
    spans = sorted(f.span for f in mine if f.span is not None)  # strings: "10" sorts before "9", as there
    count = len(set(spans)) + (1 if any(f.span is None for f in mine) else 0)
    if trace.span is None:
        return NO_SPAN, count
    # Equal digits (a.1.pt.trace.json and a.1.pt.trace.json.gz) take the last rank: its map is
    # filled in order, so the later one overwrites the earlier.
    return str(bisect.bisect_right(spans, trace.span)), count


def _listed(trace: TraceFile) -> bool:
    """Whether that tab lists the file: named as ``tensorboard_trace_handler`` names traces."""
    return parse_trace_name(trace.path.replace("\\", "/").rsplit("/", 1)[-1]) is not None


def profiler_link(run: Run, trace: TraceFile, logdir: str) -> ProfilerLink | None:
    """Where that tab shows ``trace``; None where it does not list it."""
    if not _listed(trace):
        return None
    span, count = profiler_span(run.files, trace)
    return ProfilerLink(plugin=PLUGIN_NAME, run=profiler_run_name(run.name, logdir), worker=trace.worker,
                        span=span, span_count=count)

