"""A serving engine's batches in ``tb-attn summarize``: the sentences of ``WorkerSummary.serving``."""

from __future__ import annotations

import textwrap

from tb_attn_plugin.types.encoding import printable
from tb_attn_plugin.types.schema import WorkerSummary

__all__ = ["serving_lines"]


def serving_lines(worker: WorkerSummary) -> list[str]:
    """``  serving: ...`` and its sentences, wrapped; nothing without a serving engine's annotations."""
    s = worker.serving
    if s is None:
        return []
    out = ["  serving:"]
    for sentence in s.sentences:
        out.extend(textwrap.wrap(printable(sentence), width=100, initial_indent="    ", subsequent_indent="      "))
    return out
