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
# ggml-cuda/common.cuh GGML_CUDA_CC_OFFSET_AMD
CC_OFFSET_AMD = 0x1000000
_VENDOR_BACKEND = {
    "nvidia": "cuda",
    "amd": "rocm",
    "apple": "metal",
    "mesa": "vulkan",
    "intel": "vulkan",
}


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
    # gddr | hbm | unified | host: the speed model's memory class (fit/speed.py EFFICIENCY)
    memory: str = "gddr"
    # NVIDIA: the compute capability as ggml-cuda numbers it (890 for 8.9); AMD: None (gfx names it)
    nvidia_cc: int | None = None
    gfx: str | None = None  # AMD: the architecture, "gfx1100"

    @property
    def cc(self) -> int | None:
        """DeviceSpec.cc: ggml-cuda's compute capability (AMD: GGML_CUDA_CC_OFFSET_AMD + gfx id)."""
        if self.gfx is not None:
            return CC_OFFSET_AMD + int(self.gfx.removeprefix("gfx"), 16)
        return self.nvidia_cc

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


# The maker's figures: memory per device and its peak bandwidth (GB/s). One line per card:
# (key, the name its driver reports, GiB, GB/s, memory class). Memory class (the speed model's
# efficiency per class, fit/speed.py): gddr (GDDR5/5X/6/6X/7 and desktop DDR), hbm (HBM2/2e/3/3e),
# unified (one LPDDR pool that the CPU shares: Apple Silicon, GB10, Strix Halo), host (a CPU-type
# Vulkan device: it reads the host's RAM).
_NVIDIA: tuple[tuple[str, str, float, float, str], ...] = (
    # GeForce, Pascal
    ("gtx1050", "NVIDIA GeForce GTX 1050", 2, 112, "gddr"),
    ("gtx1050ti", "NVIDIA GeForce GTX 1050 Ti", 4, 112, "gddr"),
    ("gtx1060-3gb", "NVIDIA GeForce GTX 1060 3GB", 3, 192, "gddr"),
    ("gtx1060-6gb", "NVIDIA GeForce GTX 1060 6GB", 6, 192, "gddr"),
    ("gtx1070", "NVIDIA GeForce GTX 1070", 8, 256, "gddr"),
    ("gtx1070ti", "NVIDIA GeForce GTX 1070 Ti", 8, 256, "gddr"),
    ("gtx1080", "NVIDIA GeForce GTX 1080", 8, 320, "gddr"),
    ("gtx1080ti", "NVIDIA GeForce GTX 1080 Ti", 11, 484, "gddr"),
    ("titan-x-pascal", "NVIDIA TITAN X (Pascal)", 12, 480, "gddr"),
    ("titan-xp", "NVIDIA TITAN Xp", 12, 547.7, "gddr"),
    # GeForce, Turing
    ("gtx1650", "NVIDIA GeForce GTX 1650", 4, 128, "gddr"),
    ("gtx1630", "NVIDIA GeForce GTX 1630", 4, 96, "gddr"),
    ("gtx1650-super", "NVIDIA GeForce GTX 1650 SUPER", 4, 192, "gddr"),
    ("gtx1660", "NVIDIA GeForce GTX 1660", 6, 192, "gddr"),
    ("gtx1660-super", "NVIDIA GeForce GTX 1660 SUPER", 6, 336, "gddr"),
    ("gtx1660ti", "NVIDIA GeForce GTX 1660 Ti", 6, 288, "gddr"),
    ("rtx2060", "NVIDIA GeForce RTX 2060", 6, 336, "gddr"),
    ("rtx2060-12gb", "NVIDIA GeForce RTX 2060 12GB", 12, 336, "gddr"),
    ("rtx2060-super", "NVIDIA GeForce RTX 2060 SUPER", 8, 448, "gddr"),
    ("rtx2070", "NVIDIA GeForce RTX 2070", 8, 448, "gddr"),
    ("rtx2070-super", "NVIDIA GeForce RTX 2070 SUPER", 8, 448, "gddr"),
    ("rtx2080", "NVIDIA GeForce RTX 2080", 8, 448, "gddr"),
    ("rtx2080-super", "NVIDIA GeForce RTX 2080 SUPER", 8, 496, "gddr"),
    ("rtx2080ti", "NVIDIA GeForce RTX 2080 Ti", 11, 616, "gddr"),
    ("titan-rtx", "NVIDIA TITAN RTX", 24, 672, "gddr"),
    # Volta
    ("titan-v", "NVIDIA TITAN V", 12, 652.8, "hbm"),
    # GeForce, Ampere
    ("rtx3050", "NVIDIA GeForce RTX 3050", 8, 224, "gddr"),
    ("rtx3050-6gb", "NVIDIA GeForce RTX 3050 6GB", 6, 168, "gddr"),
    ("rtx3060-8gb", "NVIDIA GeForce RTX 3060 8GB", 8, 240, "gddr"),
    ("rtx3060-12gb", "NVIDIA GeForce RTX 3060", 12, 360, "gddr"),
    ("rtx3060ti", "NVIDIA GeForce RTX 3060 Ti", 8, 448, "gddr"),
    ("rtx3070", "NVIDIA GeForce RTX 3070", 8, 448, "gddr"),
    ("rtx3070ti", "NVIDIA GeForce RTX 3070 Ti", 8, 608, "gddr"),
    ("rtx3080-10gb", "NVIDIA GeForce RTX 3080", 10, 760, "gddr"),
    ("rtx3080-12gb", "NVIDIA GeForce RTX 3080 12GB", 12, 912, "gddr"),
    ("rtx3080ti", "NVIDIA GeForce RTX 3080 Ti", 12, 912, "gddr"),
    ("rtx3090", "NVIDIA GeForce RTX 3090", 24, 936, "gddr"),
    ("rtx3090ti", "NVIDIA GeForce RTX 3090 Ti", 24, 1008, "gddr"),
    # GeForce, Ada
    ("rtx4060-8gb", "NVIDIA GeForce RTX 4060", 8, 272, "gddr"),
    ("rtx4060ti-8gb", "NVIDIA GeForce RTX 4060 Ti 8GB", 8, 288, "gddr"),
    ("rtx4060ti-16gb", "NVIDIA GeForce RTX 4060 Ti", 16, 288, "gddr"),
    ("rtx4070", "NVIDIA GeForce RTX 4070", 12, 504, "gddr"),
    ("rtx4070-super", "NVIDIA GeForce RTX 4070 SUPER", 12, 504, "gddr"),
    ("rtx4070ti", "NVIDIA GeForce RTX 4070 Ti", 12, 504, "gddr"),
    ("rtx4070ti-super", "NVIDIA GeForce RTX 4070 Ti SUPER", 16, 672, "gddr"),
    ("rtx4080", "NVIDIA GeForce RTX 4080", 16, 716.8, "gddr"),
    ("rtx4080-super", "NVIDIA GeForce RTX 4080 SUPER", 16, 736, "gddr"),
    ("rtx4090", "NVIDIA GeForce RTX 4090", 24, 1008, "gddr"),
    ("rtx4090d", "NVIDIA GeForce RTX 4090 D", 24, 1008, "gddr"),
    # GeForce, Blackwell
    ("rtx5050", "NVIDIA GeForce RTX 5050", 8, 320, "gddr"),
    ("rtx5060", "NVIDIA GeForce RTX 5060", 8, 448, "gddr"),
    ("rtx5060ti-8gb", "NVIDIA GeForce RTX 5060 Ti 8GB", 8, 448, "gddr"),
    ("rtx5060ti-16gb", "NVIDIA GeForce RTX 5060 Ti", 16, 448, "gddr"),
    ("rtx5070", "NVIDIA GeForce RTX 5070", 12, 672, "gddr"),
    ("rtx5070ti", "NVIDIA GeForce RTX 5070 Ti", 16, 896, "gddr"),
    ("rtx5080", "NVIDIA GeForce RTX 5080", 16, 960, "gddr"),
    ("rtx5090", "NVIDIA GeForce RTX 5090", 32, 1792, "gddr"),
    # GeForce laptop GPUs (the maker's reference memory configuration)
    ("gtx1060-laptop", "NVIDIA GeForce GTX 1060 with Max-Q Design", 6, 192, "gddr"),
    ("gtx1070-laptop", "NVIDIA GeForce GTX 1070 with Max-Q Design", 8, 256, "gddr"),
    ("gtx1080-laptop", "NVIDIA GeForce GTX 1080 with Max-Q Design", 8, 320, "gddr"),
    ("gtx1650-laptop", "NVIDIA GeForce GTX 1650 Laptop GPU", 4, 128, "gddr"),
    ("rtx2060-laptop", "NVIDIA GeForce RTX 2060 Laptop GPU", 6, 336, "gddr"),
    ("rtx2070-laptop", "NVIDIA GeForce RTX 2070 Laptop GPU", 8, 448, "gddr"),
    ("rtx2080-laptop", "NVIDIA GeForce RTX 2080 Laptop GPU", 8, 448, "gddr"),
    ("rtx3050-laptop", "NVIDIA GeForce RTX 3050 Laptop GPU", 4, 192, "gddr"),
    ("rtx3050ti-laptop", "NVIDIA GeForce RTX 3050 Ti Laptop GPU", 4, 192, "gddr"),
    ("rtx3060-laptop", "NVIDIA GeForce RTX 3060 Laptop GPU", 6, 336, "gddr"),
    ("rtx3070-laptop", "NVIDIA GeForce RTX 3070 Laptop GPU", 8, 448, "gddr"),
    ("rtx3070ti-laptop", "NVIDIA GeForce RTX 3070 Ti Laptop GPU", 8, 448, "gddr"),
    ("rtx3080-laptop", "NVIDIA GeForce RTX 3080 Laptop GPU", 16, 448, "gddr"),
    ("rtx3080ti-laptop", "NVIDIA GeForce RTX 3080 Ti Laptop GPU", 16, 512, "gddr"),
    ("rtx4050-laptop", "NVIDIA GeForce RTX 4050 Laptop GPU", 6, 192, "gddr"),
    ("rtx4060-laptop", "NVIDIA GeForce RTX 4060 Laptop GPU", 8, 256, "gddr"),
    ("rtx4070-laptop", "NVIDIA GeForce RTX 4070 Laptop GPU", 8, 256, "gddr"),
    ("rtx4080-laptop", "NVIDIA GeForce RTX 4080 Laptop GPU", 12, 432, "gddr"),
    ("rtx4090-laptop", "NVIDIA GeForce RTX 4090 Laptop GPU", 16, 576, "gddr"),
    ("rtx5060-laptop", "NVIDIA GeForce RTX 5060 Laptop GPU", 8, 384, "gddr"),
    ("rtx5070-laptop", "NVIDIA GeForce RTX 5070 Laptop GPU", 8, 384, "gddr"),
    ("rtx5070ti-laptop", "NVIDIA GeForce RTX 5070 Ti Laptop GPU", 12, 672, "gddr"),
    ("rtx5080-laptop", "NVIDIA GeForce RTX 5080 Laptop GPU", 16, 896, "gddr"),
    ("rtx5090-laptop", "NVIDIA GeForce RTX 5090 Laptop GPU", 24, 896, "gddr"),
    # workstation
    ("quadro-p4000", "Quadro P4000", 8, 243, "gddr"),
    ("quadro-p5000", "Quadro P5000", 16, 288, "gddr"),
    ("quadro-p6000", "Quadro P6000", 24, 432, "gddr"),
    ("quadro-gp100", "Quadro GP100", 16, 717, "hbm"),
    ("quadro-gv100", "Quadro GV100", 32, 870, "hbm"),
    ("quadro-rtx4000", "Quadro RTX 4000", 8, 416, "gddr"),
    ("quadro-rtx5000", "Quadro RTX 5000", 16, 448, "gddr"),
    ("quadro-rtx6000", "Quadro RTX 6000", 24, 672, "gddr"),
    ("quadro-rtx8000", "Quadro RTX 8000", 48, 672, "gddr"),
    ("rtx-a2000", "NVIDIA RTX A2000", 6, 288, "gddr"),
    ("rtx-a2000-12gb", "NVIDIA RTX A2000 12GB", 12, 288, "gddr"),
    ("rtx-a400", "NVIDIA RTX A400", 4, 96, "gddr"),
    ("rtx-a1000", "NVIDIA RTX A1000", 8, 192, "gddr"),
    ("rtx-a4000", "NVIDIA RTX A4000", 16, 448, "gddr"),
    ("rtx-a4500", "NVIDIA RTX A4500", 20, 640, "gddr"),
    ("rtx-a5000", "NVIDIA RTX A5000", 24, 768, "gddr"),
    ("rtx-a5500", "NVIDIA RTX A5500", 24, 768, "gddr"),
    ("rtx-a6000", "NVIDIA RTX A6000", 48, 768, "gddr"),
    ("rtx2000-ada", "NVIDIA RTX 2000 Ada Generation", 16, 224, "gddr"),
    ("rtx4000-sff-ada", "NVIDIA RTX 4000 SFF Ada Generation", 20, 280, "gddr"),
    ("rtx4000-ada", "NVIDIA RTX 4000 Ada Generation", 20, 360, "gddr"),
    ("rtx4500-ada", "NVIDIA RTX 4500 Ada Generation", 24, 432, "gddr"),
    ("rtx5000-ada", "NVIDIA RTX 5000 Ada Generation", 32, 576, "gddr"),
    ("rtx6000-ada", "NVIDIA RTX 6000 Ada Generation", 48, 960, "gddr"),
    ("rtx-pro-4000", "NVIDIA RTX PRO 4000 Blackwell", 24, 672, "gddr"),
    ("rtx-pro-5000", "NVIDIA RTX PRO 5000 Blackwell", 48, 1344, "gddr"),
    ("rtx-pro-6000", "NVIDIA RTX PRO 6000 Blackwell Workstation Edition", 96, 1792, "gddr"),
    # data centre
    ("p4", "Tesla P4", 8, 192, "gddr"),
    ("p40", "Tesla P40", 24, 347, "gddr"),
    ("p100-16gb", "Tesla P100-PCIE-16GB", 16, 732, "hbm"),
    ("p100-sxm2", "Tesla P100-SXM2-16GB", 16, 732, "hbm"),
    ("v100-16gb", "Tesla V100-SXM2-16GB", 16, 900, "hbm"),
    ("v100-32gb", "Tesla V100-SXM2-32GB", 32, 900, "hbm"),
    ("v100-pcie-16gb", "Tesla V100-PCIE-16GB", 16, 900, "hbm"),
    ("v100-pcie-32gb", "Tesla V100-PCIE-32GB", 32, 900, "hbm"),
    ("v100s", "Tesla V100S-PCIE-32GB", 32, 1134, "hbm"),
    ("t4", "Tesla T4", 16, 320, "gddr"),
    ("a2", "NVIDIA A2", 16, 200, "gddr"),
    ("a10", "NVIDIA A10", 24, 600, "gddr"),
    ("a30", "NVIDIA A30", 24, 933, "hbm"),
    ("a40", "NVIDIA A40", 48, 696, "gddr"),
    ("a100-40gb", "NVIDIA A100-SXM4-40GB", 40, 1555, "hbm"),
    ("a100-40gb-pcie", "NVIDIA A100-PCIE-40GB", 40, 1555, "hbm"),
    ("a100-80gb", "NVIDIA A100-SXM4-80GB", 80, 2039, "hbm"),
    ("a100-80gb-pcie", "NVIDIA A100 80GB PCIe", 80, 1935, "hbm"),
    ("l4", "NVIDIA L4", 24, 300, "gddr"),
    ("l40", "NVIDIA L40", 48, 864, "gddr"),
    ("l40s", "NVIDIA L40S", 48, 864, "gddr"),
    ("h100", "NVIDIA H100 80GB HBM3", 80, 3350, "hbm"),  # SXM
    ("h100-pcie", "NVIDIA H100 PCIe", 80, 2000, "hbm"),
    ("h100-nvl", "NVIDIA H100 NVL", 94, 3900, "hbm"),
    ("h200", "NVIDIA H200", 141, 4800, "hbm"),
    ("h200-nvl", "NVIDIA H200 NVL", 141, 4800, "hbm"),
    ("gh200", "NVIDIA GH200 480GB", 96, 4000, "hbm"),
    ("b200", "NVIDIA B200", 180, 8000, "hbm"),
    ("gb10", "NVIDIA GB10", 128, 273, "unified"),  # DGX Spark: LPDDR5X shared with the CPU
    ("jetson-agx-orin-64gb", "Orin", 64, 204.8, "unified"),  # LPDDR5 shared with the CPU
)
_AMD: tuple[tuple[str, str, float, float, str], ...] = (
    ("rx6400", "AMD Radeon RX 6400", 4, 128, "gddr"),
    ("rx6500xt", "AMD Radeon RX 6500 XT", 4, 144, "gddr"),
    ("rx6600", "AMD Radeon RX 6600", 8, 224, "gddr"),
    ("rx6600xt", "AMD Radeon RX 6600 XT", 8, 256, "gddr"),
    ("rx6650xt", "AMD Radeon RX 6650 XT", 8, 280, "gddr"),
    ("rx6700", "AMD Radeon RX 6700", 10, 320, "gddr"),
    ("rx6700xt", "AMD Radeon RX 6700 XT", 12, 384, "gddr"),
    ("rx6750xt", "AMD Radeon RX 6750 XT", 12, 432, "gddr"),
    ("rx6800", "AMD Radeon RX 6800", 16, 512, "gddr"),
    ("rx6800xt", "AMD Radeon RX 6800 XT", 16, 512, "gddr"),
    ("rx6900xt", "AMD Radeon RX 6900 XT", 16, 512, "gddr"),
    ("rx6950xt", "AMD Radeon RX 6950 XT", 16, 576, "gddr"),
    ("rx7600", "AMD Radeon RX 7600", 8, 288, "gddr"),
    ("rx7600xt", "AMD Radeon RX 7600 XT", 16, 288, "gddr"),
    ("rx7650gre", "AMD Radeon RX 7650 GRE", 8, 288, "gddr"),
    ("rx7700xt", "AMD Radeon RX 7700 XT", 12, 432, "gddr"),
    ("rx7800xt", "AMD Radeon RX 7800 XT", 16, 624, "gddr"),
    ("rx7900gre", "AMD Radeon RX 7900 GRE", 16, 576, "gddr"),
    ("rx7900xt", "AMD Radeon RX 7900 XT", 20, 800, "gddr"),
    ("rx7900xtx", "AMD Radeon RX 7900 XTX", 24, 960, "gddr"),
    ("rx9060xt-8gb", "AMD Radeon RX 9060 XT 8GB", 8, 320, "gddr"),
    ("rx9060xt-16gb", "AMD Radeon RX 9060 XT", 16, 320, "gddr"),
    ("rx9070", "AMD Radeon RX 9070", 16, 640, "gddr"),
    ("rx9070xt", "AMD Radeon RX 9070 XT", 16, 640, "gddr"),
    ("radeon-ai-pro-r9700", "AMD Radeon AI PRO R9700", 32, 640, "gddr"),
    ("radeon-pro-w6800", "AMD Radeon PRO W6800", 32, 512, "gddr"),
    ("radeon-pro-w7700", "AMD Radeon PRO W7700", 16, 576, "gddr"),
    ("radeon-pro-w7800", "AMD Radeon PRO W7800", 32, 576, "gddr"),
    ("radeon-pro-w7900", "AMD Radeon PRO W7900", 48, 864, "gddr"),
    # Strix Halo (Radeon 8060S): 256-bit LPDDR5X-8000 shared with the CPU; 96 GiB is the most the
    # firmware dedicates to the GPU
    ("ryzen-ai-max-395", "AMD Radeon 8060S Graphics", 96, 256, "unified"),
    ("mi100", "AMD Instinct MI100", 32, 1228.8, "hbm"),
    ("mi210", "AMD Instinct MI210", 64, 1638.4, "hbm"),
    ("mi300x", "AMD Instinct MI300X", 192, 5300, "hbm"),
    ("mi300a", "AMD Instinct MI300A", 128, 5300, "unified"),  # HBM3 shared with its CPU cores
    ("mi325x", "AMD Instinct MI325X", 256, 6000, "hbm"),
    ("mi355x", "AMD Instinct MI355X", 288, 8000, "hbm"),
)
_INTEL: tuple[tuple[str, str, float, float, str], ...] = (
    ("arc-a310", "Intel(R) Arc(TM) A310 Graphics", 4, 124, "gddr"),
    ("arc-a380", "Intel(R) Arc(TM) A380 Graphics", 6, 186, "gddr"),
    ("arc-a370m", "Intel(R) Arc(TM) A370M Graphics", 4, 112, "gddr"),
    ("arc-a550m", "Intel(R) Arc(TM) A550M Graphics", 8, 224, "gddr"),
    ("arc-a730m", "Intel(R) Arc(TM) A730M Graphics", 12, 336, "gddr"),
    ("arc-a770m", "Intel(R) Arc(TM) A770M Graphics", 16, 512, "gddr"),
    ("arc-pro-a40", "Intel(R) Arc(TM) Pro A40 Graphics", 6, 192, "gddr"),
    ("arc-pro-a60", "Intel(R) Arc(TM) Pro A60 Graphics", 12, 384, "gddr"),
    ("arc-a580", "Intel(R) Arc(TM) A580 Graphics", 8, 512, "gddr"),
    ("arc-a750", "Intel(R) Arc(TM) A750 Graphics", 8, 512, "gddr"),
    ("arc-a770-8gb", "Intel(R) Arc(TM) A770 Graphics 8GB", 8, 512, "gddr"),
    ("arc-a770", "Intel(R) Arc(TM) A770 Graphics", 16, 560, "gddr"),
    ("arc-b570", "Intel(R) Arc(TM) B570 Graphics", 10, 380, "gddr"),
    ("arc-b580", "Intel(R) Arc(TM) B580 Graphics", 12, 456, "gddr"),
    ("arc-pro-b50", "Intel(R) Arc(TM) Pro B50 Graphics", 16, 224, "gddr"),
    ("arc-pro-b60", "Intel(R) Arc(TM) Pro B60 Graphics", 24, 456, "gddr"),
)
# Apple Silicon: (chip, GB/s, memory sizes in GB); a Mac is named by chip and memory (m3-max-64gb).
# M3 Max and M4 Max come in two bandwidths: the binned chip (fewer GPU cores) with its sizes first.
_APPLE: tuple[tuple[str, str, float, tuple[int, ...]], ...] = (
    ("m1", "Apple M1", 68.25, (8, 16)),
    ("m1-pro", "Apple M1 Pro", 200, (16, 32)),
    ("m1-max", "Apple M1 Max", 400, (32, 64)),
    ("m1-ultra", "Apple M1 Ultra", 800, (64, 128)),
    ("m2", "Apple M2", 100, (8, 16, 24)),
    ("m2-pro", "Apple M2 Pro", 200, (16, 32)),
    ("m2-max", "Apple M2 Max", 400, (32, 64, 96)),
    ("m2-ultra", "Apple M2 Ultra", 800, (64, 128, 192)),
    ("m3", "Apple M3", 100, (8, 16, 24)),
    ("m3-pro", "Apple M3 Pro", 150, (18, 36)),
    ("m3-max", "Apple M3 Max", 300, (36, 96)),  # 30-core GPU
    ("m3-max", "Apple M3 Max", 400, (48, 64, 128)),  # 40-core GPU
    ("m3-ultra", "Apple M3 Ultra", 819, (96, 256, 512)),
    ("m4", "Apple M4", 120, (16, 24, 32)),
    ("m4-pro", "Apple M4 Pro", 273, (24, 48, 64)),
    ("m4-max", "Apple M4 Max", 410, (36,)),  # 32-core GPU
    ("m4-max", "Apple M4 Max", 546, (48, 64, 128)),  # 40-core GPU
    ("m5", "Apple M5", 153, (16, 24, 32)),
    # the 40-core M5 Max at 128 GB: the size its public llama-bench results name (docs/speed.md)
    ("m5-max", "Apple M5 Max", 614, (128,)),
)
_VENDOR_ROWS = (("nvidia", _NVIDIA), ("amd", _AMD), ("intel", _INTEL))

# The makers' compute capability of each NVIDIA card (CUDA GPUs list: 6.1 → 610, ggml-cuda's
# numbering, DeviceSpec.cc), which picks llama.cpp's flash-attention kernel
_NVIDIA_CC: dict[int, tuple[str, ...]] = {
    600: ("quadro-gp100", "p100-16gb", "p100-sxm2"),
    610: (
        "gtx1050",
        "gtx1050ti",
        "gtx1060-3gb",
        "gtx1060-6gb",
        "gtx1070",
        "gtx1070ti",
        "gtx1080",
        "gtx1080ti",
        "titan-x-pascal",
        "titan-xp",
        "gtx1060-laptop",
        "gtx1070-laptop",
        "gtx1080-laptop",
        "quadro-p4000",
        "quadro-p5000",
        "quadro-p6000",
        "p4",
        "p40",
    ),
    700: (
        "titan-v",
        "quadro-gv100",
        "v100-16gb",
        "v100-32gb",
        "v100-pcie-16gb",
        "v100-pcie-32gb",
        "v100s",
    ),
    750: (
        "gtx1650",
        "gtx1630",
        "gtx1650-super",
        "gtx1660",
        "gtx1660-super",
        "gtx1660ti",
        "rtx2060",
        "rtx2060-12gb",
        "rtx2060-super",
        "rtx2070",
        "rtx2070-super",
        "rtx2080",
        "rtx2080-super",
        "rtx2080ti",
        "titan-rtx",
        "gtx1650-laptop",
        "rtx2060-laptop",
        "rtx2070-laptop",
        "rtx2080-laptop",
        "quadro-rtx4000",
        "quadro-rtx5000",
        "quadro-rtx6000",
        "quadro-rtx8000",
        "t4",
    ),
    800: ("a30", "a100-40gb", "a100-40gb-pcie", "a100-80gb", "a100-80gb-pcie"),
    860: (
        "rtx3050",
        "rtx3050-6gb",
        "rtx3060-8gb",
        "rtx3060-12gb",
        "rtx3060ti",
        "rtx3070",
        "rtx3070ti",
        "rtx3080-10gb",
        "rtx3080-12gb",
        "rtx3080ti",
        "rtx3090",
        "rtx3090ti",
        "rtx3050-laptop",
        "rtx3050ti-laptop",
        "rtx3060-laptop",
        "rtx3070-laptop",
        "rtx3070ti-laptop",
        "rtx3080-laptop",
        "rtx3080ti-laptop",
        "rtx-a2000",
        "rtx-a2000-12gb",
        "rtx-a400",
        "rtx-a1000",
        "rtx-a4000",
        "rtx-a4500",
        "rtx-a5000",
        "rtx-a5500",
        "rtx-a6000",
        "a2",
        "a10",
        "a40",
    ),
    870: ("jetson-agx-orin-64gb",),
    890: (
        "rtx4060-8gb",
        "rtx4060ti-8gb",
        "rtx4060ti-16gb",
        "rtx4070",
        "rtx4070-super",
        "rtx4070ti",
        "rtx4070ti-super",
        "rtx4080",
        "rtx4080-super",
        "rtx4090",
        "rtx4090d",
        "rtx4050-laptop",
        "rtx4060-laptop",
        "rtx4070-laptop",
        "rtx4080-laptop",
        "rtx4090-laptop",
        "rtx2000-ada",
        "rtx4000-sff-ada",
        "rtx4000-ada",
        "rtx4500-ada",
        "rtx5000-ada",
        "rtx6000-ada",
        "l4",
        "l40",
        "l40s",
    ),
    900: ("h100", "h100-pcie", "h100-nvl", "h200", "h200-nvl", "gh200"),
    1000: ("b200",),
    1200: (
        "rtx5050",
        "rtx5060",
        "rtx5060ti-8gb",
        "rtx5060ti-16gb",
        "rtx5070",
        "rtx5070ti",
        "rtx5080",
        "rtx5090",
        "rtx5060-laptop",
        "rtx5070-laptop",
        "rtx5070ti-laptop",
        "rtx5080-laptop",
        "rtx5090-laptop",
        "rtx-pro-4000",
        "rtx-pro-5000",
        "rtx-pro-6000",
    ),
    1210: ("gb10",),
}
# The GPU architecture (LLVM target) of each AMD card, as ROCm names it (ggml-cuda's compute
# capability: GGML_CUDA_CC_OFFSET_AMD + the gfx id)
_AMD_GFX: dict[str, tuple[str, ...]] = {
    "gfx1034": ("rx6400", "rx6500xt"),
    "gfx1032": ("rx6600", "rx6600xt", "rx6650xt"),
    "gfx1031": ("rx6700", "rx6700xt", "rx6750xt"),
    "gfx1030": ("rx6800", "rx6800xt", "rx6900xt", "rx6950xt", "radeon-pro-w6800"),
    "gfx1102": ("rx7600", "rx7600xt", "rx7650gre"),
    "gfx1101": ("rx7700xt", "rx7800xt", "radeon-pro-w7700"),
    "gfx1100": ("rx7900gre", "rx7900xt", "rx7900xtx", "radeon-pro-w7800", "radeon-pro-w7900"),
    "gfx1200": ("rx9060xt-8gb", "rx9060xt-16gb"),
    "gfx1201": ("rx9070", "rx9070xt", "radeon-ai-pro-r9700"),
    "gfx1151": ("ryzen-ai-max-395",),
    "gfx908": ("mi100",),
    "gfx90a": ("mi210", "mi250"),
    "gfx942": ("mi300x", "mi300a", "mi325x"),
    "gfx950": ("mi355x",),
}


def _rows() -> tuple[CatalogEntry, ...]:
    cc = {key: c for c, keys in _NVIDIA_CC.items() for key in keys}
    gfx = {key: g for g, keys in _AMD_GFX.items() for key in keys}
    out = [
        CatalogEntry(
            key,
            name,
            vendor,
            int(gib * GIB),
            int(gb_s * _GB_S),
            memory=memory,
            nvidia_cc=cc.get(key),
            gfx=gfx.get(key),
        )
        for vendor, rows in _VENDOR_ROWS
        for key, name, gib, gb_s, memory in rows
    ]
    # MI250 / MI250X: two GCDs of 64 GiB each, each its own device to ROCm
    out.append(
        CatalogEntry(
            "mi250",
            "AMD Instinct MI250",
            "amd",
            64 * GIB,
            int(1638.4 * _GB_S),
            2,
            memory="hbm",
            gfx=gfx["mi250"],
        )
    )
    out += [
        CatalogEntry(f"{chip}-{gb}gb", name, "apple", gb * GIB, int(gb_s * _GB_S), memory="unified")
        for chip, name, gb_s, sizes in _APPLE
        for gb in sizes
    ]
    # Mesa's software Vulkan device (llama.cpp: GGML_VK_VISIBLE_DEVICES=0): a 2 GiB heap and
    # maxStorageBufferRange 128 MiB (vulkaninfo, Mesa 22.3 / LLVM 15); it runs on the CPU and reads
    # the host's RAM (fit/speed.py uses the host probe's bandwidth); minStorageBufferOffsetAlignment
    # 16, minMemoryMapAlignment 64, maxMemoryAllocationSize 2 GiB
    out.append(
        CatalogEntry(
            "lavapipe",
            "llvmpipe",
            "mesa",
            2 * GIB,
            20 * _GB_S,
            1,
            128 << 20,
            (16, 64, 2 * GIB),
            "host",
        )
    )
    return tuple(out)


CATALOG: tuple[CatalogEntry, ...] = _rows()

# Unambiguous other spellings → canonical key.
_ALIASES = {
    "rtx3080": "rtx3080-10gb",
    "rtx4060": "rtx4060-8gb",
    "rtx4060ti": "rtx4060ti-16gb",
    "rtx3060": "rtx3060-12gb",
    "rtx5060ti": "rtx5060ti-16gb",
    "rx9060xt": "rx9060xt-16gb",
    "gtx1060": "gtx1060-6gb",
    "h100-sxm": "h100",
    "h100-80gb": "h100",
    "h100-sxm5": "h100",
    "a100-sxm4-80gb": "a100-80gb",
    "a100-sxm4-40gb": "a100-40gb",
    "h200-sxm": "h200",
    "mi250x": "mi250",
    "a6000": "rtx-a6000",
    "a5000": "rtx-a5000",
    "a4000": "rtx-a4000",
    "a4500": "rtx-a4500",
    "a2000": "rtx-a2000",
    "r9700": "radeon-ai-pro-r9700",
    "strix-halo": "ryzen-ai-max-395",
    "radeon-8060s": "ryzen-ai-max-395",
    "dgx-spark": "gb10",
    "arc-a770-16gb": "arc-a770",
    "rtx-pro-6000-blackwell": "rtx-pro-6000",
}


def normalize(name: str) -> str:
    """Case-insensitive, `-`/`_`/space-insensitive form used for lookup."""
    return re.sub(r"[-_\s]+", "", name.strip().lower())


# words a driver or a user puts around a card's model name: "NVIDIA GeForce RTX 3080 Ti",
# "Intel(R) Arc(TM) B580 Graphics", "AMD Radeon RX 7900 XTX (RADV NAVI31)"
_DECOR = re.compile(r"\(r\)|\(tm\)|\b(nvidia|geforce|amd|radeon|apple|intel|graphics|tesla)\b")
_PREFIXES = ("rtx", "gtx", "rx", "arc")


def _bare(name: str) -> str:
    """`name` without vendor words and a trailing driver detail in parentheses, normalized."""
    text = re.sub(r"\s*\([^()]*\)\s*$", "", name.strip().lower()) if "(" in name else name.lower()
    return normalize(_DECOR.sub(" ", text))


def _keys() -> dict[str, CatalogEntry]:
    out: dict[str, CatalogEntry] = {}
    for e in CATALOG:
        out[normalize(e.key)] = e
        out.setdefault(_bare(e.key), e)
    for alias, key in _ALIASES.items():
        out.setdefault(normalize(alias), out[normalize(key)])
    return out


_BY_NORM: dict[str, CatalogEntry] = _keys()
_BY_NAME: dict[str, list[CatalogEntry]] = {}
for _entry in CATALOG:
    _BY_NAME.setdefault(_bare(_entry.name), []).append(_entry)


def find(name: str) -> CatalogEntry | None:
    """The entry a --gpu name means: its key in any case and spacing (`RTX 3080 Ti`, `rtx_3080ti`),
    without the vendor's words (`GeForce RTX 3080 Ti`) or the family prefix (`3080ti`)."""
    norm, bare = normalize(name), _bare(name)
    for form in (norm, bare, *(p + bare for p in _PREFIXES)):
        if form in _BY_NORM:
            return _BY_NORM[form]
    return None


def match_device(name: str, memory_bytes: int | None = None) -> CatalogEntry | None:
    """The catalog entry of a detected device, from the name its driver reports ("NVIDIA GeForce
    RTX 4090", "AMD Radeon RX 7900 XTX (RADV NAVI31)", "llvmpipe (LLVM 15.0.7, 256 bits)"): the
    entry of that name, or where several share it (a Mac at each memory size) the one whose usable
    memory is nearest `memory_bytes`; else the entry the name spells (find). None: not in the
    catalog."""
    if name.strip().lower().startswith("llvmpipe"):
        return _BY_NORM["lavapipe"]
    same = _BY_NAME.get(_bare(name), [])
    if len(same) > 1 and memory_bytes:
        return min(same, key=lambda e: abs(e.usable_bytes - memory_bytes))
    if len(same) > 1 and len({e.bandwidth_bytes_per_s for e in same}) > 1:
        return None  # the chip alone does not say which bandwidth
    return same[0] if same else find(name)


def close_matches(name: str, limit: int = 5) -> list[str]:
    """Catalog keys that look like `name`: those containing it, else similar spellings (closest
    first)."""
    bare = _bare(name) or normalize(name)
    by_norm = {normalize(e.key): e.key for e in CATALOG}
    containing = [key for n, key in by_norm.items() if bare and bare in n]
    # those that start with it first: "a100" means an A100 before an RTX A1000
    containing.sort(key=lambda key: not normalize(key).startswith(bare))
    if containing:
        return containing[:limit]
    import difflib  # only for a name the catalog lacks

    for cutoff in (0.6, 0.4):
        near = difflib.get_close_matches(bare, list(by_norm), n=limit, cutoff=cutoff)
        if near:
            return [by_norm[n] for n in near]
    return []


def lookup(name: str) -> CatalogEntry:
    entry = find(name)
    if entry is not None:
        return entry
    matches = close_matches(name)
    hint = (
        f"did you mean {', '.join(matches)}?"
        if matches
        else "known: e.g. rtx4090, rx7900xtx, arc-b580, h100, m3-max-64gb; --gpu help lists all"
    )
    raise InputError(f"unknown GPU '{name.strip()}'; {hint} (or give a size such as 24GiB)")


def host_ram(name: str) -> int | None:
    """A Mac named from the catalog is the whole machine: its unified memory is the host's RAM
    too. The RAM of the Apple entry `name` spells; None for any other name."""
    entry = find(name)
    return entry.vram_bytes if entry is not None and entry.unified else None


def smallest_fitting(
    need_bytes: int, *, vendors: tuple[str, ...] | None = None
) -> CatalogEntry | None:
    """The card with the least usable memory (per device) that holds `need_bytes`; ties → faster
    memory. Without `vendors`: a discrete desktop or data-centre card (no Mac, no laptop GPU, no
    shared-memory APU: a whole machine is not a card to add)."""
    fits = [
        e
        for e in CATALOG
        if e.usable_bytes >= need_bytes
        and (
            e.vendor in vendors
            if vendors is not None
            else e.vendor in ("nvidia", "amd", "intel")
            and e.memory in ("gddr", "hbm")
            and not e.key.endswith("-laptop")
        )
    ]
    return min(fits, key=lambda e: (e.usable_bytes, -e.bandwidth_bytes_per_s), default=None)
