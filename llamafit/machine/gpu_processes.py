"""What else is using the GPU: per-process GPU memory from NVML, and what closing it would give.

Detection (`gpu_processes`) is the edge: NVML's running compute and graphics processes per device
(nvmlDeviceGetComputeRunningProcesses / nvmlDeviceGetGraphicsRunningProcesses, `usedGpuMemory`
in bytes; None where the driver does not say, e.g. under WDDM), with the NVML module a parameter
(tests pass a fake one). `others_in_use` is pure: it takes the process list as data.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..units import MIB
from .hardware import GPUInfo

# "more than a few hundred MiB": below this, what other processes hold on a device is not worth a
# line (a desktop's compositor holds tens of MiB; a browser with hardware acceleration a few
# hundred)
MIN_OTHERS_BYTES = 300 << 20


@dataclass(frozen=True, slots=True)
class GpuProcess:
    device: str  # llama.cpp's name of the device (CUDA0…)
    pid: int
    name: str  # the process name (NVML's, else the pid)
    used_bytes: int


@dataclass(frozen=True, slots=True)
class OthersInUse:
    """On one device: what the other processes hold together, largest first."""

    device: str
    used_bytes: int
    processes: tuple[GpuProcess, ...]


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _process_name(nvml: Any, pid: int) -> str:
    try:
        name = _text(nvml.nvmlSystemGetProcessName(pid))
    except Exception:  # NVMLError, or a fake without it: the pid stands in
        return str(pid)
    return os.path.basename(name.split()[0]) if name.strip() else str(pid)


def _nvml_module(nvml: Any) -> Any:
    """The NVML module given, else pynvml; None where it cannot be imported."""
    if nvml is not None:
        return nvml
    try:
        import importlib

        return importlib.import_module("pynvml")
    except Exception:
        return None


def _device_processes(nvml: Any, g: GPUInfo, own: int) -> list[GpuProcess]:
    """The processes on one device but this one, each with its memory (a process in both NVML
    lists counts once)."""
    handle = nvml.nvmlDeviceGetHandleByIndex(g.physical_index)
    used: dict[int, int] = {}
    for query in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
        fn = getattr(nvml, query, None)
        for p in fn(handle) if fn else ():
            n = getattr(p, "usedGpuMemory", None)
            if p.pid != own and isinstance(n, int) and n > 0:
                used[p.pid] = max(used.get(p.pid, 0), n)
    return [GpuProcess(g.spec.name, pid, _process_name(nvml, pid), n) for pid, n in used.items()]


def gpu_processes(
    gpus: Sequence[GPUInfo], nvml: Any = None, own_pid: int | None = None
) -> tuple[GpuProcess, ...]:
    """Every process NVML lists on the detected GPUs (not this one), with its memory; () without
    NVML."""
    nvml = _nvml_module(nvml)
    if nvml is None:
        return ()
    own = os.getpid() if own_pid is None else own_pid
    found: list[GpuProcess] = []
    try:
        nvml.nvmlInit()
    except Exception:
        return ()
    try:
        for g in gpus:
            if g.physical_index is not None:
                found += _device_processes(nvml, g, own)
    except Exception:  # NVMLError mid-way: what was read so far would mislead; say nothing
        return ()
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass
    return tuple(found)


def others_in_use(
    processes: Sequence[GpuProcess], min_bytes: int = MIN_OTHERS_BYTES
) -> tuple[OthersInUse, ...]:
    """Per device, in device order of first appearance: the other processes' memory, when it is at
    least `min_bytes` together."""
    by_device: dict[str, list[GpuProcess]] = {}
    for p in processes:
        by_device.setdefault(p.device, []).append(p)
    out = []
    for device, procs in by_device.items():
        total = sum(p.used_bytes for p in procs)
        if total >= min_bytes:
            out.append(
                OthersInUse(
                    device, total, tuple(sorted(procs, key=lambda p: (-p.used_bytes, p.pid)))
                )
            )
    return tuple(out)


def tokens_for(used_bytes: int, mib_per_1000_tokens: float | None, room_tokens: int) -> int | None:
    """The context per slot `used_bytes` more would buy at the plan's marginal cost, at most
    `room_tokens` (what is left up to the wanted context); None without a marginal cost."""
    if not mib_per_1000_tokens or mib_per_1000_tokens <= 0:
        return None
    tokens = int(used_bytes / (mib_per_1000_tokens * MIB) * 1000)
    return max(min(tokens, room_tokens), 0)
