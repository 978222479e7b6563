"""The clock a trace's attention is judged by, and its rate: one home for every view and verdict.

A trace's attention is judged by device time where its attention launched kernels and all of
them ran in the trace; else by CPU time. A trace recorded while CUDA/HIP graphs were captured holds
the CPU ops of every layer but only some of their kernels (``WorkerSummary.device_partial``: the
captured ones never ran there): its device time is partial, a fraction of the work, so it is judged
by CPU time, which covers all of it, and its device figures are shown marked partial.

A rate sets work against the time of the same kernels: in a trace with kernels, attention's FLOP/s
is the FLOPs of the phases whose kernels ran, forward and backward, over their device time (a phase
captured into a graph ran no kernel here: its FLOPs have no time to be divided by, and CPU time,
the time to launch kernels, is no time to run them); without kernels, every FLOP over CPU time.
"""

from __future__ import annotations

from typing import Literal

from tb_attn_plugin.types.schema import WorkerSummary

__all__ = ["PARTIAL_DEVICE", "attention_flops", "attention_rate", "attention_us", "clock_of", "on_device"]

Clock = Literal["device", "cpu"]

#: Why a trace's device figures are partial, in the words every view uses.
PARTIAL_DEVICE = ("partial device time: some of attention's kernels were captured into a CUDA/HIP graph and did "
                  "not run in this trace")


def on_device(w: WorkerSummary) -> bool:
    """Whether ``w`` is judged by device time: its attention ran kernels, all of them here."""
    return w.attention_device_us > 0 and not w.device_partial


def clock_of(w: WorkerSummary) -> Clock:
    """``"device"`` or ``"cpu"``: the clock ``w`` is judged by (``on_device``)."""
    return "device" if on_device(w) else "cpu"


def attention_us(w: WorkerSummary) -> float:
    """Attention's time per step, forward and backward, on ``w``'s clock."""
    return w.attention_device_us if on_device(w) else w.attention_cpu_us


def attention_flops(w: WorkerSummary) -> float:
    """The FLOPs of the work ``attention_rate`` times, per step: every phase's, forward and backward;
    in a trace with kernels, only those of phases whose kernels ran here (as a layer's ``flops_per_s``)."""
    kernels = w.device != "cpu"
    forward = sum(p.flops for layer in w.layers for p in layer.phases
                  if not kernels or (p.device_us > 0 and not p.captured))
    backward = sum(layer.backward.flops for layer in w.layers if not kernels or layer.backward.device_us > 0)
    return forward + backward


def attention_rate(w: WorkerSummary) -> float | None:
    """Attention's FLOP/s: ``attention_flops`` over the time of the same work, the kernels' where the
    trace has kernels (a partial trace's too: its CPU time is the time to launch them, not to run
    them), else the CPU's; None without time or work."""
    t = w.attention_device_us if w.device != "cpu" else w.attention_cpu_us
    flops = attention_flops(w)
    return flops / (t * 1e-6) if t > 0 and flops > 0 else None
