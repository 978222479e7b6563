"""The import contract (``docs/architecture.md``): the package's layers import one way,

    vocab <- trace <- types <- analysis <- engine <- server, cli

within analysis, its rooms import one way too (``ROOMS``: a module imports its own room and those
below; a sub-room such as ``attribution/inference`` is part of its room),

    common <- ops <- attribution <- measures <- findings <- views <- summary <- cross_run

and no module imports another that imports it back, directly or around a circle. Read from the
source, so an import inside a function counts as much as one at the top; only imports under
``if TYPE_CHECKING:`` are left out of the circles (they never run). A lazy import of ours names
its reason on its line or the one above (``# lazy: ...``): start-up time, where the tab's or the CLI's start pays
for it."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

import tb_attn_plugin

PACKAGE = Path(tb_attn_plugin.__file__).parent
ROOT = PACKAGE.parent
#: The layers, lowest first; a module may import its own layer and those below.
LAYERS = ["vocab", "trace", "types", "analysis", "engine", "server|cli"]
#: The rooms of ``analysis``, lowest first, each a question: what every room stands on (words, bounds,
#: statistics, the clock, a run's configuration, a finding's constructor), what an op's name and shapes
#: say, who owns each event, one trace's figures, the rules on them, one trace's views, the summary
#: that assembles them (``analysis/summary.py``), and what many summaries say side by side.
ROOMS = ["common", "ops", "attribution", "measures", "findings", "views", "summary", "cross_run"]
ANALYSIS = "tb_attn_plugin.analysis"
#: The modules whose start-up time a lazy import of ours may save: the tab's entry point, which
#: TensorBoard imports at launch, the CLI, whose `--help` and bad-flag answers must be quick, and
#: the engine's reading of the summary cache.
LAZY_ALLOWED = {"tb_attn_plugin.server.plugin", "tb_attn_plugin.cli.main", "tb_attn_plugin.cli.batch",
                "tb_attn_plugin.cli.gate", "tb_attn_plugin.cli.report",
                # the summary cache (and OpenSSL, through hashlib) loads only where a cache directory is given
                "tb_attn_plugin.engine.loader", "tb_attn_plugin.engine.fanout", "tb_attn_plugin.engine.workspace"}


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _layer(module: str) -> int:
    parts = module.split(".")
    sub = parts[1] if len(parts) > 1 else ""
    for i, names in enumerate(LAYERS):
        if sub in names.split("|"):
            return i
    raise AssertionError(f"{module} is in no layer: put it in one of {LAYERS}")


class _Imports(ast.NodeVisitor):
    """Our modules imported by one file: (module, line, lazy, type_only)."""

    def __init__(self, here: str, source: str) -> None:
        self.here, self.lines, self.found = here, source.splitlines(), []
        self._depth = 0
        self._type_only = 0

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self._depth += 1
        self.generic_visit(node)
        self._depth -= 1

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_If(self, node: ast.If) -> None:
        checking = isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
        self._type_only += checking
        for child in node.body:
            self.visit(child)
        self._type_only -= checking
        for child in node.orelse:
            self.visit(child)

    def _add(self, module: str, node: ast.stmt) -> None:
        if module == "tb_attn_plugin" or module.startswith("tb_attn_plugin."):
            self.found.append((module, node.lineno, self._depth > 0, self._type_only > 0))

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(alias.name, node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.module is None or node.level:
            return
        for alias in node.names:  # `from pkg import module` imports the module
            sub = f"{node.module}.{alias.name}"
            self._add(sub if _exists(sub) else node.module, node)


def _exists(module: str) -> bool:
    path = ROOT / module.replace(".", "/")
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def _graph() -> dict[str, list[tuple[str, int, bool, bool]]]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        visitor = _Imports(_module(path), path.read_text(encoding="utf-8"))
        visitor.visit(ast.parse(path.read_text(encoding="utf-8")))
        out[_module(path)] = visitor.found
    return out


GRAPH = _graph()


def _edges() -> Iterator[tuple[str, str, int]]:
    for src, found in GRAPH.items():
        for dst, line, _, type_only in found:
            if not type_only and dst != src and dst != "tb_attn_plugin":
                yield src, dst, line


def test_every_module_is_in_a_layer() -> None:
    for module in GRAPH:
        if module != "tb_attn_plugin":
            _layer(module)


@pytest.mark.parametrize("module", sorted(m for m in GRAPH if m != "tb_attn_plugin"))
def test_imports_run_down_the_layers(module: str) -> None:
    mine = _layer(module)
    side = module.split(".")[1]
    upward = [f"{dst} (line {line})" for dst, line, _, _ in GRAPH[module]
              if dst != "tb_attn_plugin" and (_layer(dst) > mine or (_layer(dst) == mine and LAYERS[mine].count("|")
                                                                     and dst.split(".")[1] != side))]
    assert upward == [], f"{module} imports a higher layer (or its peer): {upward}"


def _room(module: str) -> int:
    """The room of a module of ``analysis`` (a room's package or one of its modules, at any depth)."""
    room = module.split(".")[2]
    if room not in ROOMS:
        raise AssertionError(f"{module} is in no room of analysis: put it in one of {ROOMS}")
    return ROOMS.index(room)


ANALYSIS_MODULES = sorted(m for m in GRAPH if m.startswith(ANALYSIS + "."))


def test_the_rooms_are_the_packages_of_analysis() -> None:
    """Every room in ``ROOMS`` is there, and every package or module directly under ``analysis/`` is a
    room, so that a new one must take its place in the order."""
    there = {m.split(".")[2] for m in ANALYSIS_MODULES}
    assert there == set(ROOMS), f"rooms not in ROOMS: {there - set(ROOMS)}; in ROOMS, not there: {set(ROOMS) - there}"
    assert len(ANALYSIS_MODULES) > 50  # the rule reads the modules it is about


@pytest.mark.parametrize("module", ANALYSIS_MODULES)
def test_analysis_imports_run_down_the_rooms(module: str) -> None:
    mine = _room(module)
    upward = [f"{module} ({ROOMS[mine]}) -> {dst} ({ROOMS[_room(dst)]}), line {line}"
              for dst, line, _, _ in GRAPH[module] if dst.startswith(ANALYSIS + ".") and _room(dst) > mine]
    assert upward == [], f"imports pointing up the rooms {' <- '.join(ROOMS)}: {upward}"


def test_the_architecture_names_every_room() -> None:
    """``docs/architecture.md`` has a row per room, in the contract's order."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text[text.index("## tb_attn_plugin/analysis/"):text.index("## tb_attn_plugin/types/")]
    rows = [line.split("|")[1].strip() for line in section.splitlines() if line.startswith("| `")]
    assert [r.strip("`").removesuffix("/").removesuffix(".py") for r in rows if "/inference" not in r] == ROOMS


def test_no_module_imports_itself_around_a_circle() -> None:
    edges: dict[str, set[str]] = {}
    for src, dst, _ in _edges():
        # `import tb_attn_plugin.trace` from inside trace runs the package's face, not a module
        if not (dst.count(".") == 1 and src.startswith(dst + ".")):
            edges.setdefault(src, set()).add(dst)
    circles = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                circles.append([*stack[stack.index(nxt):], nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node)
    assert circles == [], "import circles: " + "; ".join(" -> ".join(c) for c in circles)


def test_a_lazy_import_says_why() -> None:
    silent = []
    for module, found in GRAPH.items():
        path = ROOT / (module.replace(".", "/") + ".py")
        if not path.exists():
            path = ROOT / module.replace(".", "/") / "__init__.py"
        source = path.read_text(encoding="utf-8")
        lines = source.splitlines()
        ends = {n.lineno: n.end_lineno or n.lineno for n in ast.walk(ast.parse(source))
                if isinstance(n, ast.Import | ast.ImportFrom)}
        for _, line, lazy, type_only in found:
            said = any("# lazy:" in lines[k] for k in range(line - 2, ends[line]))  # on it, or just above
            if lazy and not type_only and (not said or module not in LAZY_ALLOWED):
                silent.append(f"{module}:{line}")
    assert silent == [], ("imports inside functions with no start-up reason (`# lazy: ...`, in a module of "
                          f"LAZY_ALLOWED); move them to the top: {silent}")


def _sources(*subs: str) -> list[Path]:
    return sorted(p for sub in subs for p in (PACKAGE / sub).rglob("*.py")) if subs else sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", _sources("analysis"), ids=lambda p: str(p.relative_to(PACKAGE / "analysis")))
def test_analysis_opens_no_file_and_reads_no_logdir(path: Path) -> None:
    """Pure functions over events: not even the trace layer's readers, nor any file module."""
    imports = {m for m, _, _, _ in GRAPH[_module(path)]}
    assert not {m for m in imports if m in {"tb_attn_plugin.trace.io", "tb_attn_plugin.trace.discover",
                                             "tb_attn_plugin.trace.parallel"}}
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert not names & {"tensorboard", "werkzeug", "fsspec", "os", "io"}


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_the_package_never_imports_torch_or_the_runner(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert not names & {"torch", "transformers", "runner"}


def test_only_trace_io_opens_files() -> None:
    """Of the logdir's files; ``engine/summary_cache.py`` writes and trims a local ``--cache-dir``
    (its entries are read through ``trace.io``) and ``server/plugin.py`` serves the static assets."""
    opening: set[str] = set()
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            if (isinstance(f, ast.Name) and f.id == "open") or (
                    isinstance(f, ast.Attribute) and f.attr in {"open", "listdir", "scandir", "walk", "read_bytes",
                                                                "read_text", "write_bytes", "write_text"}):
                opening.add(str(path.relative_to(PACKAGE)))
    assert opening == {"trace/io.py", "engine/summary_cache.py", "server/plugin.py"}


def test_the_workspace_is_the_engines_one_door() -> None:
    """The CLI, the tab and the notebook API reach the per-file caches through ``engine.Workspace``
    alone: none of them names the ``Loader`` or reaches into the engine's summarizing."""
    doors = [*_sources("cli", "server"), *sorted((ROOT / "tb_attn").glob("*.py"))]
    reaching: list[str] = []
    for path in doors:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module in {"tb_attn_plugin.engine.loader",
                                                                     "tb_attn_plugin.engine.fanout"}:
                reaching += [f"{path.name}: {a.name}" for a in node.names
                             if a.name in {"Loader", "summarize_runs", "Parsed"}]
            elif isinstance(node, ast.Attribute) and node.attr in {"loader", "_files"}:
                reaching.append(f"{path.name}:{node.lineno}: .{node.attr}")
    assert not reaching, reaching
    assert len(doors) > 20  # the rule reads the doors it is about
