"""What a run's attention mask asks for, what ran, and what the sparsity saved, per layer.

A mask comes from the run metadata (``"mask"``, written by the runner: the ``--mask`` spec, the
share of (query, key) pairs it keeps and the share of ``BLOCK_SIZE`` blocks that hold any, and
per layer where layers differ, as in Gemma-style models whose global layers are causal). For
each layer with a mask, ``with_masks`` gives the summary's layer a ``LayerMask``:

- ``dense_flops``: the forward attention core (q·kᵀ and probs·v) with every pair kept,
  2·B·H·Sq·Sk·(D + Dv), from the run's shapes (batch, heads, sequence, head size);
- ``mask_flops``: the work the mask asks for, ``dense_flops`` × the kept share;
- ``work_flops``: the work that ran. Naive and SDPA with an explicit mask, and eager
  ``flex_attention``, compute every score and mask afterwards: their counted ops are dense work
  with a sparse meaning (``dense_work``). Compiled ``flex_attention`` skips the blocks the mask
  empties, and no op of the trace shows its work (a generated kernel), so its FLOPs are the
  mask's, added to the ``flex`` phase (``compiled`` where inferred) and the layer, and in training
  2.5 times that to the phase's backward, as for fused SDPA;
- ``dense_equiv_us``: the core's time scaled to the dense work at the layer's own rate: core
  time × dense / work, and for compiled flex, which computes whole 128×128 blocks, core time /
  the share of blocks it computes. The "sparsity saved" column is ``dense_equiv_us - core_us``: zero
  for dense work, and for sparse work what the same rate would have cost on every pair.

Layers without metadata (a trace summarized alone, or not written by our runner) get no mask:
nothing is guessed from a mask the trace does not describe. A run that is not causal and has no
mask (BERT's flex, say) gets compiled flex's dense work counted, and no ``LayerMask``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from tb_attn_plugin.analysis.common.bounds import clip
from tb_attn_plugin.analysis.ops.flops import BACKWARD_FACTOR, flop_rate
from tb_attn_plugin.types.schema import LayerMask, LayerStats, WorkerSummary
from tb_attn_plugin.vocab.backends import DENSE_WORK_BACKENDS, Backend
from tb_attn_plugin.vocab.masks import kept_pairs, parse_mask
from tb_attn_plugin.vocab.scopes import CORE_PHASES, Phase

__all__ = ["layer_masks", "with_masks"]

#: The largest batch, head count, length or width believed from the metadata.
_MAX_DIM = 1 << 31
#: How much of a bad spec a note repeats.
_MAX_SPEC_SHOWN = 64
#: A layer counts as dense work when its counted core ops reach this share of the dense work.
DENSE_SHARE = 0.8
#: The runner's dtypes: (peak class, bytes per element).
_DTYPES = {"float32": ("fp32", 4), "bfloat16": ("bf16", 2), "float16": ("fp16", 2)}


def layer_masks(metadata: Mapping[str, Any] | None, layers: list[int],
                notes: list[str] | None = None) -> dict[int, dict[str, Any]]:
    """Each layer's mask entry (spec, kept, blocks) from the run metadata; {} without one.
    ``notes`` gets one line per mask entry that names a mask the analysis cannot use (a bad spec,
    a share outside (0, 1]): it is ignored, as if the metadata named none."""
    meta = metadata or {}
    mask = meta.get("mask")
    config = meta.get("config")
    seq = config.get("seq") if isinstance(config, Mapping) else None
    causal = not (isinstance(config, Mapping) and config.get("causal") is False)
    unused: list[str] = []
    base = _entry(mask, seq, causal, unused, "mask")
    if base is None or not isinstance(mask, Mapping):
        _note(notes, unused)
        return {}
    overrides = mask.get("layers") if isinstance(mask.get("layers"), Mapping) else {}
    out: dict[int, dict[str, Any]] = {}
    for layer in layers:
        own = _entry(overrides.get(str(layer)), seq, causal, unused, f"mask of layer {layer}") \
            if isinstance(overrides, Mapping) else None
        out[layer] = own if own is not None else base
    _note(notes, unused)
    return out


def _note(notes: list[str] | None, unused: list[str]) -> None:
    if notes is not None and unused:
        more = f" (and {len(unused) - 1} more)" if len(unused) > 1 else ""
        notes.append(f"Run metadata ignored: {unused[0]}{more}.")


def _entry(entry: Any, seq: Any, causal: bool, unused: list[str], what: str) -> dict[str, Any] | None:
    """A valid mask entry, its kept share counted from the spec (``masks.kept_pairs``, constant
    time whatever ``seq`` claims) where the metadata gives none; None where it names no mask, and
    also, with a line in ``unused``, where it names one that cannot be used."""
    if not isinstance(entry, Mapping):
        return None
    raw = entry.get("spec")
    try:
        if not isinstance(raw, str):
            raise ValueError("not a mask spec")
        spec = parse_mask(raw)
    except ValueError as exc:
        unused.append(f"the {what} {clip(repr(raw), _MAX_SPEC_SHOWN)} ({clip(str(exc), _MAX_SPEC_SHOWN * 2)})")
        return None
    kept, blocks = entry.get("kept"), entry.get("blocks")
    if kept is None and type(seq) is int and 0 < seq <= _MAX_DIM:
        pairs = kept_pairs(spec, seq, seq, causal=causal)
        kept = pairs / seq**2 if pairs is not None else None
    if kept is None:
        unused.append(f"the {what} {spec} (no kept share, and no sequence length in 1..{_MAX_DIM} to count one)")
        return None
    if not _share(kept):
        unused.append(f"the {what} {spec} (a kept share of {clip(repr(kept), 40)}, not in (0, 1])")
        return None
    if blocks is not None and not _share(blocks):
        unused.append(f"the {what} {spec} (a block share of {clip(repr(blocks), 40)}, not in (0, 1])")
        return None
    return {"spec": str(spec), "kept": float(kept), "blocks": blocks}


def _share(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0.0 < value <= 1.0


def _shapes(metadata: Mapping[str, Any], layer: LayerStats) -> tuple[int, int, int, int] | None:
    """(batch, heads, seq, head size) of the run: batch and heads from the layer's own score shape
    where its ops show one, else from the run's configuration; the head size from the configuration
    (its ``head_dim``, else ``d_model / heads``)."""
    config = metadata.get("config")
    if not isinstance(config, Mapping):
        return None
    batch, heads, seq, d_model = (_dim(config, k) for k in ("batch", "heads", "seq", "d_model"))
    if "head_dim" in config:
        head_dim = _dim(config, "head_dim")
    elif d_model is not None and heads is not None and d_model % heads == 0:
        head_dim = d_model // heads
    else:
        return None
    if batch is None or heads is None or seq is None or head_dim is None:
        return None
    # A tensor-parallel rank's scores hold its share of the heads, each of the run's head size.
    if len(layer.score_shape) == 4:
        batch, heads = layer.score_shape[0], layer.score_shape[1]
    return batch, heads, seq, head_dim


def _dim(config: Mapping[str, Any], key: str) -> int | None:
    """A dimension from the run's configuration. Metadata is anyone's JSON: whole numbers in range
    only (no bool, float, Infinity or 10**400)."""
    value = config.get(key)
    return value if type(value) is int and 0 < value <= _MAX_DIM else None


def with_masks(summary: WorkerSummary, metadata: Mapping[str, Any] | None) -> WorkerSummary:
    """The summary with each masked layer's ``LayerMask``, compiled flex layers with the mask's
    FLOPs, and a note per mask entry it cannot use; the summary given is left as it is. FLOPs in a
    ``LayerMask`` are per forward call of the block, times per profiled step."""
    if not metadata:
        return summary
    notes: list[str] = []
    masks = layer_masks(metadata, [layer.layer for layer in summary.layers], notes)
    widest = max((float(m["kept"]) for m in masks.values()), default=0.0)
    mixed = len({str(m["spec"]) for m in masks.values()}) > 1
    config = metadata.get("config")
    unmasked = isinstance(config, Mapping) and config.get("causal") is False and not masks
    layers = [_masked(layer, masks.get(layer.layer), metadata, unmasked, mixed, widest) for layer in summary.layers]
    if not notes and all(a is b for a, b in zip(layers, summary.layers, strict=True)):
        return summary
    return msgspec.structs.replace(summary, layers=layers, notes=[*summary.notes, *notes])


def _masked(layer: LayerStats, entry: dict[str, Any] | None, metadata: Mapping[str, Any], unmasked: bool,
            mixed: bool, widest: float) -> LayerStats:
    """One layer under its mask entry (``None``: the run names no mask for it)."""
    shapes = _shapes(metadata, layer) if entry is not None or unmasked else None
    if shapes is None:
        return layer
    if entry is None:  # not causal, no mask: compiled flex did the whole dense work
        return _count_unmasked_flex(layer, shapes, metadata)
    dense = _dense_flops(shapes)
    kept = float(entry["kept"])
    wanted = dense * kept
    calls = layer.calls if layer.calls > 0 else 1.0
    work = sum(p.flops for p in layer.phases if p.phase in CORE_PHASES) / calls
    if layer.backend == Backend.FLEX and work < DENSE_SHARE * wanted:
        layer = _add_kernel_work(layer, (wanted - work) * calls, BACKWARD_FACTOR * wanted * calls,
                                 _kernel(shapes, metadata, calls))
        work = wanted
    core_us = sum((p.device_us or p.cpu_us) for p in layer.phases if p.phase in CORE_PHASES)
    return msgspec.structs.replace(layer, mask=LayerMask(
        spec=str(entry["spec"]), kept=kept, blocks=_float(entry.get("blocks")), dense_flops=dense,
        mask_flops=wanted, work_flops=work,
        dense_work=layer.backend in DENSE_WORK_BACKENDS and work >= DENSE_SHARE * dense,
        core_us=core_us, dense_equiv_us=_dense_equiv(core_us, dense, work, layer.backend, entry.get("blocks")),
        local=mixed and kept < widest))


def _dense_flops(shapes: tuple[int, int, int, int]) -> float:
    """The forward core with every pair kept: 2·B·H·S²·(D + Dv), Dv = D."""
    b, h, s, d = shapes
    return 2.0 * b * h * s * s * (d + d)


def _dense_equiv(core_us: float, dense: float, work: float, backend: str, blocks: Any) -> float:
    """The core's time for the dense work at its own rate. Compiled flex computes whole blocks:
    its time goes with the share of blocks it computes, not with the pairs kept."""
    if backend == Backend.FLEX and isinstance(blocks, (int, float)) and blocks > 0:
        return core_us / float(blocks)
    return core_us * dense / work if work > 0 else core_us


def _kernel(shapes: tuple[int, int, int, int], metadata: Mapping[str, Any], calls: float
            ) -> tuple[float, str | None]:
    """(the least bytes compiled flex_attention's calls move, the peak class of the run's dtype):
    Q, K, V and O per call (B·H·S·D each, in the run's dtype), as a fused SDPA kernel's
    (``analysis.traffic``); its BlockMask's block indices, a few bytes per 128x128 block, are left
    out. No bytes where the run's dtype is unknown."""
    config = metadata.get("config")
    dtype = _DTYPES.get(str(config.get("dtype"))) if isinstance(config, Mapping) else None
    if dtype is None:
        return 0.0, None
    b, h, s, d = shapes
    return 4.0 * b * h * s * d * dtype[1] * calls, dtype[0]


def _count_unmasked_flex(layer: LayerStats, shapes: tuple[int, int, int, int], metadata: Mapping[str, Any]
                         ) -> LayerStats:
    """Compiled flex without a mask (not causal): the kernel's dense work, which no op shows."""
    dense = _dense_flops(shapes)
    calls = layer.calls if layer.calls > 0 else 1.0
    work = sum(p.flops for p in layer.phases if p.phase in CORE_PHASES) / calls
    if layer.backend == Backend.FLEX and work < DENSE_SHARE * dense:
        return _add_kernel_work(layer, (dense - work) * calls, BACKWARD_FACTOR * dense * calls,
                                _kernel(shapes, metadata, calls))
    return layer


def _add_kernel_work(layer: LayerStats, forward: float, backward: float, kernel: tuple[float, str | None]
                     ) -> LayerStats:
    """The layer with compiled flex's generated kernel's FLOPs and bytes per step, which no op of
    the trace shows: on its ``flex`` phase (or, inferred without scopes, its ``compiled`` one) and
    the layer; the backward's FLOPs (``BACKWARD_FACTOR`` times the forward, as for fused SDPA)
    where the phase ran one."""
    nbytes, dtype = kernel
    core = [p for p in layer.phases if p.phase in CORE_PHASES]
    phase = (next((p for p in core if p.phase == Phase.FLEX), None)
             or next((p for p in core if p.phase == Phase.COMPILED), None))
    replace = msgspec.structs.replace
    phases, extra_bytes, extra_back = layer.phases, 0.0, 0.0
    if phase is not None:
        flops = phase.flops + forward
        backward_stats = phase.backward
        if phase.backward.calls > 0:
            backward_stats = replace(phase.backward, flops=phase.backward.flops + backward)
            extra_back = backward
        grown = replace(phase, bytes=phase.bytes + nbytes, flops=flops,
                        dtype=dtype if phase.dtype is None and nbytes > 0 else phase.dtype,
                        flops_per_s=flop_rate(flops, phase.device_us or phase.cpu_us), backward=backward_stats)
        phases = [grown if p is phase else p for p in layer.phases]
        extra_bytes = nbytes
    flops = layer.flops + forward
    return replace(layer, phases=phases, bytes=layer.bytes + extra_bytes, flops=flops,
                   flops_per_s=flop_rate(flops, layer.device_us or layer.cpu_us),
                   backward=replace(layer.backward, flops=layer.backward.flops + extra_back))


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) else None
