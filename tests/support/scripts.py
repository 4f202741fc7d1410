"""scripts/ as modules, for the tests that exercise a script's functions: `script("make_shapes")`
imports scripts/fixtures/make_shapes.py as `scripts.fixtures.make_shapes`, once per session. The
scripts sit in one folder per purpose (scripts/<group>/<name>.py, each name once) and import each
other by that package path from the repository root, which the tests have on sys.path. Test files
name each script they use here."""

from __future__ import annotations

import importlib
from types import ModuleType

from tests.support import ROOT

SCRIPTS = ROOT / "scripts"


def script_path(name: str) -> str:
    """scripts/<group>/<name>.py, relative to the repository root."""
    found = sorted(SCRIPTS.glob(f"*/{name}.py"))
    if len(found) != 1:
        raise FileNotFoundError(f"scripts/*/{name}.py: {len(found)} found")
    return str(found[0].relative_to(ROOT))


def script(name: str) -> ModuleType:
    """The module of scripts/<group>/<name>.py."""
    return importlib.import_module(script_path(name).removesuffix(".py").replace("/", "."))
