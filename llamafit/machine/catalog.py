"""Built-in catalog of common GPUs (pure): VRAM and memory bandwidth, for `--gpu rtx4090` and for
"the smallest GPU that would hold this".

VRAM is the marketing size read as binary (a "24 GB" card has 24 GiB, as `parse_size` reads `24G`);
the driver reports a little less on some cards (an RTX 4090 shows 24564 MiB). Bandwidth is the
maker's figure in bytes/s. Apple entries are unified memory: `vram_bytes` is the RAM and
`usable_bytes` is Metal's recommendedMaxWorkingSetSize (`metal_working_set`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import InputError
from ..units import GIB, MIB

_GB_S = 10**9
_VENDOR_BACKEND = {"nvidia": "cuda", "amd": "rocm", "apple": "metal", "mesa": "vulkan"}


def metal_working_set(ram_bytes: int, wired_limit_mb: int = 0) -> int:
    """Metal's recommendedMaxWorkingSetSize on Apple Silicon: `iogpu.wired_limit_mb` when set,
    else about 2/3 of RAM up to 36 GiB and 3/4 above (16 GiB → 10922.67 MiB, 96 GiB → 72 GiB)."""
    if wired_limit_mb > 0:
        return min(wired_limit_mb * MIB, ram_bytes)
    return ram_bytes * 2 // 3 if ram_bytes <= 36 * GIB else ram_bytes * 3 // 4


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    key: str  # canonical --gpu name: "rtx4090"
    name: str  # as the driver names it: "NVIDIA GeForce RTX 4090"
    vendor: str  # nvidia | amd | apple
    vram_bytes: int  # per device; Apple: the unified RAM
    bandwidth_bytes_per_s: int  # per device
    devices: int = 1  # MI250: two GCDs, each its own device to ROCm
    # the device's tensor-size limit (DeviceSpec.max_tensor_bytes)
    max_tensor_bytes: int | None = None
    # Vulkan limits the compute-buffer replay reads (DeviceSpec.buffer_alignment, host_alignment,
    # max_allocation_bytes: minStorageBufferOffsetAlignment, minMemoryMapAlignment,
    # maxMemoryAllocationSize); None: not known for this card
    vk_limits: tuple[int, int, int] | None = None

    @property
    def backend(self) -> str:
        return _VENDOR_BACKEND[self.vendor]

    @property
    def unified(self) -> bool:
        return self.vendor == "apple"

    @property
    def usable_bytes(self) -> int:
        """What one device offers llama.cpp: VRAM, or Metal's working set for unified memory."""
        return metal_working_set(self.vram_bytes) if self.unified else self.vram_bytes


def _e(key: str, name: str, vendor: str, gib: int, gb_s: float, devices: int = 1) -> CatalogEntry:
    return CatalogEntry(key, name, vendor, gib * GIB, int(gb_s * _GB_S), devices)


CATALOG: tuple[CatalogEntry, ...] = (
    # NVIDIA GeForce
    _e("rtx3060-12gb", "NVIDIA GeForce RTX 3060", "nvidia", 12, 360),
    _e("rtx3070", "NVIDIA GeForce RTX 3070", "nvidia", 8, 448),
    _e("rtx3080-10gb", "NVIDIA GeForce RTX 3080", "nvidia", 10, 760),
    _e("rtx3090", "NVIDIA GeForce RTX 3090", "nvidia", 24, 936),
    _e("rtx3090ti", "NVIDIA GeForce RTX 3090 Ti", "nvidia", 24, 1008),
    _e("rtx4060-8gb", "NVIDIA GeForce RTX 4060", "nvidia", 8, 272),
    _e("rtx4060ti-16gb", "NVIDIA GeForce RTX 4060 Ti", "nvidia", 16, 288),
    _e("rtx4070", "NVIDIA GeForce RTX 4070", "nvidia", 12, 504),
    _e("rtx4070ti-super", "NVIDIA GeForce RTX 4070 Ti SUPER", "nvidia", 16, 672),
    _e("rtx4080", "NVIDIA GeForce RTX 4080", "nvidia", 16, 716.8),
    _e("rtx4090", "NVIDIA GeForce RTX 4090", "nvidia", 24, 1008),
    _e("rtx5080", "NVIDIA GeForce RTX 5080", "nvidia", 16, 960),
    _e("rtx5090", "NVIDIA GeForce RTX 5090", "nvidia", 32, 1792),
    # NVIDIA workstation / data centre
    _e("rtx-a6000", "NVIDIA RTX A6000", "nvidia", 48, 768),
    _e("rtx6000-ada", "NVIDIA RTX 6000 Ada Generation", "nvidia", 48, 960),
    _e("t4", "Tesla T4", "nvidia", 16, 320),
    _e("v100-16gb", "Tesla V100-SXM2-16GB", "nvidia", 16, 900),
    _e("v100-32gb", "Tesla V100-SXM2-32GB", "nvidia", 32, 900),
    _e("a10", "NVIDIA A10", "nvidia", 24, 600),
    _e("a40", "NVIDIA A40", "nvidia", 48, 696),
    _e("a100-40gb", "NVIDIA A100-SXM4-40GB", "nvidia", 40, 1555),
    _e("a100-80gb", "NVIDIA A100-SXM4-80GB", "nvidia", 80, 2039),
    _e("l4", "NVIDIA L4", "nvidia", 24, 300),
    _e("l40s", "NVIDIA L40S", "nvidia", 48, 864),
    _e("h100", "NVIDIA H100 80GB HBM3", "nvidia", 80, 3350),  # SXM
    _e("h100-pcie", "NVIDIA H100 PCIe", "nvidia", 80, 2000),
    _e("h100-nvl", "NVIDIA H100 NVL", "nvidia", 94, 3900),
    _e("h200", "NVIDIA H200", "nvidia", 141, 4800),
    # AMD
    _e("rx7900xtx", "AMD Radeon RX 7900 XTX", "amd", 24, 960),
    _e("mi210", "AMD Instinct MI210", "amd", 64, 1638.4),
    _e("mi250", "AMD Instinct MI250", "amd", 64, 1638.4, devices=2),  # per GCD; ROCm sees two
    _e("mi300x", "AMD Instinct MI300X", "amd", 192, 5300),
    # Apple Silicon (unified memory)
    _e("m1-max-64gb", "Apple M1 Max", "apple", 64, 400),
    _e("m2-max-96gb", "Apple M2 Max", "apple", 96, 400),
    _e("m3-max-128gb", "Apple M3 Max", "apple", 128, 400),
    _e("m4-max-128gb", "Apple M4 Max", "apple", 128, 546),
    _e("m2-ultra-192gb", "Apple M2 Ultra", "apple", 192, 800),
    _e("m3-ultra-512gb", "Apple M3 Ultra", "apple", 512, 819),
    # Mesa's software Vulkan device (llama.cpp: GGML_VK_VISIBLE_DEVICES=0): a 2 GiB heap and
    # maxStorageBufferRange 128 MiB (vulkaninfo, Mesa 22.3 / LLVM 15); bandwidth: host RAM, nominal
    # minStorageBufferOffsetAlignment 16, minMemoryMapAlignment 64, maxMemoryAllocationSize 2 GiB
    CatalogEntry(
        "lavapipe", "llvmpipe", "mesa", 2 * GIB, 20 * _GB_S, 1, 128 << 20, (16, 64, 2 * GIB)
    ),
)

# Unambiguous other spellings → canonical key.
_ALIASES = {
    "rtx3080": "rtx3080-10gb",
    "rtx4060": "rtx4060-8gb",
    "rtx3060": "rtx3060-12gb",
    "h100-sxm": "h100",
    "h100-80gb": "h100",
    "mi250x": "mi250",
    "a6000": "rtx-a6000",
}


def normalize(name: str) -> str:
    """Case-insensitive, `-`/`_`/space-insensitive form used for lookup."""
    return re.sub(r"[-_\s]+", "", name.strip().lower())


_BY_NORM: dict[str, CatalogEntry] = {normalize(e.key): e for e in CATALOG}
_BY_NORM.update({normalize(alias): _BY_NORM[normalize(key)] for alias, key in _ALIASES.items()})


def find(name: str) -> CatalogEntry | None:
    return _BY_NORM.get(normalize(name))


def close_matches(name: str, limit: int = 5) -> list[str]:
    """Catalog keys that look like `name`: those containing it, else similar spellings (closest
    first)."""
    norm = normalize(name)
    by_norm = {normalize(e.key): e.key for e in CATALOG}
    containing = [key for n, key in by_norm.items() if norm and norm in n]
    if containing:
        return containing[:limit]
    import difflib  # only for a name the catalog lacks

    return [by_norm[n] for n in difflib.get_close_matches(norm, list(by_norm), n=limit, cutoff=0.6)]


def lookup(name: str) -> CatalogEntry:
    entry = find(name)
    if entry is not None:
        return entry
    matches = close_matches(name)
    hint = (
        f"did you mean {', '.join(matches)}?"
        if matches
        else f"known: {', '.join(e.key for e in CATALOG)}"
    )
    raise InputError(f"unknown GPU '{name.strip()}'; {hint} (or give a size such as 24GiB)")


def smallest_fitting(
    need_bytes: int, *, vendors: tuple[str, ...] | None = None
) -> CatalogEntry | None:
    """The card with the least usable memory (per device) that holds `need_bytes`; ties → faster
    memory."""
    # no card to buy
    fits = [
        e
        for e in CATALOG
        if e.usable_bytes >= need_bytes
        and (e.vendor in vendors if vendors is not None else e.vendor != "mesa")
    ]
    return min(fits, key=lambda e: (e.usable_bytes, -e.bandwidth_bytes_per_s), default=None)
