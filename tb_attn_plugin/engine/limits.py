"""How much the engine takes on: the default trace-size limit, the one every door (the CLI's
``--max-trace-mb``, the tab's ``--tb_attn_max_trace_mb``, the notebook API) starts from, and the
``Limits`` a ``Workspace`` is given. Imports nothing heavy: the CLI's ``--help`` and TensorBoard's
launch read it."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_MAX_TRACE_BYTES", "DEFAULT_MAX_TRACE_MB", "Limits"]

#: A larger trace (uncompressed) is refused, not parsed.
DEFAULT_MAX_TRACE_BYTES = 4 << 30
DEFAULT_MAX_TRACE_MB = DEFAULT_MAX_TRACE_BYTES >> 20  # as the flags take it


@dataclass(frozen=True)
class Limits:
    """How much the engine takes on: ``max_trace_bytes`` (a larger trace, uncompressed, is
    refused, not parsed; None: no limit), ``parse_timeout_s`` (one file's reading and decoding),
    ``cache_bytes`` (the memory the summaries and analyses held take together) and
    ``keep_analyses`` (analyzed traces kept for the tab's views; 0: none, as a batch command
    needs)."""

    max_trace_bytes: int | None = DEFAULT_MAX_TRACE_BYTES
    parse_timeout_s: float | None = None
    cache_bytes: int = 1 << 30
    keep_analyses: int = 0
