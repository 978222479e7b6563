"""The bounds on what one summary lists: a summary grows with what the trace holds, never with a
number it claims. Each bound, and what the user sees when a trace hits it:

- ``MAX_STEPS`` (4096) profiled steps: the trace is refused, a TraceError "the trace has N profiled
  steps, more than the 4096 this tool analyzes" (the cost grows with steps times events).
- ``scopes.MAX_HEADS`` (4096) for a head count read from an op's (B, H, S, D) shape: the op does
  not count towards the layer's ``heads_count``; diagnostic ``BAD_HEAD_COUNT``, counting such ops.
- ``MAX_HEAD_ROWS`` (16384) head rows, all layers together: a layer whose rows would not fit
  lists no heads at all; diagnostic ``HEAD_ROWS_DROPPED``, counting the rows not listed.
- ``MAX_NAME_CHARS`` (2000) per op, kernel, module or evidence name: the name is cut and ends in "…".
- ``MAX_DIAGNOSTICS`` (64) diagnostics labels: the 63 most frequent are listed, the rest summed
  under "N more kinds of diagnostics"; each label is cut to ``MAX_LABEL_CHARS`` (200), ending in "…".

Other bounds live where their values are read (most hits counted in ``diagnostics``): ``scopes``
(layer and head numbers), ``attribute`` (step numbers), ``infer``, ``flops`` (tensor sizes),
``ranks`` (ranks, world sizes, the run's map) and ``collectives`` (kinds).
"""

from __future__ import annotations

from tb_attn_plugin.scopes import MAX_HEADS
from tb_attn_plugin.trace.events import TraceError

__all__ = ["BAD_HEAD_COUNT", "HEAD_ROWS_DROPPED", "MAX_DIAGNOSTICS", "MAX_HEAD_ROWS", "MAX_LABEL_CHARS",
           "MAX_NAME_CHARS", "MAX_STEPS", "HeadRowBudget", "check_steps", "clip", "fold_diagnostics",
           "merge_diagnostics", "tally"]

MAX_STEPS = 4096
#: Head rows in one summary, all layers together: 16384 is 128 layers of 128 heads (GPT-3 has 96 x 96).
MAX_HEAD_ROWS = 1 << 14
HEAD_ROWS_DROPPED = f"head rows past {MAX_HEAD_ROWS} per trace (not listed)"
BAD_HEAD_COUNT = f"ops whose shapes give a head count out of range (over {MAX_HEADS}), ignored"
#: Longer names (kernels of deep templates run to about 1000 characters) are clipped in the summary.
MAX_NAME_CHARS = 2000
MAX_DIAGNOSTICS = 64
MAX_LABEL_CHARS = 200


def check_steps(steps: int) -> None:
    """Refuse a trace of more than ``MAX_STEPS`` profiled steps rather than analyze it for minutes:
    one with hundreds of thousands is hostile or broken."""
    if steps > MAX_STEPS:
        raise TraceError(f"the trace has {steps} profiled steps, more than the {MAX_STEPS} this tool analyzes")


def clip(name: str, limit: int = MAX_NAME_CHARS) -> str:
    """A name as the summary lists it: at most ``limit`` characters."""
    return name if len(name) <= limit else name[: limit - 1] + "…"


def tally(diagnostics: dict[str, int], label: str, n: int = 1) -> None:
    diagnostics[label] = diagnostics.get(label, 0) + n


class HeadRowBudget:
    """The head rows a summary may still list, out of ``MAX_HEAD_ROWS``."""

    def __init__(self, diagnostics: dict[str, int], limit: int = MAX_HEAD_ROWS) -> None:
        self.left = limit
        self.diagnostics = diagnostics

    def take(self, rows: int) -> bool:
        """Whether a layer's ``rows`` head rows fit; if not, none are listed (a partial list
        would look like missing heads) and they are counted under ``HEAD_ROWS_DROPPED``."""
        if rows > self.left:
            tally(self.diagnostics, HEAD_ROWS_DROPPED, rows)
            return False
        self.left -= rows
        return True


def merge_diagnostics(*parts: dict[str, int]) -> dict[str, int]:
    out: dict[str, int] = {}
    for part in parts:
        for label, n in part.items():
            tally(out, label, n)
    return out


def fold_diagnostics(diagnostics: dict[str, int]) -> dict[str, int]:
    """At most ``MAX_DIAGNOSTICS`` labels of at most ``MAX_LABEL_CHARS``, the most frequent,
    the rest counted together: the decoder makes one per unknown category, which a trace names."""
    if len(diagnostics) <= MAX_DIAGNOSTICS:
        return {clip(label, MAX_LABEL_CHARS): n for label, n in diagnostics.items()}
    items = sorted(diagnostics.items(), key=lambda kv: (-kv[1], kv[0]))
    out = {clip(label, MAX_LABEL_CHARS): n for label, n in items[: MAX_DIAGNOSTICS - 1]}
    rest = items[MAX_DIAGNOSTICS - 1:]
    out[f"{len(rest)} more kinds of diagnostics"] = sum(n for _, n in rest)
    return out
