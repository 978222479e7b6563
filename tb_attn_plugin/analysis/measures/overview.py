"""A trace's headline: one sentence on where its attention time goes and what the top finding
would save at most, the first line of the run overview (tab and CLI: ``WorkerSummary.headline``).

It reads only the summary and its findings: every figure in it is one the summary states, on
the clock the trace is judged by (device time where the trace has kernels, else CPU time). Where
every layer is its core alone (``LayerStats.core_only``: inferred, no projection found around
it), it speaks of the attention core, and where some are, it says how many.
"""

from __future__ import annotations

from tb_attn_plugin.analysis.common.clock import on_device
from tb_attn_plugin.analysis.common.wording import attention as attention_noun
from tb_attn_plugin.analysis.common.wording import core_only_note, duration, spread_words
from tb_attn_plugin.types.schema import Finding, WorkerSummary, finding_order

__all__ = ["headline"]

#: Phases named in the headline: the largest, while each holds at least ``_MIN_SHARE`` of attention.
_TOP_PHASES = 3
_MIN_SHARE = 0.05


def headline(w: WorkerSummary) -> str:
    """"Attention is 35% of the CPU step time (32.5 ms of 93.1 ms per step, 4 layers): forward 43%,
    backward 57%; by phase (forward and backward), qkv_proj 30%, mask 17%, softmax 12%. Top finding
    (medium): ..., in 2.1 ms per step (6% of attention's forward and backward time): the most a fix
    can save." Empty without attention."""
    if not w.layers:
        return ""
    # No device share where graphs hid the kernels (``analysis.graphs``): judged by CPU time.
    device = on_device(w) and w.attention_share_device is not None
    clock = "device" if device else "CPU"
    attention = w.attention_device_us if device else w.attention_cpu_us
    step = w.step_device_us if device else w.step_cpu_us
    if attention <= 0:
        return ""
    forward = sum(layer.device_us if device else layer.cpu_us for layer in w.layers)
    by_phase: dict[str, float] = {}
    for layer in w.layers:
        for p in layer.phases:
            t = (p.device_us + p.backward.device_us) if device else (p.cpu_us + p.backward.cpu_us)
            by_phase[p.phase] = by_phase.get(p.phase, 0.0) + t
    share = f"{attention / step:.0%} of the {clock} step time (" if step > 0 else f"{clock} time ("
    layers = f"{len(w.layers)} layer" + ("s" if len(w.layers) != 1 else "")
    core = sum(layer.core_only for layer in w.layers)
    what, note = attention_noun(core, len(w.layers)), core_only_note(core, len(w.layers))
    parts = [f"{what.capitalize()} is {share}{duration(attention)}"
             + (f" of {duration(step)}" if step > 0 else "") + f" per step, {note or layers})"]
    backward = attention - forward
    both = backward > 0.01 * attention
    if both:
        parts[0] += f": forward {forward / attention:.0%}, backward {backward / attention:.0%}"
    top = [(name, t) for name, t in sorted(by_phase.items(), key=lambda kv: -kv[1])
           if t >= _MIN_SHARE * attention][:_TOP_PHASES]
    if top:
        # Each share names its denominator: the phases' shares here hold their backward work too,
        # where the layer table and the chart show forward work alone.
        parts[0] += ("; by phase (forward and backward), " if both else "; by phase, ") \
            + ", ".join(f"{name} {t / attention:.0%}" for name, t in top)
    spread = w.spread.get("attention_device_us" if device else "attention_cpu_us")
    if spread is not None and spread.noisy:
        parts.append(f"Its steps {spread_words(spread.lo, spread.hi, spread.kind, spread.steps)}: "
                     "noisy, so profile more steps before comparing")
    if w.device_partial:
        parts.append(f"Its device time is partial: {duration(w.attention_device_us)} of attention's kernels ran in "
                     "this trace, the rest were captured into a CUDA/HIP graph and did not run, so it is judged by CPU "
                     "time")
    finding = top_finding(w.findings)
    if finding is not None and finding.evidence.time_us > 0:
        t = finding.evidence.time_us
        of = f"{what}'s forward and backward time" if both else what
        # A generation's findings quote decode steps; the headline's figures are means over every profiled step.
        per = "per step" if w.generation is None or w.generation.decode is None else \
            f"per profiled step (the mean of {w.step_count}, prefill included)"
        parts.append(f"Top finding ({finding.severity}): {finding.title.rstrip('.')}, in {duration(t)} {per} "
                     f"({min(t / attention, 1.0):.0%} of {of}): the most a fix can save")
    elif finding is not None:
        parts.append(f"Top finding ({finding.severity}): {finding.title}")
    return ". ".join(parts) + "."


def top_finding(findings: list[Finding]) -> Finding | None:
    """The first finding that asks for a change (not ``info``) in ``finding_order``: the most
    severe, the most time first; the first such in the list the views show."""
    return min((f for f in findings if f.severity != "info"), key=finding_order, default=None)
