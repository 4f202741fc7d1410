"""Real llama.cpp loads shared by the tests that check the same one: each distinct start (model,
flags, environment) runs once per session, and every test asserting on it reads the same result (one
start, many assertions). A load's figures do not depend on which test asked first."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from tests.support.scripts import script
from tests.support.sparse_loads import cpu_start

LLAMA_ENV = ("GGML_", "LLAMA_")  # the variables llama.cpp reads: a load differs only by these
_LAB: dict[tuple[object, ...], Any] = {}
_COMPUTE: dict[tuple[str, str], float | None] = {}
_CPU_COMPUTE = re.compile(r"CPU compute buffer size = +([0-9.]+) MiB")


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
    """The CPU compute buffer (MiB) the real llama-server printed for `flags`, as
    scripts/audit/audit_embeddings.py's `measured` reads it (its first `CPU compute buffer size`
    line, -t 1); None if it printed none. The start is sparse_loads.cpu_start's (read until the
    context is built, the file mapped without the prefetch that reads a sparse shape's GiBs of
    holes), `measured`'s own without a C compiler for the shim."""
    key = (model, flags)
    if key not in _COMPUTE:
        got = cpu_start(Path(model), [*flags.split(), "-t", "1"])
        if got is None:
            _COMPUTE[key] = script("audit_embeddings").measured(model, flags)
        else:
            m = _CPU_COMPUTE.search(got.log)
            _COMPUTE[key] = float(m.group(1)) if m else None
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
