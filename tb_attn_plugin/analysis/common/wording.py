"""Numbers and lists written for people: time, bytes, shares, counts and lists of layers.

The findings write sentences with these ("2.31 ms per step", "1.5 MiB", "layers 0-3") and the
CLI's tables print their columns with them (``cli.report``), so one trace reads the same in
both. Trace times are microseconds and sizes are bytes, as everywhere in the analysis. Pure
and light: no numpy, nothing that the CLI would pay for at start-up.
"""

from __future__ import annotations

__all__ = ["MAX_LISTED", "MEMORY_NOT_RECORDED", "attention", "core_only_note", "count", "duration", "int_range",
           "layer_list", "mib", "ms", "number", "pct", "series", "share", "size"]

MAX_LISTED = 12  # layers named in a sentence (a finding's evidence lists them all)
#: Why a trace without memory events has no bytes figures (``WorkerSummary.memory_recorded``); the
#: tab's ``MEMORY_NOT_RECORDED`` (frontend/src/views/common.ts) says the same.
MEMORY_NOT_RECORDED = "memory not recorded (profile_memory=False)"
_UNITS = (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))


def ms(us: float, digits: int = 3) -> str:
    """Milliseconds, without the unit: ``ms(1234.5)`` is ``'1.234'`` (table columns)."""
    return f"{us / 1000:.{digits}f}"


def mib(nbytes: float, digits: int = 2) -> str:
    """MiB, without the unit: ``mib(3 << 20)`` is ``'3.00'`` (table columns)."""
    return f"{nbytes / (1 << 20):.{digits}f}"


def duration(us: float) -> str:
    """``'2.31 ms'`` from a millisecond on, else ``'12.5 µs'``."""
    return f"{ms(us, 2)} ms" if us >= 1000 else f"{us:.1f} µs"


def size(nbytes: float) -> str:
    """In the largest binary unit that fits: ``'1.5 MiB'``, ``'512 B'``."""
    for unit, scale in _UNITS:
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes:.0f} B"


def pct(share: float) -> str:
    """A share in [0, 1] as a whole percentage: ``'42%'``."""
    return f"{100 * share:.0f}%"


def share(x: float) -> str:
    """A share with one decimal below 10% (``'0.4%'``, ``'4.2%'``), whole from there (``'42%'``):
    a roofline's small shares differ by more than rounding to 0% would say."""
    return f"{100 * x:.1f}%" if abs(x) < 0.1 else pct(x)


def number(x: float) -> str:
    """One decimal, none for whole numbers: ``'2.5'``, ``'3'`` (means per step or per call)."""
    return f"{x:.1f}".removesuffix(".0")


def spread_words(lo: float, hi: float, kind: str, steps: int) -> str:
    """A per-step figure's spread (``Spread``) as a sentence's verb phrase, saying which spread it is:
    "ranged 28.4 ms to 35.1 ms over 6 steps" (every step), "had an interquartile range of 28.4 ms to
    35.1 ms over 12 steps" (from 8 steps: the middle half)."""
    what = "had an interquartile range of" if kind == "iqr" else "ranged"
    return f"{what} {duration(lo)} to {duration(hi)} over {steps} steps"


def count(x: float, one: str, many: str) -> str:
    """``'1 copy'``, ``'2.5 copies'``."""
    return f"{number(x)} {one if x == 1 else many}"


def int_range(values: list[int]) -> str | None:
    """``'first-last'`` when ``values`` are ascending consecutive integers, else None."""
    if values and values == list(range(values[0], values[-1] + 1)):
        return f"{values[0]}-{values[-1]}"
    return None


def layer_list(layers: list[int]) -> str:
    """``'layer 3'``, ``'layers 0-3'``, ``'layers 0, 2 and 5'``; past ``MAX_LISTED`` layers, the
    first ones and how many more (a trace can have 4096 of them: the text stays a sentence)."""
    if len(layers) == 1:
        return f"layer {layers[0]}"
    if (run := int_range(layers)) is not None:
        return f"layers {run}"
    if len(layers) > MAX_LISTED:
        return "layers " + ", ".join(map(str, layers[:MAX_LISTED])) + f" and {len(layers) - MAX_LISTED} more"
    return "layers " + ", ".join(map(str, layers[:-1])) + f" and {layers[-1]}"


def series(items: list[str]) -> str:
    """``'a'``, ``'a and b'``, ``'a, b and c'``."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + f" and {items[-1]}" if items else ""


def attention(core_only: int, layers: int) -> str:
    """What a figure over ``layers`` attention layers measures, ``core_only`` of them found by
    their core alone (``LayerStats.core_only``): ``'the attention core'`` when every one is,
    else ``'attention'``. Capitalize with ``str.capitalize``."""
    return "the attention core" if layers and core_only >= layers else "attention"


def core_only_note(core_only: int, layers: int) -> str:
    """Where some of ``layers`` layers, not all, are their core alone: ``'2 of 4 layers: the core
    only'``; else ``''`` (``attention`` says it when all are)."""
    return f"{core_only} of {layers} layers: the core only" if 0 < core_only < layers else ""
