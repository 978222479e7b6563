"""The layers import one way (``docs/architecture.md``): vocabulary <- trace <- analysis <- loader,
registry, service <- plugin and cli. Read from the source, so a lazy import inside a function
counts as much as one at the top."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import tb_attn_plugin

PACKAGE = Path(tb_attn_plugin.__file__).parent
VOCABULARY = {"tb_attn_plugin.scopes", "tb_attn_plugin.names", "tb_attn_plugin.ops", "tb_attn_plugin.backends"}


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports, anywhere in it, as dotted names."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def _ours(imports: set[str]) -> set[str]:
    return {m for m in imports if m.startswith("tb_attn_plugin.") or m.startswith("runner")}


def _modules(sub: str) -> list[Path]:
    paths = sorted((PACKAGE / sub).glob("*.py")) if sub else sorted(PACKAGE.glob("*.py"))
    assert paths, sub
    return paths


def _is_module(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


@pytest.mark.parametrize("path", _modules("trace"), ids=lambda p: p.name)
def test_trace_imports_only_itself_and_the_vocabulary(path: Path) -> None:
    outside = {m for m in _ours(_imports(path)) if not _is_module(m, "tb_attn_plugin.trace")
               and not any(_is_module(m, v) for v in VOCABULARY)}
    assert outside == set()


@pytest.mark.parametrize("path", _modules("analysis"), ids=lambda p: p.name)
def test_analysis_opens_no_file_and_knows_no_server(path: Path) -> None:
    imports = _imports(path)
    upward = {m for m in _ours(imports) for top in ("loader", "registry", "service", "plugin", "cli", "report", "jobs",
                                                     "cache", "trace.io", "trace.discover", "trace.parallel")
              if _is_module(m, f"tb_attn_plugin.{top}")}
    assert upward == set()
    assert not {m for m in imports if m.split(".")[0] in {"tensorboard", "werkzeug", "fsspec", "os", "io"}}


@pytest.mark.parametrize("path", _modules("") + _modules("trace") + _modules("analysis"), ids=lambda p: p.name)
def test_the_package_never_imports_torch_or_the_runner(path: Path) -> None:
    assert not {m for m in _imports(path) if m.split(".")[0] in {"torch", "transformers", "runner"}}


def test_vocabulary_imports_nothing_of_ours() -> None:
    for name in VOCABULARY:
        path = PACKAGE / f"{name.rsplit('.', 1)[1]}.py"
        assert _ours(_imports(path)) == set(), name


def test_only_trace_io_opens_files() -> None:
    """Of the logdir's files; ``summary_cache.py`` writes and trims a local ``--cache-dir`` (its
    entries are read through ``trace.io``) and ``plugin.py`` serves the package's static assets."""
    opening: set[str] = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            if (isinstance(f, ast.Name) and f.id == "open") or (
                    isinstance(f, ast.Attribute) and f.attr in {"open", "listdir", "scandir", "walk", "read_bytes",
                                                                "read_text", "write_bytes", "write_text"}):
                opening.add(str(path.relative_to(PACKAGE)))
    assert opening == {"trace/io.py", "summary_cache.py", "plugin.py"}
