"""A run's headline figures for the runs list: attention time, its share and spread, peak, backend.

A generation's figures are per decode step (one token per sequence), over its decode steps alone,
with its prefill beside them: a mean over the prefill and the decode steps describes neither, and
their spread would always read "noisy".

The figures come from the run's representative worker (``spread.representative_worker``: with
several ranks, the one at the lower median by attention time), the one ``compare`` describes a run
by and the Ranks view's median row, so the runs list, Compare, the Ranks view and the run overview
of a one-worker run show the same numbers.
"""

from __future__ import annotations

from tb_attn_plugin.analysis.common.clock import on_device
from tb_attn_plugin.analysis.common.spread import representative_worker, spread
from tb_attn_plugin.types.schema import RunSummary
from tb_attn_plugin.types.views import RunFigures

__all__ = ["NO_ATTENTION", "run_figures"]

NO_ATTENTION = "no attention found in its traces"


def run_figures(run: RunSummary) -> RunFigures | None:
    """The figures of a summarized run; None when no trace of it was read or none has attention
    (``NO_ATTENTION``; the unreadable traces' errors are in ``run.errors``)."""
    if not any(w.layers for w in run.workers):
        return None
    w = representative_worker(run)
    device = on_device(w)
    core_only = sum(layer.core_only for layer in w.layers)
    per_step = [s.attention_device_us if device else s.attention_cpu_us for s in w.per_step]
    g = w.generation
    if g is not None and g.decode is not None:
        # A generation: per decode step, on the generation's own clock; the prefill beside it.
        decode = [t.attention_us for t in g.tokens if t.role == "decode"]
        return RunFigures(
            clock="device" if g.clock == "device" else "cpu", attention_us=g.decode.attention_us,
            attention_min_us=min(decode), attention_max_us=max(decode),
            attention_share=w.attention_share_device if g.clock == "device" else w.attention_share_cpu,
            peak_bytes=max((layer.peak_bytes for layer in w.layers), default=0), backend=w.backend,
            steps=w.step_count, decode_steps=len(decode), worker=w.worker, workers=len(run.workers),
            unreadable=len(run.errors),
            attention_spread=spread(decode) if len(decode) > 1 else None, per="decode",
            prefill_us=g.prefill.attention_us if g.prefill is not None else None, core_only=core_only,
            memory_recorded=w.memory_recorded, device_partial=w.device_partial)
    return RunFigures(
        clock="device" if device else "cpu",
        attention_us=w.attention_device_us if device else w.attention_cpu_us,
        attention_min_us=min(per_step) if per_step else None,
        attention_max_us=max(per_step) if per_step else None,
        attention_share=w.attention_share_device if device else w.attention_share_cpu,
        peak_bytes=max((layer.peak_bytes for layer in w.layers), default=0),
        backend=w.backend,
        steps=w.step_count,
        worker=w.worker,
        workers=len(run.workers),
        unreadable=len(run.errors),
        attention_spread=w.spread.get("attention_device_us" if device else "attention_cpu_us"),
        core_only=core_only,
        memory_recorded=w.memory_recorded,
        device_partial=w.device_partial,
    )
