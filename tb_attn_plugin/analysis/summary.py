"""Summarize one trace: attention per layer × phase × head, as means over profiled steps, with
its roofline, findings and headline.

``summarize_trace(analysis, metadata)`` is what the loader stores for a trace file. It runs four
stages, each once and in this order, each a new value from the one before:

1. measures: the measured summary (``summary_figures``: time, FLOPs and memory, materialized
   scores found by ``analysis.scores``, bounded by ``analysis.bounds``), the metadata's notes, the
   masks' work (``analysis.sparsity``) and the generation's figures (``analysis.generation``);
2. roofs: every phase's and layer's roof under the peaks, and the roofline (``analysis.roofline``);
3. findings: the rules' findings (``analysis.findings``, which read the measures alone) with the
   far-from-roof ones (which read the roofs), ordered once (``schema.finding_order``);
4. headline: the sentence that reads the figures and the top finding (``analysis.overview``).

The user's peaks (``with_peaks``) re-run the stages that read peaks, roofs to headline, on a
summary whose measures and rules' findings stand. Definitions are in ``schema.py`` and
``docs/summary.md``.
"""

from __future__ import annotations

import msgspec

from tb_attn_plugin.analysis.attribution.analyze import Analysis, analyze
from tb_attn_plugin.analysis.common.configs import checked_metadata
from tb_attn_plugin.analysis.findings.findings import find
from tb_attn_plugin.analysis.measures.generation import generation, generation_steps, restrict_steps
from tb_attn_plugin.analysis.measures.overview import headline
from tb_attn_plugin.analysis.measures.peaks import Peaks, peaks_for, with_overrides
from tb_attn_plugin.analysis.measures.roofline import far_from_roof, peaks_of, with_roofline
from tb_attn_plugin.analysis.measures.sparsity import with_masks
from tb_attn_plugin.analysis.measures.summary_figures import measure
from tb_attn_plugin.trace.events import Events
from tb_attn_plugin.types.schema import Finding, WorkerSummary, finding_order

__all__ = ["summarize", "summarize_analysis", "summarize_trace", "under_peaks", "with_peaks"]

#: The one finding that reads the roofs (``roofline.far_from_roof``): drawn again under other peaks.
_ROOF_FINDING = "far-from-roof"


def summarize(events: Events, *, file: str = "", worker: str = "", span: str | None = None) -> WorkerSummary:
    """The summary of decoded events, without findings."""
    return summarize_analysis(analyze(events), file=file, worker=worker, span=span)


def summarize_analysis(analysis: Analysis, *, file: str = "", worker: str = "", span: str | None = None
                       ) -> WorkerSummary:
    """The summary of an analyzed trace, without findings: its measured figures alone."""
    return measure(analysis, file=file, worker=worker, span=span)


def summarize_trace(analysis: Analysis, *, file: str, worker: str, span: str | None,
                    metadata: dict[str, object] | None = None) -> WorkerSummary:
    """The summary of an analyzed trace with its findings (``metadata``: the run's
    ``tb_attn_run.json``, which two rules read): what a trace file's summary is, everywhere."""
    metadata, ignored = checked_metadata(metadata)  # no count out of range reaches a figure
    measured = _measures(analysis, file=file, worker=worker, span=span, metadata=metadata, ignored=ignored)
    peaks = peaks_for(measured.device, analysis.events.meta.device_properties, metadata)
    return _from_roofs(measured, find(analysis, measured, metadata=metadata), peaks)


def with_peaks(summary: WorkerSummary, flops: float | None, bytes_per_s: float | None) -> WorkerSummary:
    """The summary under the user's peaks (``tb-attn --peak-flops/--peak-bw``, the tab's
    ``--tb_attn_peak_flops/--tb_attn_peak_bw``), in a new summary (the caches hold the trace's
    own). Without peaks, or without a roofline, the summary itself."""
    if summary.roofline is None or (flops is None and bytes_per_s is None):
        return summary
    return under_peaks(summary, with_overrides(peaks_of(summary.roofline), flops, bytes_per_s))


def under_peaks(summary: WorkerSummary, peaks: Peaks) -> WorkerSummary:
    """The summary's roofs, findings and headline again under ``peaks``: its measures and its
    rules' findings, which read no roof, stand as they are. A new summary."""
    return _from_roofs(summary, [f for f in summary.findings if f.id != _ROOF_FINDING], peaks)


def _measures(analysis: Analysis, *, file: str, worker: str, span: str | None, metadata: dict[str, object] | None,
              ignored: list[str]) -> WorkerSummary:
    """Stage 1: what the trace measures, with the masks' work and the generation's figures."""
    replace = msgspec.structs.replace
    measured = summarize_analysis(analysis, file=file, worker=worker, span=span)
    if ignored:
        measured = replace(measured, notes=[*measured.notes, *ignored])
    measured = with_masks(measured, metadata)
    steps = generation_steps(analysis)
    if steps is None:
        return measured
    # Each role's own per-layer table: the trace with only that role's steps counted.
    restricted = {role: summarize_analysis(restrict_steps(analysis, part)).layers
                  for role, part in steps.by_role().items()}
    return replace(measured, generation=generation(analysis, measured, metadata, steps, restricted))


def _from_roofs(measured: WorkerSummary, rules: list[Finding], peaks: Peaks) -> WorkerSummary:
    """Stages 2 to 4 on a measured summary and its rules' findings: roofs, findings, headline."""
    replace = msgspec.structs.replace
    roofed = with_roofline(measured, peaks)
    found = replace(roofed, findings=sorted([*rules, *far_from_roof(roofed)], key=finding_order))
    return replace(found, headline=headline(found))
