"""The tests mirror the package: each module of ``tb_attn_plugin`` with logic (a function or a
method) has ``tests/<package>/test_<module>.py``, or ``test_<package>_<module>.py`` where two
packages hold modules of one name (pytest imports test files by their base name, so those are
unique under ``tests/``). A module of a sub-package has its test in the same folders under
``tests/`` (``analysis/attribution/inference/infer.py``:
``tests/analysis/attribution/inference/test_infer.py``). The runner's modules likewise:
``runner/<module>.py`` has ``tests/runner/test_<module>.py`` or ``test_runner_<module>.py``. Modules
that only declare (types, tables) may have one. Cross-cutting tests (real models, the browser,
remote storage, the notebook API) live apart."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import runner
import tb_attn_plugin

PACKAGE = Path(tb_attn_plugin.__file__).parent
RUNNER = Path(runner.__file__).parent
TESTS = Path(__file__).parent


def _has_logic(path: Path) -> bool:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return any(isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) for node in ast.walk(tree))


def _folder(module: Path) -> Path:
    """The folder under ``tests/`` that holds ``module``'s test."""
    return module.parent.relative_to(PACKAGE) if module.is_relative_to(PACKAGE) else Path(module.parent.name)


def _modules() -> list[Path]:
    """The plugin's modules (in its rooms at any depth) and the runner's."""
    paths = [*PACKAGE.glob("*/**/*.py"), *RUNNER.glob("*.py")]
    return sorted(p for p in paths if p.stem not in {"__init__", "__main__"})


def test_every_module_with_logic_has_its_test_module() -> None:
    missing = []
    for module in _modules():
        folder = _folder(module)
        names = (f"test_{module.stem}.py", f"test_{module.parent.name}_{module.stem}.py")
        if _has_logic(module) and not any((TESTS / folder / name).is_file() for name in names):
            missing.append(f"{folder.as_posix()}/{module.name} -> tests/{folder.as_posix()}/{names[0]}")
    assert not missing, "modules without their test module:\n" + "\n".join(missing)


def test_the_rule_sees_the_modules_it_is_about() -> None:
    """The walk finds every layer's modules, those of the analysis' rooms at any depth, and the
    runner's, and tells a declaring module from one with logic."""
    packages = {_folder(m).parts[0] for m in _modules()}
    assert packages == {"vocab", "trace", "types", "analysis", "engine", "server", "cli", "runner"}
    assert PACKAGE / "analysis" / "attribution" / "inference" / "infer.py" in _modules()
    assert _has_logic(PACKAGE / "analysis" / "summary.py")
    assert not _has_logic(PACKAGE / "types" / "results.py")  # dataclass declarations only


def test_test_file_names_are_unique() -> None:
    """Two test files of one base name would shadow each other under pytest's default imports."""
    counts = Counter(p.name for p in TESTS.rglob("test_*.py"))
    assert not [name for name, n in counts.items() if n > 1]
