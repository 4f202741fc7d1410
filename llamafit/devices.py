"""Device specs (plain values: detection is an edge concern) and `--gpu` size specs."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import InputError

BACKEND_DEVICE_PREFIX = {"cuda": "CUDA", "rocm": "ROCm", "vulkan": "Vulkan", "metal": "MTL", "cpu": "CPU"}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?)b?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


@dataclass(frozen=True, slots=True)
class DeviceSpec:
    """One memory pool: a GPU (or RPC worker) or the host."""

    name: str  # llama.cpp's device name: CUDA0, ROCm1, Vulkan0, MTL0, RPC0[host:port], CPU
    kind: str  # "gpu" | "host"
    backend: str  # cuda | rocm | vulkan | metal | rpc | cpu
    total_bytes: int | None = None
    free_bytes: int | None = None  # what the fit may use; None: total
    # The largest tensor an op on this device may read or write; a weight whose op would exceed it
    # stays on the host (ggml-vulkan.cpp ggml_backend_vk_device_supports_op: maxStorageBufferRange
    # unless VK_EXT_shader_64bit_indexing, and maxBufferSize). None: no limit known.
    max_tensor_bytes: int | None = None

    @property
    def usable_bytes(self) -> int | None:
        return self.free_bytes if self.free_bytes is not None else self.total_bytes


def parse_size(text: str) -> int:
    """`24GiB`, `24G` (binary, as GPU makers' "24 GB" cards mean), `24GB`, `1.5T`, `512MiB` → bytes.

    A bare G/GB means GiB here: VRAM sizes are binary (a "24 GB" card has 24 GiB).
    """
    m = _SIZE.match(text)
    if not m:
        raise InputError(f"cannot read '{text}' as a memory size (examples: 24GiB, 12G, 512MiB)")
    number, unit = float(m.group(1)), m.group(2).lower()
    return int(number * _UNITS[unit])


def gpus_from_sizes(spec: str, backend: str = "cuda") -> tuple[DeviceSpec, ...]:
    """`--gpu 24GiB,12GiB` → CUDA0, CUDA1 (or the backend's names); `cpu` → no GPU."""
    if spec.strip().lower() == "cpu":
        return ()
    if backend not in BACKEND_DEVICE_PREFIX or backend == "cpu":
        raise InputError(f"unknown backend '{backend}'; expected one of cuda, rocm, vulkan, metal")
    sizes = [parse_size(part) for part in spec.split(",") if part.strip()]
    if not sizes:
        raise InputError("--gpu needs at least one size, e.g. --gpu 24GiB")
    prefix = BACKEND_DEVICE_PREFIX[backend]
    return tuple(DeviceSpec(f"{prefix}{i}", "gpu", backend, size, size) for i, size in enumerate(sizes))


def host(total_bytes: int | None, available_bytes: int | None) -> DeviceSpec:
    return DeviceSpec("CPU", "host", "cpu", total_bytes, available_bytes)
