"""Findings on generation with a KV cache: what a decode step spends, and what would cut it.

They read the summary's ``generation`` (``analysis.generation``); thresholds and the reasons for
them are in ``docs/findings.md``. A decode step reads the whole KV cache for one query per
sequence: it does about one multiply-add per byte it reads, so on every current machine its
floor is memory bandwidth; above that floor sit the cache's own copies and the per-op costs of
launching small work.
"""

from __future__ import annotations

from tb_attn_plugin.analysis.attribution.query import RuleQuery
from tb_attn_plugin.analysis.common.finding import new_finding
from tb_attn_plugin.analysis.common.spread import median
from tb_attn_plugin.analysis.common.wording import count, duration, layer_list, pct, size
from tb_attn_plugin.analysis.measures.peaks import cpu_op_floor
from tb_attn_plugin.types.schema import Finding, Generation, GenerationPhase, LayerStats, PhaseStats
from tb_attn_plugin.vocab.aten import CAT_OP

__all__ = ["DISPATCH_BUSY_MAX", "EXPAND_MIN_RATIO", "GENERATION_RULES", "MEMORY_BOUND_SHARE", "REALLOC_MIN_SHARE",
           "SMALL_OP_FLOORS", "TRAINING_CACHE_MEDIUM"]

#: A dynamic cache's copies are a finding from this share of decode attention time...
REALLOC_MIN_SHARE = 0.05
#: ...and "medium" from this one.
REALLOC_MEDIUM_SHARE = 0.2
#: Decode attention reading the cache at this share of the machine's copy bandwidth is memory-bound.
MEMORY_BOUND_SHARE = 0.5
#: GPU: a decode step whose device is busy for less than this share of its wall time waits on the CPU.
DISPATCH_BUSY_MAX = 0.5
#: CPU: the cache's bytes at the copy bandwidth take less than this share of the core's time...
DISPATCH_MEMORY_SHARE = 0.25
#: ...and the launches (top-level ops) average under this many times the CPU's dispatch floor
#: (``peaks.cpu_op_floor``, measured without the profiler, whose own cost per op is several
#: floors): small ops, near the floor, not slow ones of milliseconds.
SMALL_OP_FLOORS = 50.0
#: gqa-opportunity: suggested while the KV heads are more than a quarter of the query heads.
GQA_GROUP = 4
#: kv-expanded: the core reads at least this many times the KV cache's bytes...
EXPAND_MIN_RATIO = 1.5
#: ...and it is "medium" when expanding takes this share of decode attention.
EXPAND_MEDIUM_SHARE = 0.2


def _per_step(t: RuleQuery, d: GenerationPhase, us: float) -> float:
    """A decode step's time (what the text quotes) as ``evidence.time_us`` has every time: a mean
    over the profiled steps, the basis of the layer table and the headline."""
    return us * d.steps / t.step_count


def _decode(t: RuleQuery) -> Generation | None:
    g = t.s.generation
    return g if g is not None and g.decode is not None and g.decode.steps > 0 else None


def _kv_cache_realloc(t: RuleQuery) -> list[Finding]:
    g = _decode(t)
    if g is None or g.decode is None or g.realloc_bytes_per_token <= 0 or g.decode.kv_bytes <= 0:
        return []
    if g.realloc_bytes_per_token < 0.5 * g.decode.kv_bytes:
        return []  # appends that allocate a little (new pages, a chunked cache) copy no whole cache
    d = g.decode
    share = d.kv_cache_us / d.attention_us if d.attention_us > 0 else 0.0
    if share < REALLOC_MIN_SHARE:
        return []
    text = (f"Every decode step allocates the whole KV cache anew and copies it there: "
            f"{size(g.realloc_bytes_per_token)} per step (the cache of every layer, K and V, which grows by "
            f"{size(g.kv_bytes_per_token)} per token), so the appends cost O(L) per token and O(L²) over a "
            f"generation. Appending takes {duration(d.kv_cache_us)} per decode step, {pct(share)} of decode attention "
            f"time ({duration(d.attention_us)})"
            + (f" and {pct(d.kv_cache_us / d.step_us)} of the step." if d.step_us > 0 else "."))
    return [new_finding(
        "kv-cache-realloc", "medium" if share >= REALLOC_MEDIUM_SHARE else "low",
        "The KV cache is copied whole on every token",
        text,
        "Preallocate the cache for the whole generation and write each token in place: a static cache (tb-attn-run "
        "--kv-cache static; in Hugging Face, cache_implementation=\"static\" or a StaticCache), or a paged cache "
        "(vLLM's PagedAttention) that allocates fixed-size blocks as the sequence grows.",
        layers=sorted(t.layers), ops=[CAT_OP], kernels=[], time_us=_per_step(t, d, d.kv_cache_us),
        nbytes=g.realloc_bytes_per_token,
        details={"realloc_bytes_per_token": g.realloc_bytes_per_token, "kv_cache_us": d.kv_cache_us,
                 "share_of_decode_attention": share, "kv_bytes_per_token": g.kv_bytes_per_token})]


def _decode_memory_bound(t: RuleQuery) -> list[Finding]:
    g = _decode(t)
    if g is None or g.decode is None or not g.reference_bytes_per_s or g.achieved_bytes_per_s <= 0:
        return []
    share = g.achieved_bytes_per_s / g.reference_bytes_per_s
    if share < MEMORY_BOUND_SHARE:
        return []
    d = g.decode
    expanded = (f" (the cache is {size(g.decode.kv_bytes)}: the core reads it expanded to every query head, or a "
                "static cache's whole buffer)" if g.read_bytes_per_token > 1.01 * g.decode.kv_bytes else "")
    text = (f"Each decode step's attention core reads {size(g.read_bytes_per_token)} of K and V over every layer"
            f"{expanded}, in "
            f"{duration(d.core_us)} of attention core time, {size(g.achieved_bytes_per_s)}/s: {pct(share)} of "
            f"{g.reference} ({size(g.reference_bytes_per_s)}/s). At one multiply-add per byte it reads, decode "
            "attention is bound by memory bandwidth: faster arithmetic will not make it faster, fewer bytes will. "
            "A roofline is an upper bound: this says where the floor is, not that the step will reach it.")
    return [new_finding(
        "decode-memory-bound", "info", "Decode attention is bound by memory bandwidth",
        text,
        "Read fewer bytes per token: fewer KV heads (grouped-query or multi-query attention), a quantized KV cache "
        "(int8 or fp8 halves or quarters it), or a shorter cache for layers that can use one (a sliding window). "
        "Larger batches do not help attention here: every sequence reads its own cache.",
        layers=sorted(t.layers), ops=[], kernels=[], time_us=_per_step(t, d, d.core_us), nbytes=g.read_bytes_per_token,
        details={"achieved_bytes_per_s": g.achieved_bytes_per_s, "reference_bytes_per_s": g.reference_bytes_per_s,
                 "share_of_reference": share, "read_bytes_per_token": g.read_bytes_per_token})]


def _gqa_opportunity(t: RuleQuery) -> list[Finding]:
    g = _decode(t)
    heads = _query_heads(t, g)
    if g is None or g.decode is None or not g.kv_heads or not heads or heads < GQA_GROUP:
        return []
    cache = g.decode.kv_bytes
    if g.kv_heads * GQA_GROUP <= heads or cache <= 0:
        return []
    per_head = cache / g.kv_heads
    options = {n: label for n, label in ((heads // GQA_GROUP, f"H/{GQA_GROUP}, grouped-query"), (1, "multi-query"))
               if n < g.kv_heads}
    parts = [f"{count(n, 'KV head', 'KV heads')} ({label}) would read {size(per_head * n)}, {pct(1 - n / g.kv_heads)} "
             "less" for n, label in sorted(options.items(), reverse=True)]
    text = (f"Decode reads a KV cache of {size(cache)} per step, {size(per_head)} per KV head over the "
            f"layers, with {count(g.kv_heads, 'KV head', 'KV heads')} for {count(heads, 'query head', 'query heads')}: "
            + "; ".join(parts) + ". The cache's memory shrinks by the same share, which lets larger batches or "
            "longer contexts fit. Only a suggestion: fewer KV heads change the model, which needs uptraining "
            "(Ainslie et al., 2023, uptrained with 5% of the original pre-training compute) and its accuracy checked.")
    return [new_finding(
        "gqa-opportunity", "info", f"Fewer KV heads would cut what decode reads by up to {pct(1 - 1 / g.kv_heads)}",
        text,
        "Measure it: run tb-attn-run --mode generate with "
        + " and with ".join(f"--kv-heads {n}" for n in sorted(options, reverse=True))
        + " beside this run, then tb-attn compare the decode time per decode step.",
        layers=sorted(t.layers), ops=[], kernels=[], time_us=_per_step(t, g.decode, g.decode.core_us), nbytes=cache,
        details={"kv_heads": g.kv_heads, "query_heads": heads, "cache_bytes_per_token": cache,
                 "bytes_per_kv_head": per_head})]


def _kv_expanded(t: RuleQuery) -> list[Finding]:
    g = _decode(t)
    if g is None or g.decode is None or g.decode.kv_bytes <= 0 or g.decode.attention_us <= 0:
        return []
    d = g.decode
    ratio = g.read_bytes_per_token / d.kv_bytes
    if ratio < EXPAND_MIN_RATIO:
        return []
    expand_us = sum(p.device_us if t.cuda else p.cpu_us for layer in d.layers for p in layer.phases
                    if p.phase == "kv_expand")
    share = expand_us / d.attention_us
    heads = _query_heads(t, g)
    if expand_us > 0:
        how = (f"the block expands K and V from {count(g.kv_heads or 0, 'KV head', 'KV heads')} to every one of the "
               f"{heads or '?'} query heads before attention (the kv_expand phase: {duration(expand_us)} per decode "
               f"step, {pct(share)} of decode attention time, {duration(d.attention_us)})")
    else:
        how = "the core is handed more than the cache holds (a preallocated buffer read whole, or K and V expanded)"
    text = (f"Each decode step's attention core reads {size(g.read_bytes_per_token)} of K and V, {ratio:.1f}x the KV "
            f"cache's {size(d.kv_bytes)}: {how}. Decode is bound by the bytes it reads, so the copy costs "
            "bandwidth twice: writing the expanded K and V, then reading them.")
    return [new_finding(
        "kv-expanded", "medium" if share >= EXPAND_MEDIUM_SHARE else "low",
        f"Decode reads K and V {ratio:.1f}x over: expanded to every query head",
        text,
        "Let the kernel read the grouped heads as they are: F.scaled_dot_product_attention(q, k, v, enable_gqa=True) "
        "(PyTorch 2.5 and later) takes K and V with fewer heads than q. Hugging Face's SDPA path uses it on CUDA "
        "only without a mask (with one, grouped heads would send SDPA to its math backend), and a StaticCache "
        "always passes a mask, so its repeat_kv copies the whole cache on every token: a dynamic cache avoids "
        "it, as do kernels that read the grouped cache as it is (flash-attention's flash_attn_with_kvcache, "
        "vLLM's paged attention).",
        layers=sorted(t.layers), ops=[], kernels=[], time_us=_per_step(t, d, expand_us),
        nbytes=g.read_bytes_per_token - d.kv_bytes,
        details={"read_bytes_per_token": g.read_bytes_per_token, "cache_bytes_per_token": d.kv_bytes,
                 "ratio": ratio, "kv_expand_us": expand_us, "share_of_decode_attention": share})]


def _decode_dispatch_bound(t: RuleQuery) -> list[Finding]:
    g = _decode(t)
    if g is None or g.decode is None or g.decode.launches <= 0:
        return []
    d = g.decode
    decode_steps = {tok.step for tok in g.tokens if tok.role == "decode"}
    per_launch = d.attention_us / d.launches
    if t.cuda:
        walls = [(s.cpu_us, s.device_us) for s in t.s.per_step if s.step in decode_steps and s.cpu_us > 0]
        if not walls:
            return []
        busy = sum(dev for _, dev in walls) / sum(wall for wall, _ in walls)
        if busy >= DISPATCH_BUSY_MAX:
            return []
        why = (f"the device is busy {pct(busy)} of a decode step's {duration(d.step_us)}: the GPU waits for the CPU to "
               "launch work")
        what = "kernel"
    else:
        memory = (g.read_bytes_per_token / g.reference_bytes_per_s * 1e6) if g.reference_bytes_per_s else None
        # The median step's core time, as the achieved bandwidth takes it: one slow step is no verdict.
        cores = [tok.core_us for tok in g.tokens if tok.role == "decode"]
        core = median(cores) if cores else d.core_us
        # With the copy bandwidth known: the cache's bytes at that rate are a small part of the core's
        # time, and decode's arithmetic is one multiply-add per byte, so the rest is per-op cost.
        # Without it: the ops themselves are short.
        # Dispatch-bound needs small ops, near the dispatch floor, with the bandwidth known or not:
        # ops of milliseconds are slow, not small, whatever share the cache's bytes take of them.
        floor = cpu_op_floor(t.meta)
        if per_launch >= SMALL_OP_FLOORS * floor or (memory is not None and memory >= DISPATCH_MEMORY_SHARE * core):
            return []
        busy = None
        why = (f"each takes {duration(per_launch)} on average, within {SMALL_OP_FLOORS:.0f} times the "
               f"{duration(floor)} it costs to dispatch one"
               + (f", while reading the cache at the machine's copy bandwidth would take {duration(memory)} of "
                  f"the core's {duration(core)} (median step)" if memory is not None else "")
               + ": the time goes to dispatching small ops, not to arithmetic or memory")
        what = "op"
    text = (f"A decode step runs {count(d.launches, what, what + 's')} of attention ({duration(d.attention_us)} per "
            f"step, {count(d.launches / max(len(t.layers), 1), what, what + 's')} per layer); {why}. At batch "
            f"{g.batch or '?'} and one query per sequence, each launch has little work.")
    details: dict[str, float | int | str] = {"launches_per_step": d.launches, "us_per_launch": per_launch,
                                             "attention_us_per_step": d.attention_us}
    if busy is not None:
        details["device_busy_share"] = busy
    fix = ("Cut the per-token launches: capture the decode step once and replay it (CUDA graphs, or "
           "torch.compile(mode=\"reduce-overhead\") with a static KV cache, whose shapes do not change from token "
           "to token), fuse attention into one F.scaled_dot_product_attention call, or decode more sequences per "
           "step (a larger batch spreads the same launches over more tokens)." if t.cuda else
           "Cut the per-token ops: fuse attention into one F.scaled_dot_product_attention call (one op where "
           "matmul, softmax and matmul are three), let torch.compile fuse the element-wise ops around it, or decode "
           "more sequences per step (a larger batch spreads the same ops over more tokens).")
    return [new_finding(
        "decode-dispatch-bound", "medium", "Decode steps are bound by dispatch, not by the hardware",
        text, fix,
        layers=sorted(t.layers), ops=[], kernels=[], time_us=_per_step(t, d, d.attention_us),
        details=details)]


def _query_heads(t: RuleQuery, g: Generation | None) -> int | None:
    cfg = t.meta.get("config")
    heads = cfg.get("heads") if isinstance(cfg, dict) else None
    if isinstance(heads, int) and not isinstance(heads, bool) and heads > 0:
        return heads
    return g.heads if g is not None else None


#: kv-cache-in-training: "medium" from this share of attention's forward time.
TRAINING_CACHE_MEDIUM = 0.05


def _kv_cache_in_training(t: RuleQuery) -> list[Finding]:
    """A KV cache built in a training step: attention runs backward (the trace trains) and its
    forward appends to a cache that training never reads."""
    layers = t.s.layers
    if not any(x.backward.calls > 0 for x in layers):
        return []

    def time(x: LayerStats | PhaseStats) -> float:
        return x.device_us if t.cuda else x.cpu_us

    rows = [(x.layer, time(p)) for x in layers for p in x.phases if p.phase == "kv_cache" and time(p) > 0]
    forward = sum(time(x) for x in layers)
    if not rows or forward <= 0:
        return []
    spent = sum(us for _, us in rows)
    share = spent / forward
    clock = "device" if t.cuda else "CPU"
    return [new_finding(
        "kv-cache-in-training", "medium" if share >= TRAINING_CACHE_MEDIUM else "low",
        "A KV cache is built while training",
        f"In {layer_list([k for k, _ in rows])}, the kv_cache phase takes {duration(spent)} per step, {pct(share)} "
        f"of attention's forward {clock} time ({duration(forward)}), in a trace whose attention also runs "
        "backward: each training step appends its keys and values to a cache that training never reads "
        "(Hugging Face models return past_key_values unless told not to).",
        "Turn the cache off for training: model(..., use_cache=False), or model.config.use_cache = False "
        "(gradient checkpointing needs it off too).",
        layers=[k for k, _ in rows], ops=[], kernels=[], time_us=spent,
        details={"share": share, "kv_cache_us": spent, "forward_us": forward})]


GENERATION_RULES = (_kv_cache_realloc, _decode_memory_bound, _gqa_opportunity, _kv_expanded, _decode_dispatch_bound,
                    _kv_cache_in_training)
