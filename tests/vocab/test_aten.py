"""One home for op names: ``tb_attn_plugin/vocab/aten.py`` spells every ATen op that tb-attn
recognises by meaning; the other op-name modules of ``vocab/`` spell only what they read an
Inductor kernel or a graph's bookkeeping as."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from types import ModuleType

import pytest

from tb_attn_plugin.analysis.ops.backend import detect_backend
from tb_attn_plugin.vocab import aten, kernels, libraries, serving, shape_ops

PACKAGE = Path(aten.__file__).parent.parent
_OP_NAME = re.compile(r"^aten::\w+$")
#: The modules that spell op names: ATen's by meaning, and what Inductor's kernels and a graph
#: capture's bookkeeping are read as.
_OP_NAME_MODULES = {PACKAGE / "vocab" / "aten.py", PACKAGE / "vocab" / "kernels.py"}


def _op_literals(path: Path) -> list[str]:
    """String constants in ``path`` that are exactly an op name (sentences mentioning one are not)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and _OP_NAME.match(node.value)]


def test_no_other_module_spells_an_op_name() -> None:
    modules = [p for p in sorted(PACKAGE.rglob("*.py")) if p not in _OP_NAME_MODULES]
    assert len(modules) > 30
    spelled = {str(p.relative_to(PACKAGE)): names for p in modules if (names := _op_literals(p))}
    assert spelled == {}


def test_sets_that_look_alike_differ_only_where_documented() -> None:
    assert aten.COPY_OPS < aten.MATMUL_INPUT_COPY_OPS
    assert aten.MATMUL_OPS == aten.MATMUL_WRAPPER_OPS | aten.GEMM_OPS - {"aten::addmm"}
    assert set(aten.SDPA_FORWARD) == aten.SDPA_OPS - {aten.SDPA_OP, aten.SDPA_MATH_OP}
    assert aten.SAFE_SOFTMAX_OP in aten.SOFTMAX_OPS and aten.INPLACE_COPY_OP in aten.COPY_OPS


_MODULES = [aten, kernels, libraries, serving, shape_ops]


def _defined(module: ModuleType) -> set[str]:
    """The constants a module defines (not those it imports)."""
    tree = ast.parse(Path(str(module.__file__)).read_text(encoding="utf-8"))
    targets = [t for node in tree.body if isinstance(node, ast.Assign) for t in node.targets]
    targets += [node.target for node in tree.body if isinstance(node, ast.AnnAssign)]
    return {t.id for t in targets if isinstance(t, ast.Name) and t.id.isupper() and not t.id.startswith("_")}


@pytest.mark.parametrize("module", _MODULES, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_every_name_is_exported_by_its_one_home(module: ModuleType) -> None:
    assert {n for n in module.__all__ if n.isupper()} == _defined(module)
    assert not _defined(module) & set().union(*(_defined(m) for m in _MODULES if m is not module))


def test_backend_and_inference_share_one_softmax_set() -> None:
    # Inference counted torch.special.softmax as attention's softmax; the backend did not.
    backend, evidence = detect_backend(["aten::special_softmax", "aten::bmm"], [])
    assert (backend, evidence) == ("naive", ["aten::bmm", "aten::special_softmax"])
