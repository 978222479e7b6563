"""What makes runs like for like: a run's configuration from its metadata, as the key that groups
runs (compare's groups and headlines, scaling's series) and as the words that name a group.

A run's configuration is the runner's ``tb_attn_run.json`` ``config`` (model, sizes, sequence
length, dtype, mode, dropout, mask, parallel layout) plus its world size. Two runs are like for
like but one field when all the others are equal: ``config_key(cfg, but="impl")`` groups runs that
differ only in their implementation, ``but="seq"`` a scaling series.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from tb_attn_plugin.analysis.common.spread import representative_worker
from tb_attn_plugin.types.schema import RunSummary
from tb_attn_plugin.vocab.backends import APPROXIMATE_BACKENDS, LINEAR_BACKENDS

__all__ = ["APPROXIMATE_BACKENDS", "COUNT_KEYS", "LINEAR_BACKENDS", "MAX_COUNT", "checked_config", "checked_metadata",
           "config", "config_key", "distinct_labels", "exact", "group_label", "text"]

#: The configuration's counts: lengths, sizes and ranks, each a whole number in 1..``MAX_COUNT`` (0..: a prompt's
#: length and the new tokens, 0 where the run is no generation). Any other
#: number there (0, negative, fractional, infinite, NaN, or of 400 digits, which no float holds) is read as
#: absent, with a note (``checked_config``); a string is a label, kept as it is.
COUNT_KEYS = ("seq", "batch", "heads", "kv_heads", "d_model", "head_dim", "layers", "prompt_len", "new_tokens",
              "world_size")
MAX_COUNT = 1 << 31
_ZERO_MEANS_NONE = frozenset({"prompt_len", "new_tokens"})  # 0: not a generation (the runner's default)
_SHOWN_DIGITS = 24  # of a number a note repeats


def checked_config(metadata: Mapping[str, Any] | None) -> tuple[dict[str, Any], list[str]]:
    """A run's configuration from its metadata (``config``, and the run's model, implementation, dtype and world
    size where it names none), with each count out of range left out; and a note per count left out."""
    meta, notes = checked_metadata(metadata)
    meta = meta or {}
    raw = meta.get("config")
    out: dict[str, Any] = dict(raw) if isinstance(raw, Mapping) else {}
    for key in ("model", "impl", "dtype", "world_size"):
        if key in meta:
            out.setdefault(key, meta[key])
    return out, notes


def checked_metadata(metadata: Mapping[str, Any] | None) -> tuple[dict[str, Any] | None, list[str]]:
    """``metadata`` with each count of its configuration out of range left out (a new mapping where one is), and
    a note per count left out: what a trace's analyses and the runs' comparisons read."""
    if metadata is None:
        return None, []
    raw = metadata.get("config")
    places = [("config.", raw)] if isinstance(raw, Mapping) else []
    places.append(("", {"world_size": metadata["world_size"]} if "world_size" in metadata else {}))
    notes, bad = [], []
    for prefix, where in places:
        for key in COUNT_KEYS:
            value = where.get(key)
            least = 0 if key in _ZERO_MEANS_NONE else 1
            if isinstance(value, (int, float)) and not (type(value) is int and least <= value <= MAX_COUNT):
                bad.append(prefix + key)
                notes.append(f"Run metadata ignored: {prefix}{key} (a count must be a whole number in "
                             f"{least}..{MAX_COUNT}, got {_shown(value)}).")
    if not bad:
        return metadata if isinstance(metadata, dict) else dict(metadata), []
    out = {k: v for k, v in metadata.items() if k not in bad}
    if isinstance(raw, Mapping):
        out["config"] = {k: v for k, v in raw.items() if "config." + k not in bad}
    return out, notes


def _shown(value: int | float) -> str:
    """A number as a note repeats it: an integer of more digits than 24 by its length alone."""
    if type(value) is int and abs(value) >= 10**_SHOWN_DIGITS:
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
    return repr(value)


def config(run: RunSummary) -> dict[str, Any]:
    """The run's configuration (``checked_config``)."""
    return checked_config(run.metadata)[0]


def config_key(cfg: dict[str, Any], *, but: str | tuple[str, ...]) -> str:
    """The run's whole configuration but one field, as a key: runs scale together when all but
    ``seq`` matches, and compare like for like when all but ``impl`` does (the model, its sizes,
    dtype, mode, dropout, mask, parallel layout and world size: a two-rank tensor-parallel run is
    not a point of a single-process series)."""
    skip = (but,) if isinstance(but, str) else but
    return json.dumps({k: v for k, v in cfg.items() if k not in skip}, sort_keys=True, default=str)


def text(value: object) -> str | None:
    """A metadata string as the response declares it: anyone can write a metadata file, and a
    number where a name belongs is no name."""
    return value if isinstance(value, str) else None


def group_label(cfg: dict[str, Any]) -> str:
    """A group of like-for-like runs in words: "builtin, seq 512, float32, training"."""
    length = (f"prompt {cfg.get('prompt_len')} + {cfg.get('new_tokens')} tokens" if cfg.get("mode") == "generate"
              else f"seq {cfg.get('seq')}")
    parts = [str(cfg.get("model") or "?"), length, str(cfg.get("dtype") or "?"), str(cfg.get("mode") or "")]
    if cfg.get("parallel") not in (None, "none"):
        parts.append(f"parallel {cfg['parallel']}")
    if isinstance(cfg.get("world_size"), int) and cfg["world_size"] > 1:
        parts.append(f"{cfg['world_size']} ranks")
    return ", ".join(p for p in parts if p)


#: What ``group_label`` says of a configuration: the keys a label already names.
_LABELLED = frozenset({"model", "seq", "prompt_len", "new_tokens", "dtype", "mode", "parallel", "world_size"})


def distinct_labels(cfgs: list[dict[str, Any]], *, but: tuple[str, ...] = ()) -> list[str]:
    """``group_label`` of each group's configuration, each made distinct where two groups would
    read alike: the fields that tell them apart (not ``but``, what the groups hold together) are
    added, "batch 4", "kv_cache static"."""
    labels = [group_label(c) for c in cfgs]
    out = list(labels)
    for label in set(labels):
        same = [i for i, x in enumerate(labels) if x == label]
        if len(same) < 2:
            continue
        keys = sorted({k for i in same for k in cfgs[i]} - _LABELLED - set(but))
        differ = [k for k in keys if len({json.dumps(cfgs[i].get(k), sort_keys=True, default=str) for i in same}) > 1]
        for i in same:
            out[i] = ", ".join([label, *(f"{k} {cfgs[i].get(k)}" for k in differ)])
    return out


def exact(run: RunSummary) -> bool:
    """Whether a run computes softmax attention exactly: not an approximate backend, and no
    quantized projections (``config.quant``)."""
    return (representative_worker(run).backend not in APPROXIMATE_BACKENDS
            and not isinstance(config(run).get("quant"), str))
