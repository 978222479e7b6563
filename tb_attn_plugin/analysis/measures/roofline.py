"""The roofline: how far each phase, layer and the run's attention are from the hardware.

For forward work per step, on the trace's clock (device time where there is a device, CPU self
time on a CPU trace), with F FLOPs, M bytes moved (``analysis.traffic``), N launches (kernels, or
top-level ops on a CPU) and time t:

- intensity I = F / M; achieved F / t and M / t;
- the roofs' times: compute F / P (P: the peak FLOP/s of the phase's dtype), memory M / W (W: the
  peak bandwidth), and launches N · L (L: the per-call floor, ``Peaks.launch_us``);
- the attainable ceiling min(P, I · W), and the share of it reached: max(F / P, M / W) / t, which
  is achieved / ceiling where there are FLOPs and the bandwidth share where there are none;
- the verdict: ``latency-bound`` where N · L is above both roofs' times (too little work per call
  for either roof to matter), else ``compute-bound`` or ``memory-bound`` by the larger of the two.

A layer and the run add up their phases' terms (each phase's compute time at its own dtype's
peak). A roofline is an upper bound, not a prediction: a kernel at 100% of its ceiling is rare, and
a share is how much time the roofs leave to win at most. ``far-from-roof`` is the finding.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from tb_attn_plugin.analysis.attribution.batch import decode_roof
from tb_attn_plugin.analysis.common.finding import new_finding
from tb_attn_plugin.analysis.common.wording import (
    attention,
    core_only_note,
    duration,
    layer_list,
    number,
    pct,
    share,
    size,
)
from tb_attn_plugin.analysis.measures.peaks import Peaks
from tb_attn_plugin.types.schema import (
    Finding,
    GenerationPhase,
    LayerStats,
    PhaseStats,
    Roof,
    Roofline,
    WorkerSummary,
)
from tb_attn_plugin.vocab.scopes import FUSED_PHASES, OTHER, UNFUSED_CORE_PHASES, Phase

__all__ = ["FAR_SHARE", "FAR_TIME_SHARE", "SCORE_TRAFFIC_PHASES", "VERDICTS", "far_from_roof", "peaks_of",
           "phase_roofs", "with_roofline"]

VERDICTS = ("compute-bound", "memory-bound", "latency-bound", "no peak known", "no bytes modeled", "above its ceiling")
#: A point above its ceiling ran faster than the peaks allow, and no verdict is drawn from it: the
#: runner's probes measured a busy machine, or (with a datasheet's peaks) its data came from a cache,
#: not from memory, or the peaks are not this device's. Any share over 1: a point at 101% of its roof
#: is no more bound by it than one at 125%, and calling one "compute-bound" and the other "above its
#: ceiling" said two things of one situation.
OVER_CEILING = 1.0
#: What the roofline's note says where some point is above its ceiling, by where the peaks come from.
ABOVE_PROBED = ("some points run above their ceiling (up to {top}): the peaks are too low for this machine (the "
                "runner probes them where it runs, and a busy machine measures less than it has), so no verdict "
                "is drawn from those points; re-run on an idle machine, or give the peaks (tb-attn --peak-flops "
                "and --peak-bw; tensorboard --tb_attn_peak_flops and --tb_attn_peak_bw)")
ABOVE_TABLE = ("some points run above their ceiling (up to {top}): their data came from a cache rather than from "
               "memory (a small tensor the previous kernel left in L2), or the peaks are not this device's, so no "
               "verdict is drawn from those points; give the device's peaks if they differ (tb-attn --peak-flops "
               "and --peak-bw; tensorboard --tb_attn_peak_flops and --tb_attn_peak_bw)")
#: far-from-roof: a phase with at least this share of attention time...
FAR_TIME_SHARE = 0.10
#: ...reaching less than this share of its attainable ceiling.
FAR_SHARE = 0.20
#: Phases whose traffic is the S×S scores (written, read back, masked and normalized in memory): the
#: unfused core, and int8 attention's dequantized scores.
SCORE_TRAFFIC_PHASES = UNFUSED_CORE_PHASES | {Phase.DEQUANTIZE}
#: A compute roof this many times the fp32 one is what fp32 leaves unused (tensor cores).
TENSOR_CORE_GAIN = 2.0


@dataclass
class _Terms:
    flops: float = 0.0
    nbytes: float = 0.0
    time_us: float = 0.0
    launches: float = 0.0
    compute_s: float = 0.0
    memory_s: float = 0.0
    lower_bound: bool = False
    dtype_flops: dict[str, float] | None = None

    def add(self, other: _Terms) -> None:
        self.flops += other.flops
        self.nbytes += other.nbytes
        self.time_us += other.time_us
        self.launches += other.launches
        self.compute_s += other.compute_s
        self.memory_s += other.memory_s
        self.lower_bound |= other.lower_bound
        for k, v in (other.dtype_flops or {}).items():
            self.dtype_flops = self.dtype_flops or {}
            self.dtype_flops[k] = self.dtype_flops.get(k, 0.0) + v

    @property
    def dtype(self) -> str | None:
        d = self.dtype_flops or {}
        return max(d, key=lambda k: (d[k], k)) if d else None


def _phase_terms(p: PhaseStats, peaks: Peaks, device: bool) -> _Terms:
    """A phase's terms. Integer ops (int8 GEMMs: ``iops``) count as operations at the int8 peak."""
    time_us = p.device_us if device else p.cpu_self_us
    peak = peaks.flops.get(p.dtype or "fp32") if p.flops > 0 else None
    int8 = peaks.flops.get("int8") if p.iops > 0 else None
    by_dtype = {k: v for k, v in (((p.dtype or "fp32"), p.flops), ("int8", p.iops)) if v > 0}
    return _Terms(flops=p.flops + p.iops, nbytes=p.bytes, time_us=time_us,
                  launches=p.kernels if device else p.op_count,
                  compute_s=(p.flops / peak if peak else 0.0) + (p.iops / int8 if int8 else 0.0),
                  memory_s=p.bytes / peaks.bytes_per_s if peaks.bytes_per_s else 0.0,
                  lower_bound=p.unmodeled_ops > 0, dtype_flops=by_dtype or None)


def _roof(t: _Terms, peaks: Peaks) -> Roof | None:
    if t.time_us <= 0 or (t.flops <= 0 and t.nbytes <= 0):
        return None
    sec = t.time_us * 1e-6
    intensity = t.flops / t.nbytes if t.nbytes > 0 else None
    peak = peaks.flops.get(t.dtype or "fp32") if t.flops > 0 else None
    ceiling = share = None
    if not peaks.known or (t.flops > 0 and not peak):  # no peak at all, or none for its dtype (int8 on a CPU)
        verdict = "no peak known"
    elif t.nbytes <= 0:
        verdict = "no bytes modeled"
    else:
        bw = peaks.bytes_per_s or 0.0
        if peak and intensity is not None:
            ceiling = min(peak, intensity * bw)
        at_roof = max(t.compute_s, t.memory_s)
        share = at_roof / sec
        if share > OVER_CEILING:
            verdict = "above its ceiling"
        elif t.launches * peaks.launch_us * 1e-6 > at_roof:
            verdict = "latency-bound"
        else:
            verdict = "compute-bound" if t.compute_s >= t.memory_s else "memory-bound"
    return Roof(dtype=t.dtype, time_us=t.time_us, launches=t.launches, intensity=intensity,
                flops_per_s=t.flops / sec, bytes_per_s=t.nbytes / sec, ceiling=ceiling, share=share,
                verdict=verdict, lower_bound=t.lower_bound)


def with_roofline(summary: WorkerSummary, peaks: Peaks) -> WorkerSummary:
    """The summary under these peaks: every phase's and layer's ``roof`` (the prefill's and the
    decode steps' layers too), its ``roofline`` and its serving batch's decode roof; its findings
    and headline as they were (``analysis.summary`` runs the stages that read the roofs). A new
    summary; the one given is left as it is."""
    replace = msgspec.structs.replace
    device = summary.device != "cpu"
    layers, run = _roof_layers(summary.layers, peaks, device)
    g = summary.generation
    if g is not None:  # the prefill's and the decode steps' own layers: decode reads the whole cache
        g = replace(g, prefill=_roof_part(g.prefill, peaks, device), decode=_roof_part(g.decode, peaks, device))
    whole = _roof(run, peaks)
    roofs = [r for x in layers for r in (x.roof, *(p.roof for p in x.phases)) if r is not None]
    over = [r.share for r in (*roofs, whole) if r is not None and r.share is not None and r.share > OVER_CEILING]
    above = ABOVE_PROBED if "probes" in peaks.source else ABOVE_TABLE
    note = "; ".join(n for n in (peaks.note, above.format(top=pct(max(over))) if over else "") if n)
    roofline = Roofline(
        device=peaks.device, source=peaks.source, clock="device" if device else "cpu",
        peak_flops={k: float(v) for k, v in peaks.flops.items()}, peak_bytes_per_s=peaks.bytes_per_s,
        launch_us=peaks.launch_us, note=note, attention=whole,
        partial=device and any(p.captured for x in layers for p in x.phases)) if layers else None
    serving = decode_roof(summary.serving, layers, peaks.bytes_per_s) if summary.serving is not None else None
    return replace(summary, layers=layers, generation=g, roofline=roofline, serving=serving)


def _roof_part(part: GenerationPhase | None, peaks: Peaks, device: bool) -> GenerationPhase | None:
    """A generation part (the prefill, the decode steps) with its layers' roofs and its own."""
    if part is None:
        return None
    layers, terms = _roof_layers(part.layers, peaks, device)
    return msgspec.structs.replace(part, layers=layers, roof=_roof(terms, peaks))


def _roof_layers(layers: list[LayerStats], peaks: Peaks, device: bool) -> tuple[list[LayerStats], _Terms]:
    """The layers with every phase's and layer's ``roof``, and their terms added up."""
    replace = msgspec.structs.replace
    run = _Terms()
    out = []
    for layer in layers:
        terms = _Terms()
        phases = []
        for p in layer.phases:
            pt = _phase_terms(p, peaks, device)
            phases.append(replace(p, roof=_roof(pt, peaks)))
            if device and pt.time_us <= 0:
                continue  # no kernel ran for it (captured into a CUDA graph): its work has no time here
            terms.add(pt)
        out.append(replace(layer, phases=phases, roof=_roof(terms, peaks)))
        run.add(terms)
    return out, run


def peaks_of(rl: Roofline) -> Peaks:
    """The peaks a summary's roofline was drawn with."""
    return Peaks(device=rl.device, source=rl.source, flops=dict(rl.peak_flops), bytes_per_s=rl.peak_bytes_per_s,
                 launch_us=rl.launch_us, note=rl.note)


def _by_phase(summary: WorkerSummary) -> dict[str, tuple[list[tuple[LayerStats, PhaseStats]], _Terms]]:
    """Each phase's rows over the layers and their summed terms."""
    rl = summary.roofline
    out: dict[str, tuple[list[tuple[LayerStats, PhaseStats]], _Terms]] = {}
    if rl is None:
        return out
    peaks, device = peaks_of(rl), rl.clock == "device"
    for layer in summary.layers:
        for p in layer.phases:
            rows, terms = out.setdefault(p.phase, ([], _Terms()))
            rows.append((layer, p))
            pt = _phase_terms(p, peaks, device)
            if not device or pt.time_us > 0:
                terms.add(pt)
    return out


def phase_roofs(summary: WorkerSummary) -> dict[str, Roof]:
    """Each phase's roof with its layers added up (Compare's points)."""
    if summary.roofline is None:
        return {}
    peaks = peaks_of(summary.roofline)
    out = {}
    for phase, (_, terms) in _by_phase(summary).items():
        roof = _roof(terms, peaks)
        if roof is not None:
            out[phase] = roof
    return out


def _time(p: PhaseStats, device: bool) -> float:
    return p.device_us if device else p.cpu_self_us


def far_from_roof(summary: WorkerSummary) -> list[Finding]:
    """Phases (all layers together) that take at least ``FAR_TIME_SHARE`` of attention time and
    reach under ``FAR_SHARE`` of their attainable ceiling: one finding per likely cause, naming
    its phases."""
    rl = summary.roofline
    if rl is None or not rl.peak_flops or rl.peak_bytes_per_s is None:
        return []
    device = rl.clock == "device"
    total = sum(_time(p, device) for layer in summary.layers for p in layer.phases)
    if total <= 0:
        return []
    peaks = peaks_of(rl)
    groups: dict[str, list[_Far]] = {}
    for phase, (rows, terms) in _by_phase(summary).items():
        roof = _roof(terms, peaks)
        time_share = terms.time_us / total
        if phase == OTHER or roof is None or roof.share is None or time_share < FAR_TIME_SHARE \
                or roof.share >= FAR_SHARE:
            continue
        far = _Far(phase, rows, roof, terms, time_share)
        groups.setdefault(_cause_key(far, rl), []).append(far)
    core = sum(layer.core_only for layer in summary.layers)
    # The roofline's own time, named: forward only, and on a CPU the ops' self time (not the layer
    # table's or the headline's time, which hold the backward and the gaps between ops).
    clock = f"forward {'device' if rl.clock == 'device' else 'CPU self'} time"
    whole = (f"the attention core's {clock}" if attention(core, len(summary.layers)) != "attention"
             else f"attention's {clock}")
    note = core_only_note(core, len(summary.layers))
    return [_finding(key, fars, rl, whole, note) for key, fars in groups.items()]


@dataclass
class _Far:
    phase: str
    rows: list[tuple[LayerStats, PhaseStats]]
    roof: Roof
    terms: _Terms
    time_share: float


def _cause_key(far: _Far, rl: Roofline) -> str:
    """"latency", "scores", "fp32" or the plain verdict."""
    if far.roof.verdict == "latency-bound":
        return "latency"
    # The unfused phases of the scores, or an SDPA / flex call that wrote them (the math backend,
    # eager flex): their traffic is the S×S scores'.
    if far.roof.verdict == "memory-bound" and (far.phase in SCORE_TRAFFIC_PHASES or any(
            p.sxs_bytes > 0 for _, p in far.rows)):
        return "scores"
    fp32 = rl.peak_flops.get("fp32")
    fast = max((rl.peak_flops.get(k, 0.0) for k in ("tf32", "bf16")), default=0.0)
    if far.roof.verdict == "compute-bound" and far.roof.dtype == "fp32" and fp32 and fast >= TENSOR_CORE_GAIN * fp32:
        return "fp32"
    return far.roof.verdict


def _flops(x: float) -> str:
    """"203 GFLOP/s", "236 TFLOP/s"."""
    return f"{x / 1e12:.3g} TFLOP/s" if x >= 1e12 else f"{x / 1e9:.3g} GFLOP/s"


def _cause(key: str, fars: list[_Far], rl: Roofline) -> tuple[str, str]:
    """(the likely cause, without its subject: "are latency-bound: ...", the change to try)."""
    launches = sum(f.terms.launches for f in fars)
    at_roof = sum(max(f.terms.compute_s, f.terms.memory_s) for f in fars)
    unit = "kernels" if rl.clock == "device" else "top-level ops"
    if key == "latency":
        fused = all(f.phase in FUSED_PHASES for f in fars)  # "use a fused kernel" is no advice for them
        return (f"latency-bound: {number(launches)} {unit} per step, each with "
                f"{at_roof / max(launches, 1e-9) * 1e6:.2f} µs of work at the roofs against a per-call floor of "
                f"about {number(rl.launch_us)} µs, too little work per call for either roof to matter: launch "
                "latency, ramp-up and a partly idle device set the time, not compute or memory bandwidth",
                "Give each call more work or make fewer calls: a larger batch or longer sequences per call"
                + ("" if fused else ", a fused kernel (F.scaled_dot_product_attention) in place of separate ops")
                + ", or torch.compile / CUDA graphs to cut the per-call cost.")
    if key == "scores":
        nbytes = sum(f.terms.nbytes for f in fars)
        return ("memory-bound on the S×S scores, written to memory and read back between ops "
                f"({size(nbytes)} per step)",
                "Use a fused kernel that keeps the scores on chip and reads Q, K and V once: "
                "F.scaled_dot_product_attention with its flash or memory-efficient backend (runner: --impl sdpa).")
    if key == "fp32":
        # Far below even the fp32 roof: the kernels are the first cause; the faster roof of
        # bf16/tf32 (tensor cores, or a CPU's bf16 matrix units) is what fp32 leaves on top of it.
        fp32 = rl.peak_flops["fp32"]
        fast = max(rl.peak_flops.get(k, 0.0) for k in ("tf32", "bf16"))
        units = "tensor cores" if rl.clock == "device" else "bf16 matrix units (the runner's probe)"
        autocast = "cuda" if rl.clock == "device" else "cpu"
        tf32 = " or allow TF32 (torch.backends.cuda.matmul.allow_tf32 = True)" if rl.clock == "device" else ""
        return (f"compute-bound, yet its kernels run far below the fp32 roof of {_flops(fp32)}; and fp32 leaves "
                f"the {units} unused, whose roof is {fast / fp32:.1f}x higher ({_flops(fast)})",
                "Look at its kernels and their operands' copies in the drill-down first; then run attention in "
                f"bf16 (torch.autocast(device_type='{autocast}', dtype=torch.bfloat16)){tf32} and measure again.")
    return (f"{key} and far below that roof",
            "Look at the kernels in the drill-down: a layout that forces copies, little work per kernel, or "
            "no fused kernel for these shapes.")


def _names(phases: list[str]) -> str:
    return phases[0] if len(phases) == 1 else ", ".join(phases[:-1]) + f" and {phases[-1]}"


def _finding(key: str, fars: list[_Far], rl: Roofline, whole: str, note: str) -> Finding:
    """``whole``: what the time shares are of ("attention time", or the core's where only it was
    found); ``note``: how many layers are their core alone, where some are (``wording.core_only_note``)."""
    fars = sorted(fars, key=lambda f: -f.terms.time_us)
    layers = sorted({layer.layer for f in fars for layer, _ in f.rows})
    cause, suggestion = _cause(key, fars, rl)
    time_share = sum(f.time_share for f in fars)
    time_us = sum(f.terms.time_us for f in fars)
    best = sum(f.terms.time_us * (f.roof.share or 0.0) for f in fars)
    phases = [f.phase for f in fars]
    shares = [f.roof.share or 0.0 for f in fars]
    one = len(fars) == 1

    def ceiling(f: _Far) -> str:
        parts = [f"{_flops(f.roof.ceiling)} at {f.roof.intensity:.3g} FLOPs per byte" if f.roof.ceiling
                 and f.roof.intensity else "", "bytes a lower bound" if f.roof.lower_bound else ""]
        return ", ".join(p for p in parts if p)

    if one:
        reach = share(shares[0])
        detail = f" ({ceiling(fars[0])})" if ceiling(fars[0]) else ""
        text = (f"{phases[0]} in {layer_list(layers)} takes {pct(time_share)} of {whole} "
                f"({duration(time_us)} per step) and reaches {reach} of its attainable ceiling{detail}: it is {cause}.")
    else:
        lo, hi = share(min(shares)), share(max(shares))
        reach = lo if lo == hi else f"{lo}-{hi}"  # never "2.2%-2.2%"
        each = "; ".join(f"{f.phase} {pct(f.time_share)} of that time, {share(f.roof.share or 0.0)} of its "
                         f"ceiling" + (f" ({ceiling(f)})" if ceiling(f) else "") for f in fars)
        text = (f"{_names(phases)} in {layer_list(layers)} take {pct(time_share)} of {whole} "
                f"({duration(time_us)} per step) and reach {reach} of their attainable ceilings ({each}): they are "
                f"{cause}.")
    if note:
        text += f" ({note.capitalize()}.)"
    text += (f" Peaks: {rl.device}, {rl.source or 'given'}. A roofline is an upper bound, not a prediction: at "
             f"{'its ceiling this phase' if one else 'their ceilings these phases'} would take {duration(best)}, "
             "and few kernels get near theirs.")
    ops = [o for f in fars for _, p in f.rows for o in p.ops]
    kernels = [k for f in fars for _, p in f.rows for k in p.kernel_names]
    details: dict[str, float | int | str] = {
        "cause": key, "phases": ",".join(phases), "time_share": time_share, "launches": sum(f.terms.launches
                                                                                            for f in fars)}
    for f in fars:
        details[f"share_{f.phase}"] = f.roof.share or 0.0
        details[f"verdict_{f.phase}"] = f.roof.verdict
    # "low" whatever its share: it says where a phase stands, not which change makes it faster; the
    # rules that name a change (sxs-materialized, math-fallback, ...) rank above it.
    return new_finding(
        "far-from-roof", "low",
        f"{_names(phases)} reach{'es' if len(phases) == 1 else ''} {reach} of the roofline ceiling "
        f"({fars[0].roof.verdict})", text, suggestion,
        layers=layers, ops=list(dict.fromkeys(ops)), kernels=list(dict.fromkeys(kernels)), time_us=time_us,
        nbytes=sum(f.terms.nbytes for f in fars), details=details)
