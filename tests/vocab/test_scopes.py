"""The scope grammar shared by the runner and the plugin."""

from __future__ import annotations

import pytest

from tb_attn_plugin.vocab.scopes import (
    GRAMMAR_VERSION,
    MAX_HEADS,
    MAX_LAYERS,
    OUT_OF_RANGE,
    PHASES,
    Scope,
    format_scope,
    is_scope_name,
    parse_scope,
    read_scope,
)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"layer": 3}, "tbattn.v1/L3"),
        ({"layer": 3, "phase": "softmax"}, "tbattn.v1/L3/softmax"),
        ({"layer": 0, "head": 5, "phase": "qk_matmul"}, "tbattn.v1/L0/H5/qk_matmul"),
        ({"layer": 11, "head": 2}, "tbattn.v1/L11/H2"),
        ({"layer": 1, "module": "encoder.layer.1.attention"}, "tbattn.v1/L1 encoder.layer.1.attention"),
    ],
)
def test_format_and_parse_round_trip(kwargs: dict[str, object], name: str) -> None:
    assert format_scope(**kwargs) == name  # type: ignore[arg-type]
    parsed = parse_scope(name)
    assert parsed == Scope(version=GRAMMAR_VERSION, **kwargs)  # type: ignore[arg-type]
    assert is_scope_name(name)


@pytest.mark.parametrize(
    "name",
    ["aten::softmax", "tbattn.v1", "tbattn.v1/Lx", "tbattn.v1/L1/not_a_phase", "tbattn.v1/L1/H/softmax",
     "tbattn.v1/L-1", "xtbattn.v1/L1", "tbattn.v1/L1/softmax extra words", ""],
)
def test_other_names_do_not_parse(name: str) -> None:
    assert parse_scope(name) is None


def test_every_phase_is_formattable_and_block_flag() -> None:
    for phase in PHASES:
        scope = parse_scope(format_scope(2, phase=phase))
        assert scope is not None and scope.phase == phase and not scope.is_block
    assert parse_scope("tbattn.v1/L2").is_block  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "kwargs",
    [{"layer": -1}, {"layer": 0, "head": -2}, {"layer": 0, "phase": "nope"},
     {"layer": 0, "phase": "softmax", "module": "a.b"}, {"layer": 0, "module": "has space"}],
)
def test_format_rejects_bad_parts(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        format_scope(**kwargs)  # type: ignore[arg-type]


def test_newer_grammar_versions_still_parse() -> None:
    scope = parse_scope("tbattn.v2/L4/sdpa")
    assert scope is not None and scope.version == 2 and scope.phase == "sdpa"


def test_the_largest_layer_and_heads_in_bounds_round_trip() -> None:
    top_layer, top_head = MAX_LAYERS - 1, MAX_HEADS - 1
    name = format_scope(top_layer, head=range(0, MAX_HEADS), phase="softmax")
    assert name == f"tbattn.v1/L{top_layer}/H0-{top_head}/softmax"
    scope = parse_scope(name)
    assert scope is not None and scope.heads == range(MAX_HEADS) and scope.layer == top_layer


@pytest.mark.parametrize("name", [
    f"tbattn.v1/L{MAX_LAYERS}", "tbattn.v1/L2147483648/softmax", f"tbattn.v1/L0/H{MAX_HEADS}",
    "tbattn.v1/L0/H2147483648/softmax", "tbattn.v1/L0/H0-1000000/softmax", f"tbattn.v1/L0/H4095-{MAX_HEADS}/mask",
    "tbattn.v1/L" + "9" * 5000, "tbattn.v1/L0/H" + "1" * 5000 + "/softmax", "tbattn.v" + "9" * 5000 + "/L0",
])
def test_numbers_out_of_range_are_no_scope_and_say_why(name: str) -> None:
    """Never an exception (``int()`` refuses 5000 digits) and never an int32 overflow downstream."""
    assert parse_scope(name) is None
    assert read_scope(name) == OUT_OF_RANGE
    assert is_scope_name(name)


def test_read_scope_is_parse_scope_for_everything_else() -> None:
    for name in ("tbattn.v1/L3/H4-7/softmax", "tbattn.v1/L0 a.b", "aten::mm", "tbattn.v1/L1/nope",
                 "tbattn.v1/L1/H5-3/softmax", "tbattn.v1/L1/H2-3"):
        assert read_scope(name) == parse_scope(name)


@pytest.mark.parametrize("kwargs", [{"layer": MAX_LAYERS}, {"layer": 0, "head": MAX_HEADS},
                                    {"layer": 0, "head": range(1, MAX_HEADS + 1), "phase": "softmax"}])
def test_format_refuses_numbers_a_reader_would_ignore(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="must be <"):
        format_scope(**kwargs)  # type: ignore[arg-type]


def test_the_tab_orders_phases_as_the_grammar_does() -> None:
    """``frontend/src/metrics.ts`` keeps its own list (the tab imports no Python): it must be
    ``PHASES`` in order, then "other", and name and colour every phase."""
    import re
    from pathlib import Path

    source = (Path(__file__).resolve().parents[2] / "frontend" / "src" / "metrics.ts").read_text()
    block = re.search(r"export const PHASE_ORDER = \[(.*?)\];", source, re.S)
    assert block is not None
    assert re.findall(r'"([a-z_]+)"', block.group(1)) == [*PHASES, "other"]
    for table in ("PHASE_LABELS", "PHASE_COLORS"):
        body = re.search(rf"const {table}: Record<string, string> = \{{(.*?)\}};", source, re.S)
        assert body is not None and set(re.findall(r"^\s*([a-z_]+):", body.group(1), re.M)) == {*PHASES, "other"}
