"""scripts/ as modules, for the tests that exercise a script's functions: `script("make_shapes")`
imports scripts/make_shapes.py once per session. The scripts import each other by bare name, so
their folder is appended to sys.path (after everything else: a script never shadows an installed
module) when the first one is loaded. Test files name each script they use here, not on sys.path."""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

from tests.support import ROOT

SCRIPTS = ROOT / "scripts"


def script(name: str) -> ModuleType:
    """The module of scripts/<name>.py."""
    if not (SCRIPTS / f"{name}.py").is_file():
        raise FileNotFoundError(SCRIPTS / f"{name}.py")
    if str(SCRIPTS) not in sys.path:
        sys.path.append(str(SCRIPTS))
    return importlib.import_module(name)
