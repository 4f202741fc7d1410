"""The devices the llama-server that will run sees: `llama-server --list-devices` (an edge module).

common/arg.cpp's `--list-devices` prints, for every ggml backend device that is not the CPU,
`  NAME: DESCRIPTION (TOTAL MiB, FREE MiB free)` (ggml_backend_dev_name, ggml_backend_dev_description,
ggml_backend_dev_memory), and `  (none)` when there is none. That list is what llama.cpp splits the
model over, so it is the device list a plan uses whenever a server is known: a Vulkan build sees
Vulkan0 where no vulkaninfo is installed, a CPU-only build sees nothing even beside an NVIDIA GPU.

Not cached: free memory changes, and the answer is cheap (about 0.1 s for a CPU or CUDA build,
0.2 s for lavapipe's Vulkan initialisation, measured on the development machine). The memory is
printed in whole MiB (integer division), so a device is known to 1 MiB here; NVML or sysfs add the
exact figure where they see the same card.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from ..units import MIB
from .bounded import bounded_int
from .devices import DeviceSpec
from .hardware import GPUInfo, Hardware
from .unified import CrossChecked, OsMemory, cross_check
from .vulkan import VulkanDevice

# seconds (issue #37 F4: a hung GPU driver hangs --list-devices; after this the plan goes on with
# detection's devices and says so); a real build answers in 0.1-2 s
LIST_TIMEOUT_S = 5.0
# the largest device believed, in MiB (64 TiB: far above any accelerator); a line with more is none
MAX_MIB = 1 << 26
_LINE = re.compile(r"^\s*([A-Za-z_]+)(\d+)(\[[^\]]*\])?: (.*) \((\d+) MiB, (\d+) MiB free\)\s*$")
# a device name llama.cpp prints is a backend prefix, an index and an RPC endpoint: RPC0[host:port]
MAX_NAME = 300
MAX_DESCRIPTION = 200
# device-name prefix → backend (ggml-cuda: CUDA, ggml-cuda built for HIP: ROCm, ggml-vulkan: Vulkan,
# ggml-metal: MTL, ggml-rpc: RPC, ggml-sycl: SYCL, ggml-cann: CANN, ggml-opencl: GPUOpenCL)
PREFIX_BACKEND = {
    "CUDA": "cuda",
    "ROCm": "rocm",
    "Vulkan": "vulkan",
    "MTL": "metal",
    "RPC": "rpc",
    "SYCL": "sycl",
    "CANN": "cann",
    "GPUOpenCL": "opencl",
}
# listed devices that are no memory pool of their own: BLAS (ggml-blas: an accelerator on host
# memory)
_NOT_A_POOL = ("BLAS",)
# ggml-cuda.cu ggml_cuda_init's device lines before the list: "Device 0: NVIDIA GeForce RTX 4090,
# compute capability 8.9, VMM: yes" (CUDA: cc 100 x major + 10 x minor) and "Device 0: AMD Radeon
# RX 7900 XTX, gfx1100 (0x1100), VMM: no, Wave Size: 32" (HIP: GGML_CUDA_CC_OFFSET_AMD + the id)
_CUDA_INIT = re.compile(
    r"^\s*Device (\d+): .*, (?:compute capability (\d+)\.(\d+)|[\w:+-]+ \((0x[0-9a-fA-F]+)\)), VMM"
)
_CC_OFFSET_AMD = 0x1000000


@dataclass(frozen=True, slots=True)
class ListedDevice:
    """One line of `--list-devices`."""

    name: str  # Vulkan0, CUDA1, RPC0[host:port]
    backend: str
    description: (
        str  # the driver's name: "NVIDIA GeForce RTX 4090", "llvmpipe (LLVM 15.0.6, 256 bits)"
    )
    total_bytes: int
    free_bytes: int
    cc: int | None = None  # CUDA / ROCm: ggml-cuda's compute capability (DeviceSpec.cc)

    def spec(self) -> DeviceSpec:
        return DeviceSpec(
            self.name, "gpu", self.backend, self.total_bytes, self.free_bytes, cc=self.cc
        )


def _cuda_ccs(text: str) -> dict[int, int]:
    """Device index → compute capability from ggml_cuda_init's lines (_CUDA_INIT)."""
    out = {}
    for line in text.splitlines():
        m = _CUDA_INIT.match(line)
        if m is None:
            continue
        major, minor, amd = m.group(2), m.group(3), m.group(4)
        cc = 100 * int(major) + 10 * int(minor) if amd is None else _CC_OFFSET_AMD + int(amd, 16)
        out[int(m.group(1))] = cc
    return out


def parse_list_devices(text: str) -> tuple[ListedDevice, ...] | None:
    """The devices of a `--list-devices` answer, in llama.cpp's order; None when the text is not one
    (no `Available devices:` line: an older build without the flag, or a failure). ValueError for
    a device line no llama.cpp prints (a size over MAX_MIB, a name over MAX_NAME characters): the
    answer is not believed, rather than planned with a device missing."""
    if "Available devices:" not in text:
        return None
    init, listed = text.split("Available devices:", 1)
    ccs = _cuda_ccs(init)
    out = []
    for line in listed.splitlines():
        m = _LINE.match(line)
        if not m or m.group(1) in _NOT_A_POOL:
            continue
        prefix, index, endpoint, description = m.group(1), m.group(2), m.group(3) or "", m.group(4)
        total, free = bounded_int(m.group(5), MAX_MIB), bounded_int(m.group(6), MAX_MIB)
        if total is None or free is None:
            raise ValueError(f"a device of more than {MAX_MIB:,} MiB")
        if len(prefix) + len(index) + len(endpoint) > MAX_NAME:
            raise ValueError(f"a device name of more than {MAX_NAME} characters")
        if len(description) > MAX_DESCRIPTION:
            description = description[: MAX_DESCRIPTION - 1] + "…"
        backend = PREFIX_BACKEND.get(prefix, prefix.lower())
        name = f"{prefix}{index}{endpoint}"
        if (
            backend == "rpc" and not endpoint
        ):  # `RPC0: host:port (…)`: llama.cpp names its buffers RPC0[host:port]
            name = f"RPC{index}[{(description.split() or ['?'])[0]}]"
        cc = ccs.get(int(index)) if backend in ("cuda", "rocm") else None
        out.append(ListedDevice(name, backend, description, total << 20, free << 20, cc))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Listing:
    """One `--list-devices` answer of one binary: asked once per command (prepare), kept for the
    records of `run` (commands/run.py reported_devices)."""

    server: str
    devices: tuple[ListedDevice, ...] | None  # None: it gives no list
    failure: str | None = None  # why it gave none (hung, endless, not believed): one line


def list_devices(
    server: str, env: Mapping[str, str], timeout_s: float | None = None
) -> tuple[ListedDevice, ...] | None:
    """What `server --list-devices` reports under `env` (the variables that pick devices:
    GGML_VK_VISIBLE_DEVICES, CUDA_VISIBLE_DEVICES, … pass through); None when it gives no list."""
    return ask_list_devices(server, env, timeout_s)[0]


def ask_list_devices(
    server: str, env: Mapping[str, str], timeout_s: float | None = None
) -> tuple[tuple[ListedDevice, ...] | None, str | None]:
    """(the list, None), (None, None) for a build without the flag, or (None, why) when the run
    failed (bounded: machine/bounded.py), for a one-line note."""
    from .bounded import ask_tool

    answer = ask_tool(
        [server, "--list-devices"], env, LIST_TIMEOUT_S if timeout_s is None else timeout_s
    )
    if answer.failure:
        return None, answer.failure
    try:
        return parse_list_devices(answer.text), None
    except ValueError as e:
        return None, f"{os.path.basename(server)} --list-devices reports {e}: not believed"


def _mib(n: int | None) -> str:
    return "?" if n is None else f"{n / MIB:,.0f} MiB"


def _enrich(gpu: GPUInfo, detected: Sequence[GPUInfo], notes: list[str]) -> GPUInfo:
    """A listed CUDA/ROCm device with what NVML/sysfs know of the same device (same llama.cpp name,
    both after *_VISIBLE_DEVICES): the exact free memory now, card identity, bandwidth, CUDA
    overhead."""
    same = next((d for d in detected if d.spec.name == gpu.spec.name), None)
    if same is None:
        # a Vulkan build on the same card
        same = next((d for d in detected if d.name == gpu.name), None)
        if same is None:
            return gpu
        return replace(
            gpu,
            bandwidth_bytes_per_s=same.bandwidth_bytes_per_s,
            driver=same.driver,
            pci_bus_id=same.pci_bus_id,
            uuid=same.uuid,
        )
    ours, theirs = gpu.spec.total_bytes or 0, same.spec.total_bytes or 0
    if same.name != gpu.name or abs(ours - theirs) >= 2 << 20:  # the list prints whole MiB
        notes.append(
            f"{gpu.spec.name}: llama-server reports {gpu.name} ({_mib(ours)}), detection "
            f"{same.name} ({_mib(theirs)}); the plan uses the server's device"
        )
        return gpu
    spec = replace(
        gpu.spec,
        total_bytes=same.spec.total_bytes,
        free_bytes=same.spec.free_bytes,
        overhead_bytes=same.spec.overhead_bytes,
        cc=gpu.spec.cc if gpu.spec.cc is not None else same.spec.cc,
    )
    return replace(same, spec=spec, index=gpu.index)


def server_hardware(
    listed: Sequence[ListedDevice],
    detected: Hardware,
    vulkan: Sequence[VulkanDevice] | None,
    server: str,
) -> Hardware:
    """The server's devices as the plan's GPUs, with what detection adds; a note where they
    disagree.

    `vulkan`: vulkaninfo's devices in llama.cpp's order (llama_order), None when vulkaninfo is
    absent: it alone gives a Vulkan device's tensor-size limit (ggml-vulkan.cpp does not print
    maxStorageBufferRange, not even at `-lv 4`)."""
    notes: list[str] = []
    gpus: list[GPUInfo] = []
    for i, d in enumerate(listed):
        gpu = GPUInfo(d.spec(), d.description, i)
        if d.backend == "vulkan":
            k = sum(1 for g in listed[:i] if g.backend == "vulkan")
            if vulkan is None:
                notes.append(
                    f"{d.name}: the largest tensor it can use is unknown without vulkaninfo (apt "
                    "install vulkan-tools); the llama.cpp check shows llama.cpp's own placement"
                )
            elif k < len(vulkan):
                vk = vulkan[k]
                gpu = replace(gpu, spec=replace(gpu.spec, max_tensor_bytes=vk.max_tensor_bytes))
                if vk.name != d.description:
                    notes.append(
                        f"{d.name}: llama-server reports {d.description}, vulkaninfo {vk.name}"
                    )
        if d.backend != "rpc":
            gpu = _enrich(gpu, detected.gpus, notes)
        gpus.append(gpu)
    gpus, host = _one_pool(gpus, listed, detected, vulkan, notes)
    local = [g for g in gpus if g.spec.backend in ("cuda", "rocm", "metal")]
    if len(detected.gpus) > len(local) and not any(g.spec.backend == "vulkan" for g in gpus):
        names = ", ".join(g.spec.name for g in detected.gpus)
        notes.append(
            f"{detected.source} finds {names}, which this llama-server does not list (a build "
            "without that backend): planned without them"
        )
    return Hardware(tuple(gpus), host, "llama-server", tuple(notes))


def _os_memory(
    gpu: GPUInfo, listed: ListedDevice, detected: Hardware, vulkan: VulkanDevice | None
) -> OsMemory:
    """What the OS says of a listed device's memory: the sysfs card of the same device (by
    llama.cpp's name, else by the driver's name), whether the driver calls it integrated (Metal,
    vulkaninfo's device type), and the host's RAM."""
    card = next((g for g in detected.gpus if g.spec.name == listed.name), None)
    if card is None or card.spec.backend != listed.backend:
        card = next(
            (g for g in detected.gpus if g.name and listed.description.startswith(g.name)), None
        )
    integrated = listed.backend == "metal" or (
        vulkan is not None and vulkan.device_type.endswith("INTEGRATED_GPU")
    )
    host = detected.host
    if card is None:
        return OsMemory(integrated, host_total=host.total_bytes, host_available=host.usable_bytes)
    if card.spec.backend == "metal":  # the working set is a mappable limit, no memory of its own
        return OsMemory(
            integrated,
            shared_total=card.spec.total_bytes,
            host_total=host.total_bytes,
            host_available=host.usable_bytes,
        )
    return OsMemory(
        integrated,
        card.spec.total_bytes,
        card.used_bytes,
        card.shared_total_bytes,
        card.shared_used_bytes,
        host.total_bytes,
        host.usable_bytes,
    )


def _one_pool(
    gpus: list[GPUInfo],
    listed: Sequence[ListedDevice],
    detected: Hardware,
    vulkan: Sequence[VulkanDevice] | None,
    notes: list[str],
) -> tuple[list[GPUInfo], DeviceSpec]:
    """Each listed device's memory cross-checked against the OS (unified.py: free at most total, at
    most what the OS has free), and the host's available RAM less what the GPUs' free memory
    borrows from it: one pool is counted once."""
    host = detected.host
    out = []
    for gpu, d in zip(gpus, listed, strict=True):
        if d.backend == "rpc" or gpu.spec.total_bytes is None or gpu.spec.free_bytes is None:
            out.append(gpu)
            continue
        k = sum(1 for g in listed[: listed.index(d)] if g.backend == "vulkan")
        vk = vulkan[k] if d.backend == "vulkan" and vulkan is not None and k < len(vulkan) else None
        checked = cross_check(
            gpu.spec.total_bytes,
            gpu.spec.free_bytes,
            replace(_os_memory(gpu, d, detected, vk), host_available=host.usable_bytes),
        )
        if checked.corrected:
            notes.append(_corrected_note(gpu.spec, checked))
        if checked.host_available_bytes is not None and checked.shared_bytes:
            host = replace(host, free_bytes=checked.host_available_bytes)
        spec = replace(gpu.spec, total_bytes=checked.total_bytes, free_bytes=checked.free_bytes)
        out.append(replace(gpu, spec=spec))
    return out, host


def _gib(n: int | None) -> str:
    return "?" if n is None else f"{n / (1 << 30):,.1f} GiB"


def _corrected_note(reported: DeviceSpec, checked: CrossChecked) -> str:
    """`Vulkan0: llama-server reports 112.0 GiB, 111.0 GiB free; planned with 107.0 GiB free
    (the OS's figures), 44.0 GiB of it the host's RAM, which the host is planned without`."""
    why = []
    if "free_above_total" in checked.corrected:
        why.append("free above total")
    if {"free_above_os", "total_above_os"} & set(checked.corrected):
        why.append("more than the OS has free")
    text = (
        f"{reported.name}: llama-server reports {_gib(reported.total_bytes)}, "
        f"{_gib(reported.free_bytes)} free"
        + (f" ({', '.join(why)})" if why else "")
        + f"; planned with {_gib(checked.total_bytes)}, {_gib(checked.free_bytes)} free"
    )
    if "shared_with_host" in checked.corrected:
        text += (
            f", {_gib(checked.shared_bytes)} of it the host's RAM, which the CPU is planned "
            f"without ({_gib(checked.host_available_bytes)} left to it)"
        )
    return text
