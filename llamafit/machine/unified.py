"""Unified memory: a GPU whose memory is partly or wholly the host's RAM (an APU's carve-out plus
GTT, an Intel iGPU, Apple silicon), cross-checked against what the OS says (pure; detection, the
OS facts, stays in hardware.py and server_devices.py).

llama.cpp's own figures for such a device (`--list-devices`, ggml_backend_dev_memory) can be wrong
in three known ways, and all of them overlap the host's RAM, which the plan counts as well:
- ggml-vulkan reports a heap budget above the heap's size as free memory, so free > total
  (ggml-org/llama.cpp#29277: an Intel iGPU on Windows);
- ROCm's hipMemGetInfo ignores graphics allocations, so free is over-reported
  (ggml-org/llama.cpp#25123: the fix takes min(hip, sysfs mem_info_vram_total - used));
- ggml-vulkan adds up every device-local heap of an integrated GPU (PR #17110), so an AMD Strix
  Halo reports its 64 GiB carve-out plus the GTT, system RAM the host has too (111.65 GiB on a
  128 GB machine).

The rules (`cross_check`): free is never above total; never above what the OS says is free (the
dedicated memory's free, plus for an integrated GPU the part of the host's available RAM it may
map); and the part of the GPU's free that is the host's RAM is taken off the host's available
memory, so one pool is never counted twice. The host keeps the RAM the GPU cannot map (its total
less the GPU's mappable limit: the GTT size, Apple's wired limit, else the device's reported
total), so a plan still has host memory for what stays on the CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

# whole MiB: what `--list-devices` prints, so a reported total this far above the dedicated memory
# is the same memory, not more
_LISTED_SLACK = 2 << 20


@dataclass(frozen=True, slots=True)
class OsMemory:
    """What the OS says of one GPU's memory and of the host's; bytes, None where unknown."""

    # the driver calls it integrated (Metal; vulkaninfo's PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU)
    integrated: bool = False
    # dedicated memory: a card's VRAM, an APU's carve-out (amdgpu mem_info_vram_total / _used)
    dedicated_total: int | None = None
    dedicated_used: int | None = None
    # host RAM the GPU may map: amdgpu's GTT (mem_info_gtt_total / _used), Apple's wired limit
    shared_total: int | None = None
    shared_used: int | None = None
    host_total: int | None = None  # the RAM the OS has (MemTotal: without the carve-out)
    host_available: int | None = None  # MemAvailable


@dataclass(frozen=True, slots=True)
class CrossChecked:
    """The device's memory to plan with, the host's available memory left to plan with, and what
    was corrected (codes: free_above_total, free_above_os, total_above_os, shared_with_host)."""

    total_bytes: int
    free_bytes: int
    host_available_bytes: int | None
    corrected: tuple[str, ...] = ()
    shared_bytes: int = 0  # the part of free_bytes that is the host's RAM


def shares_host_memory(total: int, os: OsMemory) -> bool:
    """The device's memory is partly the host's: the driver says integrated, or llama.cpp reports
    more than the device's dedicated memory of a GPU that maps host RAM (the excess is that
    RAM)."""
    return os.integrated or (
        os.dedicated_total is not None
        and os.shared_total is not None
        and total > os.dedicated_total + _LISTED_SLACK
    )


def cross_check(total: int, free: int, os: OsMemory) -> CrossChecked:
    """The reported `total` and `free` of one device, checked against `os` (module docstring)."""
    corrected: list[str] = []
    if free > total:  # llama.cpp#29277
        free = total
        corrected.append("free_above_total")
    dedicated_free = (
        None
        if os.dedicated_total is None
        else max(os.dedicated_total - (os.dedicated_used or 0), 0)
    )
    if not shares_host_memory(total, os):
        # llama.cpp#25123; within the list's whole MiB it is the same figure
        if dedicated_free is not None and free > dedicated_free + _LISTED_SLACK:
            free = dedicated_free
            corrected.append("free_above_os")
        return CrossChecked(total, free, os.host_available, tuple(corrected))
    dedicated_total, dedicated_free = os.dedicated_total or 0, dedicated_free or 0
    # how much host RAM the GPU may map: the GTT or wired limit, else what llama.cpp counts beyond
    # the dedicated memory
    mappable = os.shared_total if os.shared_total is not None else max(total - dedicated_total, 0)
    if os.host_total is not None and dedicated_total + min(mappable, os.host_total) < total:
        total = dedicated_total + min(mappable, os.host_total)
        corrected.append("total_above_os")
    if free > total:
        free = total
    shared_free = max(mappable - (os.shared_used or 0), 0)
    host = os.host_available
    if host is not None:
        # the RAM the GPU cannot map stays the host's; the GPU may take the rest of what is free
        keep = min(host, max((os.host_total or host) - mappable, 0))
        shared_free = min(shared_free, host - keep)
    if free > dedicated_free + shared_free:
        free = dedicated_free + shared_free
        corrected.append("free_above_os")
    shared = max(free - dedicated_free, 0)
    if shared and host is not None:
        host -= shared
        corrected.append("shared_with_host")
    return CrossChecked(total, free, host, tuple(corrected), shared)
