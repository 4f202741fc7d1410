"""Unified memory (machine/unified.py): a device's reported memory against what the OS says, one
row per known way llama.cpp reports it wrongly; the device's and the host's memory together never
exceed the one pool they share."""

from __future__ import annotations

import pytest

from llamafit.machine.unified import CrossChecked, OsMemory, cross_check

G = 1 << 30
M = 1 << 20

CASES = [
    # a discrete card, nothing known from the OS: as reported
    ("dgpu-unknown", 24 * G, 23 * G, OsMemory(), CrossChecked(24 * G, 23 * G, None)),
    # a discrete card with less free than sysfs says: as reported
    (
        "dgpu-sysfs-agrees",
        16 * G,
        4 * G,
        OsMemory(dedicated_total=16 * G, dedicated_used=11 * G, host_available=50 * G),
        CrossChecked(16 * G, 4 * G, 50 * G),
    ),
    # a Vulkan heap a MiB or two above NVML's total: the same memory, not shared
    (
        "dgpu-heap-within-a-mib",
        24 * G + 2 * M,
        23 * G,
        OsMemory(dedicated_total=24 * G, dedicated_used=1 * G, host_available=50 * G),
        CrossChecked(24 * G + 2 * M, 23 * G, 50 * G),
    ),
    # ROCm's hipMemGetInfo misses graphics allocations (llama.cpp#25123): sysfs's free
    (
        "rocm-over-reports-free",
        16 * G,
        15 * G,
        OsMemory(dedicated_total=16 * G, dedicated_used=11 * G, host_available=50 * G),
        CrossChecked(16 * G, 5 * G, 50 * G, ("free_above_os",)),
    ),
    # an Intel iGPU whose heap budget exceeds the heap (llama.cpp#29277), on 72 GiB of RAM with
    # 60 available: free capped at total, then at the RAM the GPU may map (36 GiB: the host keeps
    # the other 36), which the host no longer has
    (
        "intel-igpu-free-above-total",
        36 * G,
        46 * G,
        OsMemory(integrated=True, host_total=72 * G, host_available=60 * G),
        CrossChecked(
            36 * G,
            24 * G,
            36 * G,
            ("free_above_total", "free_above_os", "shared_with_host"),
            24 * G,
        ),
    ),
    # Strix Halo, Vulkan: 64 GiB carve-out (1 used) + 48 GiB GTT summed; the OS has 62 GiB, 58
    # available: the GPU's free is the carve-out's 63 and 44 of the host's 58; the host keeps 14
    (
        "strix-halo-vulkan-sums-heaps",
        112 * G,
        111 * G,
        OsMemory(
            integrated=True,
            dedicated_total=64 * G,
            dedicated_used=1 * G,
            shared_total=48 * G,
            shared_used=0,
            host_total=62 * G,
            host_available=58 * G,
        ),
        CrossChecked(112 * G, 107 * G, 14 * G, ("free_above_os", "shared_with_host"), 44 * G),
    ),
    # an APU whose server reports the host's RAM as its own (512 MiB carve-out, 16 GiB GTT, 31 GiB
    # of RAM, 25 available): seen from the reported total above the carve-out
    (
        "apu-reports-host-ram",
        31 * G,
        25 * G,
        OsMemory(
            dedicated_total=512 * M,
            dedicated_used=256 * M,
            shared_total=16 * G,
            shared_used=1 * G,
            host_total=31 * G,
            host_available=25 * G,
        ),
        CrossChecked(
            16 * G + 512 * M,
            10 * G + 256 * M,
            15 * G,
            ("total_above_os", "free_above_os", "shared_with_host"),
            10 * G,
        ),
    ),
    # Apple silicon, 64 GiB, a 48 GiB working set, 30 GiB available: the GPU may take 14, the
    # host keeps the 16 GiB the GPU cannot wire
    (
        "apple-busy",
        48 * G,
        48 * G,
        OsMemory(integrated=True, shared_total=48 * G, host_total=64 * G, host_available=30 * G),
        CrossChecked(48 * G, 14 * G, 16 * G, ("free_above_os", "shared_with_host"), 14 * G),
    ),
    (
        "apple-idle",
        48 * G,
        48 * G,
        OsMemory(integrated=True, shared_total=48 * G, host_total=64 * G, host_available=60 * G),
        CrossChecked(48 * G, 44 * G, 16 * G, ("free_above_os", "shared_with_host"), 44 * G),
    ),
    # integrated, the host unknown: nothing to take it from (the plan's host is given)
    (
        "igpu-host-unknown",
        8 * G,
        7 * G,
        OsMemory(integrated=True),
        CrossChecked(8 * G, 7 * G, None, (), 7 * G),
    ),
]


@pytest.mark.parametrize(
    ("total", "free", "os", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_cross_check(total: int, free: int, os: OsMemory, expected: CrossChecked) -> None:
    got = cross_check(total, free, os)
    assert got == expected
    assert got.free_bytes <= got.total_bytes
    if os.host_available is not None:  # one pool: what the GPU borrows the host no longer has
        dedicated_free = max((os.dedicated_total or 0) - (os.dedicated_used or 0), 0)
        host_left = got.host_available_bytes
        assert host_left is not None
        assert got.free_bytes + host_left <= dedicated_free + os.host_available


def test_detected_apple_silicon_and_its_host_are_one_pool() -> None:
    """Without a server, detection's MTL0 (a 48 GiB working set on 64 GiB, 30 available) and the
    host share the RAM: 14 GiB to the GPU, the 16 the GPU cannot wire to the host (they were 48 and
    30: 78 GiB planned on a 64 GiB machine)."""
    from llamafit.machine.devices import DeviceSpec, host
    from llamafit.machine.hardware import GPUInfo, Hardware
    from llamafit.machine.pick import one_pool

    mtl = GPUInfo(
        DeviceSpec("MTL0", "gpu", "metal", 48 * G, 48 * G), "Apple M3 Max", 0, unified=True
    )
    hw = one_pool(Hardware((mtl,), host(64 * G, 30 * G), "sysctl"))
    assert (hw.gpus[0].spec.free_bytes, hw.host.free_bytes) == (14 * G, 16 * G)
    cuda = GPUInfo(DeviceSpec("CUDA0", "gpu", "cuda", 24 * G, 20 * G), "RTX 4090", 0)
    same = Hardware((cuda,), host(64 * G, 30 * G), "nvml")
    assert one_pool(same) == same  # a discrete card: nothing shared
