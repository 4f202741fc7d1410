"""The package's layers (README, Development): which subpackage may import which, and a core
(reader, facts, memory, fit) that imports no edge library. Written by the layout move (issue #9)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support import ROOT

PACKAGE = ROOT / "llamafit"
CORE = ("reader", "facts", "memory", "fit")
EDGE_LIBRARIES = ("click", "psutil", "pynvml", "subprocess", "huggingface_hub", "numpy")
BASE = {"errors", "units", "findings", "safe_text"}
# What each unit may import (a subpackage, or a root module such as errors). Units not named here
# (cli, api, __init__, __main__, and modules added later at the root) are not constrained.
MAY_IMPORT: dict[str, set[str]] = {
    "errors": set(),
    "units": set(),
    "findings": set(),
    "safe_text": set(),
    "safe_io": BASE,
    "paths": set(),
    "reader": BASE,
    "facts": BASE | {"reader"},
    "machine": BASE | {"safe_io"},  # the host probe's cache
    "memory": BASE | {"reader", "facts", "machine"},
    "fit": BASE | {"reader", "facts", "machine", "memory"},
    "fetch": BASE | {"reader", "paths", "safe_io", "__init__"},
    "server": BASE | {"reader", "memory", "paths", "safe_io"},
    "report": BASE | {"reader", "facts", "machine", "memory", "fit", "server"},
    "commands": BASE | {"reader", "facts", "machine", "memory", "fit", "fetch", "server", "report", "paths",
                        "safe_io", "__init__"},
}
# Module-to-module edges that cross the layers today, each with what would remove it.
EXCEPTIONS: dict[tuple[str, str], str] = {
    ('llamafit.fit.listing', 'llamafit.fetch.stores'):
        "an ls row carries the store's Found record: pass its fields instead",
    ('llamafit.memory.side_models', 'llamafit.server.flag_table'):
        "the side flags' arity comes from llama-server's flag table: parse them in server.flags",
    ('llamafit.fit.side_plan', 'llamafit.server.flag_table'):
        'the same: take the side flags parsed',
    ('llamafit.machine.host_probe', 'llamafit.fit.speed'):
        "the probe's cached record is a speed-model type: move that dataclass into machine",
    ('llamafit.fit.many', 'llamafit.server.scripts'):
        'many-model packing builds launch specs: return plain entries and let commands.script build them',
    ('llamafit.report.ls', 'llamafit.commands.ls'):
        "the ls report renders commands.ls's Listing: move Listing into fit.listing",
}


def _unit(module: str) -> str:
    """llamafit.fit.solver → fit; llamafit.errors → errors; llamafit → __init__."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _module_of(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> list[tuple[str, int]]:
    """(absolute module, line) of every import in the file, function-level ones included."""
    module = _module_of(path)
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
                if node.module is None and len(base) == 1:  # from . import x: x may be a module
                    found += [(f"{target}.{a.name}", node.lineno) for a in node.names]
                    continue
                found.append((target, node.lineno))
            else:
                found.append((node.module or "", node.lineno))
    return found


FILES = sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_go_down_the_layers(path: Path) -> None:
    module = _module_of(path)
    unit = _unit(module)
    if unit not in MAY_IMPORT:
        return
    wrong = []
    for target, line in _imports(path):
        if not target.startswith("llamafit"):
            continue
        to = _unit(target)
        if target == "llamafit.__version__" or target.startswith("llamafit.__"):
            to = "__init__"
        if to == unit or to in MAY_IMPORT[unit] or (module, target) in EXCEPTIONS:
            continue
        if (module, target.rsplit(".", 1)[0]) in EXCEPTIONS:
            continue
        wrong.append(f"line {line}: {module} imports {target}")
    assert wrong == []


@pytest.mark.parametrize("path", [p for p in FILES if _unit(_module_of(p)) in CORE or p.stem in BASE],
                         ids=lambda p: str(p.relative_to(PACKAGE)))  # fmt: skip
def test_the_core_imports_no_edge_library(path: Path) -> None:
    edges = [t for t, _ in _imports(path) if t.split(".")[0] in EDGE_LIBRARIES]
    assert edges == []


def test_loading_the_core_loads_no_edge_library() -> None:
    modules = sorted(_module_of(p) for p in FILES if _unit(_module_of(p)) in CORE)
    code = (f"import sys\nfor m in {modules!r}: __import__(m)\n"
            f"print(sorted(m for m in {EDGE_LIBRARIES!r} if m in sys.modules))")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out == "[]\n"
