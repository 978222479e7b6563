"""Module calls in a trace, and which of them are attention's.

A module's call is written two ways: an ``nn.Module: <Class>_<n>`` event (``with_modules`` /
``with_stack``), or a label another tool puts around the module's forward (a user annotation read
by ``kineto.module_label``: PyTorch Lightning's ``[pl][module]<module>.<Class>: <path>``, or a
label holding a module path, ``model.layers.3.self_attn``). Both are a module's call alike:
inference takes attention blocks from them, they do not part sibling ops (``extent``), and the
outermost one names the call that numbers the blocks found by their ops (``numbering``).

An attention module's call is:

- an ``nn.Module`` event or a Lightning label whose class ends in ``Attention`` (``LlamaAttention``,
  ``MultiheadAttention``, ``SelfAttention``);
- a label (Lightning's too) whose module path has an integer part (a layer's index) and ends in
  an attention name (``_ATTENTION_PART``): ``attn`` or ``attention``, case-insensitive, alone or
  after a word of two or more letters, digits and underscores (a letter first), with or without an
  underscore between, a number allowed after it (``attn``, ``self_attn``, ``cross_attn``,
  ``encoder_attn``, ``self_attention``, ``multi_head_attention``,
  ``SelfAttention``, ``EncDecAttention``, diffusers' ``attn1``), or in ``self`` right after one
  (BERT's ``attention.self``). GPT-2's ``c_attn`` and ``q_attn`` (one letter before) are its
  projections, and a path that ends elsewhere (``model.layers.3``, ``...self_attn.q_proj``) is
  not attention's.

The outermost attention call of a nest is the block. Its module is the label's path where a label
names it (``model.layers.3.self_attn``: what ``runner.instrument()`` writes in its block scopes),
else the ``nn.Module`` instance (``LlamaAttention_3``). An ``nn.Module`` event that holds an
attention label of the same module (Lightning's hooks run inside the module's call, so with
``with_stack`` its label sits in the module's event, no other module call between) is one block
named by the label's path.
"""

from __future__ import annotations

import re
from typing import NamedTuple

import numpy as np

from tb_attn_plugin.analysis.attribution.nesting import nearest_marked_ancestor
from tb_attn_plugin.trace.events import Events
from tb_attn_plugin.trace.kineto import MODULE_PREFIX, Kind, ModuleLabel, module_label

__all__ = ["AttentionCalls", "attention_calls", "is_attention_label", "is_attention_module", "module_calls",
           "module_labels"]

_INSTANCE_RE = re.compile(r"^(?P<cls>.*?)(?:_(?P<n>\d+))?$")
#: The last part of an attention module's path (module docstring).
_ATTENTION_PART = re.compile(r"(?:[a-z][a-z0-9_]*[a-z0-9]_?)?(?:attn|attention)\d*", re.IGNORECASE | re.ASCII)


def is_attention_module(name: str) -> bool:
    """Whether ``name`` is an ``nn.Module`` event's of a class ending in ``Attention``."""
    if not name.startswith(MODULE_PREFIX):
        return False
    m = _INSTANCE_RE.match(name[len(MODULE_PREFIX):])
    return bool(m) and m.group("cls").endswith("Attention")  # type: ignore[union-attr]


def is_attention_label(label: ModuleLabel) -> bool:
    """Whether a label's module is attention (module docstring): by its class, where the label
    names one, or by its path."""
    parts = label.path.split(".")
    if label.cls.endswith("Attention"):
        return True
    if not any(p.isdigit() for p in parts):
        return False
    return bool(_ATTENTION_PART.fullmatch(parts[-1])) or (
        parts[-1] == "self" and len(parts) > 1 and bool(_ATTENTION_PART.fullmatch(parts[-2])))


def _per_name(events: Events) -> list[ModuleLabel | None]:
    return [module_label(n) for n in events.names]


def module_labels(events: Events) -> np.ndarray:
    """Per event: whether it is another tool's label around a module's forward."""
    named = np.array([label is not None for label in _per_name(events)] or [False], np.bool_)
    return named[events.name] & (events.kind == Kind.ANNOTATION)


def module_calls(events: Events) -> np.ndarray:
    """Per event: whether it is a module's call, an ``nn.Module`` event or a module label."""
    return (events.kind == Kind.MODULE) | module_labels(events)


class AttentionCalls(NamedTuple):
    """The forward calls of attention modules in a trace."""

    every: list[int]  # every one, nested ones too, in file order
    outer: list[tuple[int, str]]  # the outermost of each nest, with its module (path or instance)


def attention_calls(events: Events, parent: np.ndarray, forward: np.ndarray) -> AttentionCalls:
    """The attention modules' forward calls, and the outermost of each nest with its module
    (module docstring)."""
    name, kind = events.name, events.kind
    # Each name's module, where it is an attention module's: the instance, or the label's path.
    module: list[str | None] = [n[len(MODULE_PREFIX):] if is_attention_module(n) else None for n in events.names]
    path = [label.path if label is not None and is_attention_label(label) else None for label in _per_name(events)]
    module_ids = [k for k, x in enumerate(module) if x is not None]
    path_ids = [k for k, x in enumerate(path) if x is not None]
    if not module_ids and not path_ids:
        return AttentionCalls([], [])
    is_module = np.isin(name, module_ids) & (kind == Kind.MODULE)
    is_label = np.isin(name, path_ids) & (kind == Kind.ANNOTATION)
    every = np.flatnonzero((is_module | is_label) & forward).tolist()
    chosen = set(every)
    outer = []
    for i in every:
        p = int(parent[i])
        while p >= 0 and p not in chosen:
            p = int(parent[p])
        if p < 0:
            outer.append(i)
    # A module event's own label: the first attention label whose nearest module call it is.
    near = nearest_marked_ancestor(parent, module_calls(events))
    own: dict[int, int] = {}
    for i in every:
        if is_label[i]:
            own.setdefault(int(near[i]), i)
    named = []
    for i in outer:
        j = own.get(i, i) if is_module[i] else i
        named.append((i, path[name[j]] if is_label[j] else module[name[j]] or ""))
    return AttentionCalls(every, named)
