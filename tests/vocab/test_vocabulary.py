"""One home for each vocabulary: groups of phases are named in ``scopes.py``, beside the phase
names, and backend names in ``backends.py``, beside their labels and families. A module that needs
a group builds it from the named ones; a module that compares a backend names a ``Backend``."""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path

import msgspec

from tb_attn_plugin.analysis.ops import backend as detection
from tb_attn_plugin.vocab import backends, scopes
from tb_attn_plugin.vocab.backends import Backend, Family
from tb_attn_plugin.vocab.scopes import OTHER, PHASES, Phase

PACKAGE = Path(scopes.__file__).parent.parent
FRONTEND = PACKAGE.parent / "frontend" / "src"
_PHASE_NAMES = {*PHASES, OTHER}
_BACKEND_NAMES = {b.value for b in Backend}

#: Literal groups of phases or backend names allowed outside their homes, each with its reason:
#: (module, the names it spells) -> why.
ALLOWED: dict[tuple[str, frozenset[str]], str] = {
    # The state machine that infers phases from the order of ops: each tuple is a rule (which phase
    # may come after which), not a group that another module could share.
    ("analysis/attribution/roles.py", frozenset({"av_matmul", "sdpa", "out_proj"})): "a rule of the phase inference",
    ("analysis/attribution/roles.py", frozenset({"qkv_proj", "mask", "copy"})): "a rule of the phase inference",
    ("analysis/attribution/roles.py", frozenset({"kv_expand", "rope"})): "a rule of the phase inference",
    # The wording of each fused phase in a sentence (its keys are FUSED_PHASES: checked below).
    ("analysis/cross_run/why_slower.py", frozenset({"sdpa", "flex", "compiled"})): "a sentence per fused phase",
}


def _modules() -> list[Path]:
    modules = sorted(PACKAGE.rglob("*.py"))
    assert len(modules) > 30
    return modules


@cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def _name(path: Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


def _phase(node: ast.expr) -> str | None:
    """The phase a node names: a string constant or ``Phase.X``."""
    if isinstance(node, ast.Constant) and node.value in _PHASE_NAMES:
        return str(node.value)
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "Phase":
        return Phase[node.attr].value
    return None


def _backend(node: ast.expr | None) -> str | None:
    return str(node.value) if isinstance(node, ast.Constant) and node.value in _BACKEND_NAMES else None


def _collections(tree: ast.AST) -> Iterator[tuple[int, list[ast.expr]]]:
    """The elements of every literal collection (set, tuple, list) and the keys of every dict."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Set, ast.Tuple, ast.List)):
            yield node.lineno, list(node.elts)
        elif isinstance(node, ast.Dict):
            yield node.lineno, [k for k in node.keys if k is not None]


NameOf = Callable[[ast.expr], str | None]


def _spelled(path: Path, name_of: NameOf) -> list[tuple[int, frozenset[str]]]:
    out = []
    for line, elements in _collections(_tree(path)):
        names = [n for e in elements if (n := name_of(e)) is not None]
        if len(names) >= 2:
            out.append((line, frozenset(names)))
    return out


def _found(home: set[str], name_of: NameOf) -> dict[str, list[tuple[int, list[str]]]]:
    """Per module outside ``home``: the lines that spell two names or more, and the names."""
    found: dict[str, list[tuple[int, list[str]]]] = {}
    for path in _modules():
        if _name(path) in home:
            continue
        for line, names in _spelled(path, name_of):
            if (_name(path), names) not in ALLOWED:
                found.setdefault(_name(path), []).append((line, sorted(names)))
    return found


def test_no_module_spells_a_group_of_phases() -> None:
    """A set, tuple, list or dict of two phase names or more (strings or ``Phase`` members) is a
    group: it belongs in scopes.py, named for what its members share."""
    assert _found({"vocab/scopes.py"}, _phase) == {}


def test_no_module_spells_a_group_of_backends() -> None:
    assert _found({"vocab/backends.py", "analysis/ops/backend.py"}, _backend) == {}


def _backend_comparisons(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """String backend names compared with something that holds a backend (``x.backend``, ``backend``)."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        if not any("backend" in (s.attr if isinstance(s, ast.Attribute) else s.id if isinstance(s, ast.Name)
                                 else "") for s in sides):
            continue
        for side in sides:
            items = side.elts if isinstance(side, (ast.Set, ast.Tuple, ast.List)) else [side]
            for item in items:
                if (name := _backend(item)) is not None:
                    yield node.lineno, name


def test_no_module_compares_a_backend_with_a_string() -> None:
    found = {_name(p): hits for p in _modules() if _name(p) not in {"vocab/backends.py", "analysis/ops/backend.py"}
             and (hits := list(_backend_comparisons(_tree(p))))}
    assert found == {}


def test_the_detection_rules_name_backends() -> None:
    """analysis/ops/backend.py may spell needles, but every backend its rules give is a ``Backend``."""
    tables = {n: v for n, v in vars(detection).items() if n.endswith("_RULES")}
    assert len(tables) >= 6
    assert [n for n, rules in tables.items() if not all(isinstance(b, Backend) for b, _ in rules)] == []
    assert detection.BACKENDS == tuple(Backend)
    assert set(detection.LIBRARY_BACKENDS) == backends.of_family(Family.LIBRARY)
    assert set(detection.SERVING_BACKENDS) == backends.of_family(Family.SERVING)


def test_a_backend_is_its_string() -> None:
    """A summary holds plain strings (``detect_backend`` gives the value, as JSON decodes it), and
    the analysis compares them with members: both read the same."""
    backend, _ = detection.detect_backend(["aten::_scaled_dot_product_flash_attention_for_cpu"], [])
    assert backend == Backend.CPU_FLASH and type(backend) is str
    for b in Backend:
        assert b == b.value and hash(b) == hash(b.value) and f"{b}" == str(b) == b.value
        assert Backend(b.value) is b and b.label and isinstance(b.family, Family)
        assert msgspec.json.encode({b: [b]}) == json.dumps({b.value: [b.value]}, separators=(",", ":")).encode()
    assert len({b.label for b in Backend}) == len(Backend)


def test_backend_groups_are_families() -> None:
    assert backends.UNFUSED_BACKENDS == {Backend.NAIVE, Backend.SDPA_MATH, Backend.FLEX_EAGER}
    assert backends.DENSE_WORK_BACKENDS == backends.UNFUSED_BACKENDS | {
        Backend.FLASH, Backend.CPU_FLASH, Backend.ROCM_FLASH, Backend.EFFICIENT, Backend.CUDNN}
    assert backends.LINEAR_BACKENDS == {Backend.LINEAR, Backend.PERFORMER, Backend.GATED_DELTANET}
    # A hybrid model's Gated DeltaNet is linear attention the model was trained with, not an approximation.
    assert backends.MODEL_LINEAR_BACKENDS == {Backend.GATED_DELTANET}
    assert backends.APPROXIMATE_BACKENDS == {Backend.LINEAR, Backend.PERFORMER, Backend.INT8_QK}


def test_phase_groups_differ_only_where_documented() -> None:
    groups = {n: getattr(scopes, n) for n in scopes.__all__ if n.endswith("_PHASES")}
    assert len(groups) >= 8
    for name, group in groups.items():
        assert isinstance(group, frozenset) and group <= _PHASE_NAMES and len(group) >= 2, name
        assert all(type(p) is str for p in group), name  # plain strings, as summaries hold them
    assert scopes.CORE_PHASES == scopes.UNFUSED_CORE_PHASES | scopes.FUSED_PHASES
    assert scopes.UNFUSED_CORE_PHASES - scopes.SCORE_PASS_PHASES == {"qk_matmul", "softmax", "av_matmul"}
    # The scores: int8's dequantized scores hold them too; attn·V's output and a compiled block do not.
    assert scopes.SCORE_PHASES - scopes.CORE_PHASES == {"dequantize"}
    assert scopes.CORE_PHASES - scopes.SCORE_PHASES == {"av_matmul", "compiled"}
    assert scopes.CORE_PHASES_BUT_PASSES == {"qk_matmul", "softmax", "av_matmul", "sdpa", "flex", "compiled"}
    # Communication is no head's work either: a tensor-parallel rank's all-reduce sums every head at once.
    assert scopes.UNSPLIT_PHASES == scopes.PROJECTION_PHASES | {"comm", OTHER}
    assert scopes.in_order(scopes.UNSPLIT_PHASES) == ("qkv_proj", "out_proj", "comm", "other")
    from tb_attn_plugin.analysis.cross_run import why_slower

    assert set(why_slower._FUSED_CALL) == scopes.FUSED_PHASES


def test_the_tab_keeps_no_group_of_phases() -> None:
    """The tab reads its groups from the generated ``types.ts``. Its only lists of phase names are
    the whole vocabulary (``metrics.ts``: ``tests/vocab/test_scopes.py`` checks them against PHASES)."""
    found: dict[str, list[int]] = {}
    for path in sorted(FRONTEND.rglob("*.ts")):
        if path.name in ("types.ts", "metrics.ts"):
            continue
        text = path.read_text(encoding="utf-8")
        for m in re.finditer(r"[\[{(]([^\[\]{}()]*)[\]})]", text):
            if len([n for n in re.findall(r'"([a-z_]+)"', m.group(1)) if n in _PHASE_NAMES]) >= 2:
                found.setdefault(path.name, []).append(text[:m.start()].count("\n") + 1)
    assert found == {}
