"""Real llama.cpp loads shared by the tests that check the same one: each distinct start (model,
flags, environment) runs once per session, and every test asserting on it reads the same result (one
start, many assertions). A load's figures do not depend on which test asked first."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from tests.support.scripts import script

LLAMA_ENV = ("GGML_", "LLAMA_")  # the variables llama.cpp reads: a load differs only by these
_LAB: dict[tuple[object, ...], Any] = {}
_COMPUTE: dict[tuple[str, str], float | None] = {}


def lab_load(
    model: Path | str, flags: Sequence[str], *, env: Mapping[str, str] | None = None
) -> Any:
    """scripts/calibration/device_lab.py's `load` (the Vulkan/RPC llama-server, -lv 4, --no-warmup):
    what it reported."""
    lab = script("device_lab")
    seen = lab.vk_env() if env is None else env  # device_lab's default: Vulkan0 visible
    key = (
        str(model),
        tuple(flags),
        tuple(sorted((k, v) for k, v in seen.items() if k.startswith(LLAMA_ENV))),
    )
    if key not in _LAB:
        _LAB[key] = lab.load(model, list(flags), env=None if env is None else dict(env))
    return _LAB[key]


def cpu_compute_mib(model: str, flags: str) -> float | None:
    """scripts/audit/audit_embeddings.py's `measured`: the CPU compute buffer (MiB) llama-server
    printed."""
    key = (model, flags)
    if key not in _COMPUTE:
        _COMPUTE[key] = script("audit_embeddings").measured(model, flags)
    return _COMPUTE[key]


@cache
def table_model(model: str) -> Any:
    """The MemoryModel of a calibration table's model ("demo:<file>" or a path from the repository
    root), built once per session for every table that names it."""
    from llamafit.facts.hparams import build_facts
    from llamafit.memory.model import MemoryModel
    from llamafit.reader.model import read_model
    from tests.support import ROOT

    if model.startswith("demo:"):
        from llamafit.fetch.demo import demo_model_path

        return MemoryModel(build_facts(read_model(demo_model_path())))
    return MemoryModel(build_facts(read_model(ROOT / model)))
