"""The bounds on what one summary lists: a summary grows with what the trace holds, never with a
number it claims. Each bound, and what the user sees when a trace hits it:

- ``MAX_STEPS`` (4096) profiled steps: the trace is refused, a TraceError "the trace has N profiled
  steps, more than the 4096 this tool analyzes" (the cost grows with steps times events).
- ``scopes.MAX_HEADS`` (4096) for a head count read from an op's (B, H, S, D) shape: the op does
  not count towards the layer's ``heads_count``; diagnostic ``BAD_HEAD_COUNT``, counting such ops.
- ``MAX_HEAD_ROWS`` (16384) head rows, all layers together: a layer whose rows would not fit
  lists no heads at all; diagnostic ``HEAD_ROWS_DROPPED``, counting the rows not listed.
- ``MAX_NAME_CHARS`` (2000) per op, kernel, module or evidence name: the name is cut and ends in "…"
  (the decoder interns names clipped so already: ``trace.coerce.clip``).
- ``MAX_DIAGNOSTICS`` (64) diagnostics labels: the 63 most frequent are listed, the rest summed
  under "N more kinds of diagnostics"; each label is cut to ``MAX_LABEL_CHARS`` (200), ending in "…".
- ``MAX_PHASE_NAMES`` (5) kernel and op names per phase, ``MAX_EVIDENCE_NAMES`` (8) per finding's
  evidence, ``MAX_COLLECTIVE_KINDS`` (32) kinds of collectives (the rest summed as one).

Other bounds live where their values are read (most hits counted in ``diagnostics``): ``scopes``
(layer and head numbers), ``attribute`` (step numbers), ``infer``, ``flops`` (tensor sizes),
``ranks`` (ranks, world sizes, the run's map) and ``collectives`` (how kinds are merged).

``out_of_bounds`` checks all of these of a summary that was not made here: the summary cache's
entries, which anyone who can write the cache can forge (``MAX_SUMMARY_BYTES`` bounds one unread).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from tb_attn_plugin.trace.coerce import MAX_NAME_CHARS, clip
from tb_attn_plugin.trace.events import TraceError
from tb_attn_plugin.types.schema import SPREAD_KEYS, LayerStats, Roof, WorkerSummary
from tb_attn_plugin.vocab.scopes import MAX_HEADS, MAX_LAYERS, PHASES

__all__ = ["BAD_HEAD_COUNT", "HEAD_ROWS_DROPPED", "MAX_COLLECTIVE_KINDS", "MAX_DIAGNOSTICS", "MAX_EVIDENCE_NAMES",
           "MAX_HEAD_ROWS", "MAX_ITEMS", "MAX_LABEL_CHARS", "MAX_NAME_CHARS", "MAX_PHASE_NAMES", "MAX_STEPS",
           "MAX_SUMMARY_BYTES", "MAX_TEXT_CHARS", "HeadRowBudget", "check_steps", "clip", "fold_diagnostics",
           "merge_diagnostics", "out_of_bounds", "tally"]

MAX_STEPS = 4096
#: Head rows in one summary, all layers together: 16384 is 128 layers of 128 heads (GPT-3 has 96 x 96).
MAX_HEAD_ROWS = 1 << 14
HEAD_ROWS_DROPPED = f"head rows past {MAX_HEAD_ROWS} per trace (not listed)"
BAD_HEAD_COUNT = f"ops whose shapes give a head count out of range (over {MAX_HEADS}), ignored"
MAX_DIAGNOSTICS = 64
MAX_LABEL_CHARS = 200
MAX_PHASE_NAMES = 5
MAX_EVIDENCE_NAMES = 8
MAX_COLLECTIVE_KINDS = 32
#: What only the code that makes a summary bounds, checked of one read back: the items of a list
#: that code makes of a handful (notes, findings, a layer's backend evidence, a finding's figures,
#: peak classes), and the characters of any other text (a file name, a finding's explanation).
MAX_ITEMS = 256
MAX_TEXT_CHARS = 1 << 16
#: One summary, msgpack-encoded as the summary cache stores it: 16,384 measured head rows (with
#: their spreads) take about 4.3 MB; the largest summary of the public and production traces is
#: 0.8 MB (SD3.5's diffusion transformer). A larger summary is served, but not cached.
MAX_SUMMARY_BYTES = 8 << 20


def check_steps(steps: int) -> None:
    """Refuse a trace of more than ``MAX_STEPS`` profiled steps rather than analyze it for minutes:
    one with hundreds of thousands is hostile or broken."""
    if steps > MAX_STEPS:
        raise TraceError(f"the trace has {steps} profiled steps, more than the {MAX_STEPS} this tool analyzes")


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


def out_of_bounds(summary: WorkerSummary) -> str | None:
    """The first bound above that ``summary`` breaks (what, how many, the bound), or None. A
    summary made here keeps them all; one read back from the summary cache may have been forged.
    Figures are not checked: a forged figure is a wrong figure, not a larger one."""
    for what, n, bound in _sizes(summary):
        if n > bound:
            return f"{what}: {n}, over {bound}"
    return None


_Size = tuple[str, int, int]
_SPREAD_KEYS = frozenset(SPREAD_KEYS)


def _longest(texts: Iterable[str | None]) -> int:
    return max((len(t) for t in texts if t is not None), default=0)


def _spreads(spreads: Iterable[Mapping[str, object]]) -> int:
    return sum(1 for s in spreads if not s.keys() <= _SPREAD_KEYS)


def _sizes(s: WorkerSummary) -> Iterator[_Size]:
    yield "profiled steps", max(len(s.steps), len(s.per_step)), MAX_STEPS
    yield "kinds of diagnostics", len(s.diagnostics), MAX_DIAGNOSTICS
    yield "characters in a diagnostics label", _longest(s.diagnostics), MAX_LABEL_CHARS
    yield "kinds of collectives", len(s.collectives), MAX_COLLECTIVE_KINDS
    yield "characters in a collective's name", _longest(c.name for c in s.collectives), MAX_NAME_CHARS
    yield "notes or findings", max(len(s.notes), len(s.findings)), MAX_ITEMS
    yield "characters in a text", _longest([s.schema, s.file, s.worker, s.span, s.device, s.backend, s.headline,
                                            *s.notes]), MAX_TEXT_CHARS
    yield "spreads of unknown figures", _spreads([s.spread]), 0
    yield from _table(s.layers)
    for f in s.findings:
        e = f.evidence
        yield "names in a finding's evidence", max(len(e.ops), len(e.kernels)), MAX_EVIDENCE_NAMES
        yield "characters in a finding's name", _longest([*e.ops, *e.kernels]), MAX_NAME_CHARS
        yield "layers in a finding's evidence", len(e.layers), MAX_LAYERS
        yield "figures in a finding's evidence", len(e.details), MAX_ITEMS
        yield "characters in a finding's text", _longest([f.id, f.severity, f.title, f.explanation, f.suggestion,
                                                          *e.details, *(v for v in e.details.values()
                                                                        if isinstance(v, str))]), MAX_TEXT_CHARS
    g = s.generation
    if g is not None:
        yield "generation steps", len(g.tokens), MAX_STEPS
        yield "characters in a generation's text", _longest([g.source, g.clock, g.kv_cache, g.kv_dtype, g.fit_note,
                                                             g.kv_memory, g.reference,
                                                             *(t.role for t in g.tokens)]), MAX_TEXT_CHARS
        for phase in (g.prefill, g.decode):
            if phase is not None:
                yield from _table(phase.layers)
                yield from _roof(phase.roof)
    r = s.roofline
    if r is not None:
        yield "peak classes", len(r.peak_flops), MAX_ITEMS
        yield "characters in the roofline's text", _longest([r.device, r.source, r.clock, r.note, *r.peak_flops]), \
            MAX_TEXT_CHARS
        yield from _roof(r.attention)


def _table(layers: list[LayerStats]) -> Iterator[_Size]:
    """A per-layer table's bounds: the summary's, and the prefill's and decode's of a generation."""
    yield "layers", len(layers), MAX_LAYERS
    yield "head rows", sum(len(x.heads) for x in layers), MAX_HEAD_ROWS
    for x in layers:
        yield "phases in a layer", len(x.phases), len(PHASES) + 1
        yield "names in a layer's backend evidence", len(x.backend_evidence), MAX_ITEMS
        yield "dimensions in a layer's score shape", len(x.score_shape), MAX_ITEMS
        yield "characters in a name", _longest([x.module, *x.backend_evidence]), MAX_NAME_CHARS
        yield "characters in a text", _longest([x.backend, x.mask.spec if x.mask else None]), MAX_TEXT_CHARS
        yield "spreads of unknown figures", _spreads([x.spread, *(h.spread for h in x.heads)]), 0
        yield from _roof(x.roof)
        for p in x.phases:
            yield "names in a phase", max(len(p.kernel_names), len(p.ops)), MAX_PHASE_NAMES
            yield "characters in a name", _longest([*p.kernel_names, *p.ops]), MAX_NAME_CHARS
            yield "characters in a text", _longest([p.phase, p.dtype]), MAX_TEXT_CHARS
            yield "spreads of unknown figures", _spreads([p.spread]), 0
            yield from _roof(p.roof)


def _roof(roof: Roof | None) -> Iterator[_Size]:
    if roof is not None:
        yield "characters in a roof's text", _longest([roof.dtype, roof.verdict]), MAX_TEXT_CHARS
