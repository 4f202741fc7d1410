"""The package's layers (docs/development.md, "How the code is laid out"): which unit (a
subpackage or a root module) may import which, no import cycle between modules, and a core (reader,
facts, memory, fit) that imports no edge library. Written by the layout move (issue #9), made
strict by issue #24.

Every import counts, in the layers and in the cycles alike: module level, inside functions, under
TYPE_CHECKING (a type is a dependency too: a circle of types is a circle of modules that cannot be
read apart, issue #34), and `importlib.import_module("llamafit.…")` with a literal name.
`memory.graph` (the replay of llama.cpp's graph) is a unit of its own below the rest of memory/,
which it does not import. The checks are functions of a package directory, so the tests at the end
plant each kind of violation in a copy of the package and see it caught."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import ROOT

PACKAGE = ROOT / "llamafit"
CORE = ("reader", "facts", "memory", "fit")
EDGE_LIBRARIES = ("click", "psutil", "pynvml", "subprocess", "huggingface_hub", "numpy")
BASE = {"errors", "units", "findings", "safe_text", "version", "builds", "frozen"}
_CORE = BASE | {"reader", "facts", "machine", "memory", "fit"}
_ALL_BUT_CLI = _CORE | {
    "paths",
    "safe_io",
    "fetch",
    "server",
    "report",
    "commands",
    "api",
    "__init__",
}
# What each unit may import besides itself. Every folder and root module of the package has an
# entry: a unit not named here fails the test (say where a new one sits before it is used).
MAY_IMPORT: dict[str, set[str]] = {
    "errors": {"safe_text"},  # messages escaped (#37 F3)
    "units": set(),
    "findings": set(),
    "safe_text": set(),
    "version": set(),
    "builds": set(),  # llama.cpp's build rules (BUILD_RULES, since)
    "frozen": set(),  # dataclasses.replace for the plan's hot loops
    "paths": set(),
    "safe_io": BASE,
    "reader": BASE,
    "facts": BASE | {"reader"},
    "machine": BASE | {"safe_io"},  # the host probe's cache
    # llama.cpp's graph, its scheduler and allocator: below the memory model, never above it
    "memory.graph": BASE | {"reader", "facts", "machine"},
    "memory": BASE | {"reader", "facts", "machine", "memory.graph"},
    "fit": BASE | {"reader", "facts", "machine", "memory"},
    "fetch": BASE | {"reader", "paths", "safe_io"},
    "server": BASE | {"reader", "machine", "memory", "paths", "safe_io"},
    "report": BASE | {"reader", "facts", "machine", "memory", "fit", "server"},
    "commands": _CORE | {"fetch", "server", "report", "paths", "safe_io"},
    "api": _CORE | {"report", "server"},  # the library's helpers: no command, no CLI
    "__init__": _ALL_BUT_CLI - {"__init__", "commands"},  # the lazy public API
    "cli": _ALL_BUT_CLI,
    "__main__": {"cli"},
}
for _unit_imports in MAY_IMPORT.values():  # what may import memory may import what is below it
    if "memory" in _unit_imports:
        _unit_imports.add("memory.graph")
# Module-to-module edges allowed across the layers, each with what would remove it. Empty, and an
# entry that no longer occurs fails too.
EXCEPTIONS: dict[tuple[str, str], str] = {}


SUBUNITS = ("memory.graph",)  # folders that are units of their own inside a unit


def _unit(module: str) -> str:
    """llamafit.fit.solver → fit; llamafit.errors → errors; llamafit → __init__;
    llamafit.memory.graph.replay → memory.graph."""
    parts = module.split(".")
    if len(parts) > 2 and ".".join(parts[1:3]) in SUBUNITS:
        return ".".join(parts[1:3])
    return parts[1] if len(parts) > 1 else "__init__"


def _module_of(path: Path, package: Path) -> str:
    rel = path.relative_to(package.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _type_checking_lines(tree: ast.AST) -> set[int]:
    """Lines of the statements under `if TYPE_CHECKING:`."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for stmt in node.body:
                lines.update(range(stmt.lineno, (stmt.end_lineno or stmt.lineno) + 1))
    return lines


def _imports(path: Path, package: Path) -> Iterator[tuple[str, int, bool]]:
    """(absolute module, line, runs) of every import in the file; runs is False under TYPE_CHECKING
    (said in the messages; it counts all the same).
    `from pkg import name` names the module pkg.name where that is a module of the package."""
    module = _module_of(path, package)
    here = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    tree = ast.parse(path.read_text())
    typing_only = _type_checking_lines(tree)
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        runs = line not in typing_only
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, line, runs
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            for a in node.names:
                sub = f"{target}.{a.name}"
                yield (sub if _exists(sub, package) else target), line, runs
        elif (
            isinstance(node, ast.Call)
            and ast.unparse(node.func) in ("importlib.import_module", "import_module")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            yield node.args[0].value, line, runs


def _exists(module: str, package: Path) -> bool:
    parts = module.split(".")
    if parts[0] != package.name:
        return False
    base = package.parent.joinpath(*parts)
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def _files(package: Path) -> list[Path]:
    return sorted(package.rglob("*.py"))


def upward_imports(package: Path, exceptions: dict[tuple[str, str], str]) -> list[str]:
    """Imports that go up (or sideways) in the layer table, units missing from it, and stale
    exceptions."""
    wrong: list[str] = []
    seen = set()
    for path in _files(package):
        module = _module_of(path, package)
        unit = _unit(module)
        if unit not in MAY_IMPORT:
            wrong.append(f"{module}: {unit} has no entry in MAY_IMPORT")
            continue
        for target, line, _ in _imports(path, package):
            if target.split(".")[0] != package.name:
                continue
            to = _unit(target)
            if to == unit or to in MAY_IMPORT[unit]:
                continue
            if (module, target) in exceptions:
                seen.add((module, target))
                continue
            found = f"{module} line {line} imports {target} ({unit} → {to})"
            if found not in wrong:
                wrong.append(found)
    wrong += [
        f"stale exception: {m} no longer imports {t}" for m, t in exceptions if (m, t) not in seen
    ]
    return wrong


def module_cycles(package: Path) -> list[list[str]]:
    """Cycles of the module graph (strongly connected components of more than one module, or a
    module that imports itself), from every import, TYPE_CHECKING ones included."""
    graph: dict[str, set[str]] = {}
    for path in _files(package):
        module = _module_of(path, package)
        graph[module] = {t for t, _, _ in _imports(path, package) if _exists(t, package)}
    return [c for c in _components(graph) if len(c) > 1 or c[0] in graph.get(c[0], set())]


def _components(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of `graph`, each sorted (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            at = stack.index(v)
            found.append(sorted(stack[at:]))
            del stack[at:]

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_every_import_goes_down_the_layers() -> None:
    assert upward_imports(PACKAGE, EXCEPTIONS) == []


def test_no_module_import_cycle() -> None:
    assert module_cycles(PACKAGE) == []


def test_the_layer_table_is_acyclic() -> None:
    """No two units may import each other, directly or around a loop: zero upward imports then
    means zero cycles between folders."""
    order: list[str] = []
    state: dict[str, int] = {}

    def visit(u: str, path: tuple[str, ...]) -> None:
        assert state.get(u) != 1, f"the layer table has a cycle: {' → '.join((*path, u))}"
        if state.get(u) == 2:
            return
        state[u] = 1
        for v in sorted(MAY_IMPORT[u]):
            visit(v, (*path, u))
        state[u] = 2
        order.append(u)

    for u in sorted(MAY_IMPORT):
        visit(u, ())
    assert sorted(order) == sorted(MAY_IMPORT)


def test_every_unit_of_the_package_is_in_the_table() -> None:
    units = {_unit(_module_of(p, PACKAGE)) for p in _files(PACKAGE)}
    assert units == set(MAY_IMPORT)


@pytest.mark.parametrize(
    "path",
    [p for p in _files(PACKAGE) if _unit(_module_of(p, PACKAGE)) in CORE or p.stem in BASE],
    ids=lambda p: str(p.relative_to(PACKAGE)),
)
def test_the_core_imports_no_edge_library(path: Path) -> None:
    edges = [t for t, _, _ in _imports(path, PACKAGE) if t.split(".")[0] in EDGE_LIBRARIES]
    assert edges == []


def test_loading_the_core_loads_no_edge_library() -> None:
    modules = sorted(
        _module_of(p, PACKAGE) for p in _files(PACKAGE) if _unit(_module_of(p, PACKAGE)) in CORE
    )
    code = (
        f"import sys\nfor m in {modules!r}: __import__(m)\n"
        f"print(sorted(m for m in {EDGE_LIBRARIES!r} if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out == "[]\n"


# --- the checks catch what they are for: each violation planted in a copy of the package
# -------------


@pytest.fixture(scope="module")
def copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("layers") / "llamafit"
    shutil.copytree(PACKAGE, dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def _planted(copy: Path, rel: str, text: str) -> Path:
    path = copy / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_the_copy_is_clean(copy: Path) -> None:
    assert (upward_imports(copy, {}), module_cycles(copy)) == ([], [])


@pytest.mark.parametrize(
    "rel, text, expected",
    [
        ("newfolder/__init__.py", "", "llamafit.newfolder: newfolder has no entry in MAY_IMPORT"),
        (
            "newfolder/x.py",
            "from ..cli import main\n",
            "llamafit.newfolder.x: newfolder has no entry in MAY_IMPORT",
        ),
        ("extra.py", "", "llamafit.extra: extra has no entry in MAY_IMPORT"),
        (
            "api.py",
            "from .commands import plan\n",
            "llamafit.api line 1 imports llamafit.commands.plan (api → commands)",
        ),
        (
            "fit/x.py",
            "def f():\n    import importlib\n    return "
            "importlib.import_module('llamafit.server.flags')\n",
            "llamafit.fit.x line 3 imports llamafit.server.flags (fit → server)",
        ),
        (
            "memory/x.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..fit.solver "
            "import Choice\n",
            "llamafit.memory.x line 3 imports llamafit.fit.solver (memory → fit)",
        ),
        (
            "memory/graph/x.py",
            "from ..model import MemoryModel\n",
            "llamafit.memory.graph.x line 1 imports llamafit.memory.model (memory.graph → memory)",
        ),
        (
            "memory/graph/y.py",
            "def f():\n    from llamafit.memory import usage\n    return usage\n",
            "llamafit.memory.graph.y line 2 imports llamafit.memory.usage (memory.graph → memory)",
        ),
    ],
)
def test_a_planted_upward_import_is_caught(copy: Path, rel: str, text: str, expected: str) -> None:
    path = copy / rel
    old = path.read_text() if path.exists() else None
    _planted(copy, rel, text)
    try:
        assert expected in upward_imports(copy, {})
    finally:
        if old is None:
            path.unlink()
        else:
            path.write_text(old)


def test_a_planted_cycle_inside_a_folder_is_caught(copy: Path) -> None:
    a = _planted(copy, "fit/cyc_a.py", "from . import cyc_b\n")
    b = _planted(copy, "fit/cyc_b.py", "def f():\n    from .cyc_a import g\n    return g\n")
    try:
        assert module_cycles(copy) == [["llamafit.fit.cyc_a", "llamafit.fit.cyc_b"]]
        assert upward_imports(copy, {}) == []  # the layers alone do not see it
    finally:
        a.unlink()
        b.unlink()


def test_a_planted_type_only_cycle_is_caught(copy: Path) -> None:
    """A circle of types is a circle: `if TYPE_CHECKING:` does not hide it (issue #34)."""
    a = _planted(copy, "fit/cyc_a.py", "from . import cyc_b\n")
    b = _planted(
        copy,
        "fit/cyc_b.py",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .cyc_a import A\n",
    )
    try:
        assert module_cycles(copy) == [["llamafit.fit.cyc_a", "llamafit.fit.cyc_b"]]
    finally:
        a.unlink()
        b.unlink()


def test_the_graph_is_a_unit_below_memory() -> None:
    assert (_unit("llamafit.memory.graph.replay"), _unit("llamafit.memory.graph")) == (
        "memory.graph",
        "memory.graph",
    )
    assert (_unit("llamafit.memory.model"), _unit("llamafit.memory")) == ("memory", "memory")


def test_a_stale_exception_fails(copy: Path) -> None:
    stale = {("llamafit.fit.solver", "llamafit.server.flags"): "once needed"}
    assert upward_imports(copy, stale) == [
        "stale exception: llamafit.fit.solver no longer imports llamafit.server.flags"
    ]
