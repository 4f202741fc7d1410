"""models.MODELS names each architecture's builder module, imported on the first build: every
entry's module exists and has its `build`, and importing the replay imports none of them."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from llamafit.memory.graph.models import MODELS


@pytest.mark.parametrize("arch", sorted(MODELS))
def test_each_entry_names_a_builder_module_with_its_build(arch: str) -> None:
    builder = MODELS[arch].build
    module = importlib.import_module(f"llamafit.memory.graph.models.{builder.module}")  # type: ignore[attr-defined]
    assert callable(module.build)


def test_the_replay_imports_no_builder_until_it_builds() -> None:
    code = (
        "import sys\n"
        "import llamafit.memory.graph.replay\n"
        "print(sorted(m for m in sys.modules if m.startswith('llamafit.memory.graph.models.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout == "[]\n"


def test_builders_are_equal_by_module() -> None:
    """Two archs of one builder (bert, nomic-bert) have equal entries but for their flags, as
    when they held the same function."""
    assert MODELS["bert"] == MODELS["nomic-bert"]
    assert MODELS["granite"].build == MODELS["minicpm"].build != MODELS["llama"].build
