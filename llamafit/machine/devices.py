"""Device specs (plain values: detection is an edge concern) and `--gpu` size specs."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import InputError
from ..units import GIB, KIB, MIB

BACKEND_DEVICE_PREFIX = {
    "cuda": "CUDA",
    "rocm": "ROCm",
    "vulkan": "Vulkan",
    "metal": "MTL",
    "cpu": "CPU",
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?)b?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": KIB, "m": MIB, "g": GIB, "t": GIB << 10}
# 1 EiB: far beyond any machine, small enough for exact float arithmetic downstream
MAX_SIZE = 1 << 60


class SizeTooLarge(InputError):
    """A memory size beyond MAX_SIZE: never a catalog name either."""


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
    # the driver's share of this GPU that no llama.cpp buffer reports (CUDA context, cuBLAS
    # workspace; cuda_overhead_bytes); 0 where unknown. The CUDA VMM pool stays in the reserve.
    overhead_bytes: int = 0
    # the host's CPU features that select repacked weight layouts, named after ggml's ggml_cpu_has_*
    # (avx2, avx512, neon, matmul_int8, dotprod, sve; memory/repack.py); empty: none known
    cpu_features: frozenset[str] = frozenset()
    # What the compute-buffer replay (memory/graph/replay.py) asks of a Vulkan device or an RPC
    # worker; None where unknown (replay.py then takes the bound it names). Vulkan:
    # minStorageBufferOffsetAlignment (the device buffer type's alignment,
    # ggml_backend_vk_buffer_type_get_alignment); RPC: the worker's buffer alignment
    # (ggml-rpc.cpp get_alignment: 32 for a CPU worker).
    buffer_alignment: int | None = None
    # Vulkan: minMemoryMapAlignment (Vulkan_Host's alignment, ggml_backend_vk_host_buffer_type)
    host_alignment: int | None = None
    # Vulkan: maxMemoryAllocationSize, which caps the 1 GiB suballocation block (ggml_vk_get_device)
    max_allocation_bytes: int | None = None
    # CUDA / ROCm: the compute capability as ggml-cuda numbers it (common.cuh GGML_CUDA_CC_*:
    # NVIDIA 100 x major + 10 x minor, 890 for 8.9; AMD GGML_CUDA_CC_OFFSET_AMD + the gfx id,
    # 0x1001100 for gfx1100), which picks the flash-attention kernel and so the F16 copies of a
    # quantized cache in the compute buffer (memory/graph/backends/cuda_fattn.py); None: unknown
    cc: int | None = None

    @property
    def usable_bytes(self) -> int | None:
        return self.free_bytes if self.free_bytes is not None else self.total_bytes


# The environment variables that choose which devices a llama-server sees, and in what order. The
# plan is made on the devices they leave (`--list-devices` inherits them), so a launch config that
# drops one starts a server on other devices than planned.
DEVICE_SELECTION_VARS = (
    "CUDA_VISIBLE_DEVICES",  # CUDA runtime (HIP reads it too)
    "CUDA_DEVICE_ORDER",  # CUDA runtime: FASTEST_FIRST (default) or PCI_BUS_ID numbering
    "HIP_VISIBLE_DEVICES",  # ROCm HIP runtime
    "ROCR_VISIBLE_DEVICES",  # ROCm runtime, applied before HIP's
    "GPU_DEVICE_ORDINAL",  # ROCm HIP runtime, as HIP_VISIBLE_DEVICES
    "GGML_VK_VISIBLE_DEVICES",  # ggml-vulkan.cpp ggml_vk_instance_init
    "ONEAPI_DEVICE_SELECTOR",  # SYCL (oneAPI DPC++ runtime)
    "ZE_AFFINITY_MASK",  # SYCL's Level Zero devices
    "MUSA_VISIBLE_DEVICES",  # Moore Threads MUSA runtime
    "ASCEND_RT_VISIBLE_DEVICES",  # Huawei CANN runtime
    "GGML_OPENCL_PLATFORM",  # ggml-opencl.cpp ggml_opencl_probe_devices
    "GGML_OPENCL_DEVICE",  # ggml-opencl.cpp ggml_opencl_probe_devices
)


def device_selection_env(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The device-selection variables set in `env`, in DEVICE_SELECTION_VARS' order: what a launch
    config must export for its server to see the plan's devices."""
    return tuple((name, env[name]) for name in DEVICE_SELECTION_VARS if name in env)


def parse_size(text: str) -> int:
    """`24GiB`, `24G` (binary, as GPU makers' "24 GB" cards mean), `24GB`, `1.5T`, `512MiB` → bytes.

    A bare G/GB means GiB here: VRAM sizes are binary (a "24 GB" card has 24 GiB).
    """
    m = _SIZE.match(text)
    if not m:
        raise InputError(f"cannot read '{text}' as a memory size (examples: 24GiB, 12G, 512MiB)")
    digits, unit = m.group(1), m.group(2).lower()
    whole = digits.partition(".")[0].lstrip("0")
    if (
        len(whole) > 20 or int(whole or 0) * _UNITS[unit] > MAX_SIZE
    ):  # float() would overflow to inf
        shown = text.strip() if len(text.strip()) <= 40 else text.strip()[:39] + "…"
        raise SizeTooLarge(f"memory size '{shown}' is too large (at most 1 EiB)")
    return int(float(digits) * _UNITS[unit])


def host(
    total_bytes: int | None, available_bytes: int | None, cpu_features: frozenset[str] = frozenset()
) -> DeviceSpec:
    return DeviceSpec("CPU", "host", "cpu", total_bytes, available_bytes, cpu_features=cpu_features)


# CUDA per-GPU overhead that no ggml buffer reports (issue #12, rule 3). The cuBLAS workspace is
# cuBLAS's default per handle (ggml-cuda creates one handle per device, ggml_cuda_get_device's
# cublas_handle): 4 MiB, 32 MiB on Hopper (compute capability 9.0) and later (cuBLAS docs,
# "cublasSetWorkspace": default workspace sizes). The context itself is the driver's (code, stacks,
# printf/heap reserves); llama.cpp's breakdown shows it in the `unaccounted` column, 451-456 MiB
# per RTX 4090 together with the VMM pool after a run (ggml-org/llama.cpp PR #15860). We take
# CUDA_CONTEXT_BYTES for the context alone and leave the pool, which grows with use, to the reserve.
CUDA_CONTEXT_BYTES = 256 << 20
CUBLAS_WORKSPACE_BYTES = 4 << 20
CUBLAS_WORKSPACE_HOPPER_BYTES = 32 << 20


def cuda_overhead_bytes(cc_major: int | None) -> int:
    """CUDA context + cuBLAS workspace for a GPU of compute capability `cc_major` (None:
    unknown)."""
    hopper = cc_major is not None and cc_major >= 9
    return CUDA_CONTEXT_BYTES + (
        CUBLAS_WORKSPACE_HOPPER_BYTES if hopper else CUBLAS_WORKSPACE_BYTES
    )
