"""The Python API's conveniences: a Target from sizes, and the breakdown and verdict as text.

Everything else in `llamafit.__all__` is the core's own objects (docs/api.md).
"""

from __future__ import annotations

from .facts.hparams import ModelFacts
from .fit.search import Target
from .machine.devices import DeviceSpec, host
from .machine.hardware import gpu_specs
from .memory.model import Breakdown, MemoryModel
from .report.check import device_lines
from .units import GIB


def make_target(
    facts: ModelFacts,
    gpus: str | tuple[DeviceSpec, ...] = "cpu",
    *,
    host_bytes: int = 64 * GIB,
    engine: str = "llama-server",
    build: int | None = None,
    reserve_bytes: int = GIB,
    backend: str = "cuda",
) -> Target:
    """The problem `solve` and `plan` work on: this model on these GPUs (what `--gpu` takes:
    `"24GiB,12GiB"`, `"2xrtx4090"`, `"cpu"`; or DeviceSpec values) with `host_bytes` of host RAM,
    by `engine`'s rules (llama.cpp build `build`, None: the pinned one), keeping `reserve_bytes`
    free per GPU."""
    devices = gpu_specs(gpus, backend) if isinstance(gpus, str) else gpus
    return Target(
        MemoryModel(facts), engine, build, devices, host(host_bytes, host_bytes), reserve_bytes
    )


def breakdown_text(breakdown: Breakdown) -> str:
    """The per-device table of `llamafit check` (MiB)."""
    return "\n".join(device_lines(breakdown))
