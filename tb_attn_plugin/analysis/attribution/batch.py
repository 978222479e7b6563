"""What a serving engine batched in each iteration, from its annotations, and the attention work it implies.

A serving core's recorded shapes are token-packed: q is ``(tokens, heads, head_dim)`` and k, v are
the new tokens or the whole paged cache, so the shapes never say how many keys each query attended
(those lengths are tensor values). vLLM annotates each engine iteration with its batch
(``serving.SERVING_BATCH_PATTERN``: prefill and decode requests and their scheduled tokens), and a
detailed form (``serving.SERVING_BATCH_DETAILED_PATTERN``) adds, per kind, the sums over requests of
the query lengths ``sq``, key lengths ``sk``, ``sq²`` and ``sq·sk``. With those sums the core's
work is exact: a causal request of ``sq`` queries over ``sk`` keys (its cached prefix and itself)
attends ``sq·sk - sq·(sq-1)/2`` (query, key) pairs, so the iteration attends

    pairs = Σ sq·sk - (Σ sq² - Σ sq) / 2

and each core call (every layer's, once per iteration) does ``4 · heads · head_dim · pairs`` FLOPs
(q·kᵀ and attn·v). A decode request (``sq = 1``) attends its whole context, ``sk`` keys. Serving
engines' decoder attention is causal; an encoder's is not, and such an engine's cores would be
over-counted by at most the causal half (none of the engines here serves encoders through these
ops). Without the sums (vLLM's form) the pairs are bounded below only: equal prefill lengths with
no cached prefix attend the fewest, and a decode request attends at least one key.

``batch_flops`` gives those FLOPs to the cores whose shapes gave none, where their iteration's
annotation encloses them and their q holds the iteration's tokens (its first dimension at least
``Σ sq``: engines pad to a captured graph's size, never below). ``serving_batch`` is the view:
per profiled step, the requests and tokens of each kind, the keys decode read, and the KV cache's
bytes per token (from the engine's KV write: its k and v per token, at the cache's element size).
"""

from __future__ import annotations

import math
import re
from typing import NamedTuple

import msgspec
import numpy as np

from tb_attn_plugin.analysis.common.wording import count, duration, series, share, size
from tb_attn_plugin.analysis.ops.flops import elem_bytes, plausible
from tb_attn_plugin.analysis.ops.opnames import canonical
from tb_attn_plugin.trace.events import Events
from tb_attn_plugin.trace.kineto import Kind
from tb_attn_plugin.types.schema import LayerStats, ServingBatch
from tb_attn_plugin.vocab.libraries import ATTENTION_CORE_OPS
from tb_attn_plugin.vocab.scopes import Phase
from tb_attn_plugin.vocab.serving import (
    SERVING_BATCH_DETAILED_PATTERN,
    SERVING_BATCH_PATTERN,
    SERVING_CORE_OPS,
    SERVING_KV_CACHE_ARG,
    SERVING_KV_WRITE_OPS,
    SERVING_LINEAR_CORE_OPS,
)

__all__ = ["BAD_BATCH", "Batch", "Sums", "bad_batches", "batch_bytes", "batch_flops", "decode_roof", "parse",
           "serving_batch"]

# Counts are ASCII digits: re's \d also takes other scripts' digits ("٣", "３"), which int() reads.
_SIMPLE = re.compile(SERVING_BATCH_PATTERN, re.ASCII)
_DETAILED = re.compile(SERVING_BATCH_DETAILED_PATTERN, re.ASCII)
_ANY_DIGITS = (re.compile(SERVING_BATCH_DETAILED_PATTERN), re.compile(SERVING_BATCH_PATTERN))
_MAX_DIGITS = 15  # past this a count is no batch of this world (and float64 holds it exactly)
#: The diagnostic that counts annotations written as a batch that is none (``parse``: not ASCII digits, a count
#: of more than 15 digits, sums no lengths make): ignored, so no figure comes from them.
BAD_BATCH = "engine iteration annotations with counts out of range (ignored)"


class Sums(NamedTuple):
    """Over one kind's requests: Σ sq, Σ sk, Σ sq², Σ sq·sk."""

    sq: int
    sk: int
    sqsq: int
    sqsk: int

    def pairs(self) -> int:
        """The (query, key) pairs the requests attend, causally (module docstring)."""
        return self.sqsk - (self.sqsq - self.sq) // 2


class Batch(NamedTuple):
    """One engine iteration's batch."""

    prefill_requests: int
    prefill_tokens: int
    decode_requests: int
    decode_tokens: int
    prefill: Sums | None  # the detailed form's sums, None in vLLM's form
    decode: Sums | None

    def pairs(self) -> int | None:
        return None if self.prefill is None or self.decode is None else self.prefill.pairs() + self.decode.pairs()

    def fewest_pairs(self) -> int:
        """The fewest pairs the batch can attend: its prefill requests of equal length with no
        cached prefix (Σ n(n+1)/2 is least at equal n), each decode token one key."""
        n, t = self.prefill_requests, self.prefill_tokens
        prefill = t * (t / n + 1) / 2 if n else 0
        return int(prefill) + self.decode_tokens


def parse(name: str) -> Batch | None:
    """An annotation's batch, or None for another name (or one with an absurd count)."""
    if not name.startswith("execute_"):
        return None
    m = _DETAILED.match(name) or _SIMPLE.match(name)
    if m is None or any(len(v) > _MAX_DIGITS for v in m.groupdict().values()):
        return None
    g = {k: int(v) for k, v in m.groupdict().items()}
    if "csq" not in g:
        return Batch(g["cn"], g["ct"], g["gn"], g["gt"], None, None)
    prefill = Sums(g["csq"], g["csk"], g["csqsq"], g["csqsk"])
    decode = Sums(g["gsq"], g["gsk"], g["gsqsq"], g["gsqsk"])
    if any(s.sqsq < s.sq or (s.sqsq - s.sq) % 2 or s.pairs() < 0 for s in (prefill, decode)):
        return None  # no lengths make these sums
    return Batch(g["cn"], prefill.sq, g["gn"], decode.sq, prefill, decode)


def bad_batches(events: Events) -> int:
    """How many annotations are written as a batch (in any script's digits) but are none (``BAD_BATCH``)."""
    bad = [i for i, n in enumerate(events.names)
           if n.startswith("execute_") and parse(n) is None and any(p.match(n) for p in _ANY_DIGITS)]
    if not bad:
        return 0
    return int((np.isin(events.name, bad) & (events.kind == Kind.ANNOTATION)).sum())


def _annotations(events: Events) -> list[tuple[int, Batch]]:
    ids = {i: b for i, n in enumerate(events.names) if (b := parse(n)) is not None}
    if not ids:
        return []
    rows = np.flatnonzero(np.isin(events.name, list(ids)) & (events.kind == Kind.ANNOTATION))
    return [(int(i), ids[int(events.name[i])]) for i in rows]


def _is_core(name: str) -> bool:
    """A core whose work is its (query, key) pairs: not linear attention's (a state, no pairs)."""
    op = canonical(name)
    return (op in SERVING_CORE_OPS and op not in SERVING_LINEAR_CORE_OPS) or name in ATTENTION_CORE_OPS


def batch_flops(events: Events, flops: np.ndarray) -> int:
    """Give each serving or library core that its shapes left at 0 FLOPs its iteration's (in place);
    how many were given."""
    found = _annotations(events)
    if not found:
        return 0
    core_ids = [i for i, n in enumerate(events.names) if _is_core(n)]
    cores = np.flatnonzero(np.isin(events.name, core_ids) & (events.kind == Kind.CPU_OP) & (flops == 0))
    given = 0
    for i, batch in zip(cores.tolist(), _enclosing(events, found, cores), strict=True):
        pairs = batch.pairs() if batch is not None else None
        q = events.input_dims(i, 0)
        if batch is None or pairs is None or q is None or len(q) != 3 \
                or q[0] < batch.prefill_tokens + batch.decode_tokens or not _believed(events, i):
            continue
        flops[i] = 4.0 * q[1] * q[2] * pairs
        given += 1
    return given


def batch_bytes(events: Events, idx: np.ndarray) -> np.ndarray:
    """For events ``idx``: the least bytes each serving or library core moves in its annotated
    iteration, NaN for the others: its q read and its output written (q's size each), and each
    attended key's k and v read once (Σ sk over the batch at the KV cache's bytes per token), where
    ``batch_flops`` counted its work."""
    out = np.full(idx.size, np.nan)
    found = _annotations(events)
    kv = _kv_cache(events) if found else None
    if kv is None:
        return out
    core_ids = [i for i, n in enumerate(events.names) if _is_core(n)]
    at = np.flatnonzero(np.isin(events.name[idx], core_ids))
    for k, batch in zip(at.tolist(), _enclosing(events, found, idx[at]), strict=True):
        i = int(idx[k])
        q = events.input_dims(i, 0)
        sid = int(events.shape[i])
        if batch is None or batch.prefill is None or batch.decode is None or q is None or len(q) != 3 \
                or q[0] < batch.prefill_tokens + batch.decode_tokens or sid < 0 or not events.shapes[sid].types \
                or not _believed(events, i):
            continue
        q_bytes = float(math.prod(q)) * elem_bytes(events.shapes[sid].types[0])
        out[k] = 2 * q_bytes + (batch.prefill.sk + batch.decode.sk) * kv[0]
    return out


def _enclosing(events: Events, found: list[tuple[int, Batch]], ops: np.ndarray) -> list[Batch | None]:
    """For each op of ``ops``: the batch of the first annotation (in event order) on its thread whose span holds
    it, None where none does. One sort and two binary searches per op: on a thread, the annotations that start
    at or before the op are a prefix in start order, and the first of them that ends at or after it is the first
    whose running maximum end does (an op under N annotations costs log N, not N)."""
    out: list[Batch | None] = [None] * ops.size
    if not found or not ops.size:
        return out
    ann = np.array([a for a, _ in found], np.int64)
    ann = ann[np.lexsort((ann, events.ts[ann], events.track[ann]))]  # event order already; sorted to be sure
    batches = dict(found)
    a_track, a_start = events.track[ann], events.ts[ann]
    a_stop = a_start + events.dur[ann]
    o_track, o_start = events.track[ops], events.ts[ops]
    o_stop = o_start + events.dur[ops]
    for t in np.unique(o_track).tolist():
        lo, hi = (int(x) for x in np.searchsorted(a_track, [t, t + 1]))
        if lo == hi:
            continue
        on = np.flatnonzero(o_track == t)
        started = lo + np.searchsorted(a_start[lo:hi], o_start[on], side="right")
        reach = np.maximum.accumulate(a_stop[lo:hi])
        first = lo + np.searchsorted(reach, o_stop[on], side="left")
        for k, j in zip(on[first < started].tolist(), first[first < started].tolist(), strict=True):
            out[k] = batches[int(ann[j])]
    return out


def _believed(events: Events, i: int) -> bool:
    """Whether op ``i``'s shapes describe tensors that could exist (``flops.plausible``: none over 1 PiB, no
    negative size); the others are counted once in the diagnostics by attribution, and give no figure here."""
    sid = int(events.shape[i])
    return sid >= 0 and plausible(events.shapes[sid])


def _kv_cache(events: Events) -> tuple[float, str] | None:
    """The KV cache's bytes per token per layer and its element type, from the first KV write op
    whose shapes hold its k and v (or MLA's latent and rotary parts) and the cache's type."""
    ids = [i for i, n in enumerate(events.names) if canonical(n) in SERVING_KV_WRITE_OPS]
    if not ids:
        return None
    for i in np.flatnonzero(np.isin(events.name, ids) & (events.kind == Kind.CPU_OP)).tolist():
        sid = int(events.shape[i])
        if sid < 0:
            continue
        s = events.shapes[sid]
        types = s.types
        if len(s.dims) <= SERVING_KV_CACHE_ARG or len(types) <= SERVING_KV_CACHE_ARG or not plausible(s):
            continue
        k, v = events.input_dims(i, 0), events.input_dims(i, 1)
        cache_type = types[SERVING_KV_CACHE_ARG]
        if k is None or v is None or len(k) < 2 or len(v) < 2 or cache_type in ("", "Scalar"):
            continue
        size = elem_bytes(cache_type)
        per_token = math.prod(k[1:]) + math.prod(v[1:])
        if per_token <= 0:
            continue
        return float(per_token * size), types[SERVING_KV_CACHE_ARG]
    return None


def serving_batch(events: Events, step: np.ndarray, steps: list[int], layers: int) -> ServingBatch | None:
    """The batches of the profiled steps, per step (module docstring); None without annotations."""
    found = [(i, b) for i, b in _annotations(events) if not steps or int(step[i]) in steps]
    if not found:
        return None
    n = max(len(steps), 1)
    batches = [b for _, b in found]
    detailed = all(b.decode is not None for b in batches)
    kv = _kv_cache(events)
    decode_keys = float(sum(b.decode.sk for b in batches if b.decode is not None)) / n if detailed else None
    return _said(ServingBatch(
        annotation=events.names[int(events.name[found[0][0]])][:200],
        iterations=len(batches) / n,
        prefill_requests=sum(b.prefill_requests for b in batches) / n,
        prefill_tokens=sum(b.prefill_tokens for b in batches) / n,
        decode_requests=sum(b.decode_requests for b in batches) / n,
        decode_tokens=sum(b.decode_tokens for b in batches) / n,
        pairs=float(sum(b.pairs() or 0 for b in batches)) / n if detailed else None,
        fewest_pairs=float(sum(b.fewest_pairs() for b in batches)) / n,
        decode_keys=decode_keys,
        kv_bytes_per_token=kv[0] if kv else None,
        kv_dtype=kv[1] if kv else None,
        decode_kv_bytes=decode_keys * layers * kv[0] if decode_keys is not None and kv and layers else None,
    ))


def decode_roof(serving: ServingBatch, layers: list[LayerStats], bytes_per_s: float | None) -> ServingBatch:
    """``serving`` with its decode cores' device time and the time its KV read takes at the peak
    bandwidth ``bytes_per_s``: only where every iteration is decode alone (a mixed batch's cores
    time prefill too) and the cores ran kernels (not captured into a graph)."""
    core_us = sum(p.device_us for layer in layers for p in layer.phases if p.phase == Phase.SDPA)
    pure = serving.prefill_tokens == 0 and serving.decode_tokens > 0 and core_us > 0
    return _said(msgspec.structs.replace(
        serving, decode_core_us=core_us if pure else None,
        decode_roof_us=serving.decode_kv_bytes / bytes_per_s * 1e6
        if pure and serving.decode_kv_bytes and bytes_per_s else None))


def _said(b: ServingBatch) -> ServingBatch:
    """``b`` with the sentences that say its figures."""
    kinds = [f"{count(b.prefill_requests, 'prefill request', 'prefill requests')} "
             f"({count(b.prefill_tokens, 'token', 'tokens')})" if b.prefill_requests else "no prefill",
             f"{count(b.decode_requests, 'decode request', 'decode requests')} "
             f"({count(b.decode_tokens, 'token', 'tokens')})" if b.decode_requests else "no decode"]
    out = [f"{count(b.iterations, 'engine iteration', 'engine iterations')} per step: {series(kinds)} "
           f"(the engine's annotations: {b.annotation})"]
    if b.pairs is not None:
        out.append(f"Each layer's attention cores attend {_big(b.pairs)} (query, key) pairs per step, causal: "
                   "4 · heads · head size FLOPs each, counted from the annotated lengths")
    else:
        out.append(f"The annotations give no sequence lengths: each layer's cores attend at least "
                   f"{_big(b.fewest_pairs)} (query, key) pairs per step (prefills of equal length with no cached "
                   "prefix, one key per decode token), and their FLOPs are not counted")
    if b.kv_bytes_per_token is not None:
        out.append(f"KV cache: {size(b.kv_bytes_per_token)} per token per layer "
                   f"({(b.kv_dtype or '').removeprefix('c10::')}, from the KV write's k, v and cache)")
    if b.decode_kv_bytes:
        line = (f"Decode reads {size(b.decode_kv_bytes)} of KV cache per step, all layers ({_big(b.decode_keys or 0)} "
                "keys in each)")
        if b.decode_roof_us is not None and b.decode_core_us:
            line += (f": {duration(b.decode_roof_us)} at the peak memory bandwidth; its cores took "
                     f"{duration(b.decode_core_us)} ({share(b.decode_roof_us / b.decode_core_us)} of the roof)")
        out.append(line)
    return msgspec.structs.replace(b, sentences=out)


def _big(x: float) -> str:
    """``'7.87M'``, ``'512'``."""
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= scale:
            return f"{x / scale:.3g}{unit}"
    return f"{x:.0f}"
