"""Why a run is slower than another of the same model and configuration with another attention
implementation, read from both traces: the backend that ran, forward against backward, the parts
that grew, the dispatch count (``CompareRun.why_slower``).
"""

from __future__ import annotations

from tb_attn_plugin.analysis.common.clock import on_device
from tb_attn_plugin.analysis.common.configs import config, config_key
from tb_attn_plugin.analysis.common.spread import representative_worker
from tb_attn_plugin.analysis.common.wording import duration
from tb_attn_plugin.types.schema import RunSummary, WorkerSummary
from tb_attn_plugin.vocab.scopes import FUSED_PHASES, IMPL_NEUTRAL_PHASES, UNFUSED_CORE_PHASES, Phase, in_order

__all__ = ["SLOWER_BY", "same_but_impl", "why_slower"]

#: The attention core: what one SDPA call does, phase by phase in a hand-written block, with the
#: grouped-query expansion of K and V, which SDPA does inside the call.
_CORE = UNFUSED_CORE_PHASES | {Phase.KV_EXPAND}
#: Each fused phase (``FUSED_PHASES``) in a sentence.
_FUSED_CALL: dict[str, str] = {Phase.SDPA: "the SDPA call", Phase.FLEX: "the flex_attention call",
                               Phase.COMPILED: "the compiled block"}
SLOWER_BY = 1.02  # a run this much slower than the baseline is explained (below: noise)
#: Parts an attention implementation does not change: what differs there between two runs is noise.
_SAME_OPS_PARTS = in_order(IMPL_NEUTRAL_PHASES)


def same_but_impl(run: RunSummary, base: RunSummary) -> bool:
    a, b = config(run), config(base)
    return (a.get("model") is not None and a.get("impl") != b.get("impl")
            and config_key(a, but="impl") == config_key(b, but="impl"))


def _parts(w: WorkerSummary, device: bool) -> dict[str, float]:
    """Forward plus backward time per step by part: the core (one ``sdpa`` phase, or the
    hand-written phases it replaces) and each phase around it."""
    out: dict[str, float] = {}
    fused = _fused(w) is not None
    for layer in w.layers:
        for p in layer.phases:
            t = (p.device_us + p.backward.device_us) if device else (p.cpu_us + p.backward.cpu_us)
            part = "core" if p.phase in FUSED_PHASES or (p.phase in _CORE and not fused) else p.phase
            out[part] = out.get(part, 0.0) + t
    return out


def why_slower(run: RunSummary, base: RunSummary) -> list[str]:
    """Why ``run`` is slower than ``base``, a run of the same model and configuration with another
    attention implementation, read from both traces: the backend that ran, forward against
    backward, the parts that grew, the dispatch count. Empty when it is not slower."""
    w, b = representative_worker(run), representative_worker(base)
    device = on_device(w) and on_device(b)
    what = "device" if device else "CPU"

    def fwd_bwd(x: WorkerSummary) -> tuple[float, float]:
        return (sum(layer.device_us if device else layer.cpu_us for layer in x.layers),
                sum(layer.backward.device_us if device else layer.backward.cpu_us for layer in x.layers))

    (wf, wb), (bf, bb) = fwd_bwd(w), fwd_bwd(b)
    if wf + wb <= (bf + bb) * SLOWER_BY or bf + bb <= 0:
        return []
    # An inference trace has no backward: no "backward +0.0 µs" clause.
    backward = wb > 0 or bb > 0
    split = f"forward {_delta(wf, bf)}, backward {_delta(wb, bb)}" if backward else "forward only, no backward"
    out = [f"{run.run} spends {duration(wf + wb)} of {what} time per step in attention against {duration(bf + bb)} "
           f"({(wf + wb) / (bf + bb):.2f}×): {split}."]
    if w.backend != b.backend:
        math = next((f for f in w.findings if f.id == "math-fallback"), None)
        if math is not None:
            causes = str(math.evidence.details.get("causes") or "")
            out.append("Its SDPA ran the math backend, not a fused kernel (math-fallback"
                       + (f": {causes.replace(',', ', ')}" if causes else "")
                       + f"): the same unfused arithmetic as {b.backend}, with the ops SDPA adds around it.")
        else:
            out.append(f"It ran {w.backend} where the baseline ran {b.backend}.")
    mine, theirs = _parts(w, device), _parts(b, device)
    grew = sorted(((mine.get(k, 0.0) - theirs.get(k, 0.0), k) for k in set(mine) | set(theirs)), reverse=True)
    total = (wf + wb) - (bf + bb)
    parts = [f"{_label(k, w)} {_delta(mine.get(k, 0.0), theirs.get(k, 0.0))}"
             + ("" if k in theirs else " (not in the baseline)")
             for d, k in grew if d > 0.1 * total][:3]
    if parts:
        out.append(f"Where ({'forward and backward' if backward else 'forward'}): " + "; ".join(parts) + ".")
    same = sum(mine.get(k, 0.0) - theirs.get(k, 0.0) for k in _SAME_OPS_PARTS)
    own = total - same
    if same > 0 and same >= own:
        out.append(f"Of the {duration(total)}, {duration(same)} is in parts that run the same ops in both runs "
                   f"(projections, RoPE, the KV cache): measurement noise, which more profiled steps narrow; the "
                   f"implementation's own part is {'+' if own >= 0 else '−'}{duration(abs(own))}.")
    ops_w, ops_b = (sum(p.op_count for layer in x.layers for p in layer.phases) / max(sum(layer.calls for layer in
                    x.layers), 1e-9) for x in (w, b))
    if ops_w > ops_b * 1.1:
        out.append(f"It dispatches more: {ops_w:.0f} top-level ops per forward against {ops_b:.0f}.")
    return out


def _label(part: str, w: WorkerSummary) -> str:
    fused = _fused(w)
    if part == "core":
        return _FUSED_CALL[fused] if fused else "the attention core (q·kᵀ to attn·V)"
    if part == "mask" and fused == "sdpa":
        return "the mask built for SDPA"
    return part


def _fused(w: WorkerSummary) -> str | None:
    """The fused phase that holds the run's attention core, if one does."""
    return next((p.phase for layer in w.layers for p in layer.phases if p.phase in FUSED_PHASES), None)


def _delta(now: float, before: float) -> str:
    sign = "+" if now >= before else "−"
    rel = f", {now / before - 1:+.0%}" if before > 0 else ""
    return f"{sign}{duration(abs(now - before))} ({duration(now)}{rel})"
